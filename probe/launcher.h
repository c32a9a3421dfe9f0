/*
 * launcher.h — starting the program under `ampprobe run` and passing signals on to it: PATH
 * lookup, fork/exec with exec failures reported back through a close-on-exec pipe, signal
 * forwarding, the shell's exit-status convention, and the environment of CUDA/NVTX capture.
 */
#ifndef AMPPROBE_LAUNCHER_H
#define AMPPROBE_LAUNCHER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

// Looks prog up as execvp would (PATH unless it contains a '/'). 0 when an executable regular
// file was found, else ENOENT (nothing there), EISDIR (a directory) or EACCES (found, but not
// executable).
int amp_launcher_find(const char *prog);

// Starts argv[0] with argv in the environment of this process (set what the child needs with
// setenv first). 0 and *pid on success; otherwise the errno of the failed fork or exec, and no
// child is left behind.
int amp_launcher_spawn(char *const *argv, pid_t *pid);
// The same, with the program's stdout and stderr sent to out_fd and its stdin from /dev/null
// (`ampprobe run --tui`: the terminal belongs to the TUI). out_fd < 0: as amp_launcher_spawn.
int amp_launcher_spawn_io(char *const *argv, int out_fd, pid_t *pid);
// Raises this process's soft limit on open files to the hard one (the collector holds a spool
// file open per recording process: hundreds of workers); a child spawned afterwards gets the
// limit this process was started with.
void amp_launcher_raise_file_limit(void);

// From now on SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 no longer end this process;
// they are queued for amp_launcher_forward. A signal the terminal sent to the whole foreground
// process group is not queued: the child (in that group) got it already. A child spawned afterwards
// starts with the dispositions this process had before.
void amp_launcher_catch_signals(void);
// Sends the queued signals to pid, and to those of the n_below processes (the run's recording
// processes) that descend from this one: a shell script between ampprobe and the trainer does
// not pass a SIGTERM on while it waits. Returns the number sent.
int amp_launcher_forward(pid_t pid, const int32_t *below, int n_below);
// Whether a signal caught is waiting for amp_launcher_forward.
bool amp_launcher_signals_pending(void);
// How many of the signals that end a run (not SIGUSR1/2) were queued so far (sent to ampprobe
// alone, not by the terminal): the TUI of `run --tui` closes when one comes.
int amp_launcher_signals_received(void);

// Makes this process the reaper of the processes its descendants leave behind
// (PR_SET_CHILD_SUBREAPER): one the program started and left running when it exited becomes
// this process's child, which amp_launcher_orphans then finds. Call before spawning.
void amp_launcher_adopt_orphans(void);
// Reaps the adopted processes that have ended, and writes those still running ("NAME (pid PID)",
// comma-separated, as many as fit in n bytes) into buf; returns how many run. Call once the
// program itself has been reaped.
int amp_launcher_orphans(char *buf, size_t n);

// The shell's exit status for a wait status: the exit code, or 128 + signal number.
int amp_launcher_exit_code(int wstatus);

// CUDA and NVTX capture: points CUDA_INJECTION64_PATH (trace has "cuda") and
// NVTX_INJECTION64_PATH (trace has "nvtx") at libampprobe_inject.so next to the ampprobe binary,
// for the child to inherit. Without that library nothing is set; asked (--trace was given) says
// so on stderr.
void amp_launcher_capture(const char *trace, bool asked);

#endif
