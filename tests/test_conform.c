/*
 * test_conform.c — suite `conform`: `ampprobe conform` on the golden PyTorch data
 * (tests/data/golden) passes; a doctored copy of each kind of reference file fails with the case
 * and the first mismatch, and so does a missing reference output; malformed files (a manifest
 * key the format lacks, a value libampcore refuses included) are errors naming file and line
 * (exit 2), and the summary line names what was not checked; cases this build cannot run are
 * reported as unsupported, never as passes.
 */
#include "tests.h"

#include "amp-impl.h"
#include "commands.h"
#include "conform.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GOLDEN AMP_SRC("tests/data/golden")

// ---------------------------------------------------------------------------------------------
// Helpers: a scratch directory, files copied from the golden set and doctored, captured runs

static char tmpdir[64];

static void setup(void) {
    ck_assert_ptr_nonnull(amp_make_temp_dir(tmpdir, sizeof tmpdir, "/tmp/ampconform."));
}

static void teardown(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        remove(path); // a file, a FIFO or an empty directory
    }
    closedir(d);
    rmdir(tmpdir);
}

static char *read_all(const char *dir, const char *name, size_t *n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return test_read_file(path, n);
}

static void write_file(const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void write_text(const char *name, const char *text) {
    write_file(name, text, strlen(text));
}

static void copy_golden(const char *name) {
    size_t n;
    char *data = read_all(GOLDEN, name, &n);
    write_file(name, data, n);
    free(data);
}

// Replaces the first occurrence of from by to in the scratch copy of name.
static void doctor(const char *name, const char *from, const char *to) {
    size_t n;
    char *data = read_all(tmpdir, name, &n);
    char *at = strstr(data, from);
    ck_assert_msg(at != NULL, "'%s' not in %s", from, name);
    size_t head = (size_t)(at - data), tail = n - head - strlen(from);
    char *out = malloc(head + strlen(to) + tail);
    memcpy(out, data, head);
    memcpy(out + head, to, strlen(to));
    memcpy(out + head + strlen(to), at + strlen(from), tail);
    write_file(name, out, head + strlen(to) + tail);
    free(out);
    free(data);
}

// Overwrites 2-byte element i of a binary scratch file.
static void poke16(const char *name, size_t i, uint16_t v) {
    size_t n;
    char *data = read_all(tmpdir, name, &n);
    ck_assert_uint_lt(2 * i + 1, n);
    memcpy(data + 2 * i, &v, 2);
    write_file(name, data, n);
    free(data);
}

struct captured {
    int status;
    char *out, *err;
    size_t out_n, err_n;
};

static struct captured run_conform(const char *dir) {
    struct captured c;
    FILE *out = open_memstream(&c.out, &c.out_n), *err = open_memstream(&c.err, &c.err_n);
    struct conform_run r = {.out = out, .err = err, .device = AMP_DEVICE_CPU};
    c.status = conform_dir(&r, dir);
    fclose(out);
    fclose(err);
    return c;
}

static void captured_free(struct captured *c) {
    free(c->out);
    free(c->err);
}

#define ck_assert_has(haystack, needle)                                                            \
    ck_assert_msg(strstr((haystack), (needle)) != NULL, "expected '%s' in:\n%s", (needle),         \
                  (haystack))

static const char *const e2e_files[] = {
    "e2e_mlp_sgd.manifest",     "e2e_mlp_sgd_W1.f32",       "e2e_mlp_sgd_b1.f32",
    "e2e_mlp_sgd_W2.f32",       "e2e_mlp_sgd_b2.f32",       "e2e_mlp_sgd_X.f32",
    "e2e_mlp_sgd_Y.i32",        "e2e_mlp_sgd_final_W1.f32", "e2e_mlp_sgd_final_b1.f32",
    "e2e_mlp_sgd_final_W2.f32", "e2e_mlp_sgd_final_b2.f32", "e2e_mlp_sgd_trace.txt",
};

static void copy_e2e(void) {
    for (size_t i = 0; i < sizeof e2e_files / sizeof e2e_files[0]; i++)
        copy_golden(e2e_files[i]);
}

// ---------------------------------------------------------------------------------------------
// The real golden set

START_TEST(test_golden_passes) {
    struct captured c = run_conform(GOLDEN);
    // 10 scaler sequences, 8 unscale cases, 41 autocast ops, 2 conversions, 1 training run
    ck_assert_msg(c.status == 0, "status %d:\n%s%s", c.status, c.out, c.err);
    ck_assert_str_eq(c.out, "62 passed, 0 failed\n");
    ck_assert_str_eq(c.err, "");
    captured_free(&c);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Doctored copies fail with the case and the first mismatch

START_TEST(test_scaler_doctored) {
    copy_golden("scaler_updates.txt");
    // S6_collapse: after 166 backoffs from 65536 the scale is 0.0 (line 203)
    doctor("scaler_updates.txt", "\n1 0.0 00000000 0\n", "\n1 0.0 00000001 0\n");
    doctor("scaler_updates.txt", "\n0 65536.0 47800000 1\n", "\n0 65536.0 47800000 2\n"); // S1
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_has(c.out, "FAIL scaler_updates.txt:S1 update 1: growth_tracker 1, expected 2\n");
    ck_assert_has(c.out, "FAIL scaler_updates.txt:S6_collapse update 166: scale 0x00000000, "
                         "expected 0x00000001\n");
    ck_assert_has(c.out, "8 passed, 2 failed\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_unscale_doctored) {
    copy_golden("unscale.txt");
    doctor("unscale.txt", "3f800000 40155556", "3f800000 40155555"); // U4 output
    doctor("unscale.txt", "37800000 1.0\n7fc00000\n7fffffff", "37800000 0.0\n7fc00000\n7fffffff");
    doctor("unscale.txt", "7fffffff 7f800000", "7fc00001 7f800000"); // U5: another NaN still passes
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_has(c.out, "FAIL unscale.txt:U4 element 1: 0x40155556, expected 0x40155555\n");
    ck_assert_has(c.out, "FAIL unscale.txt:U2b found_inf 1, expected 0\n");
    ck_assert_has(c.out, "6 passed, 2 failed\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_unscale_inv_scale) {
    copy_golden("unscale.txt");
    doctor("unscale.txt", "0.3333333432674408 3eaaaaab", "0.3333333432674408 3eaaaaaa");
    doctor("unscale.txt", "inf 7f800000 0.0\n00000000 3a83126f\n7fffffff",
           "inf 7f800000 0.0\n00000000 3a83126f\n7f800000"); // U5: NaN expected as inf
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_has(c.out, "FAIL unscale.txt:U4 inv_scale 0x3eaaaaab, expected 0x3eaaaaaa\n");
    ck_assert_has(c.out, "FAIL unscale.txt:U5 element 0: ");
    ck_assert_has(c.out, ", expected 0x7f800000\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_autocast_doctored) {
    copy_golden("autocast_dtypes.txt");
    doctor("autocast_dtypes.txt", "\nmm f16 f16 bf16 bf16\n", "\nmm f16 f32 bf16 bf16\n");
    doctor("autocast_dtypes.txt", "\nbce error error error error", "\nbce error error f32 error");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_has(c.out, "FAIL autocast_dtypes.txt:mm in=f16/ac=f16: f16, expected f32\n");
    ck_assert_has(c.out, "FAIL autocast_dtypes.txt:bce in=f32/ac=bf16: error, expected f32 - ");
    ck_assert_has(c.out, "39 passed, 2 failed\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_autocast_columns_and_unsupported) {
    write_text("autocast_dtypes_more.txt",
               "# op in=f16/ac=bf16 in=bf16/ac=f16\n"
               "mm bf16 f16      # every floating argument cast to the autocast dtype\n"
               "softplus f32 f32 # not in conform's call table: fp32 policy, first operand\n"
               "frobnicate f16 bf16\n"
               "where f32 f32\n"
               "addcdiv f32 f32  # promote: the fp32 self wins\n");
    struct captured c = run_conform(tmpdir);
    ck_assert_msg(c.status == 0, "status %d:\n%s%s", c.status, c.out, c.err);
    ck_assert_has(c.out, "UNSUPPORTED autocast_dtypes_more.txt:frobnicate unsupported op "
                         "frobnicate: ");
    ck_assert_has(c.out, "UNSUPPORTED autocast_dtypes_more.txt:where unsupported op where: ");
    ck_assert_has(c.out, "\n3 passed, 0 failed, 2 unsupported\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_convert_doctored) {
    copy_golden("conv_golden_in_f32.bin");
    copy_golden("conv_golden_f16_cuda.bin");
    copy_golden("conv_golden_bf16_cuda.bin");
    poke16("conv_golden_f16_cuda.bin", 0, 0x7BFF);  // input 0x7922e4ff overflows fp16 to inf
    poke16("conv_golden_f16_cuda.bin", 44, 0xFE01); // a NaN input: any NaN will do
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_str_eq(c.out, "FAIL conv_golden_f16_cuda.bin input 0 (0x7922e4ff): 0x7c00, "
                            "expected 0x7bff (1 of 200036 differ)\n1 passed, 1 failed\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_convert_orphans) {
    copy_golden("conv_golden_bf16_cuda.bin");
    copy_golden("conv_golden_f16_cuda.bin");
    copy_golden("conv_golden_in_f32.bin");
    size_t n;
    char *data = read_all(GOLDEN, "conv_golden_in_f32.bin", &n);
    write_file("conv_lonely_in_f32.bin", data, n);
    free(data);
    write_text("conv_stray_f16_cpu.bin", "");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_has(c.out, "FAIL conv_lonely_in_f32.bin no conv_lonely_f16_<tag>.bin or "
                         "conv_lonely_bf16_<tag>.bin beside it\n");
    ck_assert_has(c.out, "FAIL conv_stray_f16_cpu.bin no conv_stray_in_f32.bin beside it\n");
    ck_assert_has(c.out, "2 passed, 2 failed\n");
    captured_free(&c);
}
END_TEST

// One output of a pair lost: its half of the cases would otherwise go unchecked, unsaid.
START_TEST(test_convert_missing_output) {
    copy_golden("conv_golden_in_f32.bin");
    copy_golden("conv_golden_f16_cuda.bin");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_str_eq(c.out, "FAIL conv_golden_bf16_cuda.bin missing beside conv_golden_in_f32.bin "
                            "and conv_golden_f16_cuda.bin: the bf16 conversions are not checked\n"
                            "1 passed, 1 failed\n");
    captured_free(&c);

    // tag by tag: a complete cuda pair and a cpu output without its sibling
    copy_golden("conv_golden_bf16_cuda.bin");
    size_t n;
    char *data = read_all(GOLDEN, "conv_golden_bf16_cuda.bin", &n);
    write_file("conv_golden_bf16_cpu.bin", data, n);
    free(data);
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_str_eq(c.out, "FAIL conv_golden_f16_cpu.bin missing beside conv_golden_in_f32.bin "
                            "and conv_golden_bf16_cpu.bin: the f16 conversions are not checked\n"
                            "3 passed, 1 failed\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_e2e_doctored_trace) {
    copy_e2e();
    doctor("e2e_mlp_sgd_trace.txt", "\n18 3.0711960792541504 131072.0 1 65536.0\n",
           "\n18 3.0711960792541504 131072.0 0 65536.0\n");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_str_eq(c.out, "FAIL e2e_mlp_sgd.manifest:mlp_sgd step 18: found_inf 1, expected 0\n"
                            "0 passed, 1 failed\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_e2e_doctored_loss) {
    copy_e2e();
    doctor("e2e_mlp_sgd_trace.txt", "\n9 2.9939141273498535 ", "\n9 3.0939141273498535 ");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_has(c.out, "FAIL e2e_mlp_sgd.manifest:mlp_sgd step 9: loss ");
    ck_assert_has(c.out, "expected 3.09391413 (relative error ");
    captured_free(&c);
}
END_TEST

START_TEST(test_e2e_finals_without_trace) {
    copy_e2e();
    char path[512];
    snprintf(path, sizeof path, "%s/e2e_mlp_sgd_trace.txt", tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/e2e_mlp_sgd_final_b1.f32", tmpdir);
    unlink(path);
    size_t n;
    float *w2 = (float *)read_all(tmpdir, "e2e_mlp_sgd_final_W2.f32", &n);
    for (size_t i = 0; i < n / 4; i++)
        w2[i] *= 1.02f; // 2% off in the norm
    write_file("e2e_mlp_sgd_final_W2.f32", w2, n);
    free(w2);
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_has(c.out, "NOTE e2e_mlp_sgd.manifest:mlp_sgd no e2e_mlp_sgd_trace.txt: found_inf, "
                         "scale and loss per step not checked\n");
    ck_assert_has(c.out, "NOTE e2e_mlp_sgd.manifest:mlp_sgd no e2e_mlp_sgd_final_b1.f32: final "
                         "b1 not checked\n");
    ck_assert_has(c.out, "FAIL e2e_mlp_sgd.manifest:mlp_sgd final W2: ||ours - ref|| / ||ref|| = ");
    captured_free(&c);
}
END_TEST

START_TEST(test_e2e_scaler_from_trace) {
    copy_e2e();
    // a first scale_before of 1.0 is what a disabled torch GradScaler reports
    doctor("e2e_mlp_sgd_trace.txt", "\n0 3.8430466651916504 16777216.0 1 8388608.0\n",
           "\n0 3.8430466651916504 1.0 1 8388608.0\n");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_str_eq(c.out, "NOTE e2e_mlp_sgd.manifest:mlp_sgd f16 without a GradScaler (as the "
                            "trace's scale shows)\n"
                            "FAIL e2e_mlp_sgd.manifest:mlp_sgd step 0: found_inf 0, expected 1\n"
                            "0 passed, 1 failed\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_e2e_bf16_without_trace) {
    copy_e2e();
    char path[512];
    snprintf(path, sizeof path, "%s/e2e_mlp_sgd_trace.txt", tmpdir);
    unlink(path);
    doctor("e2e_mlp_sgd.manifest", "precision=fp16", "precision=bf16");
    struct captured c = run_conform(tmpdir);
    ck_assert_has(c.out, "NOTE e2e_mlp_sgd.manifest:mlp_sgd bf16 with a GradScaler (the manifest "
                         "sets it)\n");
    captured_free(&c);

    const char *scaler_keys[] = {"init_scale=16777216\n", "growth_factor=2\n",
                                 "backoff_factor=0.5\n", "growth_interval=10\n"};
    for (size_t i = 0; i < 4; i++)
        doctor("e2e_mlp_sgd.manifest", scaler_keys[i], "");
    c = run_conform(tmpdir);
    ck_assert_has(c.out, "NOTE e2e_mlp_sgd.manifest:mlp_sgd bf16 without a GradScaler (no scaler "
                         "key and no trace)\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_e2e_unsupported) {
    copy_e2e();
    doctor("e2e_mlp_sgd.manifest", "optimizer=sgd", "optimizer=rmsprop");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 0);
    ck_assert_str_eq(c.out, "UNSUPPORTED e2e_mlp_sgd.manifest:mlp_sgd unsupported "
                            "optimizer=rmsprop (line 9)\n0 passed, 0 failed, 1 unsupported\n");
    captured_free(&c);
}
END_TEST

// The reference outputs missing is no feature this build lacks: it fails, it is not unsupported.
START_TEST(test_e2e_nothing_to_compare) {
    copy_golden("e2e_mlp_sgd.manifest");
    const char *inputs[] = {"W1", "b1", "W2", "b2", "X"};
    for (size_t i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "e2e_mlp_sgd_%s.f32", inputs[i]);
        copy_golden(name);
    }
    copy_golden("e2e_mlp_sgd_Y.i32");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 1);
    ck_assert_str_eq(c.out, "FAIL e2e_mlp_sgd.manifest:mlp_sgd no e2e_mlp_sgd_trace.txt and "
                            "no e2e_mlp_sgd_final_*.f32: nothing to compare\n0 passed, 1 failed\n");
    captured_free(&c);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Malformed files: exit 2, the message names file and line, the other files still run

static void expect_malformed(const char *name, const char *text, const char *where,
                             const char *what) {
    write_text(name, text);
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    char expect[600];
    snprintf(expect, sizeof expect, "ampprobe conform: %s/%s: %s", tmpdir, where, what);
    ck_assert_has(c.err, expect);
    captured_free(&c);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

START_TEST(test_malformed_scaler) {
    expect_malformed("scaler_updates.txt", "# short header\ncase S1 65536.0 2.0\n",
                     "scaler_updates.txt:2", "expected 'case NAME init_scale");
    expect_malformed("scaler_updates.txt", "case A 1.0 2.0 0.5 1\n0 2.0 40000000 0\n",
                     "scaler_updates.txt:1", "case A has no 'end'");
    expect_malformed("scaler_updates.txt", "case A 1.0 2.0 0.5 1\n0 2.0 4000000g 0\nend\n",
                     "scaler_updates.txt:2", "expected 'found_inf scale scale_bits_hex");
    expect_malformed("scaler_updates_b.txt", "0 2.0 40000000 0\n", "scaler_updates_b.txt:1",
                     "expected 'case NAME ...'");
}
END_TEST

START_TEST(test_malformed_unscale) {
    expect_malformed("unscale.txt",
                     "case U f32 1.0\n1.0 3f800000 0.0\n3f800000 40000000\n3f800000\nend\n",
                     "unscale.txt:4", "1 output values for 2 inputs");
    expect_malformed("unscale.txt", "case U f16 1.0\n1.0 3f800000 0.0\n3c000\n3c00\nend\n",
                     "unscale.txt:3", "expected the input bits (4 hex digits each)");
    expect_malformed("unscale.txt", "case U i32 1.0\n", "unscale.txt:1",
                     "expected 'case NAME f32|f16|bf16 scale'");
    expect_malformed("unscale.txt", "case U f32 1.0\n1.0 3f800000 0.0\n3f800000\n3f800000\n",
                     "unscale.txt:4", "expected 'end' after the output bits of case U");
}
END_TEST

START_TEST(test_malformed_autocast) {
    expect_malformed("autocast_dtypes.txt", "# op in=f32/ac=f16\nmm f16\nmm bfloat17\n",
                     "autocast_dtypes.txt:3", "'bfloat17' is neither a dtype nor 'error'");
    expect_malformed("autocast_dtypes.txt", "mm f16 f16 bf16\n", "autocast_dtypes.txt:1",
                     "expected 'op' and 4 results, got 4 fields");
    // a damaged file's bytes come back as \xNN: an escape sequence, a byte that is no UTF-8, a
    // C1 control; UTF-8 text as it is
    expect_malformed("autocast_dtypes.txt", "mm \xfe\x1b[31m\xc2\x9b\xc3\xa9 f16 bf16 bf16\n",
                     "autocast_dtypes.txt:1",
                     "'\\xfe\\x1b[31m\\xc2\\x9b\xc3\xa9' is neither a dtype nor 'error'");
    write_text("autocast_dtypes.txt", "mm \x1b[2J f16 bf16 bf16\n");
    struct captured c = run_conform(tmpdir);
    ck_assert_has(c.out, "line 1: '\\x1b[2J' is neither");
    captured_free(&c);
}
END_TEST

START_TEST(test_malformed_e2e) {
    copy_e2e();
    doctor("e2e_mlp_sgd.manifest", "lr=0.05", "lr=0.05x");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:10: lr=0.05x: expected a finite number\n");
    captured_free(&c);

    doctor("e2e_mlp_sgd.manifest", "lr=0.05x", "lr=0.05\nact=gelu");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:11: key 'act' repeats line 6\n");
    captured_free(&c);

    doctor("e2e_mlp_sgd.manifest", "\nact=gelu", "\nbatch 32");
    doctor("e2e_mlp_sgd.manifest", "batch=32\n", "");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:10: expected key=value\n");
    captured_free(&c);

    doctor("e2e_mlp_sgd.manifest", "\nbatch 32", "");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest: missing key 'batch'\n");
    captured_free(&c);

    // blanks go around '=' only: "1 28" is no 128
    expect_malformed("e2e_s.manifest", "in=4\nhidden = 1 28\n", "e2e_s.manifest:2",
                     "expected key=value (blanks only around '=')\n");
    // shapes each in range whose product is not (it overflowed where the case computes it)
    expect_malformed(
        "e2e_t.manifest",
        "in=1073741824\nhidden=1\nout=1\nbatch=1073741824\nsteps=1073741824\n"
        "act=relu\noptimizer=sgd\n",
        "e2e_t.manifest",
        "steps x batch x in = 1073741824 x 1073741824 x 1073741824: too many values\n");
}
END_TEST

// A key the format does not have is a typo, not a feature this build lacks (optimizer=rmsprop,
// test_e2e_unsupported): the manifest is malformed.
START_TEST(test_malformed_e2e_unknown_key) {
    copy_e2e();
    doctor("e2e_mlp_sgd.manifest", "name=mlp_sgd", "bogus_key=1");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:2: unknown key 'bogus_key' (the keys: name "
                         "optimizer act precision in hidden out batch steps lr momentum "
                         "weight_decay beta1 beta2 eps init_scale growth_factor backoff_factor "
                         "growth_interval)\n");
    ck_assert_has(c.out, "0 passed, 0 failed; e2e_mlp_sgd.manifest not checked: line 2: unknown "
                         "key 'bogus_key' (");
    ck_assert_msg(!strstr(c.out, "UNSUPPORTED"), "%s", c.out);
    captured_free(&c);
}
END_TEST

// A word that names nothing torch has is a typo as well (optimizer=sdg would be "unsupported",
// exit 0, the case unrun), named with the nearest word this build runs; a word torch has and
// this build lacks (act=silu, precision=fp8) stays unsupported.
START_TEST(test_malformed_e2e_unknown_word) {
    copy_e2e();
    doctor("e2e_mlp_sgd.manifest", "optimizer=sgd", "optimizer=sdg");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:9: optimizer=sdg: no such optimizer in torch "
                         "(this build runs: sgd adam adamw; did you mean sgd?)\n");
    ck_assert_msg(!strstr(c.out, "UNSUPPORTED"), "%s", c.out);
    captured_free(&c);

    doctor("e2e_mlp_sgd.manifest", "optimizer=sdg", "optimizer=sgd");
    doctor("e2e_mlp_sgd.manifest", "act=relu", "act=swish");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:6: act=swish: no such act in torch (this build "
                         "runs: relu gelu gelu_tanh)\n");
    captured_free(&c);

    doctor("e2e_mlp_sgd.manifest", "act=swish", "act=relu");
    static const char *const lacked[][2] = {{"act=relu", "act=silu"},
                                            {"precision=fp16", "precision=fp8_e4m3"},
                                            {"precision=fp16", "precision=fp32"}};
    for (size_t i = 0; i < sizeof lacked / sizeof lacked[0]; i++) {
        doctor("e2e_mlp_sgd.manifest", lacked[i][0], lacked[i][1]);
        c = run_conform(tmpdir);
        ck_assert_int_eq(c.status, 0);
        ck_assert_has(c.out, lacked[i][1]);
        ck_assert_has(c.out, "0 passed, 0 failed, 1 unsupported\n");
        captured_free(&c);
        doctor("e2e_mlp_sgd.manifest", lacked[i][1], lacked[i][0]);
    }
}
END_TEST

// Integers beyond what a key may hold say so, as amp_parse_count does; not "expected an integer".
START_TEST(test_malformed_e2e_range) {
    const char *rest = "hidden=8\nout=3\nbatch=2\nsteps=5\nact=relu\noptimizer=sgd\n";
    char text[512];
    snprintf(text, sizeof text, "in=99999999999999\n%s", rest);
    expect_malformed("e2e_r.manifest", text, "e2e_r.manifest:1",
                     "in=99999999999999: too large (at most 1073741824)\n");
    snprintf(text, sizeof text, "in=99999999999999999999999\n%s", rest); // beyond a long
    expect_malformed("e2e_r.manifest", text, "e2e_r.manifest:1",
                     "in=99999999999999999999999: too large (at most 1073741824)\n");
    snprintf(text, sizeof text, "in=0\n%s", rest);
    expect_malformed("e2e_r.manifest", text, "e2e_r.manifest:1",
                     "in=0: expected a positive integer\n");
    snprintf(text, sizeof text, "in=-99999999999999999999999\n%s", rest);
    expect_malformed("e2e_r.manifest", text, "e2e_r.manifest:1",
                     "in=-99999999999999999999999: expected a positive integer\n");
    snprintf(text, sizeof text, "in=4\n%sgrowth_interval=-99999999999\n", rest);
    expect_malformed("e2e_r.manifest", text, "e2e_r.manifest:8",
                     "growth_interval=-99999999999: too small (at least -1073741824)\n");
    snprintf(text, sizeof text, "in=4\n%sgrowth_interval=2e3\n", rest);
    expect_malformed("e2e_r.manifest", text, "e2e_r.manifest:8",
                     "growth_interval=2e3: expected an integer\n");
}
END_TEST

// A value torch's constructors refuse (and libampcore's with them) is a malformed manifest, not
// a conformance failure: exit 2, naming the line, the key and the value.
START_TEST(test_malformed_e2e_refused) {
    copy_e2e();
    doctor("e2e_mlp_sgd.manifest", "growth_factor=2", "growth_factor=0.5");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:15: growth_factor=0.5: amp_scaler_new refuses "
                         "it: The growth factor must be > 1.0. (growth_factor=0.5)\n");
    ck_assert_str_eq(c.out, "0 passed, 0 failed; e2e_mlp_sgd.manifest not checked: line 15: "
                            "growth_factor=0.5: amp_scaler_new refuses it: The growth factor "
                            "must be > 1.0. (growth_factor=0.5)\n");
    captured_free(&c);

    doctor("e2e_mlp_sgd.manifest", "growth_factor=0.5", "growth_factor=2");
    doctor("e2e_mlp_sgd.manifest", "lr=0.05", "lr=-0.05");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:10: lr=-0.05: amp_optim_new refuses it: Invalid "
                         "learning rate: -0.05\n");
    captured_free(&c);

    // the key that makes the settings invalid is named, whatever the optimizer's kind
    doctor("e2e_mlp_sgd.manifest", "lr=-0.05", "lr=0.05");
    doctor("e2e_mlp_sgd.manifest", "optimizer=sgd", "optimizer=adam\nbeta2=1");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd.manifest:10: beta2=1: amp_optim_new refuses it: Invalid "
                         "beta parameter at index 1: 1\n");
    captured_free(&c);
}
END_TEST

// Some editors start a UTF-8 file with a byte order mark: it is no part of the first record.
START_TEST(test_byte_order_mark) {
    copy_e2e();
    size_t n;
    char *manifest = read_all(tmpdir, "e2e_mlp_sgd.manifest", &n);
    ck_assert_int_eq(manifest[0], '#');
    char *marked = malloc(n + 3);
    memcpy(marked, "\xEF\xBB\xBF", 3);
    memcpy(marked + 3, manifest, n);
    write_file("e2e_mlp_sgd.manifest", marked, n + 3);
    free(marked);
    free(manifest);
    struct captured c = run_conform(tmpdir);
    ck_assert_msg(c.status == 0, "status %d:\n%s%s", c.status, c.out, c.err);
    ck_assert_str_eq(c.out, "1 passed, 0 failed\n");
    captured_free(&c);

    // before a record, in another kind of file
    write_text("autocast_dtypes.txt", "\xEF\xBB\xBFmm f16 f16 bf16 bf16\n");
    c = run_conform(tmpdir);
    ck_assert_msg(c.status == 0, "status %d:\n%s%s", c.status, c.out, c.err);
    ck_assert_str_eq(c.out, "2 passed, 0 failed\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_malformed_e2e_data) {
    copy_e2e();
    size_t n;
    char *x = read_all(tmpdir, "e2e_mlp_sgd_X.f32", &n);
    write_file("e2e_mlp_sgd_X.f32", x, n - 4);
    free(x);
    doctor("e2e_mlp_sgd_trace.txt", "\n30 ", "\n31 ");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd_X.f32: 491516 bytes, expected 491520 (steps x batch x in: "
                         "122880 values of 4 bytes)\n");
    captured_free(&c);

    copy_golden("e2e_mlp_sgd_X.f32");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/e2e_mlp_sgd_trace.txt:33: step 31, expected 30\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_malformed_convert) {
    write_text("conv_odd_in_f32.bin", "12345");
    write_text("conv_odd_f16_cuda.bin", "12");
    write_text("conv_short_in_f32.bin", "12345678");
    write_text("conv_short_bf16_cuda.bin", "12");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/conv_odd_in_f32.bin: 5 bytes is not a whole number of fp32 values\n");
    // (the input may be the file cut short: both are named)
    ck_assert_has(c.err, "/conv_short_bf16_cuda.bin: 2 bytes, expected 4 (2 bytes for each of the "
                         "2 fp32 values of conv_short_in_f32.bin: one of the two files is cut "
                         "short, or they do not belong together)\n");
    captured_free(&c);
}
END_TEST

// An empty or record-less file would pass while checking nothing.
START_TEST(test_malformed_empty_text) {
    const char *const names[] = {"scaler_updates.txt", "unscale.txt", "autocast_dtypes.txt",
                                 "e2e_x.manifest"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        expect_malformed(names[i], "", names[i], "empty file, expected ");
        expect_malformed(names[i], "# only a comment\n\n  \t\n# and another\n", names[i],
                         "no records in 4 lines (only comments and blank lines), expected ");
    }
    // the golden table cut to its first line, a comment
    size_t n;
    char *table = read_all(GOLDEN, "autocast_dtypes.txt", &n);
    *(strchr(table, '\n') + 1) = '\0';
    expect_malformed("autocast_dtypes.txt", table, "autocast_dtypes.txt",
                     "no records in 1 line (only comments and blank lines), expected 'op' and "
                     "its results\n");
    free(table);
    // a case without an update checks nothing either
    expect_malformed("scaler_updates.txt", "case c 65536 2 0.5 2000\nend\n", "scaler_updates.txt:2",
                     "case c has no update lines\n");
}
END_TEST

START_TEST(test_malformed_empty_alone) {
    write_text("scaler_updates.txt", ""); // the directory's only file: not "no reference files"
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    char expect[600];
    snprintf(expect, sizeof expect,
             "ampprobe conform: %s/scaler_updates.txt: empty file, expected 'case NAME "
             "init_scale growth_factor backoff_factor growth_interval'\n",
             tmpdir);
    ck_assert_str_eq(c.err, expect);
    ck_assert_str_eq(c.out, "0 passed, 0 failed; scaler_updates.txt not checked: empty file, "
                            "expected 'case NAME init_scale growth_factor backoff_factor "
                            "growth_interval'\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_malformed_empty_binary) {
    copy_golden("conv_golden_f16_cuda.bin");
    copy_golden("conv_golden_bf16_cuda.bin");
    write_text("conv_golden_in_f32.bin", ""); // its outputs still hold 200036 values
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/conv_golden_in_f32.bin: empty file\n");
    ck_assert_str_eq(c.out, "0 passed, 0 failed; conv_golden_in_f32.bin not checked: empty file\n");
    captured_free(&c);

    write_text("conv_golden_f16_cuda.bin", ""); // empty on both sides: no "0 values" pass
    write_text("conv_golden_bf16_cuda.bin", "");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/conv_golden_in_f32.bin: empty file\n");
    ck_assert_str_eq(c.out, "0 passed, 0 failed; conv_golden_in_f32.bin not checked: empty file\n");
    captured_free(&c);
}
END_TEST

// A FIFO named like a reference file would block the run forever (Check's timeout ends this test
// if it does); a directory would read as empty. Both are refused, the other files still run.
START_TEST(test_not_regular_files) {
    char path[512];
    snprintf(path, sizeof path, "%s/scaler_updates.txt", tmpdir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    write_file("conv_f_in_f32.bin", &(float){1.0f}, 4);
    write_file("conv_f_bf16_cuda.bin", &(uint16_t){0x3F80}, 2); // bf16 1.0: passes
    snprintf(path, sizeof path, "%s/conv_f_f16_cuda.bin", tmpdir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    snprintf(path, sizeof path, "%s/autocast_dtypes_dir.txt", tmpdir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    copy_golden("unscale.txt");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/scaler_updates.txt: not a regular file (a FIFO)\n");
    ck_assert_has(c.err, "/conv_f_f16_cuda.bin: not a regular file (a FIFO)\n");
    ck_assert_has(c.err, "/autocast_dtypes_dir.txt: not a regular file (a directory)\n");
    // the unscale cases and conv_f_bf16_cuda.bin; then each file not checked, and why
    ck_assert_str_eq(c.out, "9 passed, 0 failed; scaler_updates.txt not checked: not a regular "
                            "file (a FIFO); autocast_dtypes_dir.txt not checked: not a regular "
                            "file (a directory); conv_f_in_f32.bin only partly checked: "
                            "conv_f_f16_cuda.bin: not a regular file (a FIFO)\n");
    captured_free(&c);
}
END_TEST

START_TEST(test_malformed_file_spares_the_others) {
    copy_golden("unscale.txt");
    write_text("autocast_dtypes.txt", "mm f16 f16 bf16 bf16\nmm\n");
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/autocast_dtypes.txt:2: expected 'op' and 4 results, got 1 fields\n");
    ck_assert_str_eq(c.out, "9 passed, 0 failed; autocast_dtypes.txt only partly checked: line 2: "
                            "expected 'op' and 4 results, got 1 fields\n"); // 8 unscale, 1 mm
    captured_free(&c);
}
END_TEST

START_TEST(test_unreadable_and_empty_dir) {
    struct captured c = run_conform("/nonexistent/ampprobe-conform");
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err,
                  "ampprobe conform: /nonexistent/ampprobe-conform: cannot read directory: ");
    ck_assert_str_eq(c.out, ""); // nothing was checked: no summary to misread
    captured_free(&c);

    write_text("README.md", "nothing to check\n");
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, ": no reference files (");
    char expect[600]; // not a bare "0 passed, 0 failed": it says why, and what it looks for
    snprintf(expect, sizeof expect,
             "0 passed, 0 failed; nothing to check: %s holds no scaler_updates*.txt, "
             "unscale*.txt, autocast_dtypes*.txt, conv_*_in_f32.bin or *.manifest\n",
             tmpdir);
    ck_assert_str_eq(c.out, expect);
    captured_free(&c);
}
END_TEST

// A malformed file is named in the summary too, not only on stderr: its cases are not counted.
START_TEST(test_summary_names_unchecked) {
    copy_golden("scaler_updates.txt");
    copy_golden("unscale.txt");
    doctor("scaler_updates.txt", "\n1 65536.0 47800000 0\n", "\n1 65536.0 4780000g 0\n"); // S1
    struct captured c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.err, "/scaler_updates.txt:6: expected 'found_inf scale scale_bits_hex ");
    ck_assert_str_eq(c.out, "8 passed, 0 failed; scaler_updates.txt not checked: line 6: expected "
                            "'found_inf scale scale_bits_hex growth_tracker' or 'end'\n");
    captured_free(&c);

    // a later case: the ones before it ran
    copy_golden("scaler_updates.txt");
    doctor("scaler_updates.txt", "\n1 0.0 00000000 0\n", "\n1 0.0 0000000 0 0\n"); // S6
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_has(c.out, "; scaler_updates.txt only partly checked: line 203: expected ");

    // an e2e case: the file at fault is not the manifest, which is what went unchecked
    copy_golden("scaler_updates.txt");
    copy_e2e();
    size_t n;
    char *x = read_all(tmpdir, "e2e_mlp_sgd_X.f32", &n);
    write_file("e2e_mlp_sgd_X.f32", x, n - 4);
    free(x);
    captured_free(&c);
    c = run_conform(tmpdir);
    ck_assert_int_eq(c.status, 2);
    ck_assert_str_eq(c.out, "18 passed, 0 failed; e2e_mlp_sgd.manifest not checked: "
                            "e2e_mlp_sgd_X.f32: 491516 bytes, expected 491520 (steps x batch x "
                            "in: 122880 values of 4 bytes)\n");
    captured_free(&c);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Parsers and pieces

START_TEST(test_manifest_defaults) {
    write_text("e2e_d.manifest", "in=4\nhidden=8\nout=3\nbatch=2\nsteps=5\nact=gelu_tanh\n"
                                 "optimizer=adamw   # torch.optim.AdamW defaults\n");
    struct conform_run r = {.out = stdout, .err = stderr, .dir = tmpdir};
    struct conform_manifest m;
    ck_assert(conform_manifest_parse(&r, "e2e_d.manifest", &m));
    ck_assert_int_eq(m.act, CONFORM_ACT_GELU_TANH);
    ck_assert_int_eq(m.optim.kind, AMP_OPTIM_ADAMW);
    ck_assert_float_eq(m.optim.lr, 1e-3f);
    ck_assert_float_eq(m.optim.weight_decay, 1e-2f);
    ck_assert_float_eq(m.optim.beta2, 0.999f);
    ck_assert_float_eq(m.optim.eps, 1e-8f);
    ck_assert_int_eq(m.precision, AMP_DTYPE_F16);
    ck_assert_float_eq(m.scaler.init_scale, 65536.0f);
    ck_assert_double_eq(m.scaler.growth_factor, 2.0);
    ck_assert_double_eq(m.scaler.backoff_factor, 0.5);
    ck_assert_int_eq(m.scaler.growth_interval, 2000);
    ck_assert(m.scaler.enabled);
    ck_assert(!m.scaler_keys);
    ck_assert_str_eq(m.unsupported, "");

    write_text("e2e_e.manifest", "in=4\nhidden=8\nout=3\nbatch=2\nsteps=5\nact=silu\n"
                                 "optimizer = sgd\nprecision=bf16\ngrowth_interval=7\n");
    ck_assert(conform_manifest_parse(&r, "e2e_e.manifest", &m));
    ck_assert_int_eq(m.optim.kind, AMP_OPTIM_SGD);
    ck_assert_int_eq(m.precision, AMP_DTYPE_BF16);
    ck_assert_int_eq(m.scaler.growth_interval, 7);
    ck_assert(m.scaler_keys);
    ck_assert_str_eq(m.unsupported, "unsupported act=silu (line 6)"); // a value: a feature
}
END_TEST

START_TEST(test_number_parsers) {
    double d;
    long l;
    uint32_t u;
    ck_assert(conform_parse_double("2.938735877055719e-39", &d));
    ck_assert_uint_eq(conform_bits((float)d), 0x00200000u); // 2^-128, a float subnormal
    ck_assert(conform_parse_double("inf", &d) && isinf(d));
    ck_assert(!conform_parse_double("1.0x", &d));
    ck_assert(!conform_parse_double("", &d));
    ck_assert(!conform_parse_double("1e999", &d));
    ck_assert(!conform_parse_double("0x1p3", &d)); // a hex float is no decimal
    ck_assert(conform_parse_long("-3", &l) && l == -3);
    ck_assert(!conform_parse_long("3.0", &l));
    ck_assert(conform_parse_hex("7fc00000", UINT32_MAX, &u) && u == 0x7fc00000u);
    ck_assert(conform_parse_hex("0x3C00", 0xFFFF, &u) && u == 0x3c00u);
    ck_assert(!conform_parse_hex("13c00", 0xFFFF, &u));
    ck_assert(!conform_parse_hex("-1", UINT32_MAX, &u));
    ck_assert(!conform_parse_hex("0x0x5", UINT32_MAX, &u)); // strtoull takes the second 0x
    ck_assert(!conform_parse_hex("0X", UINT32_MAX, &u));
    ck_assert(!conform_parse_hex("", UINT32_MAX, &u));
}
END_TEST

START_TEST(test_text_records) {
    write_text("t.txt", "# a comment\n\n  case A 1   # trailing\nend\n");
    struct conform_run r = {.out = stdout, .err = stderr, .dir = tmpdir};
    struct conform_text t;
    ck_assert(conform_text_open(&t, &r, "t.txt"));
    ck_assert(conform_text_next(&t));
    ck_assert(t.is_comment);
    ck_assert_int_eq(t.lineno, 1);
    ck_assert(conform_text_next_record(&t));
    ck_assert_int_eq(t.lineno, 3);
    ck_assert_int_eq(t.ntok, 3);
    ck_assert_str_eq(t.tok[2], "1");
    ck_assert(conform_text_next_record(&t));
    ck_assert_str_eq(t.tok[0], "end");
    ck_assert(!conform_text_next_record(&t));
    conform_text_close(&t);
    // a NUL byte spoils its field (it does not end the line, dropping the fields after it)
    write_file("z.txt", "0 2.0\0 7\n", 10);
    ck_assert(conform_text_open(&t, &r, "z.txt"));
    ck_assert(conform_text_next_record(&t));
    ck_assert_int_eq(t.ntok, 3);
    double d;
    ck_assert(!conform_parse_double(t.tok[1], &d));
    conform_text_close(&t);
}
END_TEST

static void aborting(void *arg) {
    AMP_ASSERT(arg == NULL, "(conform test)");
}
static void returning(void *arg) {
    *(int *)arg = 7;
}
static void other_hook(const char *msg) {
    (void)msg;
}

START_TEST(test_guard) {
    amp_set_abort_hook(other_hook);
    char msg[256];
    int x = 0;
    ck_assert(!conform_guarded(aborting, &x, msg, sizeof msg));
    ck_assert_has(msg, "assertion failed: arg == NULL (conform test)");
    ck_assert(conform_guarded(returning, &x, msg, sizeof msg));
    ck_assert_int_eq(x, 7);
    ck_assert(amp_set_abort_hook(NULL) == other_hook); // the caller's hook is back
}
END_TEST

// amp_cmd_conform with its stdout sent to /dev/null (the usage text is long) and its stderr to
// err_path (/dev/null: dropped)
static int cli_to(int argc, char **argv, const char *err_path) {
    const int out = test_stream_to(stdout, "/dev/null"), err = test_stream_to(stderr, err_path);
    const int status = amp_cmd_conform(argc, argv);
    test_stream_back(stderr, err);
    test_stream_back(stdout, out);
    return status;
}

static int cli_quiet(int argc, char **argv) {
    return cli_to(argc, argv, "/dev/null");
}

// amp_cmd_conform with its stderr into err (NUL-terminated, n bytes at most)
static int cli_stderr(int argc, char **argv, char *err, size_t n) {
    test_dir_create("conform-cli");
    const int status = cli_to(argc, argv, test_in_dir("err.txt"));
    size_t k = 0;
    char *text = test_read_file(test_in_dir("err.txt"), &k);
    k = k < n - 1 ? k : n - 1;
    memcpy(err, text, k);
    err[k] = '\0';
    free(text);
    test_dir_remove();
    return status;
}

START_TEST(test_cli) {
    char *help[] = {"conform", "--help", NULL};
    ck_assert_int_eq(cli_quiet(2, help), 0);
    char *none[] = {"conform", NULL}; // one line, not the help
    char err[1024];
    ck_assert_int_eq(cli_stderr(1, none, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "which directory?") && strchr(err, '\n') == err + strlen(err) - 1,
                  "%s", err);
    char *bad[] = {"conform", "--frob", "x", NULL};
    ck_assert_int_eq(cli_quiet(3, bad), 2);
    char *two[] = {"conform", "a", "b", NULL};
    ck_assert_int_eq(cli_quiet(3, two), 2);
    char *dev[] = {"conform", "--device", "tpu", "x", NULL};
    ck_assert_int_eq(cli_quiet(4, dev), 2);
    char *twice[] = {"conform", "--device", "cpu", "--device=cpu", GOLDEN, NULL};
    ck_assert_int_eq(cli_stderr(5, twice, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "ampprobe conform: --device is given twice"), "%s", err);
    char *v_twice[] = {"conform", "-v", "--verbose", GOLDEN, NULL};
    ck_assert_int_eq(cli_stderr(4, v_twice, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "ampprobe conform: --verbose is given twice") &&
                      strchr(err, '\n') == err + strlen(err) - 1,
                  "%s", err);
    char *eq[] = {"conform", "--device=cpu", GOLDEN, NULL};
    ck_assert_int_eq(cli_quiet(3, eq), 0);
    char *golden[] = {"conform", GOLDEN, NULL};
    ck_assert_int_eq(cli_quiet(2, golden), 0);
    // without a usable CUDA backend: one line naming --device cuda once (with a GPU: it runs)
    char *cuda[] = {"conform", "--device", "cuda", GOLDEN, NULL};
    if (cli_stderr(4, cuda, err, sizeof err) != 0) {
        const char *first = strstr(err, "--device cuda");
        ck_assert_msg(first && !strstr(first + 1, "--device cuda"), "%s", err);
        ck_assert_msg(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s", err);
    }
}
END_TEST

Suite *conform_suite(void) {
    Suite *s = suite_create("conform");
    TCase *golden = tcase_create("golden");
    tcase_add_test(golden, test_golden_passes);
    tcase_set_timeout(golden, 120);
    suite_add_tcase(s, golden);

    TCase *doctored = tcase_create("doctored");
    tcase_add_checked_fixture(doctored, setup, teardown);
    tcase_add_test(doctored, test_scaler_doctored);
    tcase_add_test(doctored, test_unscale_doctored);
    tcase_add_test(doctored, test_unscale_inv_scale);
    tcase_add_test(doctored, test_autocast_doctored);
    tcase_add_test(doctored, test_autocast_columns_and_unsupported);
    tcase_add_test(doctored, test_convert_doctored);
    tcase_add_test(doctored, test_convert_orphans);
    tcase_add_test(doctored, test_convert_missing_output);
    tcase_add_test(doctored, test_e2e_doctored_trace);
    tcase_add_test(doctored, test_e2e_doctored_loss);
    tcase_add_test(doctored, test_e2e_finals_without_trace);
    tcase_add_test(doctored, test_e2e_scaler_from_trace);
    tcase_add_test(doctored, test_e2e_bf16_without_trace);
    tcase_add_test(doctored, test_e2e_unsupported);
    tcase_add_test(doctored, test_e2e_nothing_to_compare);
    tcase_set_timeout(doctored, 120);
    suite_add_tcase(s, doctored);

    TCase *malformed = tcase_create("malformed");
    tcase_add_checked_fixture(malformed, setup, teardown);
    tcase_add_test(malformed, test_malformed_scaler);
    tcase_add_test(malformed, test_malformed_unscale);
    tcase_add_test(malformed, test_malformed_autocast);
    tcase_add_test(malformed, test_malformed_e2e);
    tcase_add_test(malformed, test_malformed_e2e_unknown_key);
    tcase_add_test(malformed, test_malformed_e2e_unknown_word);
    tcase_add_test(malformed, test_malformed_e2e_range);
    tcase_add_test(malformed, test_malformed_e2e_refused);
    tcase_add_test(malformed, test_byte_order_mark);
    tcase_add_test(malformed, test_malformed_e2e_data);
    tcase_add_test(malformed, test_malformed_convert);
    tcase_add_test(malformed, test_malformed_empty_text);
    tcase_add_test(malformed, test_malformed_empty_alone);
    tcase_add_test(malformed, test_malformed_empty_binary);
    tcase_add_test(malformed, test_not_regular_files);
    tcase_add_test(malformed, test_malformed_file_spares_the_others);
    tcase_add_test(malformed, test_unreadable_and_empty_dir);
    tcase_add_test(malformed, test_summary_names_unchecked);
    suite_add_tcase(s, malformed);

    TCase *parts = tcase_create("parts");
    tcase_add_checked_fixture(parts, setup, teardown);
    tcase_add_test(parts, test_manifest_defaults);
    tcase_add_test(parts, test_number_parsers);
    tcase_add_test(parts, test_text_records);
    tcase_add_test(parts, test_guard);
    tcase_add_test(parts, test_cli);
    suite_add_tcase(s, parts);
    return s;
}
