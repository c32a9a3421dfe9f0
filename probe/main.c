/*
 * main.c — the ampprobe command line: dispatches to the subcommands (commands.h).
 */
#include "commands.h"

#include <stdio.h>
#include <string.h>

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"run", amp_cmd_run,
     "run a program with instrumentation on and record it (also: ampprobe -- PROG)"},
    {"report", amp_cmd_report,
     "diagnose a recorded run: which layer, op and step went wrong, why, the fix"},
    {"tui", amp_cmd_tui, "follow a running capture or replay a finished one in the terminal"},
    {"diff", amp_cmd_diff,
     "compare two runs (e.g. fp32 vs AMP): step time, loss, findings, a verdict"},
    {"calibrate", amp_cmd_calibrate,
     "measure the GPU's ceilings (GEMM FLOP/s, DRAM bandwidth) once, for the roofline"},
    {"conform", amp_cmd_conform,
     "check this build's AMP semantics against PyTorch reference files"},
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: ampprobe <command> [options]\n\n"
            "ampprobe finds out why mixed-precision (fp16/bf16) training goes wrong or is slow.\n\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n'ampprobe <command> --help' describes a command; 'ampprobe --version' prints the\n"
            "version.\n");
}

static const struct command *find(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0) return &commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        if (argc == 2) {
            usage(stdout);
            return 0;
        }
        const struct command *c = find(argv[2]); // `ampprobe help run`
        if (c && argc == 3) return c->run(2, (char *[]){argv[2], "--help", NULL});
        if (c)
            fprintf(stderr, "ampprobe: %s takes one command ('%s' after '%s')\n", argv[1], argv[3],
                    argv[2]);
        else
            fprintf(stderr, "ampprobe: %s: no command '%s' (see 'ampprobe --help')\n", argv[1],
                    argv[2]);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        if (argc > 2) {
            fprintf(stderr, "ampprobe: %s takes no argument ('%s')\n", argv[1], argv[2]);
            return 2;
        }
        printf("ampprobe 0.1.0\n");
        return 0;
    }
    if (strcmp(argv[1], "--") == 0) return amp_cmd_run(argc, argv); // ampprobe -- PROG [ARGS]
    const struct command *c = find(argv[1]);
    if (c) return c->run(argc - 1, argv + 1);
    fprintf(stderr, "ampprobe: unknown command '%s' (see 'ampprobe --help')\n", argv[1]);
    return 2;
}
