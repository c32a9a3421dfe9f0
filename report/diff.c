/*
 * diff.c — `ampprobe diff A B`: two runs side by side (typically fp32 vs AMP) and a verdict.
 *
 * From each run's model and findings: precision (META, else the autocast dtype of its ops),
 * median step time and throughput, peak memory (AMP_STEPS.mem_peak_bytes), skipped steps,
 * the last step's loss (what the program printed) and the mean loss of the last 10% of steps
 * (steadier: what the verdict compares), the loss curves compared step by step, the
 * findings present in one run and not the other (by rule, severity, layer and op), and one
 * sentence that answers "did AMP pay off, and is the loss the same?" (and says so when the two
 * runs ran different programs). When exactly one run uses
 * autocast it is "the AMP run" and the other the baseline, whatever the argument order; a slower
 * AMP run is explained from its amp-payoff finding (launch-bound, CPU emulation).
 *
 * A run of several processes (a script's trainings, the ranks of a data-parallel job) has a loss
 * curve each: the processes of A and B are matched by program (AMP_PROCESSES.name) and order (the
 * n-th tiny_gpt of A with the n-th of B, by pid), each pair's curves compared; the losses of the
 * table and the verdict are of one pair, named: the process of the top error of the run that
 * broke (with its match in the other run, else that run's first process of the same program,
 * else its first), else the first matched pair.
 */
#include "report.h"

#include "amp-impl.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SAME_SPEED 0.05  // within 5%: "as fast"
#define SAME_LOSS 0.02   // mean losses of the last 10% within 2%: "same loss"
#define SAME_MEMORY 0.05 // peak memory within 5%: not worth a word in the verdict
#define SAME_LENGTH 0.1  // step counts within 10%: the final losses are of about the same point
#define DIVERGE 0.10     // per-step relative loss difference that counts as divergence

static const char *precision_of(const report_model *m) {
    if (m->precision) return m->precision;
    for (size_t i = 0; i < m->n_ops; i++)
        if (strcmp(m->ops[i].policy, "lower_precision_fp") == 0) {
            if (strcmp(m->ops[i].out_dtype, "bf16") == 0) return "bf16";
            if (strcmp(m->ops[i].out_dtype, "f16") == 0) return "fp16";
        }
    for (size_t i = 0; i < m->n_ops; i++)
        if (m->ops[i].policy[0]) return "amp";
    return m->n_ops ? "fp32" : NULL;
}

// Whether m ran under autocast: an op an autocast policy decided, or, in a run that recorded no
// op (a producer of its own through the record API), META's precision.
static bool any_autocast(const report_model *m) {
    for (size_t i = 0; i < m->n_ops; i++)
        if (m->ops[i].policy[0]) return true;
    if (m->n_ops || !m->precision) return false;
    amp_dtype t;
    return amp_dtype_parse(m->precision, &t) && (t == AMP_DTYPE_F16 || t == AMP_DTYPE_BF16);
}

// The next word of a command line as the launcher quoted it ('...' and '\'' for a quote) into
// out; returns where the word ends, NULL when there is none.
static const char *next_word(const char *s, char *out, size_t n) {
    while (*s == ' ')
        s++;
    if (!*s) return NULL;
    size_t k = 0;
    for (bool quoted = false; *s && (quoted || *s != ' '); s++) {
        if (*s == '\'') {
            quoted = !quoted;
            continue;
        }
        if (*s == '\\' && !quoted && s[1]) s++;
        if (k + 1 < n) out[k++] = *s;
    }
    out[k] = 0;
    return s;
}

static bool ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

static bool one_of(const char *word, const char *const *list) {
    for (; *list; list++)
        if (strcmp(word, *list) == 0) return true;
    return false;
}

// What a shell's command string runs: its first simple command that is not a builtin that only
// sets things up (cd, export, set, source), past variable assignments and exec/nohup/time
// ("cd /tmp && OMP_NUM_THREADS=1 exec ./tiny_gpt ..." runs tiny_gpt). Into out; "" when none.
static void shell_program(const char *script, char *out, size_t n) {
    static const char *const prefixes[] = {"exec", "nohup", "time", NULL};
    static const char *const setup[] = {"cd", "export", "set", "source", ".", NULL};
    out[0] = 0;
    for (const char *seg = script; *seg;) {
        const size_t len = strcspn(seg, ";&|\n");
        char cmd[256], word[256];
        snprintf(cmd, sizeof cmd, "%.*s", (int)(len < sizeof cmd ? len : sizeof cmd - 1), seg);
        const char *s = cmd, *start;
        do {
            start = s + strspn(s, " "); // where the next word begins
            s = next_word(s, word, sizeof word);
        } while (s && (strchr(word, '=') || one_of(word, prefixes)));
        if (s && !one_of(word, setup)) {
            report_program_of(start, out, n);
            return;
        }
        seg += len;
        seg += strspn(seg, ";&|\n");
    }
}

void report_program_of(const char *command, char *out, size_t n) {
    char word[256];
    out[0] = 0;
    const char *s = command ? next_word(command, word, sizeof word) : NULL;
    if (!s) return;
    snprintf(out, n, "%s", amp_base_name(word));
    if (strcmp(out, "env") == 0) { // env [OPTION] [NAME=value]... PROG: PROG
        const char *t = s;
        while ((t = next_word(t, word, sizeof word)) != NULL && (strchr(word, '=') || *word == '-'))
            ;
        if (t) s = t, snprintf(out, n, "%s", amp_base_name(word));
    }
    // an interpreter or a launcher (python3, bash, torchrun, deepspeed, accelerate launch, ...)
    // runs a script: the first word that names one; else a Python interpreter's -m module (a
    // launcher module's script, `python3 -m torch.distributed.run ... train.py`, wins) or -c
    const bool python = strncmp(out, "python", 6) == 0;
    const bool shell = strcmp(out, "sh") == 0 || strcmp(out, "bash") == 0 ||
                       strcmp(out, "dash") == 0 || strcmp(out, "zsh") == 0 ||
                       strcmp(out, "ksh") == 0;
    bool module = false;
    while ((s = next_word(s, word, sizeof word)) != NULL) {
        if (shell && word[0] == '-' && word[1] != '-' && strchr(word, 'c')) { // sh -c, sh -ec
            if (next_word(s, word, sizeof word)) shell_program(word, out, n);
            return;
        }
        if (ends_with(word, ".py") || ends_with(word, ".sh")) {
            snprintf(out, n, "%s", amp_base_name(word));
            return;
        }
        if (python && !module && strcmp(word, "-c") == 0) {
            snprintf(out, n, "python -c");
            return;
        }
        if (python && !module && strcmp(word, "-m") == 0) {
            if (!(s = next_word(s, word, sizeof word))) return;
            snprintf(out, n, "%s", word);
            module = true;
        }
    }
}

static const report_process *first_proc(const report_model *m) {
    for (size_t i = 0; i < m->n_procs; i++)
        if (m->procs[i].n_steps) return &m->procs[i];
    return NULL;
}

// "tiny_gpt pid 12" ("pid 12" when its name was not recorded): short enough for a table cell.
static void proc_words(const report_process *p, char *buf, size_t n) {
    if (p && p->name && p->name[0])
        snprintf(buf, n, "%s pid %d", p->name, (int)p->pid);
    else
        snprintf(buf, n, "pid %d", p ? (int)p->pid : 0);
}

// The mean loss of the last 10% of steps s[0..n) (at least 1) and the last step's loss.
static void tail_losses(const report_step *s, size_t n, double *mean, double *last) {
    size_t tail = n / 10 ? n / 10 : 1, k = 0;
    double avg = 0; // a running mean: a sum of losses near DBL_MAX would overflow
    bool broken = false;
    for (size_t i = n > tail ? n - tail : 0; i < n; i++) {
        if (!s[i].has_loss) continue; // (only its scale update came: killed mid-step)
        if (s[i].loss_nonfinite)
            broken = true;
        else
            k++, avg += (s[i].loss - avg) / (double)k;
    }
    *mean = broken ? NAN : k ? avg : NAN;
    *last = NAN;
    for (size_t i = n; i-- > 0;)
        if (s[i].has_loss) {
            *last = isfinite(s[i].loss) ? s[i].loss : NAN;
            break;
        }
}

void report_figures(const report_model *m, const report_findings *f, const report_process *p,
                    report_run_figures *r) {
    report_summary summary;
    report_summarize(m, &summary);
    *r = (report_run_figures){.precision = precision_of(m),
                              .device = m->device,
                              .compiled = m->compiled,
                              .steps = summary.steps,
                              .skipped = summary.skipped,
                              .step_ms = report_median_step_ns(m) / 1e6,
                              .peak_mem = summary.peak_mem,
                              .processes = report_processes_with_steps(m),
                              .final_loss = NAN,
                              .last_loss = NAN};
    report_program_of(m->command, r->program, sizeof r->program);
    char *shown = report_strdup_name(r->program); // (a newline in it would forge a line)
    snprintf(r->program, sizeof r->program, "%s", shown);
    free(shown);
    r->autocast = any_autocast(m);
    r->throughput = r->step_ms > 0 ? 1000 / r->step_ms : NAN;
    if (!p) p = first_proc(m);
    if (p) {
        r->loss_pid = p->pid;
        proc_words(p, r->loss_process, sizeof r->loss_process);
        r->loss_steps = (int64_t)p->n_steps;
        tail_losses(m->steps + p->step0, p->n_steps, &r->final_loss, &r->last_loss);
    }
    for (size_t i = 0; i < f->n; i++) {
        r->errors += f->v[i].severity == AMP_SEVERITY_ERROR;
        r->warnings += f->v[i].severity == AMP_SEVERITY_WARNING;
    }
}

// ---------------------------------------------------------------------------------------------
// Matching the processes of two runs

typedef struct proc_pair {
    const report_process *a, *b; // NULL: none
} proc_pair;

static bool same_name(const report_process *x, const report_process *y) {
    return strcmp(x->name ? x->name : "", y->name ? y->name : "") == 0;
}

// p's number among m's processes with steps of its program (pid order).
static size_t rank_of(const report_model *m, const report_process *p) {
    size_t n = 0;
    for (const report_process *q = m->procs; q < p; q++)
        n += q->n_steps && same_name(q, p);
    return n;
}

// The process of `to` with steps of p's program and p's rank in `from`; NULL: none.
static const report_process *match_of(const report_model *from, const report_process *p,
                                      const report_model *to) {
    size_t rank = rank_of(from, p);
    for (size_t i = 0; i < to->n_procs; i++) {
        const report_process *q = &to->procs[i];
        if (q->n_steps && same_name(q, p) && rank-- == 0) return q;
    }
    return NULL;
}

// The first process of `to` with steps of p's program; NULL: none.
static const report_process *named_like(const report_model *to, const report_process *p) {
    for (size_t i = 0; i < to->n_procs; i++)
        if (to->procs[i].n_steps && same_name(&to->procs[i], p)) return &to->procs[i];
    return NULL;
}

static bool has_error(const report_findings *f) {
    return f->n && f->v[0].severity == AMP_SEVERITY_ERROR; // (sorted: errors first)
}

// The pair of processes whose losses the table and the verdict give (see the top of the file).
static proc_pair figure_pair(const report_model *a, const report_findings *fa,
                             const report_model *b, const report_findings *fb) {
    // the run that broke, the candidate (the AMP run when exactly one is, else B) first, as
    // the verdict names them
    const bool swap = any_autocast(a) && !any_autocast(b);
    const report_model *cand = swap ? a : b, *base = swap ? b : a;
    const report_findings *fc = swap ? fa : fb, *fbase = swap ? fb : fa;
    const report_model *lead = has_error(fc) ? cand : has_error(fbase) ? base : NULL;
    if (lead) {
        const report_model *other = lead == a ? b : a;
        const report_process *p =
            report_process_find(lead, report_lead_pid(lead, lead == cand ? fc : fbase));
        if (p && p->n_steps) {
            const report_process *q = match_of(lead, p, other);
            if (!q) q = named_like(other, p);
            if (!q) q = first_proc(other);
            return lead == a ? (proc_pair){p, q} : (proc_pair){q, p};
        }
    }
    for (size_t i = 0; i < a->n_procs; i++) {
        const report_process *p = &a->procs[i], *q = p->n_steps ? match_of(a, p, b) : NULL;
        if (q) return (proc_pair){p, q};
    }
    return (proc_pair){first_proc(a), first_proc(b)};
}

// ---------------------------------------------------------------------------------------------
// Comparisons

typedef struct loss_gap {
    int64_t common; // steps both runs recorded a finite loss for
    double max_rel, mean_rel;
    int64_t max_step;     // where the largest difference is
    int64_t diverge_step; // first step with a difference >= DIVERGE; -1: none
} loss_gap;

// The loss curves of process pa of a and pb of b (NULL: none) compared step by step.
static void compare_losses(const report_model *a, const report_process *pa, const report_model *b,
                           const report_process *pb, loss_gap *g) {
    *g = (loss_gap){.max_step = -1, .diverge_step = -1};
    const report_step *sa = pa ? a->steps + pa->step0 : NULL,
                      *sb = pb ? b->steps + pb->step0 : NULL;
    const size_t na = pa ? pa->n_steps : 0, nb = pb ? pb->n_steps : 0;
    double avg = 0; // running mean of the relative differences
    for (size_t i = 0, j = 0; i < na && j < nb;) {
        const report_step *x = &sa[i], *y = &sb[j];
        if (x->step < y->step) {
            i++;
            continue;
        }
        if (y->step < x->step) {
            j++;
            continue;
        }
        if (x->loss_finite && y->loss_finite) {
            double rel = fmin(fabs(y->loss - x->loss) / fmax(fabs(x->loss), 1e-12), DBL_MAX);
            g->common++;
            avg += (rel - avg) / (double)g->common;
            if (rel > g->max_rel) g->max_rel = rel, g->max_step = x->step;
            if (rel >= DIVERGE && g->diverge_step < 0) g->diverge_step = x->step;
        }
        i++, j++;
    }
    g->mean_rel = g->common ? avg : NAN;
}

// A title up to the first ':' or '(' (what comes before the names of a share's largest ops).
static void title_head(const char *title, char *buf, size_t n) {
    snprintf(buf, n, "%.*s", (int)strcspn(title, ":("), title);
}

static bool same_finding(const report_finding *x, const report_finding *y) {
    // both trainings diverged: the same problem, whether it came back down (a warning) or not
    if (strcmp(x->rule, "divergence") == 0 && strcmp(y->rule, "divergence") == 0) return true;
    if (strcmp(x->rule, y->rule) != 0 || x->severity != y->severity) return false;
    if (x->of_many && y->of_many) { // the largest of many ops: may differ from run to run
        char hx[sizeof x->title], hy[sizeof y->title];
        title_head(x->title, hx, sizeof hx);
        title_head(y->title, hy, sizeof hy);
        return report_same_title(hx, hy);
    }
    return strcmp(x->layer, y->layer) == 0 && strcmp(x->op, y->op) == 0 &&
           report_same_title(x->title, y->title); // (a sawtooth is no scale stuck low)
}

// The other run's divergence (a warning: it came back down) when the error x that broke one run
// is a divergence; NULL otherwise. The precision is then not what tells the runs apart.
static const report_finding *diverged_too(const report_finding *x, const report_findings *other) {
    if (strcmp(x->rule, "divergence") != 0) return NULL;
    for (size_t i = 0; i < other->n; i++)
        if (strcmp(other->v[i].rule, "divergence") == 0) return &other->v[i];
    return NULL;
}

static bool has_match(const report_finding *x, const report_findings *other) {
    for (size_t i = 0; i < other->n; i++)
        if (same_finding(x, &other->v[i])) return true;
    return false;
}

static const report_finding *payoff(const report_findings *f) {
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->v[i].rule, "amp-payoff") == 0) return &f->v[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// The verdict

// One run as the verdict names it: its figures, its name in words ("AMP run (B, fp16)", "the
// fp32 run", "A") and its argument's letter.
typedef struct verdict_run {
    const report_run_figures *r;
    const char *name, *letter;
} verdict_run;

// The verdict's last words on the losses (the means of the last 10% of steps, steadier than one
// step's), first's figure first: first is the run the sentence is about, so that "A broke: ..."
// goes on with A's loss. Each figure names its run and the difference is first's relative to
// second's; "the same" is within SAME_LOSS of the baseline's. about_first: the sentence so far
// is about first alone ("its" is first's).
static int loss_phrase(char *buf, size_t n, const verdict_run *first, const verdict_run *second,
                       double base_loss, bool about_first) {
    const double x = first->r->final_loss, y = second->r->final_loss;
    if (isnan(x) && isnan(y))
        return snprintf(buf, n, "; both runs have a non-finite loss in their last 10%% of steps");
    if (isnan(x) && about_first)
        return snprintf(buf, n, "; it has a non-finite loss in its last 10%% of steps");
    if (isnan(x) || isnan(y))
        return snprintf(buf, n, "; %s has a non-finite loss in its last 10%% of steps",
                        isnan(x) ? first->name : second->name);
    const double rel = fabs(x - y) / fmax(fabs(base_loss), 1e-12);
    if (rel <= SAME_LOSS)
        return snprintf(buf, n, ", same loss within %.1f%%", fmax(100 * rel, 0.1));
    if (x > 0 && y > 0 && (x >= 10 * y || y >= 10 * x)) { // "960x", not "+95900.0%"
        char times[32] = "far";                           // (a ratio beyond a double's range)
        if (isfinite(x > y ? x / y : y / x))
            snprintf(times, sizeof times, "%.3gx", x > y ? x / y : y / x);
        return snprintf(buf, n,
                        ", mean loss of the last 10%% of steps %.4g in %s vs %.4g in %s (%s %s)", x,
                        first->letter, y, second->letter, times, x > y ? "higher" : "lower");
    }
    return snprintf(buf, n,
                    ", mean loss of the last 10%% of steps %.4g in %s vs %.4g in %s (%+.1f%%)", x,
                    first->letter, y, second->letter, 100 * (x - y) / fmax(fabs(y), 1e-12));
}

// Both runs' figures, their losses of the pair of processes that figure_pair picks.
static void figures_of(const report_model *a, const report_findings *fa, const report_model *b,
                       const report_findings *fb, report_run_figures *ra, report_run_figures *rb) {
    const proc_pair pp = figure_pair(a, fa, b, fb);
    report_figures(a, fa, pp.a, ra);
    report_figures(b, fb, pp.b, rb);
}

void report_diff_verdict(const report_model *a, const report_findings *fa, const report_model *b,
                         const report_findings *fb, char *buf, size_t n) {
    report_run_figures ra, rb;
    figures_of(a, fa, b, fb, &ra, &rb);
    const bool several = ra.processes > 1 || rb.processes > 1; // a loss curve each: name them
    // the candidate: the AMP run when exactly one is, else B
    bool swap = ra.autocast && !rb.autocast;
    const report_run_figures *base = swap ? &rb : &ra, *cand = swap ? &ra : &rb;
    const report_findings *fc = swap ? fa : fb;
    const report_model *mc = swap ? a : b;
    char name[64], other[64];
    if (base->autocast != cand->autocast) {
        snprintf(name, sizeof name, "AMP run (%s, %s)", swap ? "A" : "B", cand->precision);
        snprintf(other, sizeof other, "the %s run", base->precision ? base->precision : "baseline");
    } else {
        snprintf(name, sizeof name, "B");
        snprintf(other, sizeof other, "A");
    }
    const verdict_run vc = {cand, name, swap ? "A" : "B"}, vb = {base, other, swap ? "B" : "A"};
    const bool same_program =
        !(ra.program[0] && rb.program[0] && strcmp(ra.program, rb.program) != 0);
    size_t k = 0;
#define PUT(...) (k = amp_appendf(buf, n, k, __VA_ARGS__))
    const report_findings *fbase = swap ? fb : fa;
    if (cand->steps == 0 || base->steps == 0) {
        PUT("Cannot compare: %s.", ra.steps == 0 && rb.steps == 0 ? "neither run recorded a step"
                                   : ra.steps == 0                ? "A recorded no step"
                                                                  : "B recorded no step");
        // what ended a run, where it has an error
        if (ra.errors && fa->n) PUT(" A: %s.", fa->v[0].title);
        if (rb.errors && fb->n) PUT(" B: %s.", fb->v[0].title);
        return;
    }
    bool about_cand = true;  // the sentence so far is about the candidate alone ("its", "holds")
    bool base_first = false; // it is about the baseline, whose figures come first
    if (cand->errors && fc->n && base->errors && fbase->n) {
        about_cand = false; // (the candidate's finding is named first, and so is its loss)
        const bool past_c = report_went_past_error(mc, fc),
                   past_b = report_went_past_error(swap ? b : a, fbase);
        char past[64]; // the run that went on past its error, capitalised
        snprintf(past, sizeof past, "%s", past_c ? name : other);
        past[0] = (char)toupper((unsigned char)past[0]);
        if (same_finding(&fc->v[0], &fbase->v[0]) && past_c == past_b)
            PUT(past_c ? "Both runs went on past the same error: %s"
                       : "Both runs broke the same way: %s",
                fc->v[0].title);
        else if (same_finding(&fc->v[0], &fbase->v[0]))
            PUT("%s went on past the error that broke %s: %s", past, past_c ? other : name,
                fc->v[0].title);
        else if (past_c == past_b)
            PUT("Both runs %s: %s: %s; %s: %s", past_c ? "went on past an error" : "broke", name,
                fc->v[0].title, other, fbase->v[0].title);
        else // (the run that went on first)
            PUT("%s went on past an error, %s broke: %s: %s; %s: %s", past, past_c ? other : name,
                past_c ? name : other, (past_c ? fc : fbase)->v[0].title, past_c ? other : name,
                (past_c ? fbase : fc)->v[0].title);
    } else if (cand->errors && fc->n) {
        PUT("%s %s: %s", name, report_went_past_error(mc, fc) ? "went on past an error" : "broke",
            fc->v[0].title);
        const report_finding *d = diverged_too(&fc->v[0], fbase);
        if (d) {
            PUT("; %s diverged as well: %s", other, d->title);
            about_cand = false; // (what follows names the run it is about)
        }
    } else if (base->errors && fbase->n) {
        about_cand = false;
        base_first = true;
        PUT("%c%s %s: %s", toupper((unsigned char)other[0]), other + 1,
            report_went_past_error(swap ? b : a, fbase) ? "went on past an error" : "broke",
            fbase->v[0].title);
        const report_finding *d = diverged_too(&fbase->v[0], fc);
        if (d) PUT("; %s diverged as well: %s", name, d->title);
    } else if (!(base->step_ms > 0) || !(cand->step_ms > 0)) { // none, or steps of no duration
        PUT("%s: no step times to compare", name);
    } else {
        double r = base->step_ms / cand->step_ms; // > 1: the candidate is faster
        if (r >= 1.5)
            PUT("%s is %.1fx faster than %s", name, r, other);
        else if (r >= 1 + SAME_SPEED)
            PUT("%s is %.0f%% faster than %s", name, 100 * (r - 1), other);
        else if (1 / r >= 1.5)
            PUT("%s is %.1fx slower than %s", name, 1 / r, other);
        else if (r <= 1 - SAME_SPEED)
            PUT("%s is %.0f%% slower than %s", name, 100 * (1 / r - 1), other);
        else
            PUT("%s is as fast as %s (within %.0f%%)", name, other, 100 * SAME_SPEED);
        // why an AMP run is slower, when the two ran the same program
        if (r <= 1 - SAME_SPEED && cand->autocast && !base->autocast && same_program) {
            const report_finding *p = payoff(fc);
            bool cpu = mc->device && strcmp(mc->device, "cpu") == 0;
            bool launch = p && strstr(p->title, "launch-bound");
            if (cpu)
                PUT(": the CPU backend has no Tensor Cores (fp16/bf16 are emulated around fp32 "
                    "math)%s",
                    launch ? ", and on a GPU this model would be launch-bound" : "");
            else if (launch)
                PUT(": launch-bound (its kernels are too short for Tensor Cores to matter)");
        }
    }
    // memory and loss are said of the run the sentence is about, then of the other
    const verdict_run *first = base_first ? &vb : &vc, *second = base_first ? &vc : &vb;
    if (first->r->peak_mem > 0 && second->r->peak_mem > 0) {
        double m = first->r->peak_mem / second->r->peak_mem;
        bool subject = about_cand || base_first; // "holds" needs no name
        // a share while it says something ("40% less", "67% more"), a factor beyond ("300x
        // less", not "100% less"; "2.5x more", not "150% more")
        char amount[32];
        const double factor = m < 1 ? 1 / m : m;
        if (m < 1 ? 100 * (1 - m) < 99.5 : m < 2)
            snprintf(amount, sizeof amount, "%.0f%%", 100 * fabs(1 - m));
        else
            snprintf(amount, sizeof amount, "%.*fx", factor < 10 ? 1 : 0, factor);
        if (m <= 1 - SAME_MEMORY || m >= 1 + SAME_MEMORY)
            PUT(", %s%sholds %s %s memory%s%s", subject ? "" : first->name, subject ? "" : " ",
                amount, m < 1 ? "less" : "more", about_cand ? "" : " than ",
                about_cand ? "" : second->name);
    }
    k += (size_t)loss_phrase(buf + k, k < n ? n - k : 0, first, second, base->final_loss,
                             about_cand);
    if (several) PUT(" (the losses of %s in A and %s in B)", ra.loss_process, rb.loss_process);
    PUT(".");
    // a run that did not break but has a warning the other has not (a sawtooth that skips steps
    // makes a run "faster": the speed alone would mislead)
    for (int w = 0; w < 2; w++) {
        const verdict_run *v = w ? &vb : &vc, *o = w ? &vc : &vb;
        const report_findings *fv = w ? fbase : fc, *fo = w ? fc : fbase;
        if (v->r->errors) continue; // (its error leads the verdict)
        size_t more = 0;
        const report_finding *top = NULL;
        for (size_t i = 0; i < fv->n; i++) {
            if (fv->v[i].severity != AMP_SEVERITY_WARNING || has_match(&fv->v[i], fo) ||
                strcmp(fv->v[i].rule, "amp-payoff") == 0) // (the speed's, said above)
                continue;
            if (top)
                more++;
            else
                top = &fv->v[i];
        }
        if (top)
            PUT(" %c%s has a warning %s has not: %s%s.", toupper((unsigned char)v->name[0]),
                v->name + 1, o->name, top->title,
                more ? " (and more: see the findings below)" : "");
    }
    if (!same_program) PUT(" A and B ran different programs (%s, %s).", ra.program, rb.program);
    // the lengths of the processes whose final losses are compared
    const int64_t fewer = ra.loss_steps < rb.loss_steps ? ra.loss_steps : rb.loss_steps,
                  more = ra.loss_steps < rb.loss_steps ? rb.loss_steps : ra.loss_steps;
    if ((double)more >= (1 + SAME_LENGTH) * (double)fewer && several)
        PUT(" A's %s ran %lld step%s and B's %s %lld: the final losses are of different points "
            "of training (the loss curves compare the steps both ran).",
            ra.loss_process, (long long)ra.loss_steps, ra.loss_steps == 1 ? "" : "s",
            rb.loss_process, (long long)rb.loss_steps);
    else if ((double)more >= (1 + SAME_LENGTH) * (double)fewer)
        PUT(" A ran %lld step%s and B %lld: the final losses are of different points of training "
            "(the loss curves compare the steps both ran).",
            (long long)ra.loss_steps, ra.loss_steps == 1 ? "" : "s", (long long)rb.loss_steps);
#undef PUT
}

// ---------------------------------------------------------------------------------------------
// Text and json

// One row of the table: label, A, B, B vs A ("" leaves a cell empty).
static void row(FILE *out, const char *label, const char *a, const char *b, const char *rel) {
    fprintf(out, "%-22s %-18s %-18s %s\n", label, a, b, rel);
}

static const char *num(char *buf, size_t n, double v, const char *none) {
    if (isnan(v))
        snprintf(buf, n, "%s", none);
    else
        snprintf(buf, n, "%.4g", v);
    return buf;
}

// B's figure as a multiple of A's ("x1.25"; "x0.00054", not "x0.00"), empty unless both are
// positive.
static const char *multiple(char *buf, size_t n, double a, double b) {
    buf[0] = 0;
    if (!(a > 0 && b > 0)) return buf;
    const double r = b / a;
    snprintf(buf, n, r >= 0.01 && r < 1000 ? "x%.2f" : "x%.3g", r);
    return buf;
}

// A row of losses, B's difference from A's in percent; a run with steps but no finite loss
// there says "not finite".
static void loss_row(FILE *out, const char *label, double a, double b, int64_t a_steps,
                     int64_t b_steps) {
    char x[48], y[48], rel[48] = "";
    const double change = (b - a) / fabs(a);
    if (isfinite(a) && isfinite(b) && a != 0 && fabs(change) < 10)
        snprintf(rel, sizeof rel, "%+.2f%%", 100 * change);
    else if (isfinite(a) && isfinite(b) && a != 0) // (in percent it could overflow a double)
        snprintf(rel, sizeof rel, "x%.3g", b / a);
    row(out, label, num(x, sizeof x, a, a_steps ? "not finite" : "not recorded"),
        num(y, sizeof y, b, b_steps ? "not finite" : "not recorded"), rel);
}

static void list_unmatched(FILE *out, const char *label, const report_findings *x,
                           const report_findings *y) {
    size_t shown = 0;
    for (size_t i = 0; i < x->n; i++) {
        if (has_match(&x->v[i], y)) continue;
        if (!shown++) fprintf(out, "\nFindings only in %s:\n", label);
        fprintf(out, "  %-7s [%s] %s\n", amp_severity_name(x->v[i].severity), x->v[i].rule,
                x->v[i].title);
    }
}

// A relative difference in words: "0.42%", or for ten times and more "1.5e+04x" (as a
// percentage it could overflow a double).
static const char *rel_words(char buf[32], double rel) {
    if (rel < 10)
        snprintf(buf, 32, "%.2f%%", 100 * rel);
    else
        snprintf(buf, 32, "%.3gx", rel);
    return buf;
}

// The loss curves of process pa of a and pb of b compared, on one line after lead; false, and
// nothing printed, when they have no finite loss at a common step.
static bool curves(FILE *out, const report_model *a, const report_process *pa,
                   const report_model *b, const report_process *pb, const char *lead) {
    char mean[32], max[32];
    loss_gap g;
    compare_losses(a, pa, b, pb, &g);
    if (!g.common) return false;
    if (g.max_step < 0) {
        fprintf(out, "%s%lld common steps with finite losses, the same in both.\n", lead,
                (long long)g.common);
        return true;
    }
    fprintf(out,
            "%s%lld common steps with finite losses, mean difference %s, largest %s at step %lld",
            lead, (long long)g.common, rel_words(mean, g.mean_rel), rel_words(max, g.max_rel),
            (long long)g.max_step);
    if (g.diverge_step >= 0)
        fprintf(out, "; they diverge by %.0f%% or more from step %lld", 100 * DIVERGE,
                (long long)g.diverge_step);
    fputs(".\n", out);
    return true;
}

// One pair's line: "  tiny_gpt pid 12 in A, tiny_gpt pid 40 in B: ..." (or that it has no
// counterpart).
static void pair_line(FILE *out, const report_model *a, const report_model *b, proc_pair pp) {
    char x[160], y[160], lead[400];
    proc_words(pp.a, x, sizeof x);
    proc_words(pp.b, y, sizeof y);
    if (!pp.a || !pp.b) {
        fprintf(out, "  %s in %s: no process of %s of that program to compare with.\n",
                pp.a ? x : y, pp.a ? "A" : "B", pp.a ? "B" : "A");
        return;
    }
    snprintf(lead, sizeof lead, "  %s in A, %s in B: ", x, y);
    if (!curves(out, a, pp.a, b, pp.b, lead))
        fprintf(out, "%sno common step with finite losses.\n", lead);
}

// Each process's curve against its match (by program and order), the table's pair first; then
// the processes that have none.
static void curves_by_process(FILE *out, const report_model *a, const report_findings *fa,
                              const report_model *b, const report_findings *fb) {
    const proc_pair fig = figure_pair(a, fa, b, fb);
    fputs("\nLoss curves, process by process (matched by program and order; the table's losses "
          "are the first line's):\n",
          out);
    pair_line(out, a, b, fig);
    for (size_t i = 0; i < a->n_procs; i++) {
        const proc_pair pp = {&a->procs[i], match_of(a, &a->procs[i], b)};
        if (!pp.a->n_steps || (pp.a == fig.a && pp.b == fig.b)) continue;
        if (pp.b || pp.a != fig.a) pair_line(out, a, b, pp); // (an unmatched one: said once)
    }
    for (size_t i = 0; i < b->n_procs; i++) {
        const report_process *q = &b->procs[i];
        if (q->n_steps && q != fig.b && !match_of(b, q, a))
            pair_line(out, a, b, (proc_pair){NULL, q});
    }
}

static void diff_text(FILE *out, const report_model *a, const report_findings *fa,
                      const report_model *b, const report_findings *fb) {
    report_run_figures ra, rb;
    figures_of(a, fa, b, fb, &ra, &rb);
    char verdict[1024];
    report_diff_verdict(a, fa, b, fb, verdict, sizeof verdict);
    fprintf(out, "ampprobe diff\n  A: %s\n  B: %s\n\n%s\n\n", a->path, b->path, verdict);
    char x[48], y[48], rel[48];
    row(out, "", "A", "B", "B vs A");
    row(out, "precision", ra.precision ? ra.precision : "?", rb.precision ? rb.precision : "?", "");
    row(out, "program", ra.program[0] ? ra.program : "?", rb.program[0] ? rb.program : "?", "");
    row(out, "device", ra.device ? ra.device : "?", rb.device ? rb.device : "?", "");
    if (ra.compiled || rb.compiled)
        row(out, "torch.compile", ra.compiled ? ra.compiled : "no",
            rb.compiled ? rb.compiled : "no", "");
    snprintf(x, sizeof x, "%lld", (long long)ra.steps);
    snprintf(y, sizeof y, "%lld", (long long)rb.steps);
    row(out, "steps", x, y, "");
    row(out, "median step (ms)", num(x, sizeof x, ra.step_ms, "not recorded"),
        num(y, sizeof y, rb.step_ms, "not recorded"),
        multiple(rel, sizeof rel, ra.step_ms, rb.step_ms));
    row(out, "throughput (steps/s)", num(x, sizeof x, ra.throughput, "not recorded"),
        num(y, sizeof y, rb.throughput, "not recorded"), "");
    row(out, "peak memory (MiB)", num(x, sizeof x, ra.peak_mem / 1048576, "not recorded"),
        num(y, sizeof y, rb.peak_mem / 1048576, "not recorded"),
        multiple(rel, sizeof rel, ra.peak_mem, rb.peak_mem));
    snprintf(x, sizeof x, "%lld", (long long)ra.skipped);
    snprintf(y, sizeof y, "%lld", (long long)rb.skipped);
    row(out, "skipped steps", x, y, "");
    if (ra.processes > 1 || rb.processes > 1) { // a loss curve each: whose losses these are
        snprintf(x, sizeof x, "%zu", ra.processes);
        snprintf(y, sizeof y, "%zu", rb.processes);
        row(out, "processes", x, y, "");
        row(out, "losses of", ra.loss_pid ? ra.loss_process : "-",
            rb.loss_pid ? rb.loss_process : "-", "");
    }
    loss_row(out, "final loss (last step)", ra.last_loss, rb.last_loss, ra.steps, rb.steps);
    loss_row(out, "mean loss (last 10%)", ra.final_loss, rb.final_loss, ra.steps, rb.steps);
    snprintf(x, sizeof x, "%zu / %zu", ra.errors, ra.warnings);
    snprintf(y, sizeof y, "%zu / %zu", rb.errors, rb.warnings);
    row(out, "errors / warnings", x, y, "");
    if (ra.processes > 1 || rb.processes > 1)
        curves_by_process(out, a, fa, b, fb);
    else
        curves(out, a, first_proc(a), b, first_proc(b), "\nLoss curves: ");
    list_unmatched(out, "A", fa, fb);
    list_unmatched(out, "B", fb, fa);
}

void report_diff_text(FILE *out, const report_model *a, const report_findings *fa,
                      const report_model *b, const report_findings *fb) {
    report_text t; // (the runs' strings may hold control characters)
    report_text_begin(&t);
    diff_text(t.f, a, fa, b, fb);
    report_text_end(&t, out, false);
}

static void jrun(FILE *out, const report_model *m, const report_run_figures *r,
                 const report_findings *mine, const report_findings *theirs) {
    fputs("{\"file\": ", out);
    report_json_str(out, m->path);
    report_json_key_str(out, "program", r->program[0] ? r->program : NULL);
    report_json_key_str(out, "precision", r->precision);
    report_json_key_str(out, "device", r->device);
    report_json_key_str(out, "compiled", r->compiled);
    fprintf(out, ", \"autocast\": %s, \"steps\": %lld, \"skipped\": %lld",
            r->autocast ? "true" : "false", (long long)r->steps, (long long)r->skipped);
    report_json_key_num(out, "step_ms", r->step_ms);
    report_json_key_num(out, "throughput", r->throughput);
    report_json_key_num(out, "peak_memory", r->peak_mem);
    report_json_key_num(out, "final_loss", r->final_loss);
    report_json_key_num(out, "last_loss", r->last_loss);
    fprintf(out, ", \"processes\": %zu, \"loss_pid\": ", r->processes);
    if (r->loss_pid)
        fprintf(out, "%d", (int)r->loss_pid);
    else
        fputs("null", out);
    const report_process *p = report_process_find(m, r->loss_pid);
    report_json_key_str(out, "loss_process", p ? p->name : NULL);
    fprintf(out, ", \"errors\": %zu, \"warnings\": %zu, \"only_here\": [", r->errors, r->warnings);
    size_t k = 0;
    for (size_t i = 0; i < mine->n; i++) {
        if (has_match(&mine->v[i], theirs)) continue;
        fputs(k++ ? ", {\"rule\": " : "{\"rule\": ", out);
        report_json_str(out, mine->v[i].rule);
        report_json_key_str(out, "severity", amp_severity_name(mine->v[i].severity));
        report_json_key_str(out, "title", mine->v[i].title);
        fputs("}", out);
    }
    fputs("]}", out);
}

// ", "key": {"common_steps": ..., "diverge_step": ...}" of the curves of pa and pb.
static void jgap(FILE *out, const report_model *a, const report_process *pa, const report_model *b,
                 const report_process *pb) {
    loss_gap g;
    compare_losses(a, pa, b, pb, &g);
    fprintf(out, "\"common_steps\": %lld", (long long)g.common);
    report_json_key_num(out, "mean_rel_diff", g.mean_rel);
    report_json_key_num(out, "max_rel_diff", g.common ? g.max_rel : NAN);
    fputs(", \"max_step\": ", out);
    report_json_step(out, g.max_step);
    fputs(", \"diverge_step\": ", out);
    report_json_step(out, g.diverge_step);
}

// One element of loss_by_process: a pair of matched processes (either NULL: none to match).
static void jpair(FILE *out, const report_model *a, const report_model *b, proc_pair pp) {
    fputs("{\"a_pid\": ", out);
    if (pp.a)
        fprintf(out, "%d", (int)pp.a->pid);
    else
        fputs("null", out);
    fputs(", \"b_pid\": ", out);
    if (pp.b)
        fprintf(out, "%d", (int)pp.b->pid);
    else
        fputs("null", out);
    report_json_key_str(out, "process", (pp.a ? pp.a : pp.b)->name);
    fputs(", ", out);
    jgap(out, a, pp.a, b, pp.b);
    fputs("}", out);
}

// Every process with steps of A with its match in B, then B's unmatched ones.
static void jpairs(FILE *out, const report_model *a, const report_model *b) {
    size_t k = 0;
    fputs(", \"loss_by_process\": [", out);
    for (size_t i = 0; i < a->n_procs; i++) {
        if (!a->procs[i].n_steps) continue;
        fputs(k++ ? ", " : "", out);
        jpair(out, a, b, (proc_pair){&a->procs[i], match_of(a, &a->procs[i], b)});
    }
    for (size_t i = 0; i < b->n_procs; i++) {
        if (!b->procs[i].n_steps || match_of(b, &b->procs[i], a)) continue;
        fputs(k++ ? ", " : "", out);
        jpair(out, a, b, (proc_pair){NULL, &b->procs[i]});
    }
    fputs("]", out);
}

void report_diff_json(FILE *out, const report_model *a, const report_findings *fa,
                      const report_model *b, const report_findings *fb) {
    report_run_figures ra, rb;
    figures_of(a, fa, b, fb, &ra, &rb);
    char verdict[1024];
    report_diff_verdict(a, fa, b, fb, verdict, sizeof verdict);
    const proc_pair fig = figure_pair(a, fa, b, fb);
    fputs("{\"verdict\": ", out);
    report_json_str(out, verdict);
    fputs(",\n \"a\": ", out);
    jrun(out, a, &ra, fa, fb);
    fputs(",\n \"b\": ", out);
    jrun(out, b, &rb, fb, fa);
    fputs(",\n \"speedup\": ", out);
    report_json_num(out, ra.step_ms > 0 && rb.step_ms > 0 ? ra.step_ms / rb.step_ms : NAN);
    fputs(", \"loss\": {", out);
    jgap(out, a, fig.a, b, fig.b);
    fputs("}", out);
    jpairs(out, a, b);
    fputs("}\n", out);
}
