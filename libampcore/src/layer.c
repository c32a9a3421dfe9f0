/*
 * layer.c — named layers (the module tree). amp_layer_begin() enters a child of the current
 * layer; every op made inside records the innermost layer's id, so statistics and events name
 * "blocks.1.attn.qkv". Qualified names are registered once per context and keep their id.
 */
#include "amp-impl.h"

#include <stdarg.h>
#include <string.h>

// Id of the qualified name, registering it (with its parent) when new.
static int32_t layer_intern(amp_ctx_t *ctx, const char *qualname, int32_t parent) {
    for (int32_t i = 0; i < ctx->n_layers; i++)
        if (strcmp(ctx->layer_names[i], qualname) == 0) return i;
    if (ctx->n_layers == ctx->cap_layers) {
        ctx->cap_layers = ctx->cap_layers ? ctx->cap_layers * 2 : 64;
        ctx->layer_names = amp_xrealloc(ctx->layer_names, (size_t)ctx->cap_layers * sizeof(char *));
        ctx->layer_parent =
            amp_xrealloc(ctx->layer_parent, (size_t)ctx->cap_layers * sizeof(int32_t));
    }
    ctx->layer_names[ctx->n_layers] = amp_xstrdup(qualname);
    ctx->layer_parent[ctx->n_layers] = parent;
    return ctx->n_layers++;
}

void amp_layer_begin(amp_ctx_t *ctx, const char *name) {
    AMP_ASSERT(ctx->layer_depth < AMP_LAYER_DEPTH_MAX, "(layers nested deeper than %d)",
               AMP_LAYER_DEPTH_MAX);
    AMP_ASSERT(name && *name, "(a layer needs a name)");
    int32_t parent = amp_ctx_current_layer(ctx);
    // the qualified name whole, however long (cut, two layers would become one)
    const char *up = parent >= 0 ? ctx->layer_names[parent] : "";
    char *buf = amp_xmalloc(strlen(up) + strlen(name) + 2);
    sprintf(buf, "%s%s%s", up, *up ? "." : "", name);
    ctx->layer_stack[ctx->layer_depth++] = layer_intern(ctx, buf, parent);
    if (ctx->nvtx) amp_nvtx_push(buf);
    free(buf);
    amp_instr_work_begins(ctx);
}

void amp_layer_beginf(amp_ctx_t *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    AMP_ASSERT(n >= 0, "(amp_layer_beginf: the format '%s' fails)", fmt);
    char *name = amp_xmalloc((size_t)n + 1); // (whole: see amp_layer_begin)
    va_start(ap, fmt);
    vsnprintf(name, (size_t)n + 1, fmt, ap);
    va_end(ap);
    amp_layer_begin(ctx, name);
    free(name);
}

void amp_layer_end(amp_ctx_t *ctx) {
    AMP_ASSERT(ctx->layer_depth > 0, "(amp_layer_end without amp_layer_begin)");
    ctx->layer_depth--;
    if (ctx->nvtx) amp_nvtx_pop();
}

const char *amp_layer_current(const amp_ctx_t *ctx) {
    int32_t id = amp_ctx_current_layer(ctx);
    return id >= 0 ? ctx->layer_names[id] : "";
}
