/*
 * test_samples.c — suite `samples`: the sample programs as end-to-end tests. Each test runs a
 * built sample (build/samples/<name>) as a child process for a few steps and parses what it
 * prints ("step 3 loss 2.3012 scale 65536 skipped 0" per step): the loss falls in fp32, fp16 and
 * bf16; a bad flag exits 2 with one line naming the flag; sizes beyond memory exit 1 with one
 * line naming what needs them; every --fault visibly does what its --help says, at the
 * documented step; a checkpoint resumes training where it stopped, step numbers included.
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
    int n_steps;    // step lines parsed, numbered first_step .. first_step + n_steps - 1
    int first_step; // 0, or after --load the checkpoint's step count
    double loss[MAX_STEPS], scale[MAX_STEPS]; // [i]: step first_step + i
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

    r->n_steps = r->first_step = 0;
    for (const char *line = r->out; *line;
         line += strcspn(line, "\n") + (line[strcspn(line, "\n")] == '\n')) {
        int step;
        char loss[32];
        double scale;
        long skipped;
        if (strncmp(line, "step ", 5) != 0) continue;
        ck_assert_msg(sscanf(line, "step %d loss %31s scale %lf skipped %ld", &step, loss, &scale,
                             &skipped) == 4,
                      "unparsable line: %.80s", line);
        if (r->n_steps == 0) r->first_step = step;
        ck_assert_msg(step == r->first_step + r->n_steps && r->n_steps < MAX_STEPS,
                      "step %d out of order", step);
        r->loss[r->n_steps] = strtod(loss, NULL);
        r->scale[r->n_steps] = scale;
        r->skipped[r->n_steps] = skipped;
        r->n_steps++;
    }
}

#define RUN(r, ...) run_sample((r), (const char *const[]){__VA_ARGS__, NULL})

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
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
    for (int i = 0; i < n; i++)
        s += v[i];
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
    if (_i / 3 == 0)
        RUN(&r, name, "--precision", prec, SHORT_MLP), steps = 40;
    else if (_i / 3 == 1)
        RUN(&r, name, "--precision", prec, SHORT_CNN), steps = 24;
    else
        RUN(&r, name, "--precision", prec, SHORT_GPT), steps = 30;
    assert_ran(&r, steps);
    for (int i = 0; i < steps; i++) {
        ck_assert_msg(isfinite(r.loss[i]), "%s %s: step %d loss %g", name, prec, i, r.loss[i]);
        ck_assert_int_eq(r.skipped[i], 0);
        ck_assert(r.scale[i] == (strcmp(prec, "fp16") == 0 ? 65536.0 : 1.0));
    }
    double first = mean(r.loss, 4), last = mean(r.loss + steps - 4, 4);
    ck_assert_msg(last < 0.6 * first, "%s %s: loss %.4f -> %.4f (mean of 4 steps)", name, prec,
                  first, last);
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
        {{"mlp", "--lr", "1e-50"}, "--lr"},                 // positive, but 0 as a float
        {{"tiny_gpt", "--lr", "1e39"}, "--lr"},             // inf as a float
        {{"mlp", "--init-scale", "1e-50"}, "--init-scale"}, // 0 would read as "not given"
        {{"simple_cnn", "--init-scale", "3.5e38"}, "--init-scale"},
        {{"tiny_gpt", "--seed", "1.5"}, "--seed"},
        {{"mlp", "--init-scale", "0"}, "--init-scale"},
        {{"mlp", "--growth-interval", "-3"}, "--growth-interval"},
        {{"mlp", "--fault", "bogus"}, "--fault"},
        {{"mlp", "--fault", "attn-overflow"}, "--fault"},
        {{"simple_cnn", "--fault", "attn-overflow"}, "--fault"},
        {{"simple_cnn", "--image", "30"}, "--image"},
        {{"tiny_gpt", "--heads", "3"}, "--d-model and --heads"},
        {{"tiny_gpt", "--d-model", "33"}, "--d-model and --heads"},
        {{"mlp", "--frobnicate"}, "--frobnicate"},
        {{"mlp", "--quiet=yes"}, "--quiet"},
        {{"tiny_gpt", "stray"}, "stray"},
        {{"mlp", "--steps", "2147483648"}, "--steps"},
        {{"mlp", "--batch", "100000000000"}, "--batch"},
        {{"mlp", "--growth-interval", "2147483648"}, "--growth-interval"},
        {{"simple_cnn", "--image", "2147483647"}, "--image"},
        {{"mlp", "--seed", "99999999999999999999"}, "--seed"},
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
    // a GradScaler's setting in a run without one is said to be ignored, not silently dropped
    RUN(&r, "mlp", "--precision", "bf16", "--init-scale", "8", "--steps", "1", "--quiet");
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert_str_eq(r.err, "mlp: --init-scale: a GradScaler's setting, and only fp16 runs one "
                            "(here bf16): ignored\n");
    RUN(&r, "mlp", "--lr", "1e-50", "--precision", "fp32", "--steps", "9");
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "got '1e-50'"), "exit %d: %s", r.exit_code,
                  r.err);
    // A number beyond the flag's range is too large (with the maximum), not "not a number".
    RUN(&r, "mlp", "--steps", "2147483648");
    ck_assert_str_eq(r.err, "mlp: --steps: 2147483648 is too large (at most 2147483647)\n");
    RUN(&r, "mlp", "--batch", "100000000000");
    ck_assert_str_eq(r.err, "mlp: --batch: 100000000000 is too large (at most 2147483647)\n");
    RUN(&r, "simple_cnn", "--image", "2147483647"); // the largest multiple of 4
    ck_assert_str_eq(r.err, "simple_cnn: --image: 2147483647 is too large (at most 2147483644)\n");
    RUN(&r, "mlp", "--seed", "99999999999999999999"); // beyond 64 bits
    ck_assert_str_eq(r.err, "mlp: --seed: 99999999999999999999 is too large (at most "
                            "9223372036854775807)\n");
    RUN(&r, "mlp", "--steps", "-99999999999999999999");
    ck_assert_str_eq(r.err,
                     "mlp: --steps: expected a positive integer, got '-99999999999999999999'\n");
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

// What a run needs is what training holds at the optimizer step, not the weights alone: per
// parameter the f32 weight, its gradient and the optimizer's state (Adam 2 tensors, SGD with
// momentum 1), and under autocast the 16-bit copy that linear reads. (A run whose estimate
// counted only weights and gradients, mlp --width 30000 on a 23 GiB machine, got past the check
// and was killed.) Shapes beyond any machine whose parameters dominate: the total said is their
// count times those bytes.
START_TEST(test_out_of_memory_counts_training_state) {
    static const struct {
        const char *sample, *precision, *optimizer;
        double params, bytes_per_param;
    } cases[] = {
        {"mlp", "fp16", "adam", 1.6e13, 4 + 4 + 8 + 2},
        {"mlp", "bf16", "adamw", 1.6e13, 4 + 4 + 8 + 2},
        {"mlp", "fp32", "adam", 1.6e13, 4 + 4 + 8},
        {"mlp", "fp16", "sgd", 1.6e13, 4 + 4 + 4 + 2},
        {"mlp", "fp32", "sgd", 1.6e13, 4 + 4 + 4},
        {"tiny_gpt", "fp16", "adam", 4.8e13, 4 + 4 + 8 + 2}, // 12 C^2, all in Linears
    };
    static run_result r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (i < 5) // 4e6^2 weights of fc1; fc2 is 4e6 x 1
            RUN(&r, "mlp", "--width", "4000000", "--depth", "1", "--classes", "1", "--batch", "1",
                "--precision", cases[i].precision, "--optimizer", cases[i].optimizer);
        else
            RUN(&r, "tiny_gpt", "--d-model", "2000000", "--heads", "1", "--vocab", "1", "--seq",
                "1", "--layers", "1", "--batch", "1", "--precision", cases[i].precision,
                "--optimizer", cases[i].optimizer);
        double total;
        char unit[4] = "";
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s: out of memory: the run needs at least %%lf %%2s",
                 cases[i].sample);
        ck_assert_msg(r.exit_code == 1 && sscanf(r.err, prefix, &total, unit) == 2,
                      "case %zu: exit %d, stderr: %s", i, r.exit_code, r.err);
        total *= strcmp(unit, "PB") == 0 ? 1e15 : strcmp(unit, "TB") == 0 ? 1e12 : 0;
        double want = cases[i].params * cases[i].bytes_per_param;
        ck_assert_msg(fabs(total - want) < 0.01 * want, "case %zu: %s, expected %.3g bytes", i,
                      r.err, want);
        ck_assert_msg(strstr(r.err, "for the parameters with their gradients, optimizer state and "
                                    "16-bit copies"),
                      "case %zu: %s", i, r.err);
    }
}
END_TEST

START_TEST(test_help) {
    static const char *const words[] = {"--device",       "--precision",  "--steps",
                                        "--batch",        "--seed",       "--lr",
                                        "--optimizer",    "--init-scale", "--growth-interval",
                                        "--fault",        "--save",       "--load",
                                        "--quiet",        "--help",       "attn-overflow",
                                        "grad-underflow", "nan-input",    "log-zero",
                                        "scale-thrash"};
    static run_result r;
    RUN(&r, samples[_i], "--help");
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert_str_eq(r.err, "");
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        ck_assert_msg(strstr(r.out, words[i]), "%s --help does not mention %s", samples[_i],
                      words[i]);
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
        ck_assert_msg(strncmp(r.err, "mlp: ", 5) == 0 && count_lines(r.err) == 1, "stderr: %s",
                      r.err);
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
    if (i == 1)
        RUN(r, samples[i], "--fault", fault, "--precision", prec, "--steps", steps, "--image",
            "16");
    else
        RUN(r, samples[i], "--fault", fault, "--precision", prec, "--steps", steps);
    assert_ran(r, n);
}

START_TEST(test_fault_nan_input) {
    static run_result r;
    run_fault(&r, _i, "nan-input", "fp16", 8);
    for (int s = 0; s < 8; s++) {
        ck_assert_msg(isnan(r.loss[s]) == (s == NAN_STEP), "%s fp16 step %d loss %g", samples[_i],
                      s, r.loss[s]);
        ck_assert_int_eq(r.skipped[s], s >= NAN_STEP); // that step only is skipped
    }
    ck_assert(r.scale[NAN_STEP + 1] == r.scale[NAN_STEP] / 2); // backoff
    // Without a GradScaler the NaN gradients reach the weights: every later loss is NaN.
    run_fault(&r, _i, "nan-input", "fp32", 7);
    for (int s = 0; s < 7; s++) {
        ck_assert_msg(isnan(r.loss[s]) == (s >= NAN_STEP), "%s fp32 step %d loss %g", samples[_i],
                      s, r.loss[s]);
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
        ck_assert_msg(isinf(r.loss[s]) && r.loss[s] > 0, "%s step %d loss %g", samples[_i], s,
                      r.loss[s]);
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
    ck_assert_msg(ups >= 3 && downs >= 3, "%s: scale went up %d and down %d times", samples[_i],
                  ups, downs);
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
    ck_assert_msg(stuck > -0.02, "%s: loss still fell from %.4f to %.4f", samples[_i], r.loss[0],
                  r.loss[12]);
    static run_result healthy; // the same run without the fault
    if (_i == 1)
        RUN(&healthy, samples[_i], "--precision", "fp16", "--steps", "13", "--image", "16");
    else
        RUN(&healthy, samples[_i], "--precision", "fp16", "--steps", "13");
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
        RUN(&r, "tiny_gpt", "--fault", "attn-overflow", "--precision", precisions[p], "--steps",
            "6");
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
    char ls[160]; // checking that --save's path can be written leaves nothing behind
    snprintf(ls, sizeof ls, "test \"$(ls '%s')\" = mlp.ckpt", dir);
    ck_assert_int_eq(system(ls), 0);
    RUN(&resumed, "mlp", "--steps", "2", "--load", path);
    assert_ran(&resumed, 2);
    RUN(&fresh, "mlp", "--steps", "2");
    assert_ran(&fresh, 2);
    ck_assert_msg(resumed.loss[0] < 0.6 * fresh.loss[0], "resumed at %.4f, fresh %.4f",
                  resumed.loss[0], fresh.loss[0]);
    ck_assert(resumed.scale[0] == trained.scale[29]);
    ck_assert_int_eq(resumed.first_step, 30);
    ck_assert_str_eq(resumed.err, "");
    // A checkpoint of another model is refused with a message.
    RUN(&resumed, "tiny_gpt", "--steps", "2", "--load", path);
    ck_assert_int_eq(resumed.exit_code, 1);
    ck_assert_msg(strncmp(resumed.err, "tiny_gpt: --load: ", 18) == 0, "stderr: %s", resumed.err);
    unlink(path);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

// Tells the steps of a resumed run from those of a run that never stopped: the same numbers, the
// same losses (the data batches go by the step number too), a fault at the step it names.
START_TEST(test_checkpoint_step_numbers) {
    char dir[64], path[96];
    ck_assert(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-samples-"));
    snprintf(path, sizeof path, "%s/mlp.ckpt", dir);
    static run_result whole, resumed;
    RUN(&whole, "mlp", "--steps", "10");
    assert_ran(&whole, 10);
    RUN(&resumed, "mlp", "--steps", "4", "--save", path, "--quiet");
    ck_assert_int_eq(resumed.exit_code, 0);
    RUN(&resumed, "mlp", "--steps", "6", "--load", path);
    assert_ran(&resumed, 6);
    ck_assert_int_eq(resumed.first_step, 4);
    ck_assert_msg(strstr(resumed.out, ", 6 steps from step 4\n"), "%s", resumed.out);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(resumed.loss[i] == whole.loss[4 + i], "step %d: %.4f resumed, %.4f whole",
                      4 + i, resumed.loss[i], whole.loss[4 + i]);
    // --fault nan-input acts at step 5 of the run, the second step of the resumed one.
    RUN(&resumed, "mlp", "--steps", "3", "--load", path, "--fault", "nan-input");
    assert_ran(&resumed, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(isnan(resumed.loss[i]) == (4 + i == NAN_STEP), "step %d loss %g", 4 + i,
                      resumed.loss[i]);
    // A step the GradScaler skipped still has its number: 8 steps with one skipped go on at 8
    // (the optimizer's count, 7, would number two steps twice).
    RUN(&resumed, "mlp", "--steps", "8", "--precision", "fp16", "--fault", "nan-input", "--save",
        path);
    assert_ran(&resumed, 8);
    ck_assert_msg(strstr(resumed.out, "skipped 1 of 8 steps"), "%s", resumed.out);
    RUN(&resumed, "mlp", "--steps", "2", "--precision", "fp16", "--load", path);
    assert_ran(&resumed, 2);
    ck_assert_int_eq(resumed.first_step, 8);
    unlink(path);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

// After --load the checkpoint's GradScaler state and optimizer hyperparameters are in effect (they
// win, as with PyTorch's load_state_dict): the header shows them, and one line on stderr names the
// flags given whose settings they replaced.
START_TEST(test_checkpoint_replaces_flags) {
    char dir[64], path[96];
    ck_assert(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-samples-"));
    snprintf(path, sizeof path, "%s/mlp.ckpt", dir);
    static run_result r;
    RUN(&r, "mlp", "--steps", "4", "--save", path, "--quiet");
    ck_assert_int_eq(r.exit_code, 0);
    static const char in_effect[] =
        "GradScaler(init 65536, growth x2 every 2000, backoff x0.5), adam lr 0.003,";
    static const char state[] = "mlp: --load: the checkpoint's GradScaler state (scale 65536, "
                                "growth x2 every 2000, backoff x0.5)";
    RUN(&r, "mlp", "--steps", "4", "--load", path, "--fault", "scale-thrash", "--lr", "0.5");
    assert_ran(&r, 4);
    ck_assert_msg(strstr(r.out, in_effect), "%s", r.out);
    ck_assert_int_eq(r.skipped[3], 0); // the thrashing settings are not in effect
    char want[512];
    snprintf(want, sizeof want,
             "%s and optimizer hyperparameters (lr 0.003) replace --fault "
             "scale-thrash's settings and --lr\n",
             state);
    ck_assert_str_eq(r.err, want);
    RUN(&r, "mlp", "--steps", "1", "--load", path, "--init-scale", "8", "--growth-interval", "3");
    assert_ran(&r, 1);
    ck_assert_msg(strstr(r.out, in_effect), "%s", r.out);
    snprintf(want, sizeof want, "%s replaces --init-scale and --growth-interval\n", state);
    ck_assert_str_eq(r.err, want);
    RUN(&r, "mlp", "--steps", "1", "--load", path, "--fault", "grad-underflow");
    snprintf(want, sizeof want, "%s replaces --fault grad-underflow's GradScaler settings\n",
             state);
    ck_assert_str_eq(r.err, want);
    RUN(&r, "mlp", "--steps", "1", "--load", path, "--lr", "0.5", "--precision", "fp16");
    ck_assert_str_eq(r.err, "mlp: --load: the checkpoint's optimizer hyperparameters (lr 0.003) "
                            "replace --lr\n");
    RUN(&r, "mlp", "--steps", "1", "--load", path, "--lr", "0.003"); // what the checkpoint holds
    assert_ran(&r, 1);
    ck_assert_str_eq(r.err, "");
    unlink(path);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

// --load refuses a checkpoint of another precision as far as the file tells: fp16 runs save an
// enabled GradScaler's state, fp32 and bf16 runs a disabled one's (those two look alike).
START_TEST(test_checkpoint_precision) {
    char dir[64], fp16[96], bf16[96];
    ck_assert(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-samples-"));
    snprintf(fp16, sizeof fp16, "%s/fp16.ckpt", dir);
    snprintf(bf16, sizeof bf16, "%s/bf16.ckpt", dir);
    static run_result r;
    RUN(&r, "mlp", "--steps", "2", "--save", fp16, "--quiet");
    ck_assert_int_eq(r.exit_code, 0);
    RUN(&r, "mlp", "--steps", "2", "--save", bf16, "--quiet", "--precision", "bf16");
    ck_assert_int_eq(r.exit_code, 0);
    RUN(&r, "mlp", "--steps", "2", "--load", fp16, "--precision", "bf16");
    ck_assert_int_eq(r.exit_code, 1);
    ck_assert_str_eq(r.err,
                     "mlp: --load: the checkpoint was saved by an fp16 run, this run is bf16\n");
    ck_assert_int_eq(r.n_steps, 0);
    RUN(&r, "mlp", "--steps", "2", "--load", fp16, "--precision", "fp32");
    ck_assert_str_eq(r.err,
                     "mlp: --load: the checkpoint was saved by an fp16 run, this run is fp32\n");
    RUN(&r, "mlp", "--steps", "2", "--load", bf16, "--precision", "fp16");
    ck_assert_int_eq(r.exit_code, 1);
    ck_assert_str_eq(r.err, "mlp: --load: the checkpoint was saved by an fp32 or bf16 run (it "
                            "holds no GradScaler state), this run is fp16\n");
    RUN(&r, "mlp", "--steps", "2", "--load", bf16, "--precision", "fp32"); // cannot be told
    assert_ran(&r, 2);
    // Another model's checkpoint is still refused for what it is, in fp16 as in bf16.
    static const char other[] = "simple_cnn: --load: checkpoint '";
    RUN(&r, "simple_cnn", "--steps", "2", "--load", fp16);
    ck_assert_msg(r.exit_code == 1 && strstr(r.err, other), "%s", r.err);
    RUN(&r, "simple_cnn", "--steps", "2", "--load", bf16, "--precision", "fp16");
    ck_assert_msg(r.exit_code == 1 && strstr(r.err, other), "%s", r.err);
    unlink(fp16);
    unlink(bf16);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

// --save's path is checked before training, not after it: one line naming the path given, exit
// 1, no step trained, nothing left behind.
START_TEST(test_save_path_checked_first) {
    static run_result r;
    RUN(&r, "mlp", "--steps", "2", "--save", "/nonexistent/dir/x.bin");
    ck_assert_int_eq(r.exit_code, 1);
    ck_assert_str_eq(r.err, "mlp: --save: cannot write checkpoint '/nonexistent/dir/x.bin': No "
                            "such file or directory\n");
    ck_assert_str_eq(r.out, "");
    char dir[64], path[96];
    ck_assert(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-samples-"));
    RUN(&r, "tiny_gpt", "--steps", "2", "--save", dir);
    ck_assert_int_eq(r.exit_code, 1);
    char want[160];
    snprintf(want, sizeof want,
             "tiny_gpt: --save: cannot write checkpoint '%s': not a regular file (a directory)\n",
             dir);
    ck_assert_str_eq(r.err, want);
    ck_assert_str_eq(r.out, "");
    // a run that fails after the check (here its --load) leaves no file at a good path either
    snprintf(path, sizeof path, "%s/x.bin", dir);
    RUN(&r, "mlp", "--steps", "2", "--save", path, "--load", "/nonexistent/ck.bin");
    ck_assert_int_eq(r.exit_code, 1);
    ck_assert_int_eq(rmdir(dir), 0); // empty
}
END_TEST

// The README's libampcore example takes no flags: --help says so, anything else is refused.
START_TEST(test_example_arguments) {
    static run_result r;
    RUN(&r, "example", "--help");
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert_msg(strncmp(r.out, "usage: example\n", 15) == 0, "%s", r.out);
    ck_assert_str_eq(r.err, "");
    static const char *const refused[] = {"--device", "--bogus", "stray"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        RUN(&r, "example", refused[i], "cuda");
        char want[96];
        snprintf(want, sizeof want, "example: %s: unexpected argument (try --help)\n", refused[i]);
        ck_assert_int_eq(r.exit_code, 2);
        ck_assert_str_eq(r.err, want);
        ck_assert_str_eq(r.out, ""); // it did not train
    }
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
    tcase_add_test(tc, test_out_of_memory_counts_training_state);
    tcase_add_loop_test(tc, test_help, 0, 3);
    tcase_add_test(tc, test_cuda_device);
    tcase_add_test(tc, test_checkpoint_resume);
    tcase_add_test(tc, test_checkpoint_step_numbers);
    tcase_add_test(tc, test_checkpoint_replaces_flags);
    tcase_add_test(tc, test_checkpoint_precision);
    tcase_add_test(tc, test_save_path_checked_first);
    tcase_add_test(tc, test_example_arguments);
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
