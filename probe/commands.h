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

#endif
