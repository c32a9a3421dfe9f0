/*
 * inject.c — CUPTI activity tracing inside the training process (capture.h).
 *
 * The CUDA driver dlopens this library (CUDA_INJECTION64_PATH) on the first cuInit of the
 * process and calls InitializeInjection before any context exists, so everything that follows
 * is seen. We subscribe to CUPTI (which reports another tool holding the one subscriber slot),
 * check that the loaded CUPTI is the one we were built against, and enable the activity kinds:
 * concurrent kernels, memcpy, memset, synchronisation, CUPTI overhead, devices, and the runtime
 * and driver API calls that launch, copy, set or synchronise (the rest are not recorded: a
 * PyTorch step makes several API calls per kernel). Each new context's device is described
 * from the driver (gpu-info.c). CUPTI hands filled buffers to
 * buffer_completed, which decodes them into the record stream (cupti-decode.h).
 *
 * Flushing: a thread of ours flushes completed buffers every FLUSH_EVERY_MS; an exit handler
 * stops it, forces out the rest and writes the counts (records, dropped, incomplete, CUPTI's
 * overhead) into META. A forked child inherits that handler and CUPTI's buffers but not the
 * thread: the pid check keeps it from flushing (and duplicating) the parent's records.
 *
 * When recording ends under the program (its launcher was killed, the disk filled: the record
 * writer stops and says so), nothing would read what CUPTI records, so CUPTI leaves the process:
 * the flush thread asks for the API callbacks and stops, and the next CUDA call's exit callback
 * flushes and calls cuptiFinalize (where CUPTI's own attach/detach sample calls it); the program
 * then launches as it would untraced.
 *
 * AMPPROBE_CUPTI_SKIP (for measuring what each part costs, not for users): a comma-separated
 * list of what to leave out: api (the API call records), sync, memcpy, memset, overhead, device
 * (those activity kinds; device records are TARGET_INFO_GPU's second source), flush (the
 * periodic flush; buffers come back when full and at exit).
 *
 * Nothing here may take the program down: every CUPTI call is checked, a failure prints one
 * line naming the call and leaves the program running untraced, and InitializeInjection always
 * returns 1 (what the driver does with 0 is undocumented). No CUDA call is made here (we run
 * inside cuInit), and cuptiFinalize is never called at exit (it races the program's threads).
 */
#define _GNU_SOURCE
#include "capture.h"
#include "cupti-decode.h"
#include "kept-calls.h"

#include <cupti.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUFFER_BYTES (8u << 20) // one activity buffer CUPTI fills
#define FLUSH_EVERY_MS 100

static struct {
    pthread_mutex_t lock; // initialisation
    bool initialized;
    pid_t pid; // the process that set tracing up
    CUpti_SubscriberHandle subscriber;
    pthread_t flusher;
    pthread_mutex_t timer_lock;
    pthread_cond_t wake;
    bool flusher_running, stop;
    bool counters;          // --counters: PM sampling (counters.c), driven by the flush thread
    bool no_periodic_flush; // AMPPROBE_CUPTI_SKIP=flush
    const char *runtime_names[CUPTI_RUNTIME_TRACE_CBID_SIZE]; // of the recorded API calls
    const char *driver_names[CUPTI_DRIVER_TRACE_CBID_SIZE];
    amp_capture_stats stats;
    int64_t dropped; // atomic
    int detach;      // atomic: 1 when recording has ended, 2 once CUPTI is leaving the process
} g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .timer_lock = PTHREAD_MUTEX_INITIALIZER,
};

// Runs a CUPTI call; on failure prints what failed and evaluates to false.
#define CUPTI_OK(call) cupti_ok((call), #call)

static bool cupti_ok(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS) return true;
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown error";
    fprintf(stderr, "ampprobe: CUPTI: %s: %s (%d)\n", what, s, (int)r);
    return false;
}

static void meta(const char *key, const char *value) {
    amp_record_meta(&(amp_rec_meta){.key = key, .value = value});
}

static void meta_i64(const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    meta(key, buf);
}

// Says once why the program runs untraced, on stderr and in META.
static void tracing_off(const char *why) {
    fprintf(stderr, "ampprobe: CUDA tracing disabled: %s\n", why);
    meta("cuda_capture", why);
}

// ---------------------------------------------------------------------------------------------
// Names of the recorded API calls

static const char *api_name(bool driver, uint32_t cbid) {
    if (driver) return cbid < CUPTI_DRIVER_TRACE_CBID_SIZE ? g.driver_names[cbid] : NULL;
    return cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE ? g.runtime_names[cbid] : NULL;
}

static uint64_t devices_seen;      // bit per device ordinal < 64 already described (atomic)
static uint64_t counters_to_start; // bit per device whose counters the flush thread is to start

// Describes a device from the driver once: on its first context, or when CUPTI's DEVICE record
// comes first (that record then goes unused, unless the driver cannot say).
static bool describe_device(uint32_t ordinal) {
    if (ordinal >= 64) return false;
    uint64_t bit = 1ull << ordinal;
    if (__atomic_fetch_or(&devices_seen, bit, __ATOMIC_RELAXED) & bit) return true;
    if (g.counters) __atomic_fetch_or(&counters_to_start, bit, __ATOMIC_RELAXED);
    if (amp_capture_gpu_info_emit(ordinal)) return true;
    __atomic_fetch_and(&devices_seen, ~bit, __ATOMIC_RELAXED);
    return false;
}

static const amp_capture_names names = {
    .api_name = api_name, .demangle = amp_capture_demangle, .describe_device = describe_device};

// Enables activity records for the kept calls of one API (kept-calls.h; the kind itself stays
// off). Returns how many calls are recorded; one this CUPTI refuses is left out.
static int enable_api(CUpti_CallbackDomain domain, const char **table, uint32_t size) {
    int n = 0;
    for (uint32_t cbid = 1; cbid < size; cbid++) {
        const char *name = NULL;
        if (!amp_call_kept(domain, cbid, &name)) continue;
        CUptiResult r = domain == CUPTI_CB_DOMAIN_RUNTIME_API
                            ? cuptiActivityEnableRuntimeApi(cbid, 1)
                            : cuptiActivityEnableDriverApi(cbid, 1);
        if (r != CUPTI_SUCCESS) continue;
        table[cbid] = name;
        n++;
    }
    return n;
}

// ---------------------------------------------------------------------------------------------
// Buffers

// Buffers go to CUPTI already zeroed (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER): else CUPTI
// zeroes each one itself, 8 MiB in the thread that needed it — the program's, every time the
// periodic flush hands back a partly filled buffer. A completed buffer is zeroed by the thread
// that decoded it (ours, or CUPTI's) and kept for the next request, up to POOL_BUFFERS.
#define POOL_BUFFERS 4
static struct {
    pthread_mutex_t lock;
    uint8_t *free[POOL_BUFFERS];
    int n;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    pthread_mutex_lock(&pool.lock);
    *buffer = pool.n ? pool.free[--pool.n] : NULL;
    pthread_mutex_unlock(&pool.lock);
    if (!*buffer) *buffer = calloc(1, BUFFER_BYTES); // NULL: CUPTI drops records, counts them
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0; // as many as fit
}

// Zeroes a buffer and keeps it for the next request (or frees it).
static void buffer_recycle(uint8_t *buffer, size_t size) {
    memset(buffer, 0, size);
    pthread_mutex_lock(&pool.lock);
    bool kept = pool.n < POOL_BUFFERS;
    if (kept) pool.free[pool.n++] = buffer;
    pthread_mutex_unlock(&pool.lock);
    if (!kept) free(buffer);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    if (getpid() == g.pid) { // a forked child's copy of the parent's buffer is the parent's
        CUpti_Activity *rec = NULL;
        while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
            amp_capture_emit(rec, &names, &g.stats);
        size_t dropped = 0;
        if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
            __atomic_add_fetch(&g.dropped, (int64_t)dropped, __ATOMIC_RELAXED);
        buffer_recycle(buffer, size);
        return;
    }
    free(buffer);
}

// ---------------------------------------------------------------------------------------------
// The flush thread and the exit handler

// Recording has ended under the program: asks the next CUDA call's exit callback to take CUPTI
// out of the process (on_callback); true once asked (this thread then makes no more CUPTI calls:
// one after cuptiFinalize would start CUPTI again).
static bool detach_requested(void) {
    if (__atomic_load_n(&g.detach, __ATOMIC_ACQUIRE)) return true;
    if (amp_record_tracing(AMP_TRACE_CUDA)) return false;
    if (g.counters) amp_counters_stop();
    __atomic_store_n(&g.detach, 1, __ATOMIC_RELEASE);
    cuptiEnableDomain(1, g.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiEnableDomain(1, g.subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
    return true;
}

// Every FLUSH_EVERY_MS: CUPTI's buffers, then the counter samples. With --counters it also looks
// every TICK_MS for a device that got its first context, so that sampling starts soon after.
#define TICK_MS 10
static void *flusher_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g.timer_lock);
    for (int tick = 1; !g.stop && !detach_requested(); tick++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (g.counters ? TICK_MS : FLUSH_EVERY_MS) * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        if (pthread_cond_timedwait(&g.wake, &g.timer_lock, &ts) == 0) continue; // woken: stop?
        bool flush = !g.counters || tick % (FLUSH_EVERY_MS / TICK_MS) == 0;
        pthread_mutex_unlock(&g.timer_lock);
        if (flush && !g.no_periodic_flush)
            cuptiActivityFlushAll(0); // completed buffers, partly filled ones too
        if (g.counters) {
            uint64_t fresh = __atomic_exchange_n(&counters_to_start, 0, __ATOMIC_RELAXED);
            for (uint32_t d = 0; fresh; d++, fresh >>= 1)
                if (fresh & 1) amp_counters_device_seen(d);
            if (flush) amp_counters_poll();
        }
        pthread_mutex_lock(&g.timer_lock);
    }
    pthread_mutex_unlock(&g.timer_lock);
    return NULL;
}

static bool flusher_start(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g.wake, &a);
    pthread_condattr_destroy(&a);
    sigset_t all, old; // the program's signals are not for this thread
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&g.flusher, NULL, flusher_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) fprintf(stderr, "ampprobe: CUPTI flush thread: %s\n", strerror(rc));
    return rc == 0;
}

static void at_exit(void) {
    if (getpid() != g.pid) return; // a forked child: the buffers are the parent's
    if (__atomic_load_n(&g.detach, __ATOMIC_ACQUIRE)) return; // nothing is recorded any more
    if (g.flusher_running) {
        pthread_mutex_lock(&g.timer_lock);
        g.stop = true;
        pthread_cond_broadcast(&g.wake);
        pthread_mutex_unlock(&g.timer_lock);
        pthread_join(g.flusher, NULL);
        g.flusher_running = false;
    }
    CUPTI_OK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    if (g.counters) amp_counters_stop(); // after the kernels: nothing of theirs hangs on it
    const amp_capture_stats *s = &g.stats;
    meta_i64("cupti_kernels", s->kernels);
    meta_i64("cupti_memcpys", s->memcpys);
    meta_i64("cupti_memsets", s->memsets);
    meta_i64("cupti_api_calls", s->api_calls);
    meta_i64("cupti_syncs", s->syncs);
    meta_i64("cupti_dropped", g.dropped);
    meta_i64("cupti_incomplete", s->incomplete);
    meta_i64("cupti_overhead_records", s->overhead_records);
    meta_i64("cupti_overhead_ns", s->overhead_ns);
    if (g.dropped > 0)
        fprintf(stderr, "ampprobe: CUPTI dropped %lld activity records (buffers full)\n",
                (long long)g.dropped);
}

// ---------------------------------------------------------------------------------------------
// Setting up

// Fatal CUPTI errors; device facts when a context is created; a flush before one goes away; and
// once recording has ended, the exit of a CUDA call takes CUPTI out of the process.
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data) {
    (void)userdata;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
        int asked = 1;
        if (((const CUpti_CallbackData *)data)->callbackSite == CUPTI_API_EXIT &&
            __atomic_compare_exchange_n(&g.detach, &asked, 2, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); // (the writer drops them)
            CUPTI_OK(cuptiFinalize());
        }
    } else if (domain == CUPTI_CB_DOMAIN_STATE && cbid == CUPTI_CBID_STATE_FATAL_ERROR) {
        const CUpti_StateData *s = data;
        fprintf(stderr, "ampprobe: CUPTI fatal error %d: %s\n", (int)s->notification.result,
                s->notification.message ? s->notification.message : "");
    } else if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
        const CUpti_ResourceData *r = data;
        uint32_t dev = 0;
        if (cuptiGetDeviceId(r->context, &dev) == CUPTI_SUCCESS) describe_device(dev);
    } else if (domain == CUPTI_CB_DOMAIN_RESOURCE &&
               cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
        cuptiActivityFlushAll(0);
    }
}

// Without the first, nothing is worth recording; the others are recorded where CUPTI can.
static const CUpti_ActivityKind kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,   CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_OVERHEAD, CUPTI_ACTIVITY_KIND_DEVICE,
};
static const char *const kind_tokens[] = {"kernel", "memcpy",   "memset",
                                          "sync",   "overhead", "device"};
_Static_assert(sizeof kind_tokens / sizeof *kind_tokens == sizeof kinds / sizeof *kinds,
               "one token per kind");

// Whether AMPPROBE_CUPTI_SKIP's list names token.
static bool skipped(const char *token) {
    const char *list = getenv("AMPPROBE_CUPTI_SKIP");
    size_t n = strlen(token);
    for (const char *p = list; p && *p; p += strcspn(p, ","), p += *p == ',')
        if (strncmp(p, token, n) == 0 && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

static void tracing_start(void) {
    uint32_t version = 0;
    char why[256];
    if (!CUPTI_OK(cuptiGetVersion(&version))) {
        tracing_off("cuptiGetVersion failed");
        return;
    }
    meta_i64("cupti_version", version);
    if (version / 10000 != CUPTI_API_VERSION / 10000) {
        snprintf(why, sizeof why,
                 "the loaded CUPTI has API version %u, this library was built against %u "
                 "(record layouts differ between CUDA major versions)",
                 version, (unsigned)CUPTI_API_VERSION);
        tracing_off(why);
        return;
    }
    if (version != CUPTI_API_VERSION)
        fprintf(stderr, "ampprobe: note: CUPTI API version %u, built against %u\n", version,
                (unsigned)CUPTI_API_VERSION);

    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64] = "";
    CUpti_SubscriberParams p = {.structSize = CUpti_SubscriberParams_STRUCT_SIZE,
                                .subscriberName = "ampprobe",
                                .oldSubscriberName = holder,
                                .oldSubscriberSize = sizeof holder};
    CUptiResult r = cuptiSubscribe_v2(&g.subscriber, on_callback, NULL, &p);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) { // before the generic message
        snprintf(why, sizeof why,
                 "another profiler (%s) holds CUPTI's subscriber slot; run without it to "
                 "record kernels",
                 holder[0] ? holder : "unnamed");
        tracing_off(why);
        return;
    }
    if (!cupti_ok(r, "cuptiSubscribe_v2")) {
        tracing_off("cuptiSubscribe_v2 failed (no usable CUDA driver?)");
        return;
    }
    g.pid = getpid();
    const char *counters = getenv("AMPPROBE_COUNTERS");
    g.counters = counters && *counters && strcmp(counters, "0") != 0;
    bool ok = CUPTI_OK(cuptiEnableDomain(1, g.subscriber, CUPTI_CB_DOMAIN_STATE)) &&
              CUPTI_OK(cuptiEnableCallback(1, g.subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                           CUPTI_CBID_RESOURCE_CONTEXT_CREATED)) &&
              CUPTI_OK(cuptiEnableCallback(1, g.subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                           CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)) &&
              CUPTI_OK(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)) &&
              CUPTI_OK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) &&
              CUPTI_OK(cuptiActivityEnable(kinds[0]));
    if (!ok) {
        cuptiUnsubscribe(g.subscriber);
        tracing_off("a CUPTI call failed (above)");
        return;
    }
    uint8_t zeroed = 1; // buffer_requested's buffers are; a CUPTI that cannot be told zeroes them
    size_t zeroed_size = sizeof zeroed;
    cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &zeroed_size,
                              &zeroed);
    for (size_t i = 1; i < sizeof kinds / sizeof *kinds; i++)
        if (!skipped(kind_tokens[i]))
            CUPTI_OK(cuptiActivityEnable(kinds[i])); // says which one is missing
    int apis = skipped("api") ? 0
                              : enable_api(CUPTI_CB_DOMAIN_RUNTIME_API, g.runtime_names,
                                           CUPTI_RUNTIME_TRACE_CBID_SIZE) +
                                    enable_api(CUPTI_CB_DOMAIN_DRIVER_API, g.driver_names,
                                               CUPTI_DRIVER_TRACE_CBID_SIZE);
    g.no_periodic_flush = skipped("flush");
    if (apis == 0 && !skipped("api"))
        fprintf(stderr, "ampprobe: CUPTI: no API call can be recorded: kernels are not joined to "
                        "their launch calls\n");
    meta_i64("cupti_api_functions", apis);
    g.flusher_running = flusher_start();
    atexit(at_exit); // runs before the record writer finishes (record.c: in its destructor)
    meta("cuda_capture", "cupti");
}

// Called by the CUDA driver inside the first cuInit of the process.
AMP_CAPTURE_EXPORT int InitializeInjection(void) {
    pthread_mutex_lock(&g.lock);
    if (!g.initialized) {
        g.initialized = true;
        if (amp_capture_wanted(AMP_TRACE_CUDA))
            tracing_start();
        else if (!getenv("AMPPROBE_SPOOL_DIR"))
            fprintf(stderr, "ampprobe: CUDA_INJECTION64_PATH names libampprobe_inject.so but the "
                            "program is not running under `ampprobe run`: nothing is recorded\n");
    }
    pthread_mutex_unlock(&g.lock);
    return 1;
}
