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
    for (int i = 0; i < n_in; i++) needs |= in[i] && in[i]->requires_grad;
    if (!needs) return NULL;
    amp_node *n = amp_xcalloc(1, sizeof *n);
    n->op = op;
    n->backward = bw;
    n->reads = AMP_READS_ALL;
    n->out = out;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
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
        amp_node_check_reads(n);
        n->backward(ctx, n, dy);
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
