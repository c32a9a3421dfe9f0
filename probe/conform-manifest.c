/*
 * conform-manifest.c — the key=value manifest of an end-to-end case (e2e_<name>.manifest):
 * model shape, activation, optimizer, autocast precision and GradScaler settings. Absent
 * training settings take torch's defaults (amp_optim_defaults, amp_scaler_defaults, fp16
 * autocast); a key or value this build cannot reproduce makes the case unsupported rather than
 * malformed, so that a newer reference set is reported, not rejected.
 */
#include "conform.h"

#include <math.h>
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

// The keys that take numbers, where they go and what they may hold.
enum num_kind { NUM_SHAPE, NUM_FLOAT, NUM_DOUBLE, NUM_INT };

static bool set_number(struct conform_run *r, const char *name, const struct kv *p,
                       struct conform_manifest *m) {
    const struct {
        const char *key;
        enum num_kind kind;
        void *dst;
        bool scaler;
    } keys[] = {
        {"in", NUM_SHAPE, &m->in, false},
        {"hidden", NUM_SHAPE, &m->hidden, false},
        {"out", NUM_SHAPE, &m->out, false},
        {"batch", NUM_SHAPE, &m->batch, false},
        {"steps", NUM_SHAPE, &m->steps, false},
        {"lr", NUM_DOUBLE, &m->optim.lr, false},
        {"momentum", NUM_DOUBLE, &m->optim.momentum, false},
        {"weight_decay", NUM_DOUBLE, &m->optim.weight_decay, false},
        {"beta1", NUM_DOUBLE, &m->optim.beta1, false},
        {"beta2", NUM_DOUBLE, &m->optim.beta2, false},
        {"eps", NUM_DOUBLE, &m->optim.eps, false},
        {"init_scale", NUM_FLOAT, &m->scaler.init_scale, true},
        {"growth_factor", NUM_DOUBLE, &m->scaler.growth_factor, true},
        {"backoff_factor", NUM_DOUBLE, &m->scaler.backoff_factor, true},
        {"growth_interval", NUM_INT, &m->scaler.growth_interval, true},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(p->key, keys[i].key) != 0) continue;
        long l;
        double d;
        switch (keys[i].kind) {
        case NUM_SHAPE:
            if (!conform_parse_long(p->value, &l) || l <= 0 || l > (1L << 30)) {
                conform_error(r, name, p->line, "%s=%s: expected a positive integer", p->key,
                              p->value);
                return false;
            }
            *(int64_t *)keys[i].dst = l;
            break;
        case NUM_INT:
            if (!conform_parse_long(p->value, &l) || l < -(1L << 30) || l > (1L << 30)) {
                conform_error(r, name, p->line, "%s=%s: expected an integer", p->key, p->value);
                return false;
            }
            *(int *)keys[i].dst = (int)l;
            break;
        case NUM_FLOAT:
        case NUM_DOUBLE:
            if (!conform_parse_double(p->value, &d) || !isfinite(d)) {
                conform_error(r, name, p->line, "%s=%s: expected a finite number", p->key,
                              p->value);
                return false;
            }
            if (keys[i].kind == NUM_FLOAT)
                *(float *)keys[i].dst = (float)d;
            else
                *(double *)keys[i].dst = d;
            break;
        }
        m->scaler_keys |= keys[i].scaler;
        return true;
    }
    unsupported(m, p, "unknown manifest key");
    return true;
}

bool conform_manifest_parse(struct conform_run *r, const char *name, struct conform_manifest *m) {
    struct kv kv[MAX_KEYS];
    int n;
    if (!read_pairs(r, name, kv, &n)) return false;
    *m = (struct conform_manifest){.precision = AMP_DTYPE_F16, .scaler = amp_scaler_defaults()};
    m->scaler.enabled = true;

    // the optimizer first: its defaults are what the other keys override
    const struct kv *p = find(kv, n, "optimizer");
    amp_optim_kind kind = AMP_OPTIM_SGD;
    if (!p) {
        conform_error(r, name, 0, "missing key 'optimizer' (sgd | adam | adamw)");
        return false;
    }
    if (!amp_optim_kind_parse(p->value, &kind)) unsupported(m, p, "unsupported");
    m->optim = amp_optim_defaults(kind);

    for (int i = 0; i < n; i++) {
        p = &kv[i];
        if (strcmp(p->key, "optimizer") == 0) continue;
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
        } else if (!set_number(r, name, p, m)) {
            return false;
        }
    }

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
