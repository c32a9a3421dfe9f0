/*
 * status.c — status names and messages (from AMP_STATUS_MAP), the thread's last-error message,
 * the abort path for broken invariants, allocation helpers that abort on failure, and the one
 * place that makes temporary directories.
 */
#include "amp-impl.h"
#include "amp-record.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local char last_error[1024];
static amp_abort_hook abort_hook;

const char *amp_status_name(amp_status s) {
    switch (s) {
#define AMP_STATUS_CASE(name, msg)                                                                 \
    case AMP_##name:                                                                               \
        return #name;
        AMP_STATUS_MAP(AMP_STATUS_CASE)
#undef AMP_STATUS_CASE
    }
    return "UNKNOWN";
}

const char *amp_status_str(amp_status s) {
    switch (s) {
#define AMP_STATUS_CASE(name, msg)                                                                 \
    case AMP_##name:                                                                               \
        return msg;
        AMP_STATUS_MAP(AMP_STATUS_CASE)
#undef AMP_STATUS_CASE
    }
    return "unknown status";
}

const char *amp_last_error(void) {
    return last_error;
}

void amp_clear_error(void) {
    last_error[0] = 0;
}

void amp_error_keep(amp_error_kept *k) {
    snprintf(k->msg, sizeof k->msg, "%s", last_error);
}

void amp_error_put_back(const amp_error_kept *k) {
    snprintf(last_error, sizeof last_error, "%s", k->msg);
}

amp_status amp_set_error(amp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

amp_abort_hook amp_set_abort_hook(amp_abort_hook hook) {
    amp_abort_hook old = abort_hook;
    abort_hook = hook;
    return old;
}

void amp_abort(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "libampcore %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (abort_hook) abort_hook(msg);
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    static int aborting; // (an abort while writing the last words writes none)
    if (!__atomic_exchange_n(&aborting, 1, __ATOMIC_ACQ_REL)) amp_record_last_words(msg);
    abort();
}

void amp_abort_assert(const char *file, int line, const char *cond, const char *fmt, ...) {
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    amp_abort(file, line, "assertion failed: %s%s", cond, detail);
}

void *amp_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) amp_abort(__FILE__, __LINE__, "out of memory allocating %zu bytes", n);
    return p;
}

void *amp_xcalloc(size_t n, size_t m) {
    void *p = calloc(n ? n : 1, m ? m : 1);
    if (!p) amp_abort(__FILE__, __LINE__, "out of memory allocating %zu x %zu bytes", n, m);
    return p;
}

void *amp_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) amp_abort(__FILE__, __LINE__, "out of memory reallocating %zu bytes", n);
    return q;
}

char *amp_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(amp_xmalloc(n), s, n);
}

char *amp_one_line(char *s) {
    for (unsigned char *p = (unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = '?';
    return s;
}

// mkdtemp() takes a path that ends in this many 'X' and replaces them with a unique suffix.
enum { MKDTEMP_SUFFIX = 6 };

char *amp_make_temp_dir(char *buf, size_t n, const char *prefix) {
    size_t len = strlen(prefix);
    if (len + MKDTEMP_SUFFIX >= n) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    memcpy(buf, prefix, len);
    memset(buf + len, 'X', MKDTEMP_SUFFIX);
    buf[len + MKDTEMP_SUFFIX] = '\0';
    return mkdtemp(buf);
}

const char *amp_parse_count(const char *s, int *out) {
    if (!s || !*s || strspn(s, "0123456789") != strlen(s))
        return "expected a positive number of steps";
    errno = 0;
    long v = strtol(s, NULL, 10);
    if (v == 0) return "expected a positive number of steps";
    if (errno == ERANGE || v > INT_MAX) return "too large (at most 2147483647)";
    *out = (int)v;
    return NULL;
}

bool amp_parse_trace(const char *s, unsigned *mask) {
    unsigned m = 0;
    for (const char *p = s ? s : ""; *p || !m;) {
        const size_t n = strcspn(p, ",");
        if (n == 3 && strncmp(p, "amp", 3) == 0)
            m |= AMP_TRACE_AMP;
        else if (n == 4 && strncmp(p, "cuda", 4) == 0)
            m |= AMP_TRACE_CUDA;
        else if (n == 4 && strncmp(p, "nvtx", 4) == 0)
            m |= AMP_TRACE_NVTX;
        else
            return false; // another word, or none (an empty list, a comma at an end, two commas)
        p += n;
        if (*p && !*++p) return false; // a comma at the end
    }
    *mask = m;
    return true;
}

void amp_trace_names(unsigned mask, char *out, size_t n) {
    snprintf(out, n, "%s%s%s%s%s", mask & AMP_TRACE_AMP ? "amp" : "",
             mask & AMP_TRACE_AMP && mask & (AMP_TRACE_CUDA | AMP_TRACE_NVTX) ? "," : "",
             mask & AMP_TRACE_CUDA ? "cuda" : "",
             mask & AMP_TRACE_CUDA && mask & AMP_TRACE_NVTX ? "," : "",
             mask & AMP_TRACE_NVTX ? "nvtx" : "");
}

char *amp_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = amp_xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

char *amp_shell_join(char *const *argv) {
    size_t cap = 1;
    for (char *const *a = argv; *a; a++)
        cap += 4 * strlen(*a) + 3;
    char *out = amp_xmalloc(cap), *p = out;
    for (char *const *a = argv; *a; a++) {
        if (a != argv) *p++ = ' ';
        bool plain = **a && strspn(*a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789-_./=:,+@%") == strlen(*a);
        if (plain) {
            p = stpcpy(p, *a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = *a; *c; c++) {
            if (*c == '\'')
                p = stpcpy(p, "'\\''");
            else
                *p++ = *c;
        }
        *p++ = '\'';
    }
    *p = 0;
    return out;
}

char *amp_exe_dir(char *buf, size_t n) {
    ssize_t len = n > 1 ? readlink("/proc/self/exe", buf, n - 1) : -1;
    if (len <= 0) return NULL;
    buf[len] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash) return NULL;
    *slash = '\0';
    return buf;
}
