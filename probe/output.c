/*
 * output.c — where `report` and `diff` write: stdout, or the file of -o, which must not be one
 * of the databases being read (nor its -wal, -shm or -journal file: writing there would destroy
 * the run), and whose last write is checked, stdout's included (a full disk is an error).
 */
#include "commands.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

// Whether path and other name the same existing file.
static int same_file(const char *path, const char *other) {
    struct stat a, b;
    return stat(path, &a) == 0 && stat(other, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

FILE *amp_cmd_open_output(const char *cmd, const char *path, const char *const *inputs, int n) {
    if (!path) return stdout;
    if (!*path) {
        fprintf(stderr, "ampprobe %s: -o needs a file name\n", cmd);
        return NULL;
    }
    static const char *const sidecars[] = {"", "-wal", "-shm", "-journal"};
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof sidecars / sizeof *sidecars; k++) {
            char name[4096];
            if (snprintf(name, sizeof name, "%s%s", inputs[i], sidecars[k]) >= (int)sizeof name)
                continue;
            if (same_file(path, name)) {
                fprintf(stderr,
                        "ampprobe %s: -o %s is %s%s, which this command reads; name another file\n",
                        cmd, path, k ? "the SQLite side file of " : "", inputs[i]);
                return NULL;
            }
        }
    FILE *out = fopen(path, "w");
    if (!out) fprintf(stderr, "ampprobe %s: %s: %s\n", cmd, path, strerror(errno));
    return out;
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
