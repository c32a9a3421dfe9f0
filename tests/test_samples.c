/*
 * test_samples.c — suite `samples`: the sample programs as end-to-end tests. Each test runs a
 * built sample (build/samples/<name>) as a child process for a few steps and parses what it
 * prints ("step 3 loss 2.3012 scale 65536 skipped 0" per step): the loss falls in fp32, fp16 and
 * bf16; a bad flag exits 2 with one line naming the flag; sizes beyond memory exit 1 with one
 * line naming what needs them; every --fault visibly does what its --help says, at the
 * documented step; a checkpoint resumes training.
 *
 * Sizes are small (--steps, --image 16) so the suite stays well under a minute on 2 cores, also
 * under AddressSanitizer.
 */
#include "tests.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_STEPS 64

typedef struct run_result {
    int exit_code; // 128 + signal when killed
    char out[16384], err[4096];
    int n_steps;   // step lines parsed, numbered 0 .. n_steps-1
    double loss[MAX_STEPS], scale[MAX_STEPS];
    long skipped[MAX_STEPS];
} run_result;

static void read_all(FILE *f, char *buf, size_t cap) {
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

// Runs build/samples/argv[0] with the rest of argv (NULL-terminated) and parses its step lines.
static void run_sample(run_result *r, const char *const *argv) {
    char path[512];
    snprintf(path, sizeof path, "%s/samples/%s", AMP_BINARY_DIR, argv[0]);
    ck_assert_msg(access(path, X_OK) == 0, "%s is not built", path);
    FILE *out = tmpfile(), *err = tmpfile();
    ck_assert(out && err);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fileno(out), STDOUT_FILENO);
        dup2(fileno(err), STDERR_FILENO);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    read_all(out, r->out, sizeof r->out);
    read_all(err, r->err, sizeof r->err);

    r->n_steps = 0;
    for (const char *line = r->out; *line; line += strcspn(line, "\n") + (line[strcspn(line, "\n")] == '\n')) {
        int step;
        char loss[32];
        double scale;
        long skipped;
        if (strncmp(line, "step ", 5) != 0) continue;
        ck_assert_msg(sscanf(line, "step %d loss %31s scale %lf skipped %ld", &step, loss, &scale, &skipped) == 4,
                      "unparsable line: %.80s", line);
        ck_assert_msg(step == r->n_steps && step < MAX_STEPS, "step %d out of order", step);
        r->loss[step] = strtod(loss, NULL);
        r->scale[step] = scale;
        r->skipped[step] = skipped;
        r->n_steps++;
    }
}

#define RUN(r, ...) run_sample((r), (const char *const[]){__VA_ARGS__, NULL})

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// A clean run of n steps: exit 0, n step lines, finite losses, the summary line.
static void assert_ran(const run_result *r, int n) {
    ck_assert_msg(r->exit_code == 0, "exit %d, stderr: %s", r->exit_code, r->err);
    ck_assert_int_eq(r->n_steps, n);
    ck_assert_msg(strstr(r->out, "final loss "), "no summary line in: %s", r->out);
}

static double mean(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s / n;
}

// ---------------------------------------------------------------------------------------------
// Training works in every precision

static const char *const samples[] = {"mlp", "simple_cnn", "tiny_gpt"};
static const char *const precisions[] = {"fp32", "fp16", "bf16"};

// The per-sample flags that keep a run short: steps, and a small image for the CNN.
#define SHORT_MLP "--steps", "40"
#define SHORT_CNN "--steps", "24", "--image", "16"
#define SHORT_GPT "--steps", "30"

START_TEST(test_loss_falls) {
    const char *name = samples[_i / 3], *prec = precisions[_i % 3];
    static run_result r;
    int steps;
    if (_i / 3 == 0) RUN(&r, name, "--precision", prec, SHORT_MLP), steps = 40;
    else if (_i / 3 == 1) RUN(&r, name, "--precision", prec, SHORT_CNN), steps = 24;
    else RUN(&r, name, "--precision", prec, SHORT_GPT), steps = 30;
    assert_ran(&r, steps);
    for (int i = 0; i < steps; i++) {
        ck_assert_msg(isfinite(r.loss[i]), "%s %s: step %d loss %g", name, prec, i, r.loss[i]);
        ck_assert_int_eq(r.skipped[i], 0);
        ck_assert(r.scale[i] == (strcmp(prec, "fp16") == 0 ? 65536.0 : 1.0));
    }
    double first = mean(r.loss, 4), last = mean(r.loss + steps - 4, 4);
    ck_assert_msg(last < 0.6 * first, "%s %s: loss %.4f -> %.4f (mean of 4 steps)", name, prec, first, last);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The command line

START_TEST(test_bad_flag) {
    static const struct {
        const char *argv[4];
        const char *flag; // the line starts "<sample>: <flag>: "
    } cases[] = {
        {{"mlp", "--steps", "x"}, "--steps"},
        {{"mlp", "--steps", "0"}, "--steps"},
        {{"tiny_gpt", "--batch"}, "--batch"},
        {{"mlp", "--precision", "fp8"}, "--precision"},
        {{"simple_cnn", "--device", "tpu"}, "--device"},
        {{"mlp", "--optimizer", "rmsprop"}, "--optimizer"},
        {{"mlp", "--lr", "-1"}, "--lr"},
        {{"mlp", "--lr", "1e-50"}, "--lr"},               // positive, but 0 as a float
        {{"tiny_gpt", "--lr", "1e39"}, "--lr"},           // inf as a float
        {{"mlp", "--init-scale", "1e-50"}, "--init-scale"}, // 0 would read as "not given"
        {{"simple_cnn", "--init-scale", "3.5e38"}, "--init-scale"},
        {{"tiny_gpt", "--seed", "1.5"}, "--seed"},
        {{"mlp", "--init-scale", "0"}, "--init-scale"},
        {{"mlp", "--growth-interval", "-3"}, "--growth-interval"},
        {{"mlp", "--fault", "bogus"}, "--fault"},
        {{"mlp", "--fault", "attn-overflow"}, "--fault"},
        {{"simple_cnn", "--fault", "attn-overflow"}, "--fault"},
        {{"simple_cnn", "--image", "30"}, "--image"},
        {{"tiny_gpt", "--heads", "3"}, "--heads"},
        {{"mlp", "--frobnicate"}, "--frobnicate"},
        {{"mlp", "--quiet=yes"}, "--quiet"},
        {{"tiny_gpt", "stray"}, "stray"},
    };
    static run_result r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_sample(&r, cases[i].argv);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s: %s: ", cases[i].argv[0], cases[i].flag);
        ck_assert_msg(r.exit_code == 2, "case %zu: exit %d", i, r.exit_code);
        ck_assert_msg(strncmp(r.err, prefix, strlen(prefix)) == 0 && count_lines(r.err) == 1,
                      "case %zu: stderr '%s' is not one line starting '%s'", i, r.err, prefix);
        ck_assert_msg(r.out[0] == '\0', "case %zu printed: %s", i, r.out);
    }
    RUN(&r, "mlp", "--steps", "x");
    ck_assert_str_eq(r.err, "mlp: --steps: expected a positive integer, got 'x'\n");
    RUN(&r, "mlp", "--lr", "1e-50", "--precision", "fp32", "--steps", "9");
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "got '1e-50'"), "exit %d: %s", r.exit_code,
                  r.err);
}
END_TEST

// A float flag takes what a float holds: 1e-45 rounds to the smallest subnormal, not to 0. --lr
// is kept as the double given (as torch.optim keeps it), but must not round to 0 in the f32 math.
START_TEST(test_float_flag_range) {
    static run_result r;
    RUN(&r, "mlp", "--lr", "1e-45", "--init-scale", "1e-45", "--steps", "1");
    assert_ran(&r, 1);
    ck_assert_msg(strstr(r.out, "GradScaler(init 1.4013e-45,") && strstr(r.out, "adam lr 1e-45,"),
                  "%s", r.out);
    RUN(&r, "mlp", "--lr", "0.001", "--init-scale", "3.4e38", "--steps", "1");
    assert_ran(&r, 1);
    ck_assert_msg(strstr(r.out, "GradScaler(init 3.4e+38,") && strstr(r.out, "adam lr 0.001,"),
                  "%s", r.out);
}
END_TEST

// Sizes from flags that no machine can hold: exit 1 with one line naming what needs the memory
// and the flag, before anything is allocated (no abort, no core, no step). Every size is beyond
// the 128 TiB a process can map, so the runs fail at once whatever the machine and overcommit.
START_TEST(test_out_of_memory) {
    static const struct {
        const char *argv[10];
        const char *flag; // named in the message
    } cases[] = {
        {{"mlp", "--batch", "2147483647", "--width", "1000000", "--steps", "1"}, "--batch"},
        {{"mlp", "--depth", "2147483647", "--width", "4096", "--steps", "1"}, "--depth"},
        {{"mlp", "--width", "2147483647", "--steps", "1"}, "--width"}, // overflows 64 bits
        {{"simple_cnn", "--image", "2147483644", "--steps", "1"}, "--image"},
        {{"tiny_gpt", "--seq", "1000000", "--steps", "1"}, "--seq"},
        {{"tiny_gpt", "--vocab", "2147483647", "--d-model", "65536", "--heads", "1"}, "--vocab"},
        {{"tiny_gpt", "--batch", "2147483647", "--seq", "2147483647", "--device", "cuda"}, "--seq"},
    };
    static run_result r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_sample(&r, cases[i].argv);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s: out of memory: ", cases[i].argv[0]);
        ck_assert_msg(r.exit_code == 1, "case %zu: exit %d, stderr: %s", i, r.exit_code, r.err);
        ck_assert_msg(strncmp(r.err, prefix, strlen(prefix)) == 0 && count_lines(r.err) == 1 &&
                          strstr(r.err, cases[i].flag),
                      "case %zu: stderr '%s' is not one line '%s...%s...'", i, r.err, prefix,
                      cases[i].flag);
        ck_assert_msg(r.out[0] == '\0', "case %zu printed: %s", i, r.out);
    }
}
END_TEST

START_TEST(test_help) {
    static const char *const words[] = {
        "--device", "--precision", "--steps", "--batch", "--seed", "--lr", "--optimizer",
        "--init-scale", "--growth-interval", "--fault", "--save", "--load", "--quiet", "--help",
        "attn-overflow", "grad-underflow", "nan-input", "log-zero", "scale-thrash"};
    static run_result r;
    RUN(&r, samples[_i], "--help");
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert_str_eq(r.err, "");
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        ck_assert_msg(strstr(r.out, words[i]), "%s --help does not mention %s", samples[_i], words[i]);
    if (_i == 1) ck_assert(strstr(r.out, "--image"));
    if (_i == 2) ck_assert(strstr(r.out, "--layers") && strstr(r.out, "--heads"));
}
END_TEST

// Either the CUDA backend trains, or the program says in one line that it is unavailable.
START_TEST(test_cuda_device) {
    static run_result r;
    RUN(&r, "mlp", "--device", "cuda", "--steps", "2");
    if (r.exit_code == 0) {
        assert_ran(&r, 2);
    } else {
        ck_assert_int_eq(r.exit_code, 1);
        ck_assert_int_eq(r.n_steps, 0);
        ck_assert_msg(strncmp(r.err, "mlp: ", 5) == 0 && count_lines(r.err) == 1, "stderr: %s", r.err);
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Faults (steps as documented in samples/common.h)

#define NAN_STEP 5
#define LOG_ZERO_STEP 5
#define ATTN_STEP 3

// Runs samples[i] with the fault and precision for n steps (the CNN on 16x16 images).
static void run_fault(run_result *r, int i, const char *fault, const char *prec, int n) {
    char steps[16];
    snprintf(steps, sizeof steps, "%d", n);
    if (i == 1) RUN(r, samples[i], "--fault", fault, "--precision", prec, "--steps", steps, "--image", "16");
    else RUN(r, samples[i], "--fault", fault, "--precision", prec, "--steps", steps);
    assert_ran(r, n);
}

START_TEST(test_fault_nan_input) {
    static run_result r;
    run_fault(&r, _i, "nan-input", "fp16", 8);
    for (int s = 0; s < 8; s++) {
        ck_assert_msg(isnan(r.loss[s]) == (s == NAN_STEP), "%s fp16 step %d loss %g", samples[_i], s, r.loss[s]);
        ck_assert_int_eq(r.skipped[s], s >= NAN_STEP); // that step only is skipped
    }
    ck_assert(r.scale[NAN_STEP + 1] == r.scale[NAN_STEP] / 2); // backoff
    // Without a GradScaler the NaN gradients reach the weights: every later loss is NaN.
    run_fault(&r, _i, "nan-input", "fp32", 7);
    for (int s = 0; s < 7; s++) {
        ck_assert_msg(isnan(r.loss[s]) == (s >= NAN_STEP), "%s fp32 step %d loss %g", samples[_i], s, r.loss[s]);
        ck_assert_int_eq(r.skipped[s], 0);
    }
}
END_TEST

START_TEST(test_fault_log_zero) {
    static run_result r;
    run_fault(&r, _i, "log-zero", "fp16", 7);
    for (int s = 0; s < LOG_ZERO_STEP; s++) {
        ck_assert_msg(isfinite(r.loss[s]), "%s step %d loss %g", samples[_i], s, r.loss[s]);
        ck_assert_int_eq(r.skipped[s], 0);
    }
    for (int s = LOG_ZERO_STEP; s < 7; s++) {
        ck_assert_msg(isinf(r.loss[s]) && r.loss[s] > 0, "%s step %d loss %g", samples[_i], s, r.loss[s]);
        ck_assert_int_eq(r.skipped[s], s - LOG_ZERO_STEP + 1);
    }
}
END_TEST

START_TEST(test_fault_scale_thrash) {
    static run_result r;
    run_fault(&r, _i, "scale-thrash", "fp16", 16);
    int ups = 0, downs = 0;
    for (int s = 0; s < 16; s++) {
        ck_assert_msg(isfinite(r.loss[s]), "%s step %d loss %g", samples[_i], s, r.loss[s]);
        if (s > 0) ups += r.scale[s] > r.scale[s - 1], downs += r.scale[s] < r.scale[s - 1];
    }
    ck_assert_msg(r.skipped[15] >= 3, "%s: %ld skipped steps", samples[_i], r.skipped[15]);
    ck_assert_msg(ups >= 3 && downs >= 3, "%s: scale went up %d and down %d times", samples[_i], ups, downs);
    // The scaler is what thrashes: without it (bf16) nothing is skipped.
    run_fault(&r, _i, "scale-thrash", "bf16", 4);
    ck_assert_int_eq(r.skipped[3], 0);
}
END_TEST

// The same batch comes back every 4 steps (SAMPLE_DATA_BATCHES): compare step 0 and step 12.
START_TEST(test_fault_grad_underflow) {
    static run_result r;
    run_fault(&r, _i, "grad-underflow", "fp16", 13);
    double stuck = r.loss[12] - r.loss[0];
    for (int s = 0; s < 13; s++) {
        ck_assert_msg(isfinite(r.loss[s]), "%s step %d loss %g", samples[_i], s, r.loss[s]);
        ck_assert(r.scale[s] == 1.0);
    }
    ck_assert_int_eq(r.skipped[12], 0); // no inf anywhere: nothing to skip
    ck_assert_msg(stuck > -0.02, "%s: loss still fell from %.4f to %.4f", samples[_i], r.loss[0], r.loss[12]);
    static run_result healthy; // the same run without the fault
    if (_i == 1) RUN(&healthy, samples[_i], "--precision", "fp16", "--steps", "13", "--image", "16");
    else RUN(&healthy, samples[_i], "--precision", "fp16", "--steps", "13");
    assert_ran(&healthy, 13);
    ck_assert_msg(healthy.loss[12] < healthy.loss[0] - 0.1, "%s healthy: %.4f -> %.4f", samples[_i],
                  healthy.loss[0], healthy.loss[12]);
    ck_assert_msg(fabs(healthy.loss[0] - r.loss[0]) < 1e-3, "the runs start differently");
}
END_TEST

START_TEST(test_fault_attn_overflow) {
    static run_result r;
    RUN(&r, "tiny_gpt", "--fault", "attn-overflow", "--precision", "fp16", "--steps", "6");
    assert_ran(&r, 6);
    for (int s = 0; s < 6; s++) {
        ck_assert_msg(isfinite(r.loss[s]) == (s < ATTN_STEP), "fp16 step %d loss %g", s, r.loss[s]);
        ck_assert_int_eq(r.skipped[s], s < ATTN_STEP ? 0 : s - ATTN_STEP + 1);
    }
    for (int p = 0; p < 3; p += 2) { // fp32 and bf16 (fp32's range) stay finite
        RUN(&r, "tiny_gpt", "--fault", "attn-overflow", "--precision", precisions[p], "--steps", "6");
        assert_ran(&r, 6);
        for (int s = 0; s < 6; s++)
            ck_assert_msg(isfinite(r.loss[s]), "%s step %d loss %g", precisions[p], s, r.loss[s]);
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Checkpoints

START_TEST(test_checkpoint_resume) {
    char dir[64], path[96];
    ck_assert(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-samples-"));
    snprintf(path, sizeof path, "%s/mlp.ckpt", dir);
    static run_result trained, resumed, fresh;
    RUN(&trained, "mlp", "--steps", "30", "--save", path);
    assert_ran(&trained, 30);
    RUN(&resumed, "mlp", "--steps", "2", "--load", path);
    assert_ran(&resumed, 2);
    RUN(&fresh, "mlp", "--steps", "2");
    assert_ran(&fresh, 2);
    ck_assert_msg(resumed.loss[0] < 0.6 * fresh.loss[0], "resumed at %.4f, fresh %.4f",
                  resumed.loss[0], fresh.loss[0]);
    ck_assert(resumed.scale[0] == trained.scale[29]);
    // A checkpoint of another model is refused with a message.
    RUN(&resumed, "tiny_gpt", "--steps", "2", "--load", path);
    ck_assert_int_eq(resumed.exit_code, 1);
    ck_assert_msg(strncmp(resumed.err, "tiny_gpt: --load: ", 18) == 0, "stderr: %s", resumed.err);
    unlink(path);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

// The README's libampcore example is samples/example.c as it is, and it learns.
START_TEST(test_readme_example) {
    size_t n;
    char *readme = test_read_file(AMP_SRC("README.md"), &n);
    char *file = test_read_file(AMP_SRC("samples/example.c"), &n);
    const char *section = strstr(readme, "\n## libampcore\n");
    ck_assert_ptr_nonnull(section);
    const char *code = strstr(section, "```c\n");
    ck_assert_ptr_nonnull(code);
    code += 5;
    const char *end = strstr(code, "```\n");
    ck_assert_ptr_nonnull(end);
    ck_assert_msg((size_t)(end - code) == strlen(file) && !memcmp(code, file, strlen(file)),
                  "the README's libampcore example is not samples/example.c");
    free(readme);
    free(file);
    static run_result r;
    RUN(&r, "example");
    ck_assert_msg(r.exit_code == 0, "exit %d: %s%s", r.exit_code, r.out, r.err);
    double first, last;
    ck_assert_int_eq(sscanf(r.out, "loss %lf -> %lf", &first, &last), 2);
    ck_assert_msg(last < 0.5 * first, "%s", r.out);
}
END_TEST

Suite *samples_suite(void) {
    Suite *s = suite_create("samples");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_loss_falls, 0, 9);
    suite_add_tcase(s, tc);
    tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_bad_flag);
    tcase_add_test(tc, test_float_flag_range);
    tcase_add_test(tc, test_out_of_memory);
    tcase_add_loop_test(tc, test_help, 0, 3);
    tcase_add_test(tc, test_cuda_device);
    tcase_add_test(tc, test_checkpoint_resume);
    tcase_add_test(tc, test_readme_example);
    suite_add_tcase(s, tc);
    tc = tcase_create("faults");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_fault_nan_input, 0, 3);
    tcase_add_loop_test(tc, test_fault_log_zero, 0, 3);
    tcase_add_loop_test(tc, test_fault_scale_thrash, 0, 3);
    tcase_add_loop_test(tc, test_fault_grad_underflow, 0, 3);
    tcase_add_test(tc, test_fault_attn_overflow);
    suite_add_tcase(s, tc);
    return s;
}
