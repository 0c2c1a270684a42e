/* Private to src/train: a run and its phases.
 *
 *   dt_train_run:  check -> setup (mesh, data, model) -> a driver
 *   sync driver:   setup strategy -> resume -> open checkpoints -> report start
 *                  -> steps (batch, forward/backward, reduce, update, checkpoint,
 *                  account, report, evaluate) -> finish
 *   ps, hogwild:   the same phases around their own step
 *
 * The drivers use the phases below; nothing here calls back into a driver. */
#ifndef DTRAIN_TRAIN_RUN_H
#define DTRAIN_TRAIN_RUN_H

#include "dtrain/ckpt.h"
#include "dtrain/loader.h"
#include "dtrain/parallel.h"
#include "dtrain/pipeline.h"
#include "dtrain/robust.h"
#include "dtrain/trace.h"
#include "dtrain/train.h"

/* Figures summed over the steps since the last report. */
typedef struct tr_window {
    double t0;               /* start of the window */
    double loss, compute_s;
    dt_dp_stats dp;
    int64_t items, steps, loss_n;   /* loss_n: steps whose loss counts (not skipped ones) */
} tr_window;

/* The checkpoint writer of the sync driver and what it writes. */
typedef struct tr_ckpt {
    dt_ckpt_writer *w;
    int *writers;
    bool *pmask;             /* parameters this rank writes */
    float *gbuf[4];          /* tp: local M, V; logical M, V */
    int n_parts;
    dt_ckpt_part parts[5];   /* state owners: optimizer shard, sampler, robust aggregation, compression,
                              * local SGD's per-worker optimizer state */
    dt_dp_part_ctx dpp;
    struct tr_net *net;      /* ckpt_dir is each host's own: how the writers meet (ckpt_net.c) */
    int64_t last_step;       /* the step of the last snapshot taken (-1: none) */
} tr_ckpt;

/* Stopping well (stop.c): the skipped batches, the spike window, the times
 * that say when the deadline is near. */
typedef struct tr_stop {
    dt_skip_range skips[2 * DT_MAX_SKIPS]; /* --skip-batches, then one per rewind */
    int n_skips;
    double *win;             /* the last --spike-window finite losses (a ring) */
    int win_n, win_at;
    float z;                 /* the spike threshold in use (0: finite spikes ignored) */
    int recoveries;          /* skips + rewinds so far */
    double step_s;           /* smoothed seconds of one step */
    double save_s;           /* seconds a checkpoint takes (measured, else estimated) */
    double snap_s;           /* seconds the last snapshot held the step loop */
    int64_t rewind_to;       /* set by a rewind: the loop goes on after this step (-1: none) */
} tr_stop;

/* A step's verdict, the same on every rank. */
typedef struct tr_verdict {
    double loss;             /* the step's loss over the world */
    bool grad_bad;           /* some rank's share of the gradient is not finite (asked under skip) */
    bool stopping;           /* stop after this step (request or deadline) */
    int stop;                /* the signal (0: none named), -1: the deadline */
} tr_verdict;

typedef struct tr_attack {
    const dt_train_cfg *c;
    int rank;                /* this worker */
    bool *bad;               /* ALIE: the attacking rows of the n workers, or NULL */
    float z;
} tr_attack;

typedef struct tr_run {
    const dt_train_cfg *c;
    dt_train_result *res;
    /* The mesh: pp stages (outermost) x dp replicas x tp ranks (fastest):
     * rank = (stage*D + replica)*TP + tpr. */
    dt_comm *world, *dpc, *ppc, *tpc;
    dt_comm *bnc;              /* batch norm's own copy of the dp group (NULL: none) */
    int rank, n, D, P, TP, tpr, replica, stage;
    bool lead, quiet;
    /* data and model */
    dt_dataset data;
    dt_loader ld;
    int local_max, micro_max, eB;
    dt_model *m, *full;      /* full: the unsharded model (tp/pp), for weights, checkpoints, --init */
    dt_acts *acts, *eacts;
    dt_partition part;
    bool *smask;             /* the parameters of this rank's stage */
    /* strategy */
    dt_dp *dp;
    dt_pipe *pipe;
    dt_robust *rob;          /* gathered (robust) aggregation, or NULL */
    dt_robust_cfg robcfg;
    tr_attack att;
    bool per_worker;         /* each worker's gradient is the mean over its own shard */
    double *bal;             /* --balance dynamic: smoothed samples/s per worker (2D) */
    tr_ckpt ck;
    tr_stop stop;
    bool fp16;               /* --precision fp16: the loss scaler runs */
    dt_scaler scaler;
    dt_trace *trace;
    /* progress */
    int64_t start_step, total;
    dt_lr_sched sched;
    double t0, slow_prev;
    int64_t all_items;
    tr_window win;
    float acc, eloss;
} tr_run;

/* ---- setup.c --------------------------------------------------------------- */
dt_status tr_setup(tr_run *r, const dt_train_cfg *c, dt_comm *world, dt_train_result *res);
dt_status tr_setup_strategy(tr_run *r);
/* Whether the model takes the dataset's images. */
/* Opens the run's data as its model reads it (token windows of the model's
 * length, or tensors) and checks the two fit: inputs, labels or float targets,
 * token ids below the vocabulary. On error *d is left freeable. */
dt_status tr_data_open(const dt_train_cfg *c, bool need_train, dt_dataset *d);
void tr_free(tr_run *r);
int64_t tr_total_steps(const dt_train_cfg *c, int64_t n_train);

/* ---- memory.c -------------------------------------------------------------- */
/* Every rank's memory by kind (report.h's dt_mem_kind rows, this rank's row
 * filled here) summed over the world into *bytes (malloc'd, n x DT_MEM_COUNT;
 * the caller frees it, also on error). Collective: every rank at the end. */
dt_status tr_mem_gather(tr_run *r, double **bytes);
/* --max-memory (nothing without it): the largest rank's own count at setup by
 * kind, logged; over the budget, one line naming what would fit (another ZeRO
 * stage, --tp or --pp degree on these ranks, by the planner's formulas).
 * Collective. */
dt_status tr_mem_check(tr_run *r);

/* ---- eval.c ---------------------------------------------------------------- */
/* Each rank evaluates its contiguous share [share/shares] of the evaluation
 * items; the sums meet over comm. counts: this rank's results count (one per
 * replica of the last stage). */
dt_status tr_evaluate(const dt_model *m, dt_acts *a, dt_loader *ld, int B, int eval_max, dt_comm *comm,
                      dt_pipe *pipe, int share, int shares, bool counts, float *acc, float *loss);
/* Evaluation on this process alone (parameter server's worker 0, Hogwild!). */
dt_status tr_evaluate_alone(const dt_model *m, dt_loader *ld, int eval_max, float *acc, float *loss);

/* ---- report.c: the reporters the run was given ----------------------------- */
dt_status tr_report_start(const tr_run *r, const dt_run_info *info);
dt_status tr_report_step(const dt_train_cfg *c, const dt_step_info *s);
dt_status tr_report_eval(const dt_train_cfg *c, const dt_eval_info *e);
dt_status tr_report_end(const dt_train_cfg *c, const dt_end_info *e);
dt_status tr_report_event(const dt_train_cfg *c, const dt_event_info *e);
void tr_run_info(const tr_run *r, dt_strategy s, dt_run_info *info);

/* ---- resume.c / snapshot.c -------------------------------------------------- */
/* The checkpoint to resume from into path: --resume PATH, or the newest valid
 * one under --ckpt-dir; false (and a log line) when there is none. */
bool tr_resume_path(const dt_train_cfg *c, bool lead, char *path, size_t n);
/* A checkpoint must come from the same run: optimizer, global batch, seed. */
dt_status tr_same_run(const dt_train_cfg *c, const char *path, const dt_ckpt_state *s);
dt_status tr_resume(tr_run *r);
dt_status tr_ckpt_open(tr_run *r);
/* Whether --ckpt-dir is one directory for all ranks or one per host (then
 * r->ck.net, over which the ranks with `writer` set meet at each checkpoint);
 * collective over the world (ckpt_net.c). */
dt_status tr_ckpt_storage(tr_run *r, bool writer);
/* Hands r->ck.net to a writer (a rank that passed writer = true), or nothing
 * without it; tr_ckpt_net_free frees it (after the writer). */
void tr_ckpt_net_attach(tr_run *r, dt_ckpt_writer *w);
void tr_ckpt_net_free(tr_run *r);
/* After a completed run with per-host checkpoints (else nothing): frees this
 * host's memory copies of replicas (no restart will want them) and sets
 * r->res->ckpt_replica_bytes to the job's replica traffic; collective over the
 * world. */
dt_status tr_ckpt_net_end(tr_run *r);
/* Resume with per-host directories: assembles the newest checkpoint the hosts
 * present hold together (or --resume's) on every host; path gets its directory
 * and *found whether there is one (ckpt_gather.c). Collective. */
dt_status tr_ckpt_gather(tr_run *r, char *path, size_t n, bool *found);
dt_status tr_ckpt_maybe_save(tr_run *r, int64_t step);
/* A checkpoint of this step now (collective over the checkpoint's writers). */
dt_status tr_ckpt_save(tr_run *r, int64_t step);
/* Loads the checkpoint at path into the run (parameters, optimizer state,
 * every part), as a resume does; s gets its state. Collective. */
dt_status tr_load_checkpoint(tr_run *r, const char *path, dt_ckpt_state *s);
/* The unsharded model's weights from every rank's part (tp/pp; collective). */
dt_status tr_gather_weights(tr_run *r);

/* ---- attack.c: --inject byzantine ------------------------------------------ */
/* The attacks on n workers as seen from worker `rank`: a->bad and a->z for
 * ALIE (logged when log), and the robust reducer's hooks pointing at a when
 * rc is not NULL (corrupt: when this worker is Byzantine; tamper: ALIE). */
dt_status tr_attacks(const dt_train_cfg *c, int rank, int n, tr_attack *a, dt_robust_cfg *rc, bool log);
void tr_attack_corrupt(void *a, float *g, size_t n, int64_t step);
void tr_attack_tamper(void *a, float *vecs, int n, size_t len);
bool tr_any_byzantine(const dt_train_cfg *c);
/* Every --inject names a rank that exists, of the right kind. */
dt_status tr_inject_check(const dt_train_cfg *c, int world);
void tr_step_hook(const dt_train_cfg *c, int rank, int64_t step, dt_step_point at, double prev);
/* The optimizer that applies the update: c->optim, or with worker momentum
 * plain SGD (momentum, Nesterov and weight decay are the workers'). */
dt_optim_cfg tr_applied_optim(const dt_train_cfg *c);

/* ---- stop.c: requests, deadlines, spikes, skipped batches ------------------ */
/* state_bytes: what a checkpoint writes (its time until one is measured). */
dt_status tr_stop_init(tr_run *r, size_t state_bytes);
void tr_stop_free(tr_run *r);
/* Global batches to pass over just before step draws its own. */
int64_t tr_skip_at(const tr_run *r, int64_t step);
/* --inject spike: the factor on step's loss (1: none). */
float tr_spike_scale(const tr_run *r, int64_t step);
/* A step took step_s: the deadline's estimate of the next one and of a
 * checkpoint (w's persisting times, or NULL). */
void tr_stop_timed(tr_run *r, double step_s, const dt_ckpt_writer *w);
/* Drivers whose ranks do not vote (ps, hogwild): this process's stop request
 * as a code 1..255 (0: none): a caught signal, or (deadline) the deadline
 * near (dt_train_stop_reason turns it back). */
int tr_stop_code(const tr_run *r, bool deadline);
/* The step's loss over the world with the stop request, the deadline votes
 * and grad_bad in the same all-reduce (collective over the world). */
dt_status tr_vote(tr_run *r, double loss_d, bool grad_bad, tr_verdict *v);
/* Whether v is a divergence (why gets one line); tr_spike_push adds a normal
 * step's loss to the window. */
bool tr_spike(tr_run *r, const tr_verdict *v, char *why, size_t n);
void tr_spike_push(tr_run *r, double loss);
/* An event line for the reporters (rank 0): kind "stop", "skip", "rewind" or
 * "overflow"; to and batches for a rewind. */
dt_status tr_event(tr_run *r, const char *kind, int64_t step, int64_t to, int64_t batches, double loss, const char *why);
/* --on-divergence skip: drops the step's update (collective over dp). */
dt_status tr_skip_step(tr_run *r, int64_t step, double loss, const char *why);
/* --on-divergence rewind: back to the newest checkpoint K steps before step,
 * SKIP batches skipped from step on; r->stop.rewind_to says where the loop
 * goes on. Collective. */
dt_status tr_rewind(tr_run *r, int64_t step, double loss, const char *why);
/* The stop after step: its checkpoint (unless taken already) on disk, the
 * result's stop fields, the event. Collective. */
dt_status tr_stop_save(tr_run *r, int64_t step, const tr_verdict *v);
/* The result's stop fields (ckpt: a checkpoint of step is on disk) and the
 * event (rank 0). */
dt_status tr_stop_note(tr_run *r, int64_t step, int stop, double loss, bool ckpt);

/* ---- local_ckpt.c: local SGD's per-worker optimizer state ------------------- */
/* Whether the run keeps one (local SGD on more than one replica). */
bool tr_local_state(const tr_run *r);
/* Its checkpoint part: every replica writes its own; loaded after the
 * optimizer shard, which it overrides. */
void tr_local_part(tr_run *r, dt_ckpt_part *part);

/* ---- drivers ---------------------------------------------------------------- */
dt_status tr_drive_sync(tr_run *r);
dt_status tr_drive_ps(tr_run *r);
dt_status tr_drive_hogwild(tr_run *r);

#endif
