/*
 * autograd.c — the tape and reverse-mode differentiation. Every op that has an input requiring
 * grad appends a node; amp_backward() walks the tape backwards, handing each node the gradient
 * of its output. Backward runs with recording and autocast off, under the layer of the forward
 * op, so the ops it calls are attributed to the right layer.
 */
#include "amp-impl.h"

amp_node *amp_node_record(amp_ctx_t *ctx, const char *op, amp_backward_fn bw, amp_tensor_t *out,
                          amp_tensor_t *const *in, int n_in) {
    AMP_ASSERT(n_in <= AMP_NODE_MAX_IN);
    for (int i = 0; i < n_in; i++)
        AMP_ASSERT(!in[i] || !in[i]->buf || in[i]->buf->data,
                   "(%s reads input %d, whose storage was dropped with amp_tensor_drop)", op, i);
    out->layer = amp_ctx_current_layer(ctx);
    if (!ctx->grad_enabled) return NULL;
    bool needs = false;
    for (int i = 0; i < n_in; i++)
        needs |= in[i] && in[i]->requires_grad;
    if (!needs) return NULL;
    amp_node *n = amp_xcalloc(1, sizeof *n);
    n->op = op;
    n->backward = bw;
    n->reads = AMP_READS_ALL;
    n->out = out;
    n->out_version = out->buf->version;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = in[i];
        n->in_version[i] = in[i] && in[i]->buf ? in[i]->buf->version : 0;
    }
    n->layer = out->layer;
    out->node = n;
    out->requires_grad = true;
    if (ctx->n_tape == ctx->cap_tape) {
        ctx->cap_tape = ctx->cap_tape ? ctx->cap_tape * 2 : 256;
        ctx->tape = amp_xrealloc(ctx->tape, ctx->cap_tape * sizeof *ctx->tape);
    }
    ctx->tape[ctx->n_tape++] = n;
    return n;
}

// PyTorch's check of a saved variable: t, which the backward of n reads, must hold what it held
// when n was recorded (version: its storage's version then).
static void check_version(const amp_node *n, const amp_tensor_t *t, uint32_t version) {
    if (!t || !t->buf) return;
    uint32_t now = t->buf->version;
    if (now == version && t->copy_of) // a copy amp_dense made of a view: the view's storage
        now = t->copy_of->version, version = t->copy_of_version; // (PyTorch saves the view)
    if (now == version) return;
    char s[AMP_SHAPE_STR_MAX];
    amp_abort(__FILE__, __LINE__,
              "one of the variables needed for gradient computation has been modified by an "
              "inplace operation: [%s %s] is at version %u; expected version %u instead (the "
              "backward of %s reads it)",
              amp_dtype_name(t->dtype), amp_shape_str(t, s, sizeof s), (unsigned)now,
              (unsigned)version, n->op);
}

// Only what the backward reads is checked, as PyTorch checks only what a node saved: an add's
// operands may change once it has run.
static void check_versions(const amp_node *n) {
    for (int i = 0; i < n->n_in; i++)
        if (n->reads & AMP_READS_IN(i)) check_version(n, n->in[i], n->in_version[i]);
    if (n->reads & AMP_READS_OUT) check_version(n, n->out, n->out_version);
    for (int i = 0; i < AMP_NODE_MAX_IN; i++)
        if (n->reads & AMP_READS_SAVED(i)) check_version(n, n->saved[i], n->saved_version[i]);
}

bool amp_set_grad_enabled(amp_ctx_t *ctx, bool enabled) {
    bool old = ctx->grad_enabled;
    ctx->grad_enabled = enabled;
    return old;
}

void amp_backward(amp_ctx_t *ctx, amp_tensor_t *loss) {
    AMP_ASSERT(amp_tensor_numel(loss) == 1, "(backward() needs a scalar, got %lld elements)",
               (long long)amp_tensor_numel(loss));
    AMP_ASSERT(loss->requires_grad,
               "(element 0 of tensors does not require grad and does not have a grad_fn)");
    AMP_ASSERT(!ctx->in_backward, "(backward() called from inside backward)");
    amp_tensor_t *seed = amp_scratch_new(ctx, loss->dtype, loss->ndim, loss->shape);
    if (ctx->nvtx) amp_nvtx_push("backward");
    ctx->be->fill(ctx->bctx, seed, 1.0f);
    if (ctx->nvtx) amp_nvtx_pop();
    amp_grad_accumulate(ctx, loss, seed);
    amp_backward_count_dropped(ctx);

    bool grad_enabled = ctx->grad_enabled, ac_enabled = ctx->ac.enabled;
    int depth = ctx->layer_depth;
    int32_t top = depth > 0 ? ctx->layer_stack[0] : -1;
    ctx->grad_enabled = false;
    ctx->ac.enabled = false;
    ctx->in_backward = true;
    for (size_t i = ctx->n_tape; i-- > 0;) {
        amp_node *n = ctx->tape[i];
        amp_tensor_t *dy = n->out->grad;
        if (!dy) continue;
        ctx->layer_stack[0] = n->layer;
        ctx->layer_depth = n->layer >= 0 ? 1 : 0;
        size_t mark = ctx->n_scratch;
        if (ctx->instr) amp_instr_backward_node(ctx, n, dy);
        if (ctx->nvtx) { // "blocks.1.attn/linear": the kernels below belong to this layer and op
            char name[320];
            snprintf(name, sizeof name, "%s/%s", n->layer >= 0 ? ctx->layer_names[n->layer] : "",
                     n->op);
            amp_nvtx_push(name);
        }
        if (n->consumed)
            amp_abort(__FILE__, __LINE__,
                      "Trying to backward through the graph a second time: the backward of %s "
                      "has run and freed what it saved (libampcore has no retain_graph: run the "
                      "forward again)",
                      n->op);
        check_versions(n);
        n->backward(ctx, n, dy);
        n->consumed = n->reads != 0;
        if (ctx->nvtx) amp_nvtx_pop();
        amp_node_release_dropped(ctx, n); // what the program dropped and no later node reads
        // Consumed: a later backward must not propagate it again, and its memory and the node's
        // temporaries go now rather than at amp_ctx_reset (peak memory).
        n->out->grad = NULL;
        amp_scratch_release_from(ctx, mark);
        if (!n->out->persistent) amp_tensor_release_storage(dy);
    }
    if (ctx->instr) amp_instr_backward_end(ctx);
    ctx->layer_stack[0] = top;
    ctx->layer_depth = depth;
    ctx->in_backward = false;
    ctx->ac.enabled = ac_enabled;
    ctx->grad_enabled = grad_enabled;
}
