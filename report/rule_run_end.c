/*
 * rule_run_end.c — rule `run-end`: how the program ended, and whether the capture did. A run's
 * numbers can look healthy while the program died after its last recorded step; the report must
 * not call such a run healthy without saying so.
 *
 * The program's exit status (META exit_status, 128+N for signal N; META exit_signal, written since
 * 2026-12-02, tells a signal from a program that exited with 128+N itself): a crash signal
 * (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) is an error; SIGKILL (the kernel's OOM killer, a
 * scheduler's limit), another signal or a non-zero status a warning; SIGINT, SIGTERM or SIGHUP a
 * note (it was stopped). The capture: a database whose status is still `running` while its
 * collector is gone lost what the launcher had not yet written (a warning); one whose collector
 * still runs is a run in progress (a note); processes whose records were cut short (truncated,
 * corrupt, unfinished) are a warning, and so is a recording that stopped short of the run (META
 * capture_error: the database could not be written, a full disk cut a process's spool), which
 * is then why those processes' records were cut. A PyTorch bridge that could not attach under
 * `ampprobe run --torch` (META bridge_error) is a warning too: the run has no numerics; so is one
 * that found no model to watch (META no_model) in a run where no process recorded a step. So
 * are processes the program started and left running when it exited (META orphans: `train &`
 * as a script's last line): what they record after it is not in the database. A focus (--steps)
 * that ends before the last recorded step makes the program's end a note: its steps ran on.
 */
#define _GNU_SOURCE // sigabbrev_np
#include "report.h"

#include <math.h>
#include <signal.h>
#include <string.h>

#define RULE "run-end"

int report_end_signal(const report_end *e) {
    if (e->exit_status <= 0) return 0;
    if (e->exit_signal >= 0) return e->exit_signal;
    return e->exit_status > 128 && e->exit_status < 128 + 65 ? e->exit_status - 128 : 0;
}

bool report_signal_stops(int sig) {
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
}

const char *report_signal_name(int sig, char *buf, size_t n) {
    const char *abbrev = sigabbrev_np(sig); // "SEGV"
    if (abbrev)
        snprintf(buf, n, "SIG%s", abbrev);
    else
        snprintf(buf, n, "signal %d", sig);
    return buf;
}

// "after step 305" / "before its first step" / "with no step recorded (...)": a PyTorch program
// the bridge did not attach to may have trained for a while.
static void when(const report_model *m, char *buf, size_t n) {
    if (m->end.last_step >= 0)
        snprintf(buf, n, "after step %lld", (long long)m->end.last_step);
    else if (m->bridge_error)
        snprintf(buf, n, "with no step recorded (the PyTorch bridge did not attach)");
    else if (m->no_model)
        snprintf(buf, n, "with no step recorded (the PyTorch bridge found no model to watch)");
    else
        snprintf(buf, n, "before its first step");
}

static void steps_of(report_finding *f, const report_end *e) {
    f->first_step = f->last_step = e->last_step;
}

// The program ended by signal sig (exit status 128+sig): a crash, a stop, SIGKILL or another
// signal. `at` says when; loss_note goes after the detail.
static report_finding *ended_by_signal(const report_model *m, report_findings *out, int sig,
                                       const char *at, const char *loss_note) {
    const int status = m->end.exit_status;
    char label[32];
    report_signal_name(sig, label, sizeof label);
    const bool crash =
        sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT || sig == SIGFPE || sig == SIGILL;
    const bool stopped = report_signal_stops(sig);
    report_finding *f = report_finding_add(out, RULE,
                                           crash     ? AMP_SEVERITY_ERROR
                                           : stopped ? AMP_SEVERITY_INFO
                                                     : AMP_SEVERITY_WARNING);
    if (crash) {
        snprintf(f->title, sizeof f->title, "the program crashed with %s %s", label, at);
        const char *why = m->exception; // libampcore's abort message, or an exception's
        snprintf(f->detail, sizeof f->detail, "It ended by signal %d (exit status %d)%s%.700s.%s",
                 sig, status, why ? ": " : "", why ? why : "", loss_note);
        snprintf(f->advice, sizeof f->advice,
                 "Find the crash in the program's output (SIGABRT: a failed assertion or an "
                 "uncaught C++ exception prints its message first), then run it again under "
                 "a debugger (gdb --args ...) or with core dumps on (ulimit -c unlimited); a "
                 "CUDA program's illegal memory access shows up under compute-sanitizer.");
    } else if (stopped) {
        snprintf(f->title, sizeof f->title, "the program was stopped by %s %s", label, at);
        const char *who = sig == SIGINT    ? "Ctrl-C in its terminal"
                          : sig == SIGTERM ? "kill, or a job scheduler ending it"
                                           : "its terminal went away (an ssh session dropped)";
        snprintf(f->detail, sizeof f->detail, "It ended by signal %d (exit status %d): %s.%s", sig,
                 status, who, loss_note);
        snprintf(f->advice, sizeof f->advice,
                 "Nothing to fix if it was stopped on purpose. A batch scheduler sends SIGTERM "
                 "at the job's time limit, so save checkpoints before it; run long jobs under "
                 "tmux, screen or nohup so that a dropped connection does not end them.");
    } else if (sig == SIGKILL) {
        f->leads = true; // (the OOM killer: what the user asks first)
        snprintf(f->title, sizeof f->title, "the program was killed by SIGKILL %s", at);
        snprintf(f->detail, sizeof f->detail,
                 "It ended by signal %d (exit status %d), which nothing can catch: the "
                 "kernel's out-of-memory killer sends it when the machine runs out of memory, "
                 "and so does a batch scheduler past the job's memory or time limit.%s",
                 sig, status, loss_note);
        snprintf(f->advice, sizeof f->advice,
                 "Look for the OOM killer in the kernel log (dmesg | grep -i -E 'killed "
                 "process|out of memory'); if it was that, lower the host memory the program "
                 "holds (DataLoader workers and prefetch, pinned buffers, datasets loaded "
                 "whole) or ask the scheduler for more.");
    } else {
        snprintf(f->title, sizeof f->title, "the program was ended by %s %s", label, at);
        snprintf(f->detail, sizeof f->detail, "It ended by signal %d (exit status %d).%s", sig,
                 status, loss_note);
        snprintf(f->advice, sizeof f->advice,
                 "Find who sent the signal (SIGPIPE: its output went to a pipe that was "
                 "closed; SIGXCPU/SIGXFSZ: a resource limit, ulimit -a).");
    }
    report_finding_evidence(f, "signal", sig);
    return f;
}

// The program exited with a failure status of its own.
static report_finding *failed(const report_model *m, report_findings *out, const char *at,
                              const char *loss_note) {
    const int status = m->end.exit_status;
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_WARNING);
    f->leads = true; // (why it failed: what the user asks first)
    snprintf(f->title, sizeof f->title, "the program failed with exit status %d %s", status, at);
    const char *exc = m->exception;
    if (exc)
        snprintf(f->detail, sizeof f->detail, "It raised %.700s%s%s", exc,
                 exc[0] && exc[strlen(exc) - 1] == '.' ? "" : ".", loss_note);
    else
        snprintf(f->detail, sizeof f->detail,
                 "A non-zero status is the program's own report of a failure (Python exits "
                 "with 1 on an uncaught exception, CUDA out-of-memory among them); its "
                 "output says which.%s",
                 loss_note);
    if (exc && (strstr(exc, "out of memory") || strstr(exc, "OutOfMemoryError")))
        snprintf(f->advice, sizeof f->advice,
                 "The GPU ran out of memory: lower the batch size (accumulate gradients over "
                 "micro-batches to keep the effective one), recompute activations in the "
                 "backward (torch.utils.checkpoint), and set "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when the message shows much "
                 "memory reserved but unallocated (fragmentation).");
    else
        snprintf(f->advice, sizeof f->advice,
                 "Read the end of the program's output (with ampprobe run --tui, the log file "
                 "named on screen) for the error%s.",
                 exc ? " and where it was raised" : "");
    return f;
}

// The program's end, from its exit status.
static void program_end(const report_model *m, report_findings *out) {
    const report_end *e = &m->end;
    const int status = e->exit_status;
    if (status <= 0) return;
    char at[96];
    when(m, at, sizeof at);
    // what the findings cover, and a non-finite last loss (said after each detail)
    const char *loss_note =
        e->last_step < 0 ? ""
        : e->last_loss_nonfinite
            ? " The findings cover the steps it recorded. Its last recorded step had a "
              "non-finite loss: a script that stops on a NaN/inf loss ends this way (the "
              "nonfinite-root-cause finding says where it came from)."
            : " The findings cover the steps it recorded.";
    const int sig = report_end_signal(e);
    report_finding *f =
        sig > 0 ? ended_by_signal(m, out, sig, at, loss_note) : failed(m, out, at, loss_note);
    steps_of(f, e);
    // a focus (--steps) that ends before the program's last step judges steps that ran on
    if (report_focused(m) && e->last_step > m->step_hi) {
        f->severity = AMP_SEVERITY_INFO;
        f->leads = false;
        report_appendf(
            f->detail, sizeof f->detail,
            " That was after the focused steps (--steps, to step %lld), which ran on past "
            "them: a note here, judged by the report of the whole run.",
            (long long)m->step_hi);
    }
    report_finding_evidence(f, "exit_status", status);
    report_finding_evidence(f, "last_step", e->last_step >= 0 ? (double)e->last_step : NAN);
}

// A run still being recorded.
static void still_recording(const report_model *m, report_findings *out, const char *at) {
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_INFO);
    snprintf(f->title, sizeof f->title, "the run is still being recorded: this report stops %s",
             at);
    snprintf(f->detail, sizeof f->detail,
             "The database's status is running and its collector still runs on this "
             "machine.");
    snprintf(f->advice, sizeof f->advice,
             "Report again when the run has ended, or follow it live with ampprobe tui FILE.");
    steps_of(f, &m->end);
}

// A capture whose recording process was killed before it finished the database.
static void cut_short(const report_model *m, report_findings *out, const char *at) {
    const report_end *e = &m->end;
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_WARNING);
    snprintf(f->title, sizeof f->title,
             "the capture did not finish: the recording process was killed %s", at);
    char spool[600] = "";
    if (e->spool)
        snprintf(spool, sizeof spool,
                 " Its spool directory %s (%.1f MB on disk) holds the records that never "
                 "reached the database; nothing reads it any more.",
                 e->spool, (double)e->spool_bytes / 1e6);
    snprintf(f->detail, sizeof f->detail,
             "The database's status is still running, but the process that wrote it (ampprobe "
             "run, or the program itself with AMPPROBE_OUT) is gone: what it had not yet "
             "written is lost (a program that ran on stopped recording within a tenth of a "
             "second), and "
             "its exit status is unknown. The rows written before are intact.%s",
             spool);
    snprintf(f->advice, sizeof f->advice,
             "Stop a recorded run with Ctrl-C or SIGTERM, which ampprobe run passes on to the "
             "program before it finishes the database; SIGKILL on the launcher (kill -9, the "
             "OOM killer, a scheduler) leaves it like this.%s",
             e->spool ? " Delete the spool directory named above." : "");
    steps_of(f, e);
}

// Recording that stopped while the program went on (the disk filled).
static void recording_stopped(const report_model *m, report_findings *out, const char *at) {
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_WARNING);
    snprintf(f->title, sizeof f->title, "recording stopped short of the run %s", at);
    snprintf(f->detail, sizeof f->detail,
             "The program went on, but ampprobe could not keep what it recorded: %s. The "
             "findings cover what was recorded.",
             m->capture_error);
    // a write that failed lost its records, earlier steps' among them
    report_summary s;
    report_summarize(m, &s);
    const int64_t span = s.last_step - s.first_step + 1;
    if (s.processes == 1 && s.steps < span)
        report_appendf(f->detail, sizeof f->detail,
                       " Only %lld of steps %lld-%lld are in the database: the records of a write "
                       "that failed were lost with it.",
                       (long long)s.steps, (long long)s.first_step, (long long)s.last_step);
    snprintf(f->advice, sizeof f->advice,
             "Free space on the disk that holds the database (the spool of records waiting to "
             "go into it is beside it), or write it to one with room (ampprobe run -o), and "
             "record less if it has to fit: statistics every N steps (--stats-every N), "
             "without kernels (--trace amp).");
    steps_of(f, &m->end);
}

// The processes whose records were cut short.
static void processes_cut(const report_model *m, report_findings *out) {
    const report_end *e = &m->end;
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_WARNING);
    snprintf(f->title, sizeof f->title, "%zu process%s recorded less than %s wrote", e->n_cut,
             e->n_cut == 1 ? "" : "es", e->n_cut == 1 ? "it" : "they");
    for (size_t i = 0; i < e->n_cut; i++) {
        const report_cut *c = &e->cut[i];
        const bool corrupt = strcmp(c->status, "corrupt") == 0;
        const char *why = corrupt ? "an impossible record: the rest of its records were skipped"
                          : m->capture_error ? "its later records are lost with the recording "
                                               "that stopped short (above)"
                          : strcmp(c->status, "truncated") == 0
                              ? "its last record was cut off (killed while writing it)"
                              : "still running when the run ended: its later records are lost";
        report_appendf(f->detail, sizeof f->detail, "%s%s (pid %d): %s", i ? "; " : "",
                       c->name ? c->name : "?", c->pid, why);
    }
    report_appendf(f->detail, sizeof f->detail, ".");
    snprintf(f->advice, sizeof f->advice,
             "Let every recording process end before the program does (join worker processes, "
             "destroy the process group), and stop runs with Ctrl-C or SIGTERM rather than "
             "SIGKILL.");
    steps_of(f, e);
    report_finding_evidence(f, "processes", (double)e->n_cut);
}

// The capture's end: the database's status and the processes whose records were cut short.
static void capture_end(const report_model *m, report_findings *out) {
    char at[96];
    when(m, at, sizeof at);
    if (m->end.capture == AMP_RUN_RECORDING)
        still_recording(m, out, at);
    else if (m->end.capture == AMP_RUN_CUT_SHORT)
        cut_short(m, out, at);
    if (m->capture_error) recording_stopped(m, out, at);
    if (m->end.n_cut) processes_cut(m, out);
}

// A warning that the run's numerics were not recorded, and why (detail: one %s, for why).
static void unrecorded(report_findings *out, const char *title, const char *detail, const char *why,
                       const char *advice) {
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_WARNING);
    snprintf(f->title, sizeof f->title, "%s: the run's numerics were not recorded", title);
    snprintf(f->detail, sizeof f->detail, detail, why);
    snprintf(f->advice, sizeof f->advice, "%s", advice);
}

// The PyTorch bridge could not attach (META bridge_error), or attached and found no model that
// trains (META no_model) while no process recorded a step.
static void bridge_end(const report_model *m, report_findings *out) {
    if (m->bridge_error)
        unrecorded(out, "the PyTorch bridge did not attach",
                   "ampprobe run --torch loads ampprobe.torch when the program imports torch; it "
                   "failed with %s. The program ran without it.",
                   m->bridge_error,
                   "Use torch 2.4 or newer (the bridge's minimum) or mend what the message names, "
                   "and run again. `import ampprobe.torch` in the same Python shows the error with "
                   "its traceback.");
    else if (m->no_model && m->end.last_step < 0)
        unrecorded(out, "the PyTorch bridge found no model to watch",
                   "ampprobe run --torch watches the first module called in training mode, with "
                   "gradients enabled, that has trainable parameters; in this run %s.",
                   m->no_model,
                   "Train the model in training mode (model.train()) with gradients enabled, or "
                   "call ampprobe.torch.watch(model, scaler=scaler, optimizer=optimizer) in the "
                   "script.");
}

// Processes the program left running when it exited (META orphans).
static void orphans_end(const report_model *m, report_findings *out) {
    if (!m->orphans) return;
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_WARNING);
    snprintf(f->title, sizeof f->title, "the program exited and left processes running: %.200s",
             m->orphans);
    snprintf(f->detail, sizeof f->detail,
             "ampprobe run records until the program it started has exited (and its recording "
             "processes a moment longer); %.600s still ran then, and what they recorded afterwards "
             "is not in the database%s.",
             m->orphans, m->end.last_step < 0 ? " (here: every step)" : "");
    snprintf(f->advice, sizeof f->advice,
             "Keep the program in the foreground until the training ends: a script that starts "
             "the trainer in the background (train.py &) must wait for it (wait as its last "
             "line), or exec the trainer.");
    steps_of(f, &m->end);
}

void rule_run_end_run(const report_model *m, report_findings *out) {
    program_end(m, out);
    orphans_end(m, out);
    capture_end(m, out);
    bridge_end(m, out);
}
