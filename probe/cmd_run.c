/*
 * cmd_run.c — `ampprobe run [options] [--] PROG [ARGS]` (also `ampprobe -- PROG`): runs a program
 * with instrumentation on and collects what it records into a new database.
 *
 * The sequence: parse the options, look PROG up (127 before anything is created), claim the
 * output name, create the database and its spool directory (amp-store.h), start PROG with
 * AMPPROBE_SPOOL_DIR in its environment, then poll the collector every 200 ms — passing
 * SIGINT/SIGTERM on to PROG and showing a status line on a terminal — until PROG has exited and
 * the writers it left behind are gone; finish the database, print a summary, and exit with
 * PROG's status.
 *
 * With --tui the same collecting runs on a thread while the TUI (tui/tui.h) reads the database
 * in the foreground; PROG's output (and ampprobe's own messages while the TUI is up) go to
 * FILE.log, named on the screen. When PROG ends the TUI shows its exit status and stays until
 * q; q while PROG still runs only closes the TUI (the recording goes on to PROG's end).
 *
 * With --torch PROG is a PyTorch program: the ampprobe Python package (built into python/ next
 * to this binary) goes on its PYTHONPATH with a startup module that attaches the bridge to the
 * model that trains, and AMPPROBE_LIB names libamprecord.so, the record API it writes through.
 */
#define _GNU_SOURCE
#include "amp-impl.h"
#include "amp-store.h"
#include "commands.h"
#include "launcher.h"
#include "tui.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POLL_EVERY_NS 200000000    // collector
#define STATUS_EVERY_NS 250000000  // live status line
#define TICK_NS 20000000           // main loop
#define DRAIN_NS 2000000000        // how long writers that outlive PROG may take to finish
#define ORPHAN_GRACE_NS 1000000000 // how long processes PROG left may take to end before named
#define DEFAULT_TRACE "amp,cuda,nvtx"

static const char usage_text[] =
    "usage: ampprobe run [options] [--] PROG [ARGS...]\n"
    "       ampprobe -- PROG [ARGS...]\n"
    "\n"
    "Runs PROG with libampcore's instrumentation on and records the run into a new SQLite\n"
    "database (tables: probe/SCHEMA.md). On a terminal a status line follows the run.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE    the database (default: ampprobe-N.sqlite, the first free N)\n"
    "  -f, --force          overwrite FILE if it exists (not while a run records it)\n"
    "      --stats-every N  per-layer tensor statistics every N steps (default: every step);\n"
    "                       the other steps still record their loss and scale, and one that\n"
    "                       breaks is still traced; with --torch they also cost less\n"
    "      --trace LIST     what to record: a comma list of amp, cuda, nvtx (default: all;\n"
    "                       cuda and nvtx load libampprobe_inject.so into PROG and its children)\n"
    "      --counters       also sample GPU hardware counters (DRAM bytes, tensor-pipe and\n"
    "                       GPU activity, every 100 us by CUPTI PM sampling) into GPU_METRICS;\n"
    "                       needs cuda in --trace; where counters are not permitted it says\n"
    "                       why and the report uses analytic FLOPs and bytes\n"
    "      --tui            follow the run in the TUI ('ampprobe tui'); PROG's output goes\n"
    "                       to FILE.log\n"
    "      --torch          PROG is a PyTorch program (python3 train.py): record the model\n"
    "                       that trains with no code change (the ampprobe Python package's\n"
    "                       startup module goes first on PYTHONPATH; needs libamprecord.so\n"
    "                       and python/ next to ampprobe, as the build leaves them)\n"
    "      --check-grads    (PyTorch, no GradScaler: bf16, fp32) end each step by reading\n"
    "                       whether the parameter gradients hold NaN/inf, so that a backward\n"
    "                       gone non-finite is traced op by op at its step, before the\n"
    "                       optimizer steps on it (waits for the backward: 2-9% more step\n"
    "                       time on an H200; without it such a step is named per module, a\n"
    "                       step late)\n"
    "  -h, --help           this help\n"
    "\n"
    "Exit status: PROG's own (128+N when signal N ended it); 127 when PROG (or the\n"
    "interpreter its #! line names) is not found; 126 when it is not executable or a directory;\n"
    "2 for a usage error or an output file that exists or cannot be created.\n"
    "\n"
    "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to ampprobe alone (kill, a\n"
    "batch system's SIGTERM) go on to PROG and to the recording processes below it.\n"
    "AMPPROBE_STATS_EVERY in the environment stands in for --stats-every.\n";

typedef struct run_opts {
    const char *output; // NULL: ampprobe-N.sqlite
    bool force;
    const char *stats_every; // validated; NULL: not given
    const char *trace;       // validated, each name once ("amp,cuda,nvtx")
    char trace_buf[16];      // (a --trace list as the names it gave)
    bool trace_given;
    bool tui;
    bool counters;    // --counters
    bool torch;       // --torch
    bool check_grads; // --check-grads
    char **prog;      // PROG and its arguments, NULL-terminated
} run_opts;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "ampprobe run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see 'ampprobe run --help')\n");
    return 2;
}

// 0: run; -1: --help was printed; 2: a usage error was printed.
static int parse_args(int argc, char **argv, run_opts *o) {
    *o = (run_opts){.trace = DEFAULT_TRACE};
    bool output_given = false, stats_every_given = false; // (a flag is given when its field is set)
    int i = 1;
    for (; i < argc; i++) {
        char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == 0) break; // PROG
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
#define IS(s) (name_len == strlen(s) && strncmp(a, s, name_len) == 0)
        bool *flag = IS("-f") || IS("--force") ? &o->force
                     : IS("--counters")        ? &o->counters
                     : IS("--tui")             ? &o->tui
                     : IS("--check-grads")     ? &o->check_grads
                     : IS("--torch")           ? &o->torch
                                               : NULL;
        if (flag) { // a flag that takes no value
            if (eq) return usage_error("%s takes no value", a);
            if (!amp_cmd_option_once("run", a, flag)) return 2;
        } else if (IS("-h") || IS("--help")) {
            fputs(usage_text, stdout);
            return -1;
        } else if (IS("-o") || IS("--output")) {
            if (!amp_cmd_option_once("run", a, &output_given)) return 2;
            amp_cmd_option_value(argc, argv, &i, "--output", "-o", &o->output);
            if (!o->output || !*o->output || strcmp(o->output, "--") == 0)
                return usage_error("%s needs a file name", a);
        } else if (IS("--stats-every")) {
            if (!amp_cmd_option_once("run", a, &stats_every_given)) return 2;
            amp_cmd_option_value(argc, argv, &i, "--stats-every", NULL, &o->stats_every);
            if (!o->stats_every) return usage_error("%s needs a number of steps", a);
            int n;
            const char *why = amp_parse_count(o->stats_every, &n);
            if (why) {
                fprintf(stderr, "ampprobe run: --stats-every: '%s': %s\n", o->stats_every, why);
                return 2;
            }
        } else if (IS("--trace")) {
            if (!amp_cmd_option_once("run", a, &o->trace_given)) return 2;
            o->trace = NULL;
            amp_cmd_option_value(argc, argv, &i, "--trace", NULL, &o->trace);
            if (!o->trace) return usage_error("%s needs a list (amp,cuda,nvtx)", a);
            unsigned mask;
            if (!amp_parse_trace(o->trace, &mask))
                return usage_error("--trace: '%s' is not a comma list of amp, cuda, nvtx",
                                   o->trace);
            amp_trace_names(mask, o->trace_buf, sizeof o->trace_buf); // ("amp,amp": "amp")
            o->trace = o->trace_buf;
        } else {
            return usage_error("unknown option '%s'", a);
        }
#undef IS
    }
    if (i >= argc) return usage_error("%s", "no program to run: ampprobe run [options] -- PROG");
    // AMPPROBE_STATS_EVERY from the environment stands in for --stats-every (and is recorded)
    const char *env_every = getenv("AMPPROBE_STATS_EVERY");
    if (!o->stats_every && env_every && *env_every) {
        int n;
        const char *why = amp_parse_count(env_every, &n);
        if (why) {
            fprintf(stderr, "ampprobe run: AMPPROBE_STATS_EVERY in the environment: '%s': %s\n",
                    env_every, why);
            return 2;
        }
        o->stats_every = env_every;
    }
    if (o->counters && !strstr(o->trace, "cuda"))
        return usage_error("--counters needs cuda in --trace (it is '%s')", o->trace);
    o->prog = argv + i;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The output file

// Removes the files SQLite keeps beside the database at path.
static void remove_side_files(const char *path) {
    char buf[PATH_MAX + 16];
    for (int i = 0; i < AMP_CMD_N_SIDE_FILES; i++) {
        snprintf(buf, sizeof buf, "%s%s", path, amp_cmd_side_files[i]);
        unlink(buf);
    }
}

// Removes the database and its side files; false (errno set) when the database itself could not
// be removed.
static bool remove_db_files(const char *path) {
    remove_side_files(path);
    return unlink(path) == 0 || errno == ENOENT;
}

// Creates the (empty) output file exclusively, so that no other run takes the name. Returns
// the path (malloc'd) or NULL after printing why not.
static char *claim_output(const run_opts *o, int *lock_fd) {
    char buf[64];
    const char *path = o->output;
    struct stat sb;
    if (path && lstat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "ampprobe: %s is a directory\n", path);
            return NULL;
        }
        if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
            fprintf(stderr,
                    "ampprobe: %s is not a file (a device, pipe or socket); choose another -o "
                    "(--force replaces only a file)\n",
                    path);
            return NULL;
        }
        if (S_ISREG(sb.st_mode) && amp_collector_db_busy(path)) {
            fprintf(stderr,
                    "ampprobe: %s is being recorded by a running ampprobe; choose another -o "
                    "(--force does not replace a live run's file)\n",
                    path);
            return NULL;
        }
        if (!o->force) {
            fprintf(stderr, "ampprobe: %s exists (use --force to overwrite it)\n", path);
            return NULL;
        }
        if (!remove_db_files(path)) {
            fprintf(stderr, "ampprobe: cannot remove %s (--force): %s\n", path, strerror(errno));
            return NULL;
        }
    }
    for (int n = 1;; n++) {
        if (!o->output) {
            snprintf(buf, sizeof buf, "ampprobe-%d.sqlite", n);
            path = buf;
        }
        const int fd = amp_collector_claim(path); // (locked from its creation: a --force
        if (fd >= 0) {                            // elsewhere sees a live run's file)
            *lock_fd = fd;
            break;
        }
        if (errno == EEXIST && !o->output) continue;
        fprintf(stderr, "ampprobe: cannot create %s: %s\n", path,
                errno == EEXIST   ? "it was created meanwhile"
                : errno == EISDIR ? "it names a directory (-o takes a file name)"
                                  : strerror(errno));
        return NULL;
    }
    // The name is ours now; a -wal (or journal) left by an earlier crashed run must not be
    // replayed into it.
    remove_side_files(path);
    return strdup(path);
}

// ---------------------------------------------------------------------------------------------
// --torch: the PyTorch bridge (probe/python) attaches through Python's startup module

// Puts DIR/python/ampprobe/_autostart and DIR/python first on PYTHONPATH and points
// AMPPROBE_LIB at DIR/libamprecord.so, DIR being the ampprobe binary's folder. false (said on
// stderr) when the build left either there.
static bool torch_environment(void) {
    char exe[PATH_MAX];
    if (!amp_exe_dir(exe, sizeof exe)) return false;
    char lib[PATH_MAX + 32], start[PATH_MAX + 64], path[2 * PATH_MAX + 128];
    snprintf(lib, sizeof lib, "%s/libamprecord.so", exe);
    snprintf(start, sizeof start, "%s/python/ampprobe/_autostart/sitecustomize.py", exe);
    if (access(lib, R_OK) != 0 || access(start, R_OK) != 0) {
        fprintf(stderr, "ampprobe run: --torch needs %s and %s (build the ampprobe target)\n", lib,
                start);
        return false;
    }
    const char *old = getenv("PYTHONPATH");
    snprintf(path, sizeof path, "%s/python/ampprobe/_autostart:%s/python%s%s", exe, exe,
             old && *old ? ":" : "", old && *old ? old : "");
    setenv("PYTHONPATH", path, 1);
    setenv("AMPPROBE_LIB", lib, 1);
    return true;
}

// ---------------------------------------------------------------------------------------------
// Running

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    nanosleep(&ts, NULL); // a signal cuts it short, which is what we want
}

typedef struct run_state {
    amp_collector_t *collector;
    bool tty;    // stderr is a terminal that takes cursor movements: show the status line
    int rows;    // the terminal's rows while the status line holds the last of them, else 0
    bool failed; // the database could not be written: stop polling
    int64_t next_poll, next_status;
    const char *program, *db_path; // for what is said of processes PROG left running
    tui_live *live;                // --tui: told PROG's status as soon as it has ended; NULL: none
} run_state;

static void terminal_size(int *rows, int *cols) {
    struct winsize ws;
    bool known = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0;
    *rows = known ? ws.ws_row : 0;
    *cols = known ? ws.ws_col : 0;
}

// The status line keeps the terminal's last row to itself: the rows above it become the
// scrolling region (as apt's progress bar does), so what PROG writes scrolls there and never runs
// into the status line. Each draw saves the cursor, writes the last row and restores the cursor.
static void status_line(run_state *r, const amp_collector_stats *s) {
    int rows, cols;
    terminal_size(&rows, &cols);
    if (rows < 3 || cols < 20) return; // too small to share
    if (rows != r->rows) {             // the first draw, or the terminal was resized
        // down a line and back up (IND, CUU: the column kept), which scrolls the screen when the
        // cursor is on the last row; then the scrolling region above the last row
        fprintf(stderr, "\033D\033[1A\0337\033[1;%dr\0338", rows - 1);
        r->rows = rows;
    }
    char text[256];
    if (s->last_step < 0) {
        snprintf(text, sizeof text, "[ampprobe] %lld records", (long long)s->records);
    } else {
        char scale[32] = "-";
        if (!isnan(s->scale)) snprintf(scale, sizeof scale, "%g", s->scale);
        snprintf(text, sizeof text,
                 "[ampprobe] step %lld  %.1f ms  loss %.4g  scale %s  skipped %lld  events %lld",
                 (long long)s->last_step, s->last_step_ms, s->last_loss, scale,
                 (long long)s->skipped, (long long)s->events);
    }
    // one column short of the width: a character in the last column would wrap the line
    fprintf(stderr, "\0337\033[%d;1H\033[K%.*s\0338", rows, cols - 1, text);
    fflush(stderr);
}

// Gives the last row back: the status line cleared, the whole screen scrolling again.
static void clear_status(run_state *r) {
    if (!r->rows) return;
    int rows, cols;
    terminal_size(&rows, &cols);
    if (rows < 1) rows = r->rows;
    fprintf(stderr, "\0337\033[%d;1H\033[K\033[r\0338", rows);
    fflush(stderr);
    r->rows = 0;
}

// One tick of the main loop: poll and redraw when due.
static void tick(run_state *r) {
    int64_t now = mono_ns();
    if (!r->failed && now >= r->next_poll) {
        r->next_poll = now + POLL_EVERY_NS;
        if (amp_collector_poll(r->collector) != AMP_OK) {
            clear_status(r);
            fprintf(stderr, "ampprobe: %s; recording stopped, the program keeps running\n",
                    amp_last_error());
            r->failed = true;
        }
    }
    if (r->tty && now >= r->next_status) {
        r->next_status = now + STATUS_EVERY_NS;
        amp_collector_stats s;
        amp_collector_get_stats(r->collector, &s);
        status_line(r, &s);
    }
}

// The step records the finished database at path holds; -1 when it cannot be read.
static int64_t db_steps(const char *path) {
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX];
    if (amp_store_open_readonly(path, &db, err) != AMP_OK) return -1;
    sqlite3_stmt *q = NULL;
    int64_t n = -1;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM AMP_STEPS", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

static void summary(const run_opts *o, const char *path, int wstatus,
                    const amp_collector_stats *s) {
    if (WIFSIGNALED(wstatus))
        fprintf(stderr, "ampprobe: %s was killed by signal %d (%s)\n", o->prog[0],
                WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
    else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0)
        fprintf(stderr, "ampprobe: %s exited with status %d\n", o->prog[0], WEXITSTATUS(wstatus));
    char procs[48] = "";
    if (s->step_processes > 1) snprintf(procs, sizeof procs, " of %d processes", s->step_processes);
    if (!s->stopped) {
        fprintf(stderr, "ampprobe: %lld steps%s (%lld skipped), %lld events, %lld rows -> %s\n",
                (long long)s->steps, procs, (long long)s->skipped, (long long)s->events,
                (long long)s->rows, path);
        return;
    }
    // what was read is not what was kept (a failed commit loses its rows): the file says
    const int64_t kept = db_steps(path);
    char holds[64] = "not all of them";
    if (kept >= 0)
        snprintf(holds, sizeof holds, "%lld step%s", (long long)kept, kept == 1 ? "" : "s");
    else if (access(path, F_OK) != 0)
        snprintf(holds, sizeof holds, "nothing (there is no such file now)");
    fprintf(stderr, "ampprobe: %lld steps%s (%lld skipped) and %lld events read; %s holds %s\n",
            (long long)s->steps, procs, (long long)s->skipped, (long long)s->events, path, holds);
    fprintf(stderr, "ampprobe: recording stopped short of the run: %s\n", s->stopped);
}

static void set_meta(amp_collector_t *c, const char *key, const char *value) {
    if (value) amp_collector_set_meta(c, key, value);
}

// Collects until PROG has exited and the writers it left are gone, then finishes the database.
// Returns PROG's wait status.
static int collect(run_state *r, pid_t pid, amp_collector_stats *s) {
    int wstatus = 0;
    for (;;) {
        // (the list only while a signal waits: a thousand recording processes are no limit)
        if (amp_launcher_signals_pending()) {
            const int n = amp_collector_live_pids(r->collector, NULL, 0);
            int32_t *writers = amp_xmalloc(((size_t)n + 1) * sizeof *writers);
            amp_launcher_forward(pid, writers, amp_collector_live_pids(r->collector, writers, n));
            free(writers);
        }
        // PROG, and what this process adopted (amp_launcher_adopt_orphans) and has ended: no
        // zombies pile up under a program that leaves short-lived processes behind
        bool done = false;
        pid_t w;
        for (int ws; (w = waitpid(-1, &ws, WNOHANG)) > 0;)
            if (w == pid) wstatus = ws, done = true;
        if (done || (w < 0 && errno != EINTR)) break;
        tick(r);
        sleep_ns(TICK_NS);
    }
    if (r->live) { // the TUI says how PROG ended while the last records are read
        atomic_store(&r->live->term_signal, WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
        atomic_store(&r->live->exit_status, amp_launcher_exit_code(wstatus));
    }
    // PROG's own children may still be writing: give them a moment.
    for (int64_t end = mono_ns() + DRAIN_NS; !r->failed;) {
        r->next_poll = 0;
        tick(r);
        amp_collector_get_stats(r->collector, s);
        if (s->live_writers == 0 || mono_ns() >= end) break;
        sleep_ns(TICK_NS);
    }
    clear_status(r);
    // What PROG started and left running (`train.py &` as a script's last line) records on
    // into a spool nobody reads: said here and in META (the report's run-end warning).
    char orphans[512];
    int n_orphans;
    for (int64_t end = mono_ns() + ORPHAN_GRACE_NS;
         (n_orphans = amp_launcher_orphans(orphans, sizeof orphans)) > 0 && mono_ns() < end;)
        sleep_ns(TICK_NS); // (a worker pool shutting down with PROG is not left running)
    if (n_orphans > 0) {
        fprintf(stderr,
                "ampprobe: %s exited and left %d process%s running (%s): what %s from now on "
                "is not in %s\n",
                amp_base_name(r->program), n_orphans, n_orphans == 1 ? "" : "es", orphans,
                n_orphans == 1 ? "it records" : "they record", r->db_path);
        if (amp_collector_set_meta(r->collector, "orphans", orphans) != AMP_OK)
            fprintf(stderr, "ampprobe: %s\n", amp_last_error());
    }
    char sig[16]; // the report tells a signal from a program that exited with 128+N itself
    snprintf(sig, sizeof sig, "%d", WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
    if (amp_collector_set_meta(r->collector, "exit_signal", sig) != AMP_OK)
        fprintf(stderr, "ampprobe: %s\n", amp_last_error());
    if (amp_collector_finish(r->collector, amp_launcher_exit_code(wstatus)) != AMP_OK)
        fprintf(stderr, "ampprobe: %s\n", amp_last_error());
    amp_collector_get_stats(r->collector, s);
    return wstatus;
}

// ---------------------------------------------------------------------------------------------
// --tui: the collector on a thread, the TUI in the foreground

typedef struct tui_run_state {
    run_state *r;
    pid_t pid;
    int wstatus;
    amp_collector_stats stats;
    tui_live live;
} tui_run_state;

static void *collect_thread(void *arg) {
    tui_run_state *t = arg;
    t->r->live = &t->live; // (collect tells it PROG's status)
    t->wstatus = collect(t->r, t->pid, &t->stats);
    return NULL;
}

static bool signalled(void) {
    return amp_launcher_signals_received() > 0;
}

// The program's output file: FILE.log (malloc'd path, *fd open) or NULL after saying why; one
// that exists is overwritten only with force.
static char *open_log(const char *db_path, bool force, int *fd) {
    size_t n = strlen(db_path) + 5;
    char *log_path = malloc(n);
    if (!log_path) return NULL;
    snprintf(log_path, n, "%s.log", db_path);
    *fd = open(log_path, O_WRONLY | O_CREAT | (force ? O_TRUNC : O_EXCL) | O_CLOEXEC, 0644);
    if (*fd < 0) {
        fprintf(stderr, "ampprobe: cannot create %s: %s\n", log_path,
                errno == EEXIST ? "it exists (use --force to overwrite it)" : strerror(errno));
        free(log_path);
        return NULL;
    }
    return log_path;
}

// Runs the TUI while the thread collects; returns PROG's wait status once it has ended.
static int collect_with_tui(run_state *r, pid_t pid, const char *path, const char *log_path,
                            int log_fd, const char *prog, amp_collector_stats *s) {
    tui_run_state t = {
        .r = r,
        .pid = pid,
        .live = {.log_path = log_path, .program = prog, .quit_requested = signalled}};
    atomic_init(&t.live.exit_status, -1);
    atomic_init(&t.live.term_signal, 0);
    pthread_t thread;
    if (pthread_create(&thread, NULL, collect_thread, &t) != 0) {
        fprintf(stderr, "ampprobe: cannot start the collector thread; recording without the TUI\n");
        return collect(r, pid, s);
    }
    int saved_err = dup(STDERR_FILENO); // ampprobe's own messages must not tear the screen
    if (saved_err >= 0) dup2(log_fd, STDERR_FILENO);
    int rc = tui_run(path, &t.live);
    if (saved_err >= 0) {
        dup2(saved_err, STDERR_FILENO);
        close(saved_err);
    }
    if (rc != 0) // (its message went to the log: stderr was there while it ran)
        fprintf(stderr, "ampprobe: the TUI could not start or ended on an error (see %s)\n",
                log_path);
    if (atomic_load(&t.live.exit_status) < 0)
        fprintf(stderr, "ampprobe: TUI closed; still recording %s until it ends (output: %s)\n",
                prog, log_path);
    pthread_join(thread, NULL);
    *s = t.stats;
    return t.wstatus;
}

// Says once, before the run, when the disk that will hold the database (and the spool beside
// it) has little room: a run that fills it is recorded only in part.
#define LOW_DISK_BYTES (100ull << 20)
static void warn_low_disk(const char *db_path) {
    char *copy = amp_xstrdup(db_path);
    struct statvfs v;
    if (statvfs(dirname(copy), &v) == 0 &&
        (unsigned long long)v.f_bavail * v.f_frsize < LOW_DISK_BYTES)
        fprintf(stderr,
                "ampprobe: only %.1f MiB free on the disk of %s: the recording will stop "
                "short if the run fills it (-o puts it elsewhere)\n",
                (double)v.f_bavail * (double)v.f_frsize / 1048576.0, db_path);
    free(copy);
}

// What the run is, into META: the command, the output, the trace, the statistics' sampling.
static void record_meta(const run_opts *o, amp_collector_t *c, const char *path) {
    char *command = amp_shell_join(o->prog);
    set_meta(c, "command", command);
    set_meta(c, "output", path);
    set_meta(c, "trace", o->trace);
    set_meta(c, "stats_every", o->stats_every);
    if (o->torch) set_meta(c, "torch", "1");
    free(command);
}

// The environment that turns PROG's instrumentation on and sends its records to this collector.
static void program_environment(const run_opts *o, amp_collector_t *c, const char *path) {
    // under another ampprobe run: PROG's records come here, and the outer run gets none of them
    const char *outer = getenv("AMPPROBE_SPOOL_DIR");
    if (outer && *outer)
        fprintf(stderr,
                "ampprobe: this run is inside another ampprobe run (its spool %s): %s's "
                "records go into %s alone\n",
                outer, o->prog[0], path);
    setenv("AMPPROBE_SPOOL_DIR", amp_collector_spool_dir(c), 1);
    setenv("AMPPROBE_TRACE", o->trace, 1);
    if (o->counters)
        setenv("AMPPROBE_COUNTERS", "1", 1);
    else
        unsetenv("AMPPROBE_COUNTERS");
    if (o->stats_every) setenv("AMPPROBE_STATS_EVERY", o->stats_every, 1);
    if (o->check_grads) setenv("AMPPROBE_CHECK_GRADS", "1", 1);
    unsetenv("AMPPROBE_OUT"); // this launcher is the collector
}

int amp_cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;
    int found = amp_launcher_find(o.prog[0]);
    if (found != 0) { // (EISDIR, EACCES: 126, as a shell says)
        fprintf(stderr, "ampprobe: %s: %s\n", o.prog[0],
                found == ENOENT ? "command not found" : strerror(found));
        return found == ENOENT ? 127 : 126;
    }
    if (o.torch && !torch_environment()) return 2;
    if (o.tui && !(isatty(STDIN_FILENO) && isatty(STDOUT_FILENO))) {
        fprintf(stderr, "ampprobe run: --tui needs a terminal (stdin and stdout)\n");
        return 2;
    }
    int lock_fd = -1;
    char *path = claim_output(&o, &lock_fd);
    if (!path) return 2;
    run_state r = {.tty = !o.tui && isatty(STDERR_FILENO) && tui_terminal_usable(STDERR_FILENO),
                   .program = o.prog[0]};
    // the spool directory beside it by an absolute name: PROG may change directory
    char *abs_path = realpath(path, NULL);
    amp_status opened =
        amp_collector_new_locked(abs_path ? abs_path : path, NULL, lock_fd, &r.collector);
    free(abs_path);
    if (opened != AMP_OK) {
        fprintf(stderr, "ampprobe: %s\n", amp_last_error());
        remove_db_files(path);
        free(path);
        return 2;
    }
    warn_low_disk(path);
    r.db_path = path;
    record_meta(&o, r.collector, path);
    amp_launcher_capture(o.trace, o.trace_given);
    program_environment(&o, r.collector, path);
    int log_fd = -1;
    char *log_path = o.tui ? open_log(path, o.force, &log_fd) : NULL;
    if (o.tui && !log_path) {
        amp_collector_free(r.collector);
        remove_db_files(path);
        free(path);
        return 2;
    }
    amp_launcher_raise_file_limit();
    amp_launcher_catch_signals();
    amp_launcher_adopt_orphans();
    pid_t pid;
    int err = amp_launcher_spawn_io(o.prog, log_fd, &pid);
    if (err != 0) {
        if (log_path) {
            close(log_fd);
            unlink(log_path);
        }
        free(log_path);
        // found above, so ENOENT is the interpreter of its #! line
        fprintf(stderr, "ampprobe: %s: %s\n", o.prog[0],
                err == ENOENT ? "cannot run it: the interpreter its #! line names is not found"
                              : strerror(err));
        amp_collector_free(r.collector);
        remove_db_files(path);
        free(path);
        return err == ENOENT ? 127 : 126;
    }

    amp_collector_stats s;
    int wstatus = log_path ? collect_with_tui(&r, pid, path, log_path, log_fd, o.prog[0], &s)
                           : collect(&r, pid, &s);
    int code = amp_launcher_exit_code(wstatus);
    summary(&o, path, wstatus, &s);
    if (log_path) {
        fprintf(stderr, "ampprobe: program output in %s\n", log_path);
        close(log_fd);
        free(log_path);
    }
    amp_collector_free(r.collector);
    free(path);
    return code;
}
