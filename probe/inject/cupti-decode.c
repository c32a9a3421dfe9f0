/*
 * cupti-decode.c — CUPTI activity records to ampprobe records (cupti-decode.h).
 *
 * Field by field, CUPTI's CUDA 13.0 record layouts onto the Nsight Systems export columns that
 * amp-record.h describes. Optional fields CUPTI leaves unset become -1 (SQL NULL), never 0:
 * graph node 0 means "not a graph launch", category 0 "no category", event id 0xFFFFFFFF "no
 * event".
 */
#include "cupti-decode.h"

#include <stdio.h>

// A record whose work had finished when CUPTI handed it over.
static bool complete(uint64_t start, uint64_t end) {
    return start > 0 && end >= start && start <= INT64_MAX && end <= INT64_MAX;
}

// The columns every work record (kernel, copy, memset) starts with, from a CUPTI record a.
#define ACTIVITY_HEAD(a)                                                                           \
    .start_ns = (int64_t)(a)->start, .end_ns = (int64_t)(a)->end,                                  \
    .device_id = (int32_t)(a)->deviceId, .context_id = (int32_t)(a)->contextId,                    \
    .stream_id = (int32_t)(a)->streamId, .green_context_id = -1,                                   \
    .correlation_id = (a)->correlationId

static int64_t graph_node(uint64_t id) {
    return id == 0 ? -1 : (int64_t)id;
}

bool amp_capture_decode_kernel(const CUpti_ActivityKernel10 *k, amp_rec_kernel *out) {
    *out = (amp_rec_kernel){
        ACTIVITY_HEAD(k),
        .name = k->name,
        .launch_type = k->launchType,
        .cache_config = k->cacheConfig.config.requested,
        .registers_per_thread = k->registersPerThread,
        .grid_x = k->gridX,
        .grid_y = k->gridY,
        .grid_z = k->gridZ,
        .block_x = k->blockX,
        .block_y = k->blockY,
        .block_z = k->blockZ,
        .static_shared_memory = k->staticSharedMemory,
        .dynamic_shared_memory = k->dynamicSharedMemory,
        .local_memory_per_thread = (int32_t)k->localMemoryPerThread,
        .local_memory_total = (int64_t)k->localMemoryTotal_v2,
        .grid_id = k->gridId,
        .shared_memory_executed = (int32_t)k->sharedMemoryExecuted,
        .shared_memory_limit_config = (int32_t)k->shmemLimitConfig,
        .graph_node_id = graph_node(k->graphNodeId),
    };
    return complete(k->start, k->end);
}

bool amp_capture_decode_memcpy(const CUpti_ActivityMemcpy6 *m, amp_rec_memcpy *out) {
    *out = (amp_rec_memcpy){
        ACTIVITY_HEAD(m),
        .bytes = (int64_t)m->bytes,
        .copy_kind = m->copyKind,
        .src_kind = m->srcKind,
        .dst_kind = m->dstKind,
        .src_device_id = -1, // peer-to-peer copies come as MemcpyPtoP records
        .src_context_id = -1,
        .dst_device_id = -1,
        .dst_context_id = -1,
        .migration_cause = -1,
        .graph_node_id = graph_node(m->graphNodeId),
        .virtual_address = -1,
    };
    return complete(m->start, m->end);
}

bool amp_capture_decode_memset(const CUpti_ActivityMemset4 *m, amp_rec_memset *out) {
    *out = (amp_rec_memset){
        ACTIVITY_HEAD(m),           .value = (int32_t)m->value,
        .bytes = (int64_t)m->bytes, .graph_node_id = graph_node(m->graphNodeId),
        .mem_kind = m->memoryKind,
    };
    return complete(m->start, m->end);
}

bool amp_capture_decode_api(const CUpti_ActivityAPI *a, const char *name, amp_rec_runtime *out) {
    *out = (amp_rec_runtime){
        .start_ns = (int64_t)a->start,
        .end_ns = (int64_t)a->end,
        .driver = a->kind == CUPTI_ACTIVITY_KIND_DRIVER,
        .tid = (int32_t)a->threadId, // a Linux tid: the library sets THREAD_ID_TYPE_SYSTEM
        .correlation_id = a->correlationId,
        .name = name,
        .return_value = (int32_t)a->returnValue,
    };
    return complete(a->start, a->end);
}

bool amp_capture_decode_sync(const CUpti_ActivitySynchronization2 *s, amp_rec_sync *out) {
    *out = (amp_rec_sync){
        .start_ns = (int64_t)s->start,
        .end_ns = (int64_t)s->end,
        .device_id = -1, // not in the record
        .context_id =
            s->contextId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? -1 : (int32_t)s->contextId,
        .stream_id = s->streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? -1 : (int32_t)s->streamId,
        .green_context_id = -1,
        .correlation_id = s->correlationId,
        .sync_type = (int32_t)s->type,
        .event_id =
            s->cudaEventId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? -1 : (int64_t)s->cudaEventId,
    };
    return complete(s->start, s->end);
}

void amp_capture_decode_device(const CUpti_ActivityDevice5 *d, char uuid[AMP_CAPTURE_UUID_LEN],
                               amp_rec_gpu_info *out) {
    const unsigned char *u = (const unsigned char *)d->uuid.bytes;
    snprintf(uuid, AMP_CAPTURE_UUID_LEN,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    *out = (amp_rec_gpu_info){
        .id = (int32_t)d->id,
        .cu_device = (int32_t)d->id,
        .name = d->name,
        .uuid = uuid,
        .is_discrete = -1,
        .l2_cache_size = d->l2CacheSize,
        .total_memory = (int64_t)d->globalMemorySize,
        .memory_bandwidth = (int64_t)d->globalMemoryBandwidth * 1000, // KB/s
        .clock_rate = (int64_t)d->coreClockRate * 1000,               // kHz
        .sm_count = (int32_t)d->numMultiprocessors,
        .compute_major = (int32_t)d->computeCapabilityMajor,
        .compute_minor = (int32_t)d->computeCapabilityMinor,
        .max_threads_per_block = (int32_t)d->maxThreadsPerBlock,
        .max_registers_per_block = (int32_t)d->maxRegistersPerBlock,
        .max_registers_per_sm = (int32_t)d->maxRegistersPerMultiprocessor,
        .max_shmem_per_block = d->maxSharedMemoryPerBlock,
        .max_shmem_per_block_optin = -1,
        .max_shmem_per_sm = d->maxSharedMemoryPerMultiprocessor,
        .threads_per_warp = (int32_t)d->numThreadsPerWarp,
        .async_engines = (int32_t)d->numMemcpyEngines,
        .max_warps_per_sm = (int32_t)d->maxWarpsPerMultiprocessor,
        .max_blocks_per_sm = (int32_t)d->maxBlocksPerMultiprocessor,
    };
}

// ---------------------------------------------------------------------------------------------
// Dispatch

static void count(int64_t *counter, int64_t n) {
    __atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}

void amp_capture_emit(const CUpti_Activity *rec, const amp_capture_names *names,
                      amp_capture_stats *st) {
    bool ok;
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        amp_rec_kernel r;
        ok = amp_capture_decode_kernel((const CUpti_ActivityKernel10 *)rec, &r);
        if (ok) {
            if (r.name) r.demangled = names->demangle(r.name);
            amp_record_kernel(&r);
        }
        count(&st->kernels, ok);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        amp_rec_memcpy r;
        ok = amp_capture_decode_memcpy((const CUpti_ActivityMemcpy6 *)rec, &r);
        if (ok) amp_record_memcpy(&r);
        count(&st->memcpys, ok);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        amp_rec_memset r;
        ok = amp_capture_decode_memset((const CUpti_ActivityMemset4 *)rec, &r);
        if (ok) amp_record_memset(&r);
        count(&st->memsets, ok);
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
        amp_rec_runtime r;
        ok = amp_capture_decode_api(
            a, names->api_name(a->kind == CUPTI_ACTIVITY_KIND_DRIVER, a->cbid), &r);
        if (ok) amp_record_runtime(&r);
        count(&st->api_calls, ok);
        break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        amp_rec_sync r;
        ok = amp_capture_decode_sync((const CUpti_ActivitySynchronization2 *)rec, &r);
        if (ok) amp_record_sync(&r);
        count(&st->syncs, ok);
        break;
    }
    case CUPTI_ACTIVITY_KIND_DEVICE: {
        const CUpti_ActivityDevice5 *d = (const CUpti_ActivityDevice5 *)rec;
        if (!names->describe_device || !names->describe_device(d->id)) {
            char uuid[AMP_CAPTURE_UUID_LEN];
            amp_rec_gpu_info r;
            amp_capture_decode_device(d, uuid, &r);
            amp_record_gpu_info(&r);
        }
        count(&st->devices, 1);
        return;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        const CUpti_ActivityOverhead3 *o = (const CUpti_ActivityOverhead3 *)rec;
        ok = complete(o->start, o->end);
        if (ok) {
            count(&st->overhead_records, 1);
            count(&st->overhead_ns, (int64_t)(o->end - o->start));
        }
        break;
    }
    default:
        count(&st->other, 1);
        return;
    }
    if (!ok) count(&st->incomplete, 1);
}
