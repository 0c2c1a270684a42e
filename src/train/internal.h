/* Private to src/train: what the synchronous loop (train.c), the
 * parameter-server driver (train_ps.c) and the Hogwild! driver
 * (train_hogwild.c) share. */
#ifndef DTRAIN_TRAIN_INTERNAL_H
#define DTRAIN_TRAIN_INTERNAL_H

#include "dtrain/aggregate.h"
#include "dtrain/ckpt.h"
#include "dtrain/data.h"
#include "dtrain/parallel.h"
#include "dtrain/pipeline.h"
#include "dtrain/train.h"

/* The run's data, whichever kind. */
typedef struct run_data {
    bool lm;
    dt_imageset train, test;
    dt_corpus corpus;
    int T;
    int64_t n_train;            /* samples (images) or windows */
} run_data;

/* Buffers for one batch of either kind. */
typedef struct batch_buf {
    int64_t *idx;
    float *x;
    int32_t *tokens, *targets;
} batch_buf;

typedef struct agg_state {
    dt_agg a;
    float *vecs;      /* (D, P) */
    float *scratch;
    float *wm;        /* worker momentum: this worker's buffer (P), or NULL */
    bool *alie_bad;   /* --inject byzantine:mode=alie: the attacking rows (D), or NULL */
    float alie_z;
    float *centre;    /* --aggregate cclip: the last aggregate (P), or NULL */
} agg_state;

dt_status tr_batch_buf_init(batch_buf *b, const dt_model *m, int B, int T);
void tr_batch_buf_free(batch_buf *b);
dt_status tr_evaluate(const dt_model *m, dt_acts *a, const run_data *d, batch_buf *bb, int B,
                      int eval_max, dt_comm *comm, dt_pipe *pipe, int share, int shares,
                      bool counts, float *acc, float *loss);
dt_status tr_make_dir(const char *dir);
bool tr_first_attempt(void);
void tr_inject_at_step(const dt_train_cfg *c, int rank, int64_t step);
void tr_inject_slow(const dt_train_cfg *c, int rank, double compute_s);
void tr_keep_metrics_upto(const char *path, int64_t step);
void tr_watchdog_tick(int64_t step);
bool tr_byzantine_corrupt(const dt_train_cfg *c, dt_model *m, int r, int64_t step);
dt_status tr_alie_mask(const dt_train_cfg *c, int n, bool **bad, float *z);
void tr_alie_log(float z); /* the warning rank 0 prints when an ALIE attack is on */
dt_status tr_robust_aggregate(const dt_train_cfg *c, dt_model *m, dt_comm *dpc, agg_state *ag, int64_t step);
/* Worker momentum: turns this worker's gradient m->g[lo, hi) into its SGD
 * direction with its buffer buf (P, arena-indexed), per parameter weight decay. */
void tr_worker_direction(const dt_train_cfg *c, dt_model *m, float *buf, size_t lo, size_t hi);
/* The optimizer that applies the update: c->optim, or with worker momentum plain
 * SGD (momentum, Nesterov and weight decay are the workers'). */
dt_optim_cfg tr_applied_optim(const dt_train_cfg *c);
/* Resume of the worker momenta (momentum.worker.<i>) into wm, or, when this
 * rank keeps the momentum in its optimizer (wm NULL), their mean into M with
 * *have_m set (only when the checkpoint has no optimizer momentum itself). */
dt_status tr_resume_worker_momentum(const char *path, const dt_ckpt_state *s, float *wm, float *M, bool *have_m,
                                    int replica, int D, size_t n, bool lead);

dt_status tr_train_ps(const dt_train_cfg *c, const run_data *d, dt_model *m, dt_comm *world,
                      dt_train_result *res);
dt_status tr_train_hogwild(const dt_train_cfg *c, const run_data *d, dt_model *m, dt_train_result *res);

#endif
