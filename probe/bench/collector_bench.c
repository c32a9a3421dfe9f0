/*
 * collector_bench.c — how fast records go from the emit functions into SQLite.
 *
 * For each workload it writes N records through amp-record.h into a spool directory (emit cost
 * per record), then lets a collector ingest them into a fresh database (records/s, the number
 * to hold against the >= 1M records/s budget) and finish it (indexes). Workloads: AMP
 * instrumentation (ops of a transformer block in turn, tensor stats and events with the per-step
 * records), CUPTI kernels of four names and launch configurations in turn, and a mix with
 * runtime API records.
 *
 *     collector_bench [N] [DIR] [WORKLOAD]   N records per workload (default 2000000), DIR for
 *                                            the files, WORKLOAD amp|kernel|mixed (default all)
 */
#include "amp-impl.h"
#include "amp-record.h"
#include "amp-store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define INGEST_BUDGET_NS (3600 * (int64_t)1000000000) // an hour: no poll of a run takes that

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// CPU seconds of this thread: on a busy machine a fairer measure than wall time.
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *const kernel_names[] = {
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_"
    "T1_",
    "_ZN7cutlass7Kernel2I72cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align8EEvNT_"
    "6ParamsE",
    "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NTN",
    "_ZN2at6native43_GLOBAL__N__softmax_forward_kernelIfEEvPT_PKS2_i",
};

typedef struct op_kind {
    const char *op, *in_dtypes, *out_dtype, *policy, *shapes;
} op_kind;
static const op_kind ops[] = {
    {"layer_norm", "f32,f32,f32", "f32", "fp32", "(64, 512),(512,),(512,)"},
    {"linear", "f16,f16,f16", "f16", "lower_precision_fp", "(64, 512),(1536, 512),(1536,)"},
    {"matmul", "f16,f16", "f16", "lower_precision_fp", "(8, 64, 64),(8, 64, 64)"},
    {"softmax", "f16", "f32", "fp32_set_opt_dtype", "(8, 64, 64)"},
    {"add", "f32,f16", "f32", "promote", "(64, 512),(64, 512)"},
    {"gelu", "f16", "f16", NULL, "(64, 2048)"},
};

static void emit_amp(int64_t i) {
    int64_t t = amp_record_now_ns();
    switch (i % 8) {
    case 0:
        amp_record_tensor_stats(&(amp_rec_tensor_stats){.step = i / 8,
                                                        .layer_id = (int32_t)(i % 64),
                                                        .op = "linear",
                                                        .kind = AMP_STATS_ACTIVATION,
                                                        .dtype = "f16",
                                                        .target_dtype = "f16",
                                                        .numel = 4096,
                                                        .min = -3.5,
                                                        .max = 4.25,
                                                        .amax = 4.25,
                                                        .n_nan = 0,
                                                        .n_posinf = 0,
                                                        .n_neginf = 0,
                                                        .n_overflow = 0,
                                                        .n_underflow = 12,
                                                        .n_zero = 40});
        break;
    case 7:
        amp_record_event(&(amp_rec_event){.step = i / 8,
                                          .layer_id = (int32_t)(i % 64),
                                          .op = "softmax",
                                          .phase = AMP_PHASE_FWD,
                                          .kind = AMP_EVENT_UNDERFLOW,
                                          .severity = AMP_SEVERITY_WARNING,
                                          .count = 12,
                                          .value = 1e-8,
                                          .detail = "input range [-3.5, 4.25]"});
        break;
    default: { // a transformer block's forward ops in turn
        const op_kind *o = &ops[i % (sizeof ops / sizeof *ops)];
        amp_record_op(&(amp_rec_op){.step = i / 8,
                                    .layer_id = (int32_t)(i % 64),
                                    .op = o->op,
                                    .phase = AMP_PHASE_FWD,
                                    .in_dtypes = o->in_dtypes,
                                    .out_dtype = o->out_dtype,
                                    .policy = o->policy,
                                    .shapes = o->shapes,
                                    .flops = 33554432,
                                    .bytes = 655360,
                                    .start_ns = t,
                                    .end_ns = t + 5000});
    }
    }
}

// Launch configurations of kernel_names, in turn.
static const struct {
    int regs, grid_x, grid_y, block_x, dyn_smem;
} launches[] = {{16, 2048, 1, 128, 0},
                {128, 64, 12, 128, 16384},
                {168, 132, 1, 384, 213188},
                {32, 8192, 1, 256, 0}};

static void emit_kernel(int64_t i) {
    int64_t t = amp_record_now_ns();
    const int k = (int)(i % 4);
    amp_record_kernel(&(amp_rec_kernel){.start_ns = t,
                                        .end_ns = t + 7000,
                                        .device_id = 0,
                                        .context_id = 1,
                                        .stream_id = 7,
                                        .green_context_id = -1,
                                        .correlation_id = i,
                                        .name = kernel_names[k],
                                        .launch_type = 0,
                                        .cache_config = 0,
                                        .registers_per_thread = launches[k].regs,
                                        .grid_x = launches[k].grid_x,
                                        .grid_y = launches[k].grid_y,
                                        .grid_z = 1,
                                        .block_x = launches[k].block_x,
                                        .block_y = 1,
                                        .block_z = 1,
                                        .static_shared_memory = 0,
                                        .dynamic_shared_memory = launches[k].dyn_smem,
                                        .local_memory_per_thread = 0,
                                        .local_memory_total = 0,
                                        .grid_id = i,
                                        .shared_memory_executed = 229376,
                                        .shared_memory_limit_config = -1,
                                        .graph_node_id = -1});
}

static void emit_mixed(int64_t i) {
    if (i % 2) {
        emit_kernel(i);
        return;
    }
    int64_t t = amp_record_now_ns();
    amp_record_runtime(&(amp_rec_runtime){.start_ns = t,
                                          .end_ns = t + 3000,
                                          .tid = 1234,
                                          .correlation_id = i,
                                          .name = "cudaLaunchKernel_v7000",
                                          .return_value = 0});
}

static void run(const char *name, void (*emit)(int64_t), int64_t n, const char *base) {
    char dir[4096], db[4200], prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/collector_bench-", base);
    if (!amp_make_temp_dir(dir, sizeof dir, prefix)) {
        perror(dir);
        exit(1);
    }
    snprintf(db, sizeof db, "%s/%s.sqlite", base, name);
    unlink(db);
    if (amp_record_start(dir) != AMP_OK) {
        fprintf(stderr, "%s\n", amp_last_error());
        exit(1);
    }
    double t0 = now_s();
    for (int64_t i = 0; i < n; i++)
        emit(i);
    double t_emit = now_s() - t0;
    amp_record_stop();

    amp_collector_t *c;
    if (amp_collector_new(db, dir, &c) != AMP_OK) {
        fprintf(stderr, "%s\n", amp_last_error());
        exit(1);
    }
    t0 = now_s();
    double c0 = cpu_s();
    // one poll that reads everything: amp_collector_poll stops after ~200 ms and would leave
    // the rest to finish, which would count as index time
    if (amp_collector_poll_for(c, INGEST_BUDGET_NS) != AMP_OK)
        fprintf(stderr, "%s\n", amp_last_error());
    double t_ingest = now_s() - t0, c_ingest = cpu_s() - c0;
    amp_collector_stats s;
    amp_collector_get_stats(c, &s);
    const int64_t ingested = s.records;
    t0 = now_s();
    if (amp_collector_finish(c, 0) != AMP_OK) fprintf(stderr, "%s\n", amp_last_error());
    double t_finish = now_s() - t0;
    amp_collector_get_stats(c, &s);
    amp_collector_free(c);
    if (s.records != ingested) // (a record the poll left to finish: the rate would be wrong)
        fprintf(stderr,
                "collector_bench: %lld of %lld records were ingested by finish, not the "
                "poll: the ingest rate is of the others\n",
                (long long)(s.records - ingested), (long long)s.records);
    struct stat sb;
    stat(db, &sb);
    printf("%-7s %8lld records  emit %5.0f ns/record  ingest %5.2f M records/s (%5.2f per CPU s)"
           "  finish %5.2f s  db %4.0f MB\n",
           name, (long long)s.records, t_emit / (double)n * 1e9, (double)ingested / t_ingest / 1e6,
           (double)ingested / c_ingest / 1e6, t_finish, (double)sb.st_size / 1e6);
    unlink(db);
}

int main(int argc, char **argv) {
    char *end = NULL;
    int64_t n = argc > 1 ? strtoll(argv[1], &end, 10) : 2000000;
    if (argc > 4 || (end && (*end || end == argv[1] || n < 1))) {
        const bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        fprintf(help ? stdout : stderr,
                "usage: collector_bench [N] [DIR] [WORKLOAD]\n"
                "  N records per workload (default 2000000, at least 1), DIR for the files\n"
                "  (default $TMPDIR or /tmp), WORKLOAD amp, kernel or mixed (default all three)\n");
        return help ? 0 : 2;
    }
    const char *base = argc > 2 ? argv[2] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    const char *only = argc > 3 ? argv[3] : NULL;
    static const struct {
        const char *name;
        void (*emit)(int64_t);
    } workloads[] = {{"amp", emit_amp}, {"kernel", emit_kernel}, {"mixed", emit_mixed}};
    printf("collector_bench: %lld records per workload in %s\n", (long long)n, base);
    int ran = 0;
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++)
        if (!only || strcmp(only, workloads[i].name) == 0) {
            run(workloads[i].name, workloads[i].emit, n, base);
            ran++;
        }
    if (!ran) {
        fprintf(stderr, "collector_bench: unknown workload '%s' (amp, kernel or mixed)\n", only);
        return 2;
    }
    return 0;
}
