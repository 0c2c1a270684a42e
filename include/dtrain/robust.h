/* dtrain robust reduction: every worker's vector gathered, attacks simulated,
 * a Byzantine-robust rule (aggregate.h) applied. One module for data
 * parallelism (dt_robust_reduce over a communicator) and the parameter server
 * (which applies the rule to its key range and calls the same attack hooks).
 *
 * Worker momentum (Karimireddy, He & Jaggi 2021): each worker first turns its
 * gradient into its own SGD momentum direction (clipped first, with a clip, by
 * its own norm) and the aggregate of the directions is applied as plain SGD.
 * A direction averages ~1/(1-momentum) steps of gradients, so the honest
 * vectors lie much closer together than raw gradients and an attacker has less
 * room to hide in. */
#ifndef DTRAIN_ROBUST_H
#define DTRAIN_ROBUST_H

#include "dtrain/aggregate.h"
#include "dtrain/ckpt.h"
#include "dtrain/comm.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a Byzantine worker sends instead of its vector (tests and benchmarks):
 * signflip: the vector negated and amplified 10x (pulling the model uphill);
 * random: noise 100x the honest vector's rms, fresh every step; scale:X: the
 * vector times X; alie: "a little is enough", written where every vector meets
 * (dt_agg_alie), not by the worker itself. */
typedef enum { DT_BYZ_SIGNFLIP, DT_BYZ_RANDOM, DT_BYZ_SCALE, DT_BYZ_ALIE } dt_byz_mode;

/* Replaces g (n floats) by the attack `mode` at step (random: stream from seed
 * and step, so every layout draws the same). ALIE leaves g alone. */
void dt_byz_corrupt(dt_byz_mode mode, float factor, uint64_t seed, float *g, size_t n, int64_t step);

/* Hooks: corrupt this worker's own vector before it is sent; tamper with the
 * gathered vectors (n x len) before the rule runs. */
typedef void (*dt_robust_corrupt_fn)(void *ctx, float *g, size_t n, int64_t step);
typedef void (*dt_robust_tamper_fn)(void *ctx, float *vecs, int n, size_t len);

/* Worker momentum: turns m->g[lo, hi) into this worker's SGD direction with its
 * buffer buf (m->n floats, arena-indexed), per-parameter weight decay. */
void dt_worker_direction(const dt_optim_cfg *o, dt_model *m, float *buf, size_t lo, size_t hi);

typedef struct dt_robust_cfg {
    dt_agg agg;              /* the rule; DT_AGG_MEAN when only attacks are simulated */
    const dt_optim_cfg *wm;  /* worker momentum with this SGD (momentum, decay), or NULL */
    float clip;              /* worker momentum: each worker clips its gradient first (0: off) */
    dt_algo algo;            /* the all-gather's algorithm */
    dt_robust_corrupt_fn corrupt;
    void *corrupt_ctx;
    dt_robust_tamper_fn tamper;
    void *tamper_ctx;
} dt_robust_cfg;

typedef struct dt_robust dt_robust;

/* A robust reducer for the n workers of dpc over m's arena. Checks the rule
 * against n (dt_agg_check). Allocates n x m->n floats for the gathered vectors. */
dt_status dt_robust_create(dt_robust **out, const dt_robust_cfg *cfg, const dt_model *m, dt_comm *dpc);
void dt_robust_destroy(dt_robust *r); /* NULL ok */
/* m->g (this worker's mean gradient) -> the robust aggregate of every
 * worker's, the same bits on every worker. Collective over dpc. */
dt_status dt_robust_reduce(dt_robust *r, dt_model *m, int64_t step);
/* This worker's momentum buffer (m->n floats), or NULL without worker momentum. */
float *dt_robust_momentum(dt_robust *r);
/* Optimizer bytes the reducer adds per rank (the worker momentum). */
size_t dt_robust_state_bytes(const dt_robust *r);

/* The reducer's state as a checkpoint part: momentum.worker.<replica> (every
 * replica's buffer) and aggregate.centre (centred clipping's last aggregate,
 * replica 0). On load, `M` is the checkpoint's logical optimizer momentum and
 * *have_m whether it had one: when this run keeps no worker momentum but the
 * checkpoint does, M becomes the workers' mean (and *have_m true); the other
 * way round every worker starts from M. */
typedef struct dt_robust_load {
    float *M;
    bool *have_m;
} dt_robust_load;
void dt_robust_part(dt_robust *r, dt_robust_load *ld, dt_ckpt_part *part);
/* The same loading rule where no reducer exists (a parameter server's workers
 * and servers): into wm (NULL: this rank keeps the momentum in its optimizer,
 * M and *have_m as above). */
dt_status dt_resume_worker_momentum(const char *path, const dt_ckpt_state *s, float *wm, float *M, bool *have_m,
                                    const dt_ckpt_place *at, size_t n);

/* ALIE's rows: which of n workers attack (attackers[0..k)), as a mask (*bad,
 * allocated, NULL when k == 0) and the shift z (given, or NaN for the paper's). */
dt_status dt_alie_mask(const int *attackers, int k, float z_given, int n, bool **bad, float *z);

#ifdef __cplusplus
}
#endif
#endif
