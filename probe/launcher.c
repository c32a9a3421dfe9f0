/*
 * launcher.c — process mechanics of `ampprobe run` (launcher.h).
 *
 * The child stays in ampprobe's process group, so terminal job control (Ctrl-Z, fg) acts on
 * both as one job and Ctrl-C reaches the program directly. Signals sent to ampprobe alone
 * (kill PID, a batch system's SIGTERM) are passed on to the child and to the recording processes
 * below it (a training script started by a shell script, which a shell would not pass them on
 * to), and ampprobe keeps collecting until the child is gone.
 */
#define _GNU_SOURCE
#include "launcher.h"

#include "amp-impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// PATH lookup

static int check_file(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return ENOENT;
    if (S_ISDIR(sb.st_mode)) return EISDIR;
    if (!S_ISREG(sb.st_mode) || access(path, X_OK) != 0) return EACCES;
    return 0;
}

int amp_launcher_find(const char *prog) {
    if (!*prog) return ENOENT;
    if (strchr(prog, '/')) return check_file(prog);
    const char *path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin";
    int result = ENOENT;
    size_t plen = strlen(prog);
    for (const char *p = path;; p++) {
        const char *end = strchrnul(p, ':');
        size_t dlen = (size_t)(end - p);
        char *cand = malloc(dlen + plen + 3);
        if (!cand) return ENOMEM;
        if (dlen == 0)
            snprintf(cand, plen + 3, "./%s", prog); // an empty PATH entry is the current directory
        else
            snprintf(cand, dlen + plen + 2, "%.*s/%s", (int)dlen, p, prog);
        int r = check_file(cand);
        free(cand);
        if (r == 0) return 0;
        if (r != ENOENT && result == ENOENT) result = r;
        if (!*end) break;
        p = end;
    }
    return result;
}

// ---------------------------------------------------------------------------------------------
// Signal state

// The first N_STOP ask the run to end; SIGUSR1 and SIGUSR2 (a batch system's warning that the job's
// time is nearly up, a checkpoint request) are only passed on.
#define N_CAUGHT 6
#define N_STOP 4
static const int caught[N_CAUGHT] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
// Counts written by the handler only, and by amp_launcher_forward only: no read-modify-write
// races between them.
static volatile sig_atomic_t received[N_CAUGHT];
static sig_atomic_t forwarded[N_CAUGHT];
// The dispositions ampprobe was started with, restored in the child.
static struct sigaction saved[N_CAUGHT], saved_pipe;
static bool dispositions_saved;

// ---------------------------------------------------------------------------------------------
// Spawning

int amp_launcher_spawn(char *const *argv, pid_t *pid) {
    return amp_launcher_spawn_io(argv, -1, pid);
}

// In the child: stdout and stderr to out_fd, stdin from /dev/null. false when that failed.
static bool redirect_io(int out_fd) {
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC); // PROG keeps only the dup2 copy
    return null_fd >= 0 && dup2(null_fd, STDIN_FILENO) >= 0 && dup2(out_fd, STDOUT_FILENO) >= 0 &&
           dup2(out_fd, STDERR_FILENO) >= 0;
}

// The soft limit on open files ampprobe was started with (amp_launcher_raise_file_limit).
static struct rlimit saved_files;
static bool files_raised;

void amp_launcher_raise_file_limit(void) {
    struct rlimit r;
    if (files_raised || getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
    saved_files = r;
    r.rlim_cur = r.rlim_max;
    files_raised = setrlimit(RLIMIT_NOFILE, &r) == 0;
}

int amp_launcher_spawn_io(char *const *argv, int out_fd, pid_t *pid) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return errno;
    pid_t child = fork();
    if (child < 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    if (child == 0) {
        // The program gets the signal dispositions ampprobe was started with, not its own.
        for (int i = 0; dispositions_saved && i < N_CAUGHT; i++)
            sigaction(caught[i], &saved[i], NULL);
        if (dispositions_saved) sigaction(SIGPIPE, &saved_pipe, NULL);
        if (files_raised) setrlimit(RLIMIT_NOFILE, &saved_files); // and its own file limit
        close(fds[0]);
        if (out_fd < 0 || redirect_io(out_fd)) execvp(argv[0], argv);
        int err = errno;
        while (write(fds[1], &err, sizeof err) < 0 && errno == EINTR) {
        }
        _exit(127);
    }
    close(fds[1]);
    int err = 0;
    ssize_t n;
    while ((n = read(fds[0], &err, sizeof err)) < 0 && errno == EINTR) {
    }
    close(fds[0]);
    if (n == (ssize_t)sizeof err) { // exec failed: reap the child, which has exited
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
        }
        return err;
    }
    *pid = child;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Signals

static void on_signal(int sig, siginfo_t *info, void *uctx) {
    (void)uctx;
    if (info->si_code == SI_KERNEL) return; // from the terminal, to the whole process group
    for (int i = 0; i < N_CAUGHT; i++)
        if (caught[i] == sig) received[i]++;
}

void amp_launcher_catch_signals(void) {
    struct sigaction sa = {.sa_sigaction = on_signal, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_CAUGHT; i++)
        sigaction(caught[i], &sa, &saved[i]);
    struct sigaction ign = {.sa_handler = SIG_IGN}; // a closed stderr must not kill the collector
    sigaction(SIGPIPE, &ign, &saved_pipe);
    dispositions_saved = true;
}

// pid's parent and name (comm, up to 15 bytes) from /proc; false when it is gone.
static bool proc_parent(pid_t pid, pid_t *ppid, char name[16]) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    const char *open_paren = strchr(buf, '('), *after_comm = strrchr(buf, ')'); // a name may
    int parent; // hold spaces and parentheses
    if (!open_paren || !after_comm || sscanf(after_comm + 1, " %*c %d", &parent) != 1) return false;
    if (name) snprintf(name, 16, "%.*s", (int)(after_comm - open_paren - 1), open_paren + 1);
    *ppid = parent;
    return true;
}

// Whether pid is a descendant of ancestor (its parent, or its parent's, ... from /proc).
static bool descends_from(pid_t pid, pid_t ancestor) {
    for (int depth = 0; depth < 64 && pid > 1; depth++) {
        pid_t ppid;
        if (!proc_parent(pid, &ppid, NULL)) return false;
        if (ppid == ancestor) return true;
        pid = ppid;
    }
    return false;
}

void amp_launcher_adopt_orphans(void) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
}

int amp_launcher_orphans(char *buf, size_t n) {
    while (waitpid(-1, NULL, WNOHANG) > 0) { // those that ended: no zombies left
    }
    buf[0] = 0;
    int count = 0;
    size_t used = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        char *end;
        const long pid = strtol(e->d_name, &end, 10);
        pid_t ppid;
        char name[16];
        if (*end || pid <= 0 || !proc_parent((pid_t)pid, &ppid, name) || ppid != getpid()) continue;
        count++;
        int w = snprintf(buf + used, n - used, "%s%s (pid %ld)", used ? ", " : "", name, pid);
        if (w > 0 && (size_t)w < n - used)
            used += (size_t)w;
        else
            buf[used] = 0; // (one that does not fit is counted, not named)
    }
    if (d) closedir(d);
    return count;
}

bool amp_launcher_signals_pending(void) {
    bool pending = false;
    for (int i = 0; i < N_CAUGHT; i++)
        pending |= forwarded[i] != received[i];
    return pending;
}

int amp_launcher_forward(pid_t pid, const int32_t *below, int n_below) {
    if (!amp_launcher_signals_pending()) return 0;
    // the processes below, found before the child is signalled (a child that dies at once
    // leaves them to init, and no longer below this process)
    pid_t *to = amp_xmalloc(((size_t)(n_below > 0 ? n_below : 0) + 1) * sizeof *to);
    to[0] = pid;
    int n_to = 1;
    for (int k = 0; k < n_below; k++)
        if (below[k] != pid && descends_from(below[k], getpid())) to[n_to++] = below[k];
    int sent = 0;
    for (int i = 0; i < N_CAUGHT; i++) {
        for (sig_atomic_t r = received[i]; forwarded[i] != r; forwarded[i]++)
            for (int k = 0; k < n_to; k++, sent++)
                kill(to[k], caught[i]);
    }
    free(to);
    return sent;
}

int amp_launcher_signals_received(void) {
    int n = 0;
    for (int i = 0; i < N_STOP; i++)
        n += received[i];
    return n;
}

int amp_launcher_exit_code(int wstatus) {
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    return 1;
}

// ---------------------------------------------------------------------------------------------
// CUDA and NVTX capture

#define INJECT_LIBRARY "libampprobe_inject.so"

// The capture library next to the ampprobe binary. False when there is none.
static bool inject_library(char *out, size_t n) {
    char exe[PATH_MAX];
    if (!amp_exe_dir(exe, sizeof exe)) return false;
    if ((size_t)snprintf(out, n, "%s/%s", exe, INJECT_LIBRARY) >= n) return false;
    return access(out, R_OK) == 0;
}

static void set_injection(const char *var, const char *lib) {
    const char *old = getenv(var);
    if (old && *old && strcmp(old, lib) != 0)
        fprintf(stderr, "ampprobe: note: %s was set to %s (another tool); ampprobe replaces it\n",
                var, old);
    setenv(var, lib, 1);
}

void amp_launcher_capture(const char *trace, bool asked) {
    bool cuda = strstr(trace, "cuda") != NULL, nvtx = strstr(trace, "nvtx") != NULL;
    if (!cuda && !nvtx) return;
    char lib[PATH_MAX];
    if (!inject_library(lib, sizeof lib)) {
        if (asked)
            fprintf(stderr,
                    "ampprobe: note: %s is not installed next to ampprobe; CUDA and NVTX "
                    "are not recorded\n",
                    INJECT_LIBRARY);
        return;
    }
    if (cuda) set_injection("CUDA_INJECTION64_PATH", lib);
    if (nvtx) set_injection("NVTX_INJECTION64_PATH", lib);
}
