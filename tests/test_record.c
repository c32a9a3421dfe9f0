/*
 * test_record.c — the `record` suite: the spool record codec (every record type round-trips,
 * NULL strings and NaN included; every truncation and malformed string is refused; random bytes
 * never crash the decoder; newer versions with extra fields still decode), the spool header, and
 * the writer (off unless started; a started process writes one spool file whose records decode in
 * order; the background flush; a forked child writes only its own records; a context's
 * instrumentation ends with the recording).
 */
#include "tests.h"

#include "amp-impl.h" // amp_ctx_t's instrumentation
#include "amp-record.h"
#include "record-codec.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Helpers

// Encodes r into a fresh buffer; *n receives its size.
static uint8_t *encode(amp_rec_type t, const void *r, size_t *n) {
    *n = amp_rec_encode(t, r, NULL, 0);
    uint8_t *buf = malloc(*n);
    ck_assert_uint_eq(amp_rec_encode(t, r, buf, *n), *n);
    return buf;
}

// Encodes, scans and decodes r; returns the decoded record (pointing into *buf, freed by caller).
static amp_rec_any roundtrip(amp_rec_type t, const void *r, uint8_t **buf) {
    size_t n;
    *buf = encode(t, r, &n);
    amp_rec_header h;
    const uint8_t *payload;
    ck_assert_int_eq(amp_rec_scan(*buf, n, &h, &payload), AMP_SCAN_RECORD);
    ck_assert_int_eq(h.type, t);
    ck_assert_int_eq(h.version, t == AMP_REC_STEP ? 2 : 1); // the step added mem_peak_bytes
    ck_assert_uint_eq(h.length + AMP_REC_HEADER_BYTES, n);
    amp_rec_any out;
    memset(&out, 0xAB, sizeof out);
    ck_assert(amp_rec_decode(h.type, payload, h.length, &out));
    return out;
}

static void assert_str(const char *got, const char *want) {
    if (!want)
        ck_assert_ptr_null(got);
    else
        ck_assert_str_eq(got, want);
}

static char *make_temp_dir(void) {
    char *dir = malloc(64);
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, 64, "/tmp/amp-test-record-"));
    return dir;
}

// The spool files in dir (up to 8), full paths.
static int list_spools(const char *dir, char paths[][512]) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 8;) {
        size_t len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".spool") == 0)
            snprintf(paths[n++], 512, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return n;
}

// Decodes the records of one type (AMP_REC_STEP or AMP_REC_TENSOR_STATS) of a spool file: their
// steps into steps[], returns the count.
static int spool_steps_of(const char *path, amp_rec_type type, int64_t *steps, int max,
                          amp_spool_header *hdr) {
    size_t n;
    uint8_t *buf = (uint8_t *)test_read_file(path, &n);
    ck_assert_uint_ge(n, sizeof *hdr);
    memcpy(hdr, buf, sizeof *hdr);
    ck_assert_int_eq(amp_spool_header_check(hdr), AMP_OK);
    int count = 0;
    for (size_t pos = hdr->header_bytes; pos < n;) {
        amp_rec_header h;
        const uint8_t *payload;
        ck_assert_int_eq(amp_rec_scan(buf + pos, n - pos, &h, &payload), AMP_SCAN_RECORD);
        amp_rec_any r;
        ck_assert(amp_rec_decode(h.type, payload, h.length, &r));
        if (h.type == type && count < max)
            steps[count++] = type == AMP_REC_STEP ? r.step.step : r.tensor_stats.step;
        pos += AMP_REC_HEADER_BYTES + h.length;
    }
    free(buf);
    return count;
}

// Decodes the step records of a spool file: their steps into steps[], returns the count.
static int spool_steps(const char *path, int64_t *steps, int max, amp_spool_header *hdr) {
    return spool_steps_of(path, AMP_REC_STEP, steps, max, hdr);
}

// The step records of the one spool file in dir: their steps into steps[], returns the count.
static int recorded_steps(const char *dir, int64_t *steps, int max) {
    char paths[8][512];
    ck_assert_int_eq(list_spools(dir, paths), 1);
    amp_spool_header h;
    return spool_steps(paths[0], steps, max, &h);
}

// n training steps of sum(w * w) in ctx, each ended with its loss tensor.
static void train_steps(amp_ctx_t *ctx, amp_tensor_t *w, int n) {
    for (int step = 0; step < n; step++) {
        amp_tensor_t *loss = amp_sum(ctx, amp_mul(ctx, w, w));
        amp_backward(ctx, loss);
        amp_ctx_step_end_loss(ctx, loss);
        amp_ctx_reset(ctx);
        amp_tensor_zero_grad(w);
    }
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static amp_rec_step step_rec(int64_t step) {
    return (amp_rec_step){
        .step = step, .start_ns = 10, .end_ns = 20, .loss = 1.5, .grad_norm = NAN};
}

// ---------------------------------------------------------------------------------------------
// Codec

START_TEST(test_roundtrip_amp_records) {
    uint8_t *buf;
    amp_rec_meta meta = {"precision", "fp16"};
    amp_rec_any r = roundtrip(AMP_REC_META, &meta, &buf);
    assert_str(r.meta.key, "precision");
    assert_str(r.meta.value, "fp16");
    free(buf);

    amp_rec_layer layer = {.id = 7, .parent_id = -1, .name = "blocks.1.attn.qkv"};
    r = roundtrip(AMP_REC_LAYER, &layer, &buf);
    ck_assert_int_eq(r.layer.id, 7);
    ck_assert_int_eq(r.layer.parent_id, -1);
    assert_str(r.layer.name, "blocks.1.attn.qkv");
    free(buf);

    amp_rec_step step = {.step = 1234567890123,
                         .start_ns = -5,
                         .end_ns = INT64_MAX,
                         .loss = INFINITY,
                         .grad_norm = NAN,
                         .mem_peak_bytes = 3400000000};
    r = roundtrip(AMP_REC_STEP, &step, &buf);
    ck_assert_int_eq(r.step.step, 1234567890123);
    ck_assert_int_eq(r.step.mem_peak_bytes, 3400000000);
    ck_assert_int_eq(r.step.start_ns, -5);
    ck_assert_int_eq(r.step.end_ns, INT64_MAX);
    ck_assert(isinf(r.step.loss) && r.step.loss > 0);
    ck_assert(isnan(r.step.grad_norm));
    free(buf);

    amp_rec_scale scale = {.step = 3,
                           .scale_before = 65536,
                           .scale_after = 32768,
                           .found_inf = 2,
                           .growth_tracker = 0,
                           .skipped = true};
    r = roundtrip(AMP_REC_SCALE, &scale, &buf);
    ck_assert_double_eq(r.scale.scale_before, 65536);
    ck_assert_double_eq(r.scale.scale_after, 32768);
    ck_assert_int_eq(r.scale.found_inf, 2);
    ck_assert(r.scale.skipped);
    free(buf);

    amp_rec_tensor_stats ts = {.step = 9,
                               .layer_id = 3,
                               .op = NULL,
                               .kind = AMP_STATS_WEIGHT_GRAD,
                               .dtype = "f32",
                               .target_dtype = NULL,
                               .numel = 1 << 20,
                               .min = -1e-9,
                               .max = NAN,
                               .amax = 65504,
                               .n_nan = 5,
                               .n_posinf = 0,
                               .n_neginf = 1,
                               .n_overflow = -1,
                               .n_underflow = -1,
                               .n_zero = 77};
    r = roundtrip(AMP_REC_TENSOR_STATS, &ts, &buf);
    ck_assert_ptr_null(r.tensor_stats.op);
    ck_assert_ptr_null(r.tensor_stats.target_dtype);
    assert_str(r.tensor_stats.dtype, "f32");
    ck_assert_int_eq(r.tensor_stats.kind, AMP_STATS_WEIGHT_GRAD);
    ck_assert_int_eq(r.tensor_stats.numel, 1 << 20);
    ck_assert(isnan(r.tensor_stats.max));
    ck_assert_double_eq(r.tensor_stats.amax, 65504);
    ck_assert_int_eq(r.tensor_stats.n_overflow, -1);
    ck_assert_int_eq(r.tensor_stats.n_zero, 77);
    free(buf);

    amp_rec_op op = {.step = 1,
                     .layer_id = -1,
                     .op = "mm",
                     .phase = AMP_PHASE_BWD,
                     .in_dtypes = "f16,f16",
                     .out_dtype = "f16",
                     .policy = "",
                     .shapes = "(2, 3),(3, 4)",
                     .flops = 48,
                     .bytes = -1,
                     .start_ns = 100,
                     .end_ns = 200};
    r = roundtrip(AMP_REC_OP, &op, &buf);
    assert_str(r.op.op, "mm");
    ck_assert_int_eq(r.op.phase, AMP_PHASE_BWD);
    assert_str(r.op.policy, ""); // empty and NULL stay different
    assert_str(r.op.shapes, "(2, 3),(3, 4)");
    ck_assert_int_eq(r.op.bytes, -1);
    ck_assert_int_eq(r.op.end_ns, 200);
    free(buf);

    amp_rec_event ev = {.step = 4,
                        .layer_id = 2,
                        .op = "softmax",
                        .phase = AMP_PHASE_FWD,
                        .kind = AMP_EVENT_NONFINITE_PRODUCER,
                        .severity = AMP_SEVERITY_ERROR,
                        .count = 12,
                        .value = NAN,
                        .detail = "inputs in [-70000, 3]"};
    r = roundtrip(AMP_REC_EVENT, &ev, &buf);
    assert_str(r.event.kind, "nonfinite_producer");
    ck_assert_int_eq(r.event.severity, AMP_SEVERITY_ERROR);
    ck_assert_int_eq(r.event.count, 12);
    ck_assert(isnan(r.event.value));
    assert_str(r.event.detail, "inputs in [-70000, 3]");
    free(buf);
}
END_TEST

START_TEST(test_roundtrip_cupti_records) {
    uint8_t *buf;
    amp_rec_kernel k = {.start_ns = 1,
                        .end_ns = 2,
                        .device_id = 3,
                        .context_id = 4,
                        .stream_id = 5,
                        .green_context_id = -1,
                        .correlation_id = 6,
                        .name = "_Z3fooPf",
                        .demangled = "foo(float*)",
                        .short_name = NULL,
                        .launch_type = 0,
                        .cache_config = -1,
                        .registers_per_thread = 32,
                        .grid_x = 10,
                        .grid_y = 11,
                        .grid_z = 12,
                        .block_x = 13,
                        .block_y = 14,
                        .block_z = 15,
                        .static_shared_memory = 16,
                        .dynamic_shared_memory = 17,
                        .local_memory_per_thread = 18,
                        .local_memory_total = 19,
                        .grid_id = 20,
                        .shared_memory_executed = 21,
                        .shared_memory_limit_config = 22,
                        .graph_node_id = -1};
    amp_rec_any r = roundtrip(AMP_REC_KERNEL, &k, &buf);
    ck_assert_mem_eq(&r.kernel.start_ns, &k.start_ns, offsetof(amp_rec_kernel, name));
    assert_str(r.kernel.name, "_Z3fooPf");
    assert_str(r.kernel.demangled, "foo(float*)");
    ck_assert_ptr_null(r.kernel.short_name);
    ck_assert_int_eq(r.kernel.grid_z, 12);
    ck_assert_int_eq(r.kernel.local_memory_total, 19);
    ck_assert_int_eq(r.kernel.shared_memory_limit_config, 22);
    ck_assert_int_eq(r.kernel.graph_node_id, -1);
    free(buf);

    amp_rec_memcpy mc = {1, 2, 3, 4, 5, -1, 7, 1 << 30, 1, 0, 2, -1, -1, -1, -1, -1, -1, 0x7f00};
    r = roundtrip(AMP_REC_MEMCPY, &mc, &buf);
    ck_assert_mem_eq(&r.memcpy, &mc, sizeof mc);
    free(buf);

    amp_rec_memset ms = {1, 2, 3, 4, 5, -1, 7, -9, 4096, -1, 2};
    r = roundtrip(AMP_REC_MEMSET, &ms, &buf);
    ck_assert_int_eq(r.memset.green_context_id, -1);
    ck_assert_int_eq(r.memset.correlation_id, 7);
    ck_assert_int_eq(r.memset.value, -9);
    ck_assert_int_eq(r.memset.bytes, 4096);
    ck_assert_int_eq(r.memset.mem_kind, 2);
    free(buf);

    amp_rec_runtime rt = {.start_ns = 5,
                          .end_ns = 9,
                          .driver = true,
                          .tid = 77,
                          .correlation_id = 8,
                          .name = "cuLaunchKernel",
                          .return_value = 700};
    r = roundtrip(AMP_REC_RUNTIME, &rt, &buf);
    ck_assert(r.runtime.driver);
    ck_assert_int_eq(r.runtime.tid, 77);
    assert_str(r.runtime.name, "cuLaunchKernel");
    ck_assert_int_eq(r.runtime.return_value, 700);
    free(buf);

    amp_rec_sync sy = {1, 2, 3, 4, 5, -1, 7, 3, 99};
    r = roundtrip(AMP_REC_SYNC, &sy, &buf);
    ck_assert_int_eq(r.sync.end_ns, 2);
    ck_assert_int_eq(r.sync.stream_id, 5);
    ck_assert_int_eq(r.sync.sync_type, 3);
    ck_assert_int_eq(r.sync.event_id, 99);
    free(buf);

    amp_rec_nvtx nv = {.start_ns = 1,
                       .end_ns = -1,
                       .type = AMP_NVTX_MARK,
                       .range_id = -1,
                       .category = 4,
                       .color = 0xFF00FF00,
                       .text = NULL,
                       .text_id = 3,
                       .domain_id = 0,
                       .tid = 11,
                       .end_tid = -1,
                       .payload_type = AMP_NVTX_PAYLOAD_DOUBLE,
                       .payload.f64 = 2.5};
    r = roundtrip(AMP_REC_NVTX, &nv, &buf);
    ck_assert_int_eq(r.nvtx.type, AMP_NVTX_MARK);
    ck_assert_ptr_null(r.nvtx.text);
    ck_assert_uint_eq(r.nvtx.text_id, 3);
    ck_assert_int_eq(r.nvtx.color, 0xFF00FF00);
    ck_assert_double_eq(r.nvtx.payload.f64, 2.5);
    free(buf);

    amp_rec_string str = {.id = 42, .value = "my domain"};
    r = roundtrip(AMP_REC_STRING, &str, &buf);
    ck_assert_uint_eq(r.string.id, 42);
    assert_str(r.string.value, "my domain");
    free(buf);

    amp_rec_gpu_info gi = {.id = 0,
                           .cu_device = 0,
                           .name = "NVIDIA H200",
                           .bus_location = NULL,
                           .uuid = "GPU-1234",
                           .chip_name = "GH100",
                           .is_discrete = 1,
                           .total_memory = 150000000000LL,
                           .sm_count = 132,
                           .compute_major = 9,
                           .compute_minor = 0,
                           .max_blocks_per_sm = 32};
    r = roundtrip(AMP_REC_GPU_INFO, &gi, &buf);
    assert_str(r.gpu_info.name, "NVIDIA H200");
    ck_assert_ptr_null(r.gpu_info.bus_location);
    ck_assert_int_eq(r.gpu_info.total_memory, 150000000000LL);
    ck_assert_int_eq(r.gpu_info.sm_count, 132);
    ck_assert_int_eq(r.gpu_info.max_blocks_per_sm, 32);
    free(buf);

    amp_rec_gpu_metric gm = {.device_id = 1,
                             .start_ns = 1000,
                             .end_ns = 21000,
                             .metric = "dram__bytes_read.sum",
                             .value = 6.5e7};
    r = roundtrip(AMP_REC_GPU_METRIC, &gm, &buf);
    ck_assert_int_eq(r.gpu_metric.device_id, 1);
    ck_assert_int_eq(r.gpu_metric.start_ns, 1000);
    ck_assert_int_eq(r.gpu_metric.end_ns, 21000);
    assert_str(r.gpu_metric.metric, "dram__bytes_read.sum");
    ck_assert_double_eq(r.gpu_metric.value, 6.5e7);
    free(buf);
}
END_TEST

START_TEST(test_long_string_is_cut) {
    size_t len = AMP_REC_STR_MAX + 1000;
    char *s = malloc(len + 1);
    memset(s, 'x', len);
    s[len] = 0;
    amp_rec_meta meta = {"k", s};
    uint8_t *buf;
    amp_rec_any r = roundtrip(AMP_REC_META, &meta, &buf);
    ck_assert_uint_eq(strlen(r.meta.value), AMP_REC_STR_MAX);
    free(buf);
    free(s);
}
END_TEST

// UTF-8 as the store, the codec and the report read it: each sequence's length, or 0 where a
// byte begins none; cuts made where no character is split, also of a record's long string.
START_TEST(test_utf8_sequences_and_cuts) {
    static const struct {
        const char *s;
        size_t n, len;
    } seqs[] = {
        {"a", SIZE_MAX, 1},
        {"\x80", SIZE_MAX, 0}, // a lone continuation
        {"\xC2\x80", SIZE_MAX, 2},
        {"\xC1\xBF", SIZE_MAX, 0}, // overlong in 2 bytes
        {"\xE0\xA0\x80", SIZE_MAX, 3},
        {"\xE0\x9F\xBF", SIZE_MAX, 0}, // ... in 3
        {"\xED\x9F\xBF", SIZE_MAX, 3},
        {"\xED\xA0\x80", SIZE_MAX, 0}, // a surrogate
        {"\xF0\x90\x80\x80", SIZE_MAX, 4},
        {"\xF0\x8F\xBF\xBF", SIZE_MAX, 0}, // ... in 4
        {"\xF4\x8F\xBF\xBF", SIZE_MAX, 4},
        {"\xF4\x90\x80\x80", SIZE_MAX, 0}, // beyond U+10FFFF
        {"\xF5\x80\x80\x80", SIZE_MAX, 0},
        {"\xC3\xA9", 1, 0},
        {"\xE2\x80\xA6", 2, 0},
        {"\xE2\x80", SIZE_MAX, 0}, // cut short
    };
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++)
        ck_assert_msg(amp_utf8_seq(seqs[i].s, seqs[i].n) == seqs[i].len, "case %zu", i);
    const char *s = "a\xC3\xA9\xE2\x80\xA6\xF0\x9F\x98\x80"; // a é … 😀
    const size_t cuts[] = {0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10};
    for (size_t len = 0; len <= 10; len++)
        ck_assert_msg(amp_utf8_cut(s, len) == cuts[len], "cut at %zu", len);

    const size_t n = AMP_REC_STR_MAX + 2; // é over and over, longer than a record takes
    char *e = malloc(n + 1);
    for (size_t k = 0; k < n; k += 2)
        memcpy(e + k, "\xC3\xA9", 2);
    e[n] = 0;
    amp_rec_meta meta = {"k", e};
    uint8_t *buf;
    amp_rec_any r = roundtrip(AMP_REC_META, &meta, &buf);
    const size_t kept = strlen(r.meta.value); // (an odd limit falls inside an é)
    ck_assert_uint_eq(kept, AMP_REC_STR_MAX - AMP_REC_STR_MAX % 2);
    for (size_t k = 0; k < kept; k += 2)
        ck_assert_uint_eq(amp_utf8_seq(r.meta.value + k, kept - k), 2);
    free(buf);
    free(e);
}
END_TEST

// Text appended to a buffer: cut at its end, the offset counting on past it so that nothing
// more is written once a piece did not fit (nor into a buffer of no bytes).
START_TEST(test_appendf_cuts_and_stays_cut) {
    char buf[8] = "";
    size_t k = amp_appendf(buf, sizeof buf, 0, "%s", "abc");
    ck_assert_uint_eq(k, 3);
    k = amp_appendf(buf, sizeof buf, k, "-%d", 42);
    ck_assert_str_eq(buf, "abc-42");
    k = amp_appendf(buf, sizeof buf, k, "%s", "xyz"); // 1 byte of room: "x"
    ck_assert_str_eq(buf, "abc-42x");
    ck_assert_uint_eq(k, 9);
    ck_assert_uint_eq(amp_appendf(buf, sizeof buf, k, "more"), 9);
    ck_assert_str_eq(buf, "abc-42x");
    char none[1] = {'q'};
    ck_assert_uint_eq(amp_appendf(none, 0, 0, "x"), 0);
    ck_assert_int_eq(none[0], 'q');
}
END_TEST

// META command: the words as a shell reads them back (the launcher's and AMPPROBE_OUT's alike).
START_TEST(test_shell_join) {
    char *argv[] = {"prog", "--save", "a b.bin", "it's", "", "x=1,2", NULL};
    char *line = amp_shell_join(argv);
    ck_assert_str_eq(line, "prog --save 'a b.bin' 'it'\\''s' '' x=1,2");
    free(line);
}
END_TEST

START_TEST(test_truncation_refused) {
    amp_rec_event ev = {.step = 4,
                        .layer_id = 2,
                        .op = "softmax",
                        .phase = AMP_PHASE_FWD,
                        .kind = "overflow",
                        .severity = AMP_SEVERITY_WARNING,
                        .count = 1,
                        .value = 1.0,
                        .detail = "d"};
    size_t n;
    uint8_t *buf = encode(AMP_REC_EVENT, &ev, &n);
    amp_rec_header h;
    const uint8_t *payload;
    for (size_t cut = 0; cut < n; cut++) // every prefix of a record is incomplete, not a record
        ck_assert_int_eq(amp_rec_scan(buf, cut, &h, &payload), AMP_SCAN_PARTIAL);
    ck_assert_int_eq(amp_rec_scan(buf, n, &h, &payload), AMP_SCAN_RECORD);
    amp_rec_any r;
    for (uint32_t len = 0; len < h.length; len++) { // a payload cut anywhere does not decode
        uint8_t *copy = malloc(len ? len : 1);      // exact-size copy: ASan sees any overread
        memcpy(copy, payload, len);
        ck_assert_msg(!amp_rec_decode(h.type, copy, len, &r), "decoded %u of %u bytes", len,
                      h.length);
        free(copy);
    }
    free(buf);
}
END_TEST

START_TEST(test_corruption_refused) {
    uint8_t hdr[AMP_REC_HEADER_BYTES] = {0};
    amp_rec_header h;
    const uint8_t *payload;
    ck_assert_int_eq(amp_rec_scan(hdr, sizeof hdr, &h, &payload), AMP_SCAN_CORRUPT); // type 0
    uint16_t t = AMP_REC_STEP, v = 1;
    uint32_t len = AMP_REC_MAX_BYTES + 1;
    memcpy(hdr, &t, 2);
    memcpy(hdr + 2, &v, 2);
    memcpy(hdr + 4, &len, 4);
    ck_assert_int_eq(amp_rec_scan(hdr, sizeof hdr, &h, &payload), AMP_SCAN_CORRUPT);
    v = 0;
    len = 8;
    memcpy(hdr + 2, &v, 2);
    memcpy(hdr + 4, &len, 4);
    ck_assert_int_eq(amp_rec_scan(hdr, sizeof hdr, &h, &payload), AMP_SCAN_CORRUPT); // version 0

    // Strings: a length past the end, a missing NUL.
    amp_rec_meta meta = {"key", "value"};
    size_t n;
    uint8_t *buf = encode(AMP_REC_META, &meta, &n);
    amp_rec_any r;
    uint8_t *p = buf + AMP_REC_HEADER_BYTES;
    uint32_t plen = (uint32_t)(n - AMP_REC_HEADER_BYTES);
    ck_assert(amp_rec_decode(AMP_REC_META, p, plen, &r));
    uint32_t bad = 1000;
    memcpy(p, &bad, 4);
    ck_assert(!amp_rec_decode(AMP_REC_META, p, plen, &r));
    uint32_t three = 3;
    memcpy(p, &three, 4);
    p[4 + 3] = 'X'; // where the NUL after "key" was
    ck_assert(!amp_rec_decode(AMP_REC_META, p, plen, &r));
    ck_assert(!amp_rec_decode(999, p, plen, &r)); // a type this build does not know
    ck_assert(!amp_rec_type_known(999));
    free(buf);
}
END_TEST

START_TEST(test_random_bytes_never_crash) {
    static const uint16_t types[] = {
        AMP_REC_META,         AMP_REC_LAYER,  AMP_REC_STEP,     AMP_REC_SCALE,
        AMP_REC_TENSOR_STATS, AMP_REC_OP,     AMP_REC_EVENT,    AMP_REC_STRING,
        AMP_REC_KERNEL,       AMP_REC_MEMCPY, AMP_REC_MEMSET,   AMP_REC_RUNTIME,
        AMP_REC_SYNC,         AMP_REC_NVTX,   AMP_REC_GPU_INFO, AMP_REC_GPU_METRIC};
    srand(12345);
    int decoded = 0;
    for (int iter = 0; iter < 20000; iter++) {
        uint32_t len = (uint32_t)(rand() % 300);
        uint8_t *p = malloc(len ? len : 1);
        for (uint32_t i = 0; i < len; i++) // short string lengths now and then, so some decode
            p[i] = (uint8_t)(rand() % 4 == 0 ? rand() % 8 : rand());
        amp_rec_any r;
        decoded += amp_rec_decode(types[iter % (sizeof types / sizeof *types)], p, len, &r);
        amp_rec_header h;
        const uint8_t *payload;
        amp_scan sc = amp_rec_scan(p, len, &h, &payload);
        if (sc == AMP_SCAN_RECORD) ck_assert_uint_le(AMP_REC_HEADER_BYTES + h.length, len);
        free(p);
    }
    ck_assert_int_gt(decoded, 0); // the loop did exercise successful decodes too
}
END_TEST

START_TEST(test_newer_version_extra_fields) {
    // A newer writer appends fields: this build decodes what it knows and ignores the rest.
    amp_rec_step step = step_rec(5);
    size_t n;
    uint8_t *buf = encode(AMP_REC_STEP, &step, &n);
    uint8_t *longer = calloc(1, n + 16);
    memcpy(longer, buf, n);
    uint16_t v = 3;
    uint32_t len;
    memcpy(&len, longer + 4, 4);
    len += 16;
    memcpy(longer + 2, &v, 2);
    memcpy(longer + 4, &len, 4);
    amp_rec_header h;
    const uint8_t *payload;
    ck_assert_int_eq(amp_rec_scan(longer, n + 16, &h, &payload), AMP_SCAN_RECORD);
    amp_rec_any r;
    ck_assert(amp_rec_decode(h.type, payload, h.length, &r));
    ck_assert_int_eq(r.step.step, 5);
    free(buf);
    free(longer);
}
END_TEST

START_TEST(test_older_version_reads_as_zero) {
    // A step record of version 1 (written before mem_peak_bytes) decodes, the field zeroed ("not
    // known"); a payload cut anywhere else still does not.
    amp_rec_step step = step_rec(9);
    step.mem_peak_bytes = 77;
    size_t n;
    uint8_t *buf = encode(AMP_REC_STEP, &step, &n);
    amp_rec_header h;
    const uint8_t *payload;
    ck_assert_int_eq(amp_rec_scan(buf, n, &h, &payload), AMP_SCAN_RECORD);
    ck_assert_int_eq(h.version, 2);
    const uint32_t v1_bytes = 5 * 8; // step, start_ns, end_ns, loss, grad_norm
    ck_assert_uint_eq(h.length, v1_bytes + 8);
    for (uint32_t len = 0; len < h.length; len++) {
        uint8_t *copy = malloc(len ? len : 1); // exact size: ASan sees any overread
        memcpy(copy, payload, len);
        amp_rec_any r;
        memset(&r, 0xAB, sizeof r);
        bool ok = amp_rec_decode(h.type, copy, len, &r);
        ck_assert_msg(ok == (len == v1_bytes), "%u bytes: decoded %d", len, ok);
        if (ok) {
            ck_assert_int_eq(r.step.step, 9);
            ck_assert_double_eq(r.step.loss, 1.5);
            ck_assert_int_eq(r.step.mem_peak_bytes, 0);
        }
        free(copy);
    }
    free(buf);
}
END_TEST

START_TEST(test_spool_header) {
    amp_spool_header h;
    amp_spool_header_init(&h, 42, 1, 777, "python3-with-a-very-long-name");
    ck_assert_int_eq(amp_spool_header_check(&h), AMP_OK);
    ck_assert_int_eq(h.pid, 42);
    ck_assert_int_eq(h.start_ns, 777);
    ck_assert_uint_eq(strlen(h.comm), 15);
    amp_spool_header bad = h;
    bad.magic[0] = 'X';
    ck_assert_int_eq(amp_spool_header_check(&bad), AMP_ERR_CORRUPT);
    bad = h;
    bad.version = AMP_SPOOL_VERSION + 1;
    ck_assert_int_eq(amp_spool_header_check(&bad), AMP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "version"));
    bad = h;
    bad.byte_order = 0x04030201;
    ck_assert_int_eq(amp_spool_header_check(&bad), AMP_ERR_UNSUPPORTED);
    bad = h;
    bad.pid = 0; // the database's pid of the run's own rows
    ck_assert_int_eq(amp_spool_header_check(&bad), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "pid 0"));
    bad.pid = -5;
    ck_assert_int_eq(amp_spool_header_check(&bad), AMP_ERR_CORRUPT);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Writer

START_TEST(test_off_without_start) {
    // The test runner has no AMPPROBE_SPOOL_DIR / AMPPROBE_OUT: recording is off, emitting is a
    // no-op.
    ck_assert(!amp_record_enabled());
    ck_assert_uint_eq(amp_record_trace_mask, 0);
    amp_rec_step s = step_rec(1);
    amp_record_step(&s);
    amp_record_flush();
    amp_record_stop();
    ck_assert(!amp_record_tracing(AMP_TRACE_CUDA));
}
END_TEST

START_TEST(test_start_bad_dir) {
    ck_assert_int_eq(amp_record_start("/nonexistent-amp-dir"), AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "/nonexistent-amp-dir"));
    ck_assert(!amp_record_enabled());
    // NULL (it crashed) and "" are refused
    ck_assert_int_eq(amp_record_start(NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_record_start: spool_dir is NULL");
    ck_assert_int_eq(amp_record_start(""), AMP_ERR_INVALID_ARGUMENT);
    ck_assert(!amp_record_enabled());
}
END_TEST

START_TEST(test_writer_spool_file) {
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    ck_assert(amp_record_enabled());
    ck_assert(amp_record_tracing(AMP_TRACE_NVTX));
    int64_t t0 = amp_record_now_ns();
    for (int i = 0; i < 1000; i++) {
        amp_rec_step s = step_rec(i);
        amp_record_step(&s);
    }
    ck_assert_int_ge(amp_record_now_ns(), t0);
    amp_record_stop();
    ck_assert(!amp_record_enabled());
    char paths[8][512];
    ck_assert_int_eq(list_spools(dir, paths), 1);
    int64_t steps[1000];
    amp_spool_header h;
    ck_assert_int_eq(spool_steps(paths[0], steps, 1000, &h), 1000);
    ck_assert_int_eq(h.pid, getpid());
    ck_assert_int_ge(h.start_ns, t0 - 1000000000);
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(steps[i], i);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_background_flush) {
    // Without any flush call, the records reach the file within ~100 ms.
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    amp_rec_step s = step_rec(1);
    amp_record_step(&s);
    char paths[8][512];
    ck_assert_int_eq(list_spools(dir, paths), 1);
    struct stat sb;
    int waited_ms = 0;
    for (; waited_ms < 2000; waited_ms += 10) {
        ck_assert_int_eq(stat(paths[0], &sb), 0);
        if ((size_t)sb.st_size > sizeof(amp_spool_header)) break;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    ck_assert_msg(waited_ms <= 300, "flushed after %d ms", waited_ms);
    amp_record_stop();
    rm_rf(dir);
    free(dir);
}
END_TEST

// A context made while the process records is instrumented until the end of the step in which
// recording ended (its launcher killed, the disk full, amp_record_stop), then trains on as one
// made without it.
START_TEST(test_instrumentation_ends_with_the_recording) {
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){4, 4});
    amp_tensor_set_requires_grad(w, true);
    for (int step = 0; step < 3; step++) {
        ck_assert_msg((ctx->instr != NULL) == (step <= 1), "step %d: instrumented? %d", step,
                      ctx->instr != NULL);
        amp_tensor_t *loss = amp_sum(ctx, amp_mul(ctx, w, w));
        amp_backward(ctx, loss);
        if (step == 1) amp_record_stop(); // recording ends within this step
        amp_ctx_step_end_loss(ctx, loss);
        amp_ctx_reset(ctx);
        amp_tensor_zero_grad(w);
    }
    ck_assert_ptr_null(ctx->instr);
    ck_assert_int_eq(amp_ctx_step_index(ctx), 3);
    amp_tensor_free(w);
    amp_ctx_free(ctx);
    rm_rf(dir);
    free(dir);
}
END_TEST

// A run resumed from a checkpoint numbers its steps on from the checkpoint's count
// (amp_ctx_set_step_index): the step records carry those numbers, and AMPPROBE_STATS_EVERY samples
// the steps that are its multiples, as if the run had counted up to there.
START_TEST(test_step_index_set) {
    setenv("AMPPROBE_STATS_EVERY", "3", 1);
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){4, 4});
    amp_tensor_set_requires_grad(w, true);
    amp_ctx_set_step_index(ctx, 7);
    ck_assert_int_eq(amp_ctx_step_index(ctx), 7);
    train_steps(ctx, w, 3);
    ck_assert_int_eq(amp_ctx_step_index(ctx), 10);
    amp_tensor_free(w);
    amp_ctx_free(ctx);
    amp_record_stop();
    char paths[8][512];
    ck_assert_int_eq(list_spools(dir, paths), 1);
    int64_t steps[64];
    amp_spool_header h;
    ck_assert_int_eq(spool_steps(paths[0], steps, 64, &h), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(steps[i], 7 + i);
    int n = spool_steps_of(paths[0], AMP_REC_TENSOR_STATS, steps, 64, &h);
    ck_assert_int_gt(n, 0);
    for (int i = 0; i < n; i++) // of 7, 8 and 9, only 9 is a multiple of 3
        ck_assert_int_eq(steps[i], 9);
    unsetenv("AMPPROBE_STATS_EVERY");
    rm_rf(dir);
    free(dir);
}
END_TEST

// A context made after another one was freed numbers its steps on from the first one's (a row
// per process and step: the same numbers would replace the first one's rows), unless the program
// numbers them itself; a new recording starts from 0.
START_TEST(test_second_context_numbers_on) {
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    const int64_t set[3] = {-1, -1, 40}; // the third numbers its own steps
    for (int c = 0; c < 3; c++) {
        amp_ctx_t *ctx;
        ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
        if (set[c] >= 0) amp_ctx_set_step_index(ctx, set[c]);
        amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_F32, 1, (int64_t[]){4});
        amp_tensor_set_requires_grad(w, true);
        train_steps(ctx, w, 2 + c);
        ck_assert_int_eq(amp_ctx_step_index(ctx), (set[c] >= 0 ? set[c] : 0) + 2 + c);
        amp_tensor_free(w);
        amp_ctx_free(ctx);
    }
    amp_record_stop();
    int64_t steps[64];
    ck_assert_int_eq(recorded_steps(dir, steps, 64), 2 + 3 + 4);
    static const int64_t want[] = {0, 1, 2, 3, 4, 40, 41, 42, 43};
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(steps[i], want[i]);
    rm_rf(dir);
    free(dir);
    // a recording of its own: from 0
    dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    amp_ctx_step_end(ctx, 1.0f);
    amp_ctx_free(ctx);
    amp_record_stop();
    ck_assert_int_eq(recorded_steps(dir, steps, 64), 1);
    ck_assert_int_eq(steps[0], 0);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_fork_child_writes_its_own) {
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    for (int i = 0; i < 3; i++) { // still in the buffer when the child is forked
        amp_rec_step s = step_rec(i);
        amp_record_step(&s);
    }
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (int i = 100; i < 102; i++) {
            amp_rec_step s = step_rec(i);
            amp_record_step(&s);
        }
        exit(0); // exit flushes the child's own spool (record.c: record_unload)
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    amp_rec_step s = step_rec(3);
    amp_record_step(&s);
    amp_record_stop();
    char paths[8][512];
    ck_assert_int_eq(list_spools(dir, paths), 2);
    for (int f = 0; f < 2; f++) {
        int64_t steps[16];
        amp_spool_header h;
        int n = spool_steps(paths[f], steps, 16, &h);
        if (h.pid == getpid()) {
            ck_assert_int_eq(n, 4);
            for (int i = 0; i < 4; i++)
                ck_assert_int_eq(steps[i], i);
        } else {
            ck_assert_int_eq(h.pid, pid);
            ck_assert_int_eq(h.ppid, getpid());
            ck_assert_int_eq(n, 2); // not the parent's three buffered records
            ck_assert_int_eq(steps[0], 100);
            ck_assert_int_eq(steps[1], 101);
        }
    }
    rm_rf(dir);
    free(dir);
}
END_TEST

enum { THREADS = 4, PER_THREAD = 50000 }; // 200k step records: more than one 4 MiB buffer

static void *emit_thread(void *arg) {
    int64_t base = (int64_t)(intptr_t)arg * 1000000;
    for (int i = 0; i < PER_THREAD; i++) {
        amp_rec_step s = step_rec(base + i);
        amp_record_step(&s);
    }
    return NULL;
}

START_TEST(test_threads_emit_concurrently) {
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    pthread_t t[THREADS];
    for (intptr_t i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, emit_thread, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    amp_record_stop();
    char paths[8][512];
    ck_assert_int_eq(list_spools(dir, paths), 1);
    int64_t *steps = malloc(THREADS * PER_THREAD * sizeof *steps);
    amp_spool_header h;
    ck_assert_int_eq(spool_steps(paths[0], steps, THREADS * PER_THREAD, &h), THREADS * PER_THREAD);
    int64_t next[THREADS] = {0}; // each thread's records are whole and in its order
    for (int i = 0; i < THREADS * PER_THREAD; i++) {
        int th = (int)(steps[i] / 1000000);
        ck_assert_int_lt(th, THREADS);
        ck_assert_int_eq(steps[i] % 1000000, next[th]++);
    }
    free(steps);
    rm_rf(dir);
    free(dir);
}
END_TEST

// The op records (AMP_REC_OP) and event records of the one spool file in dir, decoded: f(arg,
// type, record) for each.
static void each_op_and_event(const char *dir, void (*f)(void *, amp_rec_type, const amp_rec_any *),
                              void *arg) {
    char paths[8][512];
    ck_assert_int_eq(list_spools(dir, paths), 1);
    size_t n;
    uint8_t *buf = (uint8_t *)test_read_file(paths[0], &n);
    amp_spool_header hdr;
    memcpy(&hdr, buf, sizeof hdr);
    for (size_t pos = hdr.header_bytes; pos < n;) {
        amp_rec_header h;
        const uint8_t *payload;
        ck_assert_int_eq(amp_rec_scan(buf + pos, n - pos, &h, &payload), AMP_SCAN_RECORD);
        amp_rec_any r;
        ck_assert(amp_rec_decode(h.type, payload, h.length, &r));
        if (h.type == AMP_REC_OP || h.type == AMP_REC_EVENT) f(arg, (amp_rec_type)h.type, &r);
        pos += AMP_REC_HEADER_BYTES + h.length;
    }
    free(buf);
}

// Gradient accumulation: the time from a backward's start to the next micro-batch's layer (the
// backward, then loading the batch) is no forward op's: no op's span overlaps it.
typedef struct gaps {
    int64_t from[2], to[2]; // per micro-batch: the backward began, the next forward's layer began
    int ops;
} gaps;

static void op_outside_gaps(void *arg, amp_rec_type type, const amp_rec_any *r) {
    gaps *g = arg;
    if (type != AMP_REC_OP) return;
    g->ops++;
    ck_assert_int_le(r->op.start_ns, r->op.end_ns);
    for (int k = 0; k < 2; k++)
        ck_assert_msg(r->op.end_ns <= g->from[k] || r->op.start_ns >= g->to[k],
                      "op %s [%lld, %lld] overlaps micro-batch %d's backward and gap [%lld, %lld]",
                      r->op.op, (long long)r->op.start_ns, (long long)r->op.end_ns, k,
                      (long long)g->from[k], (long long)g->to[k]);
}

START_TEST(test_micro_batch_op_spans) {
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){64, 64});
    amp_tensor_t *x = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){64, 64});
    amp_tensor_randn(w, 1);
    amp_tensor_randn(x, 1);
    amp_tensor_set_requires_grad(w, true);
    gaps g = {.ops = 0};
    for (int m = 0; m < 2; m++) { // one optimizer step of two micro-batches
        if (m == 1) g.to[0] = amp_record_now_ns();
        amp_layer_begin(ctx, "fc");
        amp_tensor_t *h = amp_mm(ctx, x, w);
        amp_layer_end(ctx);
        amp_tensor_t *loss = amp_sum(ctx, amp_mul(ctx, h, h));
        g.from[m] = amp_record_now_ns();
        amp_backward(ctx, loss);
        nanosleep(&(struct timespec){0, 20000000}, NULL); // the next batch loads
        amp_ctx_reset(ctx);
    }
    g.to[1] = amp_record_now_ns();
    amp_ctx_step_end(ctx, 1);
    amp_ctx_free(ctx);
    amp_record_stop();
    each_op_and_event(dir, op_outside_gaps, &g);
    ck_assert_int_eq(g.ops, 6); // mm, mul, sum twice
    rm_rf(dir);
    free(dir);
}
END_TEST

// torch.matmul with a 1-D operand: the op's record and its events name the operands and the
// result as the program has them ((5,), (32,)), not as the GEMM took them ((5, 1), (32, 1)).
typedef struct seen {
    bool op, event;
} seen;

static void matmul_shapes(void *arg, amp_rec_type type, const amp_rec_any *r) {
    seen *s = arg;
    if (type == AMP_REC_OP && !strcmp(r->op.op, "matmul")) {
        ck_assert_str_eq(r->op.shapes, "(32, 5),(5,)");
        s->op = true;
    }
    if (type == AMP_REC_EVENT && r->event.op && !strcmp(r->event.op, "matmul")) {
        ck_assert_msg(strstr(r->event.detail, "input 1 f32 (5,) ") &&
                          strstr(r->event.detail, "output f32 (32,) "),
                      "%s", r->event.detail);
        s->event = true;
    }
}

START_TEST(test_matmul_vector_shapes) {
    char *dir = make_temp_dir();
    ck_assert_int_eq(amp_record_start(dir), AMP_OK);
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    amp_tensor_t *a = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){32, 5});
    amp_tensor_randn(a, 1);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_t *v = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, (int64_t[]){5},
                                          (float[]){1, 2, INFINITY, 4, 5}); // an event
    amp_tensor_t *y = amp_matmul(ctx, a, v);
    ck_assert_int_eq(amp_tensor_ndim(y), 1);
    amp_backward(ctx, amp_sum(ctx, y));
    amp_ctx_step_end(ctx, 1);
    amp_ctx_free(ctx);
    amp_record_stop();
    seen s = {false, false};
    each_op_and_event(dir, matmul_shapes, &s);
    ck_assert(s.op && s.event);
    rm_rf(dir);
    free(dir);
}
END_TEST

Suite *record_suite(void) {
    Suite *s = suite_create("record");
    TCase *c = tcase_create("codec");
    tcase_add_test(c, test_roundtrip_amp_records);
    tcase_add_test(c, test_roundtrip_cupti_records);
    tcase_add_test(c, test_long_string_is_cut);
    tcase_add_test(c, test_utf8_sequences_and_cuts);
    tcase_add_test(c, test_appendf_cuts_and_stays_cut);
    tcase_add_test(c, test_shell_join);
    tcase_add_test(c, test_truncation_refused);
    tcase_add_test(c, test_corruption_refused);
    tcase_add_test(c, test_random_bytes_never_crash);
    tcase_add_test(c, test_newer_version_extra_fields);
    tcase_add_test(c, test_older_version_reads_as_zero);
    tcase_add_test(c, test_spool_header);
    tcase_set_timeout(c, 60);
    suite_add_tcase(s, c);
    TCase *w = tcase_create("writer");
    tcase_add_test(w, test_off_without_start);
    tcase_add_test(w, test_start_bad_dir);
    tcase_add_test(w, test_writer_spool_file);
    tcase_add_test(w, test_background_flush);
    tcase_add_test(w, test_instrumentation_ends_with_the_recording);
    tcase_add_test(w, test_step_index_set);
    tcase_add_test(w, test_micro_batch_op_spans);
    tcase_add_test(w, test_matmul_vector_shapes);
    tcase_add_test(w, test_second_context_numbers_on);
    tcase_add_test(w, test_fork_child_writes_its_own);
    tcase_add_test(w, test_threads_emit_concurrently);
    tcase_set_timeout(w, 60);
    suite_add_tcase(s, w);
    return s;
}
