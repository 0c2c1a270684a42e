/* ZeRO-3's parameter side (zero3.c): the master shard, the gathered arena,
 * the model's parameter hooks and the thread that prefetches gathers. The
 * gradient side is ZeRO-2's (dp.c). Private to src/parallel. */
#ifndef DT_ZERO3_H
#define DT_ZERO3_H

#include "dtrain/comm.h"
#include "dtrain/model.h"
#include "par_internal.h"

typedef struct dt_z3 dt_z3;

typedef struct dt_z3_cfg {
    dt_model *m;
    dt_comm *comm;              /* the data-parallel group (a communicator is split from it) */
    const dt_bucket *buckets;   /* borrowed; own_off/len, state_off and the block bounds set */
    int nb;
    const int *block_bucket;    /* block -> bucket (-1: none) */
    int first, last;            /* the span of the blocks this rank trains: those in it of no bucket
                                 * (another stage's chunks, interleaved) are not its */
    size_t shard_n;             /* floats this rank owns */
    bool keep;                  /* --zero3-keep: forward's gathers kept for backward */
    bool overlap;               /* a gather thread (else gathers on the caller's thread) */
    dt_algo algo;
} dt_z3_cfg;

/* The most bytes of gathered parameters a rank holds at once with these
 * buckets: two adjacent buckets (the one in use and the next one's prefetch)
 * and the buckets other buckets read (tied tensors, held through a pass);
 * with keep every bucket; plus the tensors the blocks read that no bucket
 * holds (tied across pipeline stages: always resident). Page rounding aside. */
size_t dt_z3_gather_bound(const dt_model *m, const dt_bucket *b, int nb, const int *block_bucket, int first, int last,
                          bool keep);
/* Collective over cfg->comm. The model keeps its arena until dt_z3_adopt. */
dt_status dt_z3_create(dt_z3 **out, const dt_z3_cfg *cfg);
/* Gives the model back an ordinary arena (gathered buckets and this rank's
 * chunks, the rest zeros) and drops the hooks. NULL ok. */
void dt_z3_destroy(dt_z3 *z);
/* The parameters in m->w are the truth (after a broadcast or a load): this
 * rank's chunks become the master shard, m->w becomes the gathered arena
 * (every bucket released) and the model's hooks are set. */
void dt_z3_adopt(dt_z3 *z);
/* full: every bucket gathered (collective; the hooks stand by), for readers
 * of the whole model (checkpoints, the end of the run); !full: all released. */
dt_status dt_z3_full(dt_z3 *z, bool full);
/* hold: the buckets overlapping arena floats [lo, hi) gathered (waited for);
 * else released. Between passes (a pipeline's tied tensor sent after the
 * update). The gather's status. */
dt_status dt_z3_hold(dt_z3 *z, size_t lo, size_t hi, bool hold);
/* The first failed gather's error (sticky), or DT_OK. */
dt_status dt_z3_status(dt_z3 *z);
/* The master shard, indexed like the optimizer state. */
float *dt_z3_shard(dt_z3 *z);
/* Seconds in gathers (the thread) and waiting for them (the caller) since the last call. */
void dt_z3_take_times(dt_z3 *z, double *gather_s, double *wait_s);
/* The training step its timeouts report. */
void dt_z3_set_step(dt_z3 *z, int64_t step);
/* Bytes this rank's gathers sent. */
uint64_t dt_z3_bytes_sent(const dt_z3 *z);
/* The gathered arena's resident peak seen in the first steps. */
size_t dt_z3_resident_peak(const dt_z3 *z);
typedef void (*dt_z3_trace_fn)(void *ctx, const char *name, int bucket, double t0, double t1, bool comm_thread);
void dt_z3_set_trace(dt_z3 *z, dt_z3_trace_fn fn, void *ctx);

#endif
