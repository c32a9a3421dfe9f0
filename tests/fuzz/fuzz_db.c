/*
 * fuzz_db.c — a libFuzzer target: a finished run's database (fuzz_make_run: tiny_gpt's attention
 * overflow and the record helper's capture, two processes) with values the input writes into it,
 * then read as the suites read any run's (fuzz_read: the report in every format and as a diff,
 * the TUI's every view). The input is a list of 12-byte writes: a table and a column (by index
 * among the database's own), a row (by rowid, modulo the table's largest), and what goes there:
 * NULL, an integer (the edges of 32 and 64 bits among them), a real (NaN, the infinities, -0,
 * subnormals among them), a short text (any bytes), or the row deleted. A database is a file
 * anyone can hand the report: whatever its values, the readers read it, or refuse it in one line
 * naming it, and never crash. Built and run (with -timeout=0: fuzz.h) by tests/fuzz/run.sh.
 */
#include "fuzz.h"

#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TABLES 64
#define MAX_COLUMNS 48

static char base[96], work[96];
static struct table {
    char name[64];
    char cols[MAX_COLUMNS][64];
    int n_cols;
    int64_t max_rowid;
} tables[MAX_TABLES];
static int n_tables;

static void die(sqlite3 *db, const char *what) {
    fprintf(stderr, "fuzz_db: %s: %s\n", what, sqlite3_errmsg(db));
    abort();
}

// The tables of the base database, their columns and largest rowids.
static void learn_schema(void) {
    sqlite3 *db;
    sqlite3_stmt *q;
    if (sqlite3_open_v2(base, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) die(db, base);
    if (sqlite3_prepare_v2(db,
                           "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT "
                           "LIKE 'sqlite_%' ORDER BY name",
                           -1, &q, NULL) != SQLITE_OK)
        die(db, "tables");
    while (sqlite3_step(q) == SQLITE_ROW && n_tables < MAX_TABLES)
        snprintf(tables[n_tables++].name, sizeof tables->name, "%s", sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    for (int t = 0; t < n_tables; t++) {
        char sql[160];
        snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s')", tables[t].name);
        if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) die(db, sql);
        while (sqlite3_step(q) == SQLITE_ROW && tables[t].n_cols < MAX_COLUMNS)
            snprintf(tables[t].cols[tables[t].n_cols++], sizeof tables->cols[0], "%s",
                     sqlite3_column_text(q, 0));
        sqlite3_finalize(q);
        snprintf(sql, sizeof sql, "SELECT ifnull(max(rowid), 0) FROM \"%s\"", tables[t].name);
        if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) die(db, sql);
        if (sqlite3_step(q) == SQLITE_ROW) tables[t].max_rowid = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    sqlite3_close(db);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static char dir[64];
    fuzz_make_run("db", dir, base);
    snprintf(work, sizeof work, "%s/work.sqlite", dir);
    learn_schema();
    return 0;
}

static void copy_base(void) {
    FILE *f = fopen(base, "rb"), *g = fopen(work, "wb");
    if (!f || !g) abort();
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        if (fwrite(buf, 1, n, g) != n) abort();
    fclose(f);
    if (fclose(g) != 0) abort();
}

static const int64_t edge_ints[] = {INT64_MIN,
                                    INT64_MAX,
                                    -1,
                                    0,
                                    1,
                                    INT32_MIN,
                                    INT32_MAX,
                                    (int64_t)1 << 53,
                                    ((int64_t)1 << 62) + 1,
                                    -((int64_t)1 << 40)};

// One write: b[0] table, b[1] column, b[2..3] row, b[4] what, b[5..11] its value.
static void write_one(sqlite3 *db, const uint8_t *b) {
    const struct table *t = &tables[b[0] % n_tables];
    if (t->n_cols == 0) return;
    const char *col = t->cols[b[1] % t->n_cols];
    const int64_t row = t->max_rowid > 0 ? 1 + (b[2] | b[3] << 8) % t->max_rowid : 1;
    char sql[200];
    sqlite3_stmt *q;
    if (b[4] % 6 == 5) {
        snprintf(sql, sizeof sql, "DELETE FROM \"%s\" WHERE rowid = ?1", t->name);
    } else {
        snprintf(sql, sizeof sql, "UPDATE \"%s\" SET \"%s\" = ?2 WHERE rowid = ?1", t->name, col);
    }
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) return;
    sqlite3_bind_int64(q, 1, row);
    uint64_t bits = 0;
    for (int i = 0; i < 7; i++)
        bits |= (uint64_t)b[5 + i] << (8 * i);
    const int64_t v = (int64_t)(bits << 8) >> 8; // 56 bits, sign-extended
    switch (b[4] % 6) {
    case 0:
        sqlite3_bind_null(q, 2);
        break;
    case 1:
        sqlite3_bind_int64(q, 2, v);
        break;
    case 2:
        sqlite3_bind_int64(q, 2, edge_ints[b[5] % (sizeof edge_ints / sizeof *edge_ints)]);
        break;
    case 3: {
        static const double edge[] = {NAN,    INFINITY, -INFINITY, -0.0,    1e308,
                                      5e-324, 65504,    65520,     -3.4e38, 1e-45};
        double d;
        if (b[5] < 2 * (sizeof edge / sizeof *edge))
            d = edge[b[5] / 2];
        else
            d = (double)v / 1024.0;
        sqlite3_bind_double(q, 2, d);
        break;
    }
    case 4:
        sqlite3_bind_text(q, 2, (const char *)b + 5, b[5] % 8, SQLITE_TRANSIENT);
        break;
    }
    sqlite3_step(q); // (a write a constraint refuses is no write)
    sqlite3_finalize(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    copy_base();
    sqlite3 *db;
    if (sqlite3_open_v2(work, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) die(db, work);
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    for (size_t i = 0; i + 12 <= size; i += 12)
        write_one(db, data + i);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (sqlite3_close(db) != SQLITE_OK) die(db, "close");
    fuzz_read(work);
    return 0;
}
