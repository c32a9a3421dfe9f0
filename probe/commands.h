/*
 * commands.h — the subcommands of the ampprobe binary. Each lives in its own cmd_<name>.c,
 * takes the arguments after its name (argv[0] is the subcommand) and returns the exit status:
 * 0 success, 1 the checked thing failed, 2 usage error or unreadable input.
 */
#ifndef AMPPROBE_COMMANDS_H
#define AMPPROBE_COMMANDS_H

int amp_cmd_run(int argc, char **argv);
int amp_cmd_conform(int argc, char **argv);
int amp_cmd_report(int argc, char **argv);
int amp_cmd_calibrate(int argc, char **argv);
int amp_cmd_diff(int argc, char **argv);
int amp_cmd_tui(int argc, char **argv);

#include <stdbool.h>
#include <stdio.h>

// Whether argv[*i] is the option `name` ("--format") or `short_name` ("-o"; NULL: none) with its
// value: "--format V", "--format=V" or "-o V" (options.c). 1: it is, *value set and *i on the last
// argument it took; 0: it is another argument; -1: it is, but no value follows.
int amp_cmd_option_value(int argc, char **argv, int *i, const char *name, const char *short_name,
                         const char **value);
// Marks an option given (*given); false after the usage error "ampprobe CMD: NAME is given twice"
// when it was already (options.c). name may be the argument itself: what follows an '=' is left
// out ("--output=a.sqlite": "--output").
bool amp_cmd_option_once(const char *cmd, const char *name, bool *given);

// The files SQLite keeps beside a database (suffixes of its name), output.c's.
#define AMP_CMD_N_SIDE_FILES 3
extern const char *const amp_cmd_side_files[AMP_CMD_N_SIDE_FILES];

// The output of report and diff (output.c): stdout when path is NULL, else the file path, which
// must not be one of the n databases in inputs (or their SQLite side files). NULL after saying
// why on stderr ("ampprobe CMD: ...").
FILE *amp_cmd_open_output(const char *cmd, const char *path, const char *const *inputs, int n);
// Flushes out (and closes it unless it is stdout); 0, or 2 after saying on stderr that the output
// could not be written (a full disk), naming path or stdout.
int amp_cmd_close_output(const char *cmd, const char *path, FILE *out);

#endif
