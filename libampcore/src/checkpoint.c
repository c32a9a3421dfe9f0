// The format table below is laid out by hand.
// clang-format off
/*
 * checkpoint.c — parameters, optimizer state and GradScaler state in one binary file.
 *
 * File format, version 4. Integers are little-endian, floats are their IEEE bit patterns
 * (f32/f64), tensor data is the dtype's storage format (f16/bf16 bits, little-endian):
 *
 *   header   char magic[8] = "AMPCKPT1"
 *            u32  version = 4 (version 1 files, with f32 optimizer hyperparameters, version 2
 *                             files, without a STEP record, and version 3 files, without an RNG
 *                             record, still load)
 *            u32  n_records
 *            u64  payload_bytes               bytes of the records that follow
 *   payload  n_records records, each
 *            u32  type | u32 name_len | char name[name_len] (no NUL) | u64 body_len | body
 *   trailer  u32  crc32                       CRC-32 (IEEE, as zlib's) of header and payload
 *
 *   type 1 PARAM        name: the parameter's name, or "param.<i>" (its index) when unnamed
 *                       body: tensor = u32 dtype (amp_dtype) | u32 ndim | i64 shape[ndim] | data
 *   type 2 OPTIM        name: "optimizer"
 *                       body: u32 kind | f64 lr, momentum, dampening | u32 nesterov |
 *                             f64 weight_decay, beta1, beta2, eps | i64 steps |
 *                             u32 n_params | u32 n_state (state tensors per parameter)
 *   type 3 OPTIM_STATE  name: the optimizer's parameter, named as for PARAM (index in the
 *                             optimizer)
 *                       body: i64 steps | u32 n_state | n_state tensors (momentum_buffer or
 *                             exp_avg, exp_avg_sq)
 *   type 4 SCALER       name: "scaler"
 *                       body: u32 enabled | f32 scale | f64 growth_factor | f64 backoff_factor |
 *                             i32 growth_interval | i32 growth_tracker  (enabled 0: saved from a
 *                             disabled GradScaler, the rest is 0)
 *   type 5 STEP         name: "step"
 *                       body: i64 next_step    the number the optimizer's context gives its next
 *                             step (amp_ctx_step_index), skipped steps counted, unlike OPTIM's
 *   type 6 RNG          name: "rng"
 *                       body: u64 seed | u64 host | u64 dropout_offset   the optimizer's context's
 *                             amp_rng_state, which a load with an optimizer restores
 *
 * At most one OPTIM, one SCALER, one STEP and one RNG record (STEP and RNG written with OPTIM);
 * one OPTIM_STATE per optimizer parameter. Saving writes a temporary file of its own beside
 * path (path.PID.N.tmp), fsyncs it and renames it over path (over the file a symbolic link names,
 * made if it is not there yet; never over a device, a pipe or a directory; never over a file it
 * could not open for writing, whose permission bits the new file keeps; a save killed before its
 * rename leaves its temporary file). Loading checks the header against the file's size, reads the whole file, checks the CRC and every length against the bytes that are
 * there, decodes every record, matches it against the caller's parameters, optimizer and scaler,
 * and only then changes anything: a hostile file gets AMP_ERR_CORRUPT, never a crash or a hang.
 */
// clang-format on
#include "amp-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes tensor data in host order, which must be little-endian"
#endif

#define CK_MAGIC "AMPCKPT1"
#define CK_VERSION 4u // 1: the optimizer's hyperparameters in f32; 2: no STEP record; 3: no RNG
#define CK_HEADER_BYTES 24u
#define CK_RECORD_MIN_BYTES 16u // type, name_len, body_len

enum {
    REC_PARAM = 1,
    REC_OPTIM = 2,
    REC_OPTIM_STATE = 3,
    REC_SCALER = 4,
    REC_STEP = 5,
    REC_RNG = 6
};

// ---------------------------------------------------------------------------------------------
// CRC-32 (reflected polynomial 0xEDB88320); the table is built per call, it costs nothing.

static void crc32_table(uint32_t table[256]) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
}

// crc is the running value (start at 0); returns the value after the bytes.
static uint32_t crc32_update(const uint32_t table[256], uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t amp_crc32(const void *data, size_t n) {
    uint32_t table[256];
    crc32_table(table);
    return crc32_update(table, 0, data, n);
}

// The name a tensor has in a checkpoint: its own, or "param.<i>".
static const char *ck_name(const amp_tensor_t *t, int i, char buf[32]) {
    const char *s = amp_tensor_name(t);
    if (*s) return s;
    snprintf(buf, 32, "param.%d", i);
    return buf;
}

// AMP_ERR_INVALID_ARGUMENT when a list has NULL entries or two tensors with one name.
static amp_status check_names(const char *what, amp_tensor_t *const *ts, int n) {
    for (int i = 0; i < n; i++) {
        if (!ts[i]) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "%s[%d] is NULL", what, i);
        char bi[32], bj[32];
        const char *ni = ck_name(ts[i], i, bi);
        for (int j = 0; j < i; j++)
            if (strcmp(ni, ck_name(ts[j], j, bj)) == 0)
                return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                                     "%s[%d] and %s[%d] are both named '%s'; checkpoints match "
                                     "parameters by name",
                                     what, j, what, i, ni);
    }
    return AMP_OK;
}

// A path, and both parameter lists naming their tensors uniquely (records are matched by name).
static amp_status check_args(const char *path, amp_tensor_t *const *params, int n,
                             const amp_optim_t *opt) {
    if (!path) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "checkpoint: path is NULL");
    if (n < 0) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "checkpoint: n = %d parameters", n);
    if (n > 0 && !params)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "checkpoint: params is NULL (n = %d)", n);
    amp_status st = check_names("params", params, n);
    if (st != AMP_OK) return st;
    for (int i = 0; i < n; i++) // (a load writes each whole, before which nothing may change)
        if (!amp_tensor_is_contiguous(params[i])) {
            char b[32];
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                                 "checkpoint: params[%d] ('%s') is a non-contiguous view; "
                                 "checkpoints hold whole tensors (pass the tensor it views)",
                                 i, ck_name(params[i], i, b));
        }
    if (!opt) return st;
    int np = amp_optim_num_params(opt);
    amp_tensor_t **op = amp_xmalloc((size_t)np * sizeof *op);
    for (int i = 0; i < np; i++)
        op[i] = amp_optim_param(opt, i);
    st = check_names("optimizer params", op, np);
    free(op);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Writing. The record writer runs twice: without a file to count the payload for the header,
// then for real.

typedef struct writer {
    FILE *f; // NULL: count only
    uint32_t crc_table[256];
    uint32_t crc;
    uint64_t bytes;
    uint32_t records;
    bool failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    w->bytes += n;
    if (!w->f) return;
    w->crc = crc32_update(w->crc_table, w->crc, p, n);
    if (fwrite(p, 1, n, w->f) != n) w->failed = true;
}

static void put_u32(writer *w, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(w, b, 4);
}

static void put_u64(writer *w, uint64_t v) {
    put_u32(w, (uint32_t)v);
    put_u32(w, (uint32_t)(v >> 32));
}

static void put_f32(writer *w, float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    put_u32(w, u);
}

static void put_f64(writer *w, double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    put_u64(w, u);
}

static uint64_t tensor_bytes(const amp_tensor_t *t) {
    return 8 + 8 * (uint64_t)t->ndim + (uint64_t)amp_tensor_numel(t) * amp_dtype_size(t->dtype);
}

static void put_tensor(writer *w, const amp_tensor_t *t) {
    put_u32(w, (uint32_t)t->dtype);
    put_u32(w, (uint32_t)t->ndim);
    for (int d = 0; d < t->ndim; d++)
        put_u64(w, (uint64_t)t->shape[d]);
    size_t nbytes = (size_t)amp_tensor_numel(t) * amp_dtype_size(t->dtype);
    if (!w->f) {
        w->bytes += nbytes;
        return;
    }
    void *host = amp_xmalloc(nbytes);
    amp_tensor_read(t, host);
    put(w, host, nbytes);
    free(host);
}

static void put_record_head(writer *w, uint32_t type, const char *name, uint64_t body_len) {
    put_u32(w, type);
    put_u32(w, (uint32_t)strlen(name));
    put(w, name, strlen(name));
    put_u64(w, body_len);
    w->records++;
}

static void put_records(writer *w, amp_tensor_t *const *params, int n, const amp_optim_t *opt,
                        const amp_scaler_t *sc) {
    char buf[32];
    for (int i = 0; i < n; i++) {
        put_record_head(w, REC_PARAM, ck_name(params[i], i, buf), tensor_bytes(params[i]));
        put_tensor(w, params[i]);
    }
    if (opt) {
        const amp_optim_params *p = amp_optim_get_params(opt);
        int np = amp_optim_num_params(opt);
        uint32_t n_state = amp_optim_state(opt, 0, 1) ? 2 : amp_optim_state(opt, 0, 0) ? 1 : 0;
        put_record_head(w, REC_OPTIM, "optimizer", 2 * 4 + 7 * 8 + 8 + 4 + 4);
        put_u32(w, (uint32_t)p->kind);
        put_f64(w, p->lr);
        put_f64(w, p->momentum);
        put_f64(w, p->dampening);
        put_u32(w, p->nesterov);
        put_f64(w, p->weight_decay);
        put_f64(w, p->beta1);
        put_f64(w, p->beta2);
        put_f64(w, p->eps);
        put_u64(w, (uint64_t)amp_optim_steps(opt));
        put_u32(w, (uint32_t)np);
        put_u32(w, n_state);
        for (int i = 0; i < np; i++) {
            uint64_t body = 12;
            for (uint32_t k = 0; k < n_state; k++)
                body += tensor_bytes(amp_optim_state(opt, i, k));
            put_record_head(w, REC_OPTIM_STATE, ck_name(amp_optim_param(opt, i), i, buf), body);
            put_u64(w, (uint64_t)amp_optim_param_steps(opt, i));
            put_u32(w, n_state);
            for (uint32_t k = 0; k < n_state; k++)
                put_tensor(w, amp_optim_state(opt, i, k));
        }
        put_record_head(w, REC_STEP, "step", 8);
        put_u64(w, (uint64_t)amp_ctx_step_index(amp_optim_ctx(opt)));
        // (dropout's masks after a resume are those the uninterrupted run would have drawn)
        const amp_rng_state rng = amp_ctx_rng_state(amp_optim_ctx(opt));
        put_record_head(w, REC_RNG, "rng", 3 * 8);
        put_u64(w, rng.seed);
        put_u64(w, rng.host);
        put_u64(w, rng.dropout_offset);
    }
    if (sc) {
        amp_scaler_state st = {0};
        bool enabled = amp_scaler_is_enabled(sc);
        if (enabled) amp_scaler_state_dict(sc, &st);
        put_record_head(w, REC_SCALER, "scaler", 4 + 4 + 8 + 8 + 4 + 4);
        put_u32(w, enabled);
        put_f32(w, st.scale);
        put_f64(w, st.growth_factor);
        put_f64(w, st.backoff_factor);
        put_u32(w, (uint32_t)st.growth_interval);
        put_u32(w, (uint32_t)st.growth_tracker);
    }
}

// The directory holding path (malloc'd): "/x" -> "/", "a/b" -> "a", "b" -> ".".
static char *parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return amp_xstrdup(".");
    char *dir = amp_xstrdup(path);
    dir[slash == path ? 1 : slash - path] = '\0';
    return dir;
}

// fsync of the directory holding path, so the rename survives a crash (best effort: some file
// systems refuse it, and the data itself is already synced).
static void sync_parent_dir(const char *path) {
    char *dir = parent_dir(path);
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

// Where a save of path goes (*dest, malloc'd: path, or the file a symbolic link at path names)
// and a new empty temporary file beside it (*tmp, malloc'd; its descriptor returned). -1 after
// amp_set_error: path is a directory, a device or a pipe (a rename would put a regular file in
// its place), a link to nothing, or nothing can be created beside it.
static int open_temp_beside(const char *path, char **dest, char **tmp) {
    *dest = *tmp = NULL;
    struct stat sb;
    const bool link = lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
    if (link && !(*dest = realpath(path, NULL))) { // a link to nothing yet: the file it names
        char target[PATH_MAX];
        const ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0) {
            amp_set_error(AMP_ERR_IO, "cannot write checkpoint '%s': %s", path, strerror(errno));
            return -1;
        }
        target[n] = 0;
        const char *slash = strrchr(path, '/'); // (a relative target is relative to the link)
        if (target[0] == '/' || !slash) {
            *dest = amp_xstrdup(target);
        } else {
            *dest = amp_xmalloc((size_t)(slash - path) + 2 + (size_t)n);
            sprintf(*dest, "%.*s/%s", (int)(slash - path), path, target);
        }
    }
    if (!link) *dest = amp_xstrdup(path);
    const bool exists = stat(*dest, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) {
        amp_set_error(AMP_ERR_IO, "cannot write checkpoint '%s': not a regular file (%s)", path,
                      S_ISDIR(sb.st_mode) ? "a directory" : "a device, a pipe or a socket");
        free(*dest);
        *dest = NULL;
        return -1;
    }
    // a file there is refused where torch.save's open for writing would refuse it (the rename
    // would replace a read-only file), and its replacement keeps its permission bits (of the
    // file opened: a pipe put there since the stat neither blocks the open nor passes)
    mode_t mode = 0;
    if (exists) {
        const int old = open(*dest, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat ob;
        const bool regular = old >= 0 && fstat(old, &ob) == 0 && S_ISREG(ob.st_mode);
        const int err = old < 0 ? errno : EINVAL;
        if (old >= 0) close(old);
        if (!regular) {
            amp_set_error(AMP_ERR_IO, "cannot write checkpoint '%s': %s", path,
                          old < 0 ? strerror(err) : "not a regular file");
            free(*dest);
            *dest = NULL;
            return -1;
        }
        mode = ob.st_mode & 0777;
    }
    static unsigned counter; // (several saves of one process, from several threads)
    const size_t n = strlen(*dest) + 48;
    *tmp = amp_xmalloc(n);
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(*tmp, n, "%s.%d.%u.tmp", *dest, (int)getpid(),
                 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
        fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
        const int err = errno; // (the file may be writable: the directory is not)
        char *dir = parent_dir(*dest);
        amp_set_error(AMP_ERR_IO,
                      "cannot write checkpoint '%s': no file can be made in its directory '%s' "
                      "(%s), where a save writes before it renames the file over '%s'",
                      path, dir, strerror(err), path);
        free(dir);
    } else if (fd < 0) {
        amp_set_error(AMP_ERR_IO, "cannot write checkpoint '%s': %s", path, strerror(errno));
    }
    if (fd < 0) {
        free(*dest);
        free(*tmp);
        *dest = *tmp = NULL;
    } else if (exists) {
        (void)fchmod(fd, mode); // (as the file was, where the file system allows it)
    }
    return fd;
}

amp_status amp_checkpoint_writable(const char *path) {
    amp_clear_error();
    if (!path) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "checkpoint: path is NULL");
    char *dest, *tmp;
    int fd = open_temp_beside(path, &dest, &tmp);
    if (fd < 0) return AMP_ERR_IO;
    close(fd);
    unlink(tmp);
    free(dest);
    free(tmp);
    return AMP_OK;
}

amp_status amp_checkpoint_save(const char *path, amp_tensor_t *const *params, int n,
                               const amp_optim_t *opt, const amp_scaler_t *sc) {
    amp_clear_error();
    amp_status st = check_args(path, params, n, opt);
    if (st != AMP_OK) return st;

    writer w = {0};
    put_records(&w, params, n, opt, sc); // count
    uint64_t payload = w.bytes;
    uint32_t n_records = w.records;

    char *dest, *tmp;
    int fd = open_temp_beside(path, &dest, &tmp);
    if (fd < 0) return AMP_ERR_IO;
    w = (writer){.f = fdopen(fd, "wb")};
    if (!w.f) {
        st = amp_set_error(AMP_ERR_IO, "cannot write checkpoint '%s': %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        free(dest);
        return st;
    }
    crc32_table(w.crc_table);
    put(&w, CK_MAGIC, 8);
    put_u32(&w, CK_VERSION);
    put_u32(&w, n_records);
    put_u64(&w, payload);
    put_records(&w, params, n, opt, sc);
    AMP_ASSERT(w.bytes == CK_HEADER_BYTES + payload, "(checkpoint sizes disagree)");
    uint32_t crc = w.crc;
    uint8_t trailer[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16),
                          (uint8_t)(crc >> 24)};
    if (fwrite(trailer, 1, 4, w.f) != 4) w.failed = true;
    int err = 0;
    if (w.failed || fflush(w.f) != 0 || fsync(fileno(w.f)) != 0) err = errno ? errno : EIO;
    if (fclose(w.f) != 0 && !err) err = errno;
    if (!err && rename(tmp, dest) != 0) err = errno;
    if (err) {
        unlink(tmp);
        st = amp_set_error(AMP_ERR_IO, "cannot write checkpoint '%s': %s", path, strerror(err));
    } else {
        sync_parent_dir(dest);
    }
    free(tmp);
    free(dest);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Reading: a bounds-checked cursor, then the decoded file.

typedef struct reader {
    const uint8_t *p;
    size_t left;
    bool ok; // false once a read ran past the end
} reader;

static const uint8_t *take(reader *r, size_t n) {
    if (!r->ok || n > r->left) {
        r->ok = false;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static uint32_t get_u32(reader *r) {
    const uint8_t *b = take(r, 4);
    return b ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24
             : 0;
}

static uint64_t get_u64(reader *r) {
    uint64_t lo = get_u32(r);
    return lo | (uint64_t)get_u32(r) << 32;
}

static float get_f32(reader *r) {
    uint32_t u = get_u32(r);
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static double get_f64(reader *r) {
    uint64_t u = get_u64(r);
    double x;
    memcpy(&x, &u, 8);
    return x;
}

// A version 1 file's optimizer hyperparameter (an f32), widened.
static double get_f32_wide(reader *r) {
    return get_f32(r);
}

typedef struct ck_tensor {
    amp_dtype dtype;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    const uint8_t *data;
} ck_tensor;

typedef struct ck_record {
    uint32_t type;
    const char *name; // not NUL-terminated
    uint32_t name_len;
    ck_tensor tensor[2]; // PARAM: [0]; OPTIM_STATE: its n_state tensors
    uint32_t n_state;    // OPTIM_STATE
    int64_t steps;       // OPTIM_STATE
} ck_record;

typedef struct ck_file {
    const char *path;
    uint8_t *bytes;
    ck_record *recs;
    uint32_t n_recs, n_params, n_optim_states;
    uint32_t version;
    bool has_optim, has_scaler, has_rng;
    int64_t next_step; // the STEP record's; -1 without one
    amp_rng_state rng; // the RNG record's
    amp_optim_params optim;
    int64_t optim_steps;
    uint32_t optim_n_params, optim_n_state;
    bool scaler_enabled;
    amp_scaler_state scaler;
} ck_file;

static void ck_file_free(ck_file *f) {
    free(f->bytes);
    free(f->recs);
}

static amp_status corrupt(const ck_file *f, const char *what, const ck_record *rec) {
    if (rec)
        return amp_set_error(AMP_ERR_CORRUPT, "checkpoint '%s': record '%.*s': %s", f->path,
                             (int)rec->name_len, rec->name, what);
    return amp_set_error(AMP_ERR_CORRUPT, "checkpoint '%s': %s", f->path, what);
}

// The header (head: its first bytes, all of them when the file holds them) of a file of size
// bytes: magic, version, and a payload length that the size matches.
static amp_status check_header(ck_file *f, const uint8_t *head, size_t size, uint32_t *n_records,
                               uint64_t *payload) {
    char msg[160];
    size_t magic_n = size < 8 ? size : 8;
    if (memcmp(head, CK_MAGIC, magic_n) != 0)
        return corrupt(f, "bad magic (not an ampprobe checkpoint)", NULL);
    if (size < CK_HEADER_BYTES + 4) {
        snprintf(msg, sizeof msg, "truncated: %zu bytes, shorter than the header and trailer",
                 size);
        return corrupt(f, msg, NULL);
    }
    reader r = {.p = head + 8, .left = CK_HEADER_BYTES - 8, .ok = true};
    uint32_t version = get_u32(&r);
    *n_records = get_u32(&r);
    *payload = get_u64(&r);
    if (version < 1 || version > CK_VERSION) {
        snprintf(msg, sizeof msg, "unsupported version %u (this build reads 1 to %u)", version,
                 CK_VERSION);
        return corrupt(f, msg, NULL);
    }
    f->version = version;
    if (*payload != size - CK_HEADER_BYTES - 4) {
        snprintf(msg, sizeof msg, "%s: the header says %llu payload bytes, the file holds %zu",
                 *payload > size - CK_HEADER_BYTES - 4 ? "truncated" : "trailing bytes",
                 (unsigned long long)*payload, size - CK_HEADER_BYTES - 4);
        return corrupt(f, msg, NULL);
    }
    return AMP_OK;
}

// Reads f->path whole into f->bytes (*size bytes). The header is checked first, so that a large
// file that is no checkpoint is not read into memory.
static amp_status read_file(ck_file *f, size_t *size, uint32_t *n_records, uint64_t *payload) {
    const char *path = f->path;
    // O_NONBLOCK: a pipe at path is refused below instead of waited on for a writer
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *fp = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!fp) {
        const int err = errno;
        if (fd >= 0) close(fd);
        return amp_set_error(AMP_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(err));
    }
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        int err = errno;
        fclose(fp);
        return amp_set_error(AMP_ERR_IO, "cannot read checkpoint '%s': %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(fp);
        return amp_set_error(AMP_ERR_IO, "cannot read checkpoint '%s': not a regular file", path);
    }
    size_t n = (size_t)sb.st_size, head_n = n < CK_HEADER_BYTES ? n : CK_HEADER_BYTES;
    uint8_t head[CK_HEADER_BYTES], *buf = NULL;
    amp_status st = AMP_OK;
    size_t got = fread(head, 1, head_n, fp);
    if (got == head_n) {
        st = check_header(f, head, n, n_records, payload);
        if (st == AMP_OK && !(buf = malloc(n)))
            st = amp_set_error(AMP_ERR_IO, "cannot read checkpoint '%s': no memory for %zu bytes",
                               path, n);
        if (st == AMP_OK) {
            memcpy(buf, head, head_n);
            got += fread(buf + head_n, 1, n - head_n, fp);
        }
    }
    int err = ferror(fp) ? errno : 0;
    fclose(fp);
    if (st != AMP_OK) return st;
    if (got != n) {
        free(buf);
        return amp_set_error(AMP_ERR_IO, "cannot read checkpoint '%s': %s", path,
                             err ? strerror(err) : "file shrank while reading");
    }
    f->bytes = buf;
    *size = n;
    return AMP_OK;
}

static bool get_tensor(reader *r, ck_tensor *t) {
    uint32_t dtype = get_u32(r), ndim = get_u32(r);
    if (!r->ok || dtype >= AMP_DTYPE_COUNT || ndim > AMP_MAX_DIMS) return false;
    t->dtype = (amp_dtype)dtype;
    t->ndim = (int)ndim;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        uint64_t s = get_u64(r);
        if (!r->ok || s > INT64_MAX) return false;
        if (s != 0 && numel > INT64_MAX / s) return false;
        numel *= s;
        t->shape[d] = (int64_t)s;
    }
    size_t esize = amp_dtype_size(t->dtype);
    if (numel > r->left / esize) return false;
    t->data = take(r, (size_t)numel * esize);
    return r->ok;
}

// A saved step count: not negative, and one the next step can still increment.
static bool countable(int64_t steps) {
    return steps >= 0 && steps < INT64_MAX;
}

// Decodes one record's body (exactly body_len bytes) into rec / f.
static amp_status decode_body(ck_file *f, ck_record *rec, reader body) {
    switch (rec->type) {
    case REC_PARAM:
        if (!get_tensor(&body, &rec->tensor[0])) return corrupt(f, "bad tensor", rec);
        f->n_params++;
        break;
    case REC_OPTIM: {
        if (f->has_optim) return corrupt(f, "a second optimizer record", rec);
        f->has_optim = true;
        amp_optim_params *p = &f->optim;
        double (*get_real)(reader *) = f->version == 1 ? get_f32_wide : get_f64;
        uint32_t kind = get_u32(&body);
        p->kind = (amp_optim_kind)kind;
        p->lr = get_real(&body);
        p->momentum = get_real(&body);
        p->dampening = get_real(&body);
        uint32_t nesterov = get_u32(&body);
        p->nesterov = nesterov != 0;
        p->weight_decay = get_real(&body);
        p->beta1 = get_real(&body);
        p->beta2 = get_real(&body);
        p->eps = get_real(&body);
        f->optim_steps = (int64_t)get_u64(&body);
        f->optim_n_params = get_u32(&body);
        f->optim_n_state = get_u32(&body);
        if (!body.ok || kind > AMP_OPTIM_ADAMW || nesterov > 1 || !countable(f->optim_steps) ||
            f->optim_n_state > 2)
            return corrupt(f, "bad optimizer header", rec);
        break;
    }
    case REC_OPTIM_STATE:
        rec->steps = (int64_t)get_u64(&body);
        rec->n_state = get_u32(&body);
        if (!body.ok || !countable(rec->steps) || rec->n_state > 2)
            return corrupt(f, "bad optimizer state header", rec);
        for (uint32_t k = 0; k < rec->n_state; k++)
            if (!get_tensor(&body, &rec->tensor[k]))
                return corrupt(f, "bad optimizer state tensor", rec);
        f->n_optim_states++;
        break;
    case REC_SCALER: {
        if (f->has_scaler) return corrupt(f, "a second scaler record", rec);
        f->has_scaler = true;
        uint32_t enabled = get_u32(&body);
        f->scaler_enabled = enabled != 0;
        f->scaler.scale = get_f32(&body);
        f->scaler.growth_factor = get_f64(&body);
        f->scaler.backoff_factor = get_f64(&body);
        f->scaler.growth_interval = (int32_t)get_u32(&body);
        f->scaler.growth_tracker = (int32_t)get_u32(&body);
        if (!body.ok || enabled > 1) return corrupt(f, "bad scaler state", rec);
        break;
    }
    case REC_STEP:
        if (f->next_step >= 0) return corrupt(f, "a second step record", rec);
        f->next_step = (int64_t)get_u64(&body);
        if (!body.ok || !countable(f->next_step)) return corrupt(f, "bad step record", rec);
        break;
    case REC_RNG:
        if (f->has_rng) return corrupt(f, "a second rng record", rec);
        f->has_rng = true;
        f->rng.seed = get_u64(&body);
        f->rng.host = get_u64(&body);
        f->rng.dropout_offset = get_u64(&body);
        if (!body.ok) return corrupt(f, "bad rng record", rec);
        break;
    default:
        return corrupt(f, "unknown record type", rec);
    }
    if (body.left != 0) return corrupt(f, "record body longer than its contents", rec);
    return AMP_OK;
}

// Orders records by type, then name (qsort of pointers to them).
static int cmp_record(const void *x, const void *y) {
    const ck_record *a = *(const ck_record *const *)x, *b = *(const ck_record *const *)y;
    if (a->type != b->type) return a->type < b->type ? -1 : 1;
    int c = memcmp(a->name, b->name, a->name_len < b->name_len ? a->name_len : b->name_len);
    if (c != 0) return c;
    return a->name_len < b->name_len ? -1 : a->name_len > b->name_len;
}

// A record whose type and name an earlier one has: found by sorting, as comparing every pair
// would take minutes for a hostile file of a few MB holding 100k small records.
static const ck_record *find_duplicate(const ck_file *f) {
    const ck_record **sorted = amp_xmalloc((size_t)f->n_recs * sizeof *sorted);
    for (uint32_t i = 0; i < f->n_recs; i++)
        sorted[i] = &f->recs[i];
    amp_sort(sorted, f->n_recs, sizeof *sorted, cmp_record);
    const ck_record *dup = NULL;
    for (uint32_t i = 1; i < f->n_recs && !dup; i++)
        if (cmp_record(&sorted[i - 1], &sorted[i]) == 0) dup = sorted[i];
    free(sorted);
    return dup;
}

// Reads and checks the whole file: header, size, CRC, every record.
static amp_status ck_file_read(const char *path, ck_file *f) {
    *f = (ck_file){.path = path, .next_step = -1};
    size_t size = 0;
    uint32_t n_records = 0;
    uint64_t payload = 0;
    amp_status st = read_file(f, &size, &n_records, &payload);
    if (st != AMP_OK) return st;
    char msg[160];

    uint32_t crc = amp_crc32(f->bytes, size - 4);
    reader tr = {.p = f->bytes + size - 4, .left = 4, .ok = true};
    uint32_t stored = get_u32(&tr);
    if (crc != stored) {
        snprintf(msg, sizeof msg, "CRC mismatch (stored %08x, computed %08x)", stored, crc);
        return corrupt(f, msg, NULL);
    }
    if (n_records > payload / CK_RECORD_MIN_BYTES)
        return corrupt(f, "record count larger than the payload can hold", NULL);

    f->recs = amp_xcalloc(n_records ? n_records : 1, sizeof *f->recs);
    reader r = {.p = f->bytes + CK_HEADER_BYTES, .left = (size_t)payload, .ok = true};
    for (uint32_t i = 0; i < n_records; i++) {
        ck_record *rec = &f->recs[i];
        rec->type = get_u32(&r);
        rec->name_len = get_u32(&r);
        rec->name = (const char *)take(&r, rec->name_len);
        uint64_t body_len = get_u64(&r);
        if (!r.ok || body_len > r.left) {
            snprintf(msg, sizeof msg, "record %u runs past the end of the payload", i);
            return corrupt(f, msg, NULL);
        }
        reader body = {.p = take(&r, (size_t)body_len), .left = (size_t)body_len, .ok = true};
        if ((st = decode_body(f, rec, body)) != AMP_OK) return st;
        f->n_recs++;
    }
    const ck_record *dup = find_duplicate(f);
    if (dup) return corrupt(f, "duplicate name", dup);
    if (r.left != 0) {
        snprintf(msg, sizeof msg, "%zu bytes after the last of %u records", r.left, n_records);
        return corrupt(f, msg, NULL);
    }
    if (f->n_optim_states != (f->has_optim ? f->optim_n_params : 0))
        return corrupt(f, "optimizer state records do not match the optimizer's parameter count",
                       NULL);
    for (uint32_t i = 0; i < f->n_recs; i++)
        if (f->recs[i].type == REC_OPTIM_STATE && f->recs[i].n_state != f->optim_n_state)
            return corrupt(f, "state tensor count differs from the optimizer's", &f->recs[i]);
    return AMP_OK;
}

// ---------------------------------------------------------------------------------------------
// Matching the file against the caller's objects (nothing is modified)

static const ck_record *find(const ck_file *f, uint32_t type, const char *name) {
    size_t len = strlen(name);
    for (uint32_t i = 0; i < f->n_recs; i++) {
        const ck_record *r = &f->recs[i];
        if (r->type == type && r->name_len == len && memcmp(r->name, name, len) == 0) return r;
    }
    return NULL;
}

static const char *ck_shape_str(const ck_tensor *t, char *buf, size_t n) {
    amp_tensor_t tmp = {.ndim = t->ndim};
    memcpy(tmp.shape, t->shape, sizeof tmp.shape);
    return amp_shape_str(&tmp, buf, n);
}

// A file tensor that must have t's dtype and shape. what: "parameter" / "optimizer state of".
static amp_status match_tensor(const ck_file *f, const char *what, const char *name,
                               const ck_tensor *c, const amp_tensor_t *t) {
    char s1[96], s2[96];
    if (c->dtype != t->dtype)
        return amp_set_error(AMP_ERR_MISMATCH,
                             "checkpoint '%s': %s '%s' is %s in the file, %s here", f->path, what,
                             name, amp_dtype_name(c->dtype), amp_dtype_name(t->dtype));
    bool same = c->ndim == t->ndim;
    for (int d = 0; same && d < c->ndim; d++)
        same = c->shape[d] == t->shape[d];
    if (!same)
        return amp_set_error(
            AMP_ERR_MISMATCH, "checkpoint '%s': %s '%s' has shape %s in the file, %s here", f->path,
            what, name, ck_shape_str(c, s1, sizeof s1), amp_shape_str(t, s2, sizeof s2));
    return AMP_OK;
}

static amp_status match_params(const ck_file *f, amp_tensor_t *const *params, int n) {
    if (f->n_params != (uint32_t)n)
        return amp_set_error(AMP_ERR_MISMATCH,
                             "checkpoint '%s' holds %u parameters, the model has %d", f->path,
                             f->n_params, n);
    char buf[32];
    for (int i = 0; i < n; i++) {
        const char *name = ck_name(params[i], i, buf);
        const ck_record *r = find(f, REC_PARAM, name);
        if (!r)
            return amp_set_error(AMP_ERR_MISMATCH, "checkpoint '%s' has no parameter '%s'", f->path,
                                 name);
        amp_status st = match_tensor(f, "parameter", name, &r->tensor[0], params[i]);
        if (st != AMP_OK) return st;
    }
    return AMP_OK;
}

static amp_status match_optim(const ck_file *f, const amp_optim_t *opt) {
    if (!f->has_optim)
        return amp_set_error(AMP_ERR_MISMATCH, "checkpoint '%s' has no optimizer state", f->path);
    const amp_optim_params *p = amp_optim_get_params(opt);
    if (f->optim.kind != p->kind)
        return amp_set_error(AMP_ERR_MISMATCH,
                             "checkpoint '%s' holds %s state, the optimizer is %s", f->path,
                             amp_optim_kind_name(f->optim.kind), amp_optim_kind_name(p->kind));
    int np = amp_optim_num_params(opt);
    if (f->optim_n_params != (uint32_t)np)
        return amp_set_error(AMP_ERR_MISMATCH,
                             "checkpoint '%s': the optimizer had %u parameters, this one has %d",
                             f->path, f->optim_n_params, np);
    uint32_t n_state = amp_optim_state(opt, 0, 1) ? 2 : amp_optim_state(opt, 0, 0) ? 1 : 0;
    if (f->optim_n_state != n_state)
        return amp_set_error(AMP_ERR_MISMATCH,
                             "checkpoint '%s': %u state tensors per parameter in the file, %u "
                             "here (SGD with and without momentum?)",
                             f->path, f->optim_n_state, n_state);
    char buf[32];
    for (int i = 0; i < np; i++) {
        const char *name = ck_name(amp_optim_param(opt, i), i, buf);
        const ck_record *r = find(f, REC_OPTIM_STATE, name);
        if (!r)
            return amp_set_error(AMP_ERR_MISMATCH,
                                 "checkpoint '%s' has no optimizer state for '%s'", f->path, name);
        for (uint32_t k = 0; k < n_state; k++) {
            amp_status st = match_tensor(f, "optimizer state of", name, &r->tensor[k],
                                         amp_optim_state(opt, i, (int)k));
            if (st != AMP_OK) return st;
        }
    }
    return AMP_OK;
}

static amp_status match_scaler(const ck_file *f) {
    if (!f->has_scaler)
        return amp_set_error(AMP_ERR_MISMATCH, "checkpoint '%s' has no GradScaler state", f->path);
    if (!f->scaler_enabled)
        return amp_set_error(AMP_ERR_MISMATCH,
                             "The source state dict is empty, possibly because it was saved from "
                             "a disabled instance of GradScaler. (checkpoint '%s')",
                             f->path);
    return AMP_OK;
}

// A record that decoded fine but holds values the optimizer or scaler refuses (a negative lr, a
// growth factor <= 1): corrupt, with their message and the path.
static amp_status refused(const char *path) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    return amp_set_error(AMP_ERR_CORRUPT, "checkpoint '%s': %s", path, msg);
}

amp_status amp_checkpoint_scaler_enabled(const char *path, bool *enabled) {
    amp_clear_error();
    if (!enabled) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "checkpoint: enabled is NULL");
    *enabled = false;
    if (!path) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "checkpoint: path is NULL");
    ck_file f;
    amp_status st = ck_file_read(path, &f);
    if (st == AMP_OK) *enabled = f.has_scaler && f.scaler_enabled;
    ck_file_free(&f);
    return st;
}

amp_status amp_checkpoint_next_step(const char *path, int64_t *step) {
    amp_clear_error();
    if (!step) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "checkpoint: step is NULL");
    *step = -1;
    if (!path) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "checkpoint: path is NULL");
    ck_file f;
    amp_status st = ck_file_read(path, &f);
    if (st == AMP_OK) *step = f.next_step;
    ck_file_free(&f);
    return st;
}

amp_status amp_checkpoint_load(const char *path, amp_tensor_t *const *params, int n,
                               amp_optim_t *opt, amp_scaler_t *sc) {
    amp_clear_error();
    amp_status st = check_args(path, params, n, opt);
    if (st != AMP_OK) return st;
    ck_file f;
    st = ck_file_read(path, &f);
    bool load_scaler = sc && amp_scaler_is_enabled(sc);
    if (st == AMP_OK) st = match_params(&f, params, n);
    if (st == AMP_OK && opt) st = match_optim(&f, opt);
    if (st == AMP_OK && load_scaler) st = match_scaler(&f);
    if (st != AMP_OK) {
        ck_file_free(&f);
        return st;
    }

    // The two steps that validate values; the first is undone if the second refuses.
    amp_optim_params old_p = opt ? *amp_optim_get_params(opt) : (amp_optim_params){0};
    if (opt && amp_optim_set_params(opt, &f.optim) != AMP_OK) {
        ck_file_free(&f);
        return refused(path);
    }
    if (load_scaler && amp_scaler_load_state_dict(sc, &f.scaler) != AMP_OK) {
        st = refused(path); // (before the undo, a call that empties amp_last_error)
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", amp_last_error());
        if (opt) amp_optim_set_params(opt, &old_p);
        ck_file_free(&f);
        return amp_set_error(st, "%s", msg);
    }

    char buf[32];
    for (int i = 0; i < n; i++)
        amp_tensor_write(params[i],
                         find(&f, REC_PARAM, ck_name(params[i], i, buf))->tensor[0].data);
    if (opt) {
        int np = amp_optim_num_params(opt);
        int64_t *steps = amp_xmalloc((size_t)np * sizeof *steps);
        for (int i = 0; i < np; i++) {
            const ck_record *r =
                find(&f, REC_OPTIM_STATE, ck_name(amp_optim_param(opt, i), i, buf));
            steps[i] = r->steps;
            for (uint32_t k = 0; k < r->n_state; k++)
                amp_tensor_write(amp_optim_state(opt, i, (int)k), r->tensor[k].data);
        }
        amp_optim_set_steps(opt, f.optim_steps, steps);
        free(steps);
        if (f.has_rng) amp_ctx_set_rng_state(amp_optim_ctx(opt), f.rng);
    }
    ck_file_free(&f);
    return AMP_OK;
}
