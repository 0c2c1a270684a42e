/* A layout's memory per rank (plan_internal.h), as dtrain allocates it (the
 * kinds of the run's end-of-run report, include/dtrain/report.h), for the
 * rank of each pipeline stage that holds the most (data-parallel rank 0: the
 * first chunks are the longer ones); the stage that needs the most is the
 * layout's. With A the floats of the rank's parameter arena (its tensor-
 * parallel shard of the whole model: every stage allocates every stage's
 * parameters and gradients), R its stage's range, S its shard (R, or the sum
 * over the stage's gradient buckets of its chunk of each under ZeRO 1/2),
 * b = ceil(ceil(batch / dp) / M) samples a micro-batch (M = 1 without a
 * pipeline) and K bytes of optimizer state a parameter (AdamW 8, SGD 4):
 *   params   4A, or under ZeRO-3 4S + G: the shard and what the gathers
 *            hold at once (dt_dp_gather_bound_of: the largest two adjacent
 *            buckets, one in use and the next prefetched, the buckets
 *            another bucket's blocks read, tied tensors held through a pass,
 *            and a tensor tied across stages, kept whole by its reader)
 *   grads    4A, or 4S under ZeRO-2 and 3
 *   staging  ZeRO-2's transient gradient arena at its peak: when the host's
 *            ranks leave no core to spare (the step model's reading too:
 *            the reduction cannot keep up with backward) the stage's whole
 *            range R, else the two largest buckets (one reduced while
 *            backward fills the next; one when dp = 1); plus the tensors the
 *            stage uses but another block owns (a tied LM head's gradient)
 *   optim    K S
 *   acts     dt_acts_create's sizes at b: without a pipeline the training set
 *            and the evaluation set (max(b, 16) sequences, or 256 samples);
 *            with one, each of the stage's chunks keeps the sets its ring
 *            holds (dt_pipe_sched_depths: GPipe M, 1F1B P - s at most M, the
 *            interleaved schedule's per chunk); with recomputation each slot
 *            keeps only its boundaries and gradient buffers, and one whole
 *            set a chunk is shared
 *   buffers  the pipeline's input-gradient buffer per slot (chunks but the
 *            model's first) and one output-gradient buffer (the largest output
 *            of the stage's chunks but the model's last); compression's residual (4A
 *            with error feedback), two bucket-sized float buffers and the
 *            encodings of every rank
 *   copy     with tp or pp, the unsharded model's parameter and gradient
 *            arenas (8 bytes a logical parameter); with tp also the
 *            checkpoints' gather buffers, the optimizer's two moments local
 *            and logical (8 (A + L), L the logical floats), which a run holds
 *            once it has a checkpoint directory: every CLI run with --out
 *            (where a stop writes)
 *   base     the cluster's: the runtime and the data, and MPI's share when the
 *            world has more than one rank (dtrain plan --calibrate)
 * The resident peak is the base and the larger of the kinds' sum and, under
 * ZeRO-2 and 3, its setup: the model's two arenas (the gradient one not yet swapped
 * for the staging arena) and the unsharded model's, 8A (+ 8L with tp or pp),
 * before anything else of the run is allocated.
 * Each array is rounded to 16 floats as dt_alloc_floats rounds it; buckets are
 * built as src/parallel/dp.c builds them at the default --bucket-mb; b is
 * the largest shard's (the whole batch when split by speed). Not modelled:
 * --accum and --bucket-mb other than their defaults, the parameter server's
 * own layout (counted as data parallelism), MPI's and the collectives' own
 * buffers (in the base). Cost: O(blocks x tensors) a stage. */
#include "plan_internal.h"

#include "dtrain/gradcomp.h"
#include "dtrain/parallel.h"

#include <math.h>

static double r16(double n) { return (double)dt_alloc_floats_held((size_t)ceil(n)); }

double plan_acts_floats(const dt_model *m, int first, int last, int B, bool shared) {
    double total = 0, maxdim = 0, scratch = 0;
    for (int i = first; i <= last + 1; i++) {
        double dim = (double)(i <= last ? m->blocks[i].in_dim : m->blocks[last].out_dim);
        maxdim = dim > maxdim ? dim : maxdim;
        total += r16(dim * B);
    }
    for (int i = first; i <= last && !shared; i++) {
        const dt_block *b = &m->blocks[i];
        total += r16((double)b->ops->saved_floats(b, B));
        double s = (double)b->ops->scratch_floats(b, B);
        scratch = s > scratch ? s : scratch;
    }
    return total + (shared ? 0 : r16(scratch)) + 2 * r16(maxdim * B);
}

/* The stage's gradient buckets as dt_dp builds them (plan_buckets): the shard
 * of data-parallel rank 0 of dp and the two largest buckets, in floats. */
static void buckets(const stage_cost *sc, int dp, bool sharded, double *shard, double *big2, double *big1) {
    const dt_model *m = sc->model;
    int lows[4096], tops[4096], nb = plan_buckets(sc, lows, tops, 4096);
    double b1 = 0, b2 = 0, sum = 0;
    for (int k = 0; k < nb; k++) {
        size_t n = m->blocks[tops[k]].param_hi - m->blocks[lows[k]].param_lo;
        sum += sharded ? (double)dt_chunk_len(n, dp, 0) : (double)n;
        if ((double)n > b1) b2 = b1, b1 = (double)n;
        else if ((double)n > b2) b2 = (double)n;
    }
    *shard = sum;
    *big1 = b1;
    *big2 = b1 + b2;
}

/* Whether block b is one of the stage's. */
static bool holds(const stage_cost *sc, int b) {
    for (int r = 0; r < sc->nr; r++)
        if (b >= sc->first[r] && b <= sc->last[r]) return true;
    return false;
}

/* Floats of the tensors blocks of the stage use but do not own (ties across
 * stages: their gradient pages stay resident in ZeRO-2's staging arena), and
 * of all tied tensors the stage uses (written early in backward). */
static void tied(const stage_cost *sc, double *foreign, double *all) {
    const dt_model *m = sc->model;
    *foreign = *all = 0;
    for (int r = 0; r < sc->nr; r++)
        for (int i = sc->first[r]; i <= sc->last[r]; i++) {
            const dt_block *b = &m->blocks[i];
            for (int t = 0; t < b->n_tensors; t++)
                for (int k = 0; k < m->n_params; k++) {
                    const dt_param *p = &m->params[k];
                    if (p->offset != b->off[t] || p->block == i) continue;
                    *all += (double)p->numel;
                    if (!holds(sc, p->block)) *foreign += (double)p->numel;
                }
        }
}

/* Floats of the unsharded model's arena (what the logical model allocates). */
static double logical_floats(const dt_model *m) {
    double n = 0;
    for (int k = 0; k < m->n_params; k++) n += r16((double)m->params[k].lnumel);
    return n;
}

/* ZeRO-2's staging peak in floats (see the opening comment). */
static double staging(const dt_plan_in *in, const dt_plan_layout *l, const stage_cost *sc, double big2, double big1) {
    double foreign, all;
    tied(sc, &foreign, &all);
    int hosts, per;
    plan_dp_span(in->cluster, l, &hosts, &per, NULL);
    if (l->dp > 1 && hosts == 1 && plan_oversubscribed(in->cluster)) return sc->params + foreign;
    return (l->dp > 1 ? big2 : big1) + all;
}

/* Activations and pipeline buffers of stage s at micro-batch b, in floats:
 * each of its chunks keeps the activation sets the schedule keeps alive in it
 * (dt_pipe_sched_depths, the runtime's ring depth) and an input-gradient
 * buffer per set (but the first chunk of the model), and two buffers for each
 * direction it receives in (pipeline.c's receives posted one ahead): its
 * input's activations (but the model's first chunk), its output's gradients
 * (but the last). */
static void stage_acts(const dt_plan_layout *l, const stage_cost *sc, int s, int b, double *acts, double *bufs) {
    const dt_model *m = sc->model;
    int P = l->pp, M = l->micro, V = sc->nr, C = P * V, depth[DT_PIPE_MAX_VIRTUAL];
    *acts = *bufs = 0;
    if (P == 1) {
        int eB = m->input == DT_INPUT_TOKENS ? (b > 16 ? b : 16) : 256;
        *acts = plan_acts_floats(m, 0, m->n_blocks - 1, b, false) + plan_acts_floats(m, 0, m->n_blocks - 1, eB, false);
        return;
    }
    dt_pipe_sched_depths(plan_pipe_kind(l->sched), P, V, s, M, depth);
    for (int j = 0; j < V; j++) {
        int first = sc->first[j], last = sc->last[j], c = s + j * P;
        double whole = plan_acts_floats(m, first, last, b, false);
        *acts += l->recompute ? whole + depth[j] * plan_acts_floats(m, first, last, b, true) : depth[j] * whole;
        if (c > 0) *bufs += (depth[j] + 2) * r16((double)m->blocks[first].in_dim * b);
        if (c < C - 1) *bufs += 2 * r16((double)m->blocks[last].out_dim * b);
    }
}

/* Compression's buffers in bytes (gradcomp.c): the residual, two float
 * buffers of the largest bucket, its encoding and every rank's. */
static double codec_bytes(const dt_plan_layout *l, double arena, double big1) {
    if (l->comp.kind == DT_COMP_NONE || l->dp < 2) return 0;
    dt_gc_cfg gc = {.comp = l->comp, .error_feedback = -1};
    double ef = dt_gc_cfg_uses_ef(&gc) ? 4 * arena : 0;
    return ef + 8 * r16(big1) + (l->dp + 1) * plan_codec_bytes(&l->comp) * big1;
}

void plan_stage_memory(const dt_plan_in *in, const dt_plan_layout *l, const stage_cost *sc, int s, dt_plan_mem *out) {
    const dt_model *m = sc->model;
    /* a rank's largest shard (the whole batch when split by speed, as setup.c sizes it), per micro-batch */
    double shard_max = l->balance ? in->batch : ceil((double)in->batch / l->dp);
    int b = (int)ceil(shard_max / (l->pp > 1 ? l->micro : 1));
    double arena = (double)m->n, shard, big2, big1, acts, bufs;
    buckets(sc, l->dp, l->zero > 0, &shard, &big2, &big1);
    stage_acts(l, sc, s, b, &acts, &bufs);
    dt_dp_cfg dc;
    dt_dp_cfg_default(&dc);
    out->params = l->zero == 3 ? 4 * shard + (double)dt_dp_gather_bound_of(m, sc->first, sc->last, sc->nr,
                                                                            dc.bucket_bytes / sizeof(float), false)
                               : 4 * arena;
    out->grads = 4 * (l->zero >= 2 ? shard : arena);
    out->staging = l->zero >= 2 ? 4 * staging(in, l, sc, big2, big1) : 0;
    out->optim = (in->adam ? 8 : 4) * shard;
    out->acts = 4 * acts;
    out->buffers = 4 * bufs + codec_bytes(l, arena, big1);
    double logical = l->tp > 1 ? logical_floats(m) : arena;
    out->copy = (l->tp > 1 || l->pp > 1 ? 8 * logical : 0) + (l->tp > 1 ? 8 * (arena + logical) : 0);
    const dt_plan_cluster *c = in->cluster;
    out->base = c->base + (c->hosts * c->per_host > 1 ? c->mpi_base : 0);
    out->setup = l->zero >= 2 ? 8 * arena + (l->tp > 1 || l->pp > 1 ? 8 * logical : 0) : 0;
    double own = out->params + out->grads + out->staging + out->optim + out->acts + out->buffers + out->copy;
    out->total = out->base + (own > out->setup ? own : out->setup);
}

dt_status plan_layout_memory(const dt_plan_in *in, const dt_plan_layout *l, const stage_cost *sc, dt_plan_pred *p) {
    if (l->dp < 1 || l->pp < 1 || l->micro < 1 || in->batch < 1)
        return dt_errorf(DT_ERR_INVALID, "plan: memory of dp %d x pp %d, %d micro-batches, batch %d", l->dp, l->pp,
                         l->micro, in->batch);
    p->mem.total = -1;
    for (int s = 0; s < l->pp; s++) {
        dt_plan_mem m;
        plan_stage_memory(in, l, &sc[s], s, &m);
        if (m.total > p->mem.total) p->mem = m;
    }
    p->fits = p->mem.total <= in->cluster->memory;
    return DT_OK;
}
