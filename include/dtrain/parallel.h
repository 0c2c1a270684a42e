/* dtrain synchronous data parallelism with optional ZeRO-1/2/3 sharding.
 *
 * Every rank holds the whole model. Gradients in the flat arena are grouped
 * into buckets (contiguous arena ranges of whole blocks, built from the last
 * block backwards, each at least bucket_bytes unless it is the last). During
 * backward, as soon as every block of a bucket is done, the bucket is handed to
 * a communication thread that all-reduces it (ZeRO-0) or reduce-scatters it
 * (ZeRO-1/2) while backward continues. Averaging is exact for uneven batches:
 * each rank's loss is scaled by 1/(terms in the GLOBAL batch) and the
 * collectives SUM.
 *
 * ZeRO-1: optimizer state only for this rank's chunk of every bucket (chunk r of
 *   bucket b per the dt_chunk_* partition); after the update, parameters are
 *   all-gathered bucket by bucket.
 * ZeRO-2: additionally the gradient is kept only as this rank's shard: the
 *   gradient arena is an mmap'd region whose pages are released
 *   (MADV_DONTNEED, which also zeroes them) as soon as a bucket's
 *   reduce-scatter has added this rank's chunk into the shard.
 * ZeRO-3: additionally the parameters are kept only as this rank's chunks;
 *   each bucket is all-gathered into the model's arena before its blocks run
 *   (forward, then backward) and released after, the next bucket's gather
 *   prefetched on a thread of its own (src/parallel/zero3.c); no all-gather
 *   after the update.
 *
 * With one rank (the self communicator) the same code runs with no thread and
 * no communication. */
#ifndef DTRAIN_PARALLEL_H
#define DTRAIN_PARALLEL_H

#include "dtrain/ckpt.h"
#include "dtrain/comm.h"
#include "dtrain/gradcomp.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_dp_cfg {
    dt_algo algo;            /* all-reduce / reduce-scatter / all-gather algorithm */
    size_t bucket_bytes;     /* minimum bucket size (default 4 MiB) */
    int zero;                /* 0, 1, 2 or 3 */
    bool zero3_keep;         /* ZeRO-3: forward's gathered buckets kept for backward (one gather a
                              * micro-batch instead of two; FSDP's reshard_after_forward=False) */
    bool overlap;            /* communication thread overlapping backward (default on) */
    int first_block, last_block; /* the block range this rank trains (a pipeline stage); -1: all */
    int n_ranges;            /* > 0: it trains these ascending, disjoint block ranges instead (the
                              * chunks of an interleaved pipeline stage); buckets never span two */
    int range_first[16], range_last[16];
    dt_comm *norm_comm;      /* also sum the gradient norm over this comm (pipeline stages); NULL: none */
    dt_comm *tp_comm;        /* tensor parallelism: sum the norm of sharded tensors over it, count
                              * replicated ones once (tp rank 0); NULL: none */
    dt_gc_cfg comp;          /* gradient compression (comp.comp.kind DT_COMP_NONE: none); with
                              * ZeRO-0 the buckets' all-reduce, with ZeRO-1/2 their
                              * reduce-scatter is the compressed one (gradcomp.h) */
} dt_dp_cfg;

typedef struct dt_dp_mem {
    size_t param_bytes;      /* 4P, or ZeRO-3's master shard 4P/N and the gathered bound (dt_dp_gather_bound) */
    size_t param_gathered_peak; /* ZeRO-3: peak resident bytes of the gathered buckets (first steps) */
    size_t grad_bytes;       /* 4P (ZeRO-0/1) or 4P/N shard (ZeRO-2) */
    size_t grad_staging_peak;/* ZeRO-2: peak resident bytes of the transient gradient arena */
    size_t optim_bytes;      /* optimizer state held by this rank */
    size_t shard_floats;     /* floats this rank owns (P for ZeRO-0) */
} dt_dp_mem;

typedef struct dt_dp_stats {
    double comm_s;           /* time the communication thread spent in collectives */
    double exposed_s;        /* time the step waited for communication (not overlapped) */
    double backward_s;       /* time in backward (for the overlap fraction) */
    uint64_t bytes_sent;
    double gather_s;         /* ZeRO-3: seconds in parameter gathers (in comm_s) ... */
    double gather_wait_s;    /* ... and waiting for them (in exposed_s) */
    dt_gc_stats comp;        /* compression: time, raw and encoded bytes (zero when off) */
    int compressed_steps;    /* steps whose gradients went compressed */
} dt_dp_stats;

typedef struct dt_dp dt_dp;

void dt_dp_cfg_default(dt_dp_cfg *c);
/* m and comm are borrowed and must outlive the dp. The dp owns the optimizer
 * (full or sharded). Collective over comm (it learns comm's topology). */
dt_status dt_dp_create(dt_dp **out, dt_model *m, dt_comm *comm, const dt_dp_cfg *cfg,
                       const dt_optim_cfg *ocfg);
void dt_dp_destroy(dt_dp *dp); /* NULL ok */

/* Rank 0's parameters to every rank (under ZeRO-3 each then keeps its chunks). */
dt_status dt_dp_broadcast_params(dt_dp *dp);
/* ZeRO-3, collective: full makes m->w hold every parameter (for readers of the
 * whole model: checkpoints, the end of the run) until called with !full,
 * which releases them again. Nothing under ZeRO-0/1/2. */
dt_status dt_dp_params_full(dt_dp *dp, bool full);
/* ZeRO-3, collective: hold gathers the parameters of arena floats [lo, hi)
 * (the buckets holding them) until called with !hold; between steps (a
 * pipeline's tied tensor, sent to the stage that reads it after the update).
 * Nothing under ZeRO-0/1/2. */
dt_status dt_dp_params_hold(dt_dp *dp, size_t lo, size_t hi, bool hold);
/* ZeRO-3: the first failed parameter gather (forward, backward or an
 * evaluation gathers through the model's hooks), or DT_OK. */
dt_status dt_dp_params_status(dt_dp *dp);
/* Before each micro-batch's backward: sync says whether this micro-batch's
 * gradients are to be communicated (the last of an accumulation; ZeRO-2
 * communicates every micro-batch). */
void dt_dp_begin_backward(dt_dp *dp, bool sync);
/* dt_block_done_fn for dt_model_backward (ctx = the dp). */
void dt_dp_block_done(void *dp, int block);
/* After backward: launches any bucket not yet launched and waits for all. */
dt_status dt_dp_end_backward(dt_dp *dp);
/* Clipping (max_norm > 0), optimizer update of this rank's shard, parameter
 * all-gather (ZeRO-1/2), gradient zeroing. *gnorm gets the global gradient norm
 * before clipping (computed only when clipping or when gnorm is not NULL). */
dt_status dt_dp_step(dt_dp *dp, float lr, float max_norm, double *gnorm);
/* Waits for every bucket's collective of the step (dt_dp_step would wait
 * itself; this lets the caller use the communicators first). */
dt_status dt_dp_wait(dt_dp *dp);
/* After dt_dp_wait: whether this rank's share of the reduced gradient is finite. */
bool dt_dp_grad_finite(const dt_dp *dp);
/* After dt_dp_wait: this rank's share of the reduced gradient times f (the
 * loss scale's 1/S under --precision fp16, before clipping and dt_dp_step). */
void dt_dp_scale_grad(dt_dp *dp, float f);
/* Drops the step's gradient instead of dt_dp_step: no update, no optimizer
 * step counted, parameters unchanged (so still equal on every rank), the
 * gradient zeroed for the next backward. Every rank of the group calls it. */
dt_status dt_dp_discard(dt_dp *dp);

void dt_dp_memory(const dt_dp *dp, dt_dp_mem *mem);
/* Statistics since the last call (then reset). */
void dt_dp_take_stats(dt_dp *dp, dt_dp_stats *s);
dt_optim *dt_dp_optim(dt_dp *dp);
/* This rank's share of the optimizer state, for checkpoints (valid while dp lives). */
void dt_dp_shard(const dt_dp *dp, dt_ckpt_shard *out);
/* Sets this rank's optimizer state from full logical (arena-indexed) arrays M
 * and V (either NULL when the optimizer has no such state) and the step count.
 * Under ZeRO-3 the parameters now in m->w (a load's) become the master shard. */
void dt_dp_set_optim_state(dt_dp *dp, const float *M, const float *V, int64_t t);
/* The optimizer shard as a checkpoint part: save gives this rank's runs of
 * the optimizer state and its step count; load sets them from the logical
 * arrays M and V (arena-indexed in this rank's layout; NULL: no such state),
 * which the caller fills before the load. ctx is the caller's and must
 * outlive the part. */
typedef struct dt_dp_part_ctx {
    dt_dp *dp;
    const float *M, *V;
} dt_dp_part_ctx;
void dt_dp_part(dt_dp_part_ctx *ctx, dt_ckpt_part *part);
int dt_dp_n_buckets(const dt_dp *dp);
/* The training step the group's timeouts report (its communicators'). */
void dt_dp_set_step(dt_dp *dp, int64_t step);
/* ZeRO-3 with these buckets (whatever the stage now): the most bytes of
 * gathered parameters a rank holds at once: the bucket in use and the next
 * one's prefetch, and the buckets that tied tensors make others read (held
 * through a pass); with keep, every bucket; and a tensor tied across
 * pipeline stages that the stage reads (kept whole). */
size_t dt_dp_gather_bound(const dt_dp *dp, bool keep);
/* The bucket whose highest block is top, among blocks [first, top]: returns its
 * lowest block, the first one walking down from top at which the bucket holds
 * at least min_floats parameters, or first. The next bucket starts below it.
 * Data parallelism builds its buckets so (with min_floats = bucket_bytes / 4)
 * and the planner prices the same ones. */
int dt_dp_bucket_low(const dt_model *m, int first, int top, size_t min_floats);
/* Every bucket of the n ascending block ranges [first[r], last[r]], in the
 * order backward finishes them (the highest range's highest bucket first):
 * bucket k is blocks low[k]..top[k]. Their count, at most cap. */
int dt_dp_buckets(const dt_model *m, const int *first, const int *last, int n, size_t min_floats, int *low, int *top,
                  int cap);
/* dt_dp_gather_bound for the n ascending block ranges [first[r], last[r]]
 * of m (a stage's chunks; one range but interleaved) in buckets of at least
 * min_floats, without a group (the planner's); 0 when out of memory. */
size_t dt_dp_gather_bound_of(const dt_model *m, const int *first, const int *last, int n, size_t min_floats, bool keep);
/* The compression session (error-feedback residual, PowerSGD's Q), or NULL. */
dt_gc *dt_dp_gc(dt_dp *dp);

/* Optional timeline hook: called on the communication thread for each bucket
 * collective (and on the calling thread for all-gathers) with monotonic
 * start/end seconds. */
typedef void (*dt_dp_trace_fn)(void *ctx, const char *name, int bucket, double t0, double t1,
                               bool comm_thread);
void dt_dp_set_trace(dt_dp *dp, dt_dp_trace_fn fn, void *ctx);

/* An arena of `floats` floats in an anonymous mapping whose ranges can be
 * handed back to the kernel (they read as zeros and fault in again when
 * written): ZeRO-2's gradients, ZeRO-3's parameters, and the planner's
 * profile of what re-faulting them costs (arena_map.c). */
typedef struct dt_arena_map {
    void *map;
    size_t map_len;
    float *base;              /* the arena: 2 MiB aligned */
    size_t bytes;             /* its bytes (at least 1) */
    size_t page_floats;       /* release granularity: the arena's page size */
} dt_arena_map;

/* Maps the arena (zeroed); what names it in the error. `unit` is the
 * typical range released (floats): 2 MiB pages are asked for when it spans
 * at least one (far fewer faults; a release hands back the huge pages
 * wholly inside the range), 4 KiB pages otherwise (a release smaller than a
 * huge page would hand nothing back). */
dt_status dt_arena_map_create(dt_arena_map *a, size_t floats, size_t unit, const char *what);
void dt_arena_map_destroy(dt_arena_map *a); /* zeroed struct ok */
/* Zeroes [lo, hi): the pages wholly inside it are released, the partial
 * pages at its edges zeroed by hand. */
void dt_arena_release(const dt_arena_map *a, size_t lo, size_t hi);
/* Faults the pages of [lo, hi) in at once (MADV_POPULATE_WRITE, where the
 * kernel has it: one call instead of a fault a page); their contents kept. */
void dt_arena_populate(const dt_arena_map *a, size_t lo, size_t hi);
/* The arena's resident bytes now (mincore). */
size_t dt_arena_resident(const dt_arena_map *a);

#ifdef __cplusplus
}
#endif
#endif
