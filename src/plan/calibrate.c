/* Measured on this machine for the planner (plan.h):
 * - the FLOP/s a process reaches on a model's training step: one forward and
 *   backward of a synthetic batch (zero inputs, class 0 targets: the
 *   arithmetic is the same for any values), one warm-up, then the median of
 *   three timed steps against the model's GEMM FLOPs per sample. Cost: 4 steps.
 * - a rank's base: what its resident set holds besides dtrain's own counts
 *   (the libraries' pages, the allocator's and BLAS's buffers, the training
 *   data and the loader's batches, MPI's share): this process's resident set
 *   with the data open and one step of the model run, less the model's arenas
 *   and activations (dt_alloc_floats zeroes them: all resident); and apart,
 *   what a singleton MPI_Init adds, when asked. Measured, not modelled: a
 *   rank's base is the same libraries and data, so the figure carries over to
 *   the ranks of a run on this machine with this data. Cost: one step, one
 *   data load (and MPI's start, about half a second). */
#include "dtrain/plan.h"

#include "dtrain/loader.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* This process's resident set now, in bytes. */
static double rss_now(void) {
    long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
    if (f) fclose(f);
    return (double)res * (double)sysconf(_SC_PAGESIZE);
}

/* What MPI_Init (a singleton) adds to this process's resident set. */
static dt_status mpi_bytes(double *bytes) {
    double before = rss_now();
    dt_comm *w = NULL;
    dt_status st = dt_comm_init(true, &w);
    if (st) return st;
    *bytes = rss_now() - before;
    dt_comm_destroy(w);
    dt_comm_finalize();
    return DT_OK;
}

/* One step of the model at batch B on zeroed inputs; *own: the bytes of the
 * arenas, activations and batch it allocated (all resident). */
static dt_status one_step(dt_model *m, int B, dt_acts **a, float **buf, double *own) {
    size_t per = m->input == DT_INPUT_TOKENS ? (size_t)m->seq_len : (size_t)m->in_floats;
    size_t xf = (size_t)B * per + 1, yf = (size_t)B * (size_t)(m->y_dim + 1);
    dt_status st = dt_acts_create(a, m, 0, m->n_blocks - 1, B);
    if (!st && !(*buf = dt_alloc_floats(2 * xf + yf))) st = dt_errorf(DT_ERR_NOMEM, "out of memory calibrating");
    if (st) return st;
    int32_t *tok = (int32_t *)(*buf + xf); /* zeros: token 0, class 0 */
    dt_batch b = {.B = B, .x = *buf, .tokens = tok, .targets = tok, .y = *buf + 2 * xf,
                  .loss_scale = 1.0f / ((float)B * (float)m->loss_terms)};
    dt_model_forward(m, *a, &b, NULL);
    dt_model_backward(m, *a, &b, NULL, NULL, NULL, NULL);
    *own = 4.0 * (2.0 * (double)m->n + (double)(*a)->n_floats + (double)(2 * xf + yf));
    return DT_OK;
}

dt_status dt_plan_calibrate_base(const dt_model_cfg *mc, const char *data, int B, bool mpi, double *base,
                                 double *mpi_share) {
    if (B < 1) return dt_errorf(DT_ERR_INVALID, "calibrating the base: batch %d is below 1", B);
    dt_model *m = NULL;
    dt_acts *a = NULL;
    float *buf = NULL;
    dt_dataset d;
    dt_loader ld;
    memset(&d, 0, sizeof d);
    memset(&ld, 0, sizeof ld);
    double own = 0;
    *mpi_share = 0;
    dt_status st = dt_model_create(&m, mc);
    if (st) return st;
    dt_model_init(m, 1);
    bool lm = m->input == DT_INPUT_TOKENS;
    dt_data_opts o = {.path = data, .lm = lm, .T = m->seq_len, .val_frac = 0.1, .need_train = true};
    /* the run's loader: batches of the larger of B and the evaluation's, prefetched */
    int cap = lm ? (B > 16 ? B : 16) : (B > 256 ? B : 256);
    if (!(st = dt_dataset_open(&d, &o)) && !(st = dt_loader_init(&ld, &d, cap, 1, 0, 1)))
        st = dt_loader_set_prefetch(&ld, true);
    if (!st) st = one_step(m, B, &a, &buf, &own);
    double rss = st ? 0 : rss_now();
    if (!st) *base = rss > own ? rss - own : 0;
    if (!st && mpi) st = mpi_bytes(mpi_share);
    dt_loader_free(&ld);
    dt_dataset_free(&d);
    dt_free(buf);
    dt_acts_destroy(a);
    dt_model_destroy(m);
    return st;
}
