/*
 * conform-manifest.c — the key=value manifest of an end-to-end case (e2e_<name>.manifest):
 * model shape, activation, optimizer, autocast precision and GradScaler settings. Absent
 * training settings take torch's defaults (amp_optim_defaults, amp_scaler_defaults, fp16
 * autocast). A value of a known key that names a feature this build lacks (optimizer=rmsprop,
 * act=silu) makes the case unsupported rather than malformed, so that a newer reference set is
 * reported, not rejected; a key the format does not have, a word that names nothing torch has
 * (optimizer=sdg), or a number libampcore's constructors refuse (growth_factor=0.5), makes the
 * manifest malformed.
 */
#include "conform.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define MAX_KEYS 64

struct kv {
    char key[32];
    char value[128];
    int line;
};

// The manifest's records as key=value pairs (blanks around '=' allowed); false when malformed.
static bool read_pairs(struct conform_run *r, const char *name, struct kv *kv, int *n) {
    struct conform_text t;
    if (!conform_text_open(&t, r, name)) return false;
    bool ok = true;
    *n = 0;
    while (ok && conform_text_next_record(&t)) {
        char joined[192] = "";
        bool split = false; // a blank not next to '=' ("in = 1 2" is no "in=12")
        for (int i = 0; i < t.ntok; i++) {
            const char *prev = i > 0 ? t.tok[i - 1] : "=";
            split |= prev[strlen(prev) - 1] != '=' && t.tok[i][0] != '=';
            strncat(joined, t.tok[i], sizeof joined - strlen(joined) - 1);
        }
        char *eq = strchr(joined, '=');
        if (!eq || eq == joined || !eq[1] || split) {
            conform_error(r, name, t.lineno, "expected key=value%s",
                          split && eq ? " (blanks only around '=')" : "");
            ok = false;
            break;
        }
        *eq = '\0';
        if (strlen(joined) >= sizeof kv->key || strlen(eq + 1) >= sizeof kv->value) {
            conform_error(r, name, t.lineno, "key or value too long");
            ok = false;
        } else if (*n == MAX_KEYS) {
            conform_error(r, name, t.lineno, "more than %d keys", MAX_KEYS);
            ok = false;
        }
        for (int i = 0; ok && i < *n; i++) {
            if (strcmp(kv[i].key, joined) == 0) {
                conform_error(r, name, t.lineno, "key '%s' repeats line %d", joined, kv[i].line);
                ok = false;
            }
        }
        if (ok) {
            snprintf(kv[*n].key, sizeof kv->key, "%.31s", joined);
            snprintf(kv[*n].value, sizeof kv->value, "%.127s", eq + 1);
            kv[(*n)++].line = t.lineno;
        }
    }
    if (ok) ok = conform_text_had_records(r, &t, "key=value lines");
    conform_text_close(&t);
    return ok;
}

static const struct kv *find(const struct kv *kv, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(kv[i].key, key) == 0) return &kv[i];
    return NULL;
}

static void unsupported(struct conform_manifest *m, const struct kv *p, const char *what) {
    if (!m->unsupported[0])
        snprintf(m->unsupported, sizeof m->unsupported, "%s %s=%s (line %d)", what, p->key,
                 p->value, p->line);
}

// ---------------------------------------------------------------------------------------------
// The keys (tests/data/golden/README.md names them all): four take words, the rest numbers.

static const char *const word_keys[] = {"name", "optimizer", "act", "precision"};

enum num_kind { NUM_SHAPE, NUM_FLOAT, NUM_DOUBLE, NUM_INT };
// The constructor that takes a setting, and refuses what torch's refuses.
enum num_api { API_NONE, API_OPTIM, API_SCALER };

#define SHAPE_MAX (1L << 30) // each shape key; their products are checked apart
#define INT_MAX_ABS (1L << 30)

static const struct number_key {
    const char *key;
    enum num_kind kind;
    size_t offset; // of the value in struct conform_manifest
    enum num_api api;
} number_keys[] = {
#define AT(field) offsetof(struct conform_manifest, field)
    {"in", NUM_SHAPE, AT(in), API_NONE},
    {"hidden", NUM_SHAPE, AT(hidden), API_NONE},
    {"out", NUM_SHAPE, AT(out), API_NONE},
    {"batch", NUM_SHAPE, AT(batch), API_NONE},
    {"steps", NUM_SHAPE, AT(steps), API_NONE},
    {"lr", NUM_DOUBLE, AT(optim.lr), API_OPTIM},
    {"momentum", NUM_DOUBLE, AT(optim.momentum), API_OPTIM},
    {"weight_decay", NUM_DOUBLE, AT(optim.weight_decay), API_OPTIM},
    {"beta1", NUM_DOUBLE, AT(optim.beta1), API_OPTIM},
    {"beta2", NUM_DOUBLE, AT(optim.beta2), API_OPTIM},
    {"eps", NUM_DOUBLE, AT(optim.eps), API_OPTIM},
    {"init_scale", NUM_FLOAT, AT(scaler.init_scale), API_SCALER},
    {"growth_factor", NUM_DOUBLE, AT(scaler.growth_factor), API_SCALER},
    {"backoff_factor", NUM_DOUBLE, AT(scaler.backoff_factor), API_SCALER},
    {"growth_interval", NUM_INT, AT(scaler.growth_interval), API_SCALER},
#undef AT
};

static const struct number_key *find_number_key(const char *key) {
    for (size_t i = 0; i < sizeof number_keys / sizeof number_keys[0]; i++)
        if (strcmp(key, number_keys[i].key) == 0) return &number_keys[i];
    return NULL;
}

static bool is_word_key(const char *key) {
    for (size_t i = 0; i < sizeof word_keys / sizeof word_keys[0]; i++)
        if (strcmp(key, word_keys[i]) == 0) return true;
    return false;
}

// The words a word key takes: those this build runs, then those torch has and this build
// lacks (a newer reference set may use them: unsupported). Any other word is a typo.
static const struct word_values {
    const char *key, *runs, *torch_has;
} word_values[] = {
    {"optimizer", "sgd adam adamw",
     "adadelta adafactor adagrad adamax asgd lbfgs nadam radam rmsprop rprop sparseadam"},
    {"act", "relu gelu gelu_tanh",
     "relu6 leaky_relu elu selu celu silu mish glu prelu rrelu tanh sigmoid hardtanh hardswish "
     "hardsigmoid hardshrink softshrink tanhshrink softplus softsign logsigmoid threshold"},
    {"precision", "fp16 bf16",
     "f16 float16 half bfloat16 f32 fp32 float32 float tf32 fp64 float64 double fp8 fp8_e4m3 "
     "fp8_e5m2 float8_e4m3fn float8_e5m2"},
};

// Whether word is one of the blank-separated words of list.
static bool word_in(const char *word, const char *list) {
    size_t n = strlen(word);
    for (const char *w = list; *w; w += strcspn(w, " "), w += *w == ' ') {
        size_t len = strcspn(w, " ");
        if (len == n && strncmp(w, word, n) == 0) return true;
    }
    return false;
}

// The edit distance between a and b (insertions, deletions, substitutions and swaps of two
// neighbours), at most 3: enough to tell a typo from another word.
static int edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 31 || nb > 31) return 3;
    int d[32][32];
    for (size_t i = 0; i <= na; i++)
        for (size_t j = 0; j <= nb; j++) {
            if (i == 0 || j == 0) {
                d[i][j] = (int)(i + j);
                continue;
            }
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb] < 3 ? d[na][nb] : 3;
}

// A word value that names nothing torch has is a malformed manifest (optimizer=sdg would
// otherwise be an unsupported case, and conform would pass with the case unrun).
static bool check_word(struct conform_run *r, const char *name, const struct kv *p) {
    for (size_t i = 0; i < sizeof word_values / sizeof word_values[0]; i++) {
        const struct word_values *v = &word_values[i];
        if (strcmp(p->key, v->key) != 0) continue;
        if (word_in(p->value, v->runs) || word_in(p->value, v->torch_has)) return true;
        char near[64] = "";
        int best = 3;
        for (const char *w = v->runs; *w; w += strcspn(w, " "), w += *w == ' ') {
            char word[32];
            snprintf(word, sizeof word, "%.*s", (int)strcspn(w, " "), w);
            int d = edit_distance(p->value, word);
            if (d < best && d <= 2) {
                best = d;
                snprintf(near, sizeof near, "; did you mean %s?", word);
            }
        }
        conform_error(r, name, p->line, "%s=%s: no such %s in torch (%s: %s%s)", p->key, p->value,
                      p->key, "this build runs", v->runs, near);
        return false;
    }
    return true;
}

// A key the format does not have is a malformed manifest, not an unsupported case: a typo
// (bogus_key=1 where name=mlp_sgd was) would otherwise pass unnoticed as "unsupported".
static bool check_key(struct conform_run *r, const char *name, const struct kv *p) {
    if (is_word_key(p->key)) return check_word(r, name, p);
    if (find_number_key(p->key)) return true;
    char keys[512] = "";
    for (size_t i = 0; i < sizeof word_keys / sizeof word_keys[0]; i++)
        snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", i ? " " : "",
                 word_keys[i]);
    for (size_t i = 0; i < sizeof number_keys / sizeof number_keys[0]; i++)
        snprintf(keys + strlen(keys), sizeof keys - strlen(keys), " %s", number_keys[i].key);
    conform_error(r, name, p->line, "unknown key '%s' (the keys: %s)", p->key, keys);
    return false;
}

// p's value as an integer from lo to hi into *out; false (error reported) when it is not one.
static bool parse_int(struct conform_run *r, const char *name, const struct kv *p, long lo, long hi,
                      long *out) {
    const char *s = p->value, *digits = s + (s[0] == '+' || s[0] == '-');
    const char *expected = lo > 0 ? "expected a positive integer" : "expected an integer";
    if (!digits[0] || digits[strspn(digits, "0123456789")]) {
        conform_error(r, name, p->line, "%s=%s: %s", p->key, s, expected);
        return false;
    }
    long v;
    bool in_long = conform_parse_long(s, &v); // all digits: false only beyond a long's range
    if (in_long ? v > hi : s[0] != '-') {
        conform_error(r, name, p->line, "%s=%s: too large (at most %ld)", p->key, s, hi);
        return false;
    }
    if (!in_long || v < lo) {
        if (lo > 0)
            conform_error(r, name, p->line, "%s=%s: %s", p->key, s, expected);
        else
            conform_error(r, name, p->line, "%s=%s: too small (at least %ld)", p->key, s, lo);
        return false;
    }
    *out = v;
    return true;
}

// Sets the number key p names; false (error reported) when its value does not parse or is out
// of range.
static bool set_number(struct conform_run *r, const char *name, const struct kv *p,
                       const struct number_key *k, struct conform_manifest *m) {
    void *dst = (char *)m + k->offset;
    long l;
    double d;
    switch (k->kind) {
    case NUM_SHAPE:
        if (!parse_int(r, name, p, 1, SHAPE_MAX, &l)) return false;
        *(int64_t *)dst = l;
        break;
    case NUM_INT:
        if (!parse_int(r, name, p, -INT_MAX_ABS, INT_MAX_ABS, &l)) return false;
        *(int *)dst = (int)l;
        break;
    case NUM_FLOAT:
    case NUM_DOUBLE:
        if (!conform_parse_double(p->value, &d) || !isfinite(d)) {
            conform_error(r, name, p->line, "%s=%s: expected a finite number", p->key, p->value);
            return false;
        }
        if (k->kind == NUM_FLOAT)
            *(float *)dst = (float)d;
        else
            *(double *)dst = d;
        break;
    }
    m->scaler_keys |= k->api == API_SCALER;
    return true;
}

// What amp_optim_new needs besides the settings: a context and a parameter, made once.
struct api_probe {
    amp_ctx_t *ctx;
    amp_tensor_t *param;
};

// Whether libampcore takes the settings as they are after p, as amp_optim_new or amp_scaler_new
// will when the case runs; false (error reported at p) when it refuses them. Asked after each
// key in turn, so that the refusal names the key that brought it: a value torch's constructors
// refuse is a malformed manifest, not a conformance failure.
static bool api_accepts(struct conform_run *r, const char *name, const struct kv *p,
                        enum num_api api, const struct conform_manifest *m,
                        struct api_probe *probe) {
    const char *call;
    amp_status st;
    if (api == API_SCALER) {
        call = "amp_scaler_new";
        amp_scaler_t *sc;
        st = amp_scaler_new(&m->scaler, &sc);
        amp_scaler_free(sc);
    } else {
        call = "amp_optim_new";
        if (!probe->ctx) {
            if (amp_ctx_new(AMP_DEVICE_CPU, 0, &probe->ctx) != AMP_OK) return true; // the run says
            probe->param = amp_tensor_new(probe->ctx, AMP_DTYPE_F32, 1, (int64_t[]){1});
            amp_tensor_set_requires_grad(probe->param, true);
        }
        amp_optim_t *opt;
        st = amp_optim_new(probe->ctx, &m->optim, &probe->param, 1, &opt);
        amp_optim_free(opt);
    }
    if (st == AMP_OK) return true;
    conform_error(r, name, p->line, "%s=%s: %s refuses it: %s", p->key, p->value, call,
                  amp_last_error());
    return false;
}

// Sets the word key p names (a value this build lacks makes the case unsupported).
static void set_word(const struct kv *p, struct conform_manifest *m) {
    if (strcmp(p->key, "name") == 0) {
        snprintf(m->name, sizeof m->name, "%s", p->value);
    } else if (strcmp(p->key, "act") == 0) {
        if (strcmp(p->value, "relu") == 0)
            m->act = CONFORM_ACT_RELU;
        else if (strcmp(p->value, "gelu") == 0)
            m->act = CONFORM_ACT_GELU;
        else if (strcmp(p->value, "gelu_tanh") == 0)
            m->act = CONFORM_ACT_GELU_TANH;
        else
            unsupported(m, p, "unsupported");
    } else if (strcmp(p->key, "precision") == 0) {
        if (!amp_dtype_parse(p->value, &m->precision) ||
            (m->precision != AMP_DTYPE_F16 && m->precision != AMP_DTYPE_BF16))
            unsupported(m, p, "unsupported");
    }
}

// Every key but optimizer (set already), in the file's order; false (error reported) when one
// is malformed.
static bool set_keys(struct conform_run *r, const char *name, const struct kv *kv, int n,
                     bool optim_known, struct conform_manifest *m) {
    struct api_probe probe = {0};
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        const struct kv *p = &kv[i];
        const struct number_key *k = find_number_key(p->key);
        if (!k) {
            set_word(p, m);
            continue;
        }
        ok = set_number(r, name, p, k, m);
        // (an optimizer this build lacks has no constructor to ask)
        if (ok && (k->api == API_SCALER || (k->api == API_OPTIM && optim_known)))
            ok = api_accepts(r, name, p, k->api, m, &probe);
    }
    amp_ctx_free(probe.ctx);
    return ok;
}

bool conform_manifest_parse(struct conform_run *r, const char *name, struct conform_manifest *m) {
    struct kv kv[MAX_KEYS];
    int n;
    if (!read_pairs(r, name, kv, &n)) return false;
    *m = (struct conform_manifest){.precision = AMP_DTYPE_F16, .scaler = amp_scaler_defaults()};
    m->scaler.enabled = true;
    for (int i = 0; i < n; i++)
        if (!check_key(r, name, &kv[i])) return false;

    // the optimizer first: its defaults are what the other keys override
    const struct kv *p = find(kv, n, "optimizer");
    amp_optim_kind kind = AMP_OPTIM_SGD;
    if (!p) {
        conform_error(r, name, 0, "missing key 'optimizer' (sgd | adam | adamw)");
        return false;
    }
    bool optim_known = amp_optim_kind_parse(p->value, &kind);
    if (!optim_known) unsupported(m, p, "unsupported");
    m->optim = amp_optim_defaults(kind);
    if (!set_keys(r, name, kv, n, optim_known, m)) return false;

    static const char *const required[] = {"in", "hidden", "out", "batch", "steps", "act"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        if (!find(kv, n, required[i])) {
            conform_error(r, name, 0, "missing key '%s'", required[i]);
            return false;
        }
    }
    // X holds steps x batch x in floats: a count whose bytes overflow is no file (and the
    // product of three shapes up to 2^30 overflows int64 where the case computes it)
    int64_t values;
    if (__builtin_mul_overflow(m->steps * m->batch, m->in, &values) || values > INT64_MAX / 4) {
        conform_error(r, name, 0, "steps x batch x in = %lld x %lld x %lld: too many values",
                      (long long)m->steps, (long long)m->batch, (long long)m->in);
        return false;
    }
    return true;
}
