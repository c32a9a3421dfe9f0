/*
 * store.h — the writing side of the run database (store.c), used by the collector: the schema,
 * one prepared INSERT per table, string interning into StringIds, the indexes built at the end.
 * Also the small string-keyed hash map that the store and the collector use for interning.
 *
 * Every amp_store_* insert binds a decoded record to its statement and steps it; optional
 * fields become NULL by the record's own convention (NULL string, NaN, -1). The caller brackets
 * inserts with amp_store_begin / amp_store_commit.
 */
#ifndef AMP_STORE_IMPL_H
#define AMP_STORE_IMPL_H

#include "amp-record.h"
#include "amp-store.h"

#include <stddef.h>
#include <stdint.h>

// ---------------------------------------------------------------------------------------------
// String -> int64 map (open addressing; keys are copied)

typedef struct amp_strmap {
    struct amp_strmap_slot *slots;
    size_t cap, n; // cap is a power of two
} amp_strmap;

// Returns the value slot of key (len bytes), inserting it with value *inserted_value when absent;
// *found tells which.
int64_t *amp_strmap_get_or_put(amp_strmap *m, const char *key, size_t len, int64_t inserted_value,
                               bool *found);
void amp_strmap_free(amp_strmap *m);

// ---------------------------------------------------------------------------------------------
// The store

typedef struct amp_store amp_store;

// Creates the schema in path (absent or empty). AMP_ERR_IO naming the path on failure.
amp_status amp_store_create(const char *path, amp_store **out);
void amp_store_close(amp_store *s);

amp_status amp_store_begin(amp_store *s);
amp_status amp_store_commit(amp_store *s);
// Ends a transaction that a failed commit left open (a full disk): what it held is dropped.
void amp_store_rollback(amp_store *s);
// Indexes, statistics for the planner, WAL checkpoint: when the run has ended.
amp_status amp_store_finish(amp_store *s);

// The StringIds id of str into *id (inserting it on first use): AMP_ERR_IO when the insert
// fails.
amp_status amp_store_string_id(amp_store *s, const char *str, int64_t *id);

// Each returns AMP_OK or AMP_ERR_IO with SQLite's message.
amp_status amp_store_meta(amp_store *s, int32_t pid, const char *key, const char *value);
amp_status amp_store_process_add(amp_store *s, int32_t pid, int32_t ppid, const char *name,
                                 int64_t start_ns, int64_t *rowid);
amp_status amp_store_process_update(amp_store *s, int64_t rowid, int64_t start_ns, int64_t end_ns,
                                    int64_t records, int64_t bytes, const char *status);
amp_status amp_store_layer(amp_store *s, int32_t pid, const amp_rec_layer *r);
amp_status amp_store_step(amp_store *s, int32_t pid, const amp_rec_step *r);
amp_status amp_store_scale(amp_store *s, int32_t pid, const amp_rec_scale *r); // + AMP_STEPS
amp_status amp_store_tensor_stats(amp_store *s, int32_t pid, const amp_rec_tensor_stats *r);
amp_status amp_store_op(amp_store *s, int32_t pid, const amp_rec_op *r);
// A new AMP_EVENTS row (aggregate or not); *rowid receives its id.
amp_status amp_store_event_insert(amp_store *s, int32_t pid, const amp_rec_event *r, bool aggregate,
                                  int64_t *rowid);
// Adds occurrences to the aggregate row rowid: their latest step, their summed count (-1: none
// known) and their latest value (NaN: none).
amp_status amp_store_event_fold(amp_store *s, int64_t rowid, int64_t occurrences, int64_t last_step,
                                int64_t count, double value);
amp_status amp_store_kernel(amp_store *s, int32_t pid, const amp_rec_kernel *r);
amp_status amp_store_memcpy(amp_store *s, int32_t pid, const amp_rec_memcpy *r);
amp_status amp_store_memset(amp_store *s, int32_t pid, const amp_rec_memset *r);
amp_status amp_store_runtime(amp_store *s, int32_t pid, const amp_rec_runtime *r);
amp_status amp_store_sync(amp_store *s, int32_t pid, const amp_rec_sync *r);
// text_id and domain_id are StringIds ids (0: none), already mapped from the process's own.
amp_status amp_store_nvtx(amp_store *s, int32_t pid, const amp_rec_nvtx *r, int64_t text_id,
                          int64_t domain_id);
amp_status amp_store_gpu_info(amp_store *s, const amp_rec_gpu_info *r);
amp_status amp_store_gpu_metric(amp_store *s, const amp_rec_gpu_metric *r);

// nsys's serialized ids: globalPid = pid << 24, globalTid = globalPid | tid.
static inline int64_t amp_global_pid(int32_t pid) {
    return (int64_t)pid << 24;
}
static inline int64_t amp_global_tid(int32_t pid, int32_t tid) {
    return amp_global_pid(pid) | (tid & 0xFFFFFF);
}

// Base kernel name of a demangled one ("void ns::k<float>(int)" -> "k"), into out (n bytes).
const char *amp_kernel_short_name(const char *demangled, char *out, size_t n);

#endif // AMP_STORE_IMPL_H
