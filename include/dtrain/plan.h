/* dtrain planning (issue 16, first parts): the closed-form pieces a planner
 * predicts a layout with. Pure functions of their arguments: no model, no
 * communicator, nothing measured here.
 *
 * - Memory per rank by kind for a dp x tp x pp layout and a ZeRO stage, as the
 *   ZeRO paper counts it (Rajbhandari et al. 2020, section 3 and figure 1):
 *   parameters, gradients and optimizer state of the rank's 1/(tp pp) of the
 *   model, the last three sharded over the dp group stage by stage.
 * - A pipeline schedule's makespan, simulated event by event from per-stage
 *   forward and backward times (GPipe and 1F1B as src/parallel/pipeline.c runs
 *   them), and its bubble. */
#ifndef DTRAIN_PLAN_H
#define DTRAIN_PLAN_H

#include "dtrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- memory ------------------------------------------------------------------- */

typedef struct dt_plan_mem_in {
    double params;       /* the model's parameters (Psi) */
    int dp, tp, pp;      /* degrees (>= 1) */
    int zero;            /* 0: none, 1: optimizer state, 2: + gradients, 3: + parameters */
    double param_bytes;  /* bytes per parameter as held: 4 (fp32, dtrain today), 2 (fp16/bf16) */
    double grad_bytes;   /* bytes per gradient: 4 or 2 */
    double optim_bytes;  /* bytes of optimizer state per parameter (the paper's K): AdamW in
                          * fp32 8 (m, v), mixed-precision Adam 12 (fp32 master, m, v), SGD
                          * with momentum 4 */
    double act_bytes;    /* activations this rank keeps (from the schedule), added as given */
    double buffer_bytes; /* communication buffers, added as given */
} dt_plan_mem_in;

typedef struct dt_plan_mem {
    double params, grads, optim, acts, buffers, total; /* bytes per rank */
} dt_plan_mem;

/* Memory per rank: with s = params / (tp pp) the rank's share of the model,
 *   zero 0: s.pb + s.gb + s.K; 1: s.pb + s.gb + s.K/dp; 2: s.pb + s.(gb + K)/dp;
 *   3: s.(pb + gb + K)/dp; plus activations and buffers. DT_ERR_INVALID for a
 * degree below 1, a stage outside 0..3 or a negative size. */
dt_status dt_plan_memory(const dt_plan_mem_in *in, dt_plan_mem *out);

/* ---- pipeline schedules ----------------------------------------------------- */

typedef enum { DT_PLAN_GPIPE, DT_PLAN_1F1B } dt_plan_sched;

/* The makespan of one step of P stages and M micro-batches: stage s takes fwd[s]
 * for a micro-batch's forward and bwd[s] for its backward (recomputation folded
 * in by the caller), and a boundary transfer takes p2p seconds. Order per stage:
 * GPipe, every forward then every backward; 1F1B, P-s-1 warm-up forwards, then
 * one forward and one backward alternately, then the remaining backwards. Each
 * operation starts when its stage is free and its input has arrived. *busy, when
 * not NULL, receives the largest stage busy time; the bubble fraction is
 * 1 - busy / makespan ((P-1)/(M+P-1) for equal stages and p2p 0). Returns a
 * negative value for P < 1, M < 1 or P*M above 1 << 20. */
double dt_plan_pipeline(dt_plan_sched sched, int P, int M, const double *fwd, const double *bwd, double p2p,
                        double *busy);

#ifdef __cplusplus
}
#endif
#endif
