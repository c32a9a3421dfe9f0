/*
 * options.c — reading an option's value the same way in every subcommand: "--format json",
 * "--format=json" (as nsys takes them), or a short name's "-o FILE"; and each option once.
 */
#include "commands.h"

#include <stdio.h>
#include <string.h>

int amp_cmd_option_value(int argc, char **argv, int *i, const char *name, const char *short_name,
                         const char **value) {
    const char *a = argv[*i];
    if (short_name && strcmp(a, short_name) == 0) {
        if (*i + 1 >= argc) return -1;
        *value = argv[++*i];
        return 1;
    }
    const size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) return -1;
    *value = argv[++*i];
    return 1;
}

// Every subcommand takes each option once (README): the last of two winning would hide the
// first, which the user meant as much.
bool amp_cmd_option_once(const char *cmd, const char *name, bool *given) {
    if (*given) {
        fprintf(stderr, "ampprobe %s: %.*s is given twice (see 'ampprobe %s --help')\n", cmd,
                (int)strcspn(name, "="), name, cmd);
        return false;
    }
    *given = true;
    return true;
}
