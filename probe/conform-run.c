/*
 * conform-run.c — the bookkeeping of an `ampprobe conform` run: counting verdicts, printing them
 * in one format ("FAIL scaler_updates.txt:S6_collapse update 166: ..."), reporting malformed
 * files by file and line, and keeping a libampcore abort from ending the whole run.
 */
#include "conform.h"

#include "amp-impl.h"

#include <setjmp.h>
#include <stdarg.h>

static void verdict(struct conform_run *r, const char *tag, const char *file, const char *cas,
                    const char *fmt, va_list ap) {
    char detail[1536];
    vsnprintf(detail, sizeof detail, fmt, ap);
    fprintf(r->out, "%s %s%s%s%s%s\n", tag, file, cas ? ":" : "", cas ? cas : "",
            detail[0] ? " " : "", detail);
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

void conform_error(struct conform_run *r, const char *file, int line, const char *fmt, ...) {
    r->errors++;
    fflush(r->out); // keep verdicts and errors in order on a terminal
    if (line > 0)
        fprintf(r->err, "ampprobe conform: %s/%s:%d: ", r->dir, file, line);
    else
        fprintf(r->err, "ampprobe conform: %s/%s: ", r->dir, file);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(r->err, fmt, ap);
    va_end(ap);
    fputc('\n', r->err);
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
