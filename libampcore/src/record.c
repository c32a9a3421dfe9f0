/*
 * record.c — the writing side of the record stream (amp-record.h): the emit functions, the
 * per-process spool file and its background flusher, fork safety, and AMPPROBE_OUT.
 *
 * Records are encoded under a mutex into the current buffer; flushing swaps in the spare buffer
 * and write()s the full one outside that mutex, so an emitting thread waits for the disk only
 * when it fills a whole buffer before the flusher comes round. The spool file is created under a
 * temporary name, locked with flock (the collector takes the lock to learn that this process is
 * gone), given its header, and only then renamed to its final name, so the collector never sees
 * an unlocked or headerless spool file.
 *
 * The collector holds a lock on AMP_SPOOL_LIVE_LOCK in the spool directory while it lives; at
 * each flush the flusher tries to take it, and when it can (the launcher was killed, or it
 * finished while this process runs on) recording stops with a line on stderr, so that an orphaned
 * program does not fill the disk with records nothing will read. A process may hold several
 * copies of this file's state (libampcore linked into the program, libamprecord.so for the
 * PyTorch bridge, the capture library), each stopping on its own; the line is said once.
 *
 * fork: the pthread_atfork handlers hold every lock across fork(); the child drops the records it
 * inherited (the parent flushes them), closes the parent's spool file and creates its own on its
 * first record. It never touches an AMPPROBE_OUT collector, which belongs to the process that
 * started it.
 *
 * The end: the library's destructor writes out the rest and closes the spool file (record_unload:
 * after every exit handler of the program, which may still record); a fatal signal writes out
 * the buffer before the process dies of it (on_fatal_signal). A producer that holds records until
 * something ends (the capture library's NVTX handler: ranges still open) hands them over first,
 * through its finish hook.
 */
#include "amp-record.h"

#include "amp-impl.h"
#include "amp-store.h"
#include "record-codec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BUF_BYTES (4u << 20) // each of the two buffers
#define FLUSH_EVERY_MS 100
#define COLLECT_EVERY_MS 200

_Static_assert(BUF_BYTES >= AMP_REC_MAX_BYTES, "any record fits an empty buffer");

unsigned amp_record_trace_mask;

enum { SPOOL_CLOSED, SPOOL_READY };

static struct {
    // lock order: init_lock, timer_lock, io_lock, lock
    pthread_mutex_t init_lock;  // opening and closing; the settings below
    pthread_mutex_t timer_lock; // with wake: the sleeps of the flusher and collector threads
    pthread_mutex_t io_lock;    // fd, spare
    pthread_mutex_t lock;       // buf, len
    pthread_cond_t wake;
    int state; // SPOOL_*, read without a lock by emitters
    char *dir; // spool directory
    char *out; // AMPPROBE_OUT
    int fd;
    dev_t fd_dev; // the spool file fd was opened on (a program that closes every descriptor
    ino_t fd_ino; // and opens a file of its own gets fd's number for it)
    int live_fd;  // the spool directory's AMP_SPOOL_LIVE_LOCK (-1: none; the flusher's)
    dev_t live_dev;
    ino_t live_ino;
    uint8_t *buf, *spare; // BUF_BYTES each
    size_t len;
    bool flusher_running, flusher_stop;
    bool thread_up; // with wake: a thread started by thread_start runs its loop
    pthread_t flusher;
    bool write_failed;
    // AMPPROBE_OUT: the collector thread of the process that created it
    amp_collector_t *collector;
    pid_t collector_pid;
    pthread_t collector_thread;
    bool collector_stop;
} g = {
    .init_lock = PTHREAD_MUTEX_INITIALIZER,
    .timer_lock = PTHREAD_MUTEX_INITIALIZER,
    .io_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1,
    .live_fd = -1,
};

// How many of the locks above this thread holds: an abort while it holds one writes no last
// words (they would wait on that lock forever); one in another thread's waits for it.
static _Thread_local int locks_held;

static void lock(pthread_mutex_t *m) {
    pthread_mutex_lock(m);
    locks_held++;
}

static void unlock(pthread_mutex_t *m) {
    locks_held--;
    pthread_mutex_unlock(m);
}

int64_t amp_record_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// ---------------------------------------------------------------------------------------------
// Threads

static void cond_init(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g.wake, &a);
    pthread_condattr_destroy(&a);
}

// Sleeps ms on g.wake; timer_lock is held. False when *stop was set.
static bool nap(int ms, const bool *stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)ms * 1000000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    while (!*stop && pthread_cond_timedwait(&g.wake, &g.timer_lock, &ts) == 0) {
    }
    return !*stop;
}

// Starts a thread with every signal blocked (signals are the program's, not ours) and returns
// once it runs its loop (thread_up), so that a fork() right after never catches it in its
// start-up: under AddressSanitizer (GCC 12's), a child forked while a new thread was still
// allocating in its start-up inherited the allocator locked and hung at its first malloc.
static void thread_start(pthread_t *t, void *(*fn)(void *)) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(t, NULL, fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    AMP_ASSERT(rc == 0, "pthread_create: %s", strerror(rc));
    lock(&g.timer_lock);
    while (!g.thread_up)
        pthread_cond_wait(&g.wake, &g.timer_lock);
    g.thread_up = false;
    unlock(&g.timer_lock);
}

// A started thread's first step, timer_lock held: tells thread_start that it runs.
static void thread_running(void) {
    g.thread_up = true;
    pthread_cond_broadcast(&g.wake);
}

static void thread_stop(pthread_t t, bool *stop) {
    lock(&g.timer_lock);
    *stop = true;
    pthread_cond_broadcast(&g.wake);
    unlock(&g.timer_lock);
    pthread_join(t, NULL);
    *stop = false;
}

// ---------------------------------------------------------------------------------------------
// Buffers and the spool file

static bool write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

// Whether fd still names the file (dev, ino) it was opened on: a program may have closed it and
// opened one of its own under the number, which is not ours to write to or close.
static bool still_ours(int fd, dev_t dev, ino_t ino) {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

static void close_if_ours(int *fd, dev_t dev, ino_t ino) {
    if (still_ours(*fd, dev, ino)) close(*fd);
    *fd = -1;
}

static void spool_flush(void) {
    lock(&g.io_lock);
    lock(&g.lock);
    uint8_t *full = g.buf;
    size_t n = g.len;
    g.buf = g.spare;
    g.spare = full;
    g.len = 0;
    unlock(&g.lock);
    if (n > 0 && g.fd >= 0 && !g.write_failed && !still_ours(g.fd, g.fd_dev, g.fd_ino)) {
        g.write_failed = true; // (what the program opened in its place is not written to)
        amp_record_trace_mask = 0;
        static const char msg[] = // (write: this may run in a fatal signal's handler)
            "ampprobe: the program closed the spool file's descriptor; recording stopped\n";
        if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) (void)0;
    }
    if (n > 0 && g.fd >= 0 && !g.write_failed && !write_all(g.fd, full, n)) {
        g.write_failed = true;
        amp_record_trace_mask = 0;
        fprintf(stderr, "ampprobe: writing the spool file in %s: %s; recording stopped\n", g.dir,
                strerror(errno));
    }
    unlock(&g.io_lock);
}

// fd moved above 0-2 where it took one of them (a program that closed its stdout would print into
// the spool, and the file it opens next would be ours), closed on exec.
static int above_stdio(int fd) {
    if (fd < 0 || fd > 2) return fd;
    const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    const int e = errno;
    close(fd);
    errno = e;
    return moved;
}

// Opens the spool directory's AMP_SPOOL_LIVE_LOCK into g.live_fd (-1 while it cannot be: tried
// again at the next flush).
static void open_live_lock(void) {
    char *live = amp_path_join(g.dir, AMP_SPOOL_LIVE_LOCK);
    g.live_fd = above_stdio(open(live, O_RDONLY | O_CLOEXEC));
    free(live);
    struct stat st;
    if (g.live_fd >= 0 && fstat(g.live_fd, &st) == 0) {
        g.live_dev = st.st_dev;
        g.live_ino = st.st_ino;
    }
}

// Whether the collector that reads this spool directory is gone: its lock can be taken.
static bool collector_gone(void) {
    // the spool file unlinked: the collector finished and removed it (nothing will read it)
    struct stat sb;
    lock(&g.io_lock);
    const bool unlinked =
        still_ours(g.fd, g.fd_dev, g.fd_ino) && fstat(g.fd, &sb) == 0 && sb.st_nlink == 0;
    unlock(&g.io_lock);
    if (unlinked) return true;
    if (g.live_fd >= 0 && !still_ours(g.live_fd, g.live_dev, g.live_ino))
        g.live_fd = -1; // the program closed it (the number is the program's now): open it again
    if (g.live_fd < 0) open_live_lock(); // (none yet: a file limit, or the run ending as it began)
    if (g.live_fd < 0 || flock(g.live_fd, LOCK_SH | LOCK_NB) != 0) return false;
    flock(g.live_fd, LOCK_UN);
    return true;
}

// Eight of the random bytes the kernel gave this process image at exec (0: none): with the pid,
// no other process has both.
static uint64_t exec_id(void) {
    const uint8_t *r = (const uint8_t *)getauxval(AT_RANDOM);
    uint64_t id = 0;
    if (r) memcpy(&id, r, sizeof id);
    return id;
}

// This process's start time, clock ticks since boot (the 22nd field of /proc/self/stat, after
// the name in parentheses, which may itself hold spaces and parentheses); 0: unknown.
static uint64_t proc_start(void) {
    char buf[1024];
    const int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    unsigned long long ticks = 0;
    return p && sscanf(p + 1,
                       " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
                       "%*d %*d %*d %llu",
                       &ticks) == 1
               ? ticks
               : 0;
}

// Whether this copy of the recorder is the first in its process to say that recording ended:
// the copies share no memory, so the first claims a name in the abstract socket namespace (this
// process's pid and exec_id; the name goes with the process). True as well when the name cannot
// be tried.
static bool first_to_say_ended(void) {
    const uint64_t id = exec_id();
    struct sockaddr_un a = {.sun_family = AF_UNIX}; // sun_path[0] = 0: the abstract namespace
    const int len = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "ampprobe-ended-%d-%016llx",
                             (int)getpid(), (unsigned long long)id);
    const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return true;
    if (bind(s, (struct sockaddr *)&a,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len)) != 0) {
        const bool taken = errno == EADDRINUSE;
        close(s);
        return !taken;
    }
    return true; // the socket stays open: the name is held until the process ends
}

static void *flusher_main(void *arg) {
    (void)arg;
    lock(&g.timer_lock);
    thread_running();
    while (nap(FLUSH_EVERY_MS, &g.flusher_stop)) {
        unlock(&g.timer_lock);
        spool_flush();
        if (amp_record_trace_mask && collector_gone()) { // (two system calls a flush)
            amp_record_trace_mask = 0;
            if (first_to_say_ended())
                fprintf(stderr, "ampprobe: the recording of this run has ended (ampprobe run "
                                "finished or was killed): this process's records stop here, it "
                                "runs on\n");
        }
        lock(&g.timer_lock);
    }
    unlock(&g.timer_lock);
    return NULL;
}

static void read_comm(char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen("/proc/self/comm", "r");
    if (!f) return;
    if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = 0;
    fclose(f);
}

// Creates this process's spool file in g.dir (init_lock held).
static amp_status spool_create(void) {
    int64_t t = amp_record_now_ns();
    int pid = (int)getpid();
    size_t n = strlen(g.dir) + 64;
    char *tmp = amp_xmalloc(n), *final = amp_xmalloc(n);
    snprintf(tmp, n, "%s/.%d-%lld%s.tmp", g.dir, pid, (long long)t, AMP_SPOOL_SUFFIX);
    snprintf(final, n, "%s/%d-%lld%s", g.dir, pid, (long long)t, AMP_SPOOL_SUFFIX);
    amp_status st = AMP_OK;
    int fd = above_stdio(open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644));
    if (fd < 0) {
        st = amp_set_error(AMP_ERR_IO, "cannot create a spool file in %s: %s", g.dir,
                           strerror(errno));
    } else {
        char comm[16];
        read_comm(comm, sizeof comm);
        amp_spool_header h;
        amp_spool_header_init(&h, pid, (int32_t)getppid(), t, comm);
        h.exec_id = exec_id();
        h.proc_start = proc_start();
        if (flock(fd, LOCK_EX) != 0 || !write_all(fd, (const uint8_t *)&h, sizeof h) ||
            rename(tmp, final) != 0) {
            st = amp_set_error(AMP_ERR_IO, "cannot create a spool file in %s: %s", g.dir,
                               strerror(errno));
            close(fd);
            unlink(tmp);
        }
    }
    free(tmp);
    free(final);
    if (st != AMP_OK) return st;
    struct stat sb;
    if (fstat(fd, &sb) != 0) sb = (struct stat){0};
    lock(&g.io_lock);
    g.fd = fd;
    g.fd_dev = sb.st_dev;
    g.fd_ino = sb.st_ino;
    g.write_failed = false;
    unlock(&g.io_lock);
    if (g.live_fd < 0) open_live_lock();
    return AMP_OK;
}

// ---------------------------------------------------------------------------------------------
// AMPPROBE_OUT: this process is its own collector

static void *collector_main(void *arg) {
    (void)arg;
    bool failed = false;
    lock(&g.timer_lock);
    thread_running();
    while (nap(COLLECT_EVERY_MS, &g.collector_stop)) {
        unlock(&g.timer_lock);
        if (!failed && amp_collector_poll(g.collector) != AMP_OK) {
            fprintf(stderr, "ampprobe: AMPPROBE_OUT: %s; recording stopped\n", amp_last_error());
            amp_record_trace_mask = 0;
            failed = true;
        }
        lock(&g.timer_lock);
    }
    unlock(&g.timer_lock);
    return NULL;
}

// The command line from /proc/self/cmdline, shell-quoted as the launcher writes it (malloc'd;
// NULL when it cannot be read).
static char *read_cmdline(void) {
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return NULL;
    size_t got = 0, cap = 8192;
    char *buf = amp_xmalloc(cap);
    for (size_t n; (n = fread(buf + got, 1, cap - 1 - got, f)) > 0;) // (the whole of it)
        if ((got += n) == cap - 1) buf = amp_xrealloc(buf, cap *= 2);
    fclose(f);
    buf[got] = 0;
    size_t argc = 0;
    for (size_t i = 0; i < got; i += strlen(buf + i) + 1)
        argc++;
    char **argv = amp_xmalloc((argc + 1) * sizeof *argv);
    argc = 0;
    for (size_t i = 0; i < got; i += strlen(buf + i) + 1)
        argv[argc++] = buf + i;
    argv[argc] = NULL;
    char *joined = amp_shell_join(argv);
    free(argv);
    free(buf);
    return joined;
}

// Creates the database g.out (which must not exist) and its collector thread (init_lock held).
static amp_status collector_start(void) {
    const int fd = amp_collector_claim(g.out); // (locked from its creation: a live run's file)
    if (fd < 0)
        return amp_set_error(AMP_ERR_IO, "AMPPROBE_OUT=%s: %s", g.out,
                             errno == EEXIST ? "exists (a run is never overwritten)"
                                             : strerror(errno));
    amp_status st = amp_collector_new_locked(g.out, NULL, fd, &g.collector);
    if (st != AMP_OK) {
        unlink(g.out);
        return st;
    }
    char *cmd = read_cmdline(), trace[16];
    if (cmd) amp_collector_set_meta(g.collector, "command", cmd);
    free(cmd);
    amp_collector_set_meta(g.collector, "output", g.out);
    amp_trace_names(amp_record_trace_mask, trace, sizeof trace);
    amp_collector_set_meta(g.collector, "trace", trace);
    free(g.dir);
    g.dir = amp_xstrdup(amp_collector_spool_dir(g.collector));
    g.collector_pid = getpid();
    thread_start(&g.collector_thread, collector_main);
    return AMP_OK;
}

// Stops the collector thread and finishes the database (init_lock held, spool closed).
static void collector_stop(void) {
    thread_stop(g.collector_thread, &g.collector_stop);
    if (amp_collector_finish(g.collector, -1) != AMP_OK)
        fprintf(stderr, "ampprobe: AMPPROBE_OUT: %s\n", amp_last_error());
    amp_collector_stats stats; // what the launcher's summary says of a run that lost rows
    amp_collector_get_stats(g.collector, &stats);
    if (stats.stopped)
        fprintf(stderr, "ampprobe: AMPPROBE_OUT=%s: recording stopped short of the run: %s\n",
                g.out, stats.stopped);
    amp_collector_free(g.collector);
    g.collector = NULL;
    free(g.dir);
    g.dir = NULL;
}

// ---------------------------------------------------------------------------------------------
// Opening, closing, fork

// Opens the spool (init_lock held): the collector first for AMPPROBE_OUT, the file, the flusher.
static amp_status open_locked(void) {
    if (!g.dir && g.out) {
        amp_status st = collector_start();
        if (st != AMP_OK) return st;
    }
    if (!g.dir) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "no spool directory");
    amp_status st = spool_create();
    if (st != AMP_OK) return st;
    if (!g.buf) {
        g.buf = amp_xmalloc(BUF_BYTES);
        g.spare = amp_xmalloc(BUF_BYTES);
    }
    if (!g.flusher_running) thread_start(&g.flusher, flusher_main);
    g.flusher_running = true;
    __atomic_store_n(&g.state, SPOOL_READY, __ATOMIC_RELEASE);
    return AMP_OK;
}

// The first record of this process (or of a forked child) opens its spool file.
static bool spool_open(void) {
    amp_error_kept kept; // (the program's call returns no status: its message stays)
    amp_error_keep(&kept);
    lock(&g.init_lock);
    if (g.state == SPOOL_CLOSED && amp_record_trace_mask && open_locked() != AMP_OK) {
        fprintf(stderr, "ampprobe: %s; recording off\n", amp_last_error());
        amp_record_trace_mask = 0;
    }
    bool ready = g.state == SPOOL_READY;
    unlock(&g.init_lock);
    amp_error_put_back(&kept);
    return ready;
}

static void close_locked(void) {
    if (g.flusher_running) thread_stop(g.flusher, &g.flusher_stop);
    g.flusher_running = false;
    if (g.state == SPOOL_READY) {
        spool_flush();
        lock(&g.io_lock);
        close_if_ours(&g.fd, g.fd_dev, g.fd_ino); // releases the flock: the collector reads
                                                  // this file to its end now
        unlock(&g.io_lock);
    }
    close_if_ours(&g.live_fd, g.live_dev, g.live_ino); // (the flusher, its only user, stopped)
    __atomic_store_n(&g.state, SPOOL_CLOSED, __ATOMIC_RELEASE);
    if (g.collector && g.collector_pid == getpid()) {
        amp_error_kept kept; // (amp_record_stop returns no status: the program's message stays)
        amp_error_keep(&kept);
        collector_stop();
        amp_error_put_back(&kept);
    }
}

static void atfork_prepare(void) {
    lock(&g.init_lock);
    lock(&g.timer_lock);
    lock(&g.io_lock);
    lock(&g.lock);
}

static void atfork_parent(void) {
    unlock(&g.lock);
    unlock(&g.io_lock);
    unlock(&g.timer_lock);
    unlock(&g.init_lock);
}

static void atfork_child(void) {
    unlock(&g.lock);
    unlock(&g.io_lock);
    unlock(&g.timer_lock);
    unlock(&g.init_lock);
    cond_init(); // the parent's threads may have waited on it; they do not exist here
    close_if_ours(&g.fd, g.fd_dev, g.fd_ino);          // the parent's file: its lock stays with it
    close_if_ours(&g.live_fd, g.live_dev, g.live_ino); // (opened again with this one's spool)
    if (g.collector) amp_collector_forget_in_child(g.collector); // (its locks are the parent's)
    g.len = 0;                                                   // the parent flushes these
    g.flusher_running = false;
    g.state = SPOOL_CLOSED;
}

// ---------------------------------------------------------------------------------------------
// The end: exit and fatal signals

// The finish hook (amp_record_set_finish_hook): records a producer still holds, emitted before
// the last flush. Set once, before the producer has anything to hand over.
static void (*finish_hook)(bool crashed);

// For the capture library's NVTX handler, its one user (declared in probe/inject/capture.h, the
// capture library's header). hook runs at exit, after every exit handler of the program and before
// the spool file is closed (crashed false), and on a fatal signal, in the crashing thread, before
// the buffer is written out (crashed true: it may only emit, neither allocate nor wait on a lock).
// The spool file is opened now, when recording is on: a crash before the producer's first record
// (inside the first range) must find one to write to, as it can open none then.
void amp_record_set_finish_hook(void (*hook)(bool crashed));
void amp_record_set_finish_hook(void (*hook)(bool crashed)) {
    finish_hook = hook;
    if (amp_record_trace_mask && __atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != SPOOL_READY)
        spool_open();
}

// A fatal signal (SIGSEGV, SIGABRT from an assert, ...): what the buffer holds goes to the spool
// file before the process dies of it, so a crash loses none of what it recorded (else up to the
// last 100 ms), the finish hook's records first. SA_RESETHAND has put the default back; raising
// the signal again ends the process as it would have ended. Skipped in a thread that holds the
// recorder's locks (it crashed in here: nothing is safe to write). The locks it takes (and the
// hook's emits) are not async-signal-safe by POSIX's list; what makes them reasonable is that
// the process dies anyway, and that the two locks it takes are held by another thread only
// across encoding a record or a write(), never across a malloc(): a crash inside the allocator
// does not leave them held for good.
static void on_fatal_signal(int sig) {
    if (!locks_held && __atomic_load_n(&g.state, __ATOMIC_ACQUIRE) == SPOOL_READY) {
        if (finish_hook) finish_hook(true);
        spool_flush();
    }
    raise(sig);
}

// Only where the program left the default: its own handlers (Python's faulthandler, a
// debugger's, a runtime's) are not taken over.
static void catch_fatal_signals(void) {
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++) {
        struct sigaction old;
        if (sigaction(fatal[i], NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
            old.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa = {.sa_handler = on_fatal_signal, .sa_flags = SA_RESETHAND};
        sigemptyset(&sa.sa_mask);
        sigaction(fatal[i], &sa, NULL);
    }
}

static bool hooks_installed; // (else nothing was recorded: nothing to finish)

static void hooks_install(void) {
    hooks_installed = true;
    cond_init();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    catch_fatal_signals();
}

static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

// AMPPROBE_TRACE under the launcher (amp_parse_trace; it sets it to --trace's list); unset or
// empty: all; anything else all, said on stderr.
static unsigned trace_of(const char *s) {
    const unsigned all = AMP_TRACE_AMP | AMP_TRACE_CUDA | AMP_TRACE_NVTX;
    unsigned mask = all;
    if (s && *s && !amp_parse_trace(s, &mask))
        fprintf(stderr,
                "ampprobe: AMPPROBE_TRACE='%s' is not a comma list of amp, cuda, nvtx; "
                "recording all of them\n",
                s);
    return mask;
}

// The categories a program that writes its own database (AMPPROBE_OUT=out) records, read from
// AMPPROBE_TRACE=trace: amp alone (unset or empty too), as CUDA and NVTX capture is the injection
// library's, which only `ampprobe run` loads (probe/inject/capture.h). A list that names cuda or
// nvtx is said once on stderr: with amp in it, amp is recorded; without, nothing (no database
// either). A value that is no list is said and amp recorded.
static unsigned out_trace_of(const char *out, const char *trace) {
    unsigned asked = AMP_TRACE_AMP;
    if (trace && *trace && !amp_parse_trace(trace, &asked)) {
        fprintf(stderr,
                "ampprobe: AMPPROBE_TRACE='%s' is not a comma list of amp, cuda, nvtx; "
                "recording amp\n",
                trace);
        return AMP_TRACE_AMP;
    }
    if (!(asked & ~(unsigned)AMP_TRACE_AMP)) return asked;
    fprintf(stderr,
            "ampprobe: AMPPROBE_OUT=%s with AMPPROBE_TRACE=%s: a program that writes its own "
            "database records only amp (CUDA and NVTX capture need ampprobe run); recording %s\n",
            out, trace, asked & AMP_TRACE_AMP ? "amp only" : "off");
    return asked & AMP_TRACE_AMP;
}

// Reads the environment when the library is loaded: before main() where the writer is part of
// the program (libampcore linked in), but only when it is dlopen()ed for libamprecord.so (Python
// imports the bridge) and the capture library (NVTX loads it at the program's first NVTX call,
// the CUDA driver at cuInit). That is why the writer finishes in record_unload, not in an exit
// handler registered here: registered that late, it would run before the program's earlier
// handlers, and what they record would be lost.
__attribute__((constructor)) static void record_load(void) {
    const char *dir = getenv("AMPPROBE_SPOOL_DIR"), *out = getenv("AMPPROBE_OUT");
    if (dir && *dir) {
        g.dir = amp_xstrdup(dir);
    } else if (out && *out) {
        // relative to the directory the program starts in, whatever it changes to later
        char cwd[PATH_MAX];
        g.out =
            out[0] != '/' && getcwd(cwd, sizeof cwd) ? amp_path_join(cwd, out) : amp_xstrdup(out);
    } else {
        return;
    }
    pthread_once(&hooks_once, hooks_install);
    const char *trace = getenv("AMPPROBE_TRACE");
    amp_record_trace_mask = g.out ? out_trace_of(out, trace) : trace_of(trace);
}

// At exit, the finish hook's records, then the rest written out and the spool closed (and an
// AMPPROBE_OUT database finished). From the destructor: exit() runs it once every exit handler
// has run (_dl_fini, the dynamic linker's own exit handler, registered before any other; it also
// runs at dlclose), whenever the library was loaded; nothing of the program runs after it but
// other libraries' destructors. Not run by _exit(), by exec() or by a fatal signal.
__attribute__((destructor)) static void record_unload(void) {
    if (!hooks_installed) return;
    if (finish_hook) finish_hook(false);
    amp_record_stop();
}

// Which recording this process is in: changes when recording stops (and so when it starts again).
static uint64_t recording = 1;

uint64_t amp_record_session(void) {
    return __atomic_load_n(&recording, __ATOMIC_RELAXED);
}

amp_status amp_record_start(const char *spool_dir) {
    amp_clear_error();
    if (!spool_dir || !spool_dir[0])
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_record_start: spool_dir is %s",
                             spool_dir ? "empty" : "NULL");
    amp_record_stop();
    pthread_once(&hooks_once, hooks_install);
    lock(&g.init_lock);
    free(g.dir);
    free(g.out);
    g.dir = amp_xstrdup(spool_dir);
    g.out = NULL;
    amp_status st = open_locked();
    if (st == AMP_OK) amp_record_trace_mask = AMP_TRACE_AMP | AMP_TRACE_CUDA | AMP_TRACE_NVTX;
    unlock(&g.init_lock);
    return st;
}

void amp_record_flush(void) {
    if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) == SPOOL_READY) spool_flush();
}

void amp_record_stop(void) {
    lock(&g.init_lock);
    __atomic_fetch_add(&recording, 1, __ATOMIC_RELAXED);
    amp_record_trace_mask = 0;
    close_locked();
    unlock(&g.init_lock);
}

// ---------------------------------------------------------------------------------------------
// Emitting

void amp_record_last_words(const char *msg) {
    if (!amp_record_enabled() || locks_held) return;
    amp_record_meta(&(amp_rec_meta){.key = "abort", .value = msg});
    if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) == SPOOL_READY) spool_flush();
}

static void emit(amp_rec_type type, const void *rec) {
    if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != SPOOL_READY && !spool_open()) return;
    lock(&g.lock);
    size_t n;
    while ((n = amp_rec_encode(type, rec, g.buf + g.len, BUF_BYTES - g.len)) > BUF_BYTES - g.len) {
        unlock(&g.lock); // full: write it out and encode again
        spool_flush();
        lock(&g.lock);
    }
    g.len += n;
    unlock(&g.lock);
}

#define EMIT_FN(fn, T, TYPE, WANTED)                                                               \
    void fn(const T *r) {                                                                          \
        if (amp_record_trace_mask & (WANTED)) emit(TYPE, r);                                       \
    }

#define ANY (AMP_TRACE_AMP | AMP_TRACE_CUDA | AMP_TRACE_NVTX)
EMIT_FN(amp_record_meta, amp_rec_meta, AMP_REC_META, ANY)
EMIT_FN(amp_record_layer, amp_rec_layer, AMP_REC_LAYER, AMP_TRACE_AMP)
EMIT_FN(amp_record_step, amp_rec_step, AMP_REC_STEP, AMP_TRACE_AMP)
EMIT_FN(amp_record_scale, amp_rec_scale, AMP_REC_SCALE, AMP_TRACE_AMP)
EMIT_FN(amp_record_tensor_stats, amp_rec_tensor_stats, AMP_REC_TENSOR_STATS, AMP_TRACE_AMP)
EMIT_FN(amp_record_op, amp_rec_op, AMP_REC_OP, AMP_TRACE_AMP)
EMIT_FN(amp_record_event, amp_rec_event, AMP_REC_EVENT, AMP_TRACE_AMP)
EMIT_FN(amp_record_string, amp_rec_string, AMP_REC_STRING, ANY)
EMIT_FN(amp_record_kernel, amp_rec_kernel, AMP_REC_KERNEL, AMP_TRACE_CUDA)
EMIT_FN(amp_record_memcpy, amp_rec_memcpy, AMP_REC_MEMCPY, AMP_TRACE_CUDA)
EMIT_FN(amp_record_memset, amp_rec_memset, AMP_REC_MEMSET, AMP_TRACE_CUDA)
EMIT_FN(amp_record_runtime, amp_rec_runtime, AMP_REC_RUNTIME, AMP_TRACE_CUDA)
EMIT_FN(amp_record_sync, amp_rec_sync, AMP_REC_SYNC, AMP_TRACE_CUDA)
EMIT_FN(amp_record_nvtx, amp_rec_nvtx, AMP_REC_NVTX, AMP_TRACE_NVTX)
EMIT_FN(amp_record_gpu_info, amp_rec_gpu_info, AMP_REC_GPU_INFO, AMP_TRACE_CUDA)
EMIT_FN(amp_record_gpu_metric, amp_rec_gpu_metric, AMP_REC_GPU_METRIC, AMP_TRACE_CUDA)

void amp_record_stats_of(amp_rec_tensor_stats *r, const amp_stats *s) {
    r->numel = s->numel;
    r->min = s->min;
    r->max = s->max;
    r->amax = s->amax;
    r->n_nan = s->n_nan;
    r->n_posinf = s->n_posinf;
    r->n_neginf = s->n_neginf;
    r->n_overflow = s->n_overflow;
    r->n_underflow = s->n_underflow;
    r->n_zero = s->n_zero;
    amp_record_tensor_stats(r);
}

void amp_record_tensor_stats_many(int64_t step, const char *target_dtype, int n,
                                  amp_rec_stats_entry *entries, const amp_stats *stats,
                                  amp_rec_stats_summary *summary) {
    amp_rec_stats_summary sum = {.zero_jump = -1};
    for (int i = 0; i < n; i++) {
        amp_rec_stats_entry *e = &entries[i];
        if ((int)e->kind < 0) continue; // superseded
        amp_stats s = stats[i];
        amp_stats_finish(&s);
        amp_record_stats_of(&(amp_rec_tensor_stats){.step = step,
                                                    .layer_id = e->layer_id,
                                                    .op = e->op,
                                                    .kind = e->kind,
                                                    .dtype = e->dtype,
                                                    .target_dtype = target_dtype},
                            &s);
        if ((unsigned)e->kind < 4) // (counts not computed are -1)
            sum.nonfinite[e->kind] += (s.n_nan > 0 ? s.n_nan : 0) +
                                      (s.n_posinf > 0 ? s.n_posinf : 0) +
                                      (s.n_neginf > 0 ? s.n_neginf : 0);
        if (e->kind == AMP_STATS_ACTIVATION && e->dtype && !strcmp(e->dtype, "f32") &&
            s.n_overflow > 0)
            sum.f32_overflow += s.n_overflow;
        if (e->kind == AMP_STATS_WEIGHT_GRAD) {
            sum.weight_grad_sumsq += s.sumsq;
            sum.weight_grads++;
        }
        if (e->kind == AMP_STATS_ACTIVATION && s.numel > 0 && s.n_zero >= 0) {
            const float share = (float)s.n_zero / (float)s.numel;
            if (sum.zero_jump < 0 && e->zero_share >= 0 && e->zero_share < 0.01f && share >= 0.05f)
                sum.zero_jump = i;
            e->zero_share = share;
        }
    }
    if (summary) *summary = sum;
}
