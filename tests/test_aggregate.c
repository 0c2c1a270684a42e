/* Robust aggregation rules on closed-form inputs. */
#include "dtrain/aggregate.h"

#include "testhelp.h"

#include <string.h>

/* Reference order statistics: sort each coordinate's n values with qsort. */
static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}
static void ref_rule(float *out, const float *v, int n, size_t P, int B) {
    float col[512];
    for (size_t j = 0; j < P; j++) {
        for (int i = 0; i < n; i++) col[i] = v[(size_t)i * P + j];
        qsort(col, (size_t)n, sizeof(float), cmpf);
        if (B < 0) out[j] = n % 2 ? col[n / 2] : 0.5f * (col[n / 2 - 1] + col[n / 2]);
        else {
            double s = 0;
            for (int i = B; i < n - B; i++) s += col[i];
            out[j] = (float)(s / (double)(n - 2 * B));
        }
    }
}
static uint64_t rs = 88172645463325252ull;
static float urand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 40) / 16777216.0) * 2 - 1; }

int main(void) {
    /* 5 workers, 3 coordinates; worker 4 is an outlier. */
    float v[5 * 3] = {1, 10, -1,  2, 11, -2,  3, 12, -3,  4, 13, -4,  1000, -1000, 1000};
    float out[3], scratch[2048];
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

    /* The sorting network (n <= 16) and the insertion sort (n > 16) agree with
     * qsort on every coordinate, for P not a multiple of the 64-wide blocks. */
    {
        size_t P = 203;
        float *vv = malloc(300 * P * sizeof(float)), *o1 = malloc(P * sizeof(float)), *o2 = malloc(P * sizeof(float));
        int bad = 0;
        for (int n = 3; n <= 300; n += (n < 18 ? 1 : n < 40 ? 11 : 260)) {
            for (size_t j = 0; j < (size_t)n * P; j++) vv[j] = urand() * (j % 7 == 0 ? 1000.0f : 1.0f);
            vv[5] = vv[P + 5]; /* ties */
            dt_agg r = {.kind = DT_AGG_MEDIAN};
            float *sc = malloc(dt_agg_scratch_floats(&r, n, P) * sizeof(float));
            dt_agg_apply(&r, o1, vv, n, P, sc);
            ref_rule(o2, vv, n, P, -1);
            bad += memcmp(o1, o2, P * sizeof(float)) != 0;
            free(sc);
            r = (dt_agg){.kind = DT_AGG_TRIMMED, .param = (n - 1) / 3};
            sc = malloc(dt_agg_scratch_floats(&r, n, P) * sizeof(float));
            dt_agg_apply(&r, o1, vv, n, P, sc);
            ref_rule(o2, vv, n, P, r.param);
            bad += memcmp(o1, o2, P * sizeof(float)) != 0;
            free(sc);
        }
        test_cond("median and trimmed mean equal a qsort reference for n = 3..40 and 300", bad == 0);
        free(vv);
        free(o1);
        free(o2);
    }

    /* Nearest-neighbour mixing: 4 honest workers near (1, 2) and one far away.
     * Each honest vector's 4 nearest are the honest ones, so every mixed honest
     * vector is their mean, and the median of the mixed vectors is that mean. */
    {
        float hv[5 * 2] = {0.5f, 2.5f,  1.5f, 1.5f,  1.0f, 2.0f,  -100, 500,  1.2f, 2.4f};
        float o[2], sc[4096];
        dt_agg r;
        test_cond("parse median", dt_agg_parse("median", &r) == DT_OK);
        test_cond("parse nnm", dt_agg_parse_pre("nnm:1", &r) == DT_OK && r.nnm == 1);
        test_cond("scratch fits", dt_agg_scratch_floats(&r, 5, 2) <= 4096);
        dt_agg_apply(&r, o, hv, 5, 2, sc);
        float hm[2] = {1.05f, 2.1f};
        test_close("nnm:1 + median = the honest mean", o, hm, 2, 1e-6, 0);
        /* Without mixing the median picks one worker's value per coordinate. */
        r.nnm = 0;
        dt_agg_apply(&r, o, hv, 5, 2, sc);
        test_cond("the plain median of these is (1.0, 2.4), not the honest mean", o[0] == 1.0f && o[1] == 2.4f);
        /* nnm (F from the rule): median tolerates (5-1)/2 = 2, so 3 neighbours. */
        test_cond("parse nnm", dt_agg_parse_pre("nnm", &r) == DT_OK && r.nnm == -1);
        test_cond("nnm with median on 5 accepted", dt_agg_check(&r, 5) == DT_OK);
        test_cond("nnm:3 on 5 refused (n >= 2F+1)", dt_agg_parse_pre("nnm:3", &r) == DT_OK && dt_agg_check(&r, 5) != DT_OK);
        dt_agg mn;
        test_cond("nnm with mean refused", dt_agg_parse("mean", &mn) == DT_OK && dt_agg_parse_pre("nnm", &mn) == DT_OK &&
                                            dt_agg_check(&mn, 5) != DT_OK);
        test_cond("nnm junk refused", dt_agg_parse_pre("nnm:0", &r) != DT_OK && dt_agg_parse_pre("knn", &r) != DT_OK);
        /* krum and trimmed after mixing */
        test_cond("parse trimmed", dt_agg_parse("trimmed:1", &r) == DT_OK && dt_agg_parse_pre("nnm", &r) == DT_OK);
        dt_agg_apply(&r, o, hv, 5, 2, sc);
        test_close("nnm + trimmed:1 = the honest mean", o, hm, 2, 1e-6, 0);
        test_cond("parse krum", dt_agg_parse("krum:1", &r) == DT_OK && dt_agg_parse_pre("nnm", &r) == DT_OK);
        dt_agg_apply(&r, o, hv, 5, 2, sc);
        test_close("nnm + krum:1 = the honest mean", o, hm, 2, 1e-6, 0);
    }

    /* A bad worker sending NaN: the rules treat it as the extreme it is (it
     * would otherwise make every comparison false and land anywhere). */
    {
        float nv[5 * 3] = {1, 10, -1,  2, 11, -2,  3, 12, -3,  4, 13, -4,  NAN, NAN, NAN};
        float o[3], sc[4096];
        dt_agg r = {.kind = DT_AGG_MEDIAN};
        dt_agg_apply(&r, o, nv, 5, 3, sc);
        float e1[3] = {3, 12, -2}; /* NaN counts as +inf: the median of the four honest and +inf */
        test_close("median with a NaN worker", o, e1, 3, 0, 0);
        r = (dt_agg){.kind = DT_AGG_TRIMMED, .param = 1};
        dt_agg_apply(&r, o, nv + 3, 4, 3, sc); /* workers 2..5: 2, 3, 4, NaN */
        float e2[3] = {3.5f, 12.5f, -2.5f};
        test_close("trimmed:1 with a NaN worker", o, e2, 3, 1e-6, 0);
        r = (dt_agg){.kind = DT_AGG_KRUM, .param = 1};
        float kv[5 * 3] = {NAN, NAN, NAN,  1, 10, -1,  2, 11, -2,  3, 12, -3,  4, 13, -4};
        dt_agg_apply(&r, o, kv, 5, 3, sc);
        float e3[3] = {2.5f, 11.5f, -2.5f}; /* the four honest, though the NaN worker is first */
        test_close("multi-krum with a NaN worker first", o, e3, 3, 1e-6, 0);
        r = (dt_agg){.kind = DT_AGG_MEDIAN, .nnm = 1};
        dt_agg_apply(&r, o, kv, 5, 3, sc);
        test_close("nnm:1 + median with a NaN worker", o, e3, 3, 1e-6, 0);
    }

    /* Centred clipping: from the centre in out, each difference clipped to the
     * radius (given, or the median of the distances), then their mean added. */
    {
        float cv[4 * 2] = {3, 4,  0, 1,  0, -2,  300, 400}; /* distances from (0,0): 5, 1, 2, 500 */
        float o[2] = {0, 0}, sc[64];
        dt_agg r;
        test_cond("cclip parses", dt_agg_parse("cclip", &r) == DT_OK && r.kind == DT_AGG_CCLIP && r.tau == 0);
        dt_agg_apply(&r, o, cv, 4, 2, sc);
        /* median radius: sorted 1, 2, 5, 500 -> the lower middle, 2: (3,4) and (300,400) scale to norm 2 */
        float e[2] = {(float)((1.2 + 0 + 0 + 1.2) / 4), (float)((1.6 + 1 - 2 + 1.6) / 4)};
        test_close("cclip, median radius", o, e, 2, 1e-6f, 0);
        dt_agg_parse("cclip:1000", &r);
        float c0[2] = {1, 1};
        dt_agg_apply(&r, c0, cv, 4, 2, sc); /* nothing clipped: the mean */
        float mean_e[2] = {75.75f, 100.75f};
        test_close("cclip, radius above every distance = the mean", c0, mean_e, 2, 1e-5f, 0);
        float nanv[3 * 2] = {1, 1,  NAN, 0,  3, 3};
        float c1[2] = {0, 0};
        dt_agg_parse("cclip:100", &r);
        dt_agg_apply(&r, c1, nanv, 3, 2, sc);
        float e1[2] = {4.0f / 3, 4.0f / 3}; /* the NaN row moves nothing */
        test_close("cclip with a NaN worker", c1, e1, 2, 1e-6f, 0);
        test_cond("cclip:0 and cclip:x refused", dt_agg_parse("cclip:0", &r) != DT_OK && dt_agg_parse("cclip:x", &r) != DT_OK);
        test_cond("cclip with 2 workers refused", dt_agg_parse("cclip", &r) == DT_OK && dt_agg_check(&r, 2) != DT_OK);
    }

    /* ALIE: the bad rows become mean - z * population std of the honest rows. */
    {
        float av[4 * 2] = {1, -2,  100, 100,  3, -2,  5, -8}; /* row 1 is the attacker */
        bool bad[4] = {false, true, false, false};
        dt_agg_alie(av, 4, 2, bad, 0.5f);
        /* honest column 0: 1, 3, 5 -> mean 3, std sqrt(8/3); column 1: -2, -2, -8 -> mean -4, std sqrt(8) */
        float e[2] = {(float)(3 - 0.5 * sqrt(8.0 / 3)), (float)(-4 - 0.5 * sqrt(8.0))};
        test_close("alie: mean - z std of the honest rows", av + 2, e, 2, 1e-6f, 0);
        float keep[2] = {1, -2};
        test_close("alie: honest rows untouched", av, keep, 2, 0, 0);
        float z51 = dt_agg_alie_z(5, 1), z31 = dt_agg_alie_z(3, 1), z5 = 0.2533471f, z3 = 0.4307273f;
        test_close("alie z for n=5, f=1: Phi^-1(3/5)", &z51, &z5, 1, 1e-5f, 0);
        test_close("alie z for n=3, f=1: Phi^-1(2/3)", &z31, &z3, 1, 1e-5f, 0);
        test_cond("alie z for n=4, f=1 is 0 (s = 2 of 4)", dt_agg_alie_z(4, 1) == 0.0f);
        float z202 = dt_agg_alie_z(20, 2), e202 = 0.1256613f; /* s = 11 - 2 = 9 */
        test_close("alie z for n=20, f=2: Phi^-1(11/20)", &z202, &e202, 1, 1e-5f, 0);
    }

    /* Refusals. */
    test_cond("trimmed:2 with 4 workers refused", dt_agg_parse("trimmed:2", &a) == DT_OK && dt_agg_check(&a, 4) != DT_OK);
    test_cond("krum:1 with 4 workers refused", dt_agg_parse("krum:1", &a) == DT_OK && dt_agg_check(&a, 4) != DT_OK);
    test_cond("krum:1 with 5 workers accepted", dt_agg_check(&a, 5) == DT_OK);
    test_cond("median with 2 workers refused", dt_agg_parse("median", &a) == DT_OK && dt_agg_check(&a, 2) != DT_OK);
    test_cond("junk refused", dt_agg_parse("krum:x", &a) != DT_OK && dt_agg_parse("trimmed:0", &a) != DT_OK &&
                                  dt_agg_parse("max", &a) != DT_OK);
    return test_report();
}
