/*
 * conform-autocast.c — autocast_dtypes*.txt: the dtype each op returns under CUDA autocast, as
 * decided by amp_autocast_decide from the dtypes of the op's tensor arguments.
 *
 *   # op  in=f32/ac=f16  in=f16/ac=f16  in=f32/ac=bf16  in=bf16/ac=bf16
 *   mm f16 f16 bf16 bf16
 *   bce error error error error
 *
 * One case per op line: every column must match (`error` = PyTorch raised). The columns are the
 * four above unless a `# op in=X/ac=Y ...` comment names others. The arguments of each op are
 * those of the generator's calls (the table below); an op that is not in that table, and whose
 * result under libampcore's policy would depend on arguments we cannot know, is unsupported.
 */
#include "conform.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// The calls that produced the table ("Calls used" in tests/data/golden/README.md), as the dtypes
// of the tensor arguments in call order:
//   T  the tested dtype (the column's in=)       F  fp32
//   H  fp16 whatever the column                  I  an integer tensor (indices, masks), never cast
// Golden names that abbreviate a PyTorch op name the PyTorch name.
static const struct autocast_call {
    const char *op;    // as in the table
    const char *torch; // PyTorch's op name when it differs
    const char *args;
} calls[] = {
    // first operand in the tested dtype, the others fp32
    {"mm", NULL, "TF"},
    {"bmm", NULL, "TF"},
    {"matmul", NULL, "TF"},
    {"linear", NULL, "TFF"},                         // x, weight, bias
    {"addmm", NULL, "TFF"},                          // self, mat1, mat2
    {"baddbmm", NULL, "TFF"},                        // self, batch1, batch2
    {"conv2d", NULL, "TFF"},                         // x, weight, bias
    {"sdpa", "scaled_dot_product_attention", "TFF"}, // q, k, v
    // one tensor argument
    {"softmax", NULL, "T"},
    {"log_softmax", NULL, "T"},
    {"sum", NULL, "T"},
    {"cumsum", NULL, "T"},
    {"prod", NULL, "T"},
    {"norm", NULL, "T"},
    {"exp", NULL, "T"},
    {"log", NULL, "T"},
    {"pow", NULL, "T"}, // scalar exponent
    {"rsqrt", NULL, "T"},
    {"logsumexp", NULL, "T"},
    {"batch_norm", NULL, "T"}, // running stats and weight absent, training mode
    {"relu", NULL, "T"},
    {"gelu", NULL, "T"},
    {"silu", NULL, "T"},
    {"tanh", NULL, "T"},
    {"sigmoid", NULL, "T"},
    {"dropout", NULL, "T"},
    {"max_pool2d", NULL, "T"},
    // normalisation with fp32 weight and bias
    {"layer_norm", NULL, "TFF"},
    {"group_norm", NULL, "TFF"},
    // losses: input tested, target fp32 or class indices
    {"mse_loss", NULL, "TF"},
    {"cross_entropy", NULL, "TI"},
    {"nll_loss", NULL, "TI"},
    {"bce_with_logits", "binary_cross_entropy_with_logits", "TF"},
    {"bce", "binary_cross_entropy", "TF"},
    // self fp32, tensor1 and tensor2 tested
    {"addcdiv", NULL, "FTT"},
    // second operand fp16
    {"cat", NULL, "TH"},
    {"stack", NULL, "TH"},
    {"add", NULL, "TH"},
    {"mul", NULL, "TH"},
    // the floating tensor tested, beside an integer one
    {"embedding", NULL, "IT"},   // indices, weight
    {"masked_fill", NULL, "TI"}, // self, mask
};

#define MAX_COLS 16
#define MAX_ARGS 8

struct column {
    amp_dtype in, ac;
};

static const struct column default_columns[] = {
    {AMP_DTYPE_F32, AMP_DTYPE_F16},
    {AMP_DTYPE_F16, AMP_DTYPE_F16},
    {AMP_DTYPE_F32, AMP_DTYPE_BF16},
    {AMP_DTYPE_BF16, AMP_DTYPE_BF16},
};

// The argument roles of op's call (and its PyTorch name in *torch); NULL, with *why, when the
// call is unknown. An op outside the table is called with its first operand alone where
// libampcore's policy makes the result independent of the others (the cast-all policies,
// fp32_set_opt_dtype and fp32_append_dtype look at the first only, banned raises).
static const char *call_args(const char *op, const char **torch, const char **why) {
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        if (strcmp(op, calls[i].op) == 0) {
            *torch = calls[i].torch ? calls[i].torch : op;
            return calls[i].args;
        }
    }
    *torch = op;
    amp_cast_policy p = amp_autocast_policy(op);
    switch (p) {
    case AMP_POLICY_LOWER_PRECISION_FP:
    case AMP_POLICY_FP32:
    case AMP_POLICY_FP32_SET_OPT_DTYPE:
    case AMP_POLICY_FP32_APPEND_DTYPE:
    case AMP_POLICY_BANNED:
        return "T";
    case AMP_POLICY_NATIVE:
        *why = "not in libampcore's autocast lists (native type promotion), and conform does "
               "not know the generator's call";
        return NULL;
    case AMP_POLICY_PROMOTE:
        *why = "libampcore promotes it, so the result depends on the other arguments of the "
               "generator's call, which conform does not know";
        return NULL;
    }
    *why = "unknown autocast policy";
    return NULL;
}

static amp_dtype arg_dtype(char role, amp_dtype tested) {
    switch (role) {
    case 'T':
        return tested;
    case 'H':
        return AMP_DTYPE_F16;
    case 'I':
        return AMP_DTYPE_I64;
    default:
        return AMP_DTYPE_F32;
    }
}

// "f16", "error", or the status for what amp_autocast_decide answered.
static const char *decision_name(amp_status st, amp_dtype out) {
    if (st == AMP_OK) return amp_dtype_name(out);
    if (st == AMP_ERR_AUTOCAST_BANNED || st == AMP_ERR_AUTOCAST_DTYPE) return "error";
    return amp_status_name(st);
}

// amp_autocast_decide for one column (run under conform_guarded)
struct decide_job {
    const char *torch, *args;
    struct column col;
    amp_status status;
    amp_dtype out;
};

static void run_decide(void *arg) {
    struct decide_job *j = arg;
    int n = (int)strlen(j->args);
    amp_dtype in[MAX_ARGS];
    for (int i = 0; i < n; i++)
        in[i] = arg_dtype(j->args[i], j->col.in);
    j->status = amp_autocast_decide(j->torch, n, in, j->col.ac, &j->out);
}

static void check_op(struct conform_run *r, const char *file, const char *op,
                     const struct column *cols, int ncols, const char *const *want) {
    const char *torch, *why = NULL;
    const char *args = call_args(op, &torch, &why);
    if (!args) {
        conform_unsupported(r, file, op, "unsupported op %s: %s", torch, why);
        return;
    }
    for (int c = 0; c < ncols; c++) {
        struct decide_job j = {.torch = torch, .args = args, .col = cols[c]};
        char msg[1024];
        if (!conform_guarded(run_decide, &j, msg, sizeof msg)) {
            conform_fail(r, file, op, "in=%s/ac=%s: libampcore aborted: %s",
                         amp_dtype_name(cols[c].in), amp_dtype_name(cols[c].ac), msg);
            return;
        }
        const char *got = decision_name(j.status, j.out);
        if (strcmp(got, want[c]) != 0) {
            conform_fail(r, file, op, "in=%s/ac=%s: %s, expected %s%s%s",
                         amp_dtype_name(cols[c].in), amp_dtype_name(cols[c].ac), got, want[c],
                         j.status == AMP_OK ? "" : " - ",
                         j.status == AMP_OK ? "" : amp_last_error());
            return;
        }
    }
    if (strcmp(torch, op) != 0)
        conform_pass(r, file, op, "(PyTorch's %s)", torch);
    else
        conform_pass(r, file, op, "%s", "");
}

// A `# op in=X/ac=Y ...` comment: the columns of the lines that follow. false when the comment
// is something else.
static bool parse_columns(const struct conform_text *t, struct column *cols, int *ncols) {
    if (t->ntok < 2 || t->ntok - 1 > MAX_COLS || strcmp(t->tok[0], "op") != 0) return false;
    for (int i = 1; i < t->ntok; i++) {
        char in[16], ac[16], rest;
        if (sscanf(t->tok[i], "in=%15[^/]/ac=%15s%c", in, ac, &rest) != 2 ||
            !amp_dtype_parse(in, &cols[i - 1].in) || !amp_dtype_parse(ac, &cols[i - 1].ac))
            return false;
    }
    *ncols = t->ntok - 1;
    return true;
}

void conform_autocast_file(struct conform_run *r, const char *name) {
    struct conform_text t;
    if (!conform_text_open(&t, r, name)) return;
    struct column cols[MAX_COLS];
    int ncols = (int)(sizeof default_columns / sizeof default_columns[0]);
    memcpy(cols, default_columns, sizeof default_columns);
    while (conform_text_next(&t)) {
        if (t.is_comment) {
            struct column named[MAX_COLS];
            int n;
            if (parse_columns(&t, named, &n)) {
                memcpy(cols, named, sizeof named);
                ncols = n;
            }
            continue;
        }
        if (t.ntok != ncols + 1) {
            conform_error(r, name, t.lineno, "expected 'op' and %d results, got %d fields", ncols,
                          t.ntok);
            break;
        }
        const char *want[MAX_COLS];
        int c = 0;
        for (amp_dtype dt; c < ncols; c++) {
            const char *tok = t.tok[c + 1];
            if (strcmp(tok, "error") == 0)
                want[c] = "error";
            else if (amp_dtype_parse(tok, &dt))
                want[c] = amp_dtype_name(dt);
            else
                break;
        }
        if (c < ncols) {
            conform_error(r, name, t.lineno, "'%s' is neither a dtype nor 'error'", t.tok[c + 1]);
            break;
        }
        check_op(r, name, t.tok[0], cols, ncols, want);
    }
    // only a file without any record: a malformed one was reported above
    conform_text_had_records(r, &t, "'op' and its results");
    conform_text_close(&t);
}
