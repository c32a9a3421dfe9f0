/*
 * terminal.c — what the terminal can do, asked of terminfo before curses starts (tui.h). Apart
 * from tui.c because term.h defines its capabilities as macros (lines, columns, tab, ...).
 */
#include "tui.h"

#include <curses.h>
#include <term.h>

bool tui_terminal_usable(int fd) {
    int err = 0;
    if (setupterm(NULL, fd, &err) != OK) return false; // unknown TERM, or no terminfo at all
    const char *cup = tigetstr("cup");
    const bool usable = cup && cup != (const char *)-1; // NULL: absent; -1: not a string
    del_curterm(cur_term);
    return usable;
}
