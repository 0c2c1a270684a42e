/* The FLOP/s a process reaches on a model's training step (plan.h): one
 * forward and backward of a synthetic batch (zero inputs, class 0 targets:
 * the arithmetic is the same for any values), one warm-up, then the median of
 * three timed steps against the model's GEMM FLOPs per sample. Cost: 4 steps. */
#include "dtrain/plan.h"

#include <string.h>

dt_status dt_plan_calibrate_flops(const dt_model_cfg *mc, int B, double *flops) {
    dt_model *m = NULL;
    dt_acts *a = NULL;
    float *x = NULL, *y = NULL;
    int32_t *tok = NULL;
    dt_status st = dt_model_create(&m, mc);
    if (st) return st;
    dt_model_init(m, 1);
    size_t per = m->input == DT_INPUT_TOKENS ? (size_t)m->seq_len : (size_t)m->in_floats;
    x = dt_calloc((size_t)B * per + 1, sizeof(float));
    y = dt_calloc((size_t)B * (size_t)(m->y_dim + 1), sizeof(float));
    tok = dt_calloc((size_t)B * per + 1, sizeof(int32_t));
    if (!x || !y || !tok) st = dt_errorf(DT_ERR_NOMEM, "out of memory calibrating");
    if (!st) st = dt_acts_create(&a, m, 0, m->n_blocks - 1, B);
    double t[3] = {0, 0, 0};
    dt_batch b = {.B = B, .x = x, .tokens = tok, .targets = tok, .y = y,
                  .loss_scale = 1.0f / ((float)B * (float)m->loss_terms)};
    for (int r = 0; r < 4 && !st; r++) {
        double t0 = dt_now();
        dt_model_zero_grad(m);
        dt_model_forward(m, a, &b, NULL);
        dt_model_backward(m, a, &b, NULL, NULL, NULL, NULL);
        if (r > 0) t[r - 1] = dt_now() - t0;
    }
    if (!st) {
        double med = t[0] + t[1] + t[2] - (t[0] > t[1] ? (t[0] > t[2] ? t[0] : t[2]) : (t[1] > t[2] ? t[1] : t[2])) -
                     (t[0] < t[1] ? (t[0] < t[2] ? t[0] : t[2]) : (t[1] < t[2] ? t[1] : t[2]));
        *flops = med > 0 ? (double)m->flops_per_sample * B / med : 0;
        if (!(*flops > 0)) st = dt_errorf(DT_ERR_INVALID, "calibration measured no time");
    }
    dt_acts_destroy(a);
    dt_model_destroy(m);
    dt_free(x);
    dt_free(y);
    dt_free(tok);
    return st;
}
