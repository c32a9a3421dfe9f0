/* Shared declarations for the Check suites: one Suite *<name>_suite(void) per tests/suites.def line. */
#ifndef AMP_TESTS_H
#define AMP_TESTS_H

#include <check.h>
#include <math.h>

#define AMP_SUITE(name) Suite *name##_suite(void);
#include "suites.def"
#undef AMP_SUITE

// |got - want| <= tol + |want| * rel, with NaN matching NaN.
#define ck_assert_close(got, want, tol, rel)                                                       \
    do {                                                                                           \
        double g_ = (got), w_ = (want);                                                            \
        if (isnan(w_)) ck_assert_msg(isnan(g_), "expected NaN, got %g", g_);                      \
        else ck_assert_msg(fabs(g_ - w_) <= (tol) + fabs(w_) * (rel),                              \
                           "%s = %.9g, expected %.9g", #got, g_, w_);                              \
    } while (0)

// Path of a file in the source tree (tests/data/...).
#define AMP_SRC(rel) AMP_SOURCE_DIR "/" rel

#endif
