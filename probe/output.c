/*
 * output.c — where `report` and `diff` write: stdout, or the file of -o, which must not be one
 * of the databases being read (nor its -wal, -shm or -journal file: writing there would destroy
 * the run), and whose last write is checked, stdout's included (a full disk is an error).
 */
#include "commands.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

const char *const amp_cmd_side_files[AMP_CMD_N_SIDE_FILES] = {"-wal", "-shm", "-journal"};

// Whether name is the existing file out (stat'ed already).
static bool is_file(const char *name, const struct stat *out) {
    struct stat sb;
    return stat(name, &sb) == 0 && sb.st_dev == out->st_dev && sb.st_ino == out->st_ino;
}

FILE *amp_cmd_open_output(const char *cmd, const char *path, const char *const *inputs, int n) {
    if (!path) return stdout;
    if (!*path) {
        fprintf(stderr, "ampprobe %s: -o needs a file name\n", cmd);
        return NULL;
    }
    struct stat out;
    const bool exists = stat(path, &out) == 0; // (a new file is none of them)
    for (int i = 0; i < n && exists; i++)
        for (int k = -1; k < AMP_CMD_N_SIDE_FILES; k++) {
            char name[4096];
            if (snprintf(name, sizeof name, "%s%s", inputs[i],
                         k < 0 ? "" : amp_cmd_side_files[k]) >= (int)sizeof name)
                continue;
            if (is_file(name, &out)) {
                fprintf(stderr,
                        "ampprobe %s: -o %s is %s%s, which this command reads; name another file\n",
                        cmd, path, k < 0 ? "" : "the SQLite side file of ", inputs[i]);
                return NULL;
            }
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
