/*
 * record-codec.c — encodes and decodes spool records (format in record-codec.h), and names the
 * record enums as the database spells them.
 *
 * Each record type is described once, as the list of its struct's fields (width and offset);
 * encoding (with its size computation) and decoding walk that list, so the writer and the collector
 * cannot disagree about a layout. Appending a field to a struct (and to its list here) is a new
 * version of that record: older readers skip the extra bytes, and this reader decodes an older
 * version's record with the fields it lacks zeroed (rec_desc.n_v1: the fields of version 1).
 */
#include "record-codec.h"

#include "amp-impl.h"

#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(amp_rec_type) == 4 && sizeof(amp_stats_kind) == 4 && sizeof(amp_phase) == 4 &&
                   sizeof(amp_severity) == 4 && sizeof(amp_nvtx_type) == 4 &&
                   sizeof(amp_nvtx_payload) == 4,
               "enum fields are encoded as 4 bytes");

// ---------------------------------------------------------------------------------------------
// Field lists

typedef enum field_kind { F1, F4, F8, FSTR } field_kind; // bool, 4 bytes, 8 bytes, string

typedef struct field {
    uint8_t kind;
    uint16_t offset;
} field;

typedef struct rec_desc {
    uint16_t version;
    uint16_t n_fields;
    const field *fields;
    uint16_t n_v1; // fields of the record's version 1; those after it may be absent (zeroed)
} rec_desc;

// clang-format off
#define I4(T, m) {F4, offsetof(T, m)}
#define I8(T, m) {F8, offsetof(T, m)}
#define B1(T, m) {F1, offsetof(T, m)}
#define STR(T, m) {FSTR, offsetof(T, m)}
// clang-format on

static const field meta_fields[] = {STR(amp_rec_meta, key), STR(amp_rec_meta, value)};

static const field layer_fields[] = {I4(amp_rec_layer, id), I4(amp_rec_layer, parent_id),
                                     STR(amp_rec_layer, name)};

static const field step_fields[] = {
    I8(amp_rec_step, step),      I8(amp_rec_step, start_ns),
    I8(amp_rec_step, end_ns),    I8(amp_rec_step, loss),
    I8(amp_rec_step, grad_norm), I8(amp_rec_step, mem_peak_bytes)}; // version 2
#define STEP_V1_FIELDS 5                                            // version 1 ended at grad_norm

static const field scale_fields[] = {
    I8(amp_rec_scale, step),      I8(amp_rec_scale, scale_before),   I8(amp_rec_scale, scale_after),
    I4(amp_rec_scale, found_inf), I4(amp_rec_scale, growth_tracker), B1(amp_rec_scale, skipped)};

#define TS amp_rec_tensor_stats
static const field tensor_stats_fields[] = {
    I8(TS, step),     I4(TS, layer_id),      STR(TS, op),         I4(TS, kind),
    STR(TS, dtype),   STR(TS, target_dtype), I8(TS, numel),       I8(TS, min),
    I8(TS, max),      I8(TS, amax),          I8(TS, n_nan),       I8(TS, n_posinf),
    I8(TS, n_neginf), I8(TS, n_overflow),    I8(TS, n_underflow), I8(TS, n_zero)};
#undef TS

static const field op_fields[] = {
    I8(amp_rec_op, step),    I4(amp_rec_op, layer_id),   STR(amp_rec_op, op),
    I4(amp_rec_op, phase),   STR(amp_rec_op, in_dtypes), STR(amp_rec_op, out_dtype),
    STR(amp_rec_op, policy), STR(amp_rec_op, shapes),    I8(amp_rec_op, flops),
    I8(amp_rec_op, bytes),   I8(amp_rec_op, start_ns),   I8(amp_rec_op, end_ns)};

static const field event_fields[] = {
    I8(amp_rec_event, step),  I4(amp_rec_event, layer_id), STR(amp_rec_event, op),
    I4(amp_rec_event, phase), STR(amp_rec_event, kind),    I4(amp_rec_event, severity),
    I8(amp_rec_event, count), I8(amp_rec_event, value),    STR(amp_rec_event, detail)};

static const field string_fields[] = {I8(amp_rec_string, id), STR(amp_rec_string, value)};

#define K amp_rec_kernel
static const field kernel_fields[] = {I8(K, start_ns),
                                      I8(K, end_ns),
                                      I4(K, device_id),
                                      I4(K, context_id),
                                      I4(K, stream_id),
                                      I4(K, green_context_id),
                                      I8(K, correlation_id),
                                      STR(K, name),
                                      STR(K, demangled),
                                      STR(K, short_name),
                                      I4(K, launch_type),
                                      I4(K, cache_config),
                                      I4(K, registers_per_thread),
                                      I4(K, grid_x),
                                      I4(K, grid_y),
                                      I4(K, grid_z),
                                      I4(K, block_x),
                                      I4(K, block_y),
                                      I4(K, block_z),
                                      I4(K, static_shared_memory),
                                      I4(K, dynamic_shared_memory),
                                      I4(K, local_memory_per_thread),
                                      I8(K, local_memory_total),
                                      I8(K, grid_id),
                                      I4(K, shared_memory_executed),
                                      I4(K, shared_memory_limit_config),
                                      I8(K, graph_node_id)};
#undef K

#define M amp_rec_memcpy
static const field memcpy_fields[] = {
    I8(M, start_ns),       I8(M, end_ns),           I4(M, device_id),      I4(M, context_id),
    I4(M, stream_id),      I4(M, green_context_id), I8(M, correlation_id), I8(M, bytes),
    I4(M, copy_kind),      I4(M, src_kind),         I4(M, dst_kind),       I4(M, src_device_id),
    I4(M, src_context_id), I4(M, dst_device_id),    I4(M, dst_context_id), I4(M, migration_cause),
    I8(M, graph_node_id),  I8(M, virtual_address)};
#undef M

#define S amp_rec_memset
static const field memset_fields[] = {
    I8(S, start_ns),  I8(S, end_ns),           I4(S, device_id),      I4(S, context_id),
    I4(S, stream_id), I4(S, green_context_id), I8(S, correlation_id), I4(S, value),
    I8(S, bytes),     I8(S, graph_node_id),    I4(S, mem_kind)};
#undef S

static const field runtime_fields[] = {
    I8(amp_rec_runtime, start_ns),       I8(amp_rec_runtime, end_ns),
    B1(amp_rec_runtime, driver),         I4(amp_rec_runtime, tid),
    I8(amp_rec_runtime, correlation_id), STR(amp_rec_runtime, name),
    I4(amp_rec_runtime, return_value)};

static const field sync_fields[] = {
    I8(amp_rec_sync, start_ns),       I8(amp_rec_sync, end_ns),
    I4(amp_rec_sync, device_id),      I4(amp_rec_sync, context_id),
    I4(amp_rec_sync, stream_id),      I4(amp_rec_sync, green_context_id),
    I8(amp_rec_sync, correlation_id), I4(amp_rec_sync, sync_type),
    I8(amp_rec_sync, event_id)};

#define N amp_rec_nvtx
static const field nvtx_fields[] = {
    I8(N, start_ns), I8(N, end_ns),       I4(N, type),    I8(N, range_id),  I8(N, category),
    I8(N, color),    STR(N, text),        I8(N, text_id), I8(N, domain_id), I4(N, tid),
    I4(N, end_tid),  I4(N, payload_type), I8(N, payload)};
#undef N

#define G amp_rec_gpu_info
static const field gpu_info_fields[] = {I4(G, id),
                                        I4(G, cu_device),
                                        STR(G, name),
                                        STR(G, bus_location),
                                        STR(G, uuid),
                                        STR(G, chip_name),
                                        I4(G, is_discrete),
                                        I8(G, l2_cache_size),
                                        I8(G, total_memory),
                                        I8(G, memory_bandwidth),
                                        I8(G, clock_rate),
                                        I4(G, sm_count),
                                        I4(G, compute_major),
                                        I4(G, compute_minor),
                                        I4(G, max_threads_per_block),
                                        I4(G, max_registers_per_block),
                                        I4(G, max_registers_per_sm),
                                        I8(G, max_shmem_per_block),
                                        I8(G, max_shmem_per_block_optin),
                                        I8(G, max_shmem_per_sm),
                                        I4(G, threads_per_warp),
                                        I4(G, async_engines),
                                        I4(G, max_warps_per_sm),
                                        I4(G, max_blocks_per_sm)};
#undef G

#define GM amp_rec_gpu_metric
static const field gpu_metric_fields[] = {I4(GM, device_id), I8(GM, start_ns), I8(GM, end_ns),
                                          STR(GM, metric), I8(GM, value)};
#undef GM

#define N_OF(list) (uint16_t)(sizeof list / sizeof list[0])
#define DESC(list)                                                                                 \
    { 1, N_OF(list), list, N_OF(list) }

static const rec_desc *desc_of(uint16_t type) {
    static const rec_desc meta = DESC(meta_fields), layer = DESC(layer_fields),
                          step = {2, N_OF(step_fields), step_fields, STEP_V1_FIELDS},
                          scale = DESC(scale_fields), stats = DESC(tensor_stats_fields),
                          op = DESC(op_fields), event = DESC(event_fields),
                          string = DESC(string_fields), kernel = DESC(kernel_fields),
                          memcpy_ = DESC(memcpy_fields), memset_ = DESC(memset_fields),
                          runtime = DESC(runtime_fields), sync = DESC(sync_fields),
                          nvtx = DESC(nvtx_fields), gpu = DESC(gpu_info_fields),
                          gpu_metric = DESC(gpu_metric_fields);
    switch ((amp_rec_type)type) {
    case AMP_REC_META:
        return &meta;
    case AMP_REC_LAYER:
        return &layer;
    case AMP_REC_STEP:
        return &step;
    case AMP_REC_SCALE:
        return &scale;
    case AMP_REC_TENSOR_STATS:
        return &stats;
    case AMP_REC_OP:
        return &op;
    case AMP_REC_EVENT:
        return &event;
    case AMP_REC_STRING:
        return &string;
    case AMP_REC_KERNEL:
        return &kernel;
    case AMP_REC_MEMCPY:
        return &memcpy_;
    case AMP_REC_MEMSET:
        return &memset_;
    case AMP_REC_RUNTIME:
        return &runtime;
    case AMP_REC_SYNC:
        return &sync;
    case AMP_REC_NVTX:
        return &nvtx;
    case AMP_REC_GPU_INFO:
        return &gpu;
    case AMP_REC_GPU_METRIC:
        return &gpu_metric;
    }
    return NULL;
}

bool amp_rec_type_known(uint16_t t) {
    return desc_of(t) != NULL;
}

// ---------------------------------------------------------------------------------------------
// Encoding

// How many bytes of str a record keeps: all of them, or at most AMP_REC_STR_MAX, cut before the
// UTF-8 character that would not fit whole (a lead byte and its 0x80..0xBF continuation bytes,
// four bytes at most), so that a cut string is still valid UTF-8 when it was.
static uint32_t str_cut(const char *str) {
    return (uint32_t)amp_utf8_cut(str, strnlen(str, AMP_REC_STR_MAX));
}

size_t amp_rec_encode(amp_rec_type type, const void *rec, uint8_t *out, size_t cap) {
    const rec_desc *d = desc_of(type);
    AMP_ASSERT(d, "record type %d", (int)type);
    const char *base = rec;
    size_t n = AMP_REC_HEADER_BYTES; // bytes so far; written only while they fit
    for (int i = 0; i < d->n_fields; i++) {
        const field *f = &d->fields[i];
        const void *src = base + f->offset;
        switch ((field_kind)f->kind) {
        case F1:
            if (n + 1 <= cap) out[n] = *(const bool *)src ? 1 : 0;
            n += 1;
            break;
        case F4:
            if (n + 4 <= cap) memcpy(out + n, src, 4);
            n += 4;
            break;
        case F8:
            if (n + 8 <= cap) memcpy(out + n, src, 8);
            n += 8;
            break;
        case FSTR: {
            const char *str = *(const char *const *)src;
            uint32_t len = str ? str_cut(str) : UINT32_MAX;
            size_t size = 4 + (str ? (size_t)len + 1 : 0);
            if (n + size <= cap) {
                memcpy(out + n, &len, 4);
                if (str) {
                    memcpy(out + n + 4, str, len);
                    out[n + 4 + len] = 0;
                }
            }
            n += size;
            break;
        }
        }
    }
    if (n <= cap) {
        uint16_t t = (uint16_t)type, version = d->version;
        uint32_t length = (uint32_t)(n - AMP_REC_HEADER_BYTES);
        memcpy(out, &t, 2);
        memcpy(out + 2, &version, 2);
        memcpy(out + 4, &length, 4);
    }
    return n;
}

// ---------------------------------------------------------------------------------------------
// Decoding

amp_scan amp_rec_scan(const uint8_t *buf, size_t n, amp_rec_header *hdr, const uint8_t **payload) {
    if (n < AMP_REC_HEADER_BYTES) return AMP_SCAN_PARTIAL;
    memcpy(&hdr->type, buf, 2);
    memcpy(&hdr->version, buf + 2, 2);
    memcpy(&hdr->length, buf + 4, 4);
    if (hdr->type == 0 || hdr->version == 0 || hdr->length > AMP_REC_MAX_BYTES)
        return AMP_SCAN_CORRUPT;
    if (n - AMP_REC_HEADER_BYTES < hdr->length) return AMP_SCAN_PARTIAL;
    *payload = buf + AMP_REC_HEADER_BYTES;
    return AMP_SCAN_RECORD;
}

bool amp_rec_decode(uint16_t type, const uint8_t *payload, uint32_t length, amp_rec_any *out) {
    const rec_desc *d = desc_of(type);
    if (!d) return false;
    char *base = (char *)out;
    const uint8_t *p = payload, *end = payload + length;
    for (int i = 0; i < d->n_fields; i++) {
        const field *f = &d->fields[i];
        if (p == end && i >= d->n_v1) { // an older version's record: the rest is not there
            static const size_t width[] = {[F1] = 1, [F4] = 4, [F8] = 8, [FSTR] = sizeof(char *)};
            for (; i < d->n_fields; i++)
                memset(base + d->fields[i].offset, 0, width[d->fields[i].kind]);
            break;
        }
        switch ((field_kind)f->kind) {
        case F1:
            if (end - p < 1) return false;
            *(bool *)(base + f->offset) = *p++ != 0;
            break;
        case F4:
            if (end - p < 4) return false;
            memcpy(base + f->offset, p, 4), p += 4;
            break;
        case F8:
            if (end - p < 8) return false;
            memcpy(base + f->offset, p, 8), p += 8;
            break;
        case FSTR: {
            uint32_t n;
            if (end - p < 4) return false;
            memcpy(&n, p, 4), p += 4;
            const char **dst = (const char **)(base + f->offset);
            if (n == UINT32_MAX) {
                *dst = NULL;
                break;
            }
            if ((size_t)(end - p) < (size_t)n + 1 || p[n] != 0) return false;
            *dst = (const char *)p;
            p += n + 1;
            break;
        }
        }
    }
    return true; // bytes after the known fields belong to a newer version
}

// ---------------------------------------------------------------------------------------------
// Text names of the enums (the database stores these)

const char *amp_stats_kind_name(amp_stats_kind k) {
    switch (k) {
    case AMP_STATS_ACTIVATION:
        return "activation";
    case AMP_STATS_ACTIVATION_GRAD:
        return "activation_grad";
    case AMP_STATS_WEIGHT:
        return "weight";
    case AMP_STATS_WEIGHT_GRAD:
        return "weight_grad";
    case AMP_STATS_WEIGHT_UPDATE:
        return "weight_update";
    }
    return "unknown";
}

const char *amp_phase_name(amp_phase p) {
    switch (p) {
    case AMP_PHASE_NONE:
        return NULL;
    case AMP_PHASE_FWD:
        return "fwd";
    case AMP_PHASE_BWD:
        return "bwd";
    case AMP_PHASE_OPTIM:
        return "optim";
    }
    return NULL;
}

const char *amp_severity_name(amp_severity s) {
    switch (s) {
    case AMP_SEVERITY_INFO:
        return "info";
    case AMP_SEVERITY_WARNING:
        return "warning";
    case AMP_SEVERITY_ERROR:
        return "error";
    }
    return "unknown";
}

// ---------------------------------------------------------------------------------------------
// Spool file header

void amp_spool_header_init(amp_spool_header *h, int32_t pid, int32_t ppid, int64_t start_ns,
                           const char *comm) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, AMP_SPOOL_MAGIC, 8);
    h->version = AMP_SPOOL_VERSION;
    h->header_bytes = sizeof *h;
    h->byte_order = AMP_SPOOL_BYTE_ORDER;
    h->pid = pid;
    h->ppid = ppid;
    h->start_ns = start_ns;
    if (comm) strncpy(h->comm, comm, sizeof h->comm - 1);
}

amp_status amp_spool_header_check(const amp_spool_header *h) {
    if (memcmp(h->magic, AMP_SPOOL_MAGIC, 8) != 0)
        return amp_set_error(AMP_ERR_CORRUPT, "not an ampprobe spool file (bad magic)");
    if (h->byte_order != AMP_SPOOL_BYTE_ORDER)
        return amp_set_error(AMP_ERR_UNSUPPORTED, "spool file written with another byte order");
    if (h->version != AMP_SPOOL_VERSION)
        return amp_set_error(AMP_ERR_UNSUPPORTED,
                             "spool format version %u (this build reads version %u)",
                             (unsigned)h->version, (unsigned)AMP_SPOOL_VERSION);
    if (h->header_bytes < sizeof *h)
        return amp_set_error(AMP_ERR_CORRUPT, "spool header of %u bytes is too short",
                             (unsigned)h->header_bytes);
    // (pid 0 would be the run's own rows in the database: META's run-wide keys)
    if (h->pid <= 0)
        return amp_set_error(AMP_ERR_CORRUPT, "spool header names pid %d, not a process",
                             (int)h->pid);
    return AMP_OK;
}
