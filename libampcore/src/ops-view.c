/*
 * ops-view.c — ops that change how storage is seen, not what it holds: reshape, transpose,
 * permute, split, expand (broadcast), contiguous and the dtype cast. Their backward passes put
 * the gradient back into the input's shape.
 */
#include "amp-impl.h"

#include <limits.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Helpers shared by the ops (declared in amp-impl.h)

amp_tensor_t *amp_dense(amp_ctx_t *ctx, amp_tensor_t *x) {
    AMP_ASSERT(!x->buf || x->buf->data, "(an op reads a tensor whose storage was dropped with "
                                        "amp_tensor_drop)");
    if (amp_tensor_is_contiguous(x)) return x;
    amp_tensor_t *c = amp_scratch_new(ctx, x->dtype, x->ndim, x->shape);
    ctx->be->copy(ctx->bctx, c, x);
    if (x->buf) { // (what it copied, for the backward's check of a write to the view)
        c->copy_of = x->buf;
        x->buf->refcount++;
        c->copy_of_version = x->buf->version;
    }
    c->inf_fill = x->inf_fill; // the same values: the instrumentation's numbers are x's
    c->stat_epoch = x->stat_epoch;
    c->stat_entry = x->stat_entry;
    return c;
}

amp_tensor_t *amp_expand(amp_ctx_t *ctx, amp_tensor_t *x, int ndim, const int64_t *shape) {
    AMP_ASSERT(ndim >= x->ndim);
    int64_t stride[AMP_MAX_DIMS];
    int lead = ndim - x->ndim;
    for (int i = 0; i < ndim; i++) {
        if (i < lead) {
            stride[i] = 0;
            continue;
        }
        int64_t d = x->shape[i - lead];
        AMP_ASSERT(d == shape[i] || d == 1, "(cannot broadcast dim %d of size %lld to %lld)", i,
                   (long long)d, (long long)shape[i]);
        stride[i] = d == shape[i] ? x->stride[i - lead] : 0;
    }
    return amp_view_new(ctx, x, ndim, shape, stride, x->offset);
}

bool amp_broadcast_shape(const amp_tensor_t *a, const amp_tensor_t *b, int *ndim, int64_t *shape) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        shape[i] = da == 1 ? db : da;
    }
    *ndim = n;
    return true;
}

amp_tensor_t *amp_sum_to(amp_ctx_t *ctx, amp_tensor_t *g, int ndim, const int64_t *shape) {
    if (g->ndim == ndim && memcmp(g->shape, shape, (size_t)ndim * sizeof *shape) == 0) return g;
    int64_t keep[AMP_MAX_DIMS]; // shape padded to g's rank, 1 where summed
    int lead = g->ndim - ndim;
    AMP_ASSERT(lead >= 0);
    for (int i = 0; i < g->ndim; i++)
        keep[i] = i < lead ? 1 : shape[i - lead];
    amp_tensor_t *gd = amp_dense(ctx, g);
    amp_tensor_t *r = amp_scratch_new(ctx, g->dtype, g->ndim, keep);
    ctx->be->reduce_sum(ctx->bctx, r, gd, 1.0f);
    int64_t stride[AMP_MAX_DIMS];
    amp_contiguous_strides(ndim, shape, stride);
    return amp_view_new(ctx, r, ndim, shape, stride, r->offset);
}

// A view that copies x's bookkeeping for autograd (what every view op returns).
static amp_tensor_t *view_of(amp_ctx_t *ctx, amp_tensor_t *x, int ndim, const int64_t *shape,
                             const int64_t *stride, int64_t offset) {
    return amp_view_new(ctx, x, ndim, shape, stride, offset);
}

// ---------------------------------------------------------------------------------------------
// reshape

static void reshape_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0];
    int64_t stride[AMP_MAX_DIMS];
    amp_contiguous_strides(x->ndim, x->shape, stride);
    amp_tensor_t *d = amp_dense(ctx, dy);
    amp_grad_accumulate_last(ctx, x, amp_view_new(ctx, d, x->ndim, x->shape, stride, d->offset),
                             dy);
}

// The strides that show x's elements in shape (ndim dims, as many elements) without a copy, as
// PyTorch's computeStride finds them: x's dims fall into chunks that are contiguous among
// themselves (each dim's stride is the next one's times its size), and shape must split each
// chunk into dims of its own. False when it cannot (a transposed x made flat), or x is empty.
static bool view_strides(const amp_tensor_t *x, int ndim, const int64_t *shape, int64_t *stride) {
    if (amp_tensor_is_contiguous(x)) {
        amp_contiguous_strides(ndim, shape, stride);
        return true;
    }
    if (x->ndim == 0 || amp_tensor_numel(x) == 0) return false;
    int view_d = ndim - 1;
    int64_t chunk_stride = x->stride[x->ndim - 1], chunk_numel = 1, view_numel = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        chunk_numel *= x->shape[d];
        if (d > 0 && (x->shape[d - 1] == 1 || x->stride[d - 1] == chunk_numel * chunk_stride))
            continue; // the chunk goes on into dim d - 1
        while (view_d >= 0 && (view_numel < chunk_numel || shape[view_d] == 1)) {
            stride[view_d] = view_numel * chunk_stride;
            view_numel *= shape[view_d--];
        }
        if (view_numel != chunk_numel) return false;
        if (d > 0) {
            chunk_stride = x->stride[d - 1];
            chunk_numel = view_numel = 1;
        }
    }
    return view_d == -1;
}

amp_tensor_t *amp_reshape(amp_ctx_t *ctx, amp_tensor_t *x, int ndim, const int64_t *shape) {
    AMP_ASSERT(ndim >= 0 && ndim <= AMP_MAX_DIMS);
    int64_t s[AMP_MAX_DIMS] = {0}, known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1) {
            AMP_ASSERT(infer < 0, "(only one dimension can be inferred)");
            infer = i;
            s[i] = 1; // until inferred
        }
    }
    amp_check_shape(x->dtype, ndim, s); // (so the product below does not overflow)
    for (int i = 0; i < ndim; i++)
        known *= s[i];
    int64_t numel = amp_tensor_numel(x);
    if (infer >= 0) {
        AMP_ASSERT(known > 0 && numel % known == 0, "(cannot reshape %lld elements)",
                   (long long)numel);
        s[infer] = numel / known;
        known *= s[infer];
    }
    AMP_ASSERT(known == numel, "(shape does not match %lld elements)", (long long)numel);
    // a view of x, as PyTorch's reshape gives where it can, else of a dense copy
    int64_t stride[AMP_MAX_DIMS];
    amp_tensor_t *d = x;
    if (!view_strides(x, ndim, s, stride)) {
        d = amp_dense(ctx, x);
        amp_contiguous_strides(ndim, s, stride);
    }
    amp_tensor_t *y = view_of(ctx, d, ndim, s, stride, d->offset);
    amp_node *n = amp_node_record(ctx, "reshape", reshape_backward, y, &x, 1);
    if (n) n->reads = 0;
    return y;
}

// ---------------------------------------------------------------------------------------------
// permute / transpose

static void permute_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    int inv[AMP_MAX_DIMS];
    for (int i = 0; i < dy->ndim; i++)
        inv[n->i[0] >> (4 * i) & 0xF] = i;
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    for (int i = 0; i < dy->ndim; i++) {
        shape[i] = dy->shape[inv[i]];
        stride[i] = dy->stride[inv[i]];
    }
    amp_tensor_t *v = amp_view_new(ctx, dy, dy->ndim, shape, stride, dy->offset);
    amp_grad_accumulate(ctx, n->in[0], v);
}

amp_tensor_t *amp_permute(amp_ctx_t *ctx, amp_tensor_t *x, const int *perm) {
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS], packed = 0;
    unsigned seen = 0;
    for (int i = 0; i < x->ndim; i++) {
        int p = perm[i] < 0 ? perm[i] + x->ndim : perm[i];
        AMP_ASSERT(p >= 0 && p < x->ndim && !(seen & (1u << p)), "(bad permutation)");
        seen |= 1u << p;
        shape[i] = x->shape[p];
        stride[i] = x->stride[p];
        packed |= (int64_t)p << (4 * i);
    }
    amp_tensor_t *y = view_of(ctx, x, x->ndim, shape, stride, x->offset);
    amp_node *n = amp_node_record(ctx, "permute", permute_backward, y, &x, 1);
    if (n) {
        n->i[0] = packed;
        n->reads = 0;
    }
    return y;
}

amp_tensor_t *amp_transpose(amp_ctx_t *ctx, amp_tensor_t *x, int d0, int d1) {
    int perm[AMP_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        perm[i] = i;
    if (d0 < 0) d0 += x->ndim;
    if (d1 < 0) d1 += x->ndim;
    AMP_ASSERT(d0 >= 0 && d0 < x->ndim && d1 >= 0 && d1 < x->ndim, "(transpose dims)");
    perm[d0] = d1;
    perm[d1] = d0;
    return amp_permute(ctx, x, perm);
}

// ---------------------------------------------------------------------------------------------
// split: the gradient of each piece is added into its slice of the input's gradient.

static void split_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_grad_accumulate_slice(ctx, n->in[0], dy, (int)n->i[0], n->i[1]);
}

int amp_split(amp_ctx_t *ctx, amp_tensor_t *x, int64_t size, int dim, amp_tensor_t **out, int max) {
    if (dim < 0) dim += x->ndim;
    AMP_ASSERT(dim >= 0 && dim < x->ndim && size > 0, "(split dim %d size %lld)", dim,
               (long long)size);
    // torch.split's chunks: ceil(len / size), and one empty chunk of a dim of length 0
    const int64_t len = x->shape[dim], chunks = len ? (len + size - 1) / size : 1;
    AMP_ASSERT(chunks <= INT_MAX, "(split of %lld into %lld chunks)", (long long)len,
               (long long)chunks);
    int count = 0;
    for (int64_t start = 0; count < chunks && count < max; start += size) {
        int64_t shape[AMP_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        shape[dim] = start + size <= x->shape[dim] ? size : x->shape[dim] - start;
        amp_tensor_t *y =
            view_of(ctx, x, x->ndim, shape, x->stride, x->offset + start * x->stride[dim]);
        amp_node *n = amp_node_record(ctx, "split", split_backward, y, &x, 1);
        if (n) {
            n->i[0] = dim;
            n->i[1] = start;
            n->reads = 0;
        }
        out[count++] = y;
    }
    return (int)chunks;
}

// ---------------------------------------------------------------------------------------------
// contiguous and casts

static void identity_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_grad_accumulate_last(ctx, n->in[0], dy, dy); // accumulation casts to the input's dtype
}

amp_tensor_t *amp_contiguous(amp_ctx_t *ctx, amp_tensor_t *x) {
    if (amp_tensor_is_contiguous(x)) return x;
    amp_tensor_t *y = amp_scratch_new(ctx, x->dtype, x->ndim, x->shape);
    ctx->be->copy(ctx->bctx, y, x);
    amp_node *n = amp_node_record(ctx, "contiguous", identity_backward, y, &x, 1);
    if (n) n->reads = 0;
    return y;
}

// The cast of x into y: copied unless y holds the values already (no kernel then, and the
// statistics of y, when wanted, come from a launch of their own).
static amp_tensor_t *cast_into(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *y, bool copy) {
    AMP_ASSERT(!x->buf || x->buf->data, "(a cast (amp_to, or autocast's) reads a tensor whose "
                                        "storage was dropped with amp_tensor_drop)");
    if (copy) amp_instr_input(ctx, x);
    amp_instr_arm(ctx, y);
    if (copy) ctx->be->copy(ctx->bctx, y, x);
    amp_node *n = amp_node_record(ctx, "to", identity_backward, y, &x, 1);
    if (n) n->reads = 0;
    amp_instr_op(ctx, "to", AMP_POLICY_NATIVE, y, &x, 1);
    return y;
}

amp_tensor_t *amp_cast(amp_ctx_t *ctx, amp_tensor_t *x, amp_dtype t) {
    if (x->dtype == t) return x;
    return cast_into(ctx, x, amp_scratch_new(ctx, t, x->ndim, x->shape), true);
}

amp_tensor_t *amp_cast_made(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *y) {
    AMP_ASSERT(y->dtype != x->dtype && amp_same_shape(x, y));
    return cast_into(ctx, x, y, false);
}

amp_tensor_t *amp_to(amp_ctx_t *ctx, amp_tensor_t *x, amp_dtype t) {
    if (amp_dtype_is_float(t)) return amp_cast(ctx, x, t);
    // An integer result is not differentiable (PyTorch's x.to(torch.int32) has no grad_fn): it
    // goes on no tape and requires no grad, and no gradient flows back through it.
    const bool grad = amp_set_grad_enabled(ctx, false);
    amp_tensor_t *y = amp_cast(ctx, x, t);
    amp_set_grad_enabled(ctx, grad);
    return y;
}
