/*
 * test_tui.c — suite `tui`: `ampprobe tui` without and with a terminal.
 *
 * Without one: the layout (a pure function) at 80x24, larger and smaller sizes; the model on a
 * fixture database built with the store API and SQL, while "live" (WAL, no indexes: followed
 * by rowid, rows updated in place re-read, nothing re-read when nothing was committed) and
 * after the run finished (indexes); the layers view's danger ordering and filter; one-line
 * errors for missing and foreign files, and for damaged ones (a b-tree page overwritten: the
 * model's error, the report's, the command's exit status 2), a locked one read again; the
 * overview's titles on more steps than columns (of the run, not of the sparkline's window) and
 * without overlap; the header's step among the recorded ones ("step 3 of 0-3", "no steps
 * recorded" once over); a layer's rows one dtype each; a scale of 0 on the log graph; a flat
 * series alike at every size; cut texts ending in an ellipsis, the log's name never cut unseen;
 * the exit status or the signal that ended the program (META exit_signal,
 * tui_live.term_signal), none when not recorded; a file replaced by a new run (started over on,
 * never merged) or removed (kept); TERM=dumb refused (terminfo, and the command on a
 * pseudo-terminal). With one: an end-to-end run of `ampprobe run --tui -- tiny_gpt --fault
 * attn-overflow` in tmux (send-keys, capture-pane): the first non-finite event and the falling
 * scale appear while the run is live, the attention layer is red, the exit status shows, q restores
 * the terminal; NO_COLOR; SIGTERM.
 */
#define _GNU_SOURCE // posix_openpt, grantpt, unlockpt, ptsname
#include "tests.h"

#include "amp-record.h"
#include "amp-store.h"
#include "commands.h"
#include "layout.h"
#include "model.h"
#include "tui.h"
#include "widgets.h"

#include <curses.h>
#include <fcntl.h>
#include <locale.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AMPPROBE AMP_BINARY_DIR "/ampprobe"
#define TINY_GPT AMP_BINARY_DIR "/samples/tiny_gpt"

// ---------------------------------------------------------------------------------------------
// Layout

static bool inside(tui_rect r, const tui_layout *l) {
    return r.x >= 0 && r.y >= 0 && r.w >= 0 && r.h >= 0 && r.x + r.w <= l->cols &&
           r.y + r.h <= l->rows;
}

static bool below(tui_rect a, tui_rect b) {
    return b.y >= a.y + a.h;
} // b starts after a ends

static void check_layout(int cols, int rows) {
    tui_layout l;
    tui_layout_compute(cols, rows, &l);
    ck_assert(!l.too_small);
    ck_assert_int_eq(l.header.y, 0);
    ck_assert_int_eq(l.tabs.y, 1);
    ck_assert_int_eq(l.footer.y, rows - 1);
    ck_assert_int_eq(l.body.y, 2);
    ck_assert_int_eq(l.body.y + l.body.h, l.footer.y);
    ck_assert_int_eq(l.table_rows, rows - 4);
    const tui_rect ov[] = {l.ov_run, l.ov_time, l.ov_loss, l.ov_scale, l.ov_skips, l.ov_counts};
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++) {
        ck_assert_msg(inside(ov[i], &l), "panel %zu outside %dx%d", i, cols, rows);
        ck_assert_int_ge(ov[i].y, l.body.y);
        ck_assert_int_le(ov[i].y + ov[i].h, l.body.y + l.body.h);
        if (i > 0 && i < 6) ck_assert(below(ov[i - 1], ov[i]));
    }
    ck_assert(inside(l.ov_finding, &l));
    ck_assert_int_eq(l.ov_finding.y, l.ov_counts.y);
    ck_assert_int_gt(l.ov_finding.x, l.ov_counts.x + l.ov_counts.w - 1); // side by side
    ck_assert_int_ge(l.ov_time.h, 2); // a title and at least one graph row
    ck_assert_int_ge(l.ov_counts.h, 2);
}

START_TEST(layout_80x24) {
    check_layout(80, 24);
    tui_layout l;
    tui_layout_compute(80, 24, &l);
    ck_assert_int_eq(l.table_rows, 20);
    ck_assert_int_eq(l.ov_time.h, 3);    // 2 graph rows
    ck_assert_int_ge(l.ov_finding.h, 6); // room for the first non-finite and the finding
    ck_assert_int_ge(l.ov_finding.w, 46);
}
END_TEST

START_TEST(layout_larger) {
    check_layout(120, 40);
    check_layout(300, 100);
    tui_layout small, big;
    tui_layout_compute(80, 24, &small);
    tui_layout_compute(200, 60, &big);
    ck_assert_int_gt(big.ov_time.h, small.ov_time.h);
    ck_assert_int_le(big.ov_time.h, 7); // graphs stop growing at 6 rows
    ck_assert_int_gt(big.ov_finding.h, small.ov_finding.h);
}
END_TEST

START_TEST(layout_smaller) {
    check_layout(TUI_MIN_COLS, TUI_MIN_ROWS);
    check_layout(60, 16);
    tui_layout l;
    tui_layout_compute(TUI_MIN_COLS - 1, 24, &l);
    ck_assert(l.too_small);
    tui_layout_compute(80, TUI_MIN_ROWS - 1, &l);
    ck_assert(l.too_small);
    tui_layout_compute(0, 0, &l);
    ck_assert(l.too_small);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Model on a fixture database

static char tmpdir[64], db_path[128];
static amp_collector_t *collector; // the "live" writer: WAL, no indexes until finish

static void setup(void) {
    ck_assert_ptr_nonnull(amp_make_temp_dir(tmpdir, sizeof tmpdir, "/tmp/amptui."));
    snprintf(db_path, sizeof db_path, "%s/run.sqlite", tmpdir);
    ck_assert_int_eq(amp_collector_new(db_path, NULL, &collector), AMP_OK);
}

static void teardown(void) {
    amp_collector_free(collector);
    collector = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static void sql(const char *text) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 2000);
    char *msg = NULL;
    int rc = sqlite3_exec(db, text, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "fixture SQL failed: %s", msg ? msg : "?");
    sqlite3_close(db);
}

// Steps 0..3 of pid 7: step 3 overflows in blocks.1.attn (layer 1), the scale halves, skipped.
static void fixture(void) {
    sql("INSERT INTO AMP_LAYERS VALUES (7, 0, NULL, 'blocks.0.attn'), (7, 1, NULL, "
        "'blocks.1.attn'),"
        " (7, 2, NULL, 'head');"
        "INSERT INTO AMP_STEPS VALUES"
        " (7, 0, 0, 10000000, 4.2, 1, NULL, 65536, 65536, 0, 0, NULL),"
        " (7, 1, 10000000, 21000000, 4.1, 1, NULL, 65536, 65536, 0, 0, NULL),"
        " (7, 2, 21000000, 30000000, 4.0, 1, NULL, 65536, 65536, 0, 0, 3145728),"
        " (7, 3, 30000000, 41000000, NULL, 0, NULL, 65536, 32768, 1, 1, NULL);"
        // activations of steps 2 and 3: layer 0 healthy (a mask's -inf), layer 1 overflows at 3
        "INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel,"
        " amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
        " (7, 2, 0, 'masked_fill', 'activation', 'f16', 'f16', 100, 6.0, 0, 0, 40, 0, 0, 0),"
        " (7, 2, 1, 'mul', 'activation', 'f16', 'f16', 100, 50.0, 0, 0, 0, 0, 0, 0),"
        " (7, 2, 2, 'linear', 'activation_grad', 'f16', 'f16', 100, 0.001, 0, 0, 0, 0, 10, 0),"
        " (7, 3, 0, 'masked_fill', 'activation', 'f16', 'f16', 100, 6.0, 0, 0, 40, 0, 0, 0),"
        " (7, 3, 1, 'mul', 'activation', 'f16', 'f16', 100, 65000.0, 0, 30, 20, 0, 0, 0),"
        " (7, 3, 1, 'softmax', 'activation', 'f32', 'f16', 100, 1.0, 100, 0, 0, 0, 0, 0),"
        " (7, 3, 2, 'linear', 'activation_grad', 'f16', 'f16', 100, 0.001, 0, 0, 0, 0, 10, 0);"
        "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value,"
        " detail, aggregate, occurrences, last_step) VALUES"
        " (7, 3, 1, 'mul', 'fwd', 'nonfinite_producer', 'error', 50, NULL, NULL, 0, 1, 3),"
        " (7, 3, NULL, NULL, 'optim', 'step_skipped', 'warning', NULL, NULL, NULL, 0, 1, 3),"
        " (7, 3, 1, 'softmax', 'fwd', 'nonfinite_propagated', 'info', 100, NULL, NULL, 1, 4, 3);");
}

// The row of (name, kind, dtype) at the shown step; dtype NULL: the first of any dtype.
static const tui_layer_row *find_dtype_row(const tui_model *m, const char *name, tui_stat_kind kind,
                                           const char *dtype) {
    for (size_t i = 0; i < m->n_rows; i++)
        if (strcmp(m->rows[i].name, name) == 0 && m->rows[i].kind == kind &&
            (!dtype || strcmp(m->rows[i].dtype, dtype) == 0))
            return &m->rows[i];
    return NULL;
}

static const tui_layer_row *find_row(const tui_model *m, const char *name, tui_stat_kind kind) {
    return find_dtype_row(m, name, kind, NULL);
}

// Polls until the report's top finding, computed on the finder's thread, has arrived (<= 15 s:
// generous for a loaded machine).
static void wait_for_finding(tui_model *m) {
    for (int i = 0; i < 750 && !m->finding.valid; i++) {
        usleep(20000);
        tui_model_poll(m);
    }
    ck_assert(m->finding.valid);
}

// A gradient that reached its layer all zero (rounded away upstream: the grad-underflow fault)
// lost every value to underflow, as the report's grad-underflow rule counts it; its n_underflow
// is 0 (no value was subnormal here). Not so an all-zero activation, a bf16 gradient or one
// value alone.
START_TEST(model_counts_an_all_zero_gradient_as_lost) {
    fixture();
    sql("INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel,"
        " amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
        " (7, 3, 0, 'linear', 'weight_grad', 'f32', 'f16', 300, 0.0, 0, 0, 0, 0, 0, 300),"
        " (7, 3, 0, 'linear', 'activation_grad', 'f32', 'f16', 100, 0.001, 0, 0, 0, 0, 0, 0),"
        " (7, 3, 0, 'linear', 'activation_grad', 'f32', 'f16', 1, 0.0, 0, 0, 0, 0, 0, 1),"
        " (7, 3, 2, 'linear', 'weight_grad', 'bf16', 'bf16', 100, 0.0, 0, 0, 0, 0, 0, 100),"
        " (7, 3, 2, 'relu', 'activation', 'f16', 'f16', 100, 0.0, 0, 0, 0, 0, 0, 100),"
        " (7, 3, 2, 'head.weight', 'weight_update', 'bf16', NULL, 400, NULL, NULL, NULL, NULL,"
        " NULL, NULL, 300);");
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    tui_model_show_step(&m, 3);
    const tui_layer_row *w = find_dtype_row(&m, "blocks.0.attn", TUI_KIND_WGRAD, "f32");
    ck_assert_ptr_nonnull(w);
    ck_assert_close(w->underflow_pct, 100.0, 0, 0);
    const tui_layer_row *a = find_dtype_row(&m, "blocks.0.attn", TUI_KIND_AGRAD, "f32");
    ck_assert_ptr_nonnull(a);
    ck_assert_close(a->underflow_pct, 0.0, 0, 0); // (101 values, the one zero alone not lost)
    const tui_layer_row *b = find_dtype_row(&m, "head", TUI_KIND_WGRAD, "bf16");
    ck_assert_ptr_nonnull(b);
    ck_assert_close(b->underflow_pct, 0.0, 0, 0);
    const tui_layer_row *r = find_dtype_row(&m, "head", TUI_KIND_ACT, "f16");
    ck_assert_ptr_nonnull(r);
    ck_assert_close(r->underflow_pct, 0.0, 0, 0);
    // a 16-bit parameter's update: the values it left unchanged are its row's "underflow"
    const tui_layer_row *u = find_dtype_row(&m, "head", TUI_KIND_UPDATE, "bf16");
    ck_assert_ptr_nonnull(u);
    ck_assert_close(u->underflow_pct, 75.0, 0, 0);
    ck_assert_str_eq(tui_stat_kind_name(u->kind), "update");
    tui_model_free(&m);
}
END_TEST

// NaN/inf counts a producer did not compute (NULL) are not zeros: the row says it has none
// counted (the layers view shows "-"), and the counts of the tensors that had them still add up.
START_TEST(model_keeps_uncounted_nonfinite_apart) {
    fixture();
    sql("INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel,"
        " amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
        " (7, 3, 2, 'linear', 'activation', 'f16', 'f16', 100, 1.0, NULL, NULL, NULL, 0, 0, 0),"
        " (7, 3, 2, 'linear', 'activation', 'bf16', 'f16', 100, 1.0, NULL, NULL, NULL, 0, 0, 0),"
        " (7, 3, 2, 'linear', 'activation', 'bf16', 'f16', 100, 1.0, 2, 1, NULL, 0, 0, 0);");
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    tui_model_show_step(&m, 3);
    const tui_layer_row *a = find_dtype_row(&m, "head", TUI_KIND_ACT, "f16");
    ck_assert_ptr_nonnull(a);
    ck_assert(!a->nonfinite_counted);
    const tui_layer_row *h = find_dtype_row(&m, "head", TUI_KIND_ACT, "bf16");
    ck_assert_ptr_nonnull(h);
    ck_assert(h->nonfinite_counted);
    ck_assert_int_eq(h->n_nan, 2);
    ck_assert_int_eq(h->n_posinf + h->n_neginf, 1);
    tui_model_free(&m);
}
END_TEST

START_TEST(model_live_incremental) {
    fixture();
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    ck_assert(sqlite3_db_readonly(m.db, "main") == 1); // the TUI never writes
    ck_assert(!m.stats_indexed);
    ck_assert(!m.complete);
    ck_assert_int_eq(m.pid, 7);
    ck_assert_uint_eq(m.n_steps, 4);
    ck_assert_int_eq(m.steps[1].step, 1);
    ck_assert_close(m.steps[1].time_ms, 11.0, 1e-9, 0);
    ck_assert(isnan(m.steps[3].loss));
    ck_assert_close(m.steps[3].scale, 32768, 0, 0);
    ck_assert(m.steps[3].skipped);
    ck_assert(isnan(m.steps[1].mem_mib));
    ck_assert_close(m.steps[2].mem_mib, 3.0, 0, 0); // the memory peak, where recorded
    ck_assert_int_eq(m.stats_step, 3);
    ck_assert_uint_eq(m.n_events, 3);
    ck_assert_uint_eq(m.n_counts, 3);
    ck_assert_int_eq(m.counts[2].n, 4); // the aggregate row counts its occurrences
    ck_assert_str_eq(tui_model_layer_name(&m, 7, 1), "blocks.1.attn");
    ck_assert_ptr_null(tui_model_layer_name(&m, 7, -1));
    ck_assert_uint_eq(m.n_kernels, 0);

    // Statistics of step 3 through its rowid range, folded per (layer, kind, dtype): the
    // attention's f16 mul and f32 softmax on rows of their own.
    tui_model_show_step(&m, 3);
    ck_assert_int_eq(m.rows_step, 3);
    ck_assert_uint_eq(m.n_rows, 4);
    const tui_layer_row *attn = find_dtype_row(&m, "blocks.1.attn", TUI_KIND_ACT, "f16");
    ck_assert_ptr_nonnull(attn);
    ck_assert_int_eq(attn->tensors, 1);
    ck_assert_int_eq(attn->n_nan, 0);
    ck_assert_int_eq(attn->n_posinf, 30);
    ck_assert_int_eq(attn->n_neginf, 20);
    ck_assert_close(attn->amax, 65000, 0, 0);
    ck_assert_close(attn->headroom_bits, log2(65504.0 / 65000.0), 1e-12, 0);
    const tui_layer_row *softmax = find_dtype_row(&m, "blocks.1.attn", TUI_KIND_ACT, "f32");
    ck_assert_ptr_nonnull(softmax);
    ck_assert_int_eq(softmax->n_nan, 100);
    ck_assert_close(softmax->amax, 1, 0, 0);
    const tui_layer_row *head = find_row(&m, "head", TUI_KIND_AGRAD);
    ck_assert_ptr_nonnull(head);
    ck_assert_close(head->underflow_pct, 10.0, 1e-12, 0);
    ck_assert_close(head->headroom_bits, log2(65504.0 / 0.001), 1e-9, 0);
    tui_model_show_step(&m, 2);
    attn = find_row(&m, "blocks.1.attn", TUI_KIND_ACT);
    ck_assert_int_eq(attn->n_nan + attn->n_posinf, 0);
    tui_model_show_step(&m, 1); // a step without statistics
    ck_assert_uint_eq(m.n_rows, 0);

    // The first finding comes from the finder's thread whenever it is done, and a poll that takes
    // it reports a change; once it is in, with nothing committed, the poll reads nothing.
    wait_for_finding(&m);
    ck_assert(!tui_model_poll(&m));

    // The run goes on: a new step, an in-place update of step 3 and of the aggregate event,
    // more statistics of the shown step, kernels.
    tui_model_show_step(&m, 3);
    sql("INSERT INTO AMP_STEPS VALUES (7, 4, 41000000, 52000000, NULL, 0, NULL, 32768, 16384, 1, "
        "1, NULL);"
        "UPDATE AMP_STEPS SET loss = 9.5, loss_finite = 1 WHERE step = 3;"
        "UPDATE AMP_EVENTS SET occurrences = 9, last_step = 4 WHERE aggregate = 1;"
        "INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel,"
        " amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
        " (7, 3, 2, 'linear', 'weight_grad', 'f32', 'f16', 10, 0.5, 0, 0, 0, 0, 0, 0);"
        "INSERT INTO StringIds VALUES (1, 'ampere_fp16_gemm'), (2, 'elementwise_add');"
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, \"end\", deviceId, contextId, streamId,"
        " demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY,"
        " blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread,"
        " localMemoryTotal, gridId) VALUES"
        " (0, 3000, 0, 1, 7, 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 1),"
        " (5000, 6000, 0, 1, 7, 2, 2, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 2),"
        " (7000, 12000, 0, 1, 7, 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 3);");
    ck_assert(tui_model_poll(&m));
    ck_assert_uint_eq(m.n_steps, 5);
    ck_assert_close(m.steps[3].loss, 9.5, 0, 0);
    ck_assert_int_eq(m.steps[4].step, 4);
    ck_assert_uint_eq(m.n_events, 3);
    ck_assert_int_eq(m.events[2].occurrences, 9);
    ck_assert_int_eq(m.counts[2].n, 9);
    ck_assert_int_eq(m.rows_step, -1); // the shown step grew: reloaded on the next show
    tui_model_show_step(&m, 3);
    ck_assert_uint_eq(m.n_rows, 5);
    ck_assert_uint_eq(m.n_kernels, 2);
    ck_assert_int_eq(m.kernel_count, 3);
    ck_assert_int_eq(m.kernel_ns, 9000);
    ck_assert_str_eq(m.kernels[0].name, "ampere_fp16_gemm");
    ck_assert_int_eq(m.kernels[0].total_ns, 8000);
    ck_assert_int_eq(m.kernels[0].count, 2);
    ck_assert(!tui_model_poll(&m));

    // The run ends, with a last growth of the aggregate row seen in the same poll: status
    // complete, the exit status, the final counts.
    sql("UPDATE AMP_EVENTS SET occurrences = 12 WHERE aggregate = 1;");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    ck_assert(tui_model_poll(&m));
    ck_assert(m.complete);
    ck_assert_int_eq(m.exit_status, 0);
    ck_assert_int_eq(m.counts[2].n, 12);
    tui_model_free(&m);
    tui_model_free(NULL);
}
END_TEST

// The finder says which step its finding is as of: the last one recorded when it read the run,
// not when it was asked (a live run goes on meanwhile).
START_TEST(finder_says_which_step_it_read_to) {
    fixture();
    tui_finder *f = tui_finder_new(db_path);
    ck_assert_ptr_nonnull(f);
    for (int round = 0; round < 2; round++) {
        if (round)
            sql("INSERT INTO AMP_STEPS VALUES (7, 4, 41000000, 52000000, NULL, 0, NULL, 32768, "
                "16384, 1, 1, NULL), (7, 5, 52000000, 63000000, NULL, 0, NULL, 16384, 8192, 1, "
                "1, NULL);");
        ck_assert(tui_finder_request(f));
        tui_finding out;
        double wall, cpu;
        bool got = false;
        for (int i = 0; i < 750 && !got; i++) {
            usleep(20000);
            got = tui_finder_take(f, &out, &wall, &cpu);
        }
        ck_assert(got);
        ck_assert_int_eq(out.as_of_step, round ? 5 : 3);
        ck_assert_int_eq(out.first_step, 3);
        tui_finding_free(&out);
    }
    tui_finder_free(f);
}
END_TEST

START_TEST(model_finished_run) {
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 3), AMP_OK);
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    ck_assert(m.stats_indexed); // the (pid, step) index: no rowid ranges needed
    ck_assert(m.complete);
    ck_assert_int_eq(m.exit_status, 3);
    ck_assert_int_eq(m.stats_step, 3);
    ck_assert_uint_eq(m.n_ranges, 0);
    tui_model_show_step(&m, 3);
    ck_assert_uint_eq(m.n_rows, 4); // blocks.1.attn's activations: an f16 row and an f32 one
    tui_model_show_step(&m, 2);
    ck_assert_uint_eq(m.n_rows, 3);
    wait_for_finding(&m);
    ck_assert_int_eq(m.finding.severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(m.finding.layer, "blocks.1.attn");
    ck_assert_int_eq(m.finding.first_step, 3);
    ck_assert_int_eq(tui_model_step_index(&m, 2), 2);
    ck_assert_int_eq(tui_model_step_index(&m, 99), 3);
    ck_assert_int_eq(tui_model_step_index(&m, -5), -1);
    tui_model_free(&m);
}
END_TEST

// An f32 tensor among f16 ones (the scaled loss, 65536, under fp16 autocast) is judged against
// f32's max, not the autocast dtype's: no danger where nothing can overflow.
START_TEST(headroom_is_against_each_tensors_own_dtype) {
    fixture();
    sql("INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel,"
        " amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
        " (7, 2, NULL, 'nll_loss', 'activation_grad', 'f32', 'f16', 1, 65536.0, 0, 0, 0, 1, 0, 0),"
        " (7, 2, 2, 'linear', 'activation_grad', 'f32', 'f16', 100, 60000.0, 0, 0, 0, 0, 0, 0);");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    tui_model_show_step(&m, 2);
    const tui_layer_row *loss = find_row(&m, "(no layer)", TUI_KIND_AGRAD);
    ck_assert_ptr_nonnull(loss);
    ck_assert_str_eq(loss->dtype, "f32");
    ck_assert_double_gt(loss->headroom_bits, 100);
    // head's gradients: an f16 tensor with amax 0.001 and an f32 one near f16's max: each
    // against its own dtype's max, on rows of their own
    const tui_layer_row *head = find_row(&m, "head", TUI_KIND_AGRAD);
    ck_assert_ptr_nonnull(head);
    ck_assert_str_eq(head->dtype, "f16"); // the narrower first
    ck_assert_double_eq_tol(head->headroom_bits, log2(65504 / 0.001), 1e-9);
    const tui_layer_row *head32 = find_dtype_row(&m, "head", TUI_KIND_AGRAD, "f32");
    ck_assert_ptr_nonnull(head32);
    ck_assert_double_gt(head32->headroom_bits, 100);
    tui_model_free(&m);
}
END_TEST

// A layer id that AMP_LAYERS does not declare (a producer that skipped amp_record_layer) is shown
// as "layer N (not declared)", as the report names it, not as the top level's "(no layer)".
START_TEST(an_undeclared_layer_is_named_by_its_id) {
    fixture();
    sql("INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel,"
        " amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
        " (7, 2, 42, 'linear', 'activation', 'f16', 'f16', 8, 3.0, 0, 0, 0, 0, 0, 0),"
        " (7, 2, 43, 'linear', 'activation', 'f16', 'f16', 8, 4.0, 0, 0, 0, 0, 0, 0),"
        " (7, 2, NULL, 'nll_loss', 'activation_grad', 'f32', 'f16', 1, 1.0, 0, 0, 0, 0, 0, 0);");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    tui_model_show_step(&m, 2);
    const tui_layer_row *r42 = find_row(&m, "layer 42 (not declared)", TUI_KIND_ACT);
    const tui_layer_row *r43 = find_row(&m, "layer 43 (not declared)", TUI_KIND_ACT);
    ck_assert_ptr_nonnull(r42);
    ck_assert_ptr_nonnull(r43);
    ck_assert_close(r42->amax, 3, 0, 0);
    ck_assert_close(r43->amax, 4, 0, 0);
    ck_assert_ptr_nonnull(find_row(&m, "(no layer)", TUI_KIND_AGRAD));
    char buf[40];
    ck_assert_str_eq(tui_model_layer_label(&m, 7, 42, buf, sizeof buf), "layer 42 (not declared)");
    ck_assert_str_eq(tui_model_layer_label(&m, 7, 2, buf, sizeof buf), "head");
    ck_assert_ptr_null(tui_model_layer_label(&m, 7, -1, buf, sizeof buf));
    tui_model_free(&m);
}
END_TEST

// The attn-overflow run's step 2 outside any layer: an f32 nll_loss gradient at 65536 beside an
// f16 reshape's at 255. A row's dtype, amax and headroom are of the same tensors: not "f16,
// 6.554e+04, 8.0 bits" (an f16 tensor above f16's max with 8 bits to spare), but an f16 row at
// 255 with its 8 bits and an f32 row at 65536.
START_TEST(a_layer_row_is_of_one_dtype) {
    fixture();
    sql("INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel,"
        " amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
        " (7, 2, NULL, 'nll_loss', 'activation_grad', 'f32', 'f16', 1, 65536.0, 0, 0, 0, 1, 0, 0),"
        " (7, 2, NULL, 'to', 'activation_grad', 'f32', 'f16', 16384, 254.98, 0, 0, 0, 0, 0, 0),"
        " (7, 2, NULL, 'reshape', 'activation_grad', 'f16', 'f16', 16384, 255.0, 2, 0, 0, 0, 0,"
        " 0);");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_model *m = &app.model;
    tui_model_show_step(m, 2);
    const tui_layer_row *f16 = find_dtype_row(m, "(no layer)", TUI_KIND_AGRAD, "f16");
    ck_assert_ptr_nonnull(f16);
    ck_assert_close(f16->amax, 255, 0, 0);
    ck_assert_close(f16->headroom_bits, log2(65504 / 255.0), 1e-12, 0);
    ck_assert_int_eq(f16->tensors, 1);
    ck_assert_int_eq(f16->n_nan, 2);
    const tui_layer_row *f32 = find_dtype_row(m, "(no layer)", TUI_KIND_AGRAD, "f32");
    ck_assert_ptr_nonnull(f32);
    ck_assert_int_eq(f32->tensors, 2);
    ck_assert_close(f32->amax, 65536, 0, 0);
    ck_assert_close(f32->headroom_bits, log2(3.4028234663852886e38 / 65536), 1e-9, 0);
    ck_assert_int_eq(f32->n_nan, 0);
    // every row: the headroom is its amax's, to its dtype's max
    for (size_t i = 0; i < m->n_rows; i++) {
        const tui_layer_row *r = &m->rows[i];
        const double max = strcmp(r->dtype, "f16") == 0 ? 65504 : 3.4028234663852886e38;
        ck_assert_msg(strcmp(r->dtype, "f16") == 0 || strcmp(r->dtype, "f32") == 0, "%s", r->dtype);
        ck_assert_close(r->headroom_bits, log2(max / r->amax), 1e-9, 0);
    }
    tui_app_free(&app);
}
END_TEST

// A database of schema 1.1 has no AMP_STEPS.mem_peak_bytes: the steps load, their peak unknown.
START_TEST(model_reads_a_database_without_memory_peaks) {
    fixture();
    sql("ALTER TABLE AMP_STEPS DROP COLUMN mem_peak_bytes;");
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    ck_assert_uint_eq(m.n_steps, 4);
    ck_assert(isnan(m.steps[2].mem_mib));
    tui_model_free(&m);
}
END_TEST

// A data-parallel job's other ranks: the model follows the first process, and counts them all.
START_TEST(model_follows_the_first_of_several_processes) {
    fixture();
    sql("INSERT INTO AMP_STEPS SELECT 9, step, start_ns, end_ns, loss, loss_finite, grad_norm, "
        "scale_before, scale_after, found_inf, skipped, mem_peak_bytes FROM AMP_STEPS "
        "WHERE pid = 7 AND step < 2;"
        // and 100 more ranks of two steps each, their rows interleaved
        "WITH RECURSIVE r(p) AS (SELECT 100 UNION ALL SELECT p + 1 FROM r WHERE p < 199), "
        "s(step) AS (VALUES (0), (1)) INSERT INTO AMP_STEPS (pid, step, start_ns, end_ns) "
        "SELECT p, step, 0, 1 FROM r, s ORDER BY step, p % 7, p;"
        // a damaged file's pids that are no 32-bit integer, one read as int 7: no process
        "INSERT INTO AMP_STEPS (pid, step, start_ns, end_ns) VALUES (4294967303, 5, 0, 1), "
        "(4294967303, 6, 0, 1), ('pid 7', 7, 0, 1), (7.5, 8, 0, 1);");
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    ck_assert_int_eq(m.pid, 7);
    ck_assert_uint_eq(m.n_steps, 4);
    ck_assert_uint_eq(m.n_step_pids, 102);
    tui_model_free(&m);
}
END_TEST

// A second rank (pid 9): its own layers, steps 0-2 and statistics at step 2; P shows it, at the
// same step, and then the first again. finished: the run ends before the TUI opens it (the
// statistics through their index, not the rowid ranges learnt while following).
static void two_ranks(bool finished) {
    fixture();
    sql("INSERT INTO AMP_LAYERS VALUES (9, 0, NULL, 'blocks.0.attn'), (9, 1, NULL, 'head');"
        "INSERT INTO AMP_STEPS SELECT 9, step, start_ns, end_ns, loss + 1, loss_finite, "
        "grad_norm, scale_before, scale_after, found_inf, skipped, mem_peak_bytes FROM AMP_STEPS "
        "WHERE pid = 7 AND step < 3;"
        "INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel,"
        " amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
        " (9, 2, 1, 'linear', 'activation', 'f16', 'f16', 100, 1000.0, 0, 0, 0, 0, 0, 0),"
        " (9, 2, 0, 'mul', 'activation', 'f16', 'f16', 100, 3.0, 0, 0, 0, 0, 0, 0);");
    if (finished) ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_model *m = &app.model;
    ck_assert(m->stats_indexed == finished);
    app.view = TUI_VIEW_LAYERS;
    tui_app_update(&app);
    ck_assert_int_eq(m->pid, 7);
    ck_assert_uint_eq(tui_model_process_index(m), 0);
    tui_layout l;
    tui_layout_compute(80, 24, &l);
    tui_app_key(&app, '[', &l); // paused at step 2
    tui_app_update(&app);
    ck_assert_int_eq(app.step, 2);
    ck_assert_uint_eq(app.n_layer_rows, 3);
    ck_assert_int_eq(tui_app_key(&app, 'P', &l), TUI_REDO_UPDATE);
    ck_assert_str_eq(app.message, "process 9 (2 of 2)");
    tui_app_update(&app);
    ck_assert_int_eq(m->pid, 9);
    ck_assert_uint_eq(tui_model_process_index(m), 1);
    ck_assert_uint_eq(m->n_steps, 3);
    ck_assert_close(m->steps[0].loss, 5.2, 1e-12, 0);
    ck_assert_int_eq(m->stats_step, 2);
    ck_assert_int_eq(app.step, 2);
    ck_assert_uint_eq(app.n_layer_rows, 2);
    const tui_layer_row *head = find_row(m, "head", TUI_KIND_ACT);
    ck_assert_ptr_nonnull(head);
    ck_assert_close(head->amax, 1000.0, 0, 0);
    if (!finished) { // the run goes on: each rank's new rows go where they belong
        sql("INSERT INTO AMP_STEPS VALUES (9, 3, 30000000, 41000000, 4.5, 1, NULL, 65536, 65536, "
            "0, 0, NULL), (7, 4, 41000000, 52000000, 4.4, 1, NULL, 65536, 65536, 0, 0, NULL);"
            "INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype,"
            " numel, amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES"
            " (7, 4, 1, 'mul', 'activation', 'f16', 'f16', 100, 9.0, 0, 0, 0, 0, 0, 0),"
            " (9, 3, 1, 'linear', 'activation', 'f16', 'f16', 100, 7.0, 0, 0, 0, 0, 0, 0);");
        ck_assert(tui_model_poll(m));
        ck_assert_uint_eq(m->n_steps, 4);
        ck_assert_int_eq(m->steps[3].step, 3);
        ck_assert_int_eq(m->stats_step, 3);
        tui_model_show_step(m, 3);
        ck_assert_uint_eq(m->n_rows, 1);
        ck_assert_close(m->rows[0].amax, 7.0, 0, 0);
    }
    tui_app_key(&app, 'P', &l); // back to the first
    tui_app_update(&app);
    ck_assert_int_eq(m->pid, 7);
    ck_assert_uint_eq(m->n_steps, finished ? 4 : 5);
    ck_assert_int_eq(app.step, 2);
    ck_assert_uint_eq(app.n_layer_rows, 3);
    tui_model_show_step(m, 3);
    ck_assert_ptr_nonnull(find_row(m, "blocks.1.attn", TUI_KIND_ACT));
    tui_app_free(&app);
}

// P while paused at a step the next process did not record (it has steps 0-2, the first 0-3):
// its last step before that one is shown, and the footer says so, not a step it never had.
START_TEST(p_moves_to_a_step_the_next_process_has) {
    fixture();
    sql("INSERT INTO AMP_LAYERS VALUES (9, 0, NULL, 'blocks.0.attn');"
        "INSERT INTO AMP_STEPS SELECT 9, step, start_ns, end_ns, loss + 1, loss_finite, "
        "grad_norm, scale_before, scale_after, found_inf, skipped, mem_peak_bytes FROM AMP_STEPS "
        "WHERE pid = 7 AND step < 3;");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_app_update(&app);
    tui_layout l;
    tui_layout_compute(80, 24, &l);
    tui_app_key(&app, '[', &l);
    tui_app_key(&app, ']', &l); // paused at step 3
    tui_app_update(&app);
    ck_assert_int_eq(app.step, 3);
    tui_app_key(&app, 'P', &l);
    tui_app_update(&app);
    ck_assert_int_eq(app.model.pid, 9);
    ck_assert_int_eq(app.step, 2);
    ck_assert_str_eq(app.message, "process 9 (2 of 2): no step 3 there, step 2 shown");
    tui_app_key(&app, 'P', &l); // back: the first has step 2
    tui_app_update(&app);
    ck_assert_int_eq(app.model.pid, 7);
    ck_assert_int_eq(app.step, 2);
    ck_assert_str_eq(app.message, "process 7 (1 of 2)");
    tui_app_free(&app);
}
END_TEST

START_TEST(p_shows_the_next_process_live) {
    two_ranks(false);
}
END_TEST

START_TEST(p_shows_the_next_process_finished) {
    two_ranks(true);
}
END_TEST

// Draws view of app off-screen at cols x rows (newterm on /dev/null) and reads the window back
// into all (rows <= 24 lines of up to cols <= 100 characters); l: the layout it drew with.
static void draw_offscreen_sized(tui_app *app, int view, int cols, int rows, tui_layout *l,
                                 char all[24 * 128]) {
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    SCREEN *scr = newterm("xterm", out, in);
    ck_assert_ptr_nonnull(scr);
    resizeterm(rows, cols);
    app->view = view;
    tui_app_update(app);
    tui_layout_compute(cols, rows, l);
    tui_app_draw(app, l);
    char line[128];
    all[0] = 0;
    for (int y = 0; y < rows; y++) {
        mvwinnstr(stdscr, y, 0, line, cols);
        strcat(all, line);
        strcat(all, "\n");
    }
    endwin();
    delscreen(scr);
    fclose(out);
    fclose(in);
}

static void draw_offscreen_at(tui_app *app, int view, int cols, tui_layout *l, char all[24 * 128]) {
    draw_offscreen_sized(app, view, cols, 24, l, all);
}

// Row y of the screen all (copied into line, trailing blanks cut).
static const char *screen_row(const char *all, int y, char line[128]) {
    for (; y > 0 && all; y--) {
        all = strchr(all, '\n');
        if (all) all++;
    }
    line[0] = 0;
    if (!all) return line;
    size_t n = strcspn(all, "\n");
    snprintf(line, 128, "%.*s", (int)(n < 127 ? n : 127), all);
    for (size_t k = strlen(line); k > 0 && line[k - 1] == ' ';)
        line[--k] = 0;
    return line;
}

static void draw_offscreen(tui_app *app, int view, tui_layout *l, char all[24 * 128]) {
    draw_offscreen_at(app, view, 100, l, all);
}

// A run whose forward was searched per module (the PyTorch bridge on a sharded model): the
// overview's first non-finite event is the module's.
START_TEST(overview_shows_a_module_level_first_nonfinite) {
    sql("INSERT INTO AMP_LAYERS VALUES (7, 0, NULL, 'blocks.1.attn'), (7, 1, NULL, "
        "'blocks.1.attn.proj');"
        "INSERT INTO AMP_STEPS VALUES"
        " (7, 0, 0, 10000000, 4.2, 1, NULL, 65536, 65536, 0, 0, NULL),"
        " (7, 1, 10000000, 21000000, NULL, 0, NULL, 65536, 32768, 1, 1, NULL);"
        "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value,"
        " detail, aggregate, occurrences, last_step) VALUES"
        " (7, 1, 1, 'linear', 'fwd', 'nonfinite_module', 'error', 50, NULL, NULL, 0, 1, 1);");
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_layout l;
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "first non-finite: step 1 blocks.1.attn.proj linear fwd"), "%s", all);
    tui_app_free(&app);
}
END_TEST

// A run whose collector is gone (its launcher killed) stays "running" in META: the model tells
// it from a live one within about a second, and the overview says so.
START_TEST(model_tells_a_cut_short_run_from_a_live_one) {
    fixture();
    ck_assert_int_eq(amp_collector_poll(collector), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_model *m = &app.model;
    ck_assert(!m->complete);
    ck_assert(!m->cut_short); // this process is the collector
    const pid_t child = test_dead_pid();
    char buf[128];
    snprintf(buf, sizeof buf, "UPDATE META SET value = '%d' WHERE key = 'collector_pid';",
             (int)child);
    sql(buf);
    for (int i = 0; i < 150 && !m->cut_short; i++) {
        usleep(20000);
        tui_model_poll(m);
    }
    ck_assert(m->cut_short);
    tui_layout l;
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "recording cut short") != NULL, "%s", all);
    ck_assert_msg(strstr(all, "REPLAY") != NULL, "%s", all);
    tui_app_free(&app);
}
END_TEST

// A program that died of an exception (META exception, as the PyTorch bridge records it): the
// overview's state line says what it raised, on one line.
START_TEST(overview_says_what_the_program_died_of) {
    fixture();
    sql("INSERT INTO META (key, value, pid) VALUES ('exception', 'ValueError: bad\nbatch', 7);");
    ck_assert_int_eq(amp_collector_finish(collector, 1), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_layout l;
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "exit status 1") && strstr(all, "skipped | ValueError: bad batch"),
                  "%s", all);
    tui_app_free(&app);
}
END_TEST

// A program's own META rows named like the run's (amp_record_meta("status", ...)): not the run's
// state, and not what the program died of.
START_TEST(a_programs_own_status_rows_are_not_the_runs) {
    fixture();
    sql("INSERT INTO META (key, value, pid) VALUES ('status', 'converged', 7), "
        "('exit_status', '3', 7), ('start_ns', '5', 7), ('end_ns', '9', 7);");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    const tui_model *m = &app.model;
    ck_assert(m->complete);
    ck_assert_int_eq(m->exit_status, 0);
    ck_assert_ptr_null(m->exception);
    ck_assert_int_ne(m->start_ns, 5);
    tui_layout l;
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(!strstr(all, "converged"), "%s", all);
    tui_app_free(&app);
}
END_TEST

// A run recorded without the launcher (AMPPROBE_OUT) has no exit status in META: the state line
// leaves it out rather than showing "exit status -1".
START_TEST(overview_leaves_out_an_exit_status_not_recorded) {
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, -1), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    ck_assert(app.model.complete);
    ck_assert_int_eq(app.model.exit_status, -1);
    tui_layout l;
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "state ended after ") && !strstr(all, "exit status"), "%s", all);
    tui_app_free(&app);
}
END_TEST

// META exit_signal (the launcher's, pid 0): a program killed by SIGINT is "killed by signal 2
// (SIGINT)", not "exit status 130"; one that exited with 130 by itself (exit_signal 0) is "exit
// status 130"; without the key (older databases) the exit status shows as it always did, and a
// program's own row of that name is not the run's.
START_TEST(overview_tells_a_signal_from_an_exit_status) {
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 130), AMP_OK);
    static const struct {
        const char *sql;
        int signal;
        const char *shown, *not_shown;
    } cases[] = {
        {"INSERT INTO META (key, value, pid) VALUES ('exit_signal', '2', 0);", 2,
         ", killed by signal 2 (SIGINT) |", "exit status"},
        {"UPDATE META SET value = '0' WHERE key = 'exit_signal';", 0, "exit status 130", "killed"},
        {"DELETE FROM META WHERE key = 'exit_signal';"
         "INSERT INTO META (key, value, pid) VALUES ('exit_signal', '9', 7);",
         -1, "exit status 130", "killed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sql(cases[i].sql);
        tui_app app;
        char err[AMP_STORE_ERR_MAX], all[24 * 128];
        ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
        ck_assert_int_eq(app.model.exit_status, 130);
        ck_assert_int_eq(app.model.exit_signal, cases[i].signal);
        tui_layout l;
        draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
        ck_assert_msg(strstr(all, cases[i].shown) && !strstr(all, cases[i].not_shown),
                      "case %zu:\n%s", i, all);
        tui_app_free(&app);
    }
}
END_TEST

// `ampprobe run --tui` after Ctrl-C: the launcher stores the signal that killed the program
// (tui_live.term_signal) before its status, 130; the footer and the state line say it was killed
// by SIGINT, not that it exited with 130; a program that exited with 130 by itself did.
START_TEST(live_footer_says_which_signal_killed_the_program) {
    char buf[48];
    tui_fmt_exit(buf, sizeof buf, -1, 0);
    ck_assert_str_eq(buf, "");
    tui_fmt_exit(buf, sizeof buf, 130, 0);
    ck_assert_str_eq(buf, "exit status 130");
    tui_fmt_exit(buf, sizeof buf, 137, 9);
    ck_assert_str_eq(buf, "killed by signal 9 (SIGKILL)");
    tui_fmt_exit(buf, sizeof buf, 139, SIGSEGV);
    ck_assert_str_eq(buf, "killed by signal 11 (SIGSEGV)");
    tui_fmt_exit(buf, sizeof buf, 168, 40); // a real-time signal: no name
    ck_assert_str_eq(buf, "killed by signal 40");
    fixture();
    tui_live live = {.log_path = "live.sqlite.log", .program = "/bin/tiny_gpt"};
    atomic_init(&live.exit_status, 130);
    atomic_init(&live.term_signal, SIGINT);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    ck_assert_int_eq(tui_app_open(&app, db_path, &live, err), AMP_OK);
    tui_layout l;
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "tiny_gpt killed by signal 2 (SIGINT) | output: live.sqlite.log") &&
                      strstr(all, "state ended after") && !strstr(all, "status 130"),
                  "%s", all);
    atomic_store(&live.term_signal, 0); // it exited by itself
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "tiny_gpt exited with status 130") &&
                      strstr(all, "exit status 130") && !strstr(all, "killed"),
                  "%s", all);
    tui_app_free(&app);
}
END_TEST

// Removes the database at db_path and its side files, as `ampprobe run -f` does.
static void remove_db(void) {
    static const char *const side[] = {"-wal", "-shm", "-journal"};
    char buf[160];
    for (size_t i = 0; i < sizeof side / sizeof *side; i++) {
        snprintf(buf, sizeof buf, "%s%s", db_path, side[i]);
        unlink(buf);
    }
    ck_assert_int_eq(unlink(db_path), 0);
}

// `ampprobe run -f` deletes the file the TUI shows and records a new run at its path: the model
// starts over on the new file (the new run alone, never merged with the old one, shown from its
// newest step) and the footer says so; while the new file cannot be read yet (the launcher makes
// it empty first) and when no file is left at the path, what was shown stays and the footer says
// what became of the file.
START_TEST(model_starts_over_on_a_replaced_file) {
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_model *m = &app.model;
    tui_layout l;
    tui_layout_compute(100, 24, &l);
    tui_app_update(&app);
    tui_app_key(&app, '[', &l); // paused at step 2
    tui_app_update(&app);
    ck_assert_int_eq(app.step, 2);
    ck_assert_uint_eq(m->n_steps, 4);
    // deleted; the launcher claims the name with an empty file
    amp_collector_free(collector);
    collector = NULL;
    remove_db();
    int fd = open(db_path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert(tui_model_poll(m));
    ck_assert_int_eq(m->file, TUI_FILE_REPLACED);
    ck_assert_uint_eq(m->n_steps, 4);
    ck_assert_int_eq(m->pid, 7);
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "run.sqlite was replaced; waiting to read the new one"), "%s", all);
    // the new run: another program (pid 5), two steps so far, live
    remove_db();
    ck_assert_int_eq(amp_collector_new(db_path, NULL, &collector), AMP_OK);
    sql("INSERT INTO AMP_STEPS VALUES"
        " (5, 0, 0, 10000000, 2.5, 1, NULL, NULL, NULL, 0, 0, NULL),"
        " (5, 1, 10000000, 20000000, 2.4, 1, NULL, NULL, NULL, 0, 0, NULL);");
    ck_assert(tui_model_poll(m));
    ck_assert_uint_eq(m->restarts, 1);
    ck_assert_int_eq(m->file, TUI_FILE_SAME);
    ck_assert_int_eq(m->pid, 5);
    ck_assert_uint_eq(m->n_step_pids, 1);
    ck_assert_uint_eq(m->n_steps, 2);
    ck_assert_uint_eq(m->n_events, 0);
    ck_assert_uint_eq(m->n_layers, 0);
    ck_assert(!m->complete);
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_int_eq(app.step, 1);
    ck_assert(app.following);
    ck_assert_msg(strstr(all, "run.sqlite was replaced by a new run; showing it") &&
                      strstr(all, "2 steps, 0 skipped") && !strstr(all, "of process") &&
                      !strstr(all, "non-finite"),
                  "%s", all);
    // it goes on: read as any live run
    sql("INSERT INTO AMP_STEPS VALUES (5, 2, 20000000, 30000000, 2.3, 1, NULL, NULL, NULL, 0, 0,"
        " NULL);");
    ck_assert(tui_model_poll(m));
    ck_assert_uint_eq(m->n_steps, 3);
    // removed, and nothing in its place: what was shown stays
    remove_db();
    ck_assert(tui_model_poll(m));
    ck_assert_int_eq(m->file, TUI_FILE_REMOVED);
    ck_assert_uint_eq(m->n_steps, 3);
    ck_assert(!tui_model_poll(m));
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "run.sqlite was removed; showing what it held") &&
                      strstr(all, "3 steps, 0 skipped") && strstr(all, "REPLAY"),
                  "%s", all);
    tui_app_free(&app);
}
END_TEST

// A run that recorded no step because the PyTorch bridge did not attach: no loss shown (not
// "NaN"), and the report's warning is the overview's top finding.
START_TEST(overview_of_a_run_without_steps) {
    sql("INSERT INTO META (key, value, pid) VALUES ('bridge_error', 'ImportError: ampprobe.torch "
        "needs torch 2.4 or newer; this is torch 1.9.0', 7);");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    wait_for_finding(&app.model);
    tui_layout l;
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "loss       -") && !strstr(all, "NaN"), "%s", all);
    ck_assert_msg(strstr(all, "[warning] run-end") && strstr(all, "PyTorch bridge did not attach"),
                  "%s", all);
    tui_app_free(&app);
    // nothing recorded at all: nothing to diagnose, not a healthy run
    sql("DELETE FROM META WHERE key = 'bridge_error';");
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    for (int i = 0; i < 750 && app.model.finding_ms == 0; i++) {
        usleep(20000);
        tui_model_poll(&app.model);
    }
    draw_offscreen(&app, TUI_VIEW_OVERVIEW, &l, all);
    ck_assert_msg(strstr(all, "top finding: none: no step was recorded, nothing to diagnose"), "%s",
                  all);
    tui_app_free(&app);
}
END_TEST

// A run recorded without CUDA in --trace has no kernels for that reason, not for being a CPU run.
START_TEST(kernels_view_says_cuda_was_not_traced) {
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128];
    tui_layout l;
    for (int traced = 0; traced < 2; traced++) {
        if (traced) sql("INSERT INTO META (key, value, pid) VALUES ('trace', 'amp,nvtx', 0);");
        ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
        draw_offscreen(&app, TUI_VIEW_KERNELS, &l, all);
        ck_assert_msg(strstr(all, "no kernel data in this run"), "%s", all);
        const bool said_trace = strstr(all, "CUDA was not traced (--trace amp,nvtx)") != NULL;
        const bool said_cpu = strstr(all, "CPU runs record numerics only") != NULL;
        ck_assert_msg(said_trace == (traced == 1) && said_cpu == (traced == 0), "%s", all);
        tui_app_free(&app);
    }
}
END_TEST

// Kernels the report ties to ops: the kernels view names the layer most of each one's time ran
// in (the finder's), with the others counted.
START_TEST(kernels_view_names_each_kernels_layer) {
    fixture();
    // steps 2 and 3 of pid 7 (globalPid 7 << 24): a linear in head, then at step 3 one in
    // blocks.0.attn too, each launching the GEMM; an elementwise kernel no op launched
    sql("INSERT INTO AMP_OPS VALUES"
        " (7, 2, 2, 'linear', 'fwd', 'f16,f16', 'f16', 'lower_precision_fp', '(8, 64)', 1e6, 1e4,"
        " 22000000, 23000000),"
        " (7, 3, 2, 'linear', 'fwd', 'f16,f16', 'f16', 'lower_precision_fp', '(8, 64)', 1e6, 1e4,"
        " 31000000, 32000000),"
        " (7, 3, 0, 'linear', 'fwd', 'f16,f16', 'f16', 'lower_precision_fp', '(8, 64)', 1e6, 1e4,"
        " 33000000, 34000000);"
        "INSERT INTO StringIds VALUES (1, 'nvjet_sm90_gemm'), (2, 'cudaLaunchKernel'),"
        " (3, 'elementwise_add'), (4, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL'),"
        " (5, 'fill_kernel');"
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES"
        " (22000100, 22000200, 0, 117440519, 1, 2, 0, NULL),"
        " (31000100, 31000200, 0, 117440519, 2, 2, 0, NULL),"
        " (33000100, 33000200, 0, 117440519, 3, 2, 0, NULL);" TEST_KERNEL_INSERT "VALUES"
        " (22100000, 22400000, 0, 1, 7, 1, 117440512, 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 1),"
        " (31100000, 31400000, 0, 1, 7, 2, 117440512, 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 2),"
        " (33100000, 33200000, 0, 1, 7, 3, 117440512, 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 3),"
        " (35000000, 36000000, 0, 1, 7, 9, 117440512, 3, 3, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, "
        "4), (37000000, 37050000, 0, 1, 8, 10, 117440512, 4, 4, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, "
        "0, 5), (38000000, 38002000, 0, 1, 7, 11, 117440512, 5, 5, 32, 1, 1, 1, 128, 1, 1, 0, 0, "
        "0, 0, 6);");
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    wait_for_finding(&app.model);
    ck_assert_str_eq(tui_finding_kernel_layer(&app.model.finding, "nvjet_sm90_gemm"), "head +1");
    ck_assert_ptr_null(tui_finding_kernel_layer(&app.model.finding, "elementwise_add"));
    ck_assert_ptr_null(tui_finding_kernel_layer(&app.model.finding, "no_such_kernel"));
    char all[24 * 128];
    tui_layout l;
    draw_offscreen(&app, TUI_VIEW_KERNELS, &l, all);
    ck_assert_msg(strstr(all, "LAYER"), "%s", all);
    char *gemm = strstr(all, "nvjet_sm90_gemm");
    ck_assert_msg(gemm && strstr(gemm, "head +1") && strstr(gemm, "head +1") < strchr(gemm, '\n'),
                  "%s", all);
    // the report's classes: the GEMM from its ops' figures (1e6 FLOPs over 1e4 bytes, below the
    // ridge: memory, as the roofline rule has it); the others, which no op launched, by name and
    // mean: an elementwise kernel moves memory, NCCL communicates, a 2 us kernel is its launch's
    // cost
    ck_assert_str_eq(tui_finding_kernel_class(&app.model.finding, "nvjet_sm90_gemm"), "memory");
    ck_assert_ptr_null(tui_finding_kernel_class(&app.model.finding, "no_such_kernel"));
    ck_assert_msg(strstr(gemm, "memory") && strstr(gemm, "memory") < strchr(gemm, '\n'), "%s", all);
    char *add = strstr(all, "elementwise_add"), *nccl = strstr(all, "ncclDevKernel");
    ck_assert_msg(add && strstr(add, "memory") && strstr(add, "memory") < strchr(add, '\n'), "%s",
                  all);
    ck_assert_msg(nccl && strstr(nccl, "comm ") && strstr(nccl, "comm ") < strchr(nccl, '\n'), "%s",
                  all);
    char *fill = strstr(all, "fill_kernel");
    ck_assert_msg(fill && strstr(fill, "launch") && strstr(fill, "launch") < strchr(fill, '\n'),
                  "%s", all);
    // before the report has read the run, the GEMM is classed by its name
    tui_finding seen = app.model.finding;
    app.model.finding = (tui_finding){.first_step = -1, .as_of_step = -1};
    draw_offscreen(&app, TUI_VIEW_KERNELS, &l, all);
    gemm = strstr(all, "nvjet_sm90_gemm");
    ck_assert_msg(gemm && strstr(gemm, "compute") && strstr(gemm, "compute") < strchr(gemm, '\n'),
                  "%s", all);
    app.model.finding = seen;
    // by time the longer elementwise kernel leads; sorted by layer (those without one last) the
    // GEMM does; then filtered by the layer
    ck_assert_str_eq(app.kernel_rows[0]->name, "elementwise_add");
    tui_table *t = &app.tables[TUI_VIEW_KERNELS];
    while (strcmp(tui_view_kernels.columns[t->sort], "layer") != 0)
        tui_app_key(&app, 's', &l);
    tui_app_update(&app);
    ck_assert_uint_eq(app.n_kernel_rows, 4);
    ck_assert_str_eq(app.kernel_rows[0]->name, "nvjet_sm90_gemm");
    ck_assert_str_eq(app.kernel_rows[1]->name, "elementwise_add");
    snprintf(t->filter, sizeof t->filter, "head");
    app.seen_generation[TUI_VIEW_KERNELS] = 0;
    tui_app_update(&app);
    ck_assert_uint_eq(app.n_kernel_rows, 1);
    ck_assert_str_eq(app.kernel_rows[0]->name, "nvjet_sm90_gemm");
    tui_app_free(&app);
}
END_TEST

// A kernel row that ends before it starts (an incomplete record: end 0) adds no negative time to
// the kernels view; the report leaves it out too.
START_TEST(kernels_of_incomplete_records_are_left_out) {
    fixture();
    sql("INSERT INTO StringIds VALUES (1, 'nvjet_sm90_gemm');" TEST_KERNEL_INSERT "VALUES"
        " (22100000, 22400000, 0, 1, 7, 1, 117440512, 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 1),"
        " (31100000, 0, 0, 1, 7, 2, 117440512, 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 2);");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    ck_assert_uint_eq(m.n_kernels, 1);
    ck_assert_int_eq(m.kernels[0].total_ns, 300000);
    ck_assert_int_eq(m.kernels[0].count, 1);
    ck_assert_int_eq(m.kernel_ns, 300000);
    tui_model_free(&m);
}
END_TEST

START_TEST(layers_view_danger_and_filter) {
    fixture();
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    app.view = TUI_VIEW_LAYERS;
    tui_app_update(&app); // follows: the newest step, 3
    ck_assert_int_eq(app.step, 3);
    ck_assert_uint_eq(app.n_layer_rows, 4); // blocks.1.attn's activations: f16 and f32 rows
    ck_assert_str_eq(app.layer_rows[0]->name, "blocks.1.attn"); // danger first
    // s sorts by the next column (layer order), / filters by name
    tui_layout l;
    tui_layout_compute(80, 24, &l);
    ck_assert_int_eq(tui_app_key(&app, 's', &l), TUI_REDO_UPDATE);
    tui_app_update(&app);
    ck_assert_str_eq(app.layer_rows[0]->name, "blocks.0.attn");
    ck_assert_int_eq(tui_app_key(&app, '/', &l), TUI_REDO_DRAW);
    tui_app_key(&app, 'h', &l);
    tui_app_key(&app, 'e', &l);
    tui_app_key(&app, '\r', &l);
    ck_assert(!app.editing);
    tui_app_update(&app);
    ck_assert_uint_eq(app.n_layer_rows, 1);
    ck_assert_str_eq(app.layer_rows[0]->name, "head");
    // [ steps back and pauses; p follows again
    tui_app_key(&app, '[', &l);
    ck_assert(!app.following);
    ck_assert_int_eq(app.step, 2);
    tui_app_key(&app, 'p', &l);
    tui_app_update(&app);
    ck_assert_int_eq(app.step, 3);
    ck_assert_int_eq(tui_app_key(&app, 'q', &l), TUI_REDO_QUIT);
    tui_app_free(&app);
}
END_TEST

// The filter takes UTF-8 as getch gives it (a byte at a time); backspace takes a character back
// whole; a full filter says so instead of dropping keys in silence.
START_TEST(layers_filter_takes_utf8_and_says_when_full) {
    fixture();
    sql("UPDATE AMP_LAYERS SET name = 'блок.attn' WHERE pid = 7 AND id = 0;");
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    app.view = TUI_VIEW_LAYERS;
    tui_app_update(&app);
    tui_layout l;
    tui_layout_compute(80, 24, &l);
    tui_app_key(&app, '/', &l);
    for (const unsigned char *p = (const unsigned char *)"блок"; *p; p++)
        tui_app_key(&app, *p, &l);
    ck_assert_str_eq(app.tables[TUI_VIEW_LAYERS].filter, "блок");
    tui_app_key(&app, KEY_BACKSPACE, &l);
    ck_assert_str_eq(app.tables[TUI_VIEW_LAYERS].filter, "бло");
    tui_app_key(&app, '\r', &l);
    tui_app_update(&app);
    ck_assert_uint_eq(app.n_layer_rows, 1);
    ck_assert_str_eq(app.layer_rows[0]->name, "блок.attn");
    tui_app_key(&app, '/', &l);
    for (int i = 0; i < 70; i++)
        tui_app_key(&app, 'x', &l);
    ck_assert_uint_eq(strlen(app.tables[TUI_VIEW_LAYERS].filter), 63);
    ck_assert_str_eq(app.message, "the filter takes 63 bytes at most");
    tui_app_key(&app, 0xD0, &l); // a two-byte character does not fit: not half of it
    ck_assert_uint_eq(strlen(app.tables[TUI_VIEW_LAYERS].filter), 63);
    tui_app_free(&app);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The overview's graph titles: of the whole run up to the shown step, with no text over another

// The screen line of all that holds needle (copied into line, trailing blanks cut), or "".
static const char *screen_line(const char *all, const char *needle, char line[128]) {
    const char *p = strstr(all, needle);
    line[0] = 0;
    if (!p) return line;
    while (p > all && p[-1] != '\n')
        p--;
    size_t n = strcspn(p, "\n");
    snprintf(line, 128, "%.*s", (int)(n < 127 ? n : 127), p);
    for (size_t k = strlen(line); k > 0 && line[k - 1] == ' ';)
        line[--k] = 0;
    return line;
}

// 150 steps of pid 7, more than an 80-column sparkline shows: the scale starts at 65536 and
// halves at the skipped steps 3 (its loss NaN) and 140.
START_TEST(overview_titles_are_of_the_run_not_the_window) {
    sql("WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 149) "
        "INSERT INTO AMP_STEPS SELECT 7, n, n * 10000000, n * 10000000 + 9000000, "
        "CASE n WHEN 3 THEN NULL ELSE 4.0 - n / 100.0 END, n != 3, NULL, "
        "CASE WHEN n <= 3 THEN 65536 WHEN n <= 140 THEN 32768 ELSE 16384 END, "
        "CASE WHEN n < 3 THEN 65536 WHEN n < 140 THEN 32768 ELSE 16384 END, "
        "n IN (3, 140), n IN (3, 140), NULL FROM s;"
        // step 0's update grew the scale: "from" is what the run started with, not that
        "UPDATE AMP_STEPS SET scale_after = 131072 WHERE step = 0;"
        // step 140's step record never came (only its scale update): no loss, not a NaN one
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = NULL WHERE step = 140;");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128], line[128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_layout l;
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all); // the newest step: 149
    ck_assert_int_eq(app.step, 149);
    // the header keeps the step whole beside "? help" (the file's name is what gives way)
    ck_assert_msg(strstr(screen_line(all, "ampprobe", line), "step 149 of 0-149") &&
                      strstr(line, "? help"),
                  "%s", line);
    ck_assert_msg(strstr(screen_line(all, "step time", line), "graphs: steps 70-149"), "%s", all);
    ck_assert_str_eq(screen_line(all, "loss scale", line),
                     "loss scale 16384 (from 65536, log2 axis)  x: 2 skipped steps");
    ck_assert_msg(strstr(screen_line(all, "loss  ", line), "1 non-finite losses"), "%s", all);
    // back at step 79: the graphs show steps 0-79, the figures are of those steps
    app.following = false;
    app.step = 79;
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_msg(strstr(screen_line(all, "step time", line), "graphs: steps 0-79"), "%s", all);
    ck_assert_str_eq(screen_line(all, "loss scale", line),
                     "loss scale 32768 (from 65536, log2 axis)  x: 1 skipped steps");
    ck_assert_msg(strstr(screen_line(all, "loss  ", line), "1 non-finite losses"), "%s", all);
    // at step 2 nothing was skipped yet
    app.step = 2;
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_str_eq(screen_line(all, "loss scale", line),
                     "loss scale 65536 (from 65536, log2 axis)");
    ck_assert_msg(!strstr(all, "non-finite"), "%s", all);
    tui_app_free(&app);
}
END_TEST

// A scale too long for a fixed column (mlp --fault scale-thrash --init-scale 4294967296): the
// skip label goes after the title, shortened or left out where it does not fit.
START_TEST(overview_skip_label_never_covers_the_scale) {
    sql("WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 11) "
        "INSERT INTO AMP_STEPS SELECT 7, n, n * 1000000, n * 1000000 + 900000, 2.0, 1, NULL, "
        "536870912.0 / (1 << min(n, 8)), 536870912.0 / (1 << min(n + 1, 8)), n < 7, n < 7, NULL "
        "FROM s;");
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128], line[128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_layout l;
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_str_eq(screen_line(all, "loss scale", line),
                     "loss scale 2.09715e+06 (from 5.36871e+08, log2 axis)  x: 7 skipped steps");
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 60, &l, all);
    ck_assert_str_eq(screen_line(all, "loss scale", line),
                     "loss scale 2.09715e+06 (from 5.36871e+08, log2 axis)  x: 7");
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 50, &l, all); // the axis' name gives way
    ck_assert_str_eq(screen_line(all, "loss scale", line),
                     "loss scale 2.09715e+06 (from 5.36871e+08)  x: 7");
    // the scale it started from gives way to the count (the title would not fit even alone)
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 40, &l, all);
    ck_assert_str_eq(screen_line(all, "loss scale", line), "loss scale 2.09715e+06  x: 7 skipped");
    tui_app_free(&app);
}
END_TEST

// The header names the shown step among the recorded ones as the graphs name steps ("steps
// 0-3"): "step 3 of 3" read as a count, one short of the run's 4 steps. Before any step: "no steps
// yet" while the run goes on, "no steps recorded" once it is over.
START_TEST(header_names_the_step_among_the_recorded_ones) {
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128], line[128];
    tui_layout l;
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK); // live, no step yet
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_msg(strstr(screen_row(all, 0, line), "LIVE  following  no steps yet"), "%s", line);
    draw_offscreen_at(&app, TUI_VIEW_LAYERS, 80, &l, all);
    ck_assert_msg(strstr(all, "no tensor statistics recorded yet"), "%s", all);
    tui_app_free(&app);
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK); // ended without one
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_msg(strstr(screen_row(all, 0, line), "REPLAY  following  no steps recorded") &&
                      !strstr(line, "yet"),
                  "%s", line);
    draw_offscreen_at(&app, TUI_VIEW_LAYERS, 80, &l, all); // the views say so too
    ck_assert_str_eq(screen_line(all, "no tensor", line), "  no tensor statistics recorded");
    draw_offscreen_at(&app, TUI_VIEW_EVENTS, 80, &l, all);
    ck_assert_str_eq(screen_line(all, "no events", line), "  no events recorded");
    tui_app_free(&app);
    // under `run --tui`, once the program has ended
    tui_live live = {.log_path = "run.sqlite.log", .program = "/bin/true"};
    atomic_init(&live.exit_status, 0);
    atomic_init(&live.term_signal, 0);
    ck_assert_int_eq(tui_app_open(&app, db_path, &live, err), AMP_OK);
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_msg(strstr(screen_row(all, 0, line), "no steps recorded"), "%s", line);
    tui_app_free(&app);
    fixture(); // steps 0-3
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_msg(strstr(screen_row(all, 0, line), "step 3 of 0-3"), "%s", line);
    app.following = false;
    app.step = 1;
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_msg(strstr(screen_row(all, 0, line), "PAUSED  step 1 of 0-3"), "%s", line);
    // at the smallest size the step stays whole (the program's name and the file's give way)
    draw_offscreen_sized(&app, TUI_VIEW_OVERVIEW, TUI_MIN_COLS, TUI_MIN_ROWS, &l, all);
    ck_assert_msg(strstr(screen_row(all, 0, line), "step 1 of 0-3"), "%s", line);
    tui_app_free(&app);
}
END_TEST

// A GradScaler that backed off all the way to 0 (fp16 collapse): 0 has no place on a log axis,
// and the graph was blank there. It shows as 0 along the graph's bottom row.
START_TEST(log_graph_shows_a_scale_backed_off_to_0) {
    sql("WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 9) "
        "INSERT INTO AMP_STEPS SELECT 7, n, n * 1000000, n * 1000000 + 900000, NULL, 0, NULL, "
        "CASE WHEN n < 5 THEN 65536.0 / (1 << (4 * n)) ELSE 0 END, "
        "CASE WHEN n < 5 THEN 65536.0 / (1 << (4 * n)) ELSE 0 END, n > 0, n > 0, NULL FROM s;");
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128], line[128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_layout l;
    draw_offscreen_at(&app, TUI_VIEW_OVERVIEW, 80, &l, all);
    ck_assert_str_eq(screen_line(all, "loss scale", line),
                     "loss scale 0 (from 65536, log2 axis)  x: 9 skipped steps");
    const int bottom = l.ov_scale.y + l.ov_scale.h - 1;
    screen_row(all, bottom, line);
    ck_assert_int_eq((int)strlen(line), 10);
    for (int i = 0; i < 10; i++)
        ck_assert_msg(i < 5 ? line[i] != ' ' && line[i] != '0' : line[i] == '0', "column %d: '%s'",
                      i, line);
    for (int y = l.ov_scale.y + 1; y < bottom; y++) // above a 0: nothing
        ck_assert_msg(strlen(screen_row(all, y, line)) <= 5, "row %d: '%s'", y, line);
    tui_app_free(&app);
}
END_TEST

// A text that does not fit shows that it was cut: an ellipsis ("..." here: the tests run in the C
// locale; "…" in a UTF-8 one) where it lost its end, middle or start.
START_TEST(cut_texts_end_in_an_ellipsis) {
    char buf[64];
    ck_assert_str_eq(tui_fit(buf, sizeof buf, "step_skipped", 12, TUI_CUT_END), "step_skipped");
    ck_assert_str_eq(tui_fit(buf, sizeof buf, "nonfinite_producer", 10, TUI_CUT_END), "nonfini...");
    ck_assert_str_eq(tui_fit(buf, sizeof buf, "blocks.11.attn.proj", 12, TUI_CUT_MIDDLE),
                     "bloc....proj");
    ck_assert_str_eq(tui_fit(buf, sizeof buf, "blocks.11.attn.proj", 12, TUI_CUT_START),
                     "...attn.proj");
    ck_assert_str_eq(tui_fit(buf, sizeof buf, "events   ", 7, TUI_CUT_END), "events "); // padding
    ck_assert_str_eq(tui_fit(buf, sizeof buf, "events", 2, TUI_CUT_END), "..");
    ck_assert_str_eq(tui_fit(buf, sizeof buf, "events", 0, TUI_CUT_END), "");
    // a recorded name's control characters (a newline broke a row, ESC drew as two columns
    // counted as one) show as '?', a C1 one (CSI, U+009B) as one '?' too
    ck_assert_str_eq(tui_fit(buf, sizeof buf, "enc\nFAKE\033[31m\t\xc2\x9bz", 20, TUI_CUT_END),
                     "enc?FAKE?[31m??z");
    ck_assert_str_eq(tui_cell(buf, sizeof buf, "a\nb", 5, TUI_CUT_END), "a?b  ");
    ck_assert_str_eq(tui_fit_path(buf, sizeof buf, "/tmp/runs/live1.sqlite.log", 26),
                     "/tmp/runs/live1.sqlite.log");
    ck_assert_str_eq(tui_fit_path(buf, sizeof buf, "/tmp/runs/live1.sqlite.log", 20),
                     ".../live1.sqlite.log"); // the file's name whole
    ck_assert_str_eq(tui_fit_path(buf, sizeof buf, "/tmp/runs/live1.sqlite.log", 12),
                     "live...e.log");
    // in a UTF-8 terminal a CJK character takes two columns: cuts count columns, not characters
    if (setlocale(LC_CTYPE, "C.UTF-8")) {
        ck_assert_str_eq(tui_fit(buf, sizeof buf, "層層層層層層", 12, TUI_CUT_END), "層層層層層層");
        ck_assert_str_eq(tui_fit(buf, sizeof buf, "層層層層層層", 11, TUI_CUT_END),
                         "層層層層層\u2026");
        ck_assert_str_eq(tui_fit(buf, sizeof buf, "層層層層層層", 6, TUI_CUT_END), "層層\u2026");
        ck_assert_str_eq(tui_fit(buf, sizeof buf, "a層層層層b", 6, TUI_CUT_MIDDLE), "a\u2026層b");
        ck_assert_str_eq(tui_fit(buf, sizeof buf, "blocks.層.proj", 8, TUI_CUT_START),
                         "\u2026層.proj");
        ck_assert_str_eq(tui_fit(buf, sizeof buf, "blocks.層.proj", 6, TUI_CUT_START),
                         "\u2026.proj"); // (層 would straddle the edge)
        ck_assert_str_eq(tui_cell(buf, sizeof buf, "層b", 6, TUI_CUT_END), "層b   "); // padded
        setlocale(LC_CTYPE, "C");
    }

    // `run --tui` after the program ended: the log's name is never cut short of ".log" unseen
    fixture();
    sql("INSERT INTO META (key, value, pid) VALUES ('device', 'cpu', 0), ('precision', 'fp16', 0),"
        " ('command', '/build/samples/tiny_gpt --device cpu --precision fp16 --fault "
        "attn-overflow', 0);"
        "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 149) "
        "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value,"
        " detail, aggregate, occurrences, last_step) SELECT 7, 3, 1, 'mul', 'fwd', "
        "'nonfinite_propagated', 'info', 1, NULL, NULL, 0, 1, 3 FROM s;");
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    static const char log_path[] = "live1.sqlite.log";
    tui_live live = {.log_path = log_path, .program = "/build/samples/tiny_gpt"};
    atomic_init(&live.exit_status, 0);
    atomic_init(&live.term_signal, 0);
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128], line[128];
    ck_assert_int_eq(tui_app_open(&app, db_path, &live, err), AMP_OK);
    tui_layout l;
    static const int sizes[][2] = {{100, 24}, {80, 24}, {60, 16}, {40, 14}};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        draw_offscreen_sized(&app, TUI_VIEW_OVERVIEW, sizes[k][0], sizes[k][1], &l, all);
        int shown = 0;
        for (const char *p = all; (p = strstr(p, "output: ")); shown++) {
            p += strlen("output: ");
            size_t n = strcspn(p, " \n");
            ck_assert_msg((n == strlen(log_path) && strncmp(p, log_path, n) == 0) ||
                              (memmem(p, n, "...", 3) && n >= 8),
                          "%dx%d: the log's name cut unseen:\n%s", sizes[k][0], sizes[k][1], all);
        }
        ck_assert_msg(shown >= 1, "%dx%d: no log named:\n%s", sizes[k][0], sizes[k][1], all);
        if (sizes[k][0] >= 80) // there: whole, on the command's line and in the footer
            ck_assert_msg(shown == 2 && !strstr(all, "output: live1..."), "%s", all);
    }
    // at 40x14: the events' title whole, shortened (not "events (153 row"), every view's tab
    ck_assert_msg(strncmp(screen_line(all, "events (", line), "events (153) ", 13) == 0, "%s", all);
    ck_assert_msg(strstr(screen_row(all, 1, line), "4 events"), "%s", line);
    ck_assert_msg(strstr(all, "nonfinit...   1 "), "%s", all); // its kinds cut, and said so
    tui_app_free(&app);
}
END_TEST

// A flat series (a loss scale that holds at 65536) draws at half the graph's height at every size:
// it drew as a full row under a sliver (".") at 80x24 and as five ninths at 40x14.
START_TEST(a_flat_series_draws_alike_at_every_size) {
    for (int steps = 8; steps <= 6 * 9; steps++)
        ck_assert_int_eq(2 * tui_spark_steps(65536, 65536, 65536, steps), steps - steps % 2);
    ck_assert_int_eq(tui_spark_steps(1, 1, 3, 16), 1); // the lowest one step, the highest all
    ck_assert_int_eq(tui_spark_steps(3, 1, 3, 16), 16);
    ck_assert_int_eq(tui_spark_steps(NAN, 1, 3, 16), 0);
    sql("WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 9) "
        "INSERT INTO AMP_STEPS SELECT 7, n, n * 1000000, n * 1000000 + 900000, 2.0, 1, NULL, "
        "65536, 65536, 0, 0, NULL FROM s;");
    tui_app app;
    char err[AMP_STORE_ERR_MAX], all[24 * 128], line[128];
    ck_assert_int_eq(tui_app_open(&app, db_path, NULL, err), AMP_OK);
    tui_layout l;
    draw_offscreen_sized(&app, TUI_VIEW_OVERVIEW, 80, 24, &l, all); // 2 rows: the bottom one full
    ck_assert_int_eq(l.ov_scale.h, 3);
    ck_assert_str_eq(screen_row(all, l.ov_scale.y + 1, line), "");
    ck_assert_str_eq(screen_row(all, l.ov_scale.y + 2, line), "@@@@@@@@@@");
    draw_offscreen_sized(&app, TUI_VIEW_OVERVIEW, 40, 14, &l, all); // 1 row: half of it
    ck_assert_int_eq(l.ov_scale.h, 2);
    ck_assert_str_eq(screen_row(all, l.ov_scale.y + 1, line), "==========");
    tui_app_free(&app);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// A damaged database is said so, not shown as an empty run

// A copy of the finished fixture (SQLite's backup, page for page) at path, with junk written over
// the start of table's root page.
static void damaged_copy(const char *table, char *path, size_t n) {
    snprintf(path, n, "%s/damaged-%s.sqlite", tmpdir, table);
    sqlite3 *src, *dst;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &src, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_open(path, &dst), SQLITE_OK);
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(sqlite3_backup_step(b, -1), SQLITE_DONE);
    ck_assert_int_eq(sqlite3_backup_finish(b), SQLITE_OK);
    sqlite3_close(src);
    sqlite3_stmt *q;
    ck_assert_int_eq(sqlite3_prepare_v2(dst,
                                        "SELECT rootpage, (SELECT page_size FROM pragma_page_size) "
                                        "FROM sqlite_master WHERE name = ?1",
                                        -1, &q, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(q, 1, table, -1, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
    const long root = (long)sqlite3_column_int64(q, 0), page = (long)sqlite3_column_int64(q, 1);
    sqlite3_finalize(q);
    sqlite3_close(dst);
    ck_assert_int_gt(root, 1);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, (root - 1) * page, SEEK_SET), 0);
    for (int i = 0; i < 64; i++)
        fputs("\xde\xad\xbe\xef", f);
    ck_assert_int_eq(fclose(f), 0);
}

// `ampprobe tui path` without a terminal: its exit status, its stderr into out.
static int tui_command(const char *path, char *out, size_t n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s tui '%s' 2>&1 </dev/null", AMPPROBE, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(model_says_a_damaged_file_is_damaged) {
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    char steps[160], stats[160], want[256], out[1024];
    damaged_copy("AMP_STEPS", steps, sizeof steps);
    damaged_copy("AMP_TENSOR_STATS", stats, sizeof stats);
    // AMP_STEPS is read on open: it fails, in one line
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, steps, err), AMP_ERR_CORRUPT);
    snprintf(want, sizeof want, "%s: database disk image is malformed", steps);
    ck_assert_str_eq(err, want);
    // the statistics of a finished run are read when a step is shown: the model's error then,
    // and nothing is read any more
    ck_assert_int_eq(tui_model_open(&m, stats, err), AMP_OK);
    ck_assert_str_eq(m.error, "");
    ck_assert_uint_eq(m.n_steps, 4);
    tui_model_show_step(&m, 3);
    snprintf(want, sizeof want, "%s: database disk image is malformed", stats);
    ck_assert_str_eq(m.error, want);
    ck_assert_int_eq(m.error_code, SQLITE_CORRUPT);
    ck_assert_uint_eq(m.n_rows, 0);
    ck_assert(!tui_model_poll(&m));
    tui_model_free(&m);
    // the report (the finder's thread) reads them too: an ended run it cannot read is an error
    ck_assert_int_eq(tui_model_open(&m, stats, err), AMP_OK);
    for (int i = 0; i < 750 && !m.error[0]; i++) {
        usleep(20000);
        tui_model_poll(&m);
    }
    ck_assert_msg(strstr(m.error, stats) &&
                      strstr(m.error, "cannot read the run (database disk image is malformed)"),
                  "%s", m.error);
    ck_assert(!m.finding.valid); // not "none: no warning or error in this run"
    tui_model_free(&m);
    // the command: one line, exit status 2, before it would ask for a terminal
    snprintf(want, sizeof want, "ampprobe tui: %s: database disk image is malformed\n", steps);
    ck_assert_int_eq(tui_command(steps, out, sizeof out), 2);
    ck_assert_str_eq(out, want);
    snprintf(want, sizeof want, "ampprobe tui: %s: database disk image is malformed\n", stats);
    ck_assert_int_eq(tui_command(stats, out, sizeof out), 2);
    ck_assert_str_eq(out, want);
}
END_TEST

// A database locked by another connection (SQLITE_BUSY once the busy timeout has passed) is not
// an error: it is read again once free.
START_TEST(model_reads_a_busy_database_again) {
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK); // a rollback journal: lockable
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(tui_model_open(&m, db_path, err), AMP_OK);
    ck_assert_uint_eq(m.n_steps, 4);
    sqlite3 *lock;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &lock, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(lock, 10000); // the model's finding thread may be reading: wait for it
    ck_assert_int_eq(sqlite3_exec(lock,
                                  "BEGIN EXCLUSIVE; INSERT INTO AMP_STEPS VALUES (7, 4, 41000000,"
                                  " 52000000, 3.9, 1, NULL, 32768, 32768, 0, 0, NULL);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    tui_model_poll(&m); // waits out the busy timeout
    ck_assert_str_eq(m.error, "");
    tui_model_show_step(&m, 2);
    ck_assert_str_eq(m.error, "");
    ck_assert_int_eq(m.rows_step, -1); // not taken for a step without statistics
    ck_assert_int_eq(sqlite3_exec(lock, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(lock);
    ck_assert(tui_model_poll(&m));
    ck_assert_str_eq(m.error, "");
    ck_assert_uint_eq(m.n_steps, 5);
    tui_model_show_step(&m, 2);
    ck_assert_uint_eq(m.n_rows, 3);
    tui_model_free(&m);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// A terminal that cannot move the cursor

// TERM while f runs.
static bool usable_with_term(const char *term) {
    const char *was = getenv("TERM");
    char *saved = was ? strdup(was) : NULL;
    setenv("TERM", term, 1);
    int fd = open("/dev/null", O_WRONLY);
    bool usable = tui_terminal_usable(fd);
    close(fd);
    if (saved)
        setenv("TERM", saved, 1);
    else
        unsetenv("TERM");
    free(saved);
    return usable;
}

// Starts argv on a new pseudo-terminal (its controlling terminal) with TERM=term, stderr into
// a pipe (*err_fd); returns the pid, the terminal's master side in *master.
static pid_t spawn_on_pty(char *const argv[], const char *term, int *master, int *err_fd) {
    *master = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(*master, 0);
    ck_assert_int_eq(grantpt(*master), 0);
    ck_assert_int_eq(unlockpt(*master), 0);
    const char *slave = ptsname(*master);
    ck_assert_ptr_nonnull(slave);
    int errpipe[2];
    ck_assert_int_eq(pipe(errpipe), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(*master); // the terminal's only holder is the test: its close is the hang-up
        setsid();
        int fd = open(slave, O_RDWR);
        if (fd < 0) _exit(127);
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(errpipe[1], 2);
        close(errpipe[0]);
        setenv("TERM", term, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    close(errpipe[1]);
    fcntl(*master, F_SETFL, O_NONBLOCK);
    *err_fd = errpipe[0];
    return pid;
}

// Waits up to ms for pid, draining what it writes to the terminal; true when it ended.
static bool ended_within(pid_t pid, int master, int ms, int *status) {
    for (int waited = 0; waited < ms; waited += 50) {
        if (waitpid(pid, status, WNOHANG) == pid) return true;
        char junk[256];
        while (read(master, junk, sizeof junk) > 0) {
        }
        usleep(50000);
    }
    return false;
}

START_TEST(terminal_without_cursor_addressing) {
    ck_assert(usable_with_term("xterm"));
    ck_assert(usable_with_term("screen"));
    ck_assert(!usable_with_term("dumb"));               // no cup
    ck_assert(!usable_with_term("no-such-terminal-x")); // not in terminfo
    // the command on a pseudo-terminal with TERM=dumb: refused, as an unknown TERM is
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    int master, err_fd, status = 0;
    pid_t pid = spawn_on_pty((char *[]){AMPPROBE, "tui", db_path, NULL}, "dumb", &master, &err_fd);
    if (!ended_within(pid, master, 10000, &status)) { // still drawing: q ends it
        ck_assert_int_eq(write(master, "q", 1), 1);
        waitpid(pid, &status, 0);
    }
    char out[512];
    ssize_t got = read(err_fd, out, sizeof out - 1);
    out[got > 0 ? got : 0] = 0;
    close(err_fd);
    close(master);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 2);
    ck_assert_str_eq(out, "ampprobe tui: cannot start the terminal (TERM=dumb)\n");
}
END_TEST

// A terminal that hangs up (a closed window, a killed tmux server) ends the TUI, also under
// `run --tui` after the program ended, where the TUI stays until q and the launcher leaves the
// terminal's SIGHUP to the program: it read end-of-file in a loop, at a third of a core.
START_TEST(a_terminal_that_hangs_up_ends_the_tui) {
    char out_db[300];
    snprintf(out_db, sizeof out_db, "%s.run.sqlite", db_path);
    int master, err_fd, status = 0;
    pid_t pid = spawn_on_pty((char *[]){AMPPROBE, "run", "--tui", "-o", out_db, "--", "true", NULL},
                             "xterm", &master, &err_fd);
    ck_assert_msg(!ended_within(pid, master, 1500, &status), "the TUI did not stay after PROG");
    close(master); // the hang-up
    bool ended = ended_within(pid, -1, 5000, &status);
    if (!ended) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    close(err_fd);
    ck_assert_msg(ended, "the TUI went on after its terminal hung up");
}
END_TEST

START_TEST(bad_files) {
    tui_model m;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_ne(tui_model_open(&m, "/nonexistent/run.sqlite", err), AMP_OK);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/run.sqlite"));
    ck_assert_ptr_null(strchr(err, '\n'));
    char junk[160];
    snprintf(junk, sizeof junk, "%s/junk.sqlite", tmpdir);
    FILE *f = fopen(junk, "w");
    fputs("not a database at all, just some text that is long enough to be read as a header....."
          "...................................",
          f);
    fclose(f);
    ck_assert_int_ne(tui_model_open(&m, junk, err), AMP_OK);
    ck_assert_ptr_nonnull(strstr(err, "not an ampprobe database"));
    char *argv[] = {"tui", NULL};
    ck_assert_int_eq(amp_cmd_tui(1, argv), 2); // no FILE: usage error
}
END_TEST

// ---------------------------------------------------------------------------------------------
// End to end in tmux

static char sock[64];

static bool have_tmux(void) {
    return system("command -v tmux >/dev/null 2>&1") == 0;
}

static int tmux(const char *fmt, const char *arg) {
    char args[1024], cmd[sizeof args + sizeof sock + 32];
    ck_assert_int_lt(snprintf(args, sizeof args, fmt, arg), (int)sizeof args);
    snprintf(cmd, sizeof cmd, "tmux -L %s -f /dev/null %s", sock, args);
    return system(cmd);
}

// The pane's text (with escapes when esc), malloc'd.
static char *capture(bool esc) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p %s -t amp", sock, esc ? "-e" : "");
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0)
        n += got;
    buf[n] = 0;
    pclose(p);
    return buf;
}

// Waits up to timeout_ms for every needle to be on the screen at once; the screen then.
static char *wait_screen(int timeout_ms, const char *const *needles) {
    for (int waited = 0;; waited += 100) {
        char *s = capture(false);
        bool all = true;
        for (int i = 0; needles[i] && all; i++)
            all = strstr(s, needles[i]) != NULL;
        if (all || waited >= timeout_ms) return s;
        free(s);
        usleep(100000);
    }
}

static void assert_screen(int timeout_ms, const char *const *needles) {
    char *s = wait_screen(timeout_ms, needles);
    for (int i = 0; needles[i]; i++)
        ck_assert_msg(strstr(s, needles[i]), "'%s' not on the screen:\n%s", needles[i], s);
    free(s);
}

// Presses key (tmux's send-keys names) and waits for the needles (assert_screen).
static void press(const char *key, int timeout_ms, const char *const *needles) {
    tmux("send-keys -t amp %s", key);
    assert_screen(timeout_ms, needles);
}

static pid_t watchdog = -1;

// A failed assertion ends the test's process at once (no teardown runs), which would leave the
// tmux server and the TUI in it running: a watchdog process ends them ten minutes on, unless
// tmux_stop() ends it first.
static void tmux_start(const char *command) {
    // a server of its own each time: one just killed may still hold the previous socket
    static int started;
    snprintf(sock, sizeof sock, "amptui%d-%d", (int)getpid(), started++);
    ck_assert_int_eq(tmux("new-session -d -s amp -x 80 -y 24 '%s'", command), 0);
    watchdog = fork();
    ck_assert_int_ge(watchdog, 0);
    if (watchdog == 0) {
        setsid();
        int null = open("/dev/null", O_RDWR);
        for (int fd = 0; fd < 3; fd++)
            dup2(null, fd); // (nothing holds the test runner's pipes open)
        sleep(600);
        execlp("tmux", "tmux", "-L", sock, "kill-server", (char *)NULL);
        _exit(127);
    }
}

static void tmux_stop(void) {
    tmux("kill-server%s", "");
    if (watchdog > 0) {
        kill(watchdog, SIGKILL);
        waitpid(watchdog, NULL, 0);
        watchdog = -1;
    }
}

// The line of the screen (with escapes) that holds needle, or NULL.
static char *line_with(char *screen, const char *needle) {
    char *p = strstr(screen, needle);
    if (!p) return NULL;
    while (p > screen && p[-1] != '\n')
        p--;
    char *end = strchr(p, '\n');
    if (end) *end = 0;
    return p;
}

// The screen row (0 the top) of the table's one row in reverse video (SGR 7), or -1 when no row
// or more than one below the view's header is.
static int selected_row(void) {
    char *s = capture(true);
    int row = -1, n = 0, y = 0;
    for (char *line = s; line; y++) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        if (y >= 3 && (strstr(line, "\033[7m") || strstr(line, ";7m"))) row = y, n++;
        line = end ? end + 1 : NULL;
    }
    free(s);
    return n == 1 ? row : -1;
}

// The pid the TUI's shell wrote to tmpdir/pid before exec'ing it.
static int tui_pid(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/pid", tmpdir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int pid = 0;
    ck_assert_int_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    return pid;
}

// The pane is back from the TUI: no alternate screen, the cursor shown.
static void assert_terminal_restored(void) {
    char cmd[256], flags[64] = "";
    snprintf(cmd, sizeof cmd,
             "tmux -L %s display-message -p -t amp '#{alternate_on} #{cursor_flag}'", sock);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(flags, sizeof flags, p));
    pclose(p);
    ck_assert_str_eq(flags, "0 1\n");
}

START_TEST(e2e_run_tui_tmux) {
    if (!have_tmux()) {
        fprintf(stderr, "tui: tmux not installed: the end-to-end TUI test is skipped\n");
        return;
    }
    char command[1024];
    snprintf(command, sizeof command,
             "cd %s && env -u NO_COLOR TERM=screen %s run --tui -o live.sqlite -- %s --device cpu "
             "--precision fp16 --fault attn-overflow --steps 250; echo AMPPROBE-EXIT=$?; sleep 30",
             tmpdir, AMPPROBE, TINY_GPT);
    tmux_start(command);
    // As it happens: the first non-finite event, the finding and the falling scale, while LIVE.
    assert_screen(15000, (const char *const[]){"LIVE", "first non-finite: step 3 blocks.1.attn mul",
                                               "nonfinite-root-cause", "x: ", NULL});
    char *s = capture(false);
    char *scale = strstr(s, "loss scale ");
    ck_assert_ptr_nonnull(scale);
    double now = strtod(scale + strlen("loss scale "), NULL);
    ck_assert_msg(now < 65536, "the scale did not fall: %s", scale);
    ck_assert_ptr_nonnull(strstr(s, "(from 65536"));
    ck_assert_ptr_nonnull(strstr(s, "output: live.sqlite.log"));
    ck_assert_ptr_nonnull(strstr(s, "memory peak ")); // libampcore records it every step
    free(s);
    // The layers view: the attention layer in red (SGR 31), danger first.
    press("2", 10000, (const char *const[]){"LAYER", "blocks.1.attn ", NULL});
    s = capture(true);
    char *line = line_with(s, "blocks.1.attn ");
    ck_assert_ptr_nonnull(line);
    ck_assert_msg(strstr(line, "\033[31m") || strstr(line, ";31m"), "not red: %s", line);
    free(s);
    // The events view, filtered, lists the producer; ? shows the help; the program's end shows its
    // status.
    press("4", 10000, (const char *const[]){"nonfinite_propagated", NULL});
    press("/ producer Enter", 10000,
          (const char *const[]){"filter: producer", "nonfinite_producer", "blocks.1.attn", NULL});
    // (quoted: the shell would make a bare ? of a one-letter file name in the working directory)
    press("'?'", 10000, (const char *const[]){"any key closes this help", NULL});
    s = capture(false);
    ck_assert_msg(!strstr(s, "nonfinite_producer") && !strstr(s, "filter: producer"),
                  "the view shows beside the help:\n%s", s);
    free(s);
    press("1", 180000, (const char *const[]){"tiny_gpt exited with status 0", "REPLAY", NULL});
    // q: a clean terminal (no alternate screen, cursor back), the summary, PROG's status.
    press("q", 10000, (const char *const[]){"AMPPROBE-EXIT=0", "ampprobe: 250 steps", NULL});
    assert_terminal_restored();
    tmux_stop();
    char log[160];
    snprintf(log, sizeof log, "%s/live.sqlite.log", tmpdir);
    struct stat sb;
    ck_assert_int_eq(stat(log, &sb), 0);
    ck_assert_int_gt(sb.st_size, 0); // the program's output went there
}
END_TEST

// The report's text is coloured on a terminal that can show it, and plain under TERM=dumb (as the
// launcher's status line and the TUI judge a terminal) or NO_COLOR.
START_TEST(e2e_report_colour_only_where_the_terminal_shows_it) {
    if (!have_tmux()) {
        fprintf(stderr, "tui: tmux not installed: the end-to-end report colour test is skipped\n");
        return;
    }
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    static const struct {
        const char *env;
        bool colour;
    } cases[] = {{"TERM=screen", true}, {"TERM=dumb", false}, {"TERM=screen NO_COLOR=1", false}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char command[512];
        snprintf(command, sizeof command, "%s %s report %s; echo REPORT-EXIT=$?; sleep 30",
                 cases[i].env, AMPPROBE, db_path);
        tmux_start(command);
        assert_screen(10000, (const char *const[]){"REPORT-EXIT=0", NULL});
        char *s = capture(true);
        ck_assert_msg((strstr(s, "\033[") != NULL) == cases[i].colour, "%s: colour %s:\n%s",
                      cases[i].env, cases[i].colour ? "missing" : "shown", s);
        free(s);
        tmux_stop();
    }
}
END_TEST

// `ampprobe tui` (env before it, args after it) replaying the fixture's finished run in tmux,
// its pid in tmpdir/pid (tui_pid), shown; false (said) when tmux is not installed.
static bool tmux_replay(const char *env, const char *args) {
    if (!have_tmux()) {
        fprintf(stderr, "tui: tmux not installed: the end-to-end TUI test is skipped\n");
        return false;
    }
    fixture();
    ck_assert_int_eq(amp_collector_finish(collector, 0), AMP_OK);
    char command[1024];
    snprintf(command, sizeof command,
             "cd %s && ln -sf %s ./-run.sqlite && %s sh -c \"echo \\$\\$ > %s/pid; exec %s tui "
             "%s\"; echo TUI-EXIT=$?; sleep 30",
             tmpdir, db_path, env, tmpdir, AMPPROBE, args);
    tmux_start(command);
    assert_screen(10000, (const char *const[]){"REPLAY", "step 3 of 0-3", NULL});
    return true;
}

START_TEST(e2e_replay_no_color_and_sigterm) {
    if (!tmux_replay("NO_COLOR=1 TERM=screen", "run.sqlite")) return;
    press("2", 10000, (const char *const[]){"blocks.1.attn", "!!", NULL});
    char *s = capture(true);
    ck_assert_msg(!strstr(s, "[31m") && !strstr(s, ";31m"), "colour despite NO_COLOR:\n%s", s);
    free(s);
    // The selection is the one row in reverse video, danger rows or not: j moves it down.
    int sel = selected_row();
    ck_assert_int_ge(sel, 0);
    static const struct {
        const char *key;
        int moves; // rows down from sel
    } moves[] = {{"j", 1}, {"k", 0}, {"Down", 1}, {"Up", 0}};
    for (size_t i = 0; i < sizeof moves / sizeof *moves; i++) {
        tmux("send-keys -t amp %s", moves[i].key);
        const int want = sel + moves[i].moves;
        for (int waited = 0; selected_row() != want && waited < 5000; waited += 100)
            usleep(100000);
        ck_assert_msg(selected_row() == want, "after %s: row %d selected, not %d", moves[i].key,
                      selected_row(), want);
    }
    // 3 for the kernels view, Tab for the one after it (events), 2 back to the layers
    press("3", 10000, (const char *const[]){"no kernel data in this run", NULL});
    press("Tab", 10000, (const char *const[]){"STEP SEV", "nonfinite_producer", NULL});
    press("2", 10000, (const char *const[]){"blocks.1.attn", NULL});
    press("s", 10000, (const char *const[]){"sort: layer", NULL});
    // A filter typed and then abandoned with Esc shows every row again.
    press("/ head", 10000, (const char *const[]){"filter: head", NULL});
    tmux("send-keys -t amp %s", "Escape");
    char *shown = wait_screen(10000, (const char *const[]){"blocks.0.attn", NULL});
    ck_assert_msg(strstr(shown, "blocks.0.attn") && !strstr(shown, "filter:"), "%s", shown);
    free(shown);
    // Too small a terminal says so; grown back, the view returns.
    tmux("resize-window -t amp -x 30 -y 10%s", "");
    assert_screen(10000, (const char *const[]){"terminal too small", NULL});
    tmux("resize-window -t amp -x 80 -y 24%s", "");
    assert_screen(10000, (const char *const[]){"blocks.1.attn", "sort: layer", NULL});
    // [ and ] step through the run, p follows it again.
    press("[", 10000, (const char *const[]){"step 2 of 0-3", "PAUSED", NULL});
    press("]", 10000, (const char *const[]){"step 3 of 0-3", "PAUSED", NULL});
    press("[", 10000, (const char *const[]){"step 2 of 0-3", NULL});
    press("p", 10000, (const char *const[]){"step 3 of 0-3", "following", NULL});
    press("[", 10000, (const char *const[]){"step 2 of 0-3", "PAUSED", NULL});
    // SIGTERM: the terminal restored, the exit status 128+15.
    ck_assert_int_eq(kill(tui_pid(), SIGTERM), 0);
    assert_screen(10000, (const char *const[]){"TUI-EXIT=143", NULL});
    assert_terminal_restored();
    tmux_stop();
}
END_TEST

// The help stays through a resize (no key); a signal that ends a process without a handler of
// the TUI's own (SIGUSR1) leaves the terminal restored too; "--" ends the options.
START_TEST(e2e_help_resize_and_a_deadly_signal) {
    if (!tmux_replay("TERM=screen", "-- -run.sqlite")) return;
    press("'?'", 10000, (const char *const[]){"any key closes this help", NULL});
    tmux("resize-window -t amp -x 100 -y 30%s", "");
    usleep(1000000); // (the resize reaches the TUI, which redraws)
    assert_screen(10000, (const char *const[]){"any key closes this help", NULL});
    ck_assert_int_eq(kill(tui_pid(), SIGUSR1), 0);
    assert_screen(10000, (const char *const[]){"TUI-EXIT=138", NULL});
    assert_terminal_restored();
    tmux_stop();
}
END_TEST

// The screen's rows (capture-pane's lines), split in place; how many.
static int screen_rows(char *screen, char *rows[], int max) {
    int n = 0;
    for (char *line = screen; line && *line && n < max;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        rows[n++] = line;
        line = end ? end + 1 : NULL;
    }
    return n;
}

// `ampprobe run`'s status line (the tmux cases are all here, in the TUI's suite): it keeps the
// terminal's last row while the program's output scrolls above it, and gives the row back at the
// end.
START_TEST(run_status_line_keeps_the_last_row) {
    if (!have_tmux()) {
        fprintf(stderr, "tui: tmux not installed: the status line's test is skipped\n");
        return;
    }
    char command[512];
    snprintf(command, sizeof command,
             "cd %s && TERM=screen %s run -o status.sqlite -- sh -c \"for i in \\$(seq 60); do "
             "echo line \\$i; sleep 0.05; done; sleep 1\"; seq 100 120; printf END-OF-TEST; "
             "sleep 30",
             tmpdir, AMPPROBE);
    tmux_start(command);
    char *s = wait_screen(15000, (const char *const[]){"line 40", "[ampprobe] ", NULL});
    char *rows[32];
    ck_assert_int_eq(screen_rows(s, rows, 32), 24);
    ck_assert_msg(strncmp(rows[23], "[ampprobe] ", 11) == 0, "last row: '%s'", rows[23]);
    for (int y = 0; y < 23; y++) {
        ck_assert_msg(!strstr(rows[y], "[ampprobe]"), "row %d: '%s'", y, rows[y]);
        char *line = strstr(rows[y], "line ");
        ck_assert_msg(!line || line == rows[y], "row %d: '%s'", y, rows[y]); // never glued
    }
    free(s);
    // The end: the status line gone, the whole screen scrolling again (the shell's last words on
    // the last row).
    s = wait_screen(15000, (const char *const[]){"END-OF-TEST", NULL});
    ck_assert_ptr_null(strstr(s, "[ampprobe] "));
    ck_assert_ptr_nonnull(strstr(s, "ampprobe: 0 steps"));
    ck_assert_int_eq(screen_rows(s, rows, 32), 24);
    ck_assert_str_eq(rows[23], "END-OF-TEST");
    free(s);
    tmux_stop();
}
END_TEST

Suite *tui_suite(void) {
    Suite *s = suite_create("tui");
    TCase *layout = tcase_create("layout");
    tcase_add_test(layout, layout_80x24);
    tcase_add_test(layout, layout_larger);
    tcase_add_test(layout, layout_smaller);
    suite_add_tcase(s, layout);
    TCase *model = tcase_create("model");
    tcase_add_checked_fixture(model, setup, teardown);
    tcase_set_timeout(model, 60); // the pseudo-terminal cases start ampprobe (sanitizers: slow)
    tcase_add_test(model, model_live_incremental);
    tcase_add_test(model, model_counts_an_all_zero_gradient_as_lost);
    tcase_add_test(model, model_keeps_uncounted_nonfinite_apart);
    tcase_add_test(model, model_finished_run);
    tcase_add_test(model, finder_says_which_step_it_read_to);
    tcase_add_test(model, model_follows_the_first_of_several_processes);
    tcase_add_test(model, p_shows_the_next_process_live);
    tcase_add_test(model, p_moves_to_a_step_the_next_process_has);
    tcase_add_test(model, p_shows_the_next_process_finished);
    tcase_add_test(model, model_reads_a_database_without_memory_peaks);
    tcase_add_test(model, model_tells_a_cut_short_run_from_a_live_one);
    tcase_add_test(model, overview_says_what_the_program_died_of);
    tcase_add_test(model, a_programs_own_status_rows_are_not_the_runs);
    tcase_add_test(model, overview_of_a_run_without_steps);
    tcase_add_test(model, overview_leaves_out_an_exit_status_not_recorded);
    tcase_add_test(model, overview_tells_a_signal_from_an_exit_status);
    tcase_add_test(model, live_footer_says_which_signal_killed_the_program);
    tcase_add_test(model, model_starts_over_on_a_replaced_file);
    tcase_add_test(model, layers_view_danger_and_filter);
    tcase_add_test(model, layers_filter_takes_utf8_and_says_when_full);
    tcase_add_test(model, headroom_is_against_each_tensors_own_dtype);
    tcase_add_test(model, an_undeclared_layer_is_named_by_its_id);
    tcase_add_test(model, a_layer_row_is_of_one_dtype);
    tcase_add_test(model, kernels_view_says_cuda_was_not_traced);
    tcase_add_test(model, kernels_view_names_each_kernels_layer);
    tcase_add_test(model, kernels_of_incomplete_records_are_left_out);
    tcase_add_test(model, overview_shows_a_module_level_first_nonfinite);
    tcase_add_test(model, bad_files);
    tcase_add_test(model, overview_titles_are_of_the_run_not_the_window);
    tcase_add_test(model, overview_skip_label_never_covers_the_scale);
    tcase_add_test(model, header_names_the_step_among_the_recorded_ones);
    tcase_add_test(model, log_graph_shows_a_scale_backed_off_to_0);
    tcase_add_test(model, cut_texts_end_in_an_ellipsis);
    tcase_add_test(model, a_flat_series_draws_alike_at_every_size);
    tcase_add_test(model, model_says_a_damaged_file_is_damaged);
    tcase_add_test(model, model_reads_a_busy_database_again);
    tcase_add_test(model, terminal_without_cursor_addressing);
    tcase_add_test(model, a_terminal_that_hangs_up_ends_the_tui);
    suite_add_tcase(s, model);
    TCase *e2e = tcase_create("tmux");
    tcase_add_checked_fixture(e2e, setup, teardown);
    tcase_set_timeout(e2e, 300); // generous for sanitizer builds
    tcase_add_test(e2e, e2e_run_tui_tmux);
    tcase_add_test(e2e, e2e_replay_no_color_and_sigterm);
    tcase_add_test(e2e, e2e_help_resize_and_a_deadly_signal);
    tcase_add_test(e2e, e2e_report_colour_only_where_the_terminal_shows_it);
    tcase_add_test(e2e, run_status_line_keeps_the_last_row);
    suite_add_tcase(s, e2e);
    return s;
}
