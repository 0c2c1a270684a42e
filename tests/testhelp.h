/* A small test helper in the spirit of redis' testhelp.h: checks count
 * failures, tensor comparisons print the largest difference seen, and
 * test_report() returns the exit status (non-zero on any failure). */
#ifndef DT_TESTHELP_H
#define DT_TESTHELP_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int t_failed = 0, t_passed = 0;

#define test_cond(descr, cond)                                                  \
    do {                                                                        \
        if (cond) { t_passed++; }                                               \
        else { t_failed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, descr); } \
    } while (0)

/* Largest |a-b| / (atol + rtol*|b|) over n floats; passes when <= 1. Prints the
 * largest absolute difference and where it was. */
static inline int test_close(const char *what, const float *a, const float *b, size_t n,
                             double atol, double rtol) {
    double worst = 0, worst_abs = 0;
    size_t at = 0;
    int bad_nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) { bad_nan = 1; at = i; break; }
        double d = fabs((double)a[i] - (double)b[i]);
        double r = d / (atol + rtol * fabs((double)b[i]));
        if (r > worst) { worst = r; at = i; }
        if (d > worst_abs) worst_abs = d;
    }
    int ok = !bad_nan && worst <= 1.0;
    printf("%s %-40s n=%zu max|diff|=%.3g (at %zu)%s\n", ok ? "ok  " : "FAIL", what, n,
           worst_abs, at, bad_nan ? " NaN mismatch" : "");
    if (ok) t_passed++; else t_failed++;
    return ok;
}

static inline int test_report(void) {
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return t_failed ? 1 : 0;
}

#endif
