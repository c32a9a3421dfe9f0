/*
 * workdir.c — a fresh working directory per test and ampprobe run inside it, for the suites that
 * drive the binary (launcher, capture, e2e, cuda_gpu): declared in tests.h.
 */
#include "tests.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

char test_dir[64];

void test_dir_create(const char *name) {
    char prefix[48];
    snprintf(prefix, sizeof prefix, "/tmp/amp-test-%s-", name);
    ck_assert_ptr_nonnull(amp_make_temp_dir(test_dir, sizeof test_dir, prefix));
}

void test_dir_remove(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
    ck_assert_int_eq(system(cmd), 0);
}

const char *test_in_dir(const char *name) {
    static char paths[4][256];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, 256, "%s/%s", test_dir, name);
    return p;
}

const char *test_slurp(const char *name) {
    static char buf[16384];
    buf[0] = 0;
    FILE *f = fopen(test_in_dir(name), "r");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

char *test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)size + 1);
    ck_assert_uint_eq(fread(s, 1, (size_t)size, f), (size_t)size);
    s[size] = 0;
    fclose(f);
    if (n) *n = (size_t)size;
    return s;
}

pid_t test_spawn_ampprobe(const char *const *args) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (chdir(test_dir) != 0) _exit(99);
        int out = open("out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open("err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(out, 1);
        dup2(err, 2);
        const char *argv[32] = {AMP_BINARY_DIR "/ampprobe"};
        for (int i = 0; args[i] && i < 30; i++)
            argv[i + 1] = args[i];
        execv(argv[0], (char *const *)argv);
        _exit(99);
    }
    return pid;
}

int test_call_command(int (*command)(int, char **), const char *name, const char **args,
                      const char *err_path) {
    char *argv[16] = {(char *)name};
    int argc = 1;
    for (int i = 0; args[i]; i++) {
        ck_assert_int_lt(argc, 15);
        argv[argc++] = (char *)args[i];
    }
    const int saved = test_stream_to(stderr, err_path);
    const int rc = command(argc, argv);
    test_stream_back(stderr, saved);
    return rc;
}

int test_stream_to(FILE *stream, const char *path) {
    fflush(stream);
    const int saved = dup(fileno(stream)), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(fd, 0);
    dup2(fd, fileno(stream));
    close(fd);
    return saved;
}

void test_stream_back(FILE *stream, int saved) {
    fflush(stream);
    dup2(saved, fileno(stream));
    close(saved);
}

int test_wait_ampprobe(pid_t pid) {
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "ampprobe itself died of signal %d", WTERMSIG(status));
    return WEXITSTATUS(status);
}

int64_t test_query_int(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
                  sqlite3_errmsg(db));
    int64_t v = -999;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

pid_t test_dead_pid(void) {
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) _exit(0);
    ck_assert_int_eq(waitpid(child, NULL, 0), child);
    return child;
}

void test_exit_without_free(const char *device) {
    enum { STEPS = 4 };
    const char *args[] = {"run",  "-o", "run.sqlite", "--", AMP_BINARY_DIR "/tests/amp_exit_prog",
                          device, "4",  NULL};
    ck_assert_int_eq(test_wait_ampprobe(test_spawn_ampprobe(args)), 0);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(test_in_dir("run.sqlite"), &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), STEPS);
    ck_assert_int_eq(test_query_int(db, "SELECT count(grad_norm) FROM AMP_STEPS"), STEPS);
    ck_assert_int_eq(test_query_int(db, "SELECT count(DISTINCT step) FROM AMP_TENSOR_STATS"),
                     STEPS);
    ck_assert_int_eq(test_query_int(db, "SELECT max(step) FROM AMP_TENSOR_STATS"), STEPS - 1);
    // every step's loss as the program read it, whether it gave the value or the tensor (f32 at
    // step 1, f16 at step 2)
    ck_assert_int_eq(test_query_int(db,
                                    "SELECT count(*) FROM AMP_STEPS s JOIN META m ON m.key = "
                                    "'exit_prog_loss_' || s.step WHERE s.loss_finite = 1 AND "
                                    "abs(s.loss - CAST(m.value AS REAL)) <= 1e-7 * abs(s.loss)"),
                     STEPS);
    sqlite3_close(db);
}
