/*
 * conform-run.c — the bookkeeping of an `ampprobe conform` run: counting verdicts, printing them
 * in one format ("FAIL scaler_updates.txt:S6_collapse update 166: ..."), reporting malformed
 * files by file and line, and keeping a libampcore abort from ending the whole run.
 */
#include "conform.h"

#include "amp-impl.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

void conform_put_line(FILE *out, const char *s) {
    for (size_t n; *s; s += n) {
        const unsigned char c = (unsigned char)*s;
        n = amp_utf8_seq(s, SIZE_MAX);
        if (n && c >= 0x20 && c != 0x7f && !amp_c1_control(s)) {
            fwrite(s, 1, n, out);
            continue;
        }
        n = n ? n : 1;
        for (size_t k = 0; k < n; k++)
            fprintf(out, "\\x%02x", (unsigned char)s[k]);
    }
    fputc('\n', out);
}

static void verdict(struct conform_run *r, const char *tag, const char *file, const char *cas,
                    const char *fmt, va_list ap) {
    char detail[1536], line[sizeof detail + 1024]; // (the file's name and the case's)
    vsnprintf(detail, sizeof detail, fmt, ap);
    snprintf(line, sizeof line, "%s %s%s%s%s%s", tag, file, cas ? ":" : "", cas ? cas : "",
             detail[0] ? " " : "", detail);
    conform_put_line(r->out, line);
}

void conform_pass(struct conform_run *r, const char *file, const char *cas, const char *fmt, ...) {
    r->passed++;
    if (!r->verbose) return;
    va_list ap;
    va_start(ap, fmt);
    verdict(r, "ok", file, cas, fmt, ap);
    va_end(ap);
}

void conform_fail(struct conform_run *r, const char *file, const char *cas, const char *fmt, ...) {
    r->failed++;
    va_list ap;
    va_start(ap, fmt);
    verdict(r, "FAIL", file, cas, fmt, ap);
    va_end(ap);
}

void conform_unsupported(struct conform_run *r, const char *file, const char *cas, const char *fmt,
                         ...) {
    r->unsupported++;
    va_list ap;
    va_start(ap, fmt);
    verdict(r, "UNSUPPORTED", file, cas, fmt, ap);
    va_end(ap);
}

void conform_note(struct conform_run *r, const char *file, const char *cas, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verdict(r, "NOTE", file, cas, fmt, ap);
    va_end(ap);
}

void conform_not_checked(struct conform_run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t need = r->unchecked_len + 2 + (size_t)n + 1;
    if (need > r->unchecked_cap) {
        r->unchecked_cap = need > 2 * r->unchecked_cap ? need : 2 * r->unchecked_cap;
        r->unchecked = amp_xrealloc(r->unchecked, r->unchecked_cap);
    }
    memcpy(r->unchecked + r->unchecked_len, "; ", 2);
    va_start(ap, fmt);
    vsnprintf(r->unchecked + r->unchecked_len + 2, (size_t)n + 1, fmt, ap);
    va_end(ap);
    r->unchecked_len += 2 + (size_t)n;
}

void conform_error(struct conform_run *r, const char *file, int line, const char *fmt, ...) {
    r->errors++;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(r->out); // keep verdicts and errors in order on a terminal
    char said[PATH_MAX + NAME_MAX + sizeof msg + 64];
    if (line > 0)
        snprintf(said, sizeof said, "ampprobe conform: %s/%s:%d: %s", r->dir, file, line, msg);
    else
        snprintf(said, sizeof said, "ampprobe conform: %s/%s: %s", r->dir, file, msg);
    conform_put_line(r->err, said);

    // The summary names the reference file whose cases were skipped, which is not always the
    // file at fault (an e2e case's X.f32, a conversion's output), and says whether some of its
    // cases ran before the error.
    const char *checking = r->checking ? r->checking : file;
    bool partly = r->passed + r->failed + r->unsupported > r->verdicts_before;
    char where[600] = "";
    if (strcmp(file, checking) != 0 && line > 0)
        snprintf(where, sizeof where, "%s:%d: ", file, line);
    else if (strcmp(file, checking) != 0)
        snprintf(where, sizeof where, "%s: ", file);
    else if (line > 0)
        snprintf(where, sizeof where, "line %d: ", line);
    conform_not_checked(r, "%s %s: %s%s", checking, partly ? "only partly checked" : "not checked",
                        where, msg);
}

// ---------------------------------------------------------------------------------------------
// Abort shield: libampcore calls its abort hook before abort(); the hook jumps back to the
// guarded call, which has not returned yet, so the jump is well defined.

static jmp_buf guard_env;
static char guard_msg[1024];
static amp_abort_hook guard_prev;

static void guard_hook(const char *msg) {
    snprintf(guard_msg, sizeof guard_msg, "%s", msg);
    longjmp(guard_env, 1);
}

bool conform_guarded(void (*fn)(void *arg), void *arg, char *msg, size_t msg_size) {
    guard_prev = amp_set_abort_hook(guard_hook);
    if (setjmp(guard_env) != 0) {
        amp_set_abort_hook(guard_prev);
        snprintf(msg, msg_size, "%s", guard_msg);
        return false;
    }
    fn(arg);
    amp_set_abort_hook(guard_prev);
    return true;
}
