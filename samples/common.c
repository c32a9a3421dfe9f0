/*
 * common.c — the plumbing the sample programs share: command-line parsing and --help, the fault
 * catalogue, the synthetic-data RNG, parameters and nn.Linear, the classification loss (with the
 * log-zero fault's hand-written cross-entropy) and the training loop with autocast, GradScaler,
 * optimizer and checkpoints.
 *
 * Messages go to stderr prefixed with the program name: a bad flag is one line naming the flag
 * (exit 2), a failed library call prints amp_last_error() (exit 1), memory that the flags ask
 * for and the machine cannot give is one line naming what needs it (exit 1). Step lines go to
 * stdout.
 */
#include "common.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define STR_(x) #x
#define STR(x) STR_(x)

// ---------------------------------------------------------------------------------------------
// The fault catalogue

#define THRASH_GROWTH 4                   // --fault scale-thrash: x4 after every clean step ...
#define THRASH_BACKOFF 0.125              // ... and /8 on overflow
#define UNDERFLOW_GROWTH_INTERVAL 1000000 // --fault grad-underflow: the scale never grows

typedef struct fault_info {
    const char *name;
    sample_fault fault;
    int64_t first_step; // first step it acts on
    bool once;          // acts on first_step only
    const char *help;
} fault_info;

// clang-format off
static const fault_info faults[] = {
    {"attn-overflow", SAMPLE_FAULT_ATTN_OVERFLOW, SAMPLE_ATTN_OVERFLOW_STEP, false,
     "(tiny_gpt only) From step " STR(SAMPLE_ATTN_OVERFLOW_STEP) " on, the attention of blocks.1\n"
     "(the last block when --layers 1) scales its logits q@k^T by " STR(SAMPLE_ATTN_OVERFLOW_GAIN)
     " instead of\n1/sqrt(d_head), a temperature bug. In fp16 that mul, right after the q@k^T "
     "matmul, exceeds\n65504 and gives inf; softmax turns the rows into NaN, the loss is NaN and "
     "the GradScaler\nskips every step from then on while the scale halves. fp32 and bf16 (fp32's "
     "exponent\nrange) stay finite."},
    {"grad-underflow", SAMPLE_FAULT_GRAD_UNDERFLOW, 0, false,
     "The loss is multiplied by " STR(SAMPLE_UNDERFLOW_FACTOR) " before backward (a "
     "mis-normalised loss) and the\nGradScaler starts at scale 1 with growth interval "
     STR(UNDERFLOW_GROWTH_INTERVAL) ", so it cannot compensate.\nEvery logit gradient is then at most 1e-8, under half of fp16's "
     "smallest subnormal (2^-24),\nso the fp16 backward rounds it to exactly 0: all weight "
     "gradients vanish, nothing is inf,\nno step is skipped and the loss stops falling. fp32 and "
     "bf16 (fp32's range) keep the tiny\ngradients (about 1e-10, non-zero), though they are far "
     "below Adam's eps (1e-8), so learning\ncrawls there too; --init-scale 65536 lifts the fp16 "
     "gradients back into range and fp16 then\nmatches fp32. The printed loss is the one before "
     "the factor."},
    {"nan-input", SAMPLE_FAULT_NAN_INPUT, SAMPLE_NAN_INPUT_STEP, true,
     "At step " STR(SAMPLE_NAN_INPUT_STEP) " element 0 of the input batch is NaN (mlp: feature 0 "
     "of example 0; simple_cnn:\npixel (0, 0) of channel 0 of image 0; tiny_gpt, whose tokens are "
     "integers: element [0, 0, 0]\nof the embedding sum wte[x] + wpe, where floats first enter). "
     "The loss of that step is NaN.\nfp16: the GradScaler finds NaN gradients and skips that one "
     "step; training goes on.\nfp32/bf16: no GradScaler, so the NaN gradients reach the "
     "optimizer, the weights become NaN\nand so does every later loss."},
    {"log-zero", SAMPLE_FAULT_LOG_ZERO, SAMPLE_LOG_ZERO_STEP, false,
     "The loss is a hand-written cross-entropy, -mean(log(softmax(logits)[target])), the target\n"
     "picked by multiplying with a one-hot mask. From step " STR(SAMPLE_LOG_ZERO_STEP) " on the "
     "logits are multiplied by " STR(SAMPLE_LOG_ZERO_GAIN) "\n(a temperature bug): the probability "
     "of a target 0.011 or more below the top logit\nunderflows to exactly 0 even in fp32 (softmax "
     "runs in fp32 under autocast), log gives -inf\nand the loss is inf in every precision. fp16: "
     "the gradients are NaN and every step from\nthen on is skipped. fp32/bf16: the NaN gradients "
     "reach the weights."},
    {"scale-thrash", SAMPLE_FAULT_SCALE_THRASH, 0, false,
     "The GradScaler grows the scale x" STR(THRASH_GROWTH) " after every clean step (growth "
     "interval 1) and backs off\nx" STR(THRASH_BACKOFF) " on overflow: the scale climbs until the "
     "fp16 gradients overflow, that step is\nskipped, the scale drops and climbs again: a sawtooth "
     "with many skipped steps. fp16 only:\nin fp32/bf16 the GradScaler is disabled and training is "
     "healthy."},
};
// clang-format on
#define N_FAULTS ((int)(sizeof faults / sizeof faults[0]))

static const fault_info *fault_of(sample_fault f) {
    for (int i = 0; i < N_FAULTS; i++)
        if (faults[i].fault == f) return &faults[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Command line

// The program's name, set by sample_parse_args, for the messages of helpers that get no
// sample_opts (sample_calloc).
static const char *prog_name = "sample";

static const struct {
    const char *name;
    amp_dtype dtype;
} precisions[] = {{"fp32", AMP_DTYPE_F32}, {"fp16", AMP_DTYPE_F16}, {"bf16", AMP_DTYPE_BF16}};

static const char *precision_name(amp_dtype t) {
    for (size_t i = 0; i < sizeof precisions / sizeof precisions[0]; i++)
        if (precisions[i].dtype == t) return precisions[i].name;
    return "?";
}

int sample_usage_error(const sample_opts *o, const char *flag, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: %s: ", o->prog, flag);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

// "expected <what>, got 'value'" (or "got nothing" when the value is missing).
static int bad_value(const sample_opts *o, const char *flag, const char *what, const char *value) {
    if (!value) return sample_usage_error(o, flag, "expected %s, got nothing", what);
    return sample_usage_error(o, flag, "expected %s, got '%s'", what, value);
}

typedef enum int_parse { INT_OK, INT_BAD, INT_TOO_LARGE } int_parse;

// s as an integer in [min, max]. A number above max (also one beyond 64 bits) is told apart, so
// that the message can give the maximum instead of asking for "a positive integer".
static int_parse parse_int(const char *s, int64_t min, int64_t max, int64_t *out) {
    if (!s || !*s) return INT_BAD;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end) return INT_BAD;
    if (errno == ERANGE ? v == LLONG_MAX : v > max) return INT_TOO_LARGE;
    if (errno == ERANGE || v < min) return INT_BAD;
    *out = v;
    return INT_OK;
}

// An integer flag's value in [min, max] (what: "a positive integer") into *out. Returns
// SAMPLE_CONTINUE, or 2 after one line saying what was wrong.
static int int_flag(const sample_opts *o, const char *flag, const char *value, int64_t min,
                    int64_t max, const char *what, int64_t *out) {
    switch (parse_int(value, min, max, out)) {
    case INT_OK:
        return SAMPLE_CONTINUE;
    case INT_TOO_LARGE:
        return sample_usage_error(o, flag, "%s is too large (at most %lld)", value, (long long)max);
    default:
        return bad_value(o, flag, what, value);
    }
}

// A positive number that stays positive and finite as a float, the type the flags are kept in:
// strtod takes 1e-50, which as a float is 0 (an lr of 0 trains nothing, an --init-scale of 0
// reads as "not given"), and 1e39, beyond FLT_MAX (converting it is undefined).
static bool parse_positive_double(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    double v = strtod(s, &end);
    if (*end || !(v > 0.0) || v > FLT_MAX) return false;
    if (!((float)v > 0.0f)) return false; // under half of FLT_TRUE_MIN: rounded to 0
    *out = v;
    return true;
}

static bool parse_positive_float(const char *s, float *out) {
    double v;
    if (!parse_positive_double(s, &v)) return false;
    *out = (float)v;
    return true;
}

#define FLOAT_RANGE "a positive number within float range (1.4e-45 to 3.4e+38)"

static void print_help(const sample_spec *spec) {
    printf("usage: %s [flags]\n%s\n\n", spec->name, spec->summary);
    printf("  --device cpu|cuda        where to train (default cpu; cuda needs the CUDA backend)\n"
           "  --precision fp32|fp16|bf16\n"
           "                           fp32: no autocast; fp16: autocast to f16 and a GradScaler;\n"
           "                           bf16: autocast to bf16, GradScaler disabled (PyTorch\n"
           "                           practice) (default fp16)\n");
    printf("  --steps N                optimizer steps (default %lld)\n", (long long)spec->steps);
    printf("  --batch N                examples per batch (default %lld)\n",
           (long long)spec->batch);
    printf(
        "  --seed N                 seeds the synthetic data and the initialisation (default 1)\n");
    printf("  --lr X                   learning rate (default %g for adam/adamw, %g for sgd)\n",
           spec->lr_adam, spec->lr_sgd);
    printf("  --optimizer sgd|adam|adamw\n"
           "                           default adam (torch defaults; sgd with momentum 0.9)\n"
           "  --init-scale X           GradScaler initial scale, fp16 only (default 65536)\n"
           "  --growth-interval N      GradScaler growth interval, fp16 only (default 2000)\n"
           "  --fault NAME             reproduce an AMP failure on purpose (see below)\n"
           "  --save PATH              after training, write parameters, optimizer and GradScaler\n"
           "                           state to PATH (whether it can be written is checked first)\n"
           "  --load PATH              before training, restore them from a --save file of the\n"
           "                           same model and optimizer, and of fp16 when this run is\n"
           "                           fp16 and of fp32 or bf16 when not (the file cannot tell\n"
           "                           those two apart). Its GradScaler state and lr win over\n"
           "                           --init-scale, --growth-interval, a fault's GradScaler\n"
           "                           settings and --lr (stderr says which it replaced), and\n"
           "                           the steps are numbered on from the saved run's (a file\n"
           "                           of an older build: from its count of optimizer steps,\n"
           "                           which leaves out the steps the GradScaler skipped)\n"
           "  --quiet                  print only the final line\n"
           "  --help                   this text\n");
    if (spec->n_shape_flags) printf("\nmodel shape:\n");
    for (int i = 0; i < spec->n_shape_flags; i++) {
        const sample_int_flag *f = &spec->shape_flags[i];
        printf("  %-6s N%*s%s (default %lld)\n", f->name, 18 - (int)strlen(f->name), "", f->help,
               (long long)*f->value);
    }
    printf("\nOutput: one line per step, \"step 3 loss 2.3012 scale 65536 skipped 0\" (scale: the\n"
           "GradScaler's scale that step, 1 when disabled; skipped: steps skipped so far), then\n"
           "\"final loss L (from L0), skipped N of M steps\". Exit status 0, 1 when the library\n"
           "reports an error, the sizes the flags ask for do not fit in memory, --save's path\n"
           "cannot be written or --load's file does not fit the run (one line says what), 2\n"
           "for a bad flag.\n");
    printf("\nfaults (--fault NAME; they are meant for --precision fp16 and run in every "
           "precision;\n--init-scale and --growth-interval override the GradScaler settings a "
           "fault makes, and\n--load's checkpoint overrides these). A fault's step is the "
           "step number as printed:\nafter --load the steps go on from the checkpoint's, so a "
           "fault of step 5 acts only when the\nresumed run reaches step 5, and one from step 5 "
           "on acts from the first step if that is past 5.\n");
    for (int i = 0; i < N_FAULTS; i++) {
        printf("  %s\n", faults[i].name);
        for (const char *line = faults[i].help; *line;) { // indented by 4
            size_t len = strcspn(line, "\n");
            printf("    %.*s\n", (int)len, line);
            line += len + (line[len] == '\n');
        }
    }
}

// A model shape flag; NULL when name is not one.
static const sample_int_flag *shape_flag(const sample_spec *spec, const char *name) {
    for (int i = 0; i < spec->n_shape_flags; i++)
        if (strcmp(spec->shape_flags[i].name, name) == 0) return &spec->shape_flags[i];
    return NULL;
}

// One "--flag value" (or "--flag=value"); value is NULL when missing. Returns SAMPLE_CONTINUE or 2.
static int parse_flag(const sample_spec *spec, const char *flag, const char *value,
                      sample_opts *o) {
    int64_t n;
    if (strcmp(flag, "--device") == 0) {
        if (!value || !amp_device_parse(value, &o->device))
            return bad_value(o, flag, "cpu or cuda", value);
    } else if (strcmp(flag, "--precision") == 0) {
        size_t i = 0, np = sizeof precisions / sizeof precisions[0];
        while (i < np && !(value && strcmp(value, precisions[i].name) == 0))
            i++;
        if (i == np) return bad_value(o, flag, "fp32, fp16 or bf16", value);
        o->precision = precisions[i].dtype;
    } else if (strcmp(flag, "--steps") == 0) {
        return int_flag(o, flag, value, 1, INT32_MAX, "a positive integer", &o->steps);
    } else if (strcmp(flag, "--batch") == 0) {
        return int_flag(o, flag, value, 1, INT32_MAX, "a positive integer", &o->batch);
    } else if (strcmp(flag, "--seed") == 0) {
        int rc = int_flag(o, flag, value, 0, INT64_MAX, "a non-negative integer", &n);
        if (rc != SAMPLE_CONTINUE) return rc;
        o->seed = (uint64_t)n;
    } else if (strcmp(flag, "--lr") == 0) {
        if (!parse_positive_double(value, &o->lr)) return bad_value(o, flag, FLOAT_RANGE, value);
        o->lr_given = true;
    } else if (strcmp(flag, "--optimizer") == 0) {
        if (!value || !amp_optim_kind_parse(value, &o->optimizer))
            return bad_value(o, flag, "sgd, adam or adamw", value);
    } else if (strcmp(flag, "--init-scale") == 0) {
        if (!parse_positive_float(value, &o->init_scale))
            return bad_value(o, flag, FLOAT_RANGE, value);
    } else if (strcmp(flag, "--growth-interval") == 0) {
        int rc = int_flag(o, flag, value, 1, INT32_MAX, "a positive integer", &n);
        if (rc != SAMPLE_CONTINUE) return rc;
        o->growth_interval = (int)n;
    } else if (strcmp(flag, "--fault") == 0) {
        int i = 0;
        while (i < N_FAULTS && !(value && strcmp(value, faults[i].name) == 0))
            i++;
        if (i == N_FAULTS)
            return bad_value(o, flag,
                             "attn-overflow, grad-underflow, nan-input, log-zero or scale-thrash",
                             value);
        if (faults[i].fault == SAMPLE_FAULT_ATTN_OVERFLOW && !spec->has_attention)
            return sample_usage_error(
                o, flag, "attn-overflow needs attention layers; only tiny_gpt has them");
        o->fault = faults[i].fault;
    } else if (strcmp(flag, "--save") == 0) {
        if (!value || !*value) return bad_value(o, flag, "a file path", value);
        o->save_path = value;
    } else if (strcmp(flag, "--load") == 0) {
        if (!value || !*value) return bad_value(o, flag, "a file path", value);
        o->load_path = value;
    } else if (shape_flag(spec, flag)) {
        const sample_int_flag *f = shape_flag(spec, flag);
        char what[64] = "a positive integer";
        if (f->multiple_of > 1)
            snprintf(what, sizeof what, "a positive multiple of %lld", (long long)f->multiple_of);
        int rc = int_flag(o, flag, value, 1, INT32_MAX - INT32_MAX % f->multiple_of, what, &n);
        if (rc != SAMPLE_CONTINUE) return rc;
        if (n % f->multiple_of != 0) return bad_value(o, flag, what, value);
        *f->value = n;
    } else {
        return sample_usage_error(o, flag, "unknown flag (try --help)");
    }
    return SAMPLE_CONTINUE;
}

// Whether --save's path can be written, found out before training rather than after it; false
// after one line naming the path.
static bool save_path_writable(const sample_opts *o) {
    if (amp_checkpoint_writable(o->save_path) == AMP_OK) return true;
    fprintf(stderr, "%s: --save: %s\n", o->prog, amp_last_error());
    return false;
}

int sample_parse_args(const sample_spec *spec, int argc, char **argv, sample_opts *o) {
    prog_name = spec->name;
    *o = (sample_opts){.device = AMP_DEVICE_CPU,
                       .precision = AMP_DTYPE_F16,
                       .steps = spec->steps,
                       .batch = spec->batch,
                       .seed = 1,
                       .optimizer = AMP_OPTIM_ADAM,
                       .prog = spec->name};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help(spec);
            return 0;
        }
        if (strcmp(arg, "--quiet") == 0) {
            o->quiet = true;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0 || !arg[2])
            return sample_usage_error(o, arg, "unexpected argument (try --help)");
        char flag[64];
        const char *value, *eq = strchr(arg, '=');
        if (eq) {
            snprintf(flag, sizeof flag, "%.*s", (int)(eq - arg), arg);
            value = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", arg);
            value = i + 1 < argc ? argv[++i] : NULL;
        }
        if (strcmp(flag, "--quiet") == 0 || strcmp(flag, "--help") == 0)
            return sample_usage_error(o, flag, "takes no value");
        int rc = parse_flag(spec, flag, value, o);
        if (rc != SAMPLE_CONTINUE) return rc;
    }
    if (!o->lr_given) o->lr = o->optimizer == AMP_OPTIM_SGD ? spec->lr_sgd : spec->lr_adam;
    if ((o->init_scale > 0 || o->growth_interval > 0) && o->precision != AMP_DTYPE_F16)
        fprintf(stderr,
                "%s: %s: a GradScaler's setting, and only fp16 runs one (here %s): "
                "ignored\n",
                o->prog, o->init_scale > 0 ? "--init-scale" : "--growth-interval",
                o->precision == AMP_DTYPE_BF16 ? "bf16" : "fp32");
    if (o->save_path && !save_path_writable(o)) return 1;
    return SAMPLE_CONTINUE;
}

amp_ctx_t *sample_ctx_new(const sample_opts *o) {
    amp_ctx_t *ctx = NULL;
    amp_status s = amp_ctx_new(o->device, o->seed, &ctx);
    if (s != AMP_OK) {
        fprintf(stderr, "%s: %s\n", o->prog,
                *amp_last_error() ? amp_last_error() : amp_status_str(s));
        return NULL;
    }
    return ctx;
}

// ---------------------------------------------------------------------------------------------
// Memory

// What a tensor costs beyond its elements, at least: the library's records of it (amp_tensor,
// its buffer, their allocator headers) take more than this.
#define TENSOR_OVERHEAD 256

int64_t sample_mul(int64_t a, int64_t b) {
    if (a != 0 && b > INT64_MAX / a) return INT64_MAX;
    return a * b;
}

int64_t sample_add(int64_t a, int64_t b) {
    return b > INT64_MAX - a ? INT64_MAX : a + b;
}

// State tensors per parameter that the optimizer makes with it: Adam's and AdamW's exp_avg and
// exp_avg_sq, SGD's momentum buffer (the samples always use momentum 0.9).
static int64_t optim_states(amp_optim_kind kind) {
    return kind == AMP_OPTIM_SGD ? 1 : 2;
}

int64_t sample_param_bytes(const sample_opts *o, int64_t floats, int64_t tensors,
                           int64_t cast_floats) {
    int64_t one = sample_add(sample_mul(floats, (int64_t)sizeof(float)),
                             sample_mul(tensors, TENSOR_OVERHEAD));
    int64_t bytes = sample_mul(one, 2 + optim_states(o->optimizer)); // weights, gradients, state
    if (o->precision == AMP_DTYPE_F32) return bytes;
    return sample_add(bytes, sample_mul(cast_floats, (int64_t)amp_dtype_size(o->precision)));
}

// A host allocation of `bytes` succeeds now. It is unmapped untouched: under Linux's default
// overcommit the kernel refuses at once a private writable mapping it could never back (more
// than memory and swap), and one it grants costs nothing. mmap rather than malloc: under
// AddressSanitizer a malloc that large aborts instead of returning NULL.
static bool host_can_allocate(int64_t bytes) {
    if (bytes >= PTRDIFF_MAX) return false; // more than any mapping
    size_t n = bytes > 0 ? (size_t)bytes : 1;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    munmap(p, n);
    return true;
}

// "512 bytes", "25.6 GB", or "over 9.22 EB" for a saturated size.
static const char *human_bytes(int64_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000 && u < 6)
        v /= 1000, u++;
    snprintf(buf, n, "%s%.3g %s", bytes == INT64_MAX ? "over " : "", v, units[u]);
    return buf;
}

// One line naming what could not be allocated, then exit status 1 (see sample_calloc).
static _Noreturn void out_of_memory(const char *what, int64_t bytes) {
    char buf[32];
    fprintf(stderr, "%s: out of memory allocating %s (%s)\n", prog_name, what,
            human_bytes(bytes, buf, sizeof buf));
    exit(1);
}

bool sample_memory_fits(const sample_opts *o, const sample_mem_part *parts, int n) {
    int64_t total = 0;
    int largest = 0;
    for (int i = 0; i < n; i++) {
        total = sample_add(total, parts[i].bytes);
        if (parts[i].bytes > parts[largest].bytes) largest = i;
    }
    bool fits = total < INT64_MAX && (o->device != AMP_DEVICE_CPU || host_can_allocate(total));
    if (fits) return true;
    char all[32], part[32];
    fprintf(stderr, "%s: out of memory: the run needs %s%s, %s of it for %s\n", o->prog,
            total < INT64_MAX ? "at least " : "", human_bytes(total, all, sizeof all),
            human_bytes(parts[largest].bytes, part, sizeof part), parts[largest].what);
    return false;
}

void *sample_calloc(const char *what, int64_t count, size_t size) {
    int64_t bytes = sample_mul(count, (int64_t)size);
    void *p = bytes < PTRDIFF_MAX ? calloc((size_t)count ? (size_t)count : 1, size) : NULL;
    if (!p) out_of_memory(what, bytes);
    return p;
}

// ---------------------------------------------------------------------------------------------
// Host RNG (splitmix64)

sample_rng sample_rng_new(uint64_t seed, uint64_t stream) {
    return (sample_rng){seed * 0xD1B54A32D192ED03ull + stream * 0x9E3779B97F4A7C15ull + 1};
}

uint64_t sample_rng_next(sample_rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int32_t sample_rng_below(sample_rng *r, int32_t n) {
    return (int32_t)((sample_rng_next(r) >> 33) % (uint64_t)n);
}

float sample_rng_uniform(sample_rng *r) {
    return (float)(sample_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float sample_rng_normal(sample_rng *r) { // Box-Muller
    double u1 = ((double)(sample_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(sample_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void sample_data_free(sample_batch data[SAMPLE_DATA_BATCHES]) {
    for (int i = 0; i < SAMPLE_DATA_BATCHES; i++) {
        amp_tensor_free(data[i].x);
        amp_tensor_free(data[i].y);
    }
}

// ---------------------------------------------------------------------------------------------
// Parameters and nn.Linear

amp_tensor_t *sample_param(sample_params *ps, amp_ctx_t *ctx, const char *name, int ndim,
                           const int64_t *shape) {
    amp_tensor_t *t = amp_tensor_new(ctx, AMP_DTYPE_F32, ndim, shape);
    amp_tensor_set_name(t, name);
    amp_tensor_set_requires_grad(t, true);
    if (ps->n == ps->cap) {
        int64_t cap = ps->cap ? 2 * (int64_t)ps->cap : 16, bytes = cap * (int64_t)sizeof *ps->t;
        // the list is int-indexed: more parameters than INT_MAX are out of memory too
        amp_tensor_t **grown = cap <= INT_MAX ? realloc(ps->t, (size_t)bytes) : NULL;
        if (!grown) out_of_memory("the parameter list", bytes);
        ps->t = grown;
        ps->cap = (int)cap;
    }
    ps->t[ps->n++] = t;
    return t;
}

void sample_params_free(sample_params *ps) {
    for (int i = 0; i < ps->n; i++)
        amp_tensor_free(ps->t[i]);
    free(ps->t);
    *ps = (sample_params){0};
}

void sample_linear_init(sample_linear *l, sample_params *ps, amp_ctx_t *ctx, const char *prefix,
                        const char *layer, int64_t in, int64_t out, bool bias) {
    char name[128];
    const char *dot = *prefix ? "." : "";
    float bound = 1.0f / sqrtf((float)in); // kaiming_uniform(a=sqrt(5)) and the bias rule
    snprintf(l->layer, sizeof l->layer, "%s", layer);
    snprintf(name, sizeof name, "%s%s%s.weight", prefix, dot, layer);
    l->w = sample_param(ps, ctx, name, 2, (int64_t[]){out, in});
    amp_tensor_uniform(l->w, bound);
    l->b = NULL;
    if (bias) {
        snprintf(name, sizeof name, "%s%s%s.bias", prefix, dot, layer);
        l->b = sample_param(ps, ctx, name, 1, &out);
        amp_tensor_uniform(l->b, bound);
    }
}

amp_tensor_t *sample_linear_forward(amp_ctx_t *ctx, const sample_linear *l, amp_tensor_t *x,
                                    sample_act act) {
    amp_layer_begin(ctx, l->layer);
    amp_tensor_t *y = amp_linear(ctx, x, l->w, l->b);
    if (act == SAMPLE_ACT_GELU) y = amp_gelu(ctx, y, false);
    amp_layer_end(ctx);
    return y;
}

// ---------------------------------------------------------------------------------------------
// The step as the model sees it

const sample_batch *sample_step_batch(const sample_step *s,
                                      const sample_batch data[SAMPLE_DATA_BATCHES]) {
    return &data[s->index % SAMPLE_DATA_BATCHES];
}

bool sample_fault_now(const sample_step *s, sample_fault f) {
    const fault_info *fi = fault_of(f);
    if (!fi || s->opts->fault != f) return false;
    return fi->once ? s->index == fi->first_step : s->index >= fi->first_step;
}

// A persistent f32 tensor from host values, freed when the step ends.
static amp_tensor_t *step_temp(sample_step *s, int ndim, const int64_t *shape, const float *host) {
    if (s->n_temps == SAMPLE_STEP_MAX_TEMPS) {
        fprintf(stderr, "%s: more than %d temporary tensors in one step\n", s->opts->prog,
                SAMPLE_STEP_MAX_TEMPS);
        abort();
    }
    amp_tensor_t *t = amp_tensor_from_f32(s->ctx, AMP_DTYPE_F32, ndim, shape, host);
    s->temps[s->n_temps++] = t;
    return t;
}

static float *host_floats(const char *what, int64_t n) {
    return sample_calloc(what, n, sizeof(float));
}

amp_tensor_t *sample_input(sample_step *s, amp_tensor_t *x) {
    if (!sample_fault_now(s, SAMPLE_FAULT_NAN_INPUT)) return x;
    int64_t shape[AMP_MAX_DIMS];
    int ndim = amp_tensor_ndim(x);
    for (int i = 0; i < ndim; i++)
        shape[i] = amp_tensor_dim(x, i);
    float *h = host_floats("the NaN input batch", amp_tensor_numel(x));
    amp_tensor_read_f32(x, h);
    h[0] = NAN;
    amp_tensor_t *t = step_temp(s, ndim, shape, h);
    free(h);
    return t;
}

amp_tensor_t *sample_nan_input(sample_step *s, int ndim, const int64_t *shape) {
    if (!sample_fault_now(s, SAMPLE_FAULT_NAN_INPUT)) return NULL;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n = sample_mul(n, shape[i]);
    float *h = host_floats("the NaN input", n);
    h[0] = NAN;
    amp_tensor_t *t = step_temp(s, ndim, shape, h);
    free(h);
    return t;
}

// (N, C) with 1 at each row's target class.
static amp_tensor_t *one_hot(sample_step *s, amp_tensor_t *target, int64_t classes) {
    int64_t n = amp_tensor_numel(target);
    int32_t *idx = sample_calloc("the targets", n, sizeof *idx);
    float *h = host_floats("the one-hot targets", sample_mul(n, classes));
    amp_tensor_read(target, idx);
    for (int64_t i = 0; i < n; i++)
        h[i * classes + idx[i]] = 1.0f;
    amp_tensor_t *t = step_temp(s, 2, (int64_t[]){n, classes}, h);
    free(h);
    free(idx);
    return t;
}

amp_tensor_t *sample_loss(sample_step *s, amp_tensor_t *logits, amp_tensor_t *target) {
    amp_ctx_t *ctx = s->ctx;
    logits = amp_to(ctx, logits, AMP_DTYPE_F32); // (N, C): the loss runs on fp32 logits
    if (s->opts->fault != SAMPLE_FAULT_LOG_ZERO) return amp_cross_entropy(ctx, logits, target);

    // --fault log-zero: a cross-entropy written by hand, without log-sum-exp, and from the fault
    // step on a temperature bug that drives the target probabilities of wrong rows to exactly 0.
    int64_t n = amp_tensor_dim(logits, 0), classes = amp_tensor_dim(logits, 1);
    if (sample_fault_now(s, SAMPLE_FAULT_LOG_ZERO))
        logits = amp_mul_scalar(ctx, logits, SAMPLE_LOG_ZERO_GAIN);
    amp_tensor_t *p = amp_softmax(ctx, logits, 1);                                 // (N, C) f32
    amp_tensor_t *hot = one_hot(s, target, classes);                               // (N, C)
    amp_tensor_t *cold = amp_add_scalar(ctx, amp_mul_scalar(ctx, hot, -1.0), 1.0); // 1 - hot
    amp_tensor_t *p_target = amp_add(ctx, amp_mul(ctx, p, hot), cold); // p[target] there, else 1
    return amp_mul_scalar(ctx, amp_sum(ctx, amp_log(ctx, p_target)), -1.0 / (double)n);
}

// ---------------------------------------------------------------------------------------------
// The training loop

// Prints "prog: what: message" for a failed call; true when s is AMP_OK.
static bool check(const sample_opts *o, const char *what, amp_status s) {
    if (s == AMP_OK) return true;
    fprintf(stderr, "%s: %s: %s\n", o->prog, what,
            *amp_last_error() ? amp_last_error() : amp_status_str(s));
    return false;
}

// fp16 gets an enabled GradScaler (PyTorch practice; bf16 and fp32 do not need one), with the
// settings a fault makes, then the explicit flags.
static amp_scaler_params scaler_params(const sample_opts *o) {
    amp_scaler_params p = amp_scaler_defaults();
    p.enabled = o->precision == AMP_DTYPE_F16;
    if (o->fault == SAMPLE_FAULT_GRAD_UNDERFLOW) {
        p.init_scale = 1.0f;
        p.growth_interval = UNDERFLOW_GROWTH_INTERVAL;
    }
    if (o->fault == SAMPLE_FAULT_SCALE_THRASH) {
        p.growth_interval = 1;
        p.growth_factor = THRASH_GROWTH;
        p.backoff_factor = THRASH_BACKOFF;
    }
    if (o->init_scale > 0) p.init_scale = o->init_scale;
    if (o->growth_interval > 0) p.growth_interval = o->growth_interval;
    return p;
}

// The optimizer the flags ask for.
static amp_optim_params optim_params(const sample_opts *o) {
    amp_optim_params p = amp_optim_defaults(o->optimizer);
    p.lr = o->lr;
    if (o->optimizer == AMP_OPTIM_SGD) p.momentum = 0.9;
    return p;
}

// The loss as printed: a NaN prints as "nan" whatever its sign bit.
static double loss_value(float v) {
    return isnan(v) ? NAN : (double)v;
}

static void step_free(sample_step *s) {
    for (int i = 0; i < s->n_temps; i++)
        amp_tensor_free(s->temps[i]);
    s->n_temps = 0;
}

// ---------------------------------------------------------------------------------------------
// --load

// "prog: --load: the checkpoint was saved by <saved_by>, this run is bf16"; false.
static bool precision_mismatch(const sample_opts *o, const char *saved_by) {
    fprintf(stderr, "%s: --load: the checkpoint was saved by %s, this run is %s\n", o->prog,
            saved_by, precision_name(o->precision));
    return false;
}

// Restores the parameters, optimizer and GradScaler state from --load's checkpoint, which must
// come from a run of this precision as far as the file tells: fp16 runs save an enabled
// GradScaler's state, fp32 and bf16 runs a disabled one's (so those two cannot be told apart).
// false after one line on stderr.
static bool load_checkpoint(const sample_opts *o, const sample_params *ps, amp_optim_t *opt,
                            amp_scaler_t *sc) {
    const bool fp16 = amp_scaler_is_enabled(sc);
    bool saved_fp16;
    amp_status st = amp_checkpoint_scaler_enabled(o->load_path, &saved_fp16);
    // another model's or optimizer's file is refused for that first, whatever its precision
    if (st == AMP_OK)
        st = amp_checkpoint_load(o->load_path, ps->t, ps->n, opt, saved_fp16 == fp16 ? sc : NULL);
    if (st != AMP_OK) {
        fprintf(stderr, "%s: --load: %s\n", o->prog,
                *amp_last_error() ? amp_last_error() : amp_status_str(st));
        return false;
    }
    return saved_fp16 == fp16 ||
           precision_mismatch(o, saved_fp16 ? "an fp16 run"
                                            : "an fp32 or bf16 run (it holds no GradScaler state)");
}

// The GradScaler flags given whose setting the checkpoint's state (got) replaced, into flags[];
// returns how many. A setting is put down to the flag that made it (asked): --init-scale or
// --growth-interval when given, else the fault that sets it.
static int replaced_scaler_flags(const sample_opts *o, const amp_scaler_params *asked,
                                 const amp_scaler_state *got, const char *flags[3]) {
    bool thrash = o->fault == SAMPLE_FAULT_SCALE_THRASH;
    bool underflow = o->fault == SAMPLE_FAULT_GRAD_UNDERFLOW;
    bool scale = asked->init_scale != got->scale;
    bool interval = asked->growth_interval != got->growth_interval;
    bool factors =
        asked->growth_factor != got->growth_factor || asked->backoff_factor != got->backoff_factor;
    int n = 0;
    if ((thrash && (factors || (interval && !o->growth_interval))) ||
        (underflow && ((scale && o->init_scale <= 0) || (interval && !o->growth_interval))))
        flags[n++] = thrash ? "--fault scale-thrash's settings" // all of it, GradScaler settings
                            : "--fault grad-underflow's GradScaler settings"; // not its loss factor
    if (scale && o->init_scale > 0) flags[n++] = "--init-scale";
    if (interval && o->growth_interval > 0) flags[n++] = "--growth-interval";
    return n;
}

// After --load: one line on stderr naming the flags given whose settings the checkpoint replaced
// (its GradScaler state and optimizer hyperparameters win, as with PyTorch's load_state_dict);
// nothing when there are none. asked: the GradScaler settings the flags made.
static void say_replaced(const sample_opts *o, const amp_scaler_params *asked,
                         const amp_scaler_t *sc, const amp_optim_t *opt) {
    const char *flags[4];
    amp_scaler_state got;
    int n_scaler = 0;
    if (amp_scaler_is_enabled(sc) && amp_scaler_state_dict(sc, &got) == AMP_OK)
        n_scaler = replaced_scaler_flags(o, asked, &got, flags);
    double lr = amp_optim_get_params(opt)->lr;
    int n = n_scaler;
    if (o->lr_given && lr != o->lr) flags[n++] = "--lr";
    if (n == 0) return;
    fprintf(stderr, "%s: --load: the checkpoint's ", o->prog);
    if (n_scaler)
        fprintf(stderr, "GradScaler state (scale %g, growth x%g every %d, backoff x%g)",
                (double)got.scale, got.growth_factor, got.growth_interval, got.backoff_factor);
    if (n_scaler && n > n_scaler) fprintf(stderr, " and ");
    if (n > n_scaler) fprintf(stderr, "optimizer hyperparameters (lr %g)", lr);
    fprintf(stderr, " %s ", n == n_scaler ? "replaces" : "replace");
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s%s", i == 0 ? "" : i + 1 < n ? ", " : " and ", flags[i]);
    fputc('\n', stderr);
}

// ---------------------------------------------------------------------------------------------
// The loop

// The run as it is set up, after --load: the GradScaler and optimizer settings in effect.
static void print_header(const sample_opts *o, const sample_params *ps, const amp_scaler_t *sc,
                         const amp_optim_t *opt, int64_t first_step) {
    int64_t n = 0;
    for (int i = 0; i < ps->n; i++)
        n += amp_tensor_numel(ps->t[i]);
    printf("%s on %s: %lld parameters, %s", o->prog, o->device == AMP_DEVICE_CUDA ? "cuda" : "cpu",
           (long long)n, precision_name(o->precision));
    if (o->precision != AMP_DTYPE_F32) printf(" autocast");
    amp_scaler_state st;
    if (amp_scaler_is_enabled(sc) && amp_scaler_state_dict(sc, &st) == AMP_OK)
        printf(" + GradScaler(init %g, growth x%g every %d, backoff x%g)", (double)st.scale,
               st.growth_factor, st.growth_interval, st.backoff_factor);
    printf(", %s lr %g, batch %lld, %lld steps", amp_optim_kind_name(o->optimizer),
           amp_optim_get_params(opt)->lr, (long long)o->batch, (long long)o->steps);
    if (first_step > 0) printf(" from step %lld", (long long)first_step);
    if (o->fault != SAMPLE_FAULT_NONE) printf(", fault %s", fault_of(o->fault)->name);
    printf("\n");
}

int sample_train(const sample_opts *o, amp_ctx_t *ctx, const sample_params *ps,
                 sample_loss_fn loss_fn, void *model) {
    amp_scaler_params sp = scaler_params(o);
    amp_optim_params op = optim_params(o);
    amp_dtype autocast_dtype = o->precision == AMP_DTYPE_BF16 ? AMP_DTYPE_BF16 : AMP_DTYPE_F16;
    amp_scaler_t *sc = NULL;
    amp_optim_t *opt = NULL;
    int rc = 1;
    if (!check(o, "GradScaler", amp_scaler_new(&sp, &sc)) ||
        !check(o, "optimizer", amp_optim_new(ctx, &op, ps->t, ps->n, &opt)))
        goto out;
    int64_t first_step = 0; // after --load the number the saved run's next step had
    if (o->load_path) {
        if (!load_checkpoint(o, ps, opt, sc)) goto out;
        say_replaced(o, &sp, sc, opt);
        // (a file of an older build has only the optimizer's count, skipped steps left out)
        if (amp_checkpoint_next_step(o->load_path, &first_step) != AMP_OK || first_step < 0)
            first_step = amp_optim_steps(opt);
        amp_ctx_set_step_index(ctx, first_step);
    }
    if (!o->quiet) print_header(o, ps, sc, opt, first_step);

    float first = NAN, last = NAN;
    float scale = amp_scaler_get_scale(sc); // the step's, read again after each update
    int64_t skipped = 0;
    for (int64_t i = 0; i < o->steps; i++) {
        sample_step s = {.ctx = ctx, .opts = o, .index = first_step + i};
        amp_optim_zero_grad(opt);
        amp_autocast_begin(ctx, o->precision != AMP_DTYPE_F32, autocast_dtype, true);
        amp_tensor_t *loss = loss_fn(model, &s); // f32 scalar
        amp_autocast_end(ctx);
        amp_tensor_t *scaled = loss;
        if (o->fault == SAMPLE_FAULT_GRAD_UNDERFLOW) // a mis-normalised loss
            scaled = amp_mul_scalar(ctx, loss, SAMPLE_UNDERFLOW_FACTOR);
        amp_backward(ctx, amp_scaler_scale(sc, ctx, scaled));
        amp_status st = amp_scaler_step(sc, opt, NULL); // skipped or not on the device
        if (st == AMP_OK) st = amp_scaler_update(sc);
        // The step's numbers are read once all of it is queued: on a GPU the one wait of the
        // step comes at its end (a read of the loss before the backward left the GPU idle
        // while the backward's first kernels were launched).
        float value = amp_tensor_item(loss);
        bool was_skipped = st == AMP_OK && amp_scaler_last_found_inf(sc) > 0;
        amp_ctx_step_end(ctx, value);
        amp_ctx_reset(ctx);
        step_free(&s);
        if (!check(o, "GradScaler", st)) goto out;
        skipped += was_skipped;
        if (i == 0) first = value;
        last = value;
        if (!o->quiet) {
            printf("step %lld loss %.4f scale %g skipped %lld\n", (long long)s.index,
                   loss_value(value), (double)scale, (long long)skipped);
            fflush(stdout);
        }
        scale = amp_scaler_get_scale(sc);
    }
    printf("final loss %.4f (from %.4f), skipped %lld of %lld steps\n", loss_value(last),
           loss_value(first), (long long)skipped, (long long)o->steps);
    if (o->save_path &&
        !check(o, "--save", amp_checkpoint_save(o->save_path, ps->t, ps->n, opt, sc)))
        goto out;
    rc = 0;
out:
    amp_optim_free(opt);
    amp_scaler_free(sc);
    return rc;
}
