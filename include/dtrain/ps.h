/* dtrain parameter server (Li et al., OSDI 2014) with BSP, ASP and SSP
 * consistency (Ho et al., 2013).
 *
 * The world's last S ranks are servers, the first W workers. The flat parameter
 * arena is split into S contiguous key ranges balanced by bytes (the dt_chunk_*
 * partition); server s owns range s: its parameters and its optimizer state.
 * Every step a worker pulls every range, computes the gradient of its own shard
 * (the mean over its samples), and pushes each range as soon as backward has
 * finished every block that writes into it.
 *
 * Clocks: worker w's clock is the number of steps it has pushed; the global
 * clock is the minimum over workers still running. A pull from a worker at clock
 * c is answered when
 *   BSP:    every step-(c-1) gradient has been applied (global clock >= c),
 *   SSP:K:  global clock >= c - K,
 *   ASP:    at once.
 * BSP sums the W gradients of a step (or aggregates them robustly with
 * --aggregate) and applies one update; ASP and SSP apply each worker's gradient
 * as it arrives, scaled by 1/W (a full round of W pushes is one synchronous
 * step). The staleness of an applied gradient is the global clock when it is
 * applied minus the global clock of the parameters the worker had read; under
 * SSP:K it never exceeds K. Under ASP and SSP a push may also have its step
 * scaled by its staleness or its gradient corrected for the delay (cfg).
 *
 * Lost workers (ASP and SSP, cfg.liveness > 0): a server drops a worker whose
 * connection fails, or who has been silent for cfg.liveness seconds while the
 * server holds nothing of it (no pull waiting for the clock, no checkpoint
 * barrier). The dropped worker leaves the global clock, the checkpoint barrier
 * and the count of workers the server waits for, and the run goes on with the
 * others; its shard of the data is no longer trained. Worker 0 cannot be
 * dropped: it writes the run's outputs, so losing it fails the server with
 * DT_ERR_TIMEOUT (and the supervisor restarts the job). Under BSP nothing is
 * dropped: a missing worker stops every step, and the workers' deadlines end
 * the job.
 *
 * Stopping at a consistent cut (dt_ps_client_request_stop, cfg.stop_poll):
 * a stop code (1..255, the caller's meaning) travels in the workers' push
 * headers and the servers' replies until server 0 hears of it. Server 0 then
 * fixes the stop clock K: the furthest clock a running worker will next pull
 * (or checkpoint) at, so no worker has to go back; its replies carry K, every
 * worker runs to clock K, takes the checkpoint barrier there and finishes. A
 * worker that already finished its last step (ASP, SSP) leaves no earlier cut:
 * the others then run to the end. Costs nothing on a step without a stop. */
#ifndef DTRAIN_PS_H
#define DTRAIN_PS_H

#include "dtrain/aggregate.h"
#include "dtrain/comm.h"
#include "dtrain/gradcomp.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_PS_BSP, DT_PS_ASP, DT_PS_SSP } dt_ps_mode;

/* Server-side checkpoint: called when every worker has reached `clock` (a
 * consistent cut); the server's range [lo, lo+len) of m->w and its optimizer. */
typedef dt_status (*dt_ps_ckpt_fn)(void *ctx, int64_t clock, size_t lo, size_t len, const dt_optim *opt);

typedef struct dt_ps_cfg {
    int servers;                /* S >= 1 */
    dt_ps_mode mode;
    int staleness;              /* SSP: K */
    dt_agg agg;                 /* BSP only: robust aggregation of the W gradients */
    /* BSP only, fault injection: sees (and may rewrite) a step's W gradients of
     * the server's range (W x len) before they are aggregated; NULL: none. */
    void (*tamper)(void *ctx, float *vecs, int W, size_t len);
    void *tamper_ctx;
    /* checkpoints and resume (server side) */
    dt_ps_ckpt_fn ckpt;         /* NULL: none */
    void *ckpt_ctx;
    int64_t start_clock;        /* resume: every worker starts at this clock */
    const float *M0, *V0;       /* resume: logical optimizer state (arena-indexed) or NULL */
    int64_t t0;                 /* resume: optimizer step count */
    /* ASP/SSP: seconds a worker may be silent before it is dropped as lost; the
     * workers then wait for a server up to the communicator's deadline plus
     * this. <= 0: never drop (BSP ignores it). */
    double liveness;
    /* Compressed pushes (--compress): workers encode each range's gradient (with
     * their own error feedback), servers decode it. comp.comp.kind NONE: off. */
    dt_gc_cfg comp;
    /* ASP/SSP, delay-tolerant (src/ps/delay.c): scale each push's step by
     * 1/(1 + its staleness in rounds of W pushes); compensate each push's
     * delay with lambda (DC-ASGD), 0: off. */
    bool staleness_lr;
    float dc_lambda;
    /* Server side: polled between requests; a stop code (1..255) when this
     * process was asked to stop, 0 otherwise. NULL: never. */
    int (*stop_poll)(void *ctx);
    void *stop_ctx;
    /* Elastic (ASP/SSP): slots for this many workers over the run (the world's
     * included; slots are not reused), 0: no joins. secret: what a joiner must
     * show (up to 64 characters). publish: server 0 tells the caller its join
     * port (for the joiners to find). */
    int max_workers;
    const char *secret;
    void (*publish)(void *ctx, const char *port);
    void *publish_ctx;
} dt_ps_cfg;

/* How a run stopped: the clock K every worker stopped at (-1: it ran to its
 * end) and the stop code server 0 decided on. */
typedef struct dt_ps_outcome {
    int64_t stop_at;            /* the clock every worker stopped at, -1: the run ran to its end */
    int stop_code;              /* server 0's stop code */
    int64_t samples;            /* server 0: samples in the gradients it applied */
    int joined, departed;       /* server 0: workers that joined, left on request */
} dt_ps_outcome;

/* Worker slots a run has: the world's W workers, or cfg->max_workers when elastic. */
static inline int dt_ps_slots(const dt_ps_cfg *cfg, int W) { return cfg->max_workers > W ? cfg->max_workers : W; }

#define DT_PS_HIST 32           /* staleness histogram bins (the last collects the rest) */

dt_status dt_ps_cfg_parse(const char *consistency, dt_ps_cfg *out); /* bsp | asp | ssp:K */

/* The delay-tolerant updates (pure; src/ps/delay.c). The step scale of a push
 * that pushes_since_read other pushes followed the worker's read, W workers:
 * 1/(1 + floor(pushes_since_read / W)). DC-ASGD: g += lambda g g (w_now - w_read)
 * elementwise. */
float dt_ps_staleness_scale(int64_t pushes_since_read, int W);
void dt_ps_delay_compensate(float *g, const float *w_now, const float *w_read, size_t n, float lambda);

/* Server: serves until every worker has finished or been dropped, then tells
 * the others which were dropped. m->w holds the initial parameters; on return
 * the server's range holds the final ones. hist counts applied gradients by
 * staleness. lost (dt_ps_slots entries, or NULL): the clock at which each
 * worker was dropped, -1 for the others. out (or NULL): whether the workers
 * stopped early and where, and server 0's counts. */
dt_status dt_ps_serve(dt_model *m, dt_comm *world, const dt_ps_cfg *cfg, const dt_optim_cfg *ocfg,
                      const dt_lr_sched *sched, uint64_t hist[DT_PS_HIST], int64_t *lost, dt_ps_outcome *out);

typedef struct dt_ps_client dt_ps_client;
dt_status dt_ps_client_create(dt_ps_client **out, dt_model *m, dt_comm *world, const dt_ps_cfg *cfg);
/* A worker joining a running elastic job from outside it: connects to server
 * 0's port (then to the others), shows cfg->secret, and gets its slot and
 * the clock it starts pulling at (*slot, *clock). cfg: the job's (servers,
 * mode, compression). Fails with one line when refused. */
dt_status dt_ps_client_join(dt_ps_client **out, dt_model *m, const char *port, const dt_ps_cfg *cfg, double timeout,
                            int *slot, int64_t *clock);
/* This worker's share of the global batch it computes next (after dt_ps_pull):
 * its index among the clock's members and their count. */
void dt_ps_client_share(const dt_ps_client *c, int *index, int *members);
/* The running workers' least (the global clock) and furthest clocks as server
 * 0 saw them at this worker's last pull. */
void dt_ps_client_clocks(const dt_ps_client *c, int64_t *slowest, int64_t *fastest);
/* The samples this step's pushes carry (this worker's share of the global batch). */
void dt_ps_client_count(dt_ps_client *c, int samples);
/* Asks to leave the job (elastic; not worker 0): the next requests carry it. */
void dt_ps_client_request_leave(dt_ps_client *c);
/* The clock this worker leaves at, once server 0 has fixed it, else -1: the
 * worker whose pull for that clock returned finishes (dt_ps_finish). */
int64_t dt_ps_client_leave_at(const dt_ps_client *c);
void dt_ps_client_destroy(dt_ps_client *c); /* NULL ok */
/* The worker's compression session (its error-feedback residual), or NULL. */
dt_gc *dt_ps_client_gc(dt_ps_client *c);
/* Pulls every range into m->w for step `clock` (blocks per the consistency).
 * last: no pull follows this step. Otherwise, under BSP and SSP:0, this step's
 * pushes also ask for step clock+1's values and the next dt_ps_pull only
 * receives them (so SSP:0 reads what BSP reads); call it with clock+1. */
dt_status dt_ps_pull(dt_ps_client *c, int64_t clock, bool last);
/* dt_block_done_fn for dt_model_backward: pushes the ranges that are complete. */
void dt_ps_block_done(void *client, int block);
/* Pushes what is left, waits for the sends, zeroes the gradients. */
dt_status dt_ps_push_end(dt_ps_client *c);
/* Asks for a stop (code 1..255; the first one asked or heard of stays): this
 * worker's next pushes carry it to the servers. */
void dt_ps_client_request_stop(dt_ps_client *c, int code);
/* The clock every worker stops at, once server 0 has fixed it (*code: the
 * stop's code), else -1. Known after a dt_ps_pull; a worker whose pull for
 * clock K has returned checkpoints at K (dt_ps_checkpoint) and finishes. */
int64_t dt_ps_client_stop_at(const dt_ps_client *c, int *code);
/* Checkpoint barrier: tells the servers this worker has pushed everything before
 * `clock` and waits until they have checkpointed that consistent cut. */
dt_status dt_ps_checkpoint(dt_ps_client *c, int64_t clock);
/* Tells the servers this worker is done and waits until every worker has
 * finished or been dropped (the servers' farewell says which). */
dt_status dt_ps_finish(dt_ps_client *c);
/* After dt_ps_finish: dt_ps_slots entries, the clock at which each worker was dropped
 * (by any server), -1 for the ones that finished. Owned by the client. */
const int64_t *dt_ps_client_lost(const dt_ps_client *c);
/* After dt_ps_serve / dt_ps_finish: rank 0 (a worker) receives every range of
 * the final parameters into m->w, the sum of the servers' staleness
 * histograms into hist and server 0's counts into out (samples, joined,
 * departed; servers pass theirs in out; other workers return at once).
 * Point-to-point between the servers and rank 0 only, so a lost worker does
 * not stop it. */
dt_status dt_ps_gather_final(dt_model *m, dt_comm *world, const dt_ps_cfg *cfg, uint64_t hist[DT_PS_HIST], dt_ps_outcome *out);
/* The end of a job that lost workers, which cannot end through MPI_Finalize
 * (its barrier would wait for a dead rank), and whose launcher takes the job
 * down as soon as one rank exits without it: rank 0 calls this once every
 * output of the run is written, every other rank still there waits here (up to
 * `deadline` seconds) before exiting, so nothing ends before the outputs are
 * complete. Rank 0 sends to every rank, lost ones included (that message is
 * never taken), and waits at most a second for its sends. */
dt_status dt_ps_release(dt_comm *world, double deadline);

#ifdef __cplusplus
}
#endif
#endif
