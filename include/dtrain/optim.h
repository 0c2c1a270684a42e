/* dtrain optimizers: SGD (momentum, Nesterov, weight decay), AdamW, the
 * learning-rate schedule and global-norm clipping.
 *
 * Optimizers work on slices of the flat arenas: an optimizer owns state for
 * `n` floats (a whole model, or one rank's ZeRO shard); each update names the
 * slice [state_off, state_off + n) of its state that w/g correspond to. The
 * update semantics are PyTorch's (torch.optim.SGD, torch.optim.AdamW) so the
 * numbers match. */
#ifndef DTRAIN_OPTIM_H
#define DTRAIN_OPTIM_H

#include "dtrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_OPTIM_SGD, DT_OPTIM_ADAMW, DT_OPTIM_COUNT } dt_optim_kind;

typedef struct dt_optim_cfg {
    dt_optim_kind kind;
    float momentum;     /* SGD: 0 disables the buffer */
    bool nesterov;      /* SGD: needs momentum > 0 */
    float weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps; /* AdamW */
} dt_optim_cfg;

typedef struct dt_optim {
    dt_optim_cfg cfg;
    size_t n;           /* floats of state per moment */
    int64_t t;          /* steps taken (AdamW bias correction; SGD first step) */
    float *m;           /* SGD momentum buffer or Adam first moment, (n) or NULL */
    float *v;           /* Adam second moment, (n) or NULL */
} dt_optim;

/* Fills PyTorch's defaults for `kind` (SGD: momentum 0; AdamW: betas 0.9/0.999,
 * eps 1e-8, weight decay 0.01). */
void dt_optim_cfg_default(dt_optim_cfg *c, dt_optim_kind kind);
/* Validates cfg (ranges, nesterov needs momentum) with a clear message. */
dt_status dt_optim_cfg_check(const dt_optim_cfg *c);
dt_status dt_optim_create(dt_optim **out, const dt_optim_cfg *cfg, size_t n);
void dt_optim_destroy(dt_optim *o); /* NULL ok */
/* Bytes of optimizer state held (0, 4n or 8n). */
size_t dt_optim_state_bytes(const dt_optim *o);

/* Call once per optimizer step before the dt_optim_update calls of that step. */
void dt_optim_begin_step(dt_optim *o);
/* Updates w[0..n) in place from g[0..n) using state [state_off, state_off+n).
 * wd is the weight decay for this slice (callers pass 0 for tensors that are not
 * decayed, e.g. biases and LayerNorm; or cfg.weight_decay). */
void dt_optim_update(dt_optim *o, float *w, const float *g, size_t state_off, size_t n,
                     float lr, float wd);
/* dt_optim_update, and g[0..n) zeroed for the next backward to add into: the
 * same results, in chunks of DT_OPTIM_ZERO_CHUNK floats, each zeroed while its
 * gradient is still in the core's cache (one pass over memory less than an
 * update and a memset of the whole range). */
#define DT_OPTIM_ZERO_CHUNK 4096
void dt_optim_update_zero(dt_optim *o, float *w, float *g, size_t state_off, size_t n, float lr, float wd);

/* ---- worker momentum ---------------------------------------------------------
 * One worker's share of SGD with momentum, for robust aggregation (Karimireddy,
 * He & Jaggi 2021; El-Mhamdi et al. 2021): the worker keeps its own buffer and
 * turns its gradient g (in place) into the direction SGD would step along,
 *   d = g + wd*w;  buf = buf*momentum + d;  g = nesterov ? d + momentum*buf : buf
 * (buf starts at 0, which equals PyTorch's first-step copy), so that an
 * aggregate of the workers' directions is applied with plain SGD (momentum 0,
 * no weight decay). With mean aggregation this is SGD with momentum on the mean
 * gradient up to rounding (everything is linear). */
void dt_sgd_direction(const dt_optim_cfg *c, const float *w, float *g, float *buf, size_t n, float wd);

/* ---- learning-rate schedule: linear warm-up then cosine decay ------------- */
typedef struct dt_lr_sched {
    float lr;           /* peak */
    float min_lr;       /* floor at the end of the cosine */
    int64_t warmup;     /* steps of linear warm-up from lr/warmup to lr */
    int64_t total;      /* total steps; cosine runs from warmup to total */
    bool cosine;        /* false: constant lr after warm-up */
} dt_lr_sched;
/* lr for 0-based step `step`: (step+1)/warmup*lr during warm-up, then
 * min_lr + 0.5(1+cos(pi*p))(lr-min_lr), p = (step-warmup)/(total-warmup). */
float dt_lr_at(const dt_lr_sched *s, int64_t step);

/* ---- clipping --------------------------------------------------------------
 * Sum of squares (double accumulation) so shards can be summed across ranks. */
double dt_sumsq(const float *g, size_t n);
/* Scale factor for global-norm clipping: min(1, max_norm / (norm + 1e-6)) as in
 * torch.nn.utils.clip_grad_norm_; 1 when max_norm <= 0. */
float dt_clip_factor(double global_norm, float max_norm);
void dt_scale(float *g, size_t n, float s);

/* ---- dynamic loss scaling (--precision fp16) ---------------------------------
 * PyTorch's torch.cuda.amp.GradScaler: the loss, and so every gradient, is
 * multiplied by `scale` before backward, so that small gradients survive fp16's
 * 2^-24 floor; the gradient is divided by it again before clipping and the
 * optimizer. A step whose gradient holds an inf or NaN on any rank (an fp16
 * overflow) is dropped and the scale multiplied by 0.5; after `window` clean
 * steps in a row it is multiplied by 2 (PyTorch's backoff and growth factors;
 * scales stay powers of two when they start as one, so unscaling is exact).
 * window 0: a static scale, never changed. A dynamic scale does not go below 1
 * (DeepSpeed's min_loss_scale): an overflow at scale 1, or 64 in a row at a
 * static scale, is not fp16's range but a diverging run (DT_SCALER_STUCK). */
typedef struct dt_scaler {
    float scale;             /* what the loss is multiplied by this step */
    int64_t window;          /* clean steps before the scale doubles; 0: static */
    int64_t clean;           /* clean steps since the last change or overflow */
    int64_t in_a_row;        /* overflows in a row */
    int64_t skipped, grown;  /* steps dropped, times the scale doubled */
} dt_scaler;
typedef enum { DT_SCALER_APPLY, DT_SCALER_SKIP, DT_SCALER_STUCK } dt_scaler_verdict;
#define DT_SCALER_MAX_STATIC_SKIPS 64

/* scale > 0 and finite, window >= 0. */
void dt_scaler_init(dt_scaler *s, float scale, int64_t window);
/* After a step's gradient was checked (found_inf: anywhere, on any rank; every
 * rank passes the same): APPLY (unscale by 1/scale-before-the-call and step),
 * or SKIP / STUCK (drop the update); s->scale is then the next step's scale. */
dt_scaler_verdict dt_scaler_update(dt_scaler *s, bool found_inf);

#ifdef __cplusplus
}
#endif
#endif
