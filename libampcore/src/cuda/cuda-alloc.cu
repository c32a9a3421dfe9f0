/*
 * cuda-alloc.cu — the backend's device memory pool: no cudaMalloc per op.
 *
 * Sizes are rounded (512 B steps up to 1 MiB, 2 MiB steps above) and freed blocks are cached in
 * one stack per rounded size; a training step allocates the same sizes every step, so after the
 * first step every allocation is a cache hit, found in O(1) through two hash tables (size -> bin,
 * pointer -> live block). All work runs on one stream, so a block freed by the host can be handed
 * out again at once: the next user's kernels queue behind the last user's. When cudaMalloc fails
 * the cache is returned to the driver and the allocation retried.
 */
#include "cuda-impl.h"

#include <string.h>

static size_t round_size(size_t n) {
    if (n == 0) n = 1;
    if (n <= (1u << 20)) return (n + 511) & ~(size_t)511;
    return (n + (2u << 20) - 1) & ~(((size_t)2u << 20) - 1);
}

// Fibonacci hashing: the product's high bits, so aligned keys (low bits zero) still spread.
static size_t hash_slot(uint64_t key, size_t cap) {
    int bits = 0;
    while (((size_t)1 << bits) < cap)
        bits++;
    return bits ? (size_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - bits)) : 0;
}

// ---------------------------------------------------------------------------------------------
// Live blocks: pointer -> rounded size

static void live_insert(cuda_pool *p, cuda_block b);

static void live_grow(cuda_pool *p) {
    cuda_block *old = p->live;
    size_t cap = p->cap_live;
    p->cap_live = cap ? cap * 2 : 1024;
    p->live = (cuda_block *)calloc(p->cap_live, sizeof *p->live);
    AMP_ASSERT(p->live != NULL);
    p->n_live = 0;
    for (size_t i = 0; i < cap; i++)
        if (old[i].ptr) live_insert(p, old[i]);
    free(old);
}

static void live_insert(cuda_pool *p, cuda_block b) {
    if ((p->n_live + 1) * 2 > p->cap_live) live_grow(p);
    size_t i = hash_slot((uintptr_t)b.ptr, p->cap_live);
    while (p->live[i].ptr)
        i = (i + 1) & (p->cap_live - 1);
    p->live[i] = b;
    p->n_live++;
}

// Removes ptr's entry (re-inserting the rest of its cluster) and returns it.
static cuda_block live_take(cuda_pool *p, void *ptr) {
    AMP_ASSERT(p->cap_live > 0, "(freeing %p, which the pool never handed out)", ptr);
    size_t i = hash_slot((uintptr_t)ptr, p->cap_live);
    while (p->live[i].ptr != ptr) {
        AMP_ASSERT(p->live[i].ptr != NULL, "(freeing %p, which the pool never handed out)", ptr);
        i = (i + 1) & (p->cap_live - 1);
    }
    cuda_block b = p->live[i];
    p->live[i].ptr = NULL;
    p->n_live--;
    for (size_t j = (i + 1) & (p->cap_live - 1); p->live[j].ptr; j = (j + 1) & (p->cap_live - 1)) {
        cuda_block m = p->live[j];
        p->live[j].ptr = NULL;
        p->n_live--;
        live_insert(p, m);
    }
    return b;
}

// ---------------------------------------------------------------------------------------------
// Free bins: rounded size -> stack of cached blocks

static cuda_bin *bin_find(cuda_pool *p, size_t bytes, bool create);

static void bins_grow(cuda_pool *p) {
    cuda_bin *old = p->bins;
    size_t cap = p->cap_bins;
    p->cap_bins = cap ? cap * 2 : 256;
    p->bins = (cuda_bin *)calloc(p->cap_bins, sizeof *p->bins);
    AMP_ASSERT(p->bins != NULL);
    p->n_bins = 0;
    for (size_t i = 0; i < cap; i++) {
        if (!old[i].bytes) continue;
        *bin_find(p, old[i].bytes, true) = old[i];
    }
    free(old);
}

static cuda_bin *bin_find(cuda_pool *p, size_t bytes, bool create) {
    if (create && (p->n_bins + 1) * 2 > p->cap_bins) bins_grow(p);
    if (!p->cap_bins) return NULL;
    size_t i = hash_slot(bytes, p->cap_bins);
    while (p->bins[i].bytes && p->bins[i].bytes != bytes)
        i = (i + 1) & (p->cap_bins - 1);
    if (p->bins[i].bytes) return &p->bins[i];
    if (!create) return NULL;
    p->bins[i].bytes = bytes;
    p->n_bins++;
    return &p->bins[i];
}

static void free_cache(cuda_pool *p) {
    for (size_t i = 0; i < p->cap_bins; i++) {
        cuda_bin *b = &p->bins[i];
        for (int k = 0; k < b->n; k++)
            CUDA_CHECK(cudaFree(b->ptrs[k]));
        p->reserved_bytes -= (size_t)b->n * b->bytes;
        b->n = 0;
    }
}

// ---------------------------------------------------------------------------------------------

void *cuda_pool_alloc(cuda_pool *p, size_t nbytes) {
    const size_t bytes = round_size(nbytes);
    cuda_block b = {NULL, bytes, (nbytes + 511) & ~(size_t)511};
    cuda_bin *bin = bin_find(p, bytes, false);
    if (bin && bin->n > 0) b.ptr = bin->ptrs[--bin->n];
    if (!b.ptr) {
        cudaError_t e = cudaMalloc(&b.ptr, bytes);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError(); // clear the error before retrying
            CUDA_CHECK(cudaDeviceSynchronize());
            free_cache(p);
            e = cudaMalloc(&b.ptr, bytes);
            if (e == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError();
                return NULL;
            }
        }
        CUDA_CHECK(e);
        p->reserved_bytes += bytes;
    }
    live_insert(p, b);
    p->in_use_bytes += bytes;
    if (p->in_use_bytes > p->peak_bytes) p->peak_bytes = p->in_use_bytes;
    p->in_use_requested += b.requested;
    if (p->in_use_requested > p->peak_requested) p->peak_requested = p->in_use_requested;
    return b.ptr;
}

size_t cuda_pool_free(cuda_pool *p, void *ptr) {
    if (!ptr) return 0;
    cuda_block b = live_take(p, ptr);
    p->in_use_bytes -= b.bytes;
    p->in_use_requested -= b.requested;
    cuda_bin *bin = bin_find(p, b.bytes, true);
    if (bin->n == bin->cap) {
        bin->cap = bin->cap ? 2 * bin->cap : 8;
        bin->ptrs = (void **)realloc(bin->ptrs, (size_t)bin->cap * sizeof *bin->ptrs);
        AMP_ASSERT(bin->ptrs != NULL);
    }
    bin->ptrs[bin->n++] = b.ptr;
    return b.bytes;
}

void cuda_pool_release(cuda_pool *p) {
    free_cache(p);
    for (size_t i = 0; i < p->cap_bins; i++)
        free(p->bins[i].ptrs);
    free(p->bins);
    p->bins = NULL;
    p->cap_bins = p->n_bins = 0;
    for (size_t i = 0; i < p->cap_live; i++) {
        if (!p->live[i].ptr) continue;
        CUDA_CHECK(cudaFree(p->live[i].ptr));
        p->live[i].ptr = NULL;
    }
    free(p->live);
    p->live = NULL;
    p->cap_live = p->n_live = 0;
    p->in_use_bytes = 0;
}
