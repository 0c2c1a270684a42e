/* Robust aggregation rules on closed-form inputs. */
#include "dtrain/aggregate.h"

#include "testhelp.h"

#include <string.h>

int main(void) {
    /* 5 workers, 3 coordinates; worker 4 is an outlier. */
    float v[5 * 3] = {1, 10, -1,  2, 11, -2,  3, 12, -3,  4, 13, -4,  1000, -1000, 1000};
    float out[3], scratch[128];
    dt_agg a;
    test_cond("parse median", dt_agg_parse("median", &a) == DT_OK && a.kind == DT_AGG_MEDIAN);
    dt_agg_apply(&a, out, v, 5, 3, scratch);
    float med[3] = {3, 11, -2};
    test_close("median", out, med, 3, 0, 0);

    test_cond("parse trimmed", dt_agg_parse("trimmed:1", &a) == DT_OK && a.param == 1);
    dt_agg_apply(&a, out, v, 5, 3, scratch);
    float tr[3] = {3, 11, -2}; /* drop min and max per coordinate: mean of the middle three */
    test_close("trimmed:1", out, tr, 3, 1e-6, 0);

    test_cond("parse mean", dt_agg_parse("mean", &a) == DT_OK);
    dt_agg_apply(&a, out, v, 5, 3, scratch);
    float mean[3] = {202, -190.8f, 198};
    test_close("mean", out, mean, 3, 1e-3, 1e-6);

    /* Krum with F = 1: the outlier has the worst score; M = 1 picks the most central. */
    test_cond("parse krum:1:1", dt_agg_parse("krum:1:1", &a) == DT_OK && a.param == 1 && a.m == 1);
    int pick = dt_agg_apply(&a, out, v, 5, 3, scratch);
    test_cond("krum picks a central worker", pick == 1 || pick == 2);
    test_cond("parse krum:1", dt_agg_parse("krum:1", &a) == DT_OK && a.m == 0);
    dt_agg_apply(&a, out, v, 5, 3, scratch);
    float mk[3] = {2.5f, 11.5f, -2.5f}; /* the four honest workers averaged */
    test_close("multi-krum (M = n - F)", out, mk, 3, 1e-6, 0);

    /* Refusals. */
    test_cond("trimmed:2 with 4 workers refused", dt_agg_parse("trimmed:2", &a) == DT_OK && dt_agg_check(&a, 4) != DT_OK);
    test_cond("krum:1 with 4 workers refused", dt_agg_parse("krum:1", &a) == DT_OK && dt_agg_check(&a, 4) != DT_OK);
    test_cond("krum:1 with 5 workers accepted", dt_agg_check(&a, 5) == DT_OK);
    test_cond("median with 2 workers refused", dt_agg_parse("median", &a) == DT_OK && dt_agg_check(&a, 2) != DT_OK);
    test_cond("junk refused", dt_agg_parse("krum:x", &a) != DT_OK && dt_agg_parse("trimmed:0", &a) != DT_OK &&
                                  dt_agg_parse("max", &a) != DT_OK);
    return test_report();
}
