/* Evaluation: test accuracy and loss (classifiers) or validation loss (the
 * language model). Each rank evaluates its contiguous share of the items;
 * sums are combined across ranks. Cost: one forward pass per item. */
#include "run.h"

#include <math.h>

dt_status tr_evaluate(const dt_model *m, dt_acts *a, dt_loader *ld, int B, int eval_max, dt_comm *comm,
                      dt_pipe *pipe, int share, int shares, bool counts, float *acc, float *loss) {
    double sums[3] = {0, 0, 0}; /* loss sum, correct, loss terms (or samples) */
    bool lm = ld->d->lm, classes = !lm && m->loss_kind == DT_LOSS_XENT;
    int64_t total = dt_dataset_eval_size(ld->d, eval_max);
    int64_t lo = total * share / shares, hi = total * (share + 1) / shares;
    /* ZeRO-3 gathers as forward goes: a rank with fewer batches than another
     * replays the passes it lacks (dt_model_params_skip). */
    int64_t most = 0;
    for (int s = 0; s < shares; s++) {
        int64_t n = total * (s + 1) / shares - total * s / shares;
        most = (n + B - 1) / B > most ? (n + B - 1) / B : most;
    }
    for (int64_t k = (hi - lo + B - 1) / B; k < most; k++) dt_model_params_skip(m, true);
    for (int64_t first = lo; first < hi; first += B) {
        int b = (int)((hi - first) < B ? (hi - first) : B);
        dt_loader_eval(ld, first, b);
        dt_batch batch = {.B = b, .x = ld->x, .tokens = ld->tokens, .targets = ld->targets, .loss_scale = 1.0f,
                          .y = ld->y, .eval = true};
        if (pipe) {
            double l, cc;
            dt_status st = dt_pipe_eval(pipe, &batch, &l, &cc);
            if (st) return st;
            sums[0] += l;
            sums[1] += cc;
        } else {
            sums[0] += dt_model_forward(m, a, &batch, NULL);
            if (classes) sums[1] += dt_model_count_correct(m, a, &batch);
        }
        if (counts) sums[2] += (double)b * (lm ? ld->d->T : 1);
    }
    if (!counts) sums[0] = sums[1] = 0; /* another rank reports these samples */
    dt_status st = dt_allreduce_f64(comm, sums, 3);
    if (st) return st;
    *acc = !classes ? -1.0f : (sums[2] > 0 ? (float)(sums[1] / sums[2]) : NAN);
    *loss = sums[2] > 0 ? (float)(sums[0] / sums[2]) : NAN;
    return DT_OK;
}

dt_status tr_evaluate_alone(const dt_model *m, dt_loader *ld, int eval_max, float *acc, float *loss) {
    int B = ld->d->lm ? 16 : 256;
    dt_acts *a = NULL;
    dt_comm *self = NULL;
    dt_status st = dt_acts_create(&a, m, 0, m->n_blocks - 1, B);
    if (!st) st = dt_comm_self(&self);
    if (!st) st = tr_evaluate(m, a, ld, B, eval_max, self, NULL, 0, 1, true, acc, loss);
    dt_comm_destroy(self);
    dt_acts_destroy(a);
    return st;
}
