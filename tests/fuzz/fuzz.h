/*
 * fuzz.h — what the libFuzzer targets of tests/fuzz share (fuzz_common.c).
 */
#ifndef AMP_FUZZ_H
#define AMP_FUZZ_H

// The target's directory for its files (one a target), in memory where there is /dev/shm
// (SQLite's syncs then cost nothing), removed when the target exits: its path in dir (64 bytes).
// Aborts when it cannot be made.
void fuzz_temp_dir(char dir[64], const char *name);
// A finished run's database, made by the collector from the spool seeds of tiny_gpt's attention
// overflow (pid 4242) and the record helper's capture (4343), in a new directory (fuzz_temp_dir,
// named after name) for the target's other files too: their paths in dir (64 bytes) and db (96
// bytes, dir/run.sqlite). Aborts on a failure.
void fuzz_make_run(const char *name, char dir[64], char db[96]);
// The database at db read as the suites read any run's (tests/readers.c: the report in every
// format and as a diff, the TUI's every view), inside a Check runner without a fork (the
// readers' asserts need one); a failed check aborts with its message, so that libFuzzer keeps
// the input. Run such a target with -timeout=0: while the runner runs, its SIGALRM handler is in
// place, which in this mode kills the whole process group, and libFuzzer's -timeout ticks with
// SIGALRM (tests/fuzz/run.sh sees to it).
void fuzz_read(const char *db);

#endif
