/*
 * output.c — where `report` and `diff` write: stdout, or the file of -o, which must not be one
 * of the databases being read (nor its -wal, -shm or -journal file: writing there would destroy
 * the run), and whose last write is checked, stdout's included (a full disk is an error).
 */
#include "commands.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const amp_cmd_side_files[AMP_CMD_N_SIDE_FILES] = {"-wal", "-shm", "-journal"};

// Whether name is the existing file out (stat'ed already).
static bool is_file(const char *name, const struct stat *out) {
    struct stat sb;
    return stat(name, &sb) == 0 && sb.st_dev == out->st_dev && sb.st_ino == out->st_ino;
}

// The absolute name of path, whose directory exists and which itself may not: the directory
// resolved, the last part kept. False when the directory cannot be resolved.
static bool full_name(const char *path, char out[PATH_MAX]) {
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (slash) {
        const size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof dir) return false;
        memcpy(dir, path, n);
        dir[n] = 0;
    } else {
        strcpy(dir, ".");
    }
    return realpath(dir, real) &&
           snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", base) < PATH_MAX;
}

// Whether the output path names side file k of input: by the file itself when both exist, by
// name when the side file is yet to be made (SQLite would make it beside the database, as it is
// named or where its links lead).
static bool is_side_file(const char *path, const struct stat *out, const char *input, int k) {
    const char *suffix = k < 0 ? "" : amp_cmd_side_files[k];
    char name[PATH_MAX + 16], full[PATH_MAX], want[PATH_MAX], real[PATH_MAX];
    if (snprintf(name, sizeof name, "%s%s", input, suffix) >= (int)sizeof name) return false;
    if (out && is_file(name, out)) return true;
    if (!full_name(path, full)) return false;
    if (full_name(name, want) && strcmp(full, want) == 0) return true;
    return realpath(input, real) &&
           snprintf(want, sizeof want, "%s%s", real, suffix) < (int)sizeof want &&
           strcmp(full, want) == 0;
}

FILE *amp_cmd_open_output(const char *cmd, const char *path, const char *const *inputs, int n) {
    if (!path) return stdout;
    if (!*path) {
        fprintf(stderr, "ampprobe %s: -o needs a file name\n", cmd);
        return NULL;
    }
    struct stat out;
    const bool exists = stat(path, &out) == 0;
    for (int i = 0; i < n; i++)
        for (int k = -1; k < AMP_CMD_N_SIDE_FILES; k++)
            if (is_side_file(path, exists ? &out : NULL, inputs[i], k)) {
                fprintf(stderr,
                        "ampprobe %s: -o %s is %s%s, which this command reads; name another file\n",
                        cmd, path, k < 0 ? "" : "the SQLite side file of ", inputs[i]);
                return NULL;
            }
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "ampprobe %s: %s: %s\n", cmd, path, strerror(errno));
    return f;
}

int amp_cmd_close_output(const char *cmd, const char *path, FILE *out) {
    errno = 0;
    int bad = fflush(out) != 0 || ferror(out);
    int err = errno;
    if (out != stdout && fclose(out) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (!bad) return 0;
    fprintf(stderr, "ampprobe %s: %s: %s\n", cmd, path ? path : "stdout",
            err ? strerror(err) : "write error");
    return 2;
}
