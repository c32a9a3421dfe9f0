/* Shared declarations for the Check suites: one Suite *<name>_suite(void) per tests/suites.def
 * line. */
#ifndef AMP_TESTS_H
#define AMP_TESTS_H

#include <check.h>
#include <math.h>

#include "amp-impl.h" // amp_make_temp_dir() and the library's internals some suites test

#include <sqlite3.h>

#define AMP_SUITE(name) Suite *name##_suite(void);
#include "suites.def"
#undef AMP_SUITE

// |got - want| <= tol + |want| * rel, with NaN matching NaN.
#define ck_assert_close(got, want, tol, rel)                                                       \
    do {                                                                                           \
        double g_ = (got), w_ = (want);                                                            \
        if (isnan(w_))                                                                             \
            ck_assert_msg(isnan(g_), "expected NaN, got %g", g_);                                  \
        else                                                                                       \
            ck_assert_msg(fabs(g_ - w_) <= (tol) + fabs(w_) * (rel), "%s = %.9g, expected %.9g",   \
                          #got, g_, w_);                                                           \
    } while (0)

// The columns a kernel row of the fixtures fills (CUPTI_ACTIVITY_KIND_KERNEL's NOT NULL ones,
// with the correlation id and process), for "VALUES (...)" or a SELECT after it.
#define TEST_KERNEL_INSERT                                                                         \
    "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "          \
    "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, "       \
    "gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, "                     \
    "localMemoryPerThread, localMemoryTotal, gridId) "

// Tensor fixtures (tensors.c): a CPU context (asserting it opens), a 1-d f32 parameter of n
// values that requires grad, and t's gradient replaced by v (as backward() would leave it).
amp_ctx_t *test_cpu_ctx(void);
amp_tensor_t *test_param_f32(amp_ctx_t *ctx, int n, const float *v);
void test_set_grad_f32(amp_ctx_t *ctx, amp_tensor_t *t, const float *v);
// A parameter of any dtype and shape that requires grad, named `name` (NULL: unnamed), holding
// v0, v0 + 0.25, v0 + 0.5, ... (the checkpoint suite's and fuzz_checkpoint's models).
amp_tensor_t *test_param(amp_ctx_t *ctx, amp_dtype dt, const char *name, int ndim,
                         const int64_t *shape, float v0);
// For a test that expects SIGABRT (tcase_add_test_raise_signal): an abort of the library whose
// message lacks `words` ends the test's process with exit code 3 instead, failing the test.
void test_expect_abort(const char *words);

// A fresh working directory per test (workdir.c): /tmp/amp-test-NAME-..., removed by
// test_dir_remove(); paths in it (rotating static buffers), a file's contents (static buffer).
#include <sys/types.h>
extern char test_dir[64];
void test_dir_create(const char *name);
void test_dir_remove(void);
const char *test_in_dir(const char *name);
const char *test_slurp(const char *name);
// A whole file (any path) in a malloc'd, NUL-terminated buffer, its length in *n if n; asserts
// that it opens.
char *test_read_file(const char *path, size_t *n);
// Starts build/ampprobe with args (NULL-terminated, after "ampprobe") in test_dir, its stdout and
// stderr into out.txt and err.txt there; waits for it and returns its exit code.
pid_t test_spawn_ampprobe(const char *const *args);
int test_wait_ampprobe(pid_t pid);
// Sends stream (stdout or stderr: flushed first) into path ("/dev/null" to silence it) until
// test_stream_back, which is handed what test_stream_to returned.
int test_stream_to(FILE *stream, const char *path);
void test_stream_back(FILE *stream, int saved);
// Runs `ampprobe NAME ARGS...` in this process through its command function (args
// NULL-terminated, 14 at most), stderr written to err_path meanwhile; returns its exit status.
int test_call_command(int (*command)(int, char **), const char *name, const char **args,
                      const char *err_path);
// The first column of the first row of sql as an integer (-999 for NULL or no row); asserts that
// sql prepares.
int64_t test_query_int(sqlite3 *db, const char *sql);
// The pid of a process that has just exited and been reaped (a collector that is gone).
pid_t test_dead_pid(void);
// Runs tests/helpers/exit_prog.c (four steps, then exit() without amp_ctx_free) on device "cpu"
// or "cuda" under `ampprobe run` in test_dir and checks that every step is in the database.
void test_exit_without_free(const char *device);

// What the readers must do with any database (readers.c): test_read_or_refuse reads path as
// `ampprobe report` (every rule, every format; `ampprobe diff` of it with itself) and `ampprobe
// tui` (every view drawn off-screen, each table sorted by each column, a step back, the next
// process) do, each either reading it or refusing it in one line that names it and holds no
// control character. test_odd_values does that for db with a column NULL, text or -1 in every
// row, one column of one table (that has rows) at a time, in a copy at scratch (removed after);
// returns how many such changes the schema let through. test_write_file writes n bytes to path.
void test_read_or_refuse(const char *path);
int test_odd_values(const char *db, const char *scratch);
void test_write_file(const char *path, const void *bytes, size_t n);

// Path of a file in the source tree (tests/data/...).
#define AMP_SRC(rel) AMP_SOURCE_DIR "/" rel

#endif
