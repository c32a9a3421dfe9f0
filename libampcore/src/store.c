/*
 * store.c — the run database: schema (probe/SCHEMA.md documents it column by column), prepared
 * inserts (the many-row tables' 64 rows a statement), StringIds interning, end-of-run indexes,
 * and the checked read-only open for readers.
 *
 * The nsys-named tables copy the column names and order of an `nsys export --type sqlite`
 * (schema 3.16) so that queries written for nsys exports run here; the AMP_* tables and META are
 * ours. During the run the tables have no secondary indexes (inserts stay cheap); they are built
 * by amp_store_finish, which also turns the file back from WAL into a plain single-file database.
 */
#include "store.h"

#include "amp-impl.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define AMP_APPLICATION_ID 0x414D5050 // "AMPP" in the SQLite header: an ampprobe database

// ---------------------------------------------------------------------------------------------
// String map

struct amp_strmap_slot {
    char *key; // NULL: empty
    size_t len;
    uint64_t hash;
    int64_t value;
};

static uint64_t hash_bytes(const char *p, size_t n) { // 8 bytes a step, multiply-xorshift mixing
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

static void strmap_grow(amp_strmap *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    struct amp_strmap_slot *slots = amp_xcalloc(cap, sizeof *slots);
    for (size_t i = 0; i < m->cap; i++) {
        struct amp_strmap_slot *o = &m->slots[i];
        if (!o->key) continue;
        size_t j = o->hash & (cap - 1);
        while (slots[j].key)
            j = (j + 1) & (cap - 1);
        slots[j] = *o;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
}

int64_t *amp_strmap_get_or_put(amp_strmap *m, const char *key, size_t len, int64_t inserted_value,
                               bool *found) {
    if ((m->n + 1) * 4 > m->cap * 3) strmap_grow(m);
    uint64_t h = hash_bytes(key, len);
    size_t j = h & (m->cap - 1);
    for (;; j = (j + 1) & (m->cap - 1)) {
        struct amp_strmap_slot *s = &m->slots[j];
        if (!s->key) break;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            *found = true;
            return &s->value;
        }
    }
    struct amp_strmap_slot *s = &m->slots[j];
    s->key = amp_xmalloc(len + 1);
    memcpy(s->key, key, len);
    s->key[len] = 0;
    s->len = len;
    s->hash = h;
    s->value = inserted_value;
    m->n++;
    *found = false;
    return &s->value;
}

void amp_strmap_free(amp_strmap *m) {
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------------------------------------
// Schema

static const char schema_sql[] =
    "CREATE TABLE META (\n"
    "  key TEXT NOT NULL, value TEXT, pid INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key, pid));\n"
    "CREATE TABLE AMP_PROCESSES (\n"
    "  pid INTEGER NOT NULL, ppid INTEGER, globalPid INTEGER NOT NULL, name TEXT,\n"
    "  start_ns INTEGER, end_ns INTEGER, records INTEGER NOT NULL DEFAULT 0,\n"
    "  bytes INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL);\n"
    "CREATE VIEW PROCESSES AS SELECT globalPid, pid, name FROM AMP_PROCESSES;\n"
    "CREATE TABLE AMP_LAYERS (\n"
    "  pid INTEGER NOT NULL, id INTEGER NOT NULL, parent_id INTEGER, name TEXT NOT NULL,\n"
    "  PRIMARY KEY (pid, id));\n"
    "CREATE TABLE AMP_STEPS (\n"
    "  pid INTEGER NOT NULL, step INTEGER NOT NULL, start_ns INTEGER, end_ns INTEGER,\n"
    "  loss REAL, loss_finite INTEGER, grad_norm REAL, scale_before REAL, scale_after REAL,\n"
    "  found_inf INTEGER, skipped INTEGER, mem_peak_bytes INTEGER, PRIMARY KEY (pid, step));\n"
    "CREATE TABLE AMP_SCALE (\n"
    "  pid INTEGER NOT NULL, step INTEGER NOT NULL, scale_before REAL, scale_after REAL,\n"
    "  found_inf INTEGER, growth_tracker INTEGER, skipped INTEGER NOT NULL);\n"
    "CREATE TABLE AMP_TENSOR_STATS (\n"
    "  pid INTEGER NOT NULL, step INTEGER NOT NULL, layer_id INTEGER, op TEXT,\n"
    "  kind TEXT NOT NULL, dtype TEXT, target_dtype TEXT, numel INTEGER, min REAL, max REAL,\n"
    "  amax REAL, n_nan INTEGER, n_posinf INTEGER, n_neginf INTEGER, n_overflow INTEGER,\n"
    "  n_underflow INTEGER, n_zero INTEGER);\n"
    "CREATE TABLE AMP_OPS (\n"
    "  pid INTEGER NOT NULL, step INTEGER NOT NULL, layer_id INTEGER, op TEXT NOT NULL,\n"
    "  phase TEXT, in_dtypes TEXT, out_dtype TEXT, policy TEXT, shapes TEXT, flops INTEGER,\n"
    "  bytes INTEGER, start_ns INTEGER, end_ns INTEGER);\n"
    "CREATE TABLE AMP_EVENTS (\n"
    "  id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, step INTEGER, layer_id INTEGER, op TEXT,\n"
    "  phase TEXT, kind TEXT NOT NULL, severity TEXT NOT NULL, count INTEGER, value REAL,\n"
    "  detail TEXT, aggregate INTEGER NOT NULL, occurrences INTEGER NOT NULL,\n"
    "  last_step INTEGER);\n"
    // ---- nsys export names (schema 3.16)
    "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);\n"
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (\n"
    "  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,\n"
    "  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,\n"
    "  correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,\n"
    "  shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER,\n"
    "  registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,\n"
    "  gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,\n"
    "  blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,\n"
    "  dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,\n"
    "  localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER,\n"
    "  graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);\n"
    "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (\n"
    "  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,\n"
    "  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,\n"
    "  correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT "
    "NULL,\n"
    "  deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER,\n"
    "  srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER,\n"
    "  graphNodeId INTEGER, virtualAddress INTEGER);\n"
    "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (\n"
    "  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,\n"
    "  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,\n"
    "  correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL,\n"
    "  graphNodeId INTEGER, memKind INTEGER);\n"
    "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (\n"
    "  start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,\n"
    "  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,\n"
    "  returnValue INTEGER NOT NULL, callchainId INTEGER);\n"
    "CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (\n"
    "  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,\n"
    "  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,\n"
    "  correlationId INTEGER, globalPid INTEGER, syncType INTEGER NOT NULL,\n"
    "  eventId INTEGER NOT NULL);\n"
    "CREATE TABLE NVTX_EVENTS (\n"
    "  start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,\n"
    "  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,\n"
    "  textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,\n"
    "  doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL,\n"
    "  jsonTextId INTEGER, jsonText TEXT, binaryData TEXT);\n"
    "CREATE TABLE TARGET_INFO_GPU (\n"
    "  vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT,\n"
    "  isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER,\n"
    "  clockRate INTEGER, smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER,\n"
    "  chipName TEXT, cuDevice INTEGER, ctxswDevPath TEXT, ctrlDevPath TEXT, revision INTEGER,\n"
    "  nodeMask INTEGER, constantMemory INTEGER, maxIPC INTEGER, maxRegistersPerBlock INTEGER,\n"
    "  maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER, maxShmemPerSm INTEGER,\n"
    "  maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, asyncEngines INTEGER,\n"
    "  maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER, maxThreadsPerBlock INTEGER,\n"
    "  maxBlockDimX INTEGER, maxBlockDimY INTEGER, maxBlockDimZ INTEGER, maxGridDimX INTEGER,\n"
    "  maxGridDimY INTEGER, maxGridDimZ INTEGER, computeMajor INTEGER, computeMinor INTEGER,\n"
    "  smMajor INTEGER, smMinor INTEGER);\n"
    "CREATE TABLE GPU_METRICS (\n"
    "  timestamp INTEGER NOT NULL, end INTEGER NOT NULL, typeId INTEGER NOT NULL,\n"
    "  metricId INTEGER NOT NULL, value REAL);\n"
    "CREATE TABLE TARGET_INFO_GPU_METRICS (\n"
    "  typeId INTEGER NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL,\n"
    "  PRIMARY KEY (typeId, metricId));\n"
    "CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);\n"
    "CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);\n"
    "CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);\n"
    "CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);\n"
    "CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);\n"
    "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES\n"
    "  (0,'CUDA_MEMCPY_KIND_UNKNOWN','Unknown'), (1,'CUDA_MEMCPY_KIND_HTOD','Host-to-Device'),\n"
    "  (2,'CUDA_MEMCPY_KIND_DTOH','Device-to-Host'), (3,'CUDA_MEMCPY_KIND_HTOA','Host-to-Array'),\n"
    "  (4,'CUDA_MEMCPY_KIND_ATOH','Array-to-Host'), (5,'CUDA_MEMCPY_KIND_ATOA','Array-to-Array'),\n"
    "  (6,'CUDA_MEMCPY_KIND_ATOD','Array-to-Device'), "
    "(7,'CUDA_MEMCPY_KIND_DTOA','Device-to-Array'),\n"
    "  (8,'CUDA_MEMCPY_KIND_DTOD','Device-to-Device'), "
    "(9,'CUDA_MEMCPY_KIND_HTOH','Host-to-Host'),\n"
    "  (10,'CUDA_MEMCPY_KIND_PTOP','Peer-to-Peer'),\n"
    "  (11,'CUDA_MEMCPY_KIND_UVM_HTOD','Unified Host-to-Device'),\n"
    "  (12,'CUDA_MEMCPY_KIND_UVM_DTOH','Unified Device-to-Host'),\n"
    "  (13,'CUDA_MEMCPY_KIND_UVM_DTOD','Unified Device-to-Device');\n"
    "INSERT INTO ENUM_CUDA_MEM_KIND VALUES\n"
    "  (0,'CUDA_MEMOPR_MEMORY_KIND_PAGEABLE','Pageable'),\n"
    "  (1,'CUDA_MEMOPR_MEMORY_KIND_PINNED','Pinned'), "
    "(2,'CUDA_MEMOPR_MEMORY_KIND_DEVICE','Device'),\n"
    "  (3,'CUDA_MEMOPR_MEMORY_KIND_ARRAY','Array'), "
    "(4,'CUDA_MEMOPR_MEMORY_KIND_MANAGED','Managed'),\n"
    "  (5,'CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC','Device Static'),\n"
    "  (6,'CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC','Managed Static'),\n"
    "  (7,'CUDA_MEMOPR_MEMORY_KIND_UNKNOWN','Unknown');\n"
    "INSERT INTO ENUM_CUPTI_SYNC_TYPE VALUES\n"
    "  (0,'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN','Unknown'),\n"
    "  (1,'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE','Event sync'),\n"
    "  (2,'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT','Stream wait sync'),\n"
    "  (3,'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE','Stream sync'),\n"
    "  (4,'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE','Context sync');\n"
    "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES\n"
    "  (34,'NvtxMark','NvtxMark'), (59,'NvtxPushPopRange','NvtxPushPopRange'),\n"
    "  (60,'NvtxStartEndRange','NvtxStartEndRange');\n"
    "INSERT INTO ENUM_NSYS_EVENT_CLASS VALUES\n"
    "  (0,'TRACE_PROCESS_EVENT_CUDA_RUNTIME','CUDA runtime'),\n"
    "  (1,'TRACE_PROCESS_EVENT_CUDA_DRIVER','CUDA driver');\n";

static const char index_sql[] =
    "CREATE INDEX IF NOT EXISTS AMP_TENSOR_STATS_step ON AMP_TENSOR_STATS (pid, step);\n"
    "CREATE INDEX IF NOT EXISTS AMP_TENSOR_STATS_layer ON AMP_TENSOR_STATS (pid, layer_id);\n"
    "CREATE INDEX IF NOT EXISTS AMP_OPS_step ON AMP_OPS (pid, step);\n"
    "CREATE INDEX IF NOT EXISTS AMP_OPS_layer ON AMP_OPS (pid, layer_id);\n"
    "CREATE INDEX IF NOT EXISTS AMP_EVENTS_step ON AMP_EVENTS (pid, step);\n"
    "CREATE INDEX IF NOT EXISTS AMP_EVENTS_kind ON AMP_EVENTS (kind);\n"
    "CREATE INDEX IF NOT EXISTS AMP_SCALE_step ON AMP_SCALE (pid, step);\n"
    "CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_KERNEL_start ON CUPTI_ACTIVITY_KIND_KERNEL "
    "(start);\n"
    "CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_KERNEL_corr "
    "ON CUPTI_ACTIVITY_KIND_KERNEL (correlationId);\n"
    "CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_RUNTIME_corr "
    "ON CUPTI_ACTIVITY_KIND_RUNTIME (correlationId);\n"
    "CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_MEMCPY_start ON CUPTI_ACTIVITY_KIND_MEMCPY "
    "(start);\n"
    "CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_MEMSET_start ON CUPTI_ACTIVITY_KIND_MEMSET "
    "(start);\n"
    "CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_SYNCHRONIZATION_start "
    "ON CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start);\n"
    "CREATE INDEX IF NOT EXISTS NVTX_EVENTS_start ON NVTX_EVENTS (start);\n"
    "CREATE INDEX IF NOT EXISTS GPU_METRICS_timestamp ON GPU_METRICS (timestamp);\n";

// ---------------------------------------------------------------------------------------------
// Statements

typedef enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_META,
    ST_STRING,
    ST_PROC_ADD,
    ST_PROC_UPDATE,
    ST_LAYER,
    ST_STEP,
    ST_SCALE,
    ST_STEP_SCALE,
    ST_STATS,
    ST_OP,
    ST_EVENT,
    ST_EVENT_FOLD,
    ST_KERNEL,
    ST_MEMCPY,
    ST_MEMSET,
    ST_RUNTIME,
    ST_SYNC,
    ST_NVTX,
    ST_GPU,
    ST_METRIC,
    ST_METRIC_NAME,
    ST_COUNT
} stmt_id;

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_META] = "INSERT OR REPLACE INTO META (key, value, pid) VALUES (?, ?, ?)",
    [ST_STRING] = "INSERT INTO StringIds (id, value) VALUES (?, ?)",
    [ST_PROC_ADD] = "INSERT INTO AMP_PROCESSES (pid, ppid, globalPid, name, start_ns, status) "
                    "VALUES (?, ?, ?, ?, ?, 'running')",
    [ST_PROC_UPDATE] = "UPDATE AMP_PROCESSES SET start_ns = ?, end_ns = ?, records = ?, bytes = ?, "
                       "status = ? WHERE rowid = ?",
    [ST_LAYER] = "INSERT OR REPLACE INTO AMP_LAYERS (pid, id, parent_id, name) VALUES (?, ?, ?, ?)",
    // a step recorded again (its scale came first, or the program numbered two steps alike) is
    // merged: it spans both (a start left unset, 0, is none), its loss the latest, a figure the
    // latest gave kept
    [ST_STEP] = "INSERT INTO AMP_STEPS (pid, step, start_ns, end_ns, loss, loss_finite, grad_norm, "
                "mem_peak_bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (pid, step) "
                "DO UPDATE SET start_ns = CASE WHEN IFNULL(start_ns, 0) <= 0 THEN ?3 "
                "WHEN IFNULL(?3, 0) <= 0 THEN start_ns ELSE MIN(start_ns, ?3) END, "
                "end_ns = COALESCE(MAX(end_ns, ?4), end_ns, ?4), loss = ?5, loss_finite = ?6, "
                "grad_norm = IFNULL(?7, grad_norm), "
                "mem_peak_bytes = COALESCE(MAX(mem_peak_bytes, ?8), mem_peak_bytes, ?8)",
    [ST_SCALE] = "INSERT INTO AMP_SCALE (pid, step, scale_before, scale_after, found_inf, "
                 "growth_tracker, skipped) VALUES (?, ?, ?, ?, ?, ?, ?)",
    // several updates in one step (AMP_SCALE holds each): from the first's scale to the last's,
    // skipped and found_inf when any was
    [ST_STEP_SCALE] = "INSERT INTO AMP_STEPS (pid, step, scale_before, scale_after, found_inf, "
                      "skipped) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (pid, step) DO UPDATE "
                      "SET scale_before = IFNULL(scale_before, ?3), scale_after = ?4, "
                      "found_inf = COALESCE(MAX(found_inf, ?5), found_inf, ?5), "
                      "skipped = COALESCE(MAX(skipped, ?6), skipped, ?6)",
    [ST_STATS] = "INSERT INTO AMP_TENSOR_STATS VALUES "
                 "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_OP] = "INSERT INTO AMP_OPS VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_EVENT] = "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, "
                 "value, detail, aggregate, occurrences, last_step) "
                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 1, ?2)",
    [ST_EVENT_FOLD] = "UPDATE AMP_EVENTS SET occurrences = occurrences + ?2, last_step = ?3, "
                      "count = CASE WHEN ?4 IS NULL THEN count "
                      "WHEN IFNULL(count, 0) > 9223372036854775807 - ?4 THEN 9223372036854775807 "
                      "ELSE IFNULL(count, 0) + ?4 END, "
                      "value = IFNULL(?5, value) WHERE id = ?1",
    [ST_KERNEL] = "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                  "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_MEMCPY] = "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                  "NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_MEMSET] = "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES "
                  "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_RUNTIME] = "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
    [ST_SYNC] = "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_NVTX] = "INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "?, NULL, NULL, NULL)",
    [ST_GPU] = "INSERT INTO TARGET_INFO_GPU (vmId, id, cuDevice, name, busLocation, uuid, "
               "chipName, isDiscrete, l2CacheSize, totalMemory, memoryBandwidth, clockRate, "
               "smCount, computeMajor, computeMinor, maxThreadsPerBlock, maxRegistersPerBlock, "
               "maxRegistersPerSm, maxShmemPerBlock, maxShmemPerBlockOptin, maxShmemPerSm, "
               "threadsPerWarp, asyncEngines, maxWarpsPerSm, maxBlocksPerSm) VALUES (0, ?, ?, ?, "
               "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_METRIC] = "INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?, ?)",
    [ST_METRIC_NAME] = "INSERT OR IGNORE INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, ?)",
};

typedef struct kernel_name_ids {
    int64_t demangled, short_name, mangled; // StringIds ids; mangled -1: none
} kernel_name_ids;

// A prepared statement and the values last bound to its parameters. sqlite3_reset keeps the
// bindings, so a parameter given the value it already holds is not bound again: most columns of
// a kernel row (device, stream, grid, block, registers, ...) and many of an op row (its phase,
// dtypes, policy) repeat from one row to the next, and each bind costs SQLite as much work as a
// few columns of the row itself (a text one several times that).
enum { B_NONE, B_INT, B_REAL, B_NULL, B_TEXT };
typedef struct bound {
    uint8_t kind; // B_NONE (not known: bind), B_INT, B_REAL, B_NULL, B_TEXT
    int64_t bits; // the integer, the double's bits, or the text's length
    char *text;   // B_TEXT: our copy of the text, which the statement is bound to
    size_t cap;   // bytes allocated for it
} bound;
typedef struct binder {
    sqlite3_stmt *st;
    int n;    // parameters + 1
    bound *p; // by parameter number (1-based)
    int base; // the statement's number of this binder's parameter 0 (a row of a batch: below)
} binder;

// The tables that take many rows (kernels, API calls, copies, statistics, ops, ...) get them
// BATCH_ROWS a statement, "INSERT ... VALUES (row), (row), ...": one a statement, a row costs
// SQLite a statement's run besides its columns (collector_bench's kernel rows, 28 columns: 0.77
// M rows/s one a statement, 0.97 sixteen, 1.07 thirty-two, 1.18 sixty-four). Rows wait in the
// statement's bindings; a commit first inserts those of an unfinished batch one by one
// (batch_flush), so what is committed is all there.
#define BATCH_ROWS 64
typedef struct batch {
    binder many; // the statement of BATCH_ROWS rows (its st NULL: the table is not batched)
    binder row;  // the next row's parameters in it
    int cols;    // parameters a row
    int rows;    // rows bound and not inserted yet
} batch;
static const stmt_id batched[] = {ST_STATS,  ST_OP,      ST_KERNEL, ST_MEMCPY,
                                  ST_MEMSET, ST_RUNTIME, ST_SYNC,   ST_METRIC};

struct amp_store {
    sqlite3 *db;
    char *path;
    binder b[ST_COUNT];
    batch q[ST_COUNT];
    amp_strmap strings; // StringIds value -> id
    int64_t n_strings;
    amp_strmap kernel_keys; // a kernel record's three names -> index into kernel_ids
    kernel_name_ids *kernel_ids;
    int64_t n_kernel_ids, cap_kernel_ids;
    char *key_buf;
    size_t key_cap;
    amp_strmap gpus;    // "id/uuid" of the TARGET_INFO_GPU rows
    amp_strmap metrics; // "device/metric name" -> metricId
    int64_t n_metrics;
    // WAL checkpoints run on a thread with a connection of its own, next to the inserts
    sqlite3 *ckpt_db;
    pthread_t ckpt_thread;
    pthread_mutex_t ckpt_lock;
    pthread_cond_t ckpt_wake;
    bool ckpt_running, ckpt_stop;
    int wal_frames; // pages in the WAL after the last commit
};

static amp_status db_error(const amp_store *s, const char *what) {
    return amp_set_error(AMP_ERR_IO, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static amp_status step(amp_store *s, sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    amp_status status = rc == SQLITE_DONE ? AMP_OK : db_error(s, "insert");
    sqlite3_reset(st);
    return status;
}

// The binder of statement id's next row: its own, or the next row of its batch.
static binder *row_of(amp_store *s, stmt_id id) {
    batch *q = &s->q[id];
    if (!q->many.st) return &s->b[id];
    const int base = q->rows * q->cols;
    q->row = (binder){.st = q->many.st, .n = q->cols + 1, .p = q->many.p + base, .base = base};
    return &q->row;
}

// The row bound through row_of(s, id) is complete: inserted, or its batch when that is full.
static amp_status run(amp_store *s, stmt_id id) {
    batch *q = &s->q[id];
    if (!q->many.st) return step(s, s->b[id].st);
    if (++q->rows < BATCH_ROWS) return AMP_OK;
    q->rows = 0;
    return step(s, q->many.st);
}

static void bind_i64(binder *b, int i, int64_t v) {
    bound *x = &b->p[i];
    if (x->kind == B_INT && x->bits == v) return;
    x->kind = B_INT, x->bits = v;
    sqlite3_bind_int64(b->st, b->base + i, v);
}
static void bind_null(binder *b, int i) {
    if (b->p[i].kind == B_NULL) return;
    b->p[i].kind = B_NULL;
    sqlite3_bind_null(b->st, b->base + i);
}
// Optional non-negative integers: -1 (any negative) is "not known".
static void bind_opt(binder *b, int i, int64_t v) {
    if (v < 0)
        bind_null(b, i);
    else
        bind_i64(b, i, v);
}
static void bind_f64(binder *b, int i, double v) {
    if (isnan(v)) {
        bind_null(b, i);
        return;
    }
    int64_t bits;
    memcpy(&bits, &v, sizeof bits);
    bound *x = &b->p[i];
    if (x->kind == B_REAL && x->bits == bits) return;
    x->kind = B_REAL, x->bits = bits;
    sqlite3_bind_double(b->st, b->base + i, v);
}
// The statement is bound to a copy of the text that the binder keeps (the caller's buffer holds
// it only until the row is inserted), so that the same text next time needs no bind. Text that
// is not UTF-8 goes in with U+FFFD for each byte that starts no valid sequence (SQLite would
// store the bytes as given, and readers that decode TEXT, Python's sqlite3 among them, fail).
static void bind_text(binder *b, int i, const char *v, int len) {
    size_t n = len < 0 ? strlen(v) : (size_t)len;
    bound *x = &b->p[i];
    if (x->kind == B_TEXT && (size_t)x->bits == n && memcmp(x->text, v, n) == 0) return;
    const unsigned char *u = (const unsigned char *)v;
    size_t ascii = 0; // (ASCII is valid: a word at a time up to the first byte that is not)
    for (uint64_t w; ascii + 8 <= n && (memcpy(&w, u + ascii, 8), !(w & 0x8080808080808080u));)
        ascii += 8;
    while (ascii < n && u[ascii] < 0x80)
        ascii++;
    size_t valid = ascii, bad = 0;
    for (size_t k = ascii, l; k < n; k += l ? l : 1) {
        l = amp_utf8_seq(v + k, n - k);
        if (!l) bad++;
        valid += l;
    }
    const size_t out = valid + 3 * bad;
    if (out + 1 > x->cap) {
        x->cap = out + 1 > 64 ? out + 1 : 64;
        x->text = amp_xrealloc(x->text, x->cap);
    }
    if (!bad) {
        memcpy(x->text, v, n);
    } else {
        char *w = x->text;
        for (size_t k = 0, l; k < n; k += l ? l : 1) {
            if ((l = amp_utf8_seq(v + k, n - k)))
                memcpy(w, u + k, l), w += l;
            else
                memcpy(w, "\xEF\xBF\xBD", 3), w += 3;
        }
        n = out;
    }
    x->text[n] = 0;
    x->kind = B_TEXT, x->bits = (int64_t)n;
    sqlite3_bind_text(b->st, b->base + i, x->text, (int)n, SQLITE_STATIC);
}
static void bind_str(binder *b, int i, const char *v) {
    if (v)
        bind_text(b, i, v, -1);
    else
        bind_null(b, i);
}

// Parameter i of b takes the value x holds (a row of a batch moving to the one-row statement).
static void bind_bound(binder *b, int i, const bound *x) {
    double v;
    switch (x->kind) {
    case B_INT:
        bind_i64(b, i, x->bits);
        break;
    case B_REAL:
        memcpy(&v, &x->bits, sizeof v);
        bind_f64(b, i, v);
        break;
    case B_TEXT:
        bind_text(b, i, x->text, (int)x->bits);
        break;
    default: // never bound: SQLite's NULL
        bind_null(b, i);
        break;
    }
}

// The rows of unfinished batches, inserted one by one (before a commit).
static amp_status batch_flush(amp_store *s) {
    for (size_t k = 0; k < sizeof batched / sizeof *batched; k++) {
        batch *q = &s->q[batched[k]];
        binder *one = &s->b[batched[k]];
        for (int r = 0; r < q->rows; r++) {
            for (int i = 1; i <= q->cols; i++)
                bind_bound(one, i, &q->many.p[r * q->cols + i]);
            amp_status st = step(s, one->st);
            if (st != AMP_OK) return st;
        }
        q->rows = 0;
    }
    return AMP_OK;
}

// Statement id's BATCH_ROWS-row form: its one-row SQL with the row repeated after VALUES.
static void batch_prepare(amp_store *s, stmt_id id) {
    const char *one = stmt_sql[id], *values = strstr(one, " VALUES ");
    AMP_ASSERT(values, "statement %d has no VALUES", id);
    const char *row = values + strlen(" VALUES ");
    const size_t head = (size_t)(row - one), len = strlen(row);
    char *sql = amp_xmalloc(head + BATCH_ROWS * (len + 2) + 1), *w = sql;
    memcpy(w, one, head), w += head;
    for (int r = 0; r < BATCH_ROWS; r++) {
        if (r) memcpy(w, ", ", 2), w += 2;
        memcpy(w, row, len), w += len;
    }
    *w = 0;
    batch *q = &s->q[id];
    if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &q->many.st, NULL) !=
        SQLITE_OK)
        AMP_ASSERT(false, "statement %d in batches: %s", id, sqlite3_errmsg(s->db));
    free(sql);
    q->many.n = sqlite3_bind_parameter_count(q->many.st) + 1;
    q->many.p = amp_xcalloc((size_t)q->many.n, sizeof *q->many.p);
    q->cols = s->b[id].n - 1;
    AMP_ASSERT(q->many.n - 1 == BATCH_ROWS * q->cols, "statement %d: %d parameters in batches", id,
               q->many.n - 1);
}

static void binder_free(binder *b) {
    sqlite3_finalize(b->st);
    for (int k = 0; k < b->n; k++)
        free(b->p[k].text);
    free(b->p);
}

// ---------------------------------------------------------------------------------------------
// The checkpointer: copying the WAL back into the database (and its fsync) costs the inserting
// thread a fifth of its time when done inline; on a thread of its own it overlaps the inserts.

#define CHECKPOINT_EVERY_MS 200
#define WAL_RESTART_FRAMES 2048 // 64 MiB of 32 KiB pages

static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames) {
    (void)db, (void)name;
    ((amp_store *)arg)->wal_frames = frames;
    return SQLITE_OK;
}

static void *checkpointer_main(void *arg) {
    amp_store *s = arg;
    pthread_mutex_lock(&s->ckpt_lock);
    while (!s->ckpt_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += CHECKPOINT_EVERY_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&s->ckpt_wake, &s->ckpt_lock, &ts);
        if (s->ckpt_stop) break;
        pthread_mutex_unlock(&s->ckpt_lock);
        // PASSIVE never blocks the writer or readers; a busy or partial one is retried next time
        sqlite3_wal_checkpoint_v2(s->ckpt_db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_lock(&s->ckpt_lock);
    }
    pthread_mutex_unlock(&s->ckpt_lock);
    return NULL;
}

static amp_status checkpointer_start(amp_store *s) {
    if (sqlite3_open_v2(s->path, &s->ckpt_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        amp_status st =
            amp_set_error(AMP_ERR_IO, "%s: cannot open: %s", s->path, sqlite3_errmsg(s->ckpt_db));
        sqlite3_close(s->ckpt_db);
        s->ckpt_db = NULL;
        return st;
    }
    sqlite3_busy_timeout(s->ckpt_db, 100);
    pthread_mutex_init(&s->ckpt_lock, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&s->ckpt_wake, &a);
    pthread_condattr_destroy(&a);
    sigset_t all, old; // signals belong to the program (the launcher's main loop)
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->ckpt_thread, NULL, checkpointer_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    AMP_ASSERT(rc == 0, "pthread_create: %s", strerror(rc));
    s->ckpt_running = true;
    return AMP_OK;
}

static void checkpointer_stop(amp_store *s) {
    if (!s->ckpt_running) return;
    pthread_mutex_lock(&s->ckpt_lock);
    s->ckpt_stop = true;
    pthread_cond_signal(&s->ckpt_wake);
    pthread_mutex_unlock(&s->ckpt_lock);
    pthread_join(s->ckpt_thread, NULL);
    pthread_cond_destroy(&s->ckpt_wake);
    pthread_mutex_destroy(&s->ckpt_lock);
    s->ckpt_running = false;
    sqlite3_close(s->ckpt_db);
    s->ckpt_db = NULL;
}

// ---------------------------------------------------------------------------------------------
// Lifetime

// SQLite's memory statistics put a global mutex around every allocation; nothing here reads
// them. This only takes effect before SQLite's first use in the process (else it is refused).
static void sqlite_configure(void) {
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

// SQLite's unix VFS takes paths of 512 bytes at most, the database's made absolute (its links
// and ".." resolved) and with its journal's "-journal" beside it: past 504 bytes the open fails
// as "unable to open database file", which gives no reason. The resolved length of path when it
// is past that (asked once an open failed); 0 otherwise.
static size_t too_long_for_sqlite(const char *path) {
    char *real = realpath(path, NULL);
    size_t n = 0;
    if (real) {
        n = strlen(real);
    } else { // (not there yet: its directory's)
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : NULL;
        real = realpath(dir ? dir : ".", NULL);
        n = real ? strlen(real) + 1 + strlen(slash ? slash + 1 : path) : 0;
        free(dir);
    }
    free(real);
    return n > 504 ? n : 0;
}

amp_status amp_store_create(const char *path, amp_store **out) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sqlite_configure);
    *out = NULL;
    amp_store *s = amp_xcalloc(1, sizeof *s);
    s->path = amp_xstrdup(path);
    amp_status st = AMP_OK;
    // One thread uses the connection: no SQLite mutex around every bind and step.
    if (sqlite3_open_v2(path, &s->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        const size_t len = too_long_for_sqlite(path);
        st = len ? amp_set_error(AMP_ERR_IO,
                                 "cannot create a database whose path is %zu bytes long as an "
                                 "absolute name, SQLite takes 504 at most (choose a shorter name): "
                                 "%s",
                                 len, path)
                 : db_error(s, "cannot create the database");
        goto fail;
    }
    sqlite3_stmt *q;
    int n_objects = -1;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master", -1, &q, NULL) ==
        SQLITE_OK) {
        if (sqlite3_step(q) == SQLITE_ROW) n_objects = sqlite3_column_int(q, 0);
        sqlite3_finalize(q);
    }
    if (n_objects != 0) {
        st = amp_set_error(AMP_ERR_IO, "%s: exists and is not empty", path);
        goto fail;
    }
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA page_size = 32768; PRAGMA application_id = %d; PRAGMA journal_mode = WAL; "
             "PRAGMA synchronous = NORMAL; PRAGMA cache_size = -65536; "
             "PRAGMA wal_autocheckpoint = 0;", // the checkpointer thread does them
             AMP_APPLICATION_ID);
    if (sqlite3_exec(s->db, pragmas, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(s->db, schema_sql, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        st = db_error(s, "cannot create the schema");
        goto fail;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        binder *b = &s->b[i];
        if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &b->st, NULL) !=
            SQLITE_OK)
            AMP_ASSERT(false, "statement %d: %s", i, sqlite3_errmsg(s->db));
        b->n = sqlite3_bind_parameter_count(b->st) + 1;
        b->p = amp_xcalloc((size_t)b->n, sizeof *b->p);
    }
    for (size_t k = 0; k < sizeof batched / sizeof *batched; k++)
        batch_prepare(s, batched[k]);
    sqlite3_wal_hook(s->db, wal_hook, s);
    st = checkpointer_start(s);
    if (st != AMP_OK) goto fail;
    *out = s;
    return AMP_OK;
fail:
    amp_store_close(s);
    return st;
}

void amp_store_close(amp_store *s) {
    if (!s) return;
    checkpointer_stop(s);
    for (int i = 0; i < ST_COUNT; i++) {
        binder_free(&s->b[i]);
        binder_free(&s->q[i].many);
    }
    sqlite3_close(s->db);
    amp_strmap_free(&s->strings);
    amp_strmap_free(&s->kernel_keys);
    amp_strmap_free(&s->gpus);
    amp_strmap_free(&s->metrics);
    free(s->kernel_ids);
    free(s->key_buf);
    free(s->path);
    free(s);
}

amp_status amp_store_begin(amp_store *s) {
    int rc = sqlite3_step(s->b[ST_BEGIN].st);
    sqlite3_reset(s->b[ST_BEGIN].st);
    return rc == SQLITE_DONE ? AMP_OK : db_error(s, "begin");
}

amp_status amp_store_commit(amp_store *s) {
    amp_status flushed = batch_flush(s);
    if (flushed != AMP_OK) return flushed;
    int rc = sqlite3_step(s->b[ST_COMMIT].st);
    sqlite3_reset(s->b[ST_COMMIT].st);
    if (rc != SQLITE_DONE) return db_error(s, "commit");
    // The WAL starts over only when the writer finds it fully checkpointed; the checkpointer is
    // always a commit behind, so now and then the writer copies that last bit itself.
    if (s->wal_frames > WAL_RESTART_FRAMES)
        sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return AMP_OK;
}

void amp_store_rollback(amp_store *s) {
    if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

amp_status amp_store_finish(amp_store *s) {
    amp_status flushed = batch_flush(s); // (the collector commits first: nothing waits then)
    if (flushed != AMP_OK) return flushed;
    checkpointer_stop(s); // the switch out of WAL below needs the only connection, and
                          // checkpoints what is left
    if (sqlite3_exec(s->db, index_sql, NULL, NULL, NULL) != SQLITE_OK)
        return db_error(s, "building the indexes");
    if (sqlite3_exec(s->db, "ANALYZE", NULL, NULL, NULL) != SQLITE_OK)
        return db_error(s, "analyze");
    // A finished run is one plain file again (readers then need no -wal/-shm next to it). A
    // reader that still has it open keeps it in WAL mode, which is as good.
    sqlite3_exec(s->db, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
    return AMP_OK;
}

// ---------------------------------------------------------------------------------------------
// Inserts

amp_status amp_store_string_id(amp_store *s, const char *str, int64_t *id) {
    bool found;
    size_t len = strlen(str);
    int64_t *slot = amp_strmap_get_or_put(&s->strings, str, len, s->n_strings + 1, &found);
    *id = *slot;
    if (found) return AMP_OK;
    s->n_strings++;
    binder *st = &s->b[ST_STRING];
    bind_i64(st, 1, *id);
    bind_text(st, 2, str, (int)len);
    return run(s, ST_STRING); // the id is unique by construction: only the disk can fail it
}

amp_status amp_store_meta(amp_store *s, int32_t pid, const char *key, const char *value) {
    binder *st = &s->b[ST_META];
    bind_str(st, 1, key);
    bind_str(st, 2, value);
    bind_i64(st, 3, pid);
    return run(s, ST_META);
}

amp_status amp_store_process_add(amp_store *s, int32_t pid, int32_t ppid, const char *name,
                                 int64_t start_ns, int64_t *rowid) {
    binder *st = &s->b[ST_PROC_ADD];
    bind_i64(st, 1, pid);
    bind_i64(st, 2, ppid);
    bind_i64(st, 3, amp_global_pid(pid));
    bind_str(st, 4, name);
    bind_i64(st, 5, start_ns);
    amp_status status = run(s, ST_PROC_ADD);
    *rowid = sqlite3_last_insert_rowid(s->db);
    return status;
}

amp_status amp_store_process_update(amp_store *s, int64_t rowid, int64_t start_ns, int64_t end_ns,
                                    int64_t records, int64_t bytes, const char *status) {
    binder *st = &s->b[ST_PROC_UPDATE];
    bind_i64(st, 1, start_ns);
    bind_opt(st, 2, end_ns);
    bind_i64(st, 3, records);
    bind_i64(st, 4, bytes);
    bind_str(st, 5, status);
    bind_i64(st, 6, rowid);
    return run(s, ST_PROC_UPDATE);
}

amp_status amp_store_layer(amp_store *s, int32_t pid, const amp_rec_layer *r) {
    binder *st = &s->b[ST_LAYER];
    bind_i64(st, 1, pid);
    bind_i64(st, 2, r->id);
    bind_opt(st, 3, r->parent_id);
    bind_str(st, 4, r->name ? r->name : "");
    return run(s, ST_LAYER);
}

amp_status amp_store_step(amp_store *s, int32_t pid, const amp_rec_step *r) {
    binder *st = &s->b[ST_STEP];
    bind_i64(st, 1, pid);
    bind_i64(st, 2, r->step);
    bind_i64(st, 3, r->start_ns);
    bind_i64(st, 4, r->end_ns);
    bind_f64(st, 5, r->loss);
    bind_i64(st, 6, isfinite(r->loss));
    bind_f64(st, 7, r->grad_norm);
    bind_opt(st, 8, r->mem_peak_bytes > 0 ? r->mem_peak_bytes : -1);
    return run(s, ST_STEP);
}

amp_status amp_store_scale(amp_store *s, int32_t pid, const amp_rec_scale *r) {
    binder *st = &s->b[ST_SCALE];
    bind_i64(st, 1, pid);
    bind_i64(st, 2, r->step);
    bind_f64(st, 3, r->scale_before);
    bind_f64(st, 4, r->scale_after);
    bind_opt(st, 5, r->found_inf);
    bind_opt(st, 6, r->growth_tracker);
    bind_i64(st, 7, r->skipped);
    amp_status status = run(s, ST_SCALE);
    if (status != AMP_OK) return status;
    st = &s->b[ST_STEP_SCALE];
    bind_i64(st, 1, pid);
    bind_i64(st, 2, r->step);
    bind_f64(st, 3, r->scale_before);
    bind_f64(st, 4, r->scale_after);
    bind_opt(st, 5, r->found_inf);
    bind_i64(st, 6, r->skipped);
    return run(s, ST_STEP_SCALE);
}

amp_status amp_store_tensor_stats(amp_store *s, int32_t pid, const amp_rec_tensor_stats *r) {
    binder *st = row_of(s, ST_STATS);
    bind_i64(st, 1, pid);
    bind_i64(st, 2, r->step);
    bind_opt(st, 3, r->layer_id);
    bind_str(st, 4, r->op);
    bind_str(st, 5, amp_stats_kind_name(r->kind));
    bind_str(st, 6, r->dtype);
    bind_str(st, 7, r->target_dtype);
    bind_opt(st, 8, r->numel);
    bind_f64(st, 9, r->min);
    bind_f64(st, 10, r->max);
    bind_f64(st, 11, r->amax);
    bind_opt(st, 12, r->n_nan);
    bind_opt(st, 13, r->n_posinf);
    bind_opt(st, 14, r->n_neginf);
    const bool target = r->target_dtype && r->target_dtype[0]; // (the counts refer to it)
    bind_opt(st, 15, target ? r->n_overflow : -1);
    bind_opt(st, 16, target ? r->n_underflow : -1);
    bind_opt(st, 17, r->n_zero);
    return run(s, ST_STATS);
}

amp_status amp_store_op(amp_store *s, int32_t pid, const amp_rec_op *r) {
    binder *st = row_of(s, ST_OP);
    bind_i64(st, 1, pid);
    bind_i64(st, 2, r->step);
    bind_opt(st, 3, r->layer_id);
    bind_str(st, 4, r->op ? r->op : "");
    bind_str(st, 5, amp_phase_name(r->phase));
    bind_str(st, 6, r->in_dtypes);
    bind_str(st, 7, r->out_dtype);
    bind_str(st, 8, r->policy);
    bind_str(st, 9, r->shapes);
    bind_opt(st, 10, r->flops);
    bind_opt(st, 11, r->bytes);
    bind_i64(st, 12, r->start_ns);
    bind_i64(st, 13, r->end_ns);
    return run(s, ST_OP);
}

amp_status amp_store_event_insert(amp_store *s, int32_t pid, const amp_rec_event *r, bool aggregate,
                                  int64_t *rowid) {
    binder *st = &s->b[ST_EVENT];
    bind_i64(st, 1, pid);
    bind_i64(st, 2, r->step);
    bind_opt(st, 3, r->layer_id);
    bind_str(st, 4, r->op);
    bind_str(st, 5, amp_phase_name(r->phase));
    bind_str(st, 6, r->kind ? r->kind : "unknown");
    bind_str(st, 7, amp_severity_name(r->severity));
    bind_opt(st, 8, r->count);
    bind_f64(st, 9, r->value);
    bind_str(st, 10, r->detail);
    bind_i64(st, 11, aggregate);
    amp_status status = run(s, ST_EVENT);
    *rowid = sqlite3_last_insert_rowid(s->db);
    return status;
}

amp_status amp_store_event_fold(amp_store *s, int64_t rowid, int64_t occurrences, int64_t last_step,
                                int64_t count, double value) {
    binder *st = &s->b[ST_EVENT_FOLD];
    bind_i64(st, 1, rowid);
    bind_i64(st, 2, occurrences);
    bind_i64(st, 3, last_step);
    bind_opt(st, 4, count);
    bind_f64(st, 5, value);
    return run(s, ST_EVENT_FOLD);
}

const char *amp_kernel_short_name(const char *demangled, char *out, size_t n) {
    // The argument list is the first '(' outside template brackets that is not part of
    // "(anonymous namespace)"; the name is the identifier before it, without template arguments.
    static const char anon[] = "(anonymous namespace)";
    const char *end = NULL;
    int depth = 0;
    for (const char *p = demangled; *p && !end; p++) {
        if (*p == '<')
            depth++;
        else if (*p == '>' && depth > 0)
            depth--;
        else if (*p == '(' && depth == 0) {
            if (strncmp(p, anon, sizeof anon - 1) == 0)
                p += sizeof anon - 2;
            else
                end = p;
        }
    }
    if (!end) end = demangled + strlen(demangled);
    if (end > demangled && end[-1] == '>') { // strip the template arguments
        int d = 0;
        const char *p = end - 1;
        for (; p > demangled; p--) {
            if (*p == '>')
                d++;
            else if (*p == '<' && --d == 0)
                break;
        }
        end = p;
    }
    const char *start = end;
    while (start > demangled && start[-1] != ':' && start[-1] != ' ')
        start--;
    size_t len = (size_t)(end - start);
    if (len == 0) return demangled;
    if (len >= n) len = n - 1;
    memcpy(out, start, len);
    out[len] = 0;
    return out;
}

// The StringIds ids of a kernel's names, worked out once per distinct set of names (kernels
// repeat: a training run has a few hundred distinct ones and millions of launches).
static amp_status kernel_names(amp_store *s, const amp_rec_kernel *r, const kernel_name_ids **out) {
    const char *parts[3] = {r->name ? r->name : "", r->demangled, r->short_name};
    size_t len = 0;
    for (int i = 0; i < 3; i++)
        len += (parts[i] ? strlen(parts[i]) : 0) + 2;
    if (len > s->key_cap) {
        s->key_cap = 2 * len;
        s->key_buf = amp_xrealloc(s->key_buf, s->key_cap);
    }
    char *k = s->key_buf;
    for (int i = 0; i < 3; i++) { // NUL-separated; a NULL name is "\1"
        k = stpcpy(k, parts[i] ? parts[i] : "\1") + 1;
    }
    bool found;
    int64_t *slot = amp_strmap_get_or_put(&s->kernel_keys, s->key_buf, (size_t)(k - s->key_buf),
                                          s->n_kernel_ids, &found);
    if (found) {
        *out = &s->kernel_ids[*slot];
        return AMP_OK;
    }
    if (s->n_kernel_ids == s->cap_kernel_ids) {
        s->cap_kernel_ids = s->cap_kernel_ids ? 2 * s->cap_kernel_ids : 64;
        s->kernel_ids =
            amp_xrealloc(s->kernel_ids, (size_t)s->cap_kernel_ids * sizeof *s->kernel_ids);
    }
    kernel_name_ids *ids = &s->kernel_ids[s->n_kernel_ids++];
    const char *name = parts[0];
    const char *demangled = r->demangled ? r->demangled : name;
    char buf[4096];
    const char *short_name =
        r->short_name ? r->short_name : amp_kernel_short_name(demangled, buf, sizeof buf);
    *out = ids;
    ids->mangled = -1;
    amp_status st = amp_store_string_id(s, demangled, &ids->demangled);
    if (st == AMP_OK) st = amp_store_string_id(s, short_name, &ids->short_name);
    if (st == AMP_OK && strncmp(name, "_Z", 2) == 0)
        st = amp_store_string_id(s, name, &ids->mangled);
    return st;
}

// The eight columns every CUPTI activity table starts with (start, end, deviceId, contextId,
// greenContextId, streamId, correlationId, globalPid); r is any record with those fields.
#define BIND_ACTIVITY_HEAD(st, r, pid)                                                             \
    do {                                                                                           \
        bind_i64(st, 1, (r)->start_ns);                                                            \
        bind_i64(st, 2, (r)->end_ns);                                                              \
        bind_i64(st, 3, (r)->device_id);                                                           \
        bind_i64(st, 4, (r)->context_id);                                                          \
        bind_opt(st, 5, (r)->green_context_id);                                                    \
        bind_i64(st, 6, (r)->stream_id);                                                           \
        bind_opt(st, 7, (r)->correlation_id);                                                      \
        bind_i64(st, 8, amp_global_pid(pid));                                                      \
    } while (0)

amp_status amp_store_kernel(amp_store *s, int32_t pid, const amp_rec_kernel *r) {
    const kernel_name_ids *names;
    amp_status status = kernel_names(s, r, &names);
    if (status != AMP_OK) return status;
    binder *st = row_of(s, ST_KERNEL);
    BIND_ACTIVITY_HEAD(st, r, pid);
    bind_i64(st, 9, names->demangled);
    bind_i64(st, 10, names->short_name);
    bind_opt(st, 11, names->mangled);
    bind_opt(st, 12, r->launch_type);
    bind_opt(st, 13, r->cache_config);
    bind_i64(st, 14, r->registers_per_thread);
    bind_i64(st, 15, r->grid_x);
    bind_i64(st, 16, r->grid_y);
    bind_i64(st, 17, r->grid_z);
    bind_i64(st, 18, r->block_x);
    bind_i64(st, 19, r->block_y);
    bind_i64(st, 20, r->block_z);
    bind_i64(st, 21, r->static_shared_memory);
    bind_i64(st, 22, r->dynamic_shared_memory);
    bind_i64(st, 23, r->local_memory_per_thread);
    bind_i64(st, 24, r->local_memory_total);
    bind_i64(st, 25, r->grid_id);
    bind_opt(st, 26, r->shared_memory_executed);
    bind_opt(st, 27, r->graph_node_id);
    bind_opt(st, 28, r->shared_memory_limit_config);
    return run(s, ST_KERNEL);
}

amp_status amp_store_memcpy(amp_store *s, int32_t pid, const amp_rec_memcpy *r) {
    binder *st = row_of(s, ST_MEMCPY);
    BIND_ACTIVITY_HEAD(st, r, pid);
    bind_i64(st, 9, r->bytes);
    bind_i64(st, 10, r->copy_kind);
    bind_opt(st, 11, r->src_kind);
    bind_opt(st, 12, r->dst_kind);
    bind_opt(st, 13, r->src_device_id);
    bind_opt(st, 14, r->src_context_id);
    bind_opt(st, 15, r->dst_device_id);
    bind_opt(st, 16, r->dst_context_id);
    bind_opt(st, 17, r->migration_cause);
    bind_opt(st, 18, r->graph_node_id);
    bind_opt(st, 19, r->virtual_address);
    return run(s, ST_MEMCPY);
}

amp_status amp_store_memset(amp_store *s, int32_t pid, const amp_rec_memset *r) {
    binder *st = row_of(s, ST_MEMSET);
    BIND_ACTIVITY_HEAD(st, r, pid);
    bind_i64(st, 9, r->value);
    bind_i64(st, 10, r->bytes);
    bind_opt(st, 11, r->graph_node_id);
    bind_opt(st, 12, r->mem_kind);
    return run(s, ST_MEMSET);
}

amp_status amp_store_runtime(amp_store *s, int32_t pid, const amp_rec_runtime *r) {
    int64_t name_id;
    amp_status status = amp_store_string_id(s, r->name ? r->name : "", &name_id);
    if (status != AMP_OK) return status;
    binder *st = row_of(s, ST_RUNTIME);
    bind_i64(st, 1, r->start_ns);
    bind_i64(st, 2, r->end_ns);
    bind_i64(st, 3, r->driver ? 1 : 0);
    bind_i64(st, 4, amp_global_tid(pid, r->tid));
    bind_opt(st, 5, r->correlation_id);
    bind_i64(st, 6, name_id);
    bind_i64(st, 7, r->return_value);
    return run(s, ST_RUNTIME);
}

amp_status amp_store_sync(amp_store *s, int32_t pid, const amp_rec_sync *r) {
    binder *st = row_of(s, ST_SYNC);
    BIND_ACTIVITY_HEAD(st, r, pid);
    bind_i64(st, 9, r->sync_type);
    bind_i64(st, 10, r->event_id);
    return run(s, ST_SYNC);
}

amp_status amp_store_nvtx(amp_store *s, int32_t pid, const amp_rec_nvtx *r, int64_t text_id,
                          int64_t domain_id) {
    binder *st = &s->b[ST_NVTX];
    bind_i64(st, 1, r->start_ns);
    bind_opt(st, 2, r->type == AMP_NVTX_MARK ? -1 : r->end_ns);
    bind_i64(st, 3, r->type);
    bind_opt(st, 4, r->range_id);
    bind_opt(st, 5, r->category);
    bind_opt(st, 6, r->color);
    bind_str(st, 7, r->text);
    bind_i64(st, 8, amp_global_tid(pid, r->tid));
    if (r->end_tid >= 0)
        bind_i64(st, 9, amp_global_tid(pid, r->end_tid));
    else
        bind_null(st, 9);
    bind_opt(st, 10, text_id > 0 ? text_id : -1);
    bind_opt(st, 11, domain_id > 0 ? domain_id : -1);
    for (int i = 12; i <= 17; i++)
        bind_null(st, i);
    switch (r->payload_type) { // columns 12..17: uint64, int64, double, uint32, int32, float
    case AMP_NVTX_PAYLOAD_NONE:
        break;
    case AMP_NVTX_PAYLOAD_U64:
        bind_i64(st, 12, (int64_t)r->payload.u64);
        break;
    case AMP_NVTX_PAYLOAD_I64:
        bind_i64(st, 13, r->payload.i64);
        break;
    case AMP_NVTX_PAYLOAD_DOUBLE:
        bind_f64(st, 14, r->payload.f64);
        break;
    case AMP_NVTX_PAYLOAD_U32:
        bind_i64(st, 15, (int64_t)(uint32_t)r->payload.u64);
        break;
    case AMP_NVTX_PAYLOAD_I32:
        bind_i64(st, 16, (int32_t)r->payload.i64);
        break;
    case AMP_NVTX_PAYLOAD_FLOAT:
        bind_f64(st, 17, r->payload.f64);
        break;
    }
    return run(s, ST_NVTX);
}

amp_status amp_store_gpu_info(amp_store *s, const amp_rec_gpu_info *r) {
    char key[160]; // every process of the run reports its devices: keep one row per device
    int n = snprintf(key, sizeof key, "%d/%s", r->id, r->uuid ? r->uuid : "");
    bool found;
    amp_strmap_get_or_put(&s->gpus, key, (size_t)n < sizeof key ? (size_t)n : sizeof key - 1, 0,
                          &found);
    if (found) return AMP_OK;
    binder *st = &s->b[ST_GPU];
    const int64_t ints[] = {r->is_discrete,
                            r->l2_cache_size,
                            r->total_memory,
                            r->memory_bandwidth,
                            r->clock_rate,
                            r->sm_count,
                            r->compute_major,
                            r->compute_minor,
                            r->max_threads_per_block,
                            r->max_registers_per_block,
                            r->max_registers_per_sm,
                            r->max_shmem_per_block,
                            r->max_shmem_per_block_optin,
                            r->max_shmem_per_sm,
                            r->threads_per_warp,
                            r->async_engines,
                            r->max_warps_per_sm,
                            r->max_blocks_per_sm};
    bind_i64(st, 1, r->id);
    bind_opt(st, 2, r->cu_device);
    bind_str(st, 3, r->name);
    bind_str(st, 4, r->bus_location);
    bind_str(st, 5, r->uuid);
    bind_str(st, 6, r->chip_name);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        bind_opt(st, 7 + (int)i, ints[i]);
    return run(s, ST_GPU);
}

amp_status amp_store_gpu_metric(amp_store *s, const amp_rec_gpu_metric *r) {
    char key[256];
    const char *name = r->metric ? r->metric : "";
    int n = snprintf(key, sizeof key, "%d/%s", r->device_id, name);
    bool found;
    int64_t *id =
        amp_strmap_get_or_put(&s->metrics, key, (size_t)n < sizeof key ? (size_t)n : sizeof key - 1,
                              s->n_metrics, &found);
    int64_t metric_id = *id; // before any other insert into the map
    if (!found) {
        s->n_metrics++;
        binder *st = &s->b[ST_METRIC_NAME];
        bind_i64(st, 1, r->device_id);
        bind_i64(st, 2, metric_id);
        bind_str(st, 3, name);
        amp_status e = run(s, ST_METRIC_NAME);
        if (e != AMP_OK) return e;
    }
    binder *st = row_of(s, ST_METRIC);
    bind_i64(st, 1, r->start_ns);
    bind_i64(st, 2, r->end_ns);
    bind_i64(st, 3, r->device_id);
    bind_i64(st, 4, metric_id);
    bind_f64(st, 5, r->value);
    return run(s, ST_METRIC);
}

// ---------------------------------------------------------------------------------------------
// Read-only open for readers

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Checks the file before SQLite sees it: exists, is SQLite, is as long as its header says.
// *has_wal: a non-empty -wal lies beside it (looked at before SQLite opens the file: a
// read-only connection makes an empty one where it can).
static amp_status precheck(const char *path, char *err, bool *has_wal) {
    *has_wal = false;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(err, AMP_STORE_ERR_MAX, "%s: %s", path, strerror(errno));
        return AMP_ERR_IO;
    }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(err, AMP_STORE_ERR_MAX, "%s: is a directory, not an ampprobe database", path);
        return AMP_ERR_IO;
    }
    if (!S_ISREG(sb.st_mode)) { // a pipe would block the read below, and SQLite needs to seek
        snprintf(err, AMP_STORE_ERR_MAX,
                 "%s: is %s, not an ampprobe database (a database is a file: copy it to one)", path,
                 S_ISFIFO(sb.st_mode)   ? "a pipe"
                 : S_ISSOCK(sb.st_mode) ? "a socket"
                                        : "a device");
        return AMP_ERR_IO;
    }
    unsigned char h[100];
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, AMP_STORE_ERR_MAX, "%s: %s", path, strerror(errno));
        return AMP_ERR_IO;
    }
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    if (got < sizeof h || memcmp(h, "SQLite format 3", 16) != 0) {
        snprintf(err, AMP_STORE_ERR_MAX, "%s: not an ampprobe database (%s)", path,
                 got == 0 ? "empty file" : "not an SQLite file");
        return AMP_ERR_CORRUPT;
    }
    if (be32(h + 68) != AMP_APPLICATION_ID) {
        snprintf(err, AMP_STORE_ERR_MAX, "%s: not an ampprobe database (another SQLite file)",
                 path);
        return AMP_ERR_CORRUPT;
    }
    // With no WAL next to it the file holds every page, and the page count in its header is
    // valid when the change counter matches "version-valid-for".
    char wal[4096];
    snprintf(wal, sizeof wal, "%s-wal", path);
    struct stat wb;
    *has_wal = stat(wal, &wb) == 0 && wb.st_size > 0;
    uint32_t page_size = (uint32_t)h[16] << 8 | h[17];
    if (page_size == 1) page_size = 65536;
    if (page_size < 512 || (page_size & (page_size - 1))) {
        snprintf(err, AMP_STORE_ERR_MAX, "%s: corrupt (its header's page size is %u)", path,
                 (unsigned)page_size);
        return AMP_ERR_CORRUPT;
    }
    uint64_t pages = be32(h + 28);
    if (!*has_wal && be32(h + 24) == be32(h + 92) && (uint64_t)sb.st_size < pages * page_size) {
        // a file cut short, or a header whose page count was overwritten: the bytes cannot tell
        snprintf(err, AMP_STORE_ERR_MAX,
                 "%s: truncated or its header damaged (%lld bytes, the header counts %llu)", path,
                 (long long)sb.st_size, (unsigned long long)(pages * page_size));
        return AMP_ERR_CORRUPT;
    }
    return AMP_OK;
}

bool amp_store_has_column(sqlite3 *db, const char *table, const char *column) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2", -1, &q,
                           NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(q, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, column, -1, SQLITE_STATIC);
    const bool yes = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    return yes;
}

// META's status is running (and *pid, *here: the collector's pid, on this host).
static bool status_running(sqlite3 *db, long long *pid, bool *here) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "SELECT key, value FROM META WHERE pid = 0 AND key IN ('status', "
                           "'collector_pid', 'host')",
                           -1, &q, NULL) != SQLITE_OK)
        return false;
    bool running = false;
    *pid = 0;
    *here = false;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(q, 0);
        const char *value = (const char *)sqlite3_column_text(q, 1);
        if (!key || !value) continue;
        if (strcmp(key, "status") == 0) {
            running = strcmp(value, "running") == 0;
        } else if (strcmp(key, "collector_pid") == 0) {
            *pid = strtoll(value, NULL, 10);
        } else {
            char host[256] = "";
            *here = gethostname(host, sizeof host - 1) == 0 && strcmp(host, value) == 0;
        }
    }
    sqlite3_finalize(q);
    return running;
}

// Whether process pid has the database of db open (as the collector keeps it): false when its
// descriptors can be read and none is that file (the pid of a collector killed long ago, taken
// by another process since); true when they cannot be read (another user's: no telling).
static bool holds_database(sqlite3 *db, long long pid) {
    const char *path = sqlite3_db_filename(db, "main");
    struct stat want;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%lld/fd", pid);
    DIR *d = path && stat(path, &want) == 0 ? opendir(dir) : NULL;
    if (!d) return true;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));) {
        struct stat sb;
        found = e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &sb, 0) == 0 &&
                sb.st_dev == want.st_dev && sb.st_ino == want.st_ino;
    }
    closedir(d);
    return found;
}

amp_run_state amp_store_run_state(sqlite3 *db) {
    long long pid;
    bool here;
    if (!status_running(db, &pid, &here)) return AMP_RUN_COMPLETE;
    if (here && pid > 0 && pid <= INT32_MAX && (kill((pid_t)pid, 0) == 0 || errno == EPERM) &&
        holds_database(db, pid))
        return AMP_RUN_RECORDING;
    // The collector may have written its last rows and exited between the read and the kill:
    // read again (outside a read transaction, that sees what it wrote)
    return status_running(db, &pid, &here) ? AMP_RUN_CUT_SHORT : AMP_RUN_COMPLETE;
}

// "MAJOR.MINOR" (or "MAJOR"), each a number of at most six digits; false for anything else.
static bool parse_version(const char *v, int *major, int *minor) {
    int n = 0;
    *major = *minor = 0;
    for (int *part = major;; part = minor, v++) {
        const char *start = v;
        for (; *v >= '0' && *v <= '9' && v - start < 6; v++)
            *part = *part * 10 + (*v - '0');
        if (v == start || (*v >= '0' && *v <= '9')) return false;
        if (++n == 2 || *v != '.') return *v == 0;
    }
}

// META's schema_version into *major.*minor: -1 when there is none, -2 when it is no version
// (the value, cut, in raw[64]); an SQLite result code (*code: the connection's primary error
// code then).
static int read_schema_version(sqlite3 *d, int *major, int *minor, int *code, char raw[64]) {
    sqlite3_stmt *q = NULL;
    *major = -1, *minor = 0;
    raw[0] = 0;
    int rc = sqlite3_prepare_v2(
        d, "SELECT value FROM META WHERE key = 'schema_version' AND pid = 0", -1, &q, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            const char *v = (const char *)sqlite3_column_text(q, 0);
            snprintf(raw, 64, "%s", v ? v : "");
            if (!v || !parse_version(v, major, minor)) *major = -2;
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_OK;
        }
    }
    *code = sqlite3_errcode(d) & 0xff;
    sqlite3_finalize(q);
    return rc;
}

// Whether the database file holds no table at all (what a run's file looks like while its
// tables are still in the write-ahead log; one whose META was dropped has its other tables).
static bool schema_empty(sqlite3 *d) {
    sqlite3_stmt *q = NULL;
    bool empty =
        sqlite3_prepare_v2(d, "SELECT 1 FROM sqlite_master LIMIT 1", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_DONE;
    sqlite3_finalize(q);
    return empty;
}

// Opens path read-only as immutable (nothing else writes it, no -shm needed), through a URI.
static int open_immutable(const char *path, sqlite3 **d) {
    size_t n = strlen(path);
    char *uri = amp_xmalloc(3 * n + 32), *u = uri;
    u += sprintf(u, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        if (isalnum(*p) || strchr("/._-~", *p))
            *u++ = (char)*p;
        else
            u += sprintf(u, "%%%02X", *p);
    strcpy(u, "?immutable=1");
    int rc = sqlite3_open_v2(uri, d, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    free(uri);
    return rc;
}

// Why a database whose schema version could not be read (rc, code: read_schema_version's) cannot
// be opened: the message into errbuf, the status returned.
static amp_status unreadable(sqlite3 *d, const char *path, int rc, int code, bool has_wal,
                             char errbuf[AMP_STORE_ERR_MAX]) {
    if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB || code == SQLITE_IOERR) {
        snprintf(errbuf, AMP_STORE_ERR_MAX, "%s: truncated or corrupt (%s)", path,
                 sqlite3_errmsg(d));
        return AMP_ERR_CORRUPT;
    }
    if (rc == SQLITE_ERROR && !has_wal && schema_empty(d)) {
        // marked as ours (precheck), its tables not written out of the write-ahead log yet
        snprintf(errbuf, AMP_STORE_ERR_MAX,
                 "%s: an ampprobe database whose tables are still in its write-ahead log "
                 "%s-wal, which is not beside it (copy it along, or let the run finish)",
                 path, path);
        return AMP_ERR_CORRUPT;
    }
    if (rc == SQLITE_ERROR) {
        snprintf(errbuf, AMP_STORE_ERR_MAX, "%s: not an ampprobe database (no META table)", path);
        return AMP_ERR_CORRUPT;
    }
    if ((code == SQLITE_CANTOPEN || code == SQLITE_READONLY) && has_wal) {
        snprintf(errbuf, AMP_STORE_ERR_MAX,
                 "%s: cannot read: its write-ahead log %s-wal needs a %s-shm beside it, "
                 "which cannot be made here (a read-only directory?): copy the files to a "
                 "writable one",
                 path, path, path);
        return AMP_ERR_IO;
    }
    snprintf(errbuf, AMP_STORE_ERR_MAX, "%s: cannot read: %s", path, sqlite3_errmsg(d));
    return AMP_ERR_IO;
}

// Whether this build reads schema version major.minor (raw: as written; major -1: none, below
// -1: not a version); else the message into errbuf, the status returned.
static amp_status check_version(const char *path, int major, int minor, const char *raw,
                                char errbuf[AMP_STORE_ERR_MAX]) {
    if (major == -1) {
        snprintf(errbuf, AMP_STORE_ERR_MAX, "%s: not an ampprobe database (no schema_version)",
                 path);
        return AMP_ERR_CORRUPT;
    }
    if (major < 0) {
        snprintf(errbuf, AMP_STORE_ERR_MAX,
                 "%s: damaged: its schema_version '%s' is not a version (MAJOR.MINOR)", path, raw);
        return AMP_ERR_CORRUPT;
    }
    if (major > AMP_SCHEMA_MAJOR) {
        snprintf(errbuf, AMP_STORE_ERR_MAX,
                 "%s: written by a newer ampprobe (schema %d.%d; this build reads %d.x)", path,
                 major, minor, AMP_SCHEMA_MAJOR);
        return AMP_ERR_UNSUPPORTED;
    }
    return AMP_OK;
}

amp_status amp_store_open_readonly(const char *path, sqlite3 **db, char errbuf[AMP_STORE_ERR_MAX]) {
    amp_clear_error();
    *db = NULL;
    errbuf[0] = 0;
    bool has_wal;
    amp_status st = precheck(path, errbuf, &has_wal);
    if (st != AMP_OK) return amp_set_error(st, "%s", amp_one_line(errbuf));
    sqlite3 *d = NULL;
    if (sqlite3_open_v2(path, &d, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        const size_t len = too_long_for_sqlite(path);
        if (len) // (the reason first: the path may fill the buffer)
            snprintf(errbuf, AMP_STORE_ERR_MAX,
                     "cannot open a database whose path is %zu bytes long as an absolute name, "
                     "SQLite takes 504 at most (move or link it nearer /): %s",
                     len, path);
        else
            snprintf(errbuf, AMP_STORE_ERR_MAX, "%s: cannot open: %s", path,
                     d ? sqlite3_errmsg(d) : "out of memory");
        sqlite3_close(d);
        return amp_set_error(AMP_ERR_IO, "%s", amp_one_line(errbuf));
    }
    sqlite3_busy_timeout(d, 2000); // a live run checkpoints now and then
    int major, minor, code;
    char raw[64];
    int rc = read_schema_version(d, &major, &minor, &code, raw);
    if (rc != SQLITE_OK && (code == SQLITE_CANTOPEN || code == SQLITE_READONLY) && !has_wal) {
        // a WAL database in a directory where SQLite cannot make its -shm: with no -wal beside
        // it the file holds everything, and nothing writes it
        sqlite3_close(d);
        d = NULL;
        if (open_immutable(path, &d) == SQLITE_OK)
            rc = read_schema_version(d, &major, &minor, &code, raw);
        else
            code = sqlite3_errcode(d) & 0xff;
    }
    if (rc != SQLITE_OK)
        st = unreadable(d, path, rc, code, has_wal, errbuf);
    else
        st = check_version(path, major, minor, raw, errbuf);
    if (st != AMP_OK) {
        sqlite3_close(d);
        return amp_set_error(st, "%s", amp_one_line(errbuf));
    }
    *db = d;
    return AMP_OK;
}
