/* dtrain training loop: builds a run from a config, drives steps, evaluates,
 * writes metrics and weights. Later layers (data parallelism, checkpoints)
 * hook into the same step structure. */
#ifndef DTRAIN_TRAIN_H
#define DTRAIN_TRAIN_H

#include "dtrain/aggregate.h"
#include "dtrain/comm.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "dtrain/parallel.h"
#include "dtrain/pipeline.h"
#include "dtrain/ps.h"
#include "dtrain/report.h"
#include "dtrain/robust.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --inject crash:rank=R:step=S | hang:rank=R:step=S | slow:rank=R:factor=F |
 *          byzantine:rank=R:mode=signflip|random|scale:X|alie[:Z] | spike:step=S[:scale=X]
 * (spike: the S-th global batch drawn, skipped ones counted, has its loss scaled
 * by X on every rank: a bad batch, which a rewind skips past) */
typedef enum { DT_STEP_BEGIN, DT_STEP_COMPUTE } dt_step_point;
/* overflow (--precision fp16): rank R's gradient of step S turns inf after its
 * backward, as an fp16 overflow would (every rank must drop the step). */
typedef enum { DT_INJECT_CRASH, DT_INJECT_HANG, DT_INJECT_SLOW, DT_INJECT_BYZANTINE, DT_INJECT_SPIKE,
               DT_INJECT_OVERFLOW } dt_inject_kind;
typedef struct dt_inject {
    dt_inject_kind kind;
    int rank;
    int64_t step;            /* 1-based step at which crash/hang/overflow happens; spike: the global batch */
    float factor;            /* slow: compute takes factor times as long; byzantine scale: X; alie: Z (NaN: the
                              * paper's); spike: the scale of that batch's loss (and so of its gradient) */
    dt_byz_mode mode;        /* byzantine: what the rank sends instead of its gradient */
} dt_inject;

dt_status dt_inject_parse(const char *spec, dt_inject *out);

/* --on-divergence stop|skip|rewind[:K[:SKIP]]: what a loss spike does. A spike
 * is an inf/NaN loss (or, under skip, gradient) or a finite loss above the mean
 * of the last `window` losses by more than z of their standard deviations. */
typedef enum { DT_DIVERGE_STOP, DT_DIVERGE_SKIP, DT_DIVERGE_REWIND } dt_diverge_mode;
typedef struct dt_diverge_cfg {
    dt_diverge_mode mode;    /* [stop]: an inf/NaN loss ends the run with one line */
    int64_t back;            /* rewind: to the newest checkpoint at least K steps before the spike [100] */
    int64_t skip;            /* rewind: batches skipped from the spike's on [200] */
    float z;                 /* spike threshold; 0: 6 under skip and rewind, finite spikes ignored under stop [0] */
    int window;              /* losses the running mean and deviation are taken over [50] */
    int max_rewinds;         /* skips plus rewinds allowed before the run gives up [10] */
} dt_diverge_cfg;
/* --skip-batches S:N[,S:N...]: just before step S draws its batch, the
 * sampler passes over N global batches (what a rewind does). */
typedef struct dt_skip_range {
    int64_t step, count;
} dt_skip_range;
#define DT_MAX_SKIPS 16
dt_status dt_diverge_parse(const char *spec, dt_diverge_cfg *out);

/* Stopping on request. A program's signal handler calls dt_train_request_stop
 * (async-signal-safe: it stores one atomic int); every running dt_train_run of
 * the process then stops at the next step boundary that every rank agrees on
 * (the request rides on the step's loss all-reduce), writes a checkpoint and
 * returns DT_OK with res->stopped_at set. signo names the cause in messages
 * (0: "a request"); the first request's signal is kept. */
void dt_train_request_stop(int signo);
int dt_train_stop_signal(void);   /* the pending request's signal, -1 when none */
void dt_train_stop_reset(void);   /* forgets a request (embedders running several runs) */
/* A stop request as a code 1..255 for drivers whose ranks pass it in their
 * messages (0: none): the pending signal's, else 1 when the wall-clock
 * deadline (dt_now seconds, <= 0 none) would not hold one more step of
 * step_s, a checkpoint of save_s and a margin (two steps, at least a second).
 * dt_train_stop_reason turns a code back: the signal (0: none named), -1 the
 * deadline. */
int dt_train_stop_code(double deadline, double step_s, double save_s);
int dt_train_stop_reason(int code);

typedef struct dt_train_cfg {
    dt_model_cfg model;
    const char *data;        /* the data (a folder or file of any format loader.h lists); NULL: default */
    const char *target;      /* CSV data: the target column's name, or NULL */
    bool prefetch;           /* the training loader gathers the next batch in a background thread [true] */
    int64_t epochs;          /* used when steps == 0 */
    int64_t steps;           /* total optimizer steps; 0: derive from epochs */
    int batch;               /* global batch (samples; for the gpt, sequences) */
    float lr, min_lr;
    int64_t warmup;
    bool cosine;
    dt_optim_cfg optim;
    float clip;              /* max global gradient norm; 0 disables */
    float loss_scale;        /* --precision fp16: the first (or, window 0, the fixed) loss scale [65536] */
    int64_t loss_scale_window; /* --precision fp16: clean steps before the scale doubles; 0: static [2000] */
    uint64_t seed;
    const char *out_dir;     /* NULL: write nothing */
    const char *init;        /* weights to start from, or NULL */
    int64_t eval_every;      /* steps; 0: only at the end */
    int64_t log_every;       /* steps between metric lines */
    double val_frac;         /* gpt: held-out tail of the corpus */
    int eval_max;            /* gpt: validation windows per evaluation (0: all) */
    bool quiet;
    /* distributed */
    dt_dp_cfg dp;            /* buckets, algorithm, ZeRO level, overlap */
    int accum;               /* micro-batches per step (gradient accumulation) [1] */
    double max_memory;       /* --max-memory: bytes per rank dtrain's own count may reach at setup (0: no limit) */
    double timeout;          /* seconds every communication wait may take [60] */
    const char *trace;       /* Chrome trace file, or NULL */
    int n_inject;
    dt_inject inject[8];     /* fault injection (tests, demos); fires in the first attempt only */
    /* checkpoints */
    const char *ckpt_dir;    /* NULL: no checkpoints */
    /* A worker joining a running elastic parameter-server job (ps.max_workers
     * > 0) from outside it: server 0's port and the job's run directory (its
     * join.token); NULL: a member of its own job. */
    const char *join_port, *join_dir;
    int64_t ckpt_every;      /* steps between checkpoints (0: only at the end) */
    int ckpt_keep;           /* complete checkpoints kept (0: all) [3] */
    int ckpt_replicas;       /* each host's checkpoint files also kept on this many other hosts,
                                when ckpt_dir is local to each host [0] */
    const char *resume;      /* NULL, "auto" (newest valid in ckpt_dir) or a checkpoint path */
    bool ckpt_stop_only;     /* ckpt_dir is only where a stop writes (no periodic or final checkpoints) */
    /* stopping well */
    double deadline;         /* dt_now() time by which the run must have checkpointed and returned; the run
                              * stops early enough by its measured step and checkpoint times (0: none) */
    dt_diverge_cfg diverge;  /* --on-divergence, --spike-z, --spike-window, --max-rewinds */
    int n_skips;
    dt_skip_range skips[DT_MAX_SKIPS]; /* --skip-batches */
    const char *config_json; /* the flags as JSON, stored in checkpoints (may be NULL) */
    /* pipeline and tensor parallelism: the world is pp x dp x tp (tp fastest) */
    int tp;                  /* tensor-parallel group size [1] */
    int pp;                  /* pipeline stages [1] */
    dt_pipe_cfg pipe;        /* micro-batches, schedule, recompute */
    const char *pp_partition;/* "auto", "uniform" or block counts "2,3,1" [uniform] */
    /* consistency, robustness, heterogeneity */
    dt_strategy strategy;    /* sync data parallelism [sync], or local SGD */
    int local_h;             /* local SGD: average parameters every H steps */
    dt_agg agg;              /* Byzantine-robust aggregation (DT_AGG_NONE: bucketed all-reduce) */
    int worker_momentum;     /* with --aggregate: each worker keeps its own SGD momentum and
                              * sends its direction (-1: auto, on for median, trimmed, krum and cclip
                              * when SGD has momentum; 0 off; 1 on) [-1] */
    bool balance_dynamic;    /* split each global batch by measured worker speed */
    int hogwild_threads;     /* --strategy hogwild: threads sharing one parameter arena */
    dt_ps_cfg ps;            /* --strategy ps: servers, consistency */
    /* what the program around the library installs (never flags) */
    int attempt;             /* the supervisor's restart count (0: first attempt); --inject
                              * checks that depend on the world apply in attempt 0 only */
    /* Called by every training rank at two points of every step (1-based):
     * DT_STEP_BEGIN (before anything of the step) and DT_STEP_COMPUTE (just
     * before its compute starts: after the parameter server's pull), with the
     * compute time of the rank's previous step. Where a program injects
     * crashes, hangs and slowness, or feeds a watchdog. NULL: nothing. */
    void (*step_hook)(void *ctx, int rank, int64_t step, dt_step_point at, double prev_compute_s);
    void *step_hook_ctx;
    int n_reporters;
    dt_reporter reporters[DT_MAX_REPORTERS]; /* rank 0 calls them (report.h) */
} dt_train_cfg;

typedef struct dt_train_result {
    int64_t steps;
    float final_loss;        /* mean training loss of the last logged window */
    float test_acc;          /* classifiers: last evaluation (-1 if none) */
    float eval_loss;         /* test loss (classifiers) or validation loss (gpt) */
    double items_per_s;      /* samples/s (classifiers) or tokens/s (gpt), whole run */
    double seconds;
    dt_dp_mem mem;           /* per-rank bytes of parameters, gradients, optimizer state */
    double comm_s, exposed_s, backward_s; /* whole run, this rank */
    double gather_s, gather_exposed_s; /* ZeRO-3: parameter gathers and the wait for them (in comm_s, exposed_s) */
    uint64_t bytes_sent;     /* whole run, this rank */
    int64_t resumed_from;    /* step of the checkpoint resumed from, -1 if none */
    double ckpt_blocking_s;  /* time the step loop spent on checkpoint snapshots */
    double ckpt_replica_bytes; /* checkpoint replicas sent to other hosts, all ranks together */
    double pp_idle_frac;     /* pipeline: largest idle fraction of any stage */
    /* Parameter server (ASP/SSP): workers dropped as lost, known to every rank
     * still there at the end. 0 normally; when > 0 the job cannot end through
     * MPI_Finalize (its barrier would wait for the dead rank). */
    int lost_workers;
    char lost_desc[160];     /* "rank 2 at clock 19, ..." */
    int64_t samples;         /* parameter server, rank 0: samples in the gradients applied */
    bool left;               /* parameter server: this worker left the job on request */
    dt_gc_stats comp;        /* gradient compression, whole run, this rank */
    /* Stopped on request or by the deadline (steps < the run's total): */
    int64_t stopped_at;      /* the step after which every rank stopped; -1: ran to its end */
    int stop_signal;         /* the request's signal (0: none named; -1: the deadline) */
    char stop_ckpt[4096];    /* the checkpoint written at the stop ("" when there was nowhere to write) */
    int rewinds, skipped_steps; /* --on-divergence rewind / skip: how often each happened */
    int64_t overflow_steps;  /* --precision fp16: steps dropped for an inf/NaN gradient */
    float loss_scale;        /* --precision fp16: the scale the next step would use (0: none) */
} dt_train_result;

void dt_train_cfg_default(dt_train_cfg *c, dt_model_kind kind);
/* The defaults that follow from the model: AdamW with warm-up and cosine decay for a
 * language model (lm), SGD with momentum for a classifier or regressor (a
 * description file's defaults are chosen by what it reads). */
void dt_train_cfg_model_defaults(dt_train_cfg *c, bool lm);
dt_status dt_train_cfg_check(const dt_train_cfg *c);
/* Whether the run aggregates worker momenta (worker_momentum resolved). */
bool dt_train_worker_momentum(const dt_train_cfg *c);
/* Trains on the ranks of `comm` (a self communicator for one process). Every
 * rank calls it; rank 0 alone calls the reporters (report.h). */
dt_status dt_train_run(const dt_train_cfg *c, dt_comm *comm, dt_train_result *res);

/* `dtrain train` from its flags (argv: the flags alone, as typed after
 * `dtrain train`; the library's, not the launcher's -n, --threads or
 * --supervise) in this process on one rank: the same run as the command line,
 * bit for bit, with OUT/metrics.jsonl, model.safetensors and config.json when
 * --out is given, and no progress line. threads: BLAS threads (hogwild: its
 * threads); 0 leaves the BLAS's own. on_step (NULL: none) gets every logged
 * step as the JSON text of its metrics.jsonl line; a non-zero return stops the
 * run with an error. summary (NULL: none) gets the result as a JSON object:
 * steps, final_loss, test_acc (-1: a language model), eval_loss, items_per_s,
 * seconds, resumed_from, stopped_at [, loss_scale, overflow_steps]. Errors
 * are the command line's one line (dt_error_msg). */
typedef int (*dt_train_step_fn)(void *ctx, const char *step_json);
dt_status dt_train_flags_run(int argc, char **argv, int threads, dt_train_step_fn on_step, void *ctx, char *summary,
                             size_t summary_n);

/* How the job ends on this rank once dt_train_run returned st (every rank
 * calls it): a multi-rank run that failed on a communication fault finds the
 * late rank (the message names it) and must be aborted (a one-rank run on
 * such a fault ends without finalizing MPI); a parameter-server
 * run that lost workers releases the others and must end without finalizing
 * MPI (its barrier would wait for the dead). One rank per fault reports. */
typedef enum {
    DT_END_FINALIZE,         /* dt_comm_destroy + dt_comm_finalize, then return */
    DT_END_ABORT,            /* dt_comm_abort: the job cannot go on */
    DT_END_EXIT              /* leave the process without finalizing MPI */
} dt_end_action;
typedef struct dt_train_end {
    dt_end_action action;
    dt_status status;        /* the run's, or the release's */
    bool report;             /* this rank prints msg */
    char msg[1700];
} dt_train_end;
void dt_train_end_job(dt_comm *world, dt_status st, const dt_train_result *res, double timeout, dt_train_end *out);

/* Evaluation of given weights (no training): accuracy + loss on the test set
 * (classifiers) or loss on the validation tail (gpt). */
dt_status dt_eval_run(const dt_train_cfg *c, const char *weights, dt_train_result *res);

#ifdef __cplusplus
}
#endif
#endif
