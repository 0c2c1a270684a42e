/* What a run tells whoever embeds it: hooks called with each step's figures,
 * each evaluation and the end of the run. metrics.jsonl, the weights file and
 * the command line's progress line are reporters built on these hooks; an
 * embedder installs its own and gets the same figures without files.
 *
 * Hooks run on rank 0 only, on the training thread, between steps: a slow hook
 * slows training. A hook that returns an error ends the run with that status.
 * on_start's failure ends every rank at once (synchronous strategies); a later
 * hook's failure ends rank 0, and the other ranks then stop at their next
 * exchange with it, as after any failure of rank 0 (a timeout naming it).
 * Every hook is optional (NULL). */
#ifndef DTRAIN_REPORT_H
#define DTRAIN_REPORT_H

#include "dtrain/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dt_model;
struct dt_train_result;

typedef enum { DT_STRATEGY_SYNC, DT_STRATEGY_LOCALSGD, DT_STRATEGY_HOGWILD, DT_STRATEGY_PS } dt_strategy;

/* on_start: what is about to be trained. */
typedef struct dt_run_info {
    const char *model;       /* "mlp", "cnn", "gpt" */
    size_t params;           /* logical parameter count */
    bool lm;                 /* language model: tokens and validation loss, no accuracy */
    int64_t n_train;         /* training images, or windows of the corpus */
    int64_t total_steps;
    int64_t start_step;      /* > 0: resumed from a checkpoint of that step */
    int world, dp, pp, tp;   /* ranks; the mesh (dp x pp x tp; parameter server: dp workers) */
    dt_strategy strategy;
    const char *out_dir;     /* the run's --out (NULL: none), for reporters that write files */
} dt_run_info;

/* on_step: every --log-every steps and at the last step. Window figures are
 * means over the steps since the previous report. */
typedef struct dt_step_info {
    dt_strategy strategy;
    int64_t step, total_steps, epoch;
    float loss;              /* mean training loss of the window */
    float lr;
    double items_per_s;      /* samples/s (classifiers) or tokens/s (gpt) of the window */
    const char *unit;        /* "samples" or "tokens" */
    double time_s;           /* training time so far, evaluations excluded (< 0: not measured) */
    double eta_s;            /* estimated training time left */
    /* synchronous strategies (sync, local SGD): per step, this rank */
    double compute_s, comm_exposed_s, comm_s;
    uint64_t bytes_sent;
    int ranks;
    const char *compress;    /* codec name, or NULL when gradients are not compressed */
    double compress_ratio, encode_s, decode_s;
    double ef_norm;          /* error feedback: the L2 norm of this rank's residual (< 0: none kept) */
    int workers, servers;    /* parameter server */
    int64_t clock_min, clock_max; /* parameter server: the slowest and fastest running worker's clock (this one's is step) */
    int threads;             /* Hogwild! */
    float loss_scale;        /* --precision fp16: the next step's loss scale (0: not fp16) */
    int64_t overflow_steps;  /* --precision fp16: steps dropped for an overflow so far */
} dt_step_info;

/* on_eval: every --eval-every steps and at the end. */
typedef struct dt_eval_info {
    int64_t step;
    bool lm;
    float acc;               /* test accuracy in [0, 1]; -1 for a language model */
    float loss;              /* test loss, or validation loss (language model) */
    double time_s;           /* training time when evaluated (< 0: not measured) */
} dt_eval_info;

/* Pipeline schedule figures of the whole run, one entry per stage. */
typedef struct dt_pipe_summary {
    int stages, micro_batches, virtual_stages;
    const char *schedule;    /* "gpipe", "1f1b" or "interleaved" */
    bool recompute;
    double bubble_formula;   /* (P-1)/(VM+P-1), V = virtual_stages (1 but interleaved) */
    const double *idle_frac, *act_bytes, *busy_s, *acts_alive_peak;
    const int *blocks_per_stage;
} dt_pipe_summary;

/* Parameter-server figures of the whole run. */
typedef struct dt_ps_summary {
    const char *consistency; /* "bsp", "asp" or "ssp" */
    int bound, max_staleness;
    const uint64_t *hist;    /* pushes by staleness 0..n_hist-1 */
    int n_hist;
    const int *lost;         /* world ranks of the workers dropped as lost */
    int n_lost;
    int64_t samples;         /* samples in the gradients applied (server 0's count) */
    int joined, departed;    /* elastic: workers that joined, left on request */
} dt_ps_summary;

/* Memory per rank at the end of a synchronous run (metrics.jsonl's memory
 * line): bytes by kind as dtrain allocated them, the process's peak resident
 * set last. The kinds dtrain counts itself ("own": everything but DT_MEM_RSS)
 * are the planner's (include/dtrain/plan.h); what the resident set holds
 * besides them is the runtime and the data (the planner's base). */
typedef enum {
    DT_MEM_PARAMS,   /* the parameter arena (every stage's: 4 bytes per local parameter) */
    DT_MEM_GRADS,    /* the gradient arena, or ZeRO-2's shard */
    DT_MEM_STAGING,  /* ZeRO-2: the transient gradient arena's resident peak */
    DT_MEM_OPTIM,    /* optimizer state (and a robust rule's worker momentum) */
    DT_MEM_ACTS,     /* activations: training and evaluation sets, pipeline slots */
    DT_MEM_BUFFERS,  /* communication buffers: pipeline gradient buffers, compression's */
    DT_MEM_COPY,     /* tp/pp: the unsharded model's arenas (and checkpoint gather buffers) */
    DT_MEM_RSS,      /* the process's peak resident set (getrusage's ru_maxrss) */
    DT_MEM_COUNT
} dt_mem_kind;

typedef struct dt_mem_summary {
    int ranks;
    const double *bytes;     /* ranks x DT_MEM_COUNT, rank-major */
} dt_mem_summary;

/* on_end: the run finished, or stopped on request (res->stopped_at >= 0);
 * not called when it failed. */
typedef struct dt_end_info {
    const struct dt_train_result *res;
    const struct dt_model *model;  /* the logical (unsharded) model with the final weights */
    dt_strategy strategy;
    int world, zero, buckets;      /* sync strategies: ranks, ZeRO stage, gradient buckets */
    size_t local_params;           /* parameters this rank holds (its tensor-parallel shard) */
    const dt_pipe_summary *pipe;   /* NULL unless pipeline parallel */
    const dt_ps_summary *ps;       /* NULL unless parameter server */
    const dt_mem_summary *mem;     /* synchronous strategies: every rank's memory; else NULL */
} dt_end_info;

/* on_event: something the run did besides stepping: "stop" (on a signal or
 * the deadline, checkpoint written), "skip" (a spike's update dropped),
 * "rewind" (back to the checkpoint of to_step, `batches` batches skipped). */
typedef struct dt_event_info {
    const char *kind;        /* "stop", "skip", "rewind" */
    int64_t step;            /* the step it happened at */
    int64_t to_step;         /* rewind: the checkpoint's step */
    int64_t batches;         /* rewind: batches skipped from `step` on */
    float loss;              /* skip, rewind: the spike's loss */
    const char *why;         /* one line: the signal, the deadline, the spike */
} dt_event_info;

typedef struct dt_reporter {
    void *ctx;
    dt_status (*on_start)(void *ctx, const dt_run_info *info);
    dt_status (*on_step)(void *ctx, const dt_step_info *s);
    dt_status (*on_eval)(void *ctx, const dt_eval_info *e);
    dt_status (*on_end)(void *ctx, const dt_end_info *e);
    dt_status (*on_event)(void *ctx, const dt_event_info *e);
} dt_reporter;

#define DT_MAX_REPORTERS 8

/* The metrics.jsonl reporter: one JSON object per line in OUT/metrics.jsonl
 * (on_start opens it; a resumed run keeps the lines up to its checkpoint and
 * appends). Fills *r; *state is owned by the caller and freed with
 * dt_report_jsonl_close (which also closes the file). */
typedef struct dt_report_jsonl dt_report_jsonl;
dt_status dt_report_jsonl_create(dt_report_jsonl **state, dt_reporter *r);
dt_status dt_report_jsonl_close(dt_report_jsonl *state);

/* A step's metrics.jsonl line (no newline), the keys and numbers the file
 * gets; the caller frees it with free(). NULL: out of memory. */
char *dt_report_step_json(const dt_step_info *s);

/* Creates the --out directory dir (exists already: fine). */
dt_status dt_report_make_dir(const char *dir);

/* The weights reporter: on_end writes OUT/model.safetensors (PyTorch names)
 * with the step count in its metadata. Fills *r; its only state is the --out
 * directory, kept in *dir (which must outlive the run). */
void dt_report_weights(dt_reporter *r, const char **dir);

#ifdef __cplusplus
}
#endif
#endif
