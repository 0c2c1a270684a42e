/* dtrain planning (issue 16, first parts): the closed-form pieces a planner
 * predicts a layout with. Pure functions of their arguments: no model, no
 * communicator, nothing measured here.
 *
 * - Memory per rank by kind for a dp x tp x pp layout and a ZeRO stage, as the
 *   ZeRO paper counts it (Rajbhandari et al. 2020, section 3 and figure 1):
 *   parameters, gradients and optimizer state of the rank's 1/(tp pp) of the
 *   model, the last three sharded over the dp group stage by stage.
 * - A pipeline schedule's makespan, simulated event by event from per-chunk
 *   forward and backward times (GPipe, 1F1B and interleaved 1F1B in the
 *   operation order src/parallel/pipeline.c runs: dt_pipe_sched_op), and its
 *   bubble. */
#ifndef DTRAIN_PLAN_H
#define DTRAIN_PLAN_H

#include "dtrain/comm.h"
#include "dtrain/compress.h"
#include "dtrain/core.h"
#include "dtrain/model.h"

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
    double params, grads, optim, acts, buffers; /* bytes per rank */
    /* dtrain's own (dt_plan_predict; 0 from dt_plan_memory): ZeRO-2's transient
     * gradient arena at its peak, the unsharded model a tp/pp rank keeps, and
     * the cluster's base (runtime and data, MPI's share in a world of more than
     * one rank). The others are dtrain's allocations, own bytes their sum.
     * setup: ZeRO-2's own bytes at its setup, while the model's gradient arena
     * is still allocated (0 otherwise). total = base + the larger of the own
     * bytes and setup: the predicted peak resident set. */
    double staging, copy, base, setup;
    double total;
} dt_plan_mem;

/* Memory per rank: with s = params / (tp pp) the rank's share of the model,
 *   zero 0: s.pb + s.gb + s.K; 1: s.pb + s.gb + s.K/dp; 2: s.pb + s.(gb + K)/dp;
 *   3: s.(pb + gb + K)/dp; plus activations and buffers. DT_ERR_INVALID for a
 * degree below 1, a stage outside 0..3 or a negative size. */
dt_status dt_plan_memory(const dt_plan_mem_in *in, dt_plan_mem *out);

/* ---- pipeline schedules ----------------------------------------------------- */

typedef enum { DT_PLAN_GPIPE, DT_PLAN_1F1B, DT_PLAN_INTERLEAVED } dt_plan_sched;

/* The makespan of one step of P stages of V chunks each and M micro-batches,
 * in the runtime's operation order (dt_pipe_sched_op: GPipe, every forward
 * then every backward; 1F1B, P-s-1 warm-up forwards, then one forward and one
 * backward alternately, then the remaining backwards; interleaved, Megatron's
 * groups of P micro-batches through each chunk in turn). The model is cut into
 * C = P*V chunks, chunk c on stage c % P (V = 1: chunk s is stage s; V > 1 is
 * the interleaved schedule's, as the runtime runs it). Chunk c takes fwd[c]
 * for a micro-batch's forward and bwd[c] for its backward (recomputation
 * folded in by the caller), and a transfer between chunks c-1 and c takes
 * p2p[c] seconds (p2p holds C entries, p2p[0] unused; either way; NULL:
 * transfers are free). Each operation starts when its stage is free and its
 * input has arrived. *busy, when not NULL, receives the largest stage busy
 * time (M times the sum of its chunks' fwd + bwd); the bubble fraction is
 * 1 - busy / makespan: (P-1)/(VM+P-1) for equal chunks and free transfers
 * ((P-1)/(M+P-1) with V = 1). Returns a negative value for P, V or M below 1,
 * P*V*M above 1 << 20, or an order that deadlocks (an operation waiting on
 * one its own stage runs later: 1F1B's order with V > 1). */
double dt_plan_pipeline(dt_plan_sched sched, int P, int V, int M, const double *fwd, const double *bwd,
                        const double *p2p, double *busy);

/* ---- clusters and layouts -------------------------------------------------------
 * A cluster description (JSON, docs/PLANNING.md): hosts x ranks per host, what a
 * rank computes (GEMM FLOP/s), its memory, each link level's latency and
 * bandwidth, optional per-host speed factors. */
#define DT_PLAN_MAX_HOSTS 4096
#define DT_PLAN_MAX_CURVE 16 /* sizes a link's measured rate may list */
#define DT_PLAN_FIT_MAX 6    /* batch sizes a profile times (B, B/2, ... B/32) */
typedef struct dt_plan_cluster {
    int hosts, per_host;
    double flops;              /* FLOP/s a rank reaches on the model's step while all the
                                * host's ranks compute (dt_plan_profile) */
    double memory;             /* bytes per rank */
    double base;               /* bytes a rank holds besides what dtrain allocates for the
                                * model: the runtime (libraries, BLAS buffers) and the training
                                * data ("base_mb", dt_plan_calibrate_base; 0 when absent) */
    double mpi_base;           /* what MPI adds to each rank of a world of more than one
                                * ("mpi_mb"; 0 when absent) */
    dt_cost_model links;       /* alpha (s), beta (s/byte) inside a host and across */
    double optim_s_per_param;  /* the optimizer's update, seconds per parameter */
    int cores;                 /* cores per host: with no core to spare (ranks sharing the
                                * cores >= cores), no reduction overlaps compute */
    int shared_cores;          /* > 0: every host's ranks share these cores (hosts emulated on
                                * one machine, scripts/cluster.sh); 0: each host its own */
    double micro_overhead_s;   /* a micro-batch's fixed forward + backward time, whole model */
    /* The profile's measured forward + backward of the whole model at
     * step_rows[k] rows (ascending), step_time[k] seconds, for the model of
     * step_flops FLOPs per sample ("step"; step_n 0: none): a micro-batch is
     * priced at its size from these (dt_plan_micro_time). */
    int step_n;
    double step_flops, step_rows[DT_PLAN_FIT_MAX], step_time[DT_PLAN_FIT_MAX];
    double codec_enc_s_per_float[DT_COMP_COUNT]; /* a codec's encode (error feedback too) */
    double codec_dec_s_per_float[DT_COMP_COUNT]; /* one decode-and-sum, seconds per float */
    double staging_s_per_byte; /* a step's extra time per byte of pages handed back and written
                                * again (ZeRO-2's gradient staging, ZeRO-3's gathers; the
                                * profile's; "staging_ns_per_byte", 0 when absent) */
    double speed[DT_PLAN_MAX_HOSTS]; /* per-host factors on flops (1: as given) */
    /* The cross link's rate as measured by message size ('dtrain bench allreduce
     * --fit'): a message of cross_msg[k] bytes (ascending) crosses at
     * cross_beta[k] s/byte; between sizes interpolated in log size, outside
     * them the nearest. cross_n 0: links.cross's beta at every size. */
    int cross_n;
    double cross_msg[DT_PLAN_MAX_CURVE], cross_beta[DT_PLAN_MAX_CURVE];
    /* Bytes a cross link lets through at the local link's rate after it has
     * idled (a shaper's token bucket, refilled at the link's rate: the
     * emulated cluster's tbf holds 2 ms of its rate); what a pipeline's
     * boundary message spends of it comes back while its sender computes.
     * ("cross"."burst_kb"; the fit line's "burst_bytes"; 0: none.) */
    double cross_burst;
} dt_plan_cluster;

/* The ranks that compete for one set of cores (a host's, or every host's when
 * shared_cores says they share the machine's); *cores, those cores. */
int dt_plan_ranks_sharing(const dt_plan_cluster *c, int *cores);
/* Reads a cluster description; one line naming the file and the field on error. */
dt_status dt_plan_cluster_read(const char *path, dt_plan_cluster *out);
/* The links of 'dtrain bench allreduce --fit''s last line (a JSON object:
 * local and cross alpha and beta, gamma, the cross link's "measured_beta"
 * sizes and "burst_bytes") into c's links, curve (none when the line has none)
 * and burst (0 when it has none); the rest of c
 * as it was. A cross beta of 0 (one host measured) leaves cross as local.
 * DT_ERR_IO, DT_ERR_FORMAT (not such a line) or DT_ERR_INVALID (a bad curve),
 * with the path; on error c's links are as they were and it has no curve. */
dt_status dt_plan_fit_read(const char *path, dt_plan_cluster *c);
/* The whole unsharded model's FLOPs per sample (its blocks' sum; mc probed
 * at tp 1 without allocating it), 0 when it cannot be probed. */
double dt_plan_model_flops(const dt_model_cfg *mc);
/* Whether c's measured step sizes are of a model of `total` FLOPs per sample
 * (within 0.5%): only then do they price its micro-batches. */
bool dt_plan_step_sizes_apply(const dt_plan_cluster *c, double total);
/* The forward + backward of a model of `total` FLOPs per sample at `rows`
 * rows on one of c's ranks (speed factor 1): interpolated linearly between
 * the profile's measured sizes when they apply (dt_plan_step_sizes_apply),
 * beyond them extended along the per-sample rate
 * (never below the fixed part); otherwise micro_overhead_s + rows total /
 * flops. */
double dt_plan_micro_time(const dt_plan_cluster *c, double total, double rows);
/* The cross link's beta for a message of `bytes` (the curve, or links.cross.beta). */
double dt_plan_cross_beta(const dt_plan_cluster *c, double bytes);
/* Writes c as a description (the format dt_plan_cluster_read reads). */
dt_status dt_plan_cluster_write(const char *path, const dt_plan_cluster *c);
/* FLOP/s one process reaches on the model's training step: a step of batch B
 * on a synthetic batch, timed (the median of 3 after one warm-up) against the
 * model's GEMM FLOPs (calibrate.c). */
dt_status dt_plan_calibrate_flops(const dt_model_cfg *mc, int B, double *flops);

/* What a rank holds besides dtrain's own allocations (calibrate.c): into
 * *base this process's resident set (/proc/self/statm) once it has opened the
 * model's training data (`data`, NULL: the model's default, as `dtrain train`
 * reads it) with the run's loader and run one forward and backward of the
 * model at batch B (BLAS touches its buffers), less the model's arenas,
 * activations and batch; into *mpi what MPI_Init then adds to it (a
 * singleton), or 0 when mpi is false. Call it with mpi only in a process that
 * uses MPI for nothing else and ends soon: MPI cannot start again once
 * finalized, and a singleton leaves its environment behind for any mpirun the
 * process would start. The libraries' pages this process touched count, as
 * they do in a rank; BLAS's buffers are those of this process's BLAS threads.
 * DT_ERR_INVALID for B < 1; the data's, the model's and MPI's errors as they
 * report them. */
dt_status dt_plan_calibrate_base(const dt_model_cfg *mc, const char *data, int B, bool mpi, double *base, double *mpi_share);

/* A model's training step on this machine (profile.c): forward + backward
 * timed at batch B, B/2, ... B/32, fitted (dt_plan_fit_affine) as t(b) = micro_overhead_s + b
 * flops_per_sample / flops; the optimizer's update per parameter (AdamW, or
 * SGD with momentum); each codec's encode and decode per value (fp16, bf16,
 * int8, topk:0.01, sign). */
typedef struct dt_plan_profile_out {
    double flops;             /* FLOP/s on the per-sample part */
    double micro_overhead_s;  /* t0: a micro-batch's fixed time */
    double step_s;            /* the median step at batch B */
    int points;               /* sizes timed: rows[k] (B, B/2, ...), each's median time[k] */
    double rows[DT_PLAN_FIT_MAX], time[DT_PLAN_FIT_MAX];
    double flops_per_sample;  /* the profiled model's */
    double optim_s_per_param;
    double codec_enc_s_per_float[DT_COMP_COUNT], codec_dec_s_per_float[DT_COMP_COUNT];
    double staging_s_per_byte; /* a step's extra time per gradient byte whose pages were released */
    int procs;                /* profiles that ran at once (the caller sets it) */
} dt_plan_profile_out;

/* The line t = t0 + c x through n points (1 <= n <= DT_PLAN_FIT_MAX, x[0] > 0),
 * robust to one bad point: c the median of the pairwise slopes, t0 the median
 * of t - c x (Theil-Sen). One point, or all x equal: t0 = 0, c = t[0] / x[0].
 * DT_ERR_INVALID for n out of range or x[0] <= 0. */
dt_status dt_plan_fit_affine(const double *x, const double *t, int n, double *t0, double *c);

/* Profiles mc at batch B (see above). sync (NULL: none) is called with
 * sync_ctx after every timed operation, the same number of times in every
 * profile: a barrier there makes several processes' profiles run in lock-step,
 * as the host's ranks would. DT_ERR_INVALID for B < 1; a model's own errors
 * as dt_model_create reports them (before the first sync). */
dt_status dt_plan_profile(const dt_model_cfg *mc, int B, bool adam, void (*sync)(void *), void *sync_ctx,
                          dt_plan_profile_out *out);

typedef struct dt_plan_layout {
    int dp, tp, pp, zero, micro;   /* micro: micro-batches per step (pipeline) */
    dt_plan_sched sched;
    int virt;                      /* V: chunks per stage under the interleaved schedule
                                    * (2..DT_PIPE_MAX_VIRTUAL, --virtual-stages); 0 or 1
                                    * otherwise */
    bool recompute;
    bool seqpar;                   /* --sequence-parallel (tp > 1): the model compiled with it
                                    * (its activations and tp bytes) */
    dt_comp_cfg comp;              /* gradient compression (plain dp, tp = pp = 1) */
    int servers;                   /* > 0: the parameter server (BSP) on the last `servers`
                                    * ranks, dp workers; tp = pp = 1, no ZeRO */
    bool balance;                  /* plain dp on hosts of unequal speed: the batch split
                                    * by speed (--balance dynamic) */
} dt_plan_layout;

typedef struct dt_plan_pred {
    dt_plan_layout l;
    double step_s;             /* predicted seconds per step */
    double compute_s;          /* the busiest stage's forward and backward */
    double bubble_s;           /* the schedule's idle time on that stage (with transfers) */
    double tp_s;               /* tensor-parallel all-reduces on the busiest stage */
    double dp_s;               /* exposed gradient reduction (after backward's overlap) */
    double zero_s;             /* ZeRO's parameter all-gather, and under ZeRO-2/3 re-faulting
                                * the pages it released (staging_s_per_byte) */
    double codec_s;            /* compression's encoding and decoding (exposed) */
    double ps_s;               /* the parameter server's push, apply and pull (exposed) */
    double optim_s;
    dt_plan_mem mem;           /* the rank of the stage that needs the most */
    bool fits;                 /* mem.total <= the cluster's memory */
    char partition[256];       /* blocks per chunk as --pp-partition takes them ("2,3"): per stage, or
                                * per each of the pp x V chunks under the interleaved schedule */
} dt_plan_pred;

typedef struct dt_plan_in {
    const dt_model_cfg *model; /* the model (its tp fields are set per layout) */
    int batch;                 /* global batch */
    bool adam;                 /* AdamW (8 bytes of state per parameter) or SGD momentum (4) */
    const dt_plan_cluster *cluster;
} dt_plan_in;

/* Predicts one layout on the whole cluster: DT_ERR_INVALID (one line) when it
 * cannot run there (degrees that do not divide the world, tp the model does not
 * mark, more stages or chunks than blocks, a batch smaller than dp x
 * micro-batches, an interleaved schedule the runtime refuses: pp 1, V outside
 * 2..DT_PIPE_MAX_VIRTUAL, micro-batches not a multiple of pp, ZeRO-3). */
dt_status dt_plan_predict(const dt_plan_in *in, const dt_plan_layout *l, dt_plan_pred *out);
/* Every valid layout of the cluster's world (enumerate.c: dp x tp x pp with tp
 * inside a host; ZeRO 0-3; for pipelines 1-64 micro-batches, GPipe, 1F1B and
 * interleaved 1F1B at 2 and 4 chunks a stage (micro-batches a multiple of pp,
 * no ZeRO-3, pp x V blocks at least), recompute or not; for plain data parallelism four codecs, the parameter
 * server with 1 or 2 servers, and on unequal hosts the batch split by speed),
 * fitting ones first, then by predicted step time. *out is malloc'd (dt_free),
 * *n its length; DT_ERR_INVALID when none is valid. */
dt_status dt_plan_layouts(const dt_plan_in *in, dt_plan_pred **out, int *n);

/* ---- at scale ---------------------------------------------------------------------
 * A GPT layout on a GPU cluster (src/plan/scale.c): achieved FLOP/s per GPU of
 * Megatron-LM's tensor x pipeline x data parallelism with full recomputation,
 * predicted in closed form from the model, the layout and the hardware, with one
 * fitted constant, the fraction of peak the GEMMs reach. Checked against
 * Narayanan et al. 2021, Table 1 (docs/BENCHMARKS.md). */
typedef struct dt_plan_scale_gpt {
    int layers, hidden, heads, seq, vocab;
} dt_plan_scale_gpt;

typedef struct dt_plan_scale_layout {
    int tp, pp, dp;   /* degrees; tp inside a node; the GPUs are tp x pp x dp */
    int micro;        /* b: sequences per micro-batch */
    int batch;        /* B: sequences per iteration, a multiple of micro x dp */
    int chunks;       /* v: model chunks per stage (interleaved 1F1B); 1: plain 1F1B */
    bool dp_overlap;  /* gradient all-reduce overlapped with the last backward (PyTorch
                       * DDP) or run after the pipeline (Megatron's local DDP) */
} dt_plan_scale_layout;

typedef struct dt_plan_scale_hw {
    double peak;         /* FLOP/s per GPU, dense 16-bit */
    double gemm_eff;     /* e: the fraction of peak the GEMMs reach, in (0, 1] */
    double hbm_bw;       /* bytes/s per GPU for the memory-bound operations */
    int per_node;        /* GPUs per node */
    dt_link_cost intra;  /* alpha (s), beta (s/byte, one direction) of a GPU inside its node */
    dt_link_cost inter;  /* of a GPU's own NIC across nodes */
} dt_plan_scale_hw;

typedef struct dt_plan_scale_pred {
    double flops;         /* eq. 3 of the paper: model FLOPs per iteration */
    double iter_s;        /* predicted seconds per iteration */
    double flops_per_gpu; /* flops / (GPUs x iter_s), what Table 1 reports */
    double stage_s;       /* the heaviest stage's micro-batch, forward and backward */
    /* one iteration on the heaviest stage's GPU, in seconds: */
    double gemm_s, memory_s, tp_s, p2p_s; /* over its m micro-batches */
    double bubble_s;      /* fill and drain */
    double dp_s;          /* exposed gradient all-reduce */
    double optim_s;
    int micro_batches;    /* m = batch / (micro x dp) */
} dt_plan_scale_pred;

/* FLOPs of one iteration of `batch` sequences with activation recomputation,
 * 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (Narayanan et al. 2021, eq. 3). */
double dt_plan_scale_flops(const dt_plan_scale_gpt *g, double batch);
/* Parameters, 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) (the same paper, eq. 2). */
double dt_plan_scale_params(const dt_plan_scale_gpt *g);
/* Fills *hw with a DGX A100 (80 GB) cluster: 312 TFLOP/s, 2.039 TB/s HBM, 8 GPUs
 * a node on NVSwitch (300 GB/s each way), one 200 Gbit/s InfiniBand NIC per GPU
 * (25 GB/s each way); gemm_eff 0, to be fitted. */
void dt_plan_scale_dgx_a100(dt_plan_scale_hw *hw);
/* Predicts one iteration (the model is in scale.c's opening comment) into *out.
 * DT_ERR_INVALID (one line) for sizes or degrees below 1, heads or layers that
 * do not split, a batch that is not a multiple of micro x dp, interleaving with
 * micro-batches not a multiple of pp, tp not dividing a node, or hardware
 * constants out of range. */
dt_status dt_plan_scale_predict(const dt_plan_scale_gpt *g, const dt_plan_scale_layout *l, const dt_plan_scale_hw *hw,
                                dt_plan_scale_pred *out);
/* The GEMM efficiency e at which the prediction for (g, l) on hw (its gemm_eff
 * ignored) equals flops_per_gpu, into *gemm_eff (to ~1e-15). DT_ERR_INVALID as
 * dt_plan_scale_predict, or when flops_per_gpu is not positive or out of reach
 * at e = 1. */
dt_status dt_plan_scale_fit(const dt_plan_scale_gpt *g, const dt_plan_scale_layout *l, const dt_plan_scale_hw *hw,
                            double flops_per_gpu, double *gemm_eff);

#ifdef __cplusplus
}
#endif
#endif
