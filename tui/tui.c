/*
 * tui.c — the TUI's main loop (tui.h): the terminal, the keys, the header, tabs, footer and
 * help around the views, and the terminal's restoration on every way out.
 *
 * The loop polls the model every POLL_MS (a poll that finds no commit costs one PRAGMA), brings
 * the current view's rows up to date when the model moved, and redraws only when something
 * changed. The terminal is restored by endwin on q, on SIGINT/SIGTERM/SIGHUP/SIGQUIT (queued,
 * then a normal exit with 128+N), at exit(), and before a crash signal (SIGSEGV, SIGABRT, ...)
 * or another signal that ends a process by default (SIGUSR1, SIGALRM, SIGPIPE, ...: where
 * nothing else handles it) is let through — htop's fail()/crash handler. Under `ampprobe run --tui`
 * the launcher owns the termination signals (it passes them on to the program) and tells the TUI
 * through tui_live.quit_requested.
 */
#define _GNU_SOURCE
#include "tui.h"

#include "widgets.h"

#include "amp-impl.h"

#include <curses.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS 250 // new rows reach the screen within a collector commit (~200 ms) + this

static const tui_view_i *const views[TUI_N_VIEWS] = {&tui_view_overview, &tui_view_layers,
                                                     &tui_view_kernels, &tui_view_events};

// ---------------------------------------------------------------------------------------------
// The app: open, update, keys

amp_status tui_app_open(tui_app *app, const char *path, tui_live *live,
                        char err[AMP_STORE_ERR_MAX]) {
    *app = (tui_app){.live = live, .following = true, .step = -1};
    return tui_model_open(&app->model, path, err);
}

void tui_app_free(tui_app *app) {
    tui_model_free(&app->model);
    free(app->layer_rows);
    free(app->kernel_rows);
    free(app->event_rows);
    *app = (tui_app){0};
}

// The newest complete step: a step's statistics arrive before its step record, so following
// the statistics would show half a step. ] still reaches a later one (a run that died mid-step).
static int64_t newest_step(const tui_model *m) {
    return m->n_steps ? m->steps[m->n_steps - 1].step : m->stats_step;
}

bool tui_app_live(const tui_app *app) {
    const tui_model *m = &app->model;
    return !m->complete && !m->cut_short && m->file == TUI_FILE_SAME &&
           !(app->live && atomic_load(&app->live->exit_status) >= 0);
}

void tui_app_update(tui_app *app) {
    tui_model *m = &app->model;
    if (m->restarts != app->restarts) { // a new run at the path (the model started over on it)
        app->restarts = m->restarts;
        app->following = true;
        app->step = -1;
        for (int v = 0; v < TUI_N_VIEWS; v++)
            app->tables[v].selected = app->tables[v].top = 0;
        snprintf(app->message, sizeof app->message, "%s was replaced by a new run; showing it",
                 amp_base_name(m->path));
    } else if (m->file != app->file) {
        app->message[0] = 0; // the footer's next words are what became of the file
    }
    app->file = m->file;
    if (app->following) app->step = newest_step(m);
    if (app->step >= 0) tui_model_show_step(m, app->step);
    const tui_view_i *v = views[app->view];
    if (v->update && app->seen_generation[app->view] != m->generation) {
        v->update(app);
        app->seen_generation[app->view] = m->generation;
    }
}

static int table_rows(const tui_layout *l) {
    return l->table_rows > 0 ? l->table_rows : 1;
}

// [ and ]: the previous or next recorded step.
static void step_move(tui_app *app, int dir) {
    const tui_model *m = &app->model;
    app->following = false;
    ptrdiff_t i = tui_model_step_index(m, app->step);
    if (dir < 0) {
        if (i >= 0 && m->steps[i].step == app->step) i--;
        if (i >= 0) app->step = m->steps[i].step;
    } else if (i + 1 < (ptrdiff_t)m->n_steps) {
        app->step = m->steps[i + 1].step;
    } else if (m->stats_step > app->step) {
        app->step = m->stats_step; // statistics of a step whose record has not come yet
    }
    snprintf(app->message, sizeof app->message, "paused at step %lld (p follows the run)",
             (long long)app->step);
}

// P: the next process that recorded steps (the ranks of a data-parallel run), at the same step.
static void next_process(tui_app *app) {
    tui_model *m = &app->model;
    if (m->n_step_pids < 2) {
        snprintf(app->message, sizeof app->message, "one process recorded steps");
        return;
    }
    size_t k = (tui_model_process_index(m) + 1) % m->n_step_pids;
    tui_model_show_process(m, m->step_pids[k]);
    const size_t n = amp_appendf(app->message, sizeof app->message, 0, "process %d (%zu of %zu)",
                                 (int)m->pid, k + 1, m->n_step_pids);
    if (app->following || !m->n_steps) return;
    // paused at a step this process did not record: its last one before, else its first
    ptrdiff_t i = tui_model_step_index(m, app->step);
    const int64_t at = i >= 0 ? m->steps[i].step : m->steps[0].step;
    if (at != app->step)
        amp_appendf(app->message, sizeof app->message, n, ": no step %lld there, step %lld shown",
                    (long long)app->step, (long long)at);
    app->step = at;
}

static int edit_filter(tui_app *app, int ch) {
    tui_table *t = &app->tables[app->view];
    size_t n = strlen(t->filter);
    if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        app->editing = false;
    } else if (ch == 27) { // Esc
        app->editing = false;
        t->filter[0] = 0;
    } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) { // a character: its UTF-8 bytes
        while (n && ((unsigned char)t->filter[n - 1] & 0xC0) == 0x80)
            t->filter[--n] = 0;
        if (n) t->filter[n - 1] = 0;
    } else if (ch >= ' ' && ch <= 0xFF && ch != 127) { // (getch gives UTF-8 a byte at a time)
        // a character that starts must fit whole: 2-4 bytes by its first
        const size_t need = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC0 ? 2 : 1;
        if (n + need >= sizeof t->filter) {
            snprintf(app->message, sizeof app->message, "the filter takes %zu bytes at most",
                     sizeof t->filter - 1);
            return TUI_REDO_DRAW;
        }
        t->filter[n] = (char)ch;
        t->filter[n + 1] = 0;
    } else {
        return TUI_REDO_NONE;
    }
    t->selected = t->top = 0;
    app->seen_generation[app->view] = 0;
    return TUI_REDO_UPDATE;
}

static int move_selection(tui_app *app, int ch, const tui_layout *l) {
    const tui_view_i *v = views[app->view];
    if (!v->count) return TUI_REDO_NONE;
    tui_table *t = &app->tables[app->view];
    int n = v->count(app), page = table_rows(l);
    switch (ch) {
    case KEY_UP:
    case 'k':
        t->selected--;
        break;
    case KEY_DOWN:
    case 'j':
        t->selected++;
        break;
    case KEY_PPAGE:
        t->selected -= page;
        break;
    case KEY_NPAGE:
        t->selected += page;
        break;
    case KEY_HOME:
    case 'g':
        t->selected = 0;
        break;
    case KEY_END:
    case 'G':
        t->selected = n - 1;
        break;
    default:
        return TUI_REDO_NONE;
    }
    if (app->view == TUI_VIEW_EVENTS && app->following) {
        app->following = false; // the log would jump back to its end
        snprintf(app->message, sizeof app->message, "paused (p follows the run)");
    }
    tui_table_clamp(t, n, page);
    return TUI_REDO_DRAW;
}

int tui_app_key(tui_app *app, int ch, const tui_layout *l) {
    if (app->editing) return edit_filter(app, ch);
    app->message[0] = 0;
    if (app->help && ch != 'q' && ch != 'Q' && ch != KEY_RESIZE) { // (a resize is no key)
        app->help = false;
        return TUI_REDO_DRAW;
    }
    const tui_view_i *v = views[app->view];
    tui_table *t = &app->tables[app->view];
    switch (ch) {
    case 'q':
    case 'Q':
        return TUI_REDO_QUIT;
    case '\t':
        app->view = (app->view + 1) % TUI_N_VIEWS;
        return TUI_REDO_UPDATE;
    case KEY_BTAB:
        app->view = (app->view + TUI_N_VIEWS - 1) % TUI_N_VIEWS;
        return TUI_REDO_UPDATE;
    case '1':
    case '2':
    case '3':
    case '4':
        app->view = ch - '1';
        return TUI_REDO_UPDATE;
    case '?':
    case 'h':
        app->help = true;
        return TUI_REDO_DRAW;
    case 'p':
        app->following = !app->following;
        snprintf(app->message, sizeof app->message, "%s",
                 app->following ? "following the run" : "paused (p follows the run)");
        app->seen_generation[app->view] = 0;
        return TUI_REDO_UPDATE;
    case 'P':
        next_process(app);
        return TUI_REDO_UPDATE;
    case '[':
        step_move(app, -1);
        return TUI_REDO_UPDATE;
    case ']':
        step_move(app, +1);
        return TUI_REDO_UPDATE;
    case 's':
        if (!v->columns) return TUI_REDO_NONE;
        if (!v->columns[++t->sort]) t->sort = 0;
        snprintf(app->message, sizeof app->message, "sorted by %s", v->columns[t->sort]);
        app->seen_generation[app->view] = 0;
        return TUI_REDO_UPDATE;
    case '/':
        if (!v->columns) return TUI_REDO_NONE;
        app->editing = true;
        return TUI_REDO_DRAW;
    case KEY_RESIZE:
        return TUI_REDO_DRAW;
    default:
        return move_selection(app, ch, l);
    }
}

// ---------------------------------------------------------------------------------------------
// Drawing around the views

// The shown step and the recorded ones as a range, as the overview names steps ("graphs: steps
// 70-149"): "step 79 of 0-149" ("of 149" would read as a count, one short of it); a step beyond
// the newest record (its statistics came first) widens the range. Before any: "no steps yet"
// while the run goes on, "no steps recorded" once it is over.
static void fmt_step(char *buf, size_t n, const tui_app *app, bool live) {
    const tui_model *m = &app->model;
    if (app->step < 0) {
        snprintf(buf, n, "%s", live ? "no steps yet" : "no steps recorded");
        return;
    }
    int64_t first = m->n_steps ? m->steps[0].step : app->step;
    int64_t last = newest_step(m) > app->step ? newest_step(m) : app->step;
    if (first > app->step) first = app->step;
    snprintf(buf, n, "step %lld of %lld-%lld", (long long)app->step, (long long)first,
             (long long)last);
}

static void draw_header(const tui_app *app, const tui_layout *l) {
    const tui_model *m = &app->model;
    const bool live = tui_app_live(app);
    attron(A_REVERSE);
    mvhline(l->header.y, 0, ' ', l->header.w);
    attroff(A_REVERSE);
    char step[64];
    fmt_step(step, sizeof step, app, live);
    // the file's name last, the first thing a narrow terminal cuts (to an ellipsis, or left out
    // where not even a few columns of it fit), then the program's name; never under "? help"
    const bool help = l->cols > 60;
    const int w = help ? l->cols - 9 : l->cols;
    const char *file = amp_base_name(m->path);
    const int file_min = (int)strlen(file) < 6 ? (int)strlen(file) : 6;
    char head[160];
    snprintf(head, sizeof head, " ampprobe  %s  %s  %s", live ? "LIVE" : "REPLAY",
             app->following ? "following" : "PAUSED", step);
    const char *shown = head;
    if ((int)strlen(head) + 2 + file_min > w) shown += strlen(" ampprobe "); // " LIVE  ..."
    const int x = (int)strlen(shown) + 2;
    tui_print(0, 0, w, A_REVERSE | A_BOLD, "%s", shown);
    if (x + file_min <= w) tui_print(0, x, w - x, A_REVERSE | A_BOLD, "%s", file);
    if (help) tui_print(0, l->cols - 8, 8, A_REVERSE, "? help ");
}

// " 1 overview   2 layers ..."; on a narrow terminal, where those do not fit, closer together
// ("1 overview 2 layers ...") so that every view's key still shows.
static void draw_tabs(const tui_app *app, const tui_layout *l) {
    int x = 0, wide = 0;
    for (int i = 0; i < TUI_N_VIEWS; i++)
        wide += (int)strlen(views[i]->name) + 5; // " N name " and a blank
    const char *fmt = wide - 1 <= l->cols ? " %d %s " : "%d %s";
    for (int i = 0; i < TUI_N_VIEWS; i++) {
        char tab[32];
        snprintf(tab, sizeof tab, fmt, i + 1, views[i]->name);
        tui_print(l->tabs.y, x, l->cols - x, i == app->view ? A_REVERSE | A_BOLD : A_NORMAL, "%s",
                  tab);
        x += (int)strlen(tab) + 1;
    }
    const tui_view_i *v = views[app->view];
    const tui_table *t = &app->tables[app->view];
    if (v->columns && x + (int)strlen(" sort: ") + 4 <= l->cols) // (not a lone ellipsis)
        tui_print(l->tabs.y, x, l->cols - x, A_NORMAL, " sort: %s%s%s", v->columns[t->sort],
                  t->filter[0] ? "  filter: " : "", t->filter);
}

// The footer under `run --tui`: "[what | ]output: LOG[ | keys]", what the first of whats that
// fits (longest first; "" for none). The log's name stays whole while the keys, then the longer
// whats, give way; where it does not fit even so, it is shortened to an ellipsis (tui_fit_path).
static void draw_output(int y, int cols, int attr, const char *const *whats, const char *log_path,
                        const char *keys) {
    static const char sep[] = " | ", out[] = "output: ";
    const int log_len = (int)strlen(log_path), keys_len = (int)(strlen(sep) + strlen(keys));
    const char *what = NULL;
    bool with_keys = false;
    for (int pass = 0; pass < 2 && !what; pass++) // with the keys, then without
        for (const char *const *w = whats; *w && !what; w++) {
            const int what_len = **w ? (int)(strlen(*w) + strlen(sep)) : 0;
            if (what_len + (int)strlen(out) + log_len + (pass == 0 ? keys_len : 0) <= cols) {
                what = *w;
                with_keys = pass == 0;
            }
        }
    if (!what) // none keeps it whole: the shortest what, and the log's name shortened
        for (const char *const *w = whats; *w; w++)
            what = *w;
    const int before = (*what ? (int)(strlen(what) + strlen(sep)) : 0) + (int)strlen(out);
    char log[256];
    tui_fit_path(log, sizeof log, log_path, cols - before > 8 ? cols - before : 8);
    tui_print(y, 0, cols, attr, "%s%s%s%s%s%s", what, *what ? sep : "", out, log,
              with_keys ? sep : "", with_keys ? keys : "");
}

static void draw_footer(const tui_app *app, const tui_layout *l) {
    const tui_model *m = &app->model;
    int y = l->footer.y;
    int exit_status = app->live ? atomic_load(&app->live->exit_status) : -1;
    if (app->editing) {
        tui_print(y, 0, l->cols, A_BOLD, "filter: %s_  (Enter keeps it, Esc clears it)",
                  app->tables[app->view].filter);
    } else if (app->message[0]) {
        tui_print(y, 0, l->cols, A_BOLD, "%s", app->message);
    } else if (m->file == TUI_FILE_REMOVED) {
        tui_print(y, 0, l->cols, tui_attr(app, TUI_PAIR_WARN),
                  "%s was removed; showing what it held | q quits", amp_base_name(m->path));
    } else if (m->file == TUI_FILE_REPLACED) {
        tui_print(y, 0, l->cols, tui_attr(app, TUI_PAIR_WARN),
                  "%s was replaced; waiting to read the new one (%s)", amp_base_name(m->path),
                  m->file_error);
    } else if (exit_status >= 0) {
        // the launcher stores the signal before the status
        const int term_signal = atomic_load(&app->live->term_signal);
        char how[48], prog_how[128];
        if (term_signal > 0) // not "exited with status 130": it did not exit by itself
            tui_fmt_exit(how, sizeof how, exit_status, term_signal);
        else
            snprintf(how, sizeof how, "exited with status %d", exit_status);
        snprintf(prog_how, sizeof prog_how, "%s %s", amp_base_name(app->live->program), how);
        draw_output(y, l->cols, tui_attr(app, exit_status ? TUI_PAIR_DANGER : TUI_PAIR_GOOD),
                    (const char *const[]){prog_how, how, NULL}, app->live->log_path, "q quits");
    } else if (app->live) {
        draw_output(y, l->cols, A_NORMAL, (const char *const[]){"", NULL}, app->live->log_path,
                    "? help  q quit");
    } else {
        tui_print(y, 0, l->cols, A_NORMAL, "%s",
                  l->cols >= 78 ? "Tab/1-4 views  j/k move  s sort  / filter  p pause  "
                                  "[ ] step  ? help  q quit"
                                : "Tab/1-4 views  ? help  q quit");
    }
}

// The keys, on a page of their own in place of the tabs and the view (the header and the footer
// stay: a live program's end still shows); the title first, so that a short terminal keeps it.
static void draw_help(const tui_layout *l) {
    static const char *const lines[] = {
        "Tab, 1-4     overview, layers, kernels, events",
        "j/k, arrows  move the selection (PgUp/PgDn, g/G)",
        "s            sort by the next column",
        "/            filter by name (Enter keeps, Esc clears)",
        "p            pause / follow the newest step",
        "[ ]          previous / next step (pauses)",
        "P            next process (the ranks of a data-parallel run)",
        "?            this help",
        "q            quit",
        "",
        "layers: red = NaN/+Inf or < 1 bit of headroom to the dtype's max,",
        "yellow = < 3 bits, or >= 5% of values lost to underflow",
    };
    const int n = (int)(sizeof lines / sizeof lines[0]), y0 = l->tabs.y, w = l->cols - 2;
    tui_print(y0, 2, w, A_BOLD, "ampprobe tui: keys (any key closes this help)");
    for (int i = 0; i < n && y0 + 2 + i < l->footer.y; i++)
        tui_print(y0 + 2 + i, 2, w, A_NORMAL, "%s", lines[i]);
}

void tui_app_draw(const tui_app *app, const tui_layout *l) {
    erase();
    if (l->too_small) {
        tui_print(0, 0, l->cols, A_BOLD, "terminal too small");
        tui_print(1, 0, l->cols, 0, "%dx%d, need %dx%d", l->cols, l->rows, TUI_MIN_COLS,
                  TUI_MIN_ROWS);
        tui_print(2, 0, l->cols, 0, "q quits");
        return;
    }
    draw_header(app, l);
    if (app->help) {
        draw_help(l);
    } else {
        draw_tabs(app, l);
        views[app->view]->draw(app, l);
    }
    draw_footer(app, l);
}

// ---------------------------------------------------------------------------------------------
// The terminal

static volatile sig_atomic_t quit_signal;
static volatile sig_atomic_t curses_active;

static void on_quit(int sig) {
    quit_signal = sig;
}

// A crash, or another signal that ends the process, must not leave the terminal raw: restore it,
// then die of the same signal.
static void on_crash(int sig) {
    if (curses_active) endwin();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void restore_at_exit(void) {
    if (curses_active) endwin();
    curses_active = 0;
}

static const int quit_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
// the crash signals, then those that end a process by default without a crash (taken only where
// their disposition is the default: under ampprobe run --tui the launcher passes SIGUSR1 and
// SIGUSR2 on to the program, and an ignored signal stays ignored)
static const int crash_signals[] = {SIGSEGV, SIGABRT, SIGBUS,    SIGFPE,  SIGILL,
                                    SIGTRAP, SIGSYS,  SIGXCPU,   SIGXFSZ, SIGUSR1,
                                    SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGPIPE};
#define N_QUIT (sizeof quit_signals / sizeof quit_signals[0])
#define N_CRASH (sizeof crash_signals / sizeof crash_signals[0])

typedef struct saved_signals {
    struct sigaction quit[N_QUIT], crash[N_CRASH];
    bool quit_set, crash_set[N_CRASH];
} saved_signals;

static void signals_install(saved_signals *s, bool own_quit) {
    struct sigaction sa = {.sa_handler = on_crash};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_CRASH; i++) {
        sigaction(crash_signals[i], NULL, &s->crash[i]);
        s->crash_set[i] = s->crash[i].sa_handler == SIG_DFL;
        if (s->crash_set[i]) sigaction(crash_signals[i], &sa, NULL);
    }
    s->quit_set = own_quit;
    if (!own_quit) return;
    sa.sa_handler = on_quit;
    for (size_t i = 0; i < N_QUIT; i++)
        sigaction(quit_signals[i], &sa, &s->quit[i]);
}

static void signals_restore(const saved_signals *s) {
    for (size_t i = 0; i < N_CRASH; i++)
        if (s->crash_set[i]) sigaction(crash_signals[i], &s->crash[i], NULL);
    for (size_t i = 0; s->quit_set && i < N_QUIT; i++)
        sigaction(quit_signals[i], &s->quit[i], NULL);
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool want_color(void) {
    const char *no = getenv("NO_COLOR");
    return has_colors() && !(no && *no);
}

// The terminal hung up (its window closed, its ssh session or tmux server gone): stdin then
// reads end-of-file at once, so getch() never waits again. A SIGHUP need not come with it:
// under `run --tui` the launcher leaves the terminal's own signals to the program, which may
// have ended.
static bool terminal_gone(void) {
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

// Until q, a signal, a read of the database that failed for good (app->model.error), or the
// terminal gone.
static void loop(tui_app *app) {
    tui_layout l;
    bool dirty = true;
    int last_exit = -1;
    int64_t next_poll = mono_ms() + POLL_MS;
    while (!quit_signal &&
           !(app->live && app->live->quit_requested && app->live->quit_requested())) {
        int64_t now = mono_ms();
        if (now >= next_poll) {
            dirty |= tui_model_poll(&app->model);
            next_poll = now + POLL_MS;
        }
        int exit_status = app->live ? atomic_load(&app->live->exit_status) : -1;
        dirty |= exit_status != last_exit;
        last_exit = exit_status;
        if (dirty) {
            tui_app_update(app);
            if (app->model.error[0]) break; // a damaged file: tui_run says so, the screen gone
            tui_layout_compute(COLS, LINES, &l);
            const tui_view_i *v = views[app->view];
            if (v->count) tui_table_clamp(&app->tables[app->view], v->count(app), table_rows(&l));
            tui_app_draw(app, &l);
            refresh();
            dirty = false;
        }
        int wait = (int)(next_poll - mono_ms());
        timeout(wait > 0 ? wait : 0);
        int ch = getch();
        if (ch == ERR && terminal_gone()) break;
        if (ch == ERR) continue;
        int redo = tui_app_key(app, ch, &l);
        if (redo & TUI_REDO_QUIT) break;
        dirty |= redo != TUI_REDO_NONE;
    }
}

int tui_run(const char *path, tui_live *live) {
    tui_app *app = amp_xmalloc(sizeof *app);
    char err[AMP_STORE_ERR_MAX];
    if (tui_app_open(app, path, live, err) != AMP_OK) {
        fprintf(stderr, "ampprobe tui: %s\n", err);
        free(app);
        return 2;
    }
    tui_app_update(app); // the first frame's reads, before the terminal is taken
    if (app->model.error[0]) {
        fprintf(stderr, "ampprobe tui: %s\n", app->model.error);
        tui_app_free(app);
        free(app);
        return 2;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr,
                "ampprobe tui: needs a terminal (stdin and stdout); for a file or a pipe "
                "use 'ampprobe report %s'\n",
                path);
        tui_app_free(app);
        free(app);
        return 2;
    }
    setlocale(LC_ALL, "");
    app->utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
    saved_signals saved;
    quit_signal = 0;
    signals_install(&saved, live == NULL);
    static bool registered;
    if (!registered) atexit(restore_at_exit);
    registered = true;
    // an unknown TERM, or one that cannot move the cursor (dumb): refused alike
    SCREEN *screen = tui_terminal_usable(STDOUT_FILENO) ? newterm(NULL, stdout, stdin) : NULL;
    if (!screen) {
        signals_restore(&saved);
        fprintf(stderr, "ampprobe tui: cannot start the terminal (TERM=%s)\n",
                getenv("TERM") ? getenv("TERM") : "");
        tui_app_free(app);
        free(app);
        return 2;
    }
    curses_active = 1;
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    app->color = want_color();
    tui_colors_init(app);

    loop(app);

    endwin();
    curses_active = 0;
    delscreen(screen);
    signals_restore(&saved);
    int rc = quit_signal ? 128 + quit_signal : 0; // (the shell's convention for a signal)
    if (app->model.error[0]) { // the terminal is back: the error stays readable there
        fprintf(stderr, "ampprobe tui: %s\n", app->model.error);
        rc = 2;
    }
    tui_app_free(app);
    free(app);
    return rc;
}
