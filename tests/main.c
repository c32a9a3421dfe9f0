/*
 * The Check runner: one suite per module (tests/suites.def). With a suite name as argument it
 * runs only that suite (ctest runs each suite as its own test); without, it runs them all.
 */
#include "tests.h"

#include <stdio.h>
#include <string.h>

#define AMP_SUITE(name) {#name, name##_suite},
static const struct {
    const char *name;
    Suite *(*make)(void);
} suites[] = {
#include "suites.def"
};
#undef AMP_SUITE

int main(int argc, char **argv) {
    SRunner *sr = NULL;
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        if (argc > 1 && strcmp(argv[1], suites[i].name) != 0) continue;
        if (!sr)
            sr = srunner_create(suites[i].make());
        else
            srunner_add_suite(sr, suites[i].make());
    }
    if (!sr) {
        fprintf(stderr, "ampprobe_tests: no suite named '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
