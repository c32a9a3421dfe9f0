/*
 * test_report_perf.c — the `report` suite's cases of the precision-placement, performance
 * (roofline, GPU idle gaps, host-to-device copies, host synchronisations) and amp-payoff rules:
 * a positive and a negative case each, the kernels on hand-made CUPTI rows attributed to layers,
 * on databases that report_fixtures.c builds.
 */
#include "report_fixtures.h"

#include "ceilings.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// ---------------------------------------------------------------------------------------------
// precision-placement

START_TEST(precision_fp32_gemm_under_autocast_is_a_warning) {
    healthy(6);
    // blocks.0.mlp's GEMM runs with autocast disabled: fp32 in, fp32 out, most of the FLOPs
    sql("INSERT INTO AMP_OPS SELECT 1, step, 1, 'linear', 'fwd', 'f32,f32', 'f32', NULL, "
        "'(8, 64)', 33554432, 393216, step * 1000000 + 500000, step * 1000000 + 700000 "
        "FROM AMP_STEPS;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_str_eq(f->op, "linear");
    ck_assert_int_eq(f->first_step, 0);
    ck_assert_ptr_nonnull(strstr(f->title, "fp32 under autocast"));
    ck_assert_close(evidence(f, "flops_share"), 33554432.0 / (33554432 + 4194304 + 8388608), 1e-9,
                    0);
    ck_assert_ptr_nonnull(strstr(f->advice, "bf16"));
    ck_assert_int_eq(f->last_step, 5);
    release();
    // a step begun and never recorded (the program killed in it): its ops name no step
    sql("INSERT INTO AMP_OPS SELECT pid, 6, layer_id, op, phase, in_dtypes, out_dtype, policy, "
        "shapes, flops, bytes, start_ns + 1000000, end_ns + 1000000 FROM AMP_OPS WHERE step = 5;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_int_eq(first_of("precision-placement")->last_step, 5);
    release();
}
END_TEST

START_TEST(precision_healthy_autocast_and_fp32_runs_are_quiet) {
    healthy(6);
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    // an fp32 run (no autocast at all) is not this rule's business
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

START_TEST(precision_upcasts_and_casts_are_notes_on_the_cpu) {
    healthy(6);
    sql("UPDATE AMP_OPS SET in_dtypes = 'f16', end_ns = start_ns + 90000 WHERE op = 'softmax';"
        "UPDATE AMP_OPS SET end_ns = start_ns + 80000 WHERE op = 'to';");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0); // host time: notes only
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 2);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "upcast"));
    ck_assert_str_eq(findings.v[0].layer, "blocks.0.attn");
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "casts"));
    release();
}
END_TEST

// The K and N of a GEMM's shapes, as AMP_OPS records them.
START_TEST(gemm_dimensions_are_read_from_the_shapes) {
    int64_t k = 0, n = 0;
    ck_assert(report_gemm_kn("linear", "(8, 128, 768),(50257, 768),(50257,)", &k, &n));
    ck_assert_int_eq(k, 768);
    ck_assert_int_eq(n, 50257);
    ck_assert(report_gemm_kn("linear", "(64, 256),(10, 256)", &k, &n)); // no bias
    ck_assert_int_eq(n, 10);
    ck_assert(report_gemm_kn("matmul", "(8, 12, 128, 64),(8, 12, 64, 127)", &k, &n));
    ck_assert_int_eq(k, 64);
    ck_assert_int_eq(n, 127);
    ck_assert(report_gemm_kn("addmm", "(30,),(16, 20),(20, 30)", &k, &n));
    ck_assert_int_eq(k, 20);
    ck_assert_int_eq(n, 30);
    ck_assert(!report_gemm_kn("matmul", "(64,),(64, 10)", &k, &n)); // a vector operand
    ck_assert(!report_gemm_kn("linear", "(8, 64)", &k, &n));        // no weight
    ck_assert(!report_gemm_kn("conv2d", "(8, 3, 32, 32),(16, 3, 3, 3)", &k, &n));
    ck_assert(!report_gemm_kn("linear", "(8, x),(3, 8)", &k, &n));
    ck_assert(!report_gemm_kn("linear", "(8, 64", &k, &n));
    ck_assert(!report_gemm_kn("linear", NULL, &k, &n));
}
END_TEST

// A 16-bit GEMM whose N is odd (a vocabulary of 50257) holding most of the FLOPs: a warning,
// with and without autocast; the same padded to 50304, a small odd head (a launch-bound GEMM),
// and the backward's rows are none.
START_TEST(precision_odd_gemm_dimensions_are_named) {
    healthy(6);
    sql("INSERT INTO AMP_OPS SELECT 1, step, 2, 'linear', 'fwd', 'f16,f16,f16', 'f16', "
        "'lower_precision_fp', '(8, 1024, 768),(50257, 768),(50257,)', 632386879488, 0, "
        "step * 1000000 + 500000, step * 1000000 + 700000 FROM AMP_STEPS;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = first_of("precision-placement");
    ck_assert_msg(begins(f->title, "16-bit GEMMs with a dimension not a multiple of 8 hold 100% "
                                   "of their FLOPs (head linear: N=50257)"),
                  "%s", f->title);
    ck_assert_str_eq(f->layer, "head");
    ck_assert_ptr_nonnull(strstr(f->detail, "head linear K=768 N=50257 (100%)"));
    ck_assert_msg(strstr(f->advice, "N 50257 -> 50304"), "%s", f->advice);
    ck_assert_close(evidence(f, "n"), 50257, 0, 0);
    release();
    // without autocast (a model cast to fp16): the same
    sql("UPDATE AMP_OPS SET policy = NULL;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(first_of("precision-placement"));
    ck_assert(begins(first_of("precision-placement")->title, "16-bit GEMMs with a dimension"));
    release();
    // fp32 GEMMs: no 16-bit alignment to speak of
    sql("UPDATE AMP_OPS SET in_dtypes = 'f32,f32,f32', out_dtype = 'f32' WHERE flops > 1e9;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    sql("UPDATE AMP_OPS SET in_dtypes = 'f16,f16,f16', out_dtype = 'f16', phase = 'bwd' "
        "WHERE flops > 1e9;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    sql("UPDATE AMP_OPS SET phase = 'fwd', shapes = '(8, 1024, 768),(50304, 768),(50304,)' "
        "WHERE flops > 1e9;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    // a head of 10 classes: odd, and too small to be anything but launch-bound
    sql("UPDATE AMP_OPS SET shapes = '(64, 256),(10, 256),(10,)', flops = 327680 "
        "WHERE flops > 1e9;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The performance rules, on hand-made CUPTI rows

// The kernel time of 16-bit GEMMs with an odd dimension, CUDA traced: theirs of the ops'.
START_TEST(precision_odd_gemm_kernel_time_is_told) {
    gpu_run(8, 3, 50000, 2000, 2e9, 1e6);
    sql("UPDATE AMP_OPS SET shapes = '(8192, 768),(50257, 768),(50257,)';");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("precision-placement");
    ck_assert_ptr_nonnull(f);
    ck_assert_msg(strstr(f->detail, " Their forward kernels took 1.2 ms, 100% of the GPU time of "
                                    "the ops recorded."),
                  "%s", f->detail);
    ck_assert_close(evidence(f, "time_ms"), 1.2, 1e-9, 0);
    release();
}
END_TEST

START_TEST(roofline_slow_compute_layer_is_a_warning) {
    // 1 GFLOP over 1 MB (intensity 1000, compute-bound) in 1 ms: 0.13% of 790 TFLOP/s
    gpu_run(5, 1, 1000000, 0, 1e9, 1e6);
    analyse("roofline", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = first_of("roofline");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(f->layer, "head");
    ck_assert_close(evidence(f, "efficiency"), 1e12 / 790e12, 1e-9, 1e-6);
    ck_assert_close(evidence(f, "intensity"), 1000, 0, 1e-9);
    ck_assert_ptr_nonnull(strstr(f->advice, "Tensor Cores"));
    // the summary names the ceilings and says they are assumed
    const report_finding *info = &findings.v[1];
    ck_assert_ptr_nonnull(strstr(info->title, "100% compute-bound"));
    ck_assert_ptr_nonnull(strstr(info->detail, "assumed from the default table"));
    ck_assert_ptr_nonnull(
        strstr(info->detail, "Run ampprobe calibrate on a machine with this GPU"));
    ck_assert_close(evidence(info, "ceilings_assumed"), 1, 0, 0);
    release();
}
END_TEST

START_TEST(roofline_uses_the_calibrated_ceilings) {
    gpu_run(5, 1, 1000000, 0, 1e9, 1e6);
    char path[256];
    snprintf(path, sizeof path, "%s/ampprobe", tmpdir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert(amp_ceilings_path("NVIDIA H200", path, sizeof path));
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("gpu NVIDIA H200\ndram_bytes_per_s 4e+12\ngemm_flops_bf16 8e+14\ngemm_flops_f16 7e+14\n",
          f);
    fclose(f);
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_finding *info = &findings.v[findings.n - 1];
    ck_assert_int_eq(info->severity, AMP_SEVERITY_INFO);
    ck_assert_close(evidence(info, "peak_tflops"), 800, 0, 1e-12);
    ck_assert_close(evidence(info, "bandwidth_tbs"), 4, 0, 1e-12);
    ck_assert_close(evidence(info, "ceilings_assumed"), 0, 0, 0);
    ck_assert_ptr_nonnull(strstr(info->detail, "measured by ampprobe calibrate"));
    ck_assert_ptr_null(strstr(info->detail, "on a machine with this GPU"));
    release();
}
END_TEST

START_TEST(roofline_efficient_kernels_are_a_note) {
    // 10 GFLOP in 20 us: 500 TFLOP/s, 63% of the roof
    gpu_run(5, 1, 20000, 0, 1e10, 1e6);
    analyse("roofline", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    release();
    // no kernels at all (a CPU run): nothing
    sql("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// The names that the roofline rule (and the TUI's kernels view) take for matrix-multiply kernels
// when it has no figures for them: real kernel names of cuBLAS, CUTLASS, cuDNN, flash attention
// and PyTorch.
START_TEST(kernel_names_that_are_gemms) {
    static const char *const gemm[] = {
        "nvjet_sm90_hsh_192x128_64x5_1x2_h_bz_coopB_NNT",
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64",
        "cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2",
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
        "implicit_convolve_sgemm",
        "cudnn::conv2d_grouped_direct_kernel",
        "flash_fwd_kernel",
        "Kernel2<cutlass_80_wmma_tensorop_f16>"};
    static const char *const other[] = {"GammaBetaBackwardCUDAKernelTemplate",
                                        "vectorized_elementwise_kernel",
                                        "softmax_warp_forward",
                                        "multi_tensor_apply_kernel",
                                        "stats_kernel",
                                        "void convert_kernel<false, __half, float>",
                                        "fp32_conversion_kernel",
                                        ""};
    for (size_t i = 0; i < sizeof gemm / sizeof *gemm; i++)
        ck_assert_msg(report_kernel_is_gemm(gemm[i]), "%s", gemm[i]);
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        ck_assert_msg(!report_kernel_is_gemm(other[i]), "%s", other[i]);
    ck_assert(!report_kernel_is_gemm(NULL));
}
END_TEST

// An op's FLOPs go to its GEMM kernels, not to the casts launched in the same call (PyTorch's
// linear under autocast), its bytes to both by their time; a kernel's figures from the one step
// that recorded its ops stand for all its launches.
START_TEST(roofline_op_flops_go_to_gemm_kernels) {
    gpu_run(4, 2, 100000, 10000, 1e9, 1e6); // each step: two 0.1 ms kernels in one linear
    sql("INSERT INTO StringIds VALUES (3, 'vectorized_elementwise_kernel');"
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 3, shortName = 3 WHERE gridId = 0;"
        "DELETE FROM AMP_OPS WHERE step <> 1;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_kernel *gemm = kernel_named("nvjet_sm90_tst_gemm");
    const report_kernel *cast = kernel_named("vectorized_elementwise_kernel");
    ck_assert_int_eq(gemm->launches, 4);
    ck_assert_int_eq(gemm->attributed_ns, 100000); // step 1's launch
    ck_assert_close(gemm->flops, 4e9, 0, 1e-9);    // all of the op's FLOPs, times 4 launches
    ck_assert_close(cast->flops, 0, 0, 0);
    ck_assert_close(gemm->bytes, 2e6, 0, 1e-9); // half the op's bytes each, times 4
    ck_assert_close(cast->bytes, 2e6, 0, 1e-9);
    kernel_layer_is(gemm, 2, 1, 100000); // head, where step 1's op ran
    release();
}
END_TEST

// A kernel several layers launch belongs to the one it spent the most time in, the others
// counted; a kernel no op launched has none.
// A kernel that ran half an hour (a collective stuck until its watchdog fired) is kept; one
// whose start was left unset (0: a span of decades) is left out.
START_TEST(kernels_of_a_real_length_are_kept_damaged_ones_left_out) {
    gpu_run(4, 1, 100000, 10000, 1e9, 1e6);
    analyse("roofline", INT64_MIN, INT64_MAX);
    const int64_t launches = model.perf.launches, ns = model.perf.kernel_ns;
    release();
    sql("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + 1800000000000 WHERE rowid = 1;"
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 0, end = 1764000000000000000 "
        "WHERE rowid = 2;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    ck_assert_int_eq(model.perf.launches, launches - 1);
    ck_assert_int_gt(model.perf.kernel_ns, 1800000000000 - ns);
    ck_assert_int_lt(model.perf.kernel_ns, 1800000000000 + ns);
    release();
}
END_TEST

START_TEST(kernels_take_the_layer_of_most_of_their_time) {
    gpu_run(4, 1, 100000, 10000, 1e9, 1e6);
    sql("UPDATE AMP_OPS SET layer_id = 0 WHERE step = 3;"
        "INSERT INTO StringIds VALUES (3, 'orphan_kernel');" TEST_KERNEL_INSERT
        "SELECT end_ns - 500, end_ns - 100, 0, "
        "1, 7, 900 + step, " GPID ", 3, 3, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 9 FROM AMP_STEPS;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_kernel *gemm = kernel_named("nvjet_sm90_tst_gemm");
    const report_kernel *orphan = kernel_named("orphan_kernel");
    ck_assert_int_eq(gemm->layer_pid, 1);
    kernel_layer_is(gemm, 2, 2, 300000); // 3 steps in head, 1 in blocks.0.attn
    kernel_layer_is(orphan, -1, 0, -1);
    release();
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0); // the roofline's point
    char *h = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(h, "<title>nvjet_sm90_tst_gemm in head and 1 other layer: 4 launches"),
                  "%s", h);
    free(h);
    sql("UPDATE AMP_OPS SET layer_id = 0 WHERE step <> 3;"); // now blocks.0.attn throughout
    analyse("roofline", INT64_MIN, INT64_MAX);
    gemm = kernel_named("nvjet_sm90_tst_gemm");
    kernel_layer_is(gemm, 0, 1, -1);
    release();
}
END_TEST

START_TEST(roofline_places_kernels_by_hardware_counters) {
    // kernels no op claims (no analytic figures), named like a GEMM: compute-bound by name
    gpu_run(5, 1, 1000000, 0, 0, 0);
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_finding *info = &findings.v[findings.n - 1];
    ck_assert_ptr_nonnull(strstr(info->title, "100% compute-bound"));
    ck_assert_ptr_nonnull(strstr(info->detail, "(by name)"));
    ck_assert_close(evidence(info, "counter_samples"), 0, 0, 0);
    release();
    // --counters asked for but refused: the report says why
    sql("INSERT INTO META VALUES ('counters_reason', 'GPU 0: cuptiPmSamplingEnable: "
        "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES', 1);");
    analyse("roofline", INT64_MIN, INT64_MAX);
    info = &findings.v[findings.n - 1];
    ck_assert_ptr_nonnull(strstr(info->detail, "asked for but not recorded"));
    ck_assert_ptr_nonnull(strstr(info->detail, "INSUFFICIENT_PRIVILEGES"));
    release();
    // PM samples over each kernel: 3 GB of DRAM traffic per 1 ms kernel (3 TB/s) and the tensor
    // pipe 5% busy: memory-bound, whatever the name says; samples in the gaps count for nothing
    sql("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (0, 0, 'dram__bytes_read.sum'), "
        "(0, 1, 'dram__bytes_write.sum'), "
        "(0, 2, 'sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed');"
        "INSERT INTO GPU_METRICS SELECT start, end, 0, 0, 2e9 FROM CUPTI_ACTIVITY_KIND_KERNEL;"
        "INSERT INTO GPU_METRICS SELECT start, end, 0, 1, 1e9 FROM CUPTI_ACTIVITY_KIND_KERNEL;"
        "INSERT INTO GPU_METRICS SELECT start, end, 0, 2, 5 FROM CUPTI_ACTIVITY_KIND_KERNEL;"
        "INSERT INTO GPU_METRICS SELECT end, end + 1000000, 0, 0, 7e9 FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    info = &findings.v[findings.n - 1];
    ck_assert_ptr_nonnull(strstr(info->title, "100% memory-bound"));
    ck_assert_ptr_null(strstr(info->detail, "(by name)"));
    ck_assert_ptr_nonnull(strstr(info->detail, "counters: DRAM"));
    ck_assert_ptr_nonnull(strstr(info->detail, "tensor pipe 5% busy"));
    ck_assert_close(evidence(info, "counter_samples"), 10, 0, 0);
    ck_assert_close(evidence(info, "kernels_by_counters"), 1, 0, 0);
    release();
    // the tensor pipe busier than DRAM is near its roof: compute-bound
    sql("UPDATE GPU_METRICS SET value = 90 WHERE metricId = 2;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    info = &findings.v[findings.n - 1];
    ck_assert_ptr_nonnull(strstr(info->title, "100% compute-bound"));
    release();
}
END_TEST

START_TEST(gpu_idle_gaps_are_a_warning) {
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7); // 0.1 ms kernels 0.5 ms apart
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_int_ge(f->first_step, 0);
    // between steps: the last kernel ends 2 us + 9 x 0.6 ms + 0.1 ms into a 10 ms step
    ck_assert_close(evidence(f, "largest_gap_ms"), 4.5, 1e-6, 0);
    // no copies, no synchronisations in the gaps: the host launches too slowly
    ck_assert_ptr_nonnull(strstr(f->detail, "Most likely cause: the host launching work"));
    ck_assert_ptr_nonnull(strstr(f->advice, "torch.compile"));
    release();
}
END_TEST

// Two GPUs (a data-parallel run's ranks) whose kernels alternate: each sits idle in the other's
// kernels, which a union of both timelines would call busy.
START_TEST(gpu_idle_is_each_gpus) {
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    const double one = evidence(&findings.v[0], "idle_share");
    ck_assert_msg(begins(findings.v[0].title, "the GPU sat idle"), "%s", findings.v[0].title);
    release();
    // the same kernels again on GPU 1, 0.3 ms later: in GPU 0's gaps
    sql(TEST_KERNEL_INSERT
        "SELECT start + 300000, end + 300000, 1, "
        "contextId, streamId, correlationId + 1000000, globalPid, demangledName, shortName, "
        "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, "
        "dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL;");
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_close(evidence(f, "idle_share"), one, 1e-9, 0);
    ck_assert_msg(begins(f->title, "the 2 GPUs sat idle"), "%s", f->title);
    ck_assert_msg(strstr(f->detail, "(each GPU's, summed)"), "%s", f->detail);
    release();
}
END_TEST

// A step's GPU busy time (the html step-time breakdown) is its own process's, on each of its
// GPUs: a second process's kernels in the first one's gaps are not the first one's, and a
// process on two GPUs has its busy time summed over both (gpu_devices 2). (The copies of the
// kernels are of GPU 0's.)
static const report_step *step_of(int32_t pid, int64_t step) {
    const report_step *s = report_step_find(&model, pid, step);
    ck_assert_ptr_nonnull(s);
    return s;
}

#define KERNELS_AGAIN(START, DEV, GLOBAL_PID)                                                      \
    TEST_KERNEL_INSERT                                                                             \
    "SELECT start + " START ", end + " START ", " DEV ", contextId, streamId, "                    \
    "correlationId + 1000000, " GLOBAL_PID ", demangledName, shortName, "                          \
    "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "                            \
    "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, "                              \
    "localMemoryTotal, gridId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0;"

START_TEST(step_busy_is_its_own_process_gpus) {
    gpu_run(4, 10, 100000, 500000, 1e9, 1e7); // ten 0.1 ms kernels a step
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(step_of(1, 2)->gpu_busy_ns, 1000000);
    ck_assert_int_eq(step_of(1, 2)->gpu_devices, 1);
    release();
    // process 2: the same steps, its kernels on GPU 1 in GPU 0's gaps
    sql("INSERT INTO AMP_STEPS (pid, step, start_ns, end_ns, loss, loss_finite) "
        "SELECT 2, step, start_ns, end_ns, loss, loss_finite FROM AMP_STEPS;" KERNELS_AGAIN(
            "300000", "1", "33554432"));
    analyse(NULL, INT64_MIN, INT64_MAX);
    for (int32_t pid = 1; pid <= 2; pid++) {
        ck_assert_int_eq(step_of(pid, 2)->gpu_busy_ns, 1000000);
        ck_assert_int_eq(step_of(pid, 2)->gpu_devices, 1);
    }
    release();
    // process 1 on GPU 2 too (DataParallel's replicas): both GPUs' busy time, summed
    sql(KERNELS_AGAIN("200000", "2", GPID));
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(step_of(1, 2)->gpu_busy_ns, 2000000);
    ck_assert_int_eq(step_of(1, 2)->gpu_devices, 2);
    ck_assert_int_eq(step_of(2, 2)->gpu_busy_ns, 1000000);
    release();
}
END_TEST

START_TEST(gpu_idle_back_to_back_kernels_are_quiet) {
    gpu_run(3, 98, 100000, 1000, 1e9, 1e7); // 0.1 ms kernels 1 us apart fill the steps
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// Neither gpu-idle nor h2d-copies found anything.
static void ck_assert_loop_quiet(void) {
    for (size_t i = 0; i < findings.n; i++)
        ck_assert_msg(strcmp(findings.v[i].rule, "gpu-idle") != 0 &&
                          strcmp(findings.v[i].rule, "h2d-copies") != 0,
                      "%s: %s", findings.v[i].rule, findings.v[i].title);
}

// Step 0's one-time set-up (a kernel half a second before it, the model's weights copied up) is
// not the loop: the loop's steps are full, so no gpu-idle finding, and no copies finding either.
START_TEST(gpu_idle_leaves_the_warm_up_out) {
    gpu_run(4, 98, 100000, 1000, 1e9, 1e7);
    sql(TEST_KERNEL_INSERT
        "VALUES (-500000000, -499990000, 0, 1, 7, "
        "999999, " GPID ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 0);"
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
        "globalPid, bytes, copyKind, srcKind, dstKind) VALUES (1000, 900000000, 0, 1, 7, " GPID
        ", 1073741824, 1, 0, 2);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_loop_quiet();
    ck_assert_int_eq(model.perf.warmup_kernels, 99); // step 0's 98 and the one before it
    ck_assert_int_eq(model.perf.htod_copies, 0);
    release();
    // a kernel launched in step 0 that runs after it (the GPU behind the host) is step 0's
    sql(TEST_KERNEL_INSERT
        "VALUES (10050000, 10060000, 0, 1, 7, 777777, " GPID
        ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 0);"
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (5000000, 5000010, 0, " GPID
        " + 7, 777777, 2, 0, NULL);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(model.perf.warmup_kernels, 100);
    release();
    // without step 0 in the model (a focus on later steps) nothing is left out
    analyse("gpu-idle", 1, INT64_MAX);
    ck_assert_int_eq(model.perf.warmup_kernels, 0);
    release();
}
END_TEST

static void copies(const char *src_kind, long long ns) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
             "globalPid, bytes, copyKind, srcKind, dstKind) SELECT start_ns + 1500000, "
             "start_ns + 1500000 + %lld, 0, 1, 7, " GPID ", 67108864, 1, %s, 2 FROM AMP_STEPS;",
             ns, src_kind);
    sql(buf);
}

START_TEST(h2d_pageable_copies_are_a_warning) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    copies("0", 4000000); // 64 MB from pageable memory, 4 ms each, against 1 ms of kernels
    analyse("h2d-copies", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_close(evidence(f, "htod_share"), 0.8, 1e-9, 0);
    ck_assert_close(evidence(f, "pageable_copies"), 3, 0, 0); // step 0's is the warm-up
    ck_assert_ptr_nonnull(strstr(f->advice, "pin_memory=True"));
    release();
}
END_TEST

// A script that only moved a model to the GPU (no step, no kernel, two tiny pageable copies):
// copies that took microseconds in all are no finding, whatever their share of nothing.
START_TEST(h2d_copies_of_no_weight_are_quiet) {
    sql("INSERT INTO TARGET_INFO_GPU (vmId, id, name) VALUES (0, 0, 'NVIDIA H200');"
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
        "globalPid, bytes, copyKind, srcKind, dstKind) VALUES (1000, 2000, 0, 1, 7, " GPID
        ", 128, 1, 0, 2), (5000, 5800, 0, 1, 7, " GPID ", 16, 1, 0, 2);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(model.perf.htod_copies, 2);
    for (size_t i = 0; i < findings.n; i++)
        ck_assert_msg(strcmp(findings.v[i].rule, "h2d-copies") != 0, "%s", findings.v[i].title);
    release();
}
END_TEST

START_TEST(h2d_small_pinned_copies_are_quiet) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    copies("1", 20000);
    analyse("h2d-copies", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

static void syncs(int per_step, long long ns) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < %d - 1) "
             "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
             "streamId, globalPid, syncType, eventId) SELECT start_ns + 3000000 + x * 1200000, "
             "start_ns + 3000000 + x * 1200000 + %lld, 0, 1, 7, " GPID ", 3, 0 "
             "FROM AMP_STEPS, j;",
             per_step, ns);
    sql(buf);
}

// In a gpu_run of that many steps of 98 kernels, each step's first 20 kernels spread out (idle
// gaps in the loop): one gpu-idle finding, whose detail says text.
static void ck_assert_idle_detail(int steps, const char *text) {
    char buf[384];
    snprintf(
        buf, sizeof buf,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 400000 * (correlationId %% 98), "
        "end = end + 400000 * (correlationId %% 98) WHERE correlationId < %d * 98 AND "
        "correlationId %% 98 < 20;",
        steps);
    sql(buf);
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_msg(strstr(findings.v[0].detail, text), "%s", findings.v[0].detail);
}

// After the last step, the loop is over: a final evaluation's kernels, 1 ms apart for 100 ms,
// and its data's pageable copy are not the loop's (no gpu-idle or h2d-copies finding); the
// kernels the last step queued, running on past its end, are.
START_TEST(gpu_idle_leaves_what_follows_the_loop_out) {
    gpu_run(4, 98, 100000, 1000, 1e9, 1e7); // steps 0-3 full; step 3's last kernel ends 39.899 ms
    sql("WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < "
        "9) " TEST_KERNEL_INSERT
        "SELECT 39900000 + x * 101000, 39900000 + x * 101000 + 100000, 0, 1, 7, 800000 + x, " GPID
        ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 0 FROM j;"
        "WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < "
        "99) " TEST_KERNEL_INSERT
        "SELECT 45000000 + x * 1000000, 45010000 + x * 1000000, 0, 1, 7, 900000 + x, " GPID
        ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 0 FROM j;"
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
        "globalPid, bytes, copyKind, srcKind, dstKind) VALUES (44000000, 46000000, 0, 1, 7, " GPID
        ", 1073741824, 1, 0, 2);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_loop_quiet();
    ck_assert_int_eq(model.perf.tail_kernels, 100);
    ck_assert_int_eq(model.perf.tail_ns, 99 * 1000000 + 10000);
    ck_assert_int_eq(model.perf.busy_ns, (3 * 98 + 10) * 100000); // step 3's queue included
    ck_assert_int_eq(model.perf.tail_copies, 1);
    ck_assert_int_eq(model.perf.htod_copies, 0);
    release();
    // the last step's queue starting after an idle gap past the step's end: without launch calls
    // it reads as after the loop; with them (launched in the step, the evaluation's after it)
    // it is the loop's
    sql("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 150000, end = end + 150000 "
        "WHERE correlationId BETWEEN 800000 AND 800009;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(model.perf.tail_kernels, 110);
    release();
    sql("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start - 1000000, start - 999990, 0, " GPID
        " + 7, correlationId, 2, 0, NULL FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "WHERE correlationId BETWEEN 800000 AND 800009;"
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start - 5000, start - 4990, 0, " GPID
        " + 7, correlationId, 2, 0, NULL FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "WHERE correlationId >= 900000;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_loop_quiet();
    ck_assert_int_eq(model.perf.tail_kernels, 100);
    ck_assert_int_eq(model.perf.busy_ns, (3 * 98 + 10) * 100000);
    release();
    // the loop's own gaps still speak, and say what was left out after it
    ck_assert_idle_detail(4, "to the last of the last step (left out: step 0, the warm-up, 98 "
                             "kernels over 9.998 ms; after the last step, 100 kernels over 99.01 "
                             "ms)");
    ck_assert_close(evidence(&findings.v[0], "tail_kernels"), 100, 0, 0);
    release();
}
END_TEST

// An evaluation between steps 3 and 4 (100 ms that no step holds: the PyTorch bridge starts the
// step after one where it ended), its kernels 0.9 ms apart, its data's pageable copy and its
// synchronisations, is not the loop's, with or without the kernels' launch calls; a stretch
// shorter than a step is the loop's.
START_TEST(gpu_idle_leaves_what_runs_between_steps_out) {
    gpu_run(6, 98, 100000, 1000, 1e9, 1e7); // steps 0-5 full, step 3's kernels end at 39.899 ms
    sql("UPDATE AMP_STEPS SET start_ns = start_ns + 100000000, end_ns = end_ns + 100000000 "
        "WHERE step >= 4;"
        "UPDATE AMP_OPS SET start_ns = start_ns + 100000000, end_ns = end_ns + 100000000 "
        "WHERE step >= 4;"
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 100000000, end = end + 100000000 "
        "WHERE correlationId >= 4 * 98;"
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = start + 100000000, end = end + 100000000 "
        "WHERE correlationId >= 4 * 98;"
        "WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < "
        "99) " TEST_KERNEL_INSERT
        "SELECT 45000000 + x * 900000, 45010000 + x * 900000, 0, 1, 7, 900000 + x, " GPID
        ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 0 FROM j;"
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start - 5000, start - 4990, 0, " GPID
        " + 7, correlationId, 2, 0, NULL FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "WHERE correlationId >= 900000;"
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
        "globalPid, bytes, copyKind, srcKind, dstKind) VALUES (44000000, 46000000, 0, 1, 7, " GPID
        ", 1073741824, 1, 0, 2);"
        "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
        "streamId, globalPid, syncType, eventId) VALUES (49000000, 50000000, 0, 1, 7, " GPID
        ", 3, 0);" // (the evaluation's .item()s)
        "WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < 79) "
        "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
        "streamId, globalPid, syncType, eventId) SELECT 55000000 + x * 900000, "
        "55500000 + x * 900000, 0, 1, 7, " GPID ", 3, 0 FROM j;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_loop_quiet();
    ck_assert_int_eq(model.perf.sync_gap_ns, 0);
    ck_assert_int_eq(model.perf.step_syncs, 0);
    ck_assert_int_eq(model.perf.betweens, 1);
    ck_assert_int_eq(model.perf.between_ns, 140000000 - 39999999);
    ck_assert_int_eq(model.perf.between_kernels, 100);
    ck_assert_int_eq(model.perf.busy_ns, 5 * 98 * 100000); // steps 1-5
    // the steps' ends, 103 us each, and of the 100.103 ms from step 3's last kernel to step 4's
    // first what no step holds
    ck_assert_int_eq(model.perf.gap_ns, 3 * 103000 + 140002000 - 39899000 - (140000000 - 39999999));
    ck_assert_int_eq(model.perf.between_copies, 1);
    ck_assert_int_eq(model.perf.htod_copies, 0);
    release();
    // without launch calls: the kernels starting in the stretch after an idle gap
    sql("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId >= 900000;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_loop_quiet();
    ck_assert_int_eq(model.perf.between_kernels, 100);
    release();
    // the loop's own gaps still speak, and say what was left out between the steps
    ck_assert_idle_detail(6, "(left out: step 0, the warm-up, 98 kernels over 9.998 ms; between "
                             "steps, 100 kernels in 1 stretch over 100 ms that no step holds (an "
                             "evaluation, a re-run))");
    // (the evaluation's 41 ms of synchronisations are not what the loop's gaps hold)
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Most likely cause: the host launching"));
    ck_assert_close(evidence(&findings.v[0], "between_kernels"), 100, 0, 0);
    release();
    // a stretch shorter than the median step is the step's end's bookkeeping: the loop's
    sql("UPDATE AMP_STEPS SET start_ns = start_ns - 95000000, end_ns = end_ns - 95000000 "
        "WHERE step >= 4;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(model.perf.betweens, 0);
    release();
}
END_TEST

// The gap's likely cause picks the advice: synchronisations, or copies (data).
START_TEST(gpu_idle_advice_follows_the_gaps) {
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    syncs(2, 2000000); // 4 ms of each 10 ms step blocked in synchronisations
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Most likely cause: host synchronisations"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, ".item()"));
    release();
    wipe();
    // synchronisations that block the host next to nothing (1 us, the GPU done already) but end
    // in the gaps: the GPU idles after each until the host launches again (a sample that read
    // its loss before the backward, on an H200)
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    syncs(5, 1000);
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Most likely cause: host synchronisations"));
    // after step 0 (the warm-up): three 0.5 ms gaps a step and three 4.5 ms gaps between steps
    ck_assert_close(evidence(&findings.v[0], "sync_gap_ms"), 4 * 1.5 + 3 * 4.5, 1e-6, 0);
    release();
    wipe();
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    copies("0", 2000000); // pageable host-to-device copies
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Most likely cause: waiting for data"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "pin_memory"));
    release();
}
END_TEST

// Gaps that are the host synchronisations: host-sync and gpu-idle both speak, the advice once.
START_TEST(sync_advice_is_given_once) {
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    syncs(4, 1000000);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("host-sync", AMP_SEVERITY_WARNING), 1);
    ck_assert_uint_eq(count("gpu-idle", AMP_SEVERITY_WARNING), 1);
    int full = 0, pointer = 0;
    for (size_t i = 0; i < findings.n; i++) {
        full += strstr(findings.v[i].advice, ".item()") != NULL;
        pointer += strstr(findings.v[i].advice, "The same as for ") != NULL;
    }
    ck_assert_int_eq(full, 1);
    ck_assert_int_eq(pointer, 1);
    release();
}
END_TEST

START_TEST(host_sync_every_few_ops_is_a_warning) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(5, 1000000);
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_close(evidence(&findings.v[0], "per_step"), 5, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 20.0 / (4 * (STEP_NS - 1) / 1e6), 1e-9,
                    0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, ".item()"));
    release();
    // streams waiting on events (cudaStreamWaitEvent, syncType 2: FSDP's and DDP's streams) do
    // not block the host: not counted, nor their time
    sql("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
        "streamId, globalPid, syncType, eventId) SELECT start + 100, end + 100, deviceId, "
        "contextId, streamId, globalPid, 2, 9 FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;");
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_close(evidence(&findings.v[0], "per_step"), 5, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 20.0 / (4 * (STEP_NS - 1) / 1e6), 1e-9,
                    0);
    release();
}
END_TEST

// A synchronisation row that ends before it starts (an incomplete record, end 0) is left out,
// as a kernel's is: no negative time, no count.
START_TEST(host_sync_leaves_out_incomplete_records) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(5, 1000000);
    sql("UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET end = 0 WHERE rowid = (SELECT rowid "
        "FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE start > 10000000 ORDER BY start LIMIT 1);");
    analyse("host-sync", INT64_MIN, INT64_MAX); // (in step 1: step 0 is the warm-up)
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_close(evidence(&findings.v[0], "per_step"), 14.0 / 3, 1e-12, 0);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 14.0 / (3 * (STEP_NS - 1) / 1e6), 1e-9,
                    0);
    release();
}
END_TEST

// Without steps the host's time is each process's, its first kernel to its last: a process's
// second GPU does not double it (the spans of its two GPUs summed did).
START_TEST(host_sync_without_steps_is_per_process) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(5, 1000000);
    sql("DELETE FROM AMP_STEPS; DELETE FROM AMP_OPS;");
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 20.0 / 31.0, 1e-9, 0);
    release();
    sql(KERNELS_AGAIN("300000", "1", GPID));
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 20.0 / 31.3, 1e-9, 0);
    release();
}
END_TEST

// Synchronisations outside the training steps (a script's evaluation reading each batch's
// metric, its setup, its end) are not the loop's: neither counted per step nor against the steps'
// time (500 of 1 ms after four steps of 1 ms made "126 per step, 12600% of the time"); the
// finding names them when the steps' own make one.
START_TEST(host_sync_outside_the_steps_is_not_the_loops) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(1, 10000); // the GradScaler's found_inf read
    sql("WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < 499) "
        "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
        "streamId, globalPid, syncType, eventId) SELECT m + 1000000 + x * 2000000, "
        "m + 2000000 + x * 2000000, 0, 1, 7, " GPID ", 3, 0 "
        "FROM (SELECT max(end_ns) AS m FROM AMP_STEPS), j;");
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_int_eq(model.perf.syncs, 504);
    ck_assert_int_eq(model.perf.step_syncs, 3); // (and step 0's, the warm-up's)
    ck_assert_int_eq(model.perf.warmup_syncs, 1);
    ck_assert_uint_eq(findings.n, 0);
    release();
    syncs(4, 1000000); // and the loop's own: five a step
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_close(evidence(&findings.v[0], "per_step"), 5, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "syncs_outside_steps"), 500, 0, 0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "500 more (500 ms) came outside the steps"));
    release();
}
END_TEST

// Step 0's autotuning and lazy set-up (40 synchronisations of 0.2 ms) are not the loop's: with
// the scaler's one a step after it, no finding (11 a step, 20% of the time, counted in); the
// loop's own still make one, whose detail says what the warm-up held.
START_TEST(host_sync_leaves_the_warm_up_out) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(1, 10000); // the GradScaler's found_inf read
    sql("WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < 39) "
        "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
        "streamId, globalPid, syncType, eventId) SELECT 1000000 + x * 200000, "
        "1200000 + x * 200000, 0, 1, 7, " GPID ", 3, 0 FROM j;");
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    ck_assert_int_eq(model.perf.warmup_syncs, 41);
    ck_assert_int_eq(model.perf.step_syncs, 3);
    release();
    syncs(4, 1000000);
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_close(evidence(&findings.v[0], "per_step"), 5, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "warmup_syncs"), 45, 0, 0);
    ck_assert_msg(
        strstr(findings.v[0].detail, "Step 0, the warm-up, is left out with its 45 (12.01 ms)."),
        "%s", findings.v[0].detail);
    release();
    // without later steps, step 0 is the loop
    analyse("host-sync", 0, 0);
    ck_assert_int_eq(model.perf.warmup_syncs, 0);
    ck_assert_int_eq(model.perf.step_syncs, 45);
    release();
}
END_TEST

START_TEST(host_sync_with_the_gpu_busy_is_a_note) {
    gpu_run(4, 98, 100000, 1000, 1e9, 1e7); // kernels fill the steps: a GPU-bound loop
    syncs(5, 1000000);
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "the GPU stayed busy"));
    ck_assert_double_ge(evidence(&findings.v[0], "gpu_busy_share"), 0.9);
    release();
}
END_TEST

START_TEST(host_sync_once_per_step_is_quiet) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(1, 10000); // the GradScaler's found_inf read
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// amp-payoff

START_TEST(amp_payoff_launch_bound_amp_run_is_a_warning) {
    gpu_run(4, 500, 2000, 3000, 1e6, 1e6); // 2 us kernels
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "launch-bound"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "AMP cannot pay off"));
    ck_assert_close(evidence(&findings.v[0], "short_kernel_share"), 1, 0, 0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "CUDA graphs"));
    release();
    // the same model in fp32 only hears that AMP would not help
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';");
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "would not make this model faster"));
    release();
}
END_TEST

// A GPU run of step 0 alone (a program that died in step 1; --steps 0:0): every kernel is the
// warm-up's, so no busy share is claimed ("busy nan%"); kernels of no duration, no GEMM share.
START_TEST(amp_payoff_of_the_warm_up_alone_claims_no_busy_share) {
    gpu_run(1, 500, 2000, 3000, 1e6, 1e6);
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].title,
                     "launch-bound: 100% of the kernels run under 5 us, so AMP cannot pay off (its "
                     "casts add launches; expect it slower than fp32)");
    ck_assert_msg(!strstr(findings.v[0].detail, "busy"), "%s", findings.v[0].detail);
    release();
    // kernels recorded with no duration (start = end): no GEMM share of no time ("nan%")
    wipe();
    gpu_run(4, 500, 0, 3000, 1e6, 1e6);
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(!strstr(findings.v[0].detail, "nan") && !strstr(findings.v[0].detail, "GEMM"),
                  "%s", findings.v[0].detail);
    release();
}
END_TEST

// A data-parallel run's NCCL collectives, one per step of ns each on a stream of their own (no
// op launched them): communication, not compute.
static void nccl_kernels(long long ns) {
    char buf[1024];
    snprintf(buf, sizeof buf,
             "INSERT INTO StringIds VALUES (3, "
             "'ncclDevKernel_AllReduce_Sum_f32_RING_LL');" TEST_KERNEL_INSERT
             "SELECT start_ns + 1000, start_ns + 1000 + %lld, 0, 1, 8, "
             "900000 + step, " GPID ", 3, 3, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 1 "
             "FROM AMP_STEPS;",
             ns);
    sql(buf);
}

// A data-parallel run whose all-reduces take most of the GPU time: its roofline says how much is
// communication (not memory-bound by name), and AMP's payoff is judged on the rest.
START_TEST(nccl_kernels_are_communication) {
    ck_assert(report_kernel_is_comm("ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
    ck_assert(report_kernel_is_comm("ncclKernel_AllGather_RING_LL_Sum_int8_t"));
    ck_assert(!report_kernel_is_comm("vectorized_elementwise_kernel"));
    ck_assert(!report_kernel_is_comm(NULL));
    gpu_run(3, 98, 100000, 1000, 1e9, 1e7);
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';");
    nccl_kernels(30000000); // 30 ms a step against 9.8 of GEMMs
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_finding *f = &findings.v[findings.n - 1];
    ck_assert_msg(strstr(f->title, "kernels, 75% communication (NCCL) on NVIDIA H200"), "%s",
                  f->title);
    ck_assert_close(evidence(f, "communication_share"), 30.0 / 39.8, 1e-9, 0);
    ck_assert_close(evidence(f, "compute_share") + evidence(f, "memory_share") +
                        evidence(f, "launch_share") + evidence(f, "communication_share"),
                    1, 1e-12, 0);
    ck_assert_msg(strstr(f->detail, "ncclDevKernel_AllReduce_Sum_f32_RING_LL 75% of GPU time, 3 x "
                                    "30000.0 us, communication"),
                  "%s", f->detail);
    release();
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    ck_assert_msg(strstr(findings.v[0].title, "AMP can pay off: 100% of the GPU time"), "%s",
                  findings.v[0].title);
    ck_assert_msg(strstr(findings.v[0].detail, "GEMM share of GPU time 100% (NCCL's left out)"),
                  "%s", findings.v[0].detail);
    release();
}
END_TEST

START_TEST(amp_payoff_busy_gemm_amp_run_is_quiet) {
    gpu_run(3, 98, 100000, 1000, 1e9, 1e7);
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    // an fp32 run of GEMM-heavy work: AMP can pay off (a note)
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';");
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "AMP can pay off"));
    release();
}
END_TEST

START_TEST(amp_payoff_projects_a_cpu_run_as_a_note) {
    healthy(6);
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    // 4 small ops per step: ~12 launches x 5 us against nanoseconds of math
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "launch-bound"));
    ck_assert_close(evidence(&findings.v[0], "step_launches"), 12, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "ceilings_assumed"), 1, 0, 0);
    release();
    // ops recorded without their analytic figures (a producer of its own): no projection (it
    // read "~0 FLOP, ~0 B" and "against ~0 us of fp32 math")
    sql("UPDATE AMP_OPS SET flops = NULL, bytes = NULL;");
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------

// The part's tests, in the `rules` test case.
void report_perf_tests(TCase *tc) {
    tcase_add_test(tc, precision_fp32_gemm_under_autocast_is_a_warning);
    tcase_add_test(tc, precision_healthy_autocast_and_fp32_runs_are_quiet);
    tcase_add_test(tc, precision_upcasts_and_casts_are_notes_on_the_cpu);
    tcase_add_test(tc, gemm_dimensions_are_read_from_the_shapes);
    tcase_add_test(tc, precision_odd_gemm_dimensions_are_named);
    tcase_add_test(tc, precision_odd_gemm_kernel_time_is_told);
    tcase_add_test(tc, roofline_slow_compute_layer_is_a_warning);
    tcase_add_test(tc, roofline_uses_the_calibrated_ceilings);
    tcase_add_test(tc, roofline_efficient_kernels_are_a_note);
    tcase_add_test(tc, roofline_op_flops_go_to_gemm_kernels);
    tcase_add_test(tc, kernels_take_the_layer_of_most_of_their_time);
    tcase_add_test(tc, kernels_of_a_real_length_are_kept_damaged_ones_left_out);
    tcase_add_test(tc, kernel_names_that_are_gemms);
    tcase_add_test(tc, roofline_places_kernels_by_hardware_counters);
    tcase_add_test(tc, gpu_idle_gaps_are_a_warning);
    tcase_add_test(tc, gpu_idle_is_each_gpus);
    tcase_add_test(tc, step_busy_is_its_own_process_gpus);
    tcase_add_test(tc, gpu_idle_back_to_back_kernels_are_quiet);
    tcase_add_test(tc, gpu_idle_leaves_the_warm_up_out);
    tcase_add_test(tc, gpu_idle_leaves_what_follows_the_loop_out);
    tcase_add_test(tc, gpu_idle_leaves_what_runs_between_steps_out);
    tcase_add_test(tc, h2d_pageable_copies_are_a_warning);
    tcase_add_test(tc, h2d_small_pinned_copies_are_quiet);
    tcase_add_test(tc, h2d_copies_of_no_weight_are_quiet);
    tcase_add_test(tc, host_sync_every_few_ops_is_a_warning);
    tcase_add_test(tc, sync_advice_is_given_once);
    tcase_add_test(tc, gpu_idle_advice_follows_the_gaps);
    tcase_add_test(tc, host_sync_once_per_step_is_quiet);
    tcase_add_test(tc, host_sync_leaves_the_warm_up_out);
    tcase_add_test(tc, host_sync_leaves_out_incomplete_records);
    tcase_add_test(tc, host_sync_without_steps_is_per_process);
    tcase_add_test(tc, host_sync_outside_the_steps_is_not_the_loops);
    tcase_add_test(tc, host_sync_with_the_gpu_busy_is_a_note);
    tcase_add_test(tc, amp_payoff_launch_bound_amp_run_is_a_warning);
    tcase_add_test(tc, amp_payoff_of_the_warm_up_alone_claims_no_busy_share);
    tcase_add_test(tc, amp_payoff_busy_gemm_amp_run_is_quiet);
    tcase_add_test(tc, nccl_kernels_are_communication);
    tcase_add_test(tc, amp_payoff_projects_a_cpu_run_as_a_note);
}
