/* Synchronous data parallelism: gradient buckets, a communication thread that
 * overlaps their collectives with backward, and ZeRO-1/2 sharding of the
 * optimizer state and gradients. See include/dtrain/parallel.h.
 *
 * Ordering contract: every rank launches buckets in the same order (0, 1, ...),
 * which is the order backward finishes them; a rank with no samples still
 * launches all of them in end_backward, so no rank waits on a collective the
 * others never start. */
#include "dtrain/parallel.h"

#include "zero3.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef dt_bucket bucket;

struct dt_dp {
    dt_model *m;
    dt_comm *comm;
    dt_dp_cfg cfg;
    int rank, size;
    int nb;
    bucket *b;
    int *block_bucket;        /* block -> bucket */
    dt_optim *opt;
    size_t shard;             /* floats owned (P for ZeRO-0) */
    float *gshard;            /* ZeRO-2/3 gradient shard (shard floats) */
    dt_arena_map gmap;        /* ZeRO-2/3: the staging arena m->g lies in */
    bool g_mapped;            /* m->g is gmap's */
    dt_z3 *z3;                /* ZeRO-3: the parameters' side */

    /* communication thread */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int launched;             /* buckets handed over this backward */
    int completed;            /* buckets finished this backward */
    bool sync;                /* this backward communicates */
    bool deferred;            /* end_backward left the wait to dt_dp_step (ZeRO-0) */
    bool quit;
    dt_status err;
    char errmsg[1024];

    dt_dp_stats stats;
    uint64_t bytes_mark;
    size_t *sh_off, *sh_len, *sh_state; /* per bucket, for checkpoints */
    size_t staging_peak;      /* ZeRO-2: the staging arena's resident peak, seen by backward */
    size_t staging_peak_comm; /* ... and by the communication thread, just before each release */
    dt_dp_trace_fn trace;
    void *trace_ctx;
    dt_gc *gc;                /* gradient compression, or NULL */
    bool compress_now;        /* this backward's buckets go compressed (past the warm-up) */
    uint64_t stream;          /* optimizer step count at begin_backward: rounding streams */
};

void dt_dp_cfg_default(dt_dp_cfg *c) {
    c->algo = DT_ALGO_AUTO;
    c->bucket_bytes = 4u << 20;
    c->zero = 0;
    c->overlap = true;
    c->first_block = c->last_block = -1;
    c->norm_comm = NULL;
    c->tp_comm = NULL;
    memset(&c->comp, 0, sizeof c->comp);
    c->comp.comp.kind = DT_COMP_NONE;
    c->comp.error_feedback = -1;
}

/* ---- the collective of one bucket ------------------------------------------- */

static void add_chunk(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* ZeRO-2's gradient arena: a mapping whose pages are released after each
 * bucket's reduce-scatter (par_internal.h); the model's own goes first, so
 * the rank never holds it beside the shard and the optimizer state. */
static dt_status map_staging(dt_dp *dp) {
    dt_status st = dt_arena_map_create(&dp->gmap, dp->m->n, dp->m->n, "ZeRO-2 gradient staging arena");
    if (st) return st;
    dt_free(dp->m->g);
    dp->m->g = dp->gmap.base;
    dp->g_mapped = true;
    return DT_OK;
}

static void release_range(dt_dp *dp, size_t lo, size_t hi) { dt_arena_release(&dp->gmap, lo, hi); }

/* ZeRO-2: the staging arena's residency into *peak when it is higher. Only in
 * the first steps: every step repeats the same pattern, and a full mincore
 * pass per bucket on every step would cost O(buckets x P) page-table walks. */
static void sample_staging(const dt_dp *dp, size_t *peak) {
    if (dp->opt->t >= 3) return;
    size_t r = dt_arena_resident(&dp->gmap);
    if (r > *peak) *peak = r;
}

static dt_status run_bucket(dt_dp *dp, int k) {
    bucket *b = &dp->b[k];
    float *g = dp->m->g + b->lo;
    size_t n = b->hi - b->lo;
    double t0 = dt_now();
    dt_status st = DT_OK;
    uint64_t stream = dp->stream * (uint64_t)dp->nb + (uint64_t)k;
    if (dp->compress_now && dp->cfg.zero == 0) {
        st = dt_gc_allreduce(dp->gc, dp->comm, dp->m->g, b->lo, b->hi, stream, dp->cfg.algo);
    } else if (dp->cfg.zero == 0) {
        st = dt_allreduce(dp->comm, g, n, DT_OP_SUM, dp->cfg.algo);
    } else {
        st = dp->compress_now ? dt_gc_reduce_scatter(dp->gc, dp->comm, dp->m->g, b->lo, b->hi, stream, dp->cfg.algo)
                              : dt_reduce_scatter(dp->comm, g, n, DT_OP_SUM, dp->cfg.algo);
        if (!st && dp->cfg.zero >= 2) {
            add_chunk(dp->gshard + b->state_off, dp->m->g + b->own_off, b->own_len);
            /* The arena's residency peaks just before a release: backward has
             * written buckets the thread has not reached yet. */
            sample_staging(dp, &dp->staging_peak_comm);
            release_range(dp, b->lo, b->hi);
        }
    }
    double t1 = dt_now();
    dp->stats.comm_s += t1 - t0;
    if (dp->trace)
        dp->trace(dp->trace_ctx, dp->compress_now ? (dp->cfg.zero ? "compressed_reduce_scatter" : "compressed_allreduce")
                                                  : (dp->cfg.zero ? "reduce_scatter" : "allreduce"),
                  k, t0, t1, dp->cfg.overlap);
    return st;
}

static void *comm_thread(void *arg) {
    dt_dp *dp = arg;
    pthread_mutex_lock(&dp->mu);
    for (;;) {
        while (!dp->quit && dp->completed >= dp->launched) pthread_cond_wait(&dp->cv, &dp->mu);
        if (dp->quit) break;
        int k = dp->completed;
        bool failed = dp->err != DT_OK;
        pthread_mutex_unlock(&dp->mu);
        /* After a failure the remaining buckets are skipped, not communicated. */
        dt_status st = failed ? DT_OK : run_bucket(dp, k);
        pthread_mutex_lock(&dp->mu);
        if (st && !dp->err) {
            dp->err = st;
            snprintf(dp->errmsg, sizeof dp->errmsg, "%s", dt_error_msg());
        }
        dp->completed++;
        pthread_cond_broadcast(&dp->cv);
    }
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

/* ---- construction ----------------------------------------------------------------- */

/* The block ranges a rank trains (cfg's list, or its one range [first_block,
 * last_block], or every block) into first/last; their count. */
static int cfg_ranges(const dt_dp_cfg *c, const dt_model *m, int *first, int *last) {
    if (c->n_ranges > 0) {
        memcpy(first, c->range_first, (size_t)c->n_ranges * sizeof(int));
        memcpy(last, c->range_last, (size_t)c->n_ranges * sizeof(int));
        return c->n_ranges;
    }
    first[0] = c->first_block < 0 ? 0 : c->first_block;
    last[0] = c->last_block < 0 ? m->n_blocks - 1 : c->last_block;
    return 1;
}

static dt_status build_buckets(dt_dp *dp) {
    dt_model *m = dp->m;
    size_t min_floats = dp->cfg.bucket_bytes / sizeof(float);
    if (min_floats == 0) min_floats = 1;
    dp->b = dt_calloc((size_t)m->n_blocks, sizeof(bucket));
    dp->block_bucket = dt_calloc((size_t)m->n_blocks, sizeof(int));
    if (!dp->b || !dp->block_bucket) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    int first[16], last[16], nr = cfg_ranges(&dp->cfg, m, first, last);
    int *low = dt_calloc((size_t)m->n_blocks, sizeof(int)), *top = dt_calloc((size_t)m->n_blocks, sizeof(int));
    if (!low || !top) {
        dt_free(low);
        dt_free(top);
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < m->n_blocks; i++) dp->block_bucket[i] = -1;
    /* Blocks own adjacent arena ranges in forward order: a bucket of blocks
     * [low, top] is the range [low's lo, top's hi). The lowest may hold no
     * parameters (parameter-free blocks below the last full bucket). */
    dp->nb = dt_dp_buckets(m, first, last, nr, min_floats, low, top, m->n_blocks);
    for (int k = 0; k < dp->nb; k++) {
        dp->b[k] = (bucket){.lo = m->blocks[low[k]].param_lo, .hi = m->blocks[top[k]].param_hi,
                            .first_block = low[k], .top_block = top[k]};
        for (int i = low[k]; i <= top[k]; i++) dp->block_bucket[i] = k;
    }
    dt_free(low);
    dt_free(top);
    size_t soff = 0;
    for (int i = 0; i < dp->nb; i++) {
        bucket *b = &dp->b[i];
        size_t n = b->hi - b->lo;
        if (dp->cfg.zero) {
            b->own_off = b->lo + dt_chunk_off(n, dp->size, dp->rank);
            b->own_len = dt_chunk_len(n, dp->size, dp->rank);
        } else {
            b->own_off = b->lo;
            b->own_len = n;
        }
        b->state_off = soff;
        soff += b->own_len;
    }
    dp->shard = soff;
    dp->sh_off = dt_calloc((size_t)dp->nb, sizeof(size_t));
    dp->sh_len = dt_calloc((size_t)dp->nb, sizeof(size_t));
    dp->sh_state = dt_calloc((size_t)dp->nb, sizeof(size_t));
    if (!dp->sh_off || !dp->sh_len || !dp->sh_state) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < dp->nb; i++) {
        dp->sh_off[i] = dp->b[i].own_off;
        dp->sh_len[i] = dp->b[i].own_len;
        dp->sh_state[i] = dp->b[i].state_off;
    }
    return DT_OK;
}

dt_status dt_dp_create(dt_dp **out, dt_model *m, dt_comm *comm, const dt_dp_cfg *cfg,
                       const dt_optim_cfg *ocfg) {
    *out = NULL;
    if (cfg->zero < 0 || cfg->zero > 3) return dt_errorf(DT_ERR_INVALID, "--zero must be 0, 1, 2 or 3, got %d", cfg->zero);
    if (cfg->n_ranges < 0 || cfg->n_ranges > 16) return dt_errorf(DT_ERR_INVALID, "%d block ranges: at most 16", cfg->n_ranges);
    dt_dp *dp = dt_calloc(1, sizeof *dp);
    if (!dp) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    dp->m = m;
    dp->comm = comm;
    dp->cfg = *cfg;
    dp->rank = dt_comm_rank(comm);
    dp->size = dt_comm_size(comm);
    pthread_mutex_init(&dp->mu, NULL);
    pthread_cond_init(&dp->cv, NULL);
    /* The group's topology now, on this thread: later the communication
     * thread would make it (MPI splits) while this one computes. */
    dt_comm_topo_info ti;
    dt_status st = dt_comm_topology(comm, &ti);
    if (!st) st = build_buckets(dp);
    if (st) goto fail;
    if (cfg->zero >= 2) {
        /* ZeRO-2's resident peak is that of its steps, not of its setup. */
        if ((st = map_staging(dp))) goto fail;
        if (!(dp->gshard = dt_alloc_floats(dp->shard))) {
            st = dt_errorf(DT_ERR_NOMEM, "cannot allocate the ZeRO-2 gradient shard");
            goto fail;
        }
    }
    if (cfg->zero == 3) {
        int first[16], last[16], nr = cfg_ranges(cfg, m, first, last);
        dt_z3_cfg zc = {.m = m, .comm = comm, .buckets = dp->b, .nb = dp->nb, .block_bucket = dp->block_bucket,
                        .first = first[0], .last = last[nr - 1],
                        .shard_n = dp->shard, .keep = cfg->zero3_keep, .overlap = cfg->overlap, .algo = cfg->algo};
        if ((st = dt_z3_create(&dp->z3, &zc))) goto fail;
    }
    if ((st = dt_optim_create(&dp->opt, ocfg, dp->shard))) goto fail;
    if (dp->size > 1 && cfg->comp.comp.kind != DT_COMP_NONE) {
        size_t maxb = 0;
        for (int k = 0; k < dp->nb; k++)
            if (dp->b[k].hi - dp->b[k].lo > maxb) maxb = dp->b[k].hi - dp->b[k].lo;
        dt_gc_cfg gcfg = cfg->comp;
        if ((st = dt_gc_create(&dp->gc, &gcfg, m, dp->rank, dp->size, maxb))) goto fail;
    }
    if (dp->size > 1 && cfg->overlap) {
        if (pthread_create(&dp->thread, NULL, comm_thread, dp) != 0) {
            st = dt_errorf(DT_ERR_NOMEM, "cannot start the communication thread");
            goto fail;
        }
        dp->thread_started = true;
    }
    *out = dp;
    return DT_OK;
fail:
    dt_dp_destroy(dp);
    return st;
}

void dt_dp_destroy(dt_dp *dp) {
    if (!dp) return;
    if (dp->thread_started) {
        pthread_mutex_lock(&dp->mu);
        dp->quit = true;
        pthread_cond_broadcast(&dp->cv);
        pthread_mutex_unlock(&dp->mu);
        pthread_join(dp->thread, NULL);
    }
    if (dp->g_mapped) {
        /* Hand the model back an ordinary gradient arena. */
        float *g = dt_alloc_floats(dp->m->n);
        if (g) memcpy(g, dp->m->g, dp->m->n * sizeof(float));
        dt_arena_map_destroy(&dp->gmap);
        dp->m->g = g;
    }
    dt_z3_destroy(dp->z3);
    pthread_mutex_destroy(&dp->mu);
    pthread_cond_destroy(&dp->cv);
    dt_optim_destroy(dp->opt);
    dt_gc_destroy(dp->gc);
    dt_free(dp->gshard);
    dt_free(dp->b);
    dt_free(dp->block_bucket);
    dt_free(dp->sh_off);
    dt_free(dp->sh_len);
    dt_free(dp->sh_state);
    dt_free(dp);
}

dt_status dt_dp_broadcast_params(dt_dp *dp) {
    dt_status st = DT_OK;
    if (dp->size > 1)
        st = dt_bcast(dp->comm, dp->m->w, dp->m->n * sizeof(float), 0, dp->cfg.algo == DT_ALGO_NATIVE ? DT_ALGO_NATIVE : DT_ALGO_AUTO);
    if (!st && dp->z3) dt_z3_adopt(dp->z3);
    return st;
}

dt_status dt_dp_params_full(dt_dp *dp, bool full) { return dp->z3 ? dt_z3_full(dp->z3, full) : DT_OK; }

dt_status dt_dp_params_hold(dt_dp *dp, size_t lo, size_t hi, bool hold) {
    return dp->z3 ? dt_z3_hold(dp->z3, lo, hi, hold) : DT_OK;
}

dt_status dt_dp_params_status(dt_dp *dp) { return dp->z3 ? dt_z3_status(dp->z3) : DT_OK; }

/* ---- backward ------------------------------------------------------------------------ */

static dt_status wait_upto(dt_dp *dp, int k);

void dt_dp_begin_backward(dt_dp *dp, bool sync) {
    if (dp->deferred) {
        /* Not expected (dt_dp_step consumes it), but never reset under a running bucket. */
        (void)wait_upto(dp, dp->nb - 1);
        dp->deferred = false;
    }
    dp->sync = sync || dp->cfg.zero >= 2;
    dp->stream = (uint64_t)dp->opt->t;
    dp->compress_now = dp->gc && dp->opt->t >= dp->cfg.comp.warmup;
    pthread_mutex_lock(&dp->mu);
    dp->launched = 0;
    dp->completed = 0;
    pthread_mutex_unlock(&dp->mu);
}

static dt_status launch_upto(dt_dp *dp, int k) {
    /* Hand buckets [launched, k] over, in order. */
    if (!dp->sync) return DT_OK;
    if (dp->size == 1) {
        if (dp->cfg.zero >= 2) {
            /* One rank: the reduce-scatter is the identity; move into the shard. */
            for (int i = dp->launched; i <= k; i++) {
                bucket *b = &dp->b[i];
                add_chunk(dp->gshard + b->state_off, dp->m->g + b->own_off, b->own_len);
                sample_staging(dp, &dp->staging_peak);
                release_range(dp, b->lo, b->hi);
            }
        }
        if (k + 1 > dp->launched) dp->launched = k + 1;
        return DT_OK;
    }
    if (!dp->thread_started) {
        double t0 = dt_now();
        dt_status st = DT_OK;
        for (int i = dp->launched; i <= k && !st; i++) {
            st = run_bucket(dp, i);
            dp->launched = i + 1;
        }
        dp->stats.exposed_s += dt_now() - t0;
        return st;
    }
    pthread_mutex_lock(&dp->mu);
    if (k + 1 > dp->launched) {
        dp->launched = k + 1;
        pthread_cond_broadcast(&dp->cv);
    }
    pthread_mutex_unlock(&dp->mu);
    return DT_OK;
}

void dt_dp_block_done(void *ctx, int block) {
    dt_dp *dp = ctx;
    int k = dp->block_bucket[block];
    if (k >= 0 && dp->b[k].first_block == block) {
        if (dp->g_mapped && dp->sync && dp->size > 1) sample_staging(dp, &dp->staging_peak);
        launch_upto(dp, k);
    }
}

/* Waits until buckets [0, k] are done (or a bucket failed). */
static dt_status wait_upto(dt_dp *dp, int k) {
    double t0 = dt_now();
    pthread_mutex_lock(&dp->mu);
    while (dp->completed <= k && !dp->err) pthread_cond_wait(&dp->cv, &dp->mu);
    /* After an error, wait for the thread to drain (it skips the rest). */
    while (dp->err && dp->completed < dp->launched) pthread_cond_wait(&dp->cv, &dp->mu);
    dt_status st = dp->err;
    if (st) dt_errorf(st, "%s", dp->errmsg);
    pthread_mutex_unlock(&dp->mu);
    dp->stats.exposed_s += dt_now() - t0;
    return st;
}

dt_status dt_dp_end_backward(dt_dp *dp) {
    double t0 = dt_now();
    dt_status st = launch_upto(dp, dp->nb - 1);
    dp->stats.exposed_s += dt_now() - t0;
    if (!st) st = dt_dp_params_status(dp);
    if (st) return st;
    if (!dp->thread_started || !dp->sync) return DT_OK;
    /* ZeRO-0: dt_dp_step may update each bucket as soon as it is reduced,
     * overlapping the optimizer with the last buckets' all-reduce. */
    if (dp->cfg.zero == 0) {
        dp->deferred = true;
        return DT_OK;
    }
    return wait_upto(dp, dp->nb - 1);
}

/* ---- optimizer step -------------------------------------------------------------------- */

/* Applies the optimizer to arena range [lo, lo+len) whose gradient is at g (same
 * indexing as the arena when g_is_arena, else shard-indexed from state_off), one
 * parameter tensor at a time so each gets its weight decay. */
static void update_range(dt_dp *dp, size_t lo, size_t len, size_t state_off, const float *gbase,
                         bool g_is_arena, float lr) {
    const dt_model *m = dp->m;
    float *shard = dp->z3 ? dt_z3_shard(dp->z3) : NULL; /* ZeRO-3: the master parameters */
    size_t hi = lo + len;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t a = p->offset > lo ? p->offset : lo;
        size_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= e) continue;
        size_t so = state_off + (a - lo);
        const float *g = g_is_arena ? gbase + a : gbase + so;
        float *w = shard ? shard + so : m->w + a;
        float wd = p->decay ? dp->opt->cfg.weight_decay : 0.0f;
        /* ZeRO-0: the gradient zeroed while it is still in cache; the next backward adds. */
        if (g_is_arena && dp->cfg.zero == 0) dt_optim_update_zero(dp->opt, w, m->g + a, so, e - a, lr, wd);
        else dt_optim_update(dp->opt, w, g, so, e - a, lr, wd);
    }
}

dt_status dt_dp_step(dt_dp *dp, float lr, float max_norm, double *gnorm) {
    dt_model *m = dp->m;
    dt_status st = DT_OK;
    /* Pipelined update (ZeRO-0 without clipping): bucket k is updated as soon
     * as its all-reduce is done. Clipping needs every gradient first. */
    bool pipelined = dp->deferred && max_norm <= 0 && !gnorm;
    if (dp->deferred && !pipelined) {
        dp->deferred = false;
        if ((st = wait_upto(dp, dp->nb - 1))) return st;
    }
    /* Global gradient norm over this rank's shard, summed across ranks. */
    if (max_norm > 0 || gnorm) {
        double ss = 0;
        bool skip_rep = dp->cfg.tp_comm && dt_comm_rank(dp->cfg.tp_comm) != 0;
        for (int k = 0; k < dp->nb; k++) {
            const bucket *b = &dp->b[k];
            for (int i = 0; i < m->n_params; i++) {
                const dt_param *p = &m->params[i];
                size_t a = p->offset > b->own_off ? p->offset : b->own_off;
                size_t e = p->offset + p->numel < b->own_off + b->own_len ? p->offset + p->numel : b->own_off + b->own_len;
                if (a >= e || (skip_rep && p->split == DT_SPLIT_NONE)) continue;
                const float *g = dp->cfg.zero >= 2 ? dp->gshard + b->state_off + (a - b->own_off) : m->g + a;
                ss += dt_sumsq(g, e - a);
            }
        }
        double t0 = dt_now();
        if (dp->cfg.zero && dp->size > 1 && (st = dt_allreduce_f64(dp->comm, &ss, 1))) return st;
        if (dp->cfg.norm_comm && (st = dt_allreduce_f64(dp->cfg.norm_comm, &ss, 1))) return st;
        if (dp->cfg.tp_comm && (st = dt_allreduce_f64(dp->cfg.tp_comm, &ss, 1))) return st;
        dp->stats.exposed_s += dt_now() - t0;
        double norm = sqrt(ss);
        if (gnorm) *gnorm = norm;
        float f = dt_clip_factor(norm, max_norm);
        if (max_norm > 0 && f < 1.0f) dt_dp_scale_grad(dp, f);
    }
    if (dp->compress_now) dp->stats.compressed_steps++;
    dt_optim_begin_step(dp->opt);
    for (int k = 0; k < dp->nb; k++) {
        const bucket *b = &dp->b[k];
        if (pipelined && (st = wait_upto(dp, k))) {
            dp->deferred = false;
            return st;
        }
        if (dp->cfg.zero >= 2) update_range(dp, b->own_off, b->own_len, b->state_off, dp->gshard, false, lr);
        else update_range(dp, b->own_off, b->own_len, b->state_off, m->g, true, lr);
    }
    dp->deferred = false;
    /* Zero what the next backward adds into. */
    if (dp->cfg.zero >= 2) memset(dp->gshard, 0, dp->shard * sizeof(float));
    else if (dp->cfg.zero == 1) memset(m->g, 0, m->n * sizeof(float));
    /* ZeRO-3 gathers before the next use instead. */
    if ((dp->cfg.zero == 1 || dp->cfg.zero == 2) && dp->size > 1) {
        for (int k = 0; k < dp->nb; k++) {
            const bucket *b = &dp->b[k];
            double t0 = dt_now();
            if ((st = dt_allgather(dp->comm, m->w + b->lo, b->hi - b->lo, dp->cfg.algo))) return st;
            double t1 = dt_now();
            dp->stats.exposed_s += t1 - t0;
            dp->stats.comm_s += t1 - t0;
            if (dp->trace) dp->trace(dp->trace_ctx, "allgather", k, t0, t1, false);
        }
    }
    return DT_OK;
}

dt_status dt_dp_wait(dt_dp *dp) {
    if (!dp->deferred) return DT_OK;
    dp->deferred = false;
    return wait_upto(dp, dp->nb - 1);
}

bool dt_dp_grad_finite(const dt_dp *dp) {
    const dt_model *m = dp->m;
    double ss = 0;
    for (int k = 0; k < dp->nb; k++) {
        const bucket *b = &dp->b[k];
        ss += dt_sumsq(dp->cfg.zero >= 2 ? dp->gshard + b->state_off : m->g + b->own_off, b->own_len);
    }
    return isfinite(ss);
}

void dt_dp_scale_grad(dt_dp *dp, float f) {
    if (dp->cfg.zero >= 2) dt_scale(dp->gshard, dp->shard, f);
    else
        for (int k = 0; k < dp->nb; k++) dt_scale(dp->m->g + dp->b[k].own_off, dp->b[k].own_len, f);
}

dt_status dt_dp_discard(dt_dp *dp) {
    dt_status st = dt_dp_wait(dp);
    if (st) return st;
    if (dp->cfg.zero >= 2) memset(dp->gshard, 0, dp->shard * sizeof(float));
    else memset(dp->m->g, 0, dp->m->n * sizeof(float));
    return DT_OK;
}

void dt_dp_memory(const dt_dp *dp, dt_dp_mem *mem) {
    size_t P = dp->m->n;
    mem->param_bytes = dp->z3 ? dp->shard * sizeof(float) + dt_dp_gather_bound(dp, dp->cfg.zero3_keep) : P * sizeof(float);
    mem->param_gathered_peak = dp->z3 ? dt_z3_resident_peak(dp->z3) : 0;
    mem->grad_bytes = dp->cfg.zero >= 2 ? dp->shard * sizeof(float) : P * sizeof(float);
    mem->grad_staging_peak = dp->staging_peak > dp->staging_peak_comm ? dp->staging_peak : dp->staging_peak_comm;
    mem->optim_bytes = dt_optim_state_bytes(dp->opt);
    mem->shard_floats = dp->shard;
}

void dt_dp_take_stats(dt_dp *dp, dt_dp_stats *s) {
    uint64_t total = dt_comm_bytes_sent(dp->comm) + (dp->z3 ? dt_z3_bytes_sent(dp->z3) : 0);
    *s = dp->stats;
    s->bytes_sent = total - dp->bytes_mark;
    if (dp->z3) {
        double g, w;
        dt_z3_take_times(dp->z3, &g, &w);
        s->comm_s += g;
        s->exposed_s += w;
        s->gather_s = g;
        s->gather_wait_s = w;
    }
    if (dp->gc) dt_gc_take_stats(dp->gc, &s->comp);
    memset(&dp->stats, 0, sizeof dp->stats);
    dp->bytes_mark = total;
}

dt_optim *dt_dp_optim(dt_dp *dp) { return dp->opt; }

void dt_dp_shard(const dt_dp *dp, dt_ckpt_shard *out) {
    out->n = dp->nb;
    out->arena_off = dp->sh_off;
    out->len = dp->sh_len;
    out->state_off = dp->sh_state;
    out->params_too = false;
    out->n_extra = 0;
    out->extra_name = NULL;
    out->extra_data = NULL;
    out->extra_len = NULL;
}

void dt_dp_set_optim_state(dt_dp *dp, const float *M, const float *V, int64_t t) {
    dt_optim *o = dp->opt;
    for (int k = 0; k < dp->nb; k++) {
        const bucket *b = &dp->b[k];
        if (o->m && M) memcpy(o->m + b->state_off, M + b->own_off, b->own_len * sizeof(float));
        if (o->v && V) memcpy(o->v + b->state_off, V + b->own_off, b->own_len * sizeof(float));
    }
    o->t = t;
    if (dp->z3) dt_z3_adopt(dp->z3); /* the loaded parameters: this rank's chunks become the master */
}
/* ---- the optimizer shard as a checkpoint part ------------------------------ */
static dt_status dp_save(void *ctx, const dt_ckpt_place *at, dt_ckpt_snapshot *snap) {
    dt_dp *dp = ((dt_dp_part_ctx *)ctx)->dp;
    dt_dp_shard(dp, snap->shard); /* the caller attaches the extras after every part */
    snap->optim = dp->opt;
    snap->state->optim_t = dp->opt->t;
    return DT_OK;
}

static dt_status dp_load(void *ctx, const char *path, const dt_ckpt_state *s, const dt_ckpt_place *at) {
    const dt_dp_part_ctx *p = ctx;
    dt_dp_set_optim_state(p->dp, p->M, p->V, s->optim_t);
    return DT_OK;
}

void dt_dp_part(dt_dp_part_ctx *ctx, dt_ckpt_part *part) {
    part->ctx = ctx;
    part->save = dp_save;
    part->load = dp_load;
}

int dt_dp_n_buckets(const dt_dp *dp) { return dp->nb; }

void dt_dp_set_step(dt_dp *dp, int64_t step) {
    dt_comm_set_step(dp->comm, step);
    if (dp->z3) dt_z3_set_step(dp->z3, step);
}

size_t dt_dp_gather_bound(const dt_dp *dp, bool keep) {
    int first[16], last[16], nr = cfg_ranges(&dp->cfg, dp->m, first, last);
    return dt_z3_gather_bound(dp->m, dp->b, dp->nb, dp->block_bucket, first[0], last[nr - 1], keep);
}
dt_gc *dt_dp_gc(dt_dp *dp) { return dp->gc; }

void dt_dp_set_trace(dt_dp *dp, dt_dp_trace_fn fn, void *ctx) {
    dp->trace = fn;
    dp->trace_ctx = ctx;
    if (dp->z3) dt_z3_set_trace(dp->z3, fn, ctx);
}
