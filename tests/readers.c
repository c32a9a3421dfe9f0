/*
 * readers.c — what the readers of a run's database (the report, the TUI's model) must do with
 * any file they are given: read it, or refuse it in one plain line that names it; never crash
 * (the suites run under AddressSanitizer and UBSan in CI). Used by the e2e and report suites.
 */
#include "tests.h"

#include "amp-store.h"
#include "layout.h"
#include "model.h"
#include "report.h"
#include "tui.h"

#include <curses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The line that refused path names it and holds no control character.
static void refused(const char *path, const char *err) {
    ck_assert_msg(strstr(err, path) != NULL, "'%s' does not name %s", err, path);
    for (const char *c = err; *c; c++)
        ck_assert_int_ge((unsigned char)*c, 0x20);
}

// The TUI's four views drawn off-screen at 80x24 (a terminal on /dev/null), each table sorted
// by each of its columns, a step back, the next process.
static void draw_every_view(tui_app *app) {
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    SCREEN *scr = newterm("xterm", out, in);
    ck_assert_ptr_nonnull(scr);
    resizeterm(24, 80);
    tui_layout l;
    tui_layout_compute(80, 24, &l);
    static const int keys[] = {'1', '2', 's', 's', 's', 's', 's', '3', 's',
                               's', 's', '4', 's', 's', '[', 'P', '1'};
    tui_app_update(app);
    tui_app_draw(app, &l);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        tui_app_key(app, keys[i], &l);
        tui_app_update(app);
        tui_app_draw(app, &l);
    }
    endwin();
    delscreen(scr);
    fclose(out);
    fclose(in);
}

void test_read_or_refuse(const char *path) {
    char err[AMP_STORE_ERR_MAX > REPORT_ERR_MAX ? AMP_STORE_ERR_MAX : REPORT_ERR_MAX];
    sqlite3 *db;
    if (amp_store_open_readonly(path, &db, err) != AMP_OK) {
        refused(path, err);
        return;
    }
    report_model m;
    amp_status st = report_model_load(db, path, INT64_MIN, INT64_MAX, &m, err);
    sqlite3_close(db);
    if (st == AMP_OK) {
        report_findings f = {0};
        report_run(&m, NULL, &f);
        FILE *out = fopen("/dev/null", "w");
        report_format_text(out, &m, &f, false);
        report_format_json(out, &m, &f);
        report_format_md(out, &m, &f);
        report_format_html(out, &m, &f);
        report_diff_text(out, &m, &f, &m, &f);
        report_diff_json(out, &m, &f, &m, &f);
        fclose(out);
        report_findings_free(&f);
        report_model_free(&m);
    } else {
        refused(path, err);
    }
    tui_app app;
    if (tui_app_open(&app, path, NULL, err) == AMP_OK) {
        draw_every_view(&app);
        tui_app_free(&app);
    } else {
        refused(path, err);
    }
}

void test_write_file(const char *path, const void *bytes, size_t n) {
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(bytes, 1, n, fp), n);
    fclose(fp);
}

int test_odd_values(const char *db_path, const char *scratch) {
    size_t n;
    char *good = test_read_file(db_path, &n);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *q;
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT m.name, c.name FROM sqlite_master m, "
                                        "pragma_table_info(m.name) c WHERE m.type = 'table' AND "
                                        "m.name NOT LIKE 'sqlite%' ORDER BY m.name, c.cid",
                                        -1, &q, NULL),
                     SQLITE_OK);
    // (0: a time left unset; the largest integer: a count or time no run reaches)
    static const char *const odd[] = {"NULL", "'x'", "-1", "0", "9223372036854775807"};
    char sql[256];
    int changed = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *table = (const char *)sqlite3_column_text(q, 0);
        const char *column = (const char *)sqlite3_column_text(q, 1);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\"", table);
        if (test_query_int(db, sql) <= 0) continue;
        for (size_t v = 0; v < sizeof odd / sizeof odd[0]; v++) {
            test_write_file(scratch, good, n);
            sqlite3 *w;
            ck_assert_int_eq(sqlite3_open(scratch, &w), SQLITE_OK);
            snprintf(sql, sizeof sql, "UPDATE \"%s\" SET \"%s\" = %s", table, column, odd[v]);
            changed += sqlite3_exec(w, sql, NULL, NULL, NULL) == SQLITE_OK; // (NOT NULL refuses)
            ck_assert_int_eq(sqlite3_close(w), SQLITE_OK);
            test_read_or_refuse(scratch);
        }
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    free(good);
    static const char *const left[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof left / sizeof left[0]; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s%s", scratch, left[i]);
        remove(name);
    }
    return changed;
}
