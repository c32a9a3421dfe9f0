/*
 * finder.c — the top finding on a thread (finder.h).
 */
#include "finder.h"

#include "amp-impl.h"
#include "amp-store.h"
#include "report.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tui_finder {
    char *path;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool want, busy, quit, fresh; // under mu
    atomic_bool stop;             // quit, for the query's progress handler
    tui_finding result;           // under mu
    double wall_ms, cpu_ms;       // its cost; under mu
};

static double clock_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_kernel_layer(const void *pa, const void *pb) {
    return strcmp(((const tui_kernel_layer *)pa)->kernel, ((const tui_kernel_layer *)pb)->kernel);
}

// The report's kernels: the layers it tied them to, and its classes.
static void kernel_layers(const report_model *rm, tui_finding *out) {
    const report_perf *p = &rm->perf;
    if (p->n_kernels) out->kernel_layers = amp_xmalloc(p->n_kernels * sizeof *out->kernel_layers);
    for (size_t i = 0; i < p->n_kernels; i++) {
        const report_kernel *k = &p->kernels[i];
        if (!k->name) continue;
        const char *name = report_layer_name(rm, k->layer_pid, k->layer_id);
        char label[200] = "";
        if (name && k->n_layers > 1)
            snprintf(label, sizeof label, "%s +%d", name, (int)k->n_layers - 1);
        else if (name)
            snprintf(label, sizeof label, "%s", name);
        out->kernel_layers[out->n_kernel_layers++] = (tui_kernel_layer){
            amp_xstrdup(k->name), name ? amp_xstrdup(label) : NULL, report_kernel_class(rm, k)};
    }
    amp_sort(out->kernel_layers, out->n_kernel_layers, sizeof *out->kernel_layers,
             cmp_kernel_layer);
}

static const tui_kernel_layer *kernel_of(const tui_finding *f, const char *kernel) {
    tui_kernel_layer key = {.kernel = (char *)kernel};
    return amp_search(&key, f->kernel_layers, f->n_kernel_layers, sizeof *f->kernel_layers,
                      cmp_kernel_layer);
}

const char *tui_finding_kernel_layer(const tui_finding *f, const char *kernel) {
    const tui_kernel_layer *hit = kernel_of(f, kernel);
    return hit ? hit->layer : NULL;
}

const char *tui_finding_kernel_class(const tui_finding *f, const char *kernel) {
    const tui_kernel_layer *hit = kernel_of(f, kernel);
    return hit ? hit->bound : NULL;
}

void tui_finding_free(tui_finding *f) {
    for (size_t i = 0; i < f->n_kernel_layers; i++) {
        free(f->kernel_layers[i].kernel);
        free(f->kernel_layers[i].layer);
    }
    free(f->kernel_layers);
    *f = (tui_finding){.first_step = -1, .as_of_step = -1};
}

// The first warning or error of the report (its order: errors first, then the first step), and
// the kernels' layers; or why the report could not read the run.
static void compute(sqlite3 *db, const char *path, tui_finding *out) {
    *out = (tui_finding){.first_step = -1, .as_of_step = -1};
    report_model rm;
    char err[REPORT_ERR_MAX];
    if (report_model_load(db, path, INT64_MIN, INT64_MAX, &rm, err) != AMP_OK) {
        snprintf(out->error, sizeof out->error, "%s", err);
        return;
    }
    out->as_of_step = rm.end.last_step;
    kernel_layers(&rm, out);
    report_findings f = {0};
    report_run(&rm, NULL, &f);
    for (size_t i = 0; i < f.n; i++) {
        const report_finding *x = &f.v[i];
        if (x->severity == AMP_SEVERITY_INFO) continue;
        out->valid = true;
        out->severity = (int)x->severity;
        out->first_step = x->first_step;
        snprintf(out->rule, sizeof out->rule, "%s", x->rule);
        snprintf(out->layer, sizeof out->layer, "%s", x->layer);
        snprintf(out->op, sizeof out->op, "%s", x->op);
        snprintf(out->title, sizeof out->title, "%s", x->title);
        break;
    }
    report_findings_free(&f);
    report_model_free(&rm);
}

// The report's and the store's messages end in SQLite's: a busy or locked database says so.
static bool busy_message(const char *err) {
    return strstr(err, sqlite3_errstr(SQLITE_BUSY)) || strstr(err, sqlite3_errstr(SQLITE_LOCKED));
}

// SQLite calls this every few thousand VM steps: a non-zero return interrupts the query.
static int stop_requested(void *arg) {
    return atomic_load(&((tui_finder *)arg)->stop);
}

static void *run(void *arg) {
    tui_finder *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->want && !f->quit)
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->quit) break;
        f->want = false;
        f->busy = true;
        pthread_mutex_unlock(&f->mu);

        double t0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
        sqlite3 *db = NULL;
        char err[AMP_STORE_ERR_MAX];
        tui_finding result = {.first_step = -1, .as_of_step = -1};
        if (amp_store_open_readonly(f->path, &db, err) == AMP_OK) {
            sqlite3_progress_handler(db, 10000, stop_requested, f);
            compute(db, f->path, &result);
        } else {
            snprintf(result.error, sizeof result.error, "%s", err);
        }
        sqlite3_close(db);
        result.busy = result.error[0] && busy_message(result.error);

        pthread_mutex_lock(&f->mu);
        f->busy = false;
        if (!f->quit) {
            tui_finding_free(&f->result); // an untaken one: replaced
            f->result = result;
            f->wall_ms = clock_ms(CLOCK_MONOTONIC) - t0;
            f->cpu_ms = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
            f->fresh = true;
        } else {
            tui_finding_free(&result);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

tui_finder *tui_finder_new(const char *path) {
    tui_finder *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return NULL;
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, run, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        free(f->path);
        free(f);
        return NULL;
    }
    return f;
}

bool tui_finder_request(tui_finder *f) {
    pthread_mutex_lock(&f->mu);
    bool accepted = !f->busy && !f->want;
    if (accepted) {
        f->want = true;
        pthread_cond_signal(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return accepted;
}

bool tui_finder_take(tui_finder *f, tui_finding *out, double *wall_ms, double *cpu_ms) {
    pthread_mutex_lock(&f->mu);
    bool fresh = f->fresh;
    if (fresh) {
        *out = f->result;
        f->result = (tui_finding){.first_step = -1, .as_of_step = -1}; // moved
        *wall_ms = f->wall_ms;
        *cpu_ms = f->cpu_ms;
        f->fresh = false;
    }
    pthread_mutex_unlock(&f->mu);
    return fresh;
}

void tui_finder_free(tui_finder *f) {
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    f->quit = true;
    atomic_store(&f->stop, true); // a long report query stops within a few thousand steps
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    tui_finding_free(&f->result);
    free(f->path);
    free(f);
}
