/* What src/plan's files share: a pipeline stage's costs per sample, summed over
 * its blocks (layouts.c fills them), and the memory of a layout from them. */
#ifndef DTRAIN_PLAN_INTERNAL_H
#define DTRAIN_PLAN_INTERNAL_H

#include "dtrain/pipeline.h"
#include "dtrain/plan.h"

typedef struct stage_cost {
    double flops, tp_bytes, params, acts, bound; /* per sample, floats for the last three */
    int blocks;
    const dt_model *model;   /* the compiled model (this layout's tp), valid while
                              * dt_plan_predict runs: layout_memory.c reads it */
    int nr;                  /* its block ranges: its chunks, ascending (1, or V
                              * under the interleaved schedule) */
    int first[DT_PIPE_MAX_VIRTUAL], last[DT_PIPE_MAX_VIRTUAL]; /* range r's blocks */
} stage_cost;

/* The runtime's schedule of a planned one. */
static inline dt_pipe_schedule plan_pipe_kind(dt_plan_sched s) {
    return s == DT_PLAN_GPIPE ? DT_SCHED_GPIPE : s == DT_PLAN_1F1B ? DT_SCHED_1F1B : DT_SCHED_INTERLEAVED;
}
/* Chunks per stage of layout l: V under the interleaved schedule with a
 * pipeline, else 1 (as src/train/setup.c counts them). */
static inline int plan_virt(const dt_plan_layout *l) {
    return l->sched == DT_PLAN_INTERLEAVED && l->pp > 1 && l->virt > 1 ? l->virt : 1;
}
/* The stage's gradient buckets as dt_dp builds them (parallel.h): its block
 * ranges from the last, each cut from its top block down into whole blocks
 * of at least the default bucket_bytes of gradients (dt_dp_bucket_low), the
 * range's first block closing the last; bucket k is blocks low[k]..top[k].
 * Their count (at most cap). */
int plan_buckets(const stage_cost *w, int *low, int *top, int cap);

/* The memory of layout l with stage costs sc[0..l->pp) into p->mem (the stage
 * that needs the most, layout_memory.c's opening comment) and p->fits against
 * the cluster's memory per rank. DT_ERR_INVALID for degrees, micro-batches or
 * a batch below 1. */
dt_status plan_layout_memory(const dt_plan_in *in, const dt_plan_layout *l, const stage_cost *sc, dt_plan_pred *p);
/* The memory of stage s's rank that holds the most (data-parallel rank 0),
 * by kind, into *out: layout_memory.c's accounting, sc stage s's cost (its
 * model pointer valid). No failure: the caller checked the layout. */
void plan_stage_memory(const dt_plan_in *in, const dt_plan_layout *l, const stage_cost *sc, int s, dt_plan_mem *out);
/* Floats dt_acts_create(m, first, last, B) allocates, or dt_acts_create_shared
 * (boundaries and gradient buffers only) when shared. */
double plan_acts_floats(const dt_model *m, int first, int last, int B, bool shared);

/* No core to spare: as many ranks as cores or more on one set of them
 * (dt_plan_ranks_sharing). */
static inline bool plan_oversubscribed(const dt_plan_cluster *c) {
    int cores, ranks = dt_plan_ranks_sharing(c, &cores);
    return ranks >= cores;
}
/* More ranks than cores: the ranks take turns on them. */
static inline bool plan_time_sliced(const dt_plan_cluster *c) {
    int cores, ranks = dt_plan_ranks_sharing(c, &cores);
    return ranks > cores;
}

/* ---- communication (plan_comm.c) ---- */
/* The link a message of msg bytes takes: local, or across hosts at the rate
 * measured for its size. */
dt_link_cost plan_link(const dt_plan_cluster *c, bool cross, double msg);
/* One of n messages a step of `bytes` from each of `share` ranks through one
 * link (cross: across hosts), `gap` seconds of the link's quiet between two:
 * alpha + bytes x share x beta, less, at the local rate, the mean of what the
 * burst passes (c->cross_burst: full at the step's first message, the link
 * quiet since the last step's; then refilled at the link's fitted rate). */
double plan_p2p(const dt_plan_cluster *c, bool cross, double bytes, int share, double gap, int n);
/* A ring-or-better all-reduce of `bytes` on hosts x per_host (dt_allreduce_predict),
 * `share` such all-reduces crossing each host's link at once. */
double plan_ar(const dt_plan_cluster *c, int hosts, int per_host, int share, double bytes);
/* The hosts a stage's dp group (ranks tp apart) spans, its ranks per host, and
 * (share not NULL) how many of the stage's dp groups use one host link at once. */
void plan_dp_span(const dt_plan_cluster *c, const dt_plan_layout *l, int *hosts, int *per, int *share);
/* Bytes per value a codec puts on the wire (topk: value plus its index's varint). */
double plan_codec_bytes(const dt_comp_cfg *cc);
/* Seconds of the gradient reduction of stage cost w exposed after its last
 * backward of last_bwd seconds (plain or compressed, all-reduce or ZeRO's
 * reduce-scatter). */
double plan_dp_exposed(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w, double last_bwd);
/* The parameter all-gathers' exposed seconds: ZeRO 1/2's after the update;
 * ZeRO-3's around each micro-batch's forward (fwd seconds) and backward (bwd),
 * prefetched bucket by bucket (plan_comm.c's opening comment); under ZeRO-2/3
 * with the re-faults of the pages they release (staging_s_per_byte). */
double plan_zero_gather(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w, double fwd, double bwd);
/* The parameter server's exposed push, sum, apply and pull (BSP). */
double plan_ps_exposed(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w, double last_bwd);

#endif
