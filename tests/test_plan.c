/* The planner's closed-form parts (include/dtrain/plan.h) against values
 * computed by hand: the ZeRO paper's memory figure (7.5B parameters, 64-way
 * data parallelism, mixed-precision Adam: 120 / 31.4 / 16.6 / 1.9 GB per
 * device), the division by tp x pp, refusals; pipeline makespans and bubbles
 * for equal stages ((P-1)/(M+P-1)), with transfer time, and unequal stages
 * (traced by hand in the comments). */
#include "dtrain/plan.h"
#include "testhelp.h"

#include <math.h>

static void zero_figure(void) {
    /* Rajbhandari et al. 2020, figure 1: Psi = 7.5e9, Nd = 64, K = 12, fp16 params and grads */
    const double want[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
    const double paper[4] = {120, 31.4, 16.6, 1.9}; /* GB, as printed */
    for (int z = 0; z <= 3; z++) {
        dt_plan_mem_in in = {.params = 7.5e9, .dp = 64, .tp = 1, .pp = 1, .zero = z,
                             .param_bytes = 2, .grad_bytes = 2, .optim_bytes = 12};
        dt_plan_mem m;
        test_cond("ZeRO figure: computed", dt_plan_memory(&in, &m) == DT_OK);
        printf("ZeRO stage %d: %.4f GB per device (paper: %.1f)\n", z, m.total / 1e9, paper[z]);
        test_cond("ZeRO figure: exact", m.total == want[z]);
        test_cond("ZeRO figure: the paper's rounding", fabs(m.total / 1e9 - paper[z]) < 0.05);
    }
}

static void shares(void) {
    dt_plan_mem_in in = {.params = 1e6, .dp = 4, .tp = 2, .pp = 2, .zero = 1, .param_bytes = 4, .grad_bytes = 4,
                         .optim_bytes = 8, .act_bytes = 1000, .buffer_bytes = 24};
    dt_plan_mem m;
    test_cond("shares: computed", dt_plan_memory(&in, &m) == DT_OK);
    test_cond("tp x pp divide the model", m.params == 1e6 && m.grads == 1e6 && m.optim == 5e5);
    test_cond("activations and buffers added", m.total == 1e6 + 1e6 + 5e5 + 1000 + 24);
    in.dp = 0;
    test_cond("dp 0 refused", dt_plan_memory(&in, &m) == DT_ERR_INVALID);
    in.dp = 2;
    in.zero = 4;
    test_cond("ZeRO 4 refused", dt_plan_memory(&in, &m) == DT_ERR_INVALID);
    in.zero = 0;
    in.params = -1;
    test_cond("negative size refused", dt_plan_memory(&in, &m) == DT_ERR_INVALID);
}

static void pipelines(void) {
    double f[8], b[8], busy;
    for (int i = 0; i < 8; i++) f[i] = 1, b[i] = 2;
    for (int s = 0; s < 2; s++) {
        dt_plan_sched sc = s ? DT_PLAN_1F1B : DT_PLAN_GPIPE;
        for (int P = 1; P <= 8; P *= 2)
            for (int M = 1; M <= 16; M *= 2) {
                double span = dt_plan_pipeline(sc, P, M, f, b, 0, &busy);
                double bubble = 1 - busy / span, want = (double)(P - 1) / (M + P - 1);
                test_cond("equal stages: (M+P-1)(f+b)", span == (M + P - 1) * 3.0);
                test_cond("equal stages: bubble (P-1)/(M+P-1)", fabs(bubble - want) < 1e-12);
            }
    }
    /* P 2, M 2, f = b = 1, p2p 0.5: stage 1 runs F0 [1.5, 2.5], F1 or B0 ...; both end at 7 */
    double span_g = dt_plan_pipeline(DT_PLAN_GPIPE, 2, 2, f, f, 0.5, NULL);
    double span_1 = dt_plan_pipeline(DT_PLAN_1F1B, 2, 2, f, f, 0.5, NULL);
    printf("P 2, M 2, p2p 0.5: gpipe %.2f, 1f1b %.2f (hand: 7)\n", span_g, span_1);
    test_cond("transfer time: gpipe 7", span_g == 7);
    test_cond("transfer time: 1f1b 7", span_1 == 7);
    /* unequal: fwd {1, 2}, bwd {2, 4}, M 4: stage 1 busy 24 from t = 1 with no gap;
     * stage 0's last backward waits for stage 1's, then takes 2: 27 */
    double uf[2] = {1, 2}, ub[2] = {2, 4};
    double span_u = dt_plan_pipeline(DT_PLAN_1F1B, 2, 4, uf, ub, 0, &busy);
    printf("unequal stages: 1f1b %.2f (hand: 27), busiest stage %.2f\n", span_u, busy);
    test_cond("unequal stages: 27", span_u == 27 && busy == 24);
    test_cond("gpipe no shorter than 1f1b here", dt_plan_pipeline(DT_PLAN_GPIPE, 2, 4, uf, ub, 0, NULL) >= 27);
    test_cond("P 0 refused", dt_plan_pipeline(DT_PLAN_1F1B, 0, 4, uf, ub, 0, NULL) < 0);
    test_cond("M 0 refused", dt_plan_pipeline(DT_PLAN_1F1B, 2, 0, uf, ub, 0, NULL) < 0);
}

int main(void) {
    zero_figure();
    shares();
    pipelines();
    return test_report();
}
