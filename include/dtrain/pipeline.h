/* dtrain pipeline parallelism: a stage is a contiguous range of blocks; micro-
 * batches flow through the stages with point-to-point sends of activations
 * (forward) and their gradients (backward) on the pipeline communicator.
 *
 * Schedules: GPipe (all forwards, then all backwards; activations of all M
 * micro-batches alive) and 1F1B (PipeDream-Flush: stage s runs P-s-1 warm-up
 * forwards, then alternates one forward and one backward, then drains; at most
 * P-s micro-batches alive). Both have the bubble (P-1)/(M+P-1). Interleaved 1F1B (Narayanan et al. 2021):
 * the blocks are cut into P*V chunks, stage s holds chunks s, s+P, ...; micro-
 * batches pass every stage V times, and the bubble shrinks to (P-1)/(VM+P-1)
 * of the step ((P-1)/(VM) of the work) for P*V times the point-to-point
 * messages. The operation orders are in pipe_schedule.c.
 *
 * Tied tensors (the GPT's LM head uses transformer.wte.weight, owned by the
 * embedding block on stage 0): the user stage sends its gradient to the owner
 * stage, which adds it before its data-parallel reduction and optimizer step,
 * then sends the updated values back. Only the owner holds optimizer state.
 *
 * Every rank allocates the whole parameter arena (so checkpoints and layouts
 * compose trivially) but computes, communicates and keeps optimizer state and
 * activations only for its stage. */
#ifndef DTRAIN_PIPELINE_H
#define DTRAIN_PIPELINE_H

#include "dtrain/comm.h"
#include "dtrain/model.h"
#include "dtrain/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_SCHED_GPIPE, DT_SCHED_1F1B, DT_SCHED_INTERLEAVED } dt_pipe_schedule;
#define DT_PIPE_MAX_VIRTUAL 16  /* chunks per stage */

typedef struct dt_pipe_cfg {
    int micro_batches;          /* M */
    dt_pipe_schedule schedule;
    int virtual_stages;         /* V: chunks per stage (interleaved; 0 or 1: one) */
    bool recompute;             /* keep only block inputs; recompute forward in backward */
    double stage_cost_us;       /* testing: each stage also sleeps this long per micro-batch forward, 2x backward */
} dt_pipe_cfg;

/* Stage boundaries: stage s runs blocks [first[s], first[s+1]). With virt = V
 * > 1 the blocks are cut into stages*V chunks: chunk c is [first[c],
 * first[c+1]) and belongs to stage c % stages. */
typedef struct dt_partition {
    int stages;
    int virt;                   /* chunks per stage; 0 or 1: one */
    int first[257];
} dt_partition;

static inline int dt_partition_virt(const dt_partition *p) { return p->virt > 1 ? p->virt : 1; }
static inline int dt_partition_chunks(const dt_partition *p) { return p->stages * dt_partition_virt(p); }
/* The stage that runs block b (-1: none). */
int dt_partition_stage(const dt_partition *p, int b);
/* Blocks of stage s (the sum over its chunks). */
int dt_partition_blocks(const dt_partition *p, int s);
/* Makes a partition of stages*V parts (uniform, best or parsed over P*V) the
 * interleaved partition of `stages` stages. */
void dt_partition_interleave(dt_partition *p, int stages);

/* One operation of a schedule: a forward or backward of micro-batch mb
 * through the stage's local chunk (global chunk stage + chunk*P). */
typedef struct dt_pipe_op {
    bool bwd;
    int chunk, mb;
} dt_pipe_op;
/* Operation k (0 <= k < 2*M*V) of stage s of P, V chunks each, M micro-batches
 * (pipe_schedule.c has the orders). Pure. */
void dt_pipe_sched_op(dt_pipe_schedule kind, int P, int V, int s, int M, int k, dt_pipe_op *op);
/* "gpipe", "1f1b" or "interleaved". */
const char *dt_pipe_schedule_name(dt_pipe_schedule kind);
/* The bubble's share of a step for equal stages: (P-1)/(VM+P-1). */
double dt_pipe_bubble(int P, int V, int M);
/* The micro-batches a step of `rows` rows runs with M configured: min(M,
 * rows) (a micro-batch has at least a row), for the interleaved schedule
 * rounded down to a multiple of P when at least P. */
int dt_pipe_sched_micro(dt_pipe_schedule kind, int P, int V, int M, int rows);
/* The most micro-batches alive at once in each of stage s's V chunks
 * (depth[V]), over every micro-batch count a step may run (shards of 1 to M
 * rows): the activation sets the stage keeps per chunk. O(M^2 V). */
void dt_pipe_sched_depths(dt_pipe_schedule kind, int P, int V, int s, int M, int *depth);
/* Forwards stage s runs before its first backward. */
int dt_pipe_sched_warmup(dt_pipe_schedule kind, int P, int V, int s, int M);

/* Minimum-bottleneck contiguous split of n costs into `stages` parts (a small
 * dynamic program); returns the bottleneck (largest stage sum). */
double dt_partition_best(const double *cost, int n, int stages, dt_partition *out);
/* Uniform: as equal block counts as possible. */
void dt_partition_uniform(int n, int stages, dt_partition *out);
/* "2,3,1": blocks per stage; must cover all n blocks with stages parts. */
dt_status dt_partition_parse(const char *s, int n, int stages, dt_partition *out);

typedef struct dt_pipe dt_pipe;

typedef struct dt_pipe_stats {
    double step_s;              /* time in the schedule */
    double busy_s;              /* time in forward/backward compute (incl. fixed cost) */
    double idle_s;              /* time waiting for activations/gradients */
    size_t act_floats;          /* floats of activation memory this stage holds */
    size_t buf_floats;          /* floats of its boundary gradient buffers (din per slot, dout) */
    int acts_alive_peak;        /* micro-batches whose activations were alive at once */
} dt_pipe_stats;

/* The stage of this rank is dt_comm_rank(pp). Borrowed: m, pp, dp. maxB: the
 * largest micro-batch. The partition's virt must equal cfg->virtual_stages
 * (interleaved) or be 1. */
dt_status dt_pipe_create(dt_pipe **out, dt_model *m, dt_comm *pp, const dt_partition *part,
                         const dt_pipe_cfg *cfg, int maxB);
void dt_pipe_destroy(dt_pipe *p); /* NULL ok */

/* One training step's forward and backward over the micro-batches of `batch`
 * (this dp rank's shard; rows split evenly into M micro-batches). Gradients are
 * handed to dp (its block_done for the last micro-batch, then end_backward).
 * Returns the stage's loss sum times loss_scale in *loss (0 off the last stage). */
dt_status dt_pipe_step(dt_pipe *p, dt_dp *dp, const dt_batch *batch, int in_dim_x, double *loss);
/* Tensors tied across stages (each synced after every update). */
int dt_pipe_n_tied(const dt_pipe *p);
/* After dt_dp_step: owners send updated tied tensors to the stages that use
 * them (under ZeRO-3 the owner gathers the tensor's bucket for the send;
 * the user keeps its copy resident: no bucket of its own holds it). */
dt_status dt_pipe_sync_tied(dt_pipe *p, dt_dp *dp);
/* Forward only (evaluation): returns the loss sum and, for classifiers, the
 * number of correct predictions (both 0 off the last stage). */
dt_status dt_pipe_eval(dt_pipe *p, const dt_batch *batch, double *loss_sum, double *correct);
void dt_pipe_take_stats(dt_pipe *p, dt_pipe_stats *s);

#ifdef __cplusplus
}
#endif
#endif
