/*
 * conform.h — `ampprobe conform DIR`: checks libampcore against PyTorch reference files in the
 * formats of tests/data/golden/README.md (a copy of ../shared/golden).
 *
 * cmd_conform.c scans DIR and hands every reference file to the checker of its kind, one file
 * each: conform-scaler.c (scaler_updates*.txt), conform-unscale.c (unscale*.txt),
 * conform-autocast.c (autocast_dtypes*.txt), conform-convert.c (conv_*.bin),
 * conform-e2e.c (*.manifest, parsed by conform-manifest.c). conform-io.c reads the files and
 * conform-run.c keeps the tally, prints the verdicts and shields a run from libampcore aborts.
 *
 * Every case ends as exactly one of: passed, failed (a mismatch with PyTorch, or a reference
 * output the set should hold and does not), unsupported (a case this build cannot run: an op
 * whose call it cannot know, a manifest value naming a feature it lacks such as
 * optimizer=rmsprop; reported, never counted as a pass). A malformed or unreadable file is an
 * error naming file and line; its remaining cases are skipped, and the summary line names it
 * ("; scaler_updates.txt not checked: line 7: ..."). Malformed is also: a file without records
 * (empty, or only comments), anything named like a reference file that is not a regular file (a
 * FIFO would block), a manifest key the format does not have, and a manifest value libampcore's
 * API refuses (growth_factor=0.5). Exit status: 2 on any error, else 1 on any failure, else 0.
 */
#ifndef AMPPROBE_CONFORM_H
#define AMPPROBE_CONFORM_H

#include "amp-train.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// ---------------------------------------------------------------------------------------------
// A run over one directory (conform-run.c, cmd_conform.c)

struct conform_run {
    FILE *out;         // verdicts ("FAIL file:case ...") and the summary line
    FILE *err;         // errors: "ampprobe conform: FILE:LINE: message"
    bool verbose;      // also print passing cases
    amp_device device; // where unscale and e2e cases run

    const char *dir; // the directory being checked
    char **names;    // its entries, sorted bytewise
    int n_names;

    int passed, failed, unsupported, errors;

    // What the summary says was not checked, as "; FILE not checked: WHY" clauses (malloc'd, NULL
    // while everything was): each error adds one, naming the reference file being checked
    // (checking) or, outside a run over a directory, the file of the error.
    const char *checking;
    int verdicts_before; // passed + failed + unsupported when checking began
    char *unchecked;
    size_t unchecked_len, unchecked_cap;
};

// Checks every reference file in dir, prints the verdicts and `N passed, M failed` (plus
// `, K unsupported` when K > 0, then what was not checked and why) and returns the exit status
// (0, 1 or 2, see above).
int conform_dir(struct conform_run *r, const char *dir);

// Verdicts: "ok FILE:CASE DETAIL" (verbose only), "FAIL FILE:CASE DETAIL",
// "UNSUPPORTED FILE:CASE DETAIL", "NOTE FILE:CASE DETAIL". cas may be NULL (whole-file cases).
void conform_pass(struct conform_run *r, const char *file, const char *cas, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void conform_fail(struct conform_run *r, const char *file, const char *cas, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void conform_unsupported(struct conform_run *r, const char *file, const char *cas, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));
// A remark that is not a verdict (e.g. what a case without a trace could not check).
void conform_note(struct conform_run *r, const char *file, const char *cas, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// A malformed or unreadable file; line 0 names the file only. Also adds the summary's clause.
void conform_error(struct conform_run *r, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Adds "; " and the text to the end of the summary line: what was not checked.
void conform_not_checked(struct conform_run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Writes s and a newline to out with what a terminal would act on or garble (control characters,
// C1's too, and bytes that begin no UTF-8 character: a damaged reference file's, quoted) as \xNN.
void conform_put_line(FILE *out, const char *s);

// Runs fn(arg) so that a broken invariant inside libampcore (AMP_ASSERT) ends this case instead
// of the whole run: returns false with libampcore's message when it aborted. Whatever the case
// had built in libampcore is then leaked, its state being unknown. Not reentrant.
bool conform_guarded(void (*fn)(void *arg), void *arg, char *msg, size_t msg_size);

// ---------------------------------------------------------------------------------------------
// Reading reference files (conform-io.c)

// A text reference file read record by record: blank lines are skipped, `#` starts a comment
// (a whole line or the rest of one), fields are separated by blanks; a UTF-8 byte order mark at
// the start of the file is skipped.
struct conform_text {
    FILE *f;
    const char *name; // the file's name in the directory, for messages
    int lineno;       // line of the current record
    bool is_comment;  // the current record is a whole-line comment (tok holds its words)
    char **tok;       // the current record's fields
    int ntok;
    int records; // records read so far, whole-line comments not counted
    char *line;
    size_t line_cap;
    int tok_cap;
};

// Opens r->dir/name; false (error reported) when it cannot be read or is not a regular file.
bool conform_text_open(struct conform_text *t, struct conform_run *r, const char *name);
// The next record, whole-line comments included; false at the end of the file.
bool conform_text_next(struct conform_text *t);
// The next record that is not a comment; false at the end of the file.
bool conform_text_next_record(struct conform_text *t);
// At the end of the file: false (error reported) when it held no record, being empty or only
// comments and blank lines; such a file would otherwise pass while checking nothing. expected
// says what its first record should have been, for the message.
bool conform_text_had_records(struct conform_run *r, const struct conform_text *t,
                              const char *expected);
void conform_text_close(struct conform_text *t);

// Whole-token parsers; false when s is not entirely a number of that kind.
bool conform_parse_double(const char *s, double *out); // decimal, also inf/nan
bool conform_parse_long(const char *s, long *out);
bool conform_parse_hex(const char *s, uint32_t max, uint32_t *out); // hex digits, optional 0x

// Whether r->dir holds an entry named name.
bool conform_has_file(const struct conform_run *r, const char *name);
// Reads r->dir/name whole. With want_bytes > 0 the size must be exactly that (what says what the
// size stands for, for the message); an empty file is malformed either way. NULL (error
// reported) on failure or for a file that is not regular; free() the result.
void *conform_load(struct conform_run *r, const char *name, size_t want_bytes, const char *what,
                   size_t *nbytes);

// float from / to its IEEE bits
float conform_f32(uint32_t bits);
uint32_t conform_bits(float x);
// Whether bits (of an f32, f16 or bf16) are a NaN.
bool conform_is_nan_bits(amp_dtype t, uint32_t bits);

// ---------------------------------------------------------------------------------------------
// The checkers, one per kind of reference file; each reports its own cases.

void conform_scaler_file(struct conform_run *r, const char *name);   // scaler_updates*.txt
void conform_unscale_file(struct conform_run *r, const char *name);  // unscale*.txt
void conform_autocast_file(struct conform_run *r, const char *name); // autocast_dtypes*.txt
// conv_<name>_in_f32.bin runs against its conv_<name>_{f16,bf16}_<tag>.bin siblings; a sibling
// without its input file fails, and so does a missing sibling (an f16 output without the bf16
// one of its tag, or the reverse, or no output at all).
void conform_convert_file(struct conform_run *r, const char *name);
void conform_e2e_file(struct conform_run *r, const char *name); // *.manifest

// ---------------------------------------------------------------------------------------------
// E2E manifests (conform-manifest.c)

typedef enum conform_act { CONFORM_ACT_RELU, CONFORM_ACT_GELU, CONFORM_ACT_GELU_TANH } conform_act;

struct conform_manifest {
    char name[128];          // the name key, "" when absent
    int64_t in, hidden, out; // Linear(in, hidden) -> act -> Linear(hidden, out)
    int64_t batch, steps;
    conform_act act;
    amp_optim_params optim;   // torch.optim defaults for absent keys
    amp_dtype precision;      // autocast dtype: f16 (default, torch's CUDA default) or bf16
    amp_scaler_params scaler; // torch.amp.GradScaler defaults for absent keys
    bool scaler_keys;         // some GradScaler key was given
    // A value of a known key that names a feature this build lacks (e.g. optimizer=rmsprop): the
    // case is unsupported, not malformed. "" when everything is understood.
    char unsupported[256];
};

// Parses r->dir/name. false (error naming file and line reported) when it is malformed:
// not key=value, a key the format does not have, a repeated key, a number that does not parse
// or is out of range, a value amp_optim_new or amp_scaler_new refuses, or a missing shape key
// (in, hidden, out, batch, steps), act or optimizer.
bool conform_manifest_parse(struct conform_run *r, const char *name, struct conform_manifest *m);

#endif // AMPPROBE_CONFORM_H
