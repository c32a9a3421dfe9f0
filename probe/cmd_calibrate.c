/*
 * cmd_calibrate.c — `ampprobe calibrate [--force]`: measures the GPU's ceilings (GEMM FLOP/s per
 * dtype, DRAM bandwidth) once and caches them per GPU model (ceilings.h), for the report's
 * roofline classification. The measuring is done by ampprobe-calibrate, a small CUDA program
 * installed next to ampprobe, so that ampprobe itself never links CUDA; its name query decides
 * the cache file, and a cached file is printed instead of measuring again.
 */
#define _GNU_SOURCE
#include "amp-impl.h"
#include "ceilings.h"
#include "commands.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HELPER "ampprobe-calibrate"
#define OUTPUT_MAX 4096

static const char usage_text[] =
    "usage: ampprobe calibrate [--force]\n"
    "\n"
    "Measures this machine's GPU (device 0) once: dense GEMM FLOP/s in bf16, fp16, tf32 and\n"
    "fp32 (cuBLAS, random 8192^3 products) and DRAM bandwidth (a 2 GiB device-to-device copy),\n"
    "and caches them in $XDG_CACHE_HOME/ampprobe/ceilings-<gpu>.txt (default ~/.cache); the\n"
    "report classifies kernels against them. With a cached file it prints that instead.\n"
    "\n"
    "options:\n"
    "  -f, --force   measure again\n"
    "  -h, --help    this help\n"
    "\n"
    "Exit status: 0 done; 1 no GPU or the measurement failed; 2 usage error.\n";

// ---------------------------------------------------------------------------------------------
// The cache file

bool amp_ceilings_path(const char *gpu_name, char *path, size_t n) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char name[128];
    size_t k = 0;
    for (const char *p = gpu_name; *p && k + 1 < sizeof name; p++)
        name[k++] = isalnum((unsigned char)*p) ? *p : '_';
    name[k] = 0;
    int w;
    if (xdg && *xdg)
        w = snprintf(path, n, "%s/ampprobe/ceilings-%s.txt", xdg, name);
    else if (home && *home)
        w = snprintf(path, n, "%s/.cache/ampprobe/ceilings-%s.txt", home, name);
    else
        return false;
    return w > 0 && (size_t)w < n;
}

bool amp_ceilings_load(const char *gpu_name, amp_ceilings *out) {
    *out = (amp_ceilings){NAN, NAN, NAN, NAN, NAN};
    char path[PATH_MAX];
    if (!amp_ceilings_path(gpu_name, path, sizeof path)) return false;
    FILE *f = fopen(path, "r");
    if (!f) return false;
    static const struct {
        const char *key;
        size_t offset;
    } keys[] = {
        {"dram_bytes_per_s", offsetof(amp_ceilings, dram_bytes_per_s)},
        {"gemm_flops_bf16", offsetof(amp_ceilings, gemm_flops_bf16)},
        {"gemm_flops_f16", offsetof(amp_ceilings, gemm_flops_f16)},
        {"gemm_flops_tf32", offsetof(amp_ceilings, gemm_flops_tf32)},
        {"gemm_flops_f32", offsetof(amp_ceilings, gemm_flops_f32)},
    };
    bool any = false;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            size_t len = strlen(keys[i].key);
            if (strncmp(line, keys[i].key, len) != 0 || line[len] != ' ') continue;
            char *end;
            double v = strtod(line + len + 1, &end);
            if (end == line + len + 1 || !(v > 0) || !isfinite(v)) continue;
            *(double *)((char *)out + keys[i].offset) = v;
            any = true;
        }
    }
    fclose(f);
    return any;
}

// mkdir -p of the directory part of path.
static bool make_parent_dirs(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return false;
        *p = '/';
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Running the helper

// Runs HELPER (next to this binary) with arg (may be NULL); its stdout into out. Its stderr goes
// to ours. Returns its exit status, or -1 when it could not be started.
static int run_helper(const char *arg, char *out, size_t n) {
    char exe[PATH_MAX];
    if (!amp_exe_dir(exe, sizeof exe)) return -1;
    char helper[PATH_MAX + 32];
    snprintf(helper, sizeof helper, "%s/%s", exe, HELPER);
    if (access(helper, X_OK) != 0) {
        fprintf(stderr,
                "ampprobe calibrate: %s is not installed next to ampprobe (it is built "
                "where the CUDA toolkit with cuBLAS is found)\n",
                HELPER);
        return -1;
    }
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        char *argv[] = {helper, (char *)arg, NULL};
        execv(helper, argv);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while ((r = read(fds[0], out + got, n - 1 - got)) != 0) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || (got += (size_t)r) == n - 1) break;
    }
    out[got] = 0;
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int print_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    printf("# %s\n", path);
    char line[256];
    while (fgets(line, sizeof line, f))
        fputs(line, stdout);
    fclose(f);
    return 0;
}

int amp_cmd_calibrate(int argc, char **argv) {
    bool force = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--force") == 0) {
            if (!amp_cmd_option_once("calibrate", argv[i], &force)) return 2;
            continue;
        }
        fprintf(stderr,
                "ampprobe calibrate: unknown option '%s' (see 'ampprobe calibrate "
                "--help')\n",
                argv[i]);
        return 2;
    }
    char name[256];
    if (run_helper("--name", name, sizeof name) != 0) return 1;
    name[strcspn(name, "\n")] = 0;
    char path[PATH_MAX];
    if (!amp_ceilings_path(name, path, sizeof path)) {
        fprintf(stderr, "ampprobe calibrate: no cache directory (set HOME or XDG_CACHE_HOME)\n");
        return 1;
    }
    struct stat sb;
    if (!force && stat(path, &sb) == 0) return print_file(path);

    fprintf(stderr, "ampprobe calibrate: measuring %s (a few seconds)\n", name);
    char out[OUTPUT_MAX];
    if (run_helper(NULL, out, sizeof out) != 0 || !strstr(out, "gemm_flops_f32 ")) {
        fprintf(stderr, "ampprobe calibrate: the measurement failed; nothing cached\n");
        return 1;
    }
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = make_parent_dirs(path) ? fopen(tmp, "w") : NULL;
    bool written = f && fputs(out, f) >= 0;
    if (f && fclose(f) != 0) written = false;
    if (!written || rename(tmp, path) != 0) {
        fprintf(stderr, "ampprobe calibrate: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return print_file(path);
}
