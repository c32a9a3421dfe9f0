/*
 * test_report_html.c — suite `report_html`: the html report of a real fault run (tiny_gpt
 * --fault attn-overflow, recorded with ampprobe run) rendered by headless Chromium (Debian's
 * `chromium`, installed by .ci/setup.sh): the DOM comes back with the verdict and the SVG plots,
 * Chromium logs no console message (an SVG attribute it cannot parse is one), and a screenshot
 * is written (kept as build/report_html.png for a person to look at); a run longer than the
 * plots' 400 points, drawn in buckets, renders as cleanly, and so does a run of two processes.
 */
#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char dir[64];

static void setup(void) {
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/amphtml."));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

#define CHROMIUM                                                                                   \
    "chromium --headless --no-sandbox --disable-gpu --disable-background-networking "              \
    "--disable-component-update --disable-sync --no-first-run --user-data-dir=%1$s/profile "       \
    "--enable-logging=stderr --v=0 "

// Chromium's log dir/name holds no console message (an SVG attribute it cannot parse is one).
static void no_console_message(const char *name) {
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *err = test_read_file(path, NULL);
    ck_assert_msg(strstr(err, "CONSOLE") == NULL, "console message: %s", strstr(err, "CONSOLE"));
    free(err);
}

// Records `ampprobe run -- PROGRAM` into dir/run.sqlite, reports it as html and has Chromium
// parse it: the DOM it gives back (malloc'd), with no console message in Chromium's log.
static char *rendered_dom_of(const char *program) {
    ck_assert_msg(system("command -v chromium >/dev/null") == 0,
                  "chromium is not installed (apt-get install chromium; .ci/setup.sh does)");
    char cmd[2048], path[160];
    snprintf(cmd, sizeof cmd,
             "%2$s/ampprobe run -o %1$s/run.sqlite -- %3$s >/dev/null 2>&1 && "
             "%2$s/ampprobe report %1$s/run.sqlite --format html -o %1$s/report.html && " CHROMIUM
             "--dump-dom file://%1$s/report.html >%1$s/dom.html 2>%1$s/dom.err",
             dir, AMP_BINARY_DIR, program);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    no_console_message("dom.err");
    snprintf(path, sizeof path, "%s/dom.html", dir);
    return test_read_file(path, NULL);
}

// The same of the sample ARGS ("tiny_gpt --quiet ...").
static char *rendered_dom(const char *sample_args) {
    char program[1024];
    snprintf(program, sizeof program, "%s/samples/%s", AMP_BINARY_DIR, sample_args);
    return rendered_dom_of(program);
}

START_TEST(html_report_renders_in_chromium_without_console_messages) {
    char *dom = rendered_dom("tiny_gpt --quiet --steps 12 --precision fp16 --fault attn-overflow");
    ck_assert_ptr_nonnull(
        strstr(dom, "Training broke: fp16 overflow in blocks.1.attn mul at step 3"));
    int svgs = 0;
    for (const char *p = dom; (p = strstr(p, "<svg")); p++)
        svgs++;
    ck_assert_int_ge(svgs, 4); // loss, scale, amax, step time
    free(dom);
    // a screenshot, kept for a person to look at
    char cmd[1024], path[160];
    snprintf(cmd, sizeof cmd,
             CHROMIUM "--window-size=1000,2600 --screenshot=%1$s/shot.png file://%1$s/report.html "
                      ">/dev/null 2>%1$s/shot.err && cp %1$s/shot.png %2$s/report_html.png",
             dir, AMP_BINARY_DIR);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    no_console_message("shot.err");
    struct stat st;
    snprintf(path, sizeof path, "%s/shot.png", dir);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_gt(st.st_size, 10000);
}
END_TEST

// A run longer than the plots' 400 points (mlp --fault nan-input: NaN in the data at step 5) is
// drawn in buckets (bands, bars of a bucket's mean with its longest step, every non-finite loss
// marked) that Chromium parses without a console message.
START_TEST(html_report_of_a_long_run_renders_in_chromium) {
    char *dom = rendered_dom("mlp --quiet --steps 450 --precision fp16 --fault nan-input");
    ck_assert_ptr_nonnull(strstr(dom, "450 steps in 400 buckets of 1-2 steps"));
    ck_assert_ptr_nonnull(strstr(dom, "<title>step 5: 1 non-finite loss</title>"));
    ck_assert_ptr_nonnull(strstr(dom, "<polygon fill=\"#aec7e8\" points=\""));
    free(dom);
}
END_TEST

// A script that runs two trainings, the second of which breaks: the plots follow the broken one,
// named in their captions, and the amax legend tells the two processes' layers apart.
START_TEST(html_report_of_two_processes_renders_in_chromium) {
    char program[1024];
    snprintf(program, sizeof program,
             "sh -c '%1$s/samples/tiny_gpt --quiet --steps 8 & %1$s/samples/tiny_gpt --quiet "
             "--steps 12 --precision fp16 --fault attn-overflow; wait'",
             AMP_BINARY_DIR);
    char *dom = rendered_dom_of(program);
    ck_assert_ptr_nonnull(strstr(dom, "Training broke in tiny_gpt (pid "));
    const char *loss = strstr(dom, "<figcaption>Loss \u2014 tiny_gpt (pid ");
    ck_assert_msg(loss && strstr(loss, "), 1 of 2 processes</figcaption>"), "%s", dom);
    ck_assert_ptr_nonnull(strstr(dom, "blocks.1.attn [P1]</text>"));
    ck_assert_ptr_nonnull(strstr(dom, "blocks.1.attn [P2]</text>"));
    free(dom);
}
END_TEST

Suite *report_html_suite(void) {
    Suite *s = suite_create("report_html");
    TCase *tc = tcase_create("chromium");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, html_report_renders_in_chromium_without_console_messages);
    tcase_add_test(tc, html_report_of_a_long_run_renders_in_chromium);
    tcase_add_test(tc, html_report_of_two_processes_renders_in_chromium);
    suite_add_tcase(s, tc);
    return s;
}
