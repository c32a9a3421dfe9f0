/*
 * tui.h — `ampprobe tui`: the application state shared by the main loop (tui.c) and the views
 * (view_*.c), the view interface, and the entry point used by `ampprobe tui FILE` and
 * `ampprobe run --tui`.
 *
 * Model (model.h: SQLite into plain structs), layout (layout.h: a pure function of the size)
 * and views stay apart: a view's update turns the model into its display rows (sort, filter)
 * and its draw puts them on the screen in the layout's rectangles; key handlers return what
 * must be redone (TUI_REDO_*), as htop's Panel does.
 */
#ifndef AMPPROBE_TUI_H
#define AMPPROBE_TUI_H

#include "layout.h"
#include "model.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum { TUI_VIEW_OVERVIEW, TUI_VIEW_LAYERS, TUI_VIEW_KERNELS, TUI_VIEW_EVENTS, TUI_N_VIEWS };

// What a key handler asks the main loop to redo.
enum {
    TUI_REDO_NONE = 0,
    TUI_REDO_DRAW = 1,   // redraw the screen
    TUI_REDO_UPDATE = 2, // rebuild the views' rows from the model, then redraw
    TUI_REDO_QUIT = 4,
};

// A table's scroll and selection, its sort column and filter.
typedef struct tui_table {
    int selected, top; // row indices into the view's rows
    int sort;          // the view's sort column
    char filter[64];   // substring; "" shows everything
} tui_table;

// `ampprobe run --tui`: what the launcher tells the TUI about the program.
typedef struct tui_live {
    const char *log_path;         // where the program's output goes
    const char *program;          // its name, for the screen
    atomic_int exit_status;       // -1 while it runs; then the shell convention, 128+N
    atomic_int term_signal;       // the signal that killed the program, 0: it exited (valid once
                                  // exit_status >= 0)
    bool (*quit_requested)(void); // a signal asked the launcher to stop; NULL: never
} tui_live;

typedef struct tui_app {
    tui_model model;
    tui_live *live; // NULL for `ampprobe tui FILE`
    int view;       // TUI_VIEW_*
    bool following; // the shown step tracks the newest one (p toggles; [ and ] stop it)
    int64_t step;   // the shown step (-1: none yet)
    bool help;      // the help overlay is up
    bool editing;   // the filter is being typed in the footer
    bool color, utf8;
    char message[128];   // a one-off footer message
    unsigned restarts;   // model.restarts the app last saw (a new run at the path: shown afresh)
    tui_file_state file; // model.file the app last saw (the footer says what became of it)
    tui_table tables[TUI_N_VIEWS];
    uint64_t seen_generation[TUI_N_VIEWS]; // model generation each view's rows were built from
    // Display rows built by the views' update.
    const tui_layer_row **layer_rows;
    size_t n_layer_rows, cap_layer_rows;
    const tui_kernel **kernel_rows;
    size_t n_kernel_rows, cap_kernel_rows;
    const tui_event **event_rows;
    size_t n_event_rows, cap_event_rows;
} tui_app;

// Colour pairs (attributes without colour when NO_COLOR is set or the terminal has none).
enum { TUI_PAIR_DANGER = 1, TUI_PAIR_WARN, TUI_PAIR_GOOD, TUI_PAIR_ACCENT };

typedef struct tui_view_i {
    const char *name;
    const char *const *columns;   // sortable columns, NULL-terminated; NULL: not a table
    void (*update)(tui_app *app); // model -> display rows; NULL: draws from the model
    void (*draw)(const tui_app *app, const tui_layout *l); // rows -> screen (stdscr)
    int (*count)(const tui_app *app);                      // display rows; NULL: not a table
} tui_view_i;

extern const tui_view_i tui_view_overview, tui_view_layers, tui_view_kernels, tui_view_events;

// Runs the TUI on the database at path until q (or a signal). live: NULL for a plain file.
// 0 on q; 128+N when signal N ended it (SIGINT, SIGTERM, SIGHUP, SIGQUIT; live: never, the
// launcher takes them); 2 with one line on stderr when the file cannot be read (also when a
// read fails for good while it runs: the terminal restored first) or the terminal cannot be used.
int tui_run(const char *path, tui_live *live);

// Whether the terminal TERM names (on fd) can show the TUI: terminfo knows it and it can move
// the cursor to a row and column (cup). TERM=dumb cannot: it would get a blank screen.
bool tui_terminal_usable(int fd);

// Opens the model (one line in err on failure) and sets the app to follow the newest step.
amp_status tui_app_open(tui_app *app, const char *path, tui_live *live,
                        char err[AMP_STORE_ERR_MAX]);
void tui_app_free(tui_app *app);
// Whether the shown run may still grow: not complete, its recording not cut short, the file still
// the one opened, and under `run --tui` the program still running.
bool tui_app_live(const tui_app *app);
// Frame pieces shared with the benchmark: bring the shown step and the current view's rows up
// to date with the model, then draw the whole screen into stdscr (no refresh).
void tui_app_update(tui_app *app);
void tui_app_draw(const tui_app *app, const tui_layout *l);
// Handles one key (curses code). Returns TUI_REDO_* flags.
int tui_app_key(tui_app *app, int ch, const tui_layout *l);
// Starts the colour pairs (when app->color).
void tui_colors_init(const tui_app *app);

#endif
