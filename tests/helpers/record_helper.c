/*
 * record_helper.c — a tiny program that records through amp-record.h the way an instrumented
 * training program does, for the `launcher` and `collector` suites. The first argument picks
 * what it does:
 *
 *   steps N [MS]    N steps (layer, step, scale, tensor stats, op, event), MS ms apart; exit 0
 *   crash N MS      steps MS ms apart, then SIGKILL to itself after step N
 *   abort N         N steps, then libampcore's abort (a broken invariant: amp_abort)
 *   abort-busy N    the same while a second thread records and flushes without a pause
 *   wait            one META record, "ready" on stdout, then sleep until a signal ends it
 *   exit CODE       one META record, then exit(CODE)
 *   enabled         print amp_record_enabled() (1 or 0)
 *   error           a failed call's message set, then a step (the first record opens the spool:
 *                   under AMPPROBE_OUT the collector too) and amp_record_stop; prints whether
 *                   amp_last_error() still held the message after each ("1 1")
 *   outlive FILE    one step, then fork a child that records a step every 10 ms for at most
 *                   3 s, writing to FILE (created by it) "stopped" once recording has ended
 *                   or "recording" at the end, and live 1 s more; the parent exits at once
 *   two LIB N MS    N steps MS ms apart, each recorded also through LIB (libamprecord.so, a
 *                   second copy of the recorder in this process, as the PyTorch bridge's)
 *   capture N       N steps, each also with what the capture library records of a CUDA
 *                   program (under AMPPROBE_TRACE=amp,cuda,nvtx): a kernel launched in the
 *                   NVTX range of its layer and op, a copy, a memset, a synchronisation, and
 *                   the device's facts and a counter (the seeds of tests/fuzz)
 *
 * Every mode first records META stats_every = $AMPPROBE_STATS_EVERY when that is set.
 */
#include "amp-impl.h"
#include "amp-record.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void one_step(int64_t step) {
    int64_t t0 = amp_record_now_ns();
    amp_record_op(&(amp_rec_op){.step = step,
                                .layer_id = 1,
                                .op = "linear",
                                .phase = AMP_PHASE_FWD,
                                .in_dtypes = "f16,f16",
                                .out_dtype = "f16",
                                .policy = "lower_precision_fp",
                                .shapes = "(8, 4),(4, 4)",
                                .flops = 256,
                                .bytes = 160,
                                .start_ns = t0,
                                .end_ns = t0 + 1000});
    amp_record_tensor_stats(&(amp_rec_tensor_stats){.step = step,
                                                    .layer_id = 1,
                                                    .op = "linear",
                                                    .kind = AMP_STATS_ACTIVATION,
                                                    .dtype = "f16",
                                                    .target_dtype = "f16",
                                                    .numel = 32,
                                                    .min = -1,
                                                    .max = 2,
                                                    .amax = 2,
                                                    .n_nan = 0,
                                                    .n_posinf = 0,
                                                    .n_neginf = 0,
                                                    .n_overflow = 0,
                                                    .n_underflow = 1,
                                                    .n_zero = 3});
    amp_record_scale(&(amp_rec_scale){.step = step,
                                      .scale_before = 65536,
                                      .scale_after = 65536,
                                      .found_inf = 0,
                                      .growth_tracker = (int32_t)step + 1});
    amp_record_step(&(amp_rec_step){.step = step,
                                    .start_ns = t0,
                                    .end_ns = amp_record_now_ns(),
                                    .loss = 2.0 / (double)(step + 1),
                                    .grad_norm = NAN});
}

// What the capture library records around step's linear op on a GPU (mode `capture`).
static void capture_step(int64_t step) {
    const int64_t t0 = amp_record_now_ns(), corr = 2 * step + 1;
    if (step == 0) {
        amp_record_string(&(amp_rec_string){.id = 1, .value = "ampcore"});
        amp_record_gpu_info(&(amp_rec_gpu_info){.id = 0,
                                                .cu_device = 0,
                                                .name = "NVIDIA H200",
                                                .bus_location = "0000:00:1e.0",
                                                .uuid = "GPU-00000000-0000-0000-0000-000000000000",
                                                .chip_name = "GH100",
                                                .is_discrete = 1,
                                                .l2_cache_size = 52428800,
                                                .total_memory = 150754820096,
                                                .memory_bandwidth = 4800000000000,
                                                .clock_rate = 1980000000,
                                                .sm_count = 132,
                                                .compute_major = 9,
                                                .compute_minor = 0,
                                                .max_threads_per_block = 1024,
                                                .max_registers_per_block = 65536,
                                                .max_registers_per_sm = 65536,
                                                .max_shmem_per_block = 49152,
                                                .max_shmem_per_block_optin = 232448,
                                                .max_shmem_per_sm = 233472,
                                                .threads_per_warp = 32,
                                                .async_engines = 4,
                                                .max_warps_per_sm = 64,
                                                .max_blocks_per_sm = 32});
    }
    amp_record_runtime(&(amp_rec_runtime){.start_ns = t0,
                                          .end_ns = t0 + 3000,
                                          .tid = 7,
                                          .correlation_id = corr,
                                          .name = "cudaLaunchKernel_v7000"});
    amp_record_kernel(&(amp_rec_kernel){.start_ns = t0 + 5000,
                                        .end_ns = t0 + 25000,
                                        .device_id = 0,
                                        .context_id = 1,
                                        .stream_id = 7,
                                        .green_context_id = -1,
                                        .correlation_id = corr,
                                        .name = "_Z11gemm_kernelPKfS0_Pfi",
                                        .launch_type = -1,
                                        .cache_config = -1,
                                        .registers_per_thread = 64,
                                        .grid_x = 132,
                                        .grid_y = 1,
                                        .grid_z = 1,
                                        .block_x = 256,
                                        .block_y = 1,
                                        .block_z = 1,
                                        .static_shared_memory = 16384,
                                        .local_memory_total = -1,
                                        .grid_id = corr,
                                        .shared_memory_executed = -1,
                                        .shared_memory_limit_config = -1,
                                        .graph_node_id = -1});
    amp_record_nvtx(&(amp_rec_nvtx){.start_ns = t0 - 1000,
                                    .end_ns = t0 + 4000,
                                    .type = AMP_NVTX_PUSH_POP,
                                    .range_id = -1,
                                    .category = -1,
                                    .color = -1,
                                    .text = "fc.linear/linear",
                                    .domain_id = 1,
                                    .tid = 7,
                                    .end_tid = -1});
    amp_record_memcpy(&(amp_rec_memcpy){.start_ns = t0 + 26000,
                                        .end_ns = t0 + 30000,
                                        .device_id = 0,
                                        .context_id = 1,
                                        .stream_id = 7,
                                        .green_context_id = -1,
                                        .correlation_id = corr + 1,
                                        .bytes = 4096,
                                        .copy_kind = 2,
                                        .src_kind = 2,
                                        .dst_kind = 1,
                                        .src_device_id = -1,
                                        .src_context_id = -1,
                                        .dst_device_id = -1,
                                        .dst_context_id = -1,
                                        .migration_cause = -1,
                                        .graph_node_id = -1,
                                        .virtual_address = -1});
    amp_record_memset(&(amp_rec_memset){.start_ns = t0 + 31000,
                                        .end_ns = t0 + 32000,
                                        .device_id = 0,
                                        .context_id = 1,
                                        .stream_id = 7,
                                        .green_context_id = -1,
                                        .correlation_id = -1,
                                        .bytes = 1024,
                                        .graph_node_id = -1,
                                        .mem_kind = 2});
    amp_record_sync(&(amp_rec_sync){.start_ns = t0 + 32000,
                                    .end_ns = t0 + 40000,
                                    .device_id = 0,
                                    .context_id = 1,
                                    .stream_id = 7,
                                    .green_context_id = -1,
                                    .correlation_id = -1,
                                    .sync_type = 3,
                                    .event_id = -1});
    amp_record_gpu_metric(&(amp_rec_gpu_metric){.device_id = 0,
                                                .start_ns = t0,
                                                .end_ns = t0 + 40000,
                                                .metric = "dram__bytes_read.sum",
                                                .value = 1e6});
}

// Keeps the recorder's locks busy: records and flushes until the process ends.
static void *busy_recorder(void *arg) {
    (void)arg;
    char value[512];
    memset(value, 'x', sizeof value - 1);
    value[sizeof value - 1] = 0;
    for (;;) {
        for (int i = 0; i < 64; i++)
            amp_record_meta(&(amp_rec_meta){"busy", value});
        amp_record_flush();
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    const char *every = getenv("AMPPROBE_STATS_EVERY");
    if (every) amp_record_meta(&(amp_rec_meta){"stats_every", every});
    if (strcmp(mode, "outlive") == 0 && argc > 2) {
        amp_record_step(&(amp_rec_step){.step = 0, .start_ns = 1, .end_ns = 2});
        if (fork() != 0) return 0;
        if (!freopen("/dev/null", "w", stdout)) return 1; // (the caller reads to the parent's end)
        int i = 1;
        for (; i < 300 && amp_record_enabled(); i++) {
            amp_record_step(&(amp_rec_step){.step = i, .start_ns = 1, .end_ns = 2});
            struct timespec ms10 = {0, 10000000};
            nanosleep(&ms10, NULL);
        }
        char tmp[4096]; // written beside it, then renamed: FILE appears with its word in it
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
        FILE *f = fopen(tmp, "w");
        if (f) fputs(amp_record_enabled() ? "recording" : "stopped", f), fclose(f);
        if (f) rename(tmp, argv[2]);
        struct timespec second = {1, 0}; // (alive a while after: what it still holds shows)
        nanosleep(&second, NULL);
        return 0;
    }
    if (strcmp(mode, "error") == 0) {
        amp_set_error(AMP_ERR_INVALID_ARGUMENT, "the program's own");
        one_step(0);
        const bool after_step = strcmp(amp_last_error(), "the program's own") == 0;
        amp_record_stop();
        printf("%d %d\n", after_step, strcmp(amp_last_error(), "the program's own") == 0);
        return 0;
    }
    if (strcmp(mode, "enabled") == 0) {
        printf("%d\n", amp_record_enabled() ? 1 : 0);
        return 0;
    }
    if (strcmp(mode, "exit") == 0 && argc > 2) {
        amp_record_meta(&(amp_rec_meta){"mode", "exit"});
        return atoi(argv[2]);
    }
    if (strcmp(mode, "wait") == 0) {
        amp_record_meta(&(amp_rec_meta){"mode", "wait"});
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    if (strcmp(mode, "two") == 0 && argc > 4) {
        void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
        void (*step_there)(const amp_rec_step *) =
            lib ? (void (*)(const amp_rec_step *))dlsym(lib, "amp_record_step") : NULL;
        if (!step_there) {
            fprintf(stderr, "record_helper: %s: %s\n", argv[2], dlerror());
            return 3;
        }
        for (int i = 0, n = atoi(argv[3]); i < n; i++) {
            one_step(i);
            step_there(&(amp_rec_step){.step = i, .loss = 1.0, .grad_norm = NAN});
            sleep_ms(atoi(argv[4]));
        }
        return 0;
    }
    bool busy = strcmp(mode, "abort-busy") == 0, abort = busy || strcmp(mode, "abort") == 0;
    const bool assert_fails = strcmp(mode, "assert") == 0;
    const bool capture = strcmp(mode, "capture") == 0;
    if ((strcmp(mode, "steps") == 0 || strcmp(mode, "crash") == 0 || capture || assert_fails ||
         abort) &&
        argc > 2) {
        int n = atoi(argv[2]), ms = argc > 3 ? atoi(argv[3]) : 0;
        amp_record_layer(&(amp_rec_layer){.id = 0, .parent_id = -1, .name = "fc"});
        amp_record_layer(&(amp_rec_layer){.id = 1, .parent_id = 0, .name = "fc.linear"});
        amp_record_event(&(amp_rec_event){.step = 0,
                                          .layer_id = 1,
                                          .op = "linear",
                                          .phase = AMP_PHASE_FWD,
                                          .kind = AMP_EVENT_UNDERFLOW,
                                          .severity = AMP_SEVERITY_WARNING,
                                          .count = 1,
                                          .value = NAN,
                                          .detail = "input range [-1, 2]"});
        pthread_t t;
        if (busy && pthread_create(&t, NULL, busy_recorder, NULL) != 0) return 3;
        for (int i = 0; i < n; i++) {
            if (capture) capture_step(i);
            one_step(i);
            if (ms > 0) sleep_ms(ms);
        }
        if (strcmp(mode, "crash") == 0) raise(SIGKILL);
        // as a failed assert() does (SIGABRT; a sanitizer build takes SIGSEGV over itself)
        if (assert_fails) raise(SIGABRT);
        if (abort) amp_abort("record_helper.c", 1, "a broken invariant, on purpose");
        return 0;
    }
    fprintf(stderr, "record_helper: unknown mode '%s'\n", mode);
    return 2;
}
