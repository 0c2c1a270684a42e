/* ZeRO-3: each data-parallel rank keeps only its chunk of every bucket's
 * parameters (the master copy the optimizer updates); a bucket's parameters
 * are all-gathered into the model's arena just before its first block runs
 * and handed back to the kernel after its last (zero3.h).
 *
 * Per micro-batch: forward gathers the buckets in its order (the lowest
 * blocks' first), backward in its own, except the bucket forward ends with
 * and backward starts with, which stays; with keep (FSDP's
 * reshard_after_forward=False) forward's copies stay until backward is done
 * with them, so backward gathers nothing. Each gather is (N-1)/N of the
 * bucket's bytes received per rank, 2 x 4P (N-1)/N a micro-batch in all
 * (4P with keep) against ZeRO-1/2's one 4P (N-1)/N after the step. A thread
 * of its own, on a communicator of its own, runs the gathers in the order the
 * compute thread asks for them, and every use asks for the next bucket too:
 * its gather overlaps this bucket's compute. Memory: the master shard (4P/N)
 * and at most two gathered buckets (all of them with keep), the buckets tied
 * tensors make other buckets read (held through the pass), and a tensor
 * tied across pipeline stages that no bucket here holds (kept whole; its
 * owner stage sends it after each update). A gather first faults its pages
 * in with one madvise; a release hands back the pages wholly inside its
 * bucket and those at its edges that nothing resident shares.
 *
 * Ordering contract: the gathers are asked for by the model's parameter
 * hooks, so every rank of the group asks for the same buckets in the same
 * order as long as each runs the same passes; a pass a rank has no samples
 * for is replayed (skip) without its compute. */
#include "zero3.h"

#include "dtrain/parallel.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct dt_z3 {
    dt_model *m;
    dt_comm *comm;            /* split from the group's: gathers beside its reduce-scatters */
    const dt_bucket *b;
    int nb, first, last;      /* buckets; the block range */
    const int *block_bucket;
    bool keep;
    dt_algo algo;
    float *shard;             /* this rank's chunks, state-indexed: the master parameters */
    size_t shard_n;
    dt_arena_map w;           /* the model's parameter arena while the z3 lives */
    bool *resident;           /* gathered, or its gather queued */
    bool *needs;              /* nb x nb: needs[k * nb + j]: bucket k's blocks read tensors of j (tied) */
    bool *shared;             /* read by another bucket's blocks: held until the pass ends */
    size_t *foreign;          /* [lo, hi) pairs in offset order: tensors the blocks read that no bucket
                               * holds (tied across pipeline stages), always resident */
    int n_foreign;
    int64_t *ticket;          /* queue position of the bucket's last gather */
    int *queue;
    int64_t queued, done;
    bool pinned;              /* every bucket gathered (dt_z3_full): the hooks stand by */
    int passes;               /* forward passes seen (the resident peak is sampled in the first) */
    size_t peak;              /* the arena's resident peak seen */

    pthread_t thread;
    bool thread_started, quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dt_status err;
    char errmsg[1024];
    double gather_s, wait_s;  /* the thread's time in gathers; the compute thread's waits */
    dt_z3_trace_fn trace;
    void *trace_ctx;
};

/* ---- the gathers --------------------------------------------------------------------- */

static dt_status gather(dt_z3 *z, int k) {
    const dt_bucket *b = &z->b[k];
    float *w = z->w.base;
    double t0 = dt_now();
    dt_arena_populate(&z->w, b->lo, b->hi); /* one call, not a fault a page, on this thread */
    memcpy(w + b->own_off, z->shard + b->state_off, b->own_len * sizeof(float));
    dt_status st = dt_comm_size(z->comm) > 1 ? dt_allgather(z->comm, w + b->lo, b->hi - b->lo, z->algo) : DT_OK;
    double t1 = dt_now();
    pthread_mutex_lock(&z->mu);
    z->gather_s += t1 - t0;
    pthread_mutex_unlock(&z->mu);
    if (z->trace) z->trace(z->trace_ctx, "param_allgather", k, t0, t1, z->thread_started);
    return st;
}

static void note_error(dt_z3 *z, dt_status st) {
    if (st && !z->err) {
        z->err = st;
        snprintf(z->errmsg, sizeof z->errmsg, "%s", dt_error_msg());
    }
}

static void *gather_thread(void *arg) {
    dt_z3 *z = arg;
    pthread_mutex_lock(&z->mu);
    for (;;) {
        while (!z->quit && z->done >= z->queued) pthread_cond_wait(&z->cv, &z->mu);
        if (z->quit) break;
        int k = z->queue[z->done % (z->nb + 1)];
        bool failed = z->err != DT_OK;
        pthread_mutex_unlock(&z->mu);
        dt_status st = failed ? DT_OK : gather(z, k); /* after a failure: skipped */
        pthread_mutex_lock(&z->mu);
        note_error(z, st);
        z->done++;
        pthread_cond_broadcast(&z->cv);
    }
    pthread_mutex_unlock(&z->mu);
    return NULL;
}

/* Queues bucket k's gather unless it is there or queued. */
static void fetch(dt_z3 *z, int k) {
    if (z->resident[k]) return;
    z->resident[k] = true;
    if (!z->thread_started) {
        double t0 = dt_now();
        if (!z->err) note_error(z, gather(z, k));
        z->wait_s += dt_now() - t0;
        return;
    }
    pthread_mutex_lock(&z->mu);
    z->ticket[k] = z->queued;
    z->queue[z->queued % (z->nb + 1)] = k;
    z->queued++;
    pthread_cond_broadcast(&z->cv);
    pthread_mutex_unlock(&z->mu);
}

/* Waits until bucket k's gather is done (or one failed). */
static void wait_for(dt_z3 *z, int k) {
    if (!z->thread_started) return;
    double t0 = dt_now();
    pthread_mutex_lock(&z->mu);
    while (z->done <= z->ticket[k] && !z->err) pthread_cond_wait(&z->cv, &z->mu);
    pthread_mutex_unlock(&z->mu);
    z->wait_s += dt_now() - t0;
}

/* Waits until every queued gather is done (errors drain the queue). */
static void drain(dt_z3 *z) {
    pthread_mutex_lock(&z->mu);
    while (z->done < z->queued) pthread_cond_wait(&z->cv, &z->mu);
    pthread_mutex_unlock(&z->mu);
}

/* Whether a resident (or queued) bucket or a foreign tensor overlaps arena
 * floats [lo, hi). */
static bool page_in_use(const dt_z3 *z, size_t lo, size_t hi) {
    for (int j = 0; j < z->nb; j++)
        if (z->resident[j] && z->b[j].lo < hi && z->b[j].hi > lo) return true;
    for (int f = 0; f < z->n_foreign; f++)
        if (z->foreign[2 * f] < hi && z->foreign[2 * f + 1] > lo) return true;
    return false;
}

/* Bucket k's pages back to the kernel, with the pages at its edges that it
 * shares with buckets no longer resident (else each edge's page would stay
 * for good: 2 MiB a bucket in huge pages). */
static void unmap(dt_z3 *z, int k) {
    size_t pf = z->w.page_floats, n = z->m->n, lo = z->b[k].lo, hi = z->b[k].hi;
    z->resident[k] = false;
    size_t plo = lo / pf * pf, phi = (hi + pf - 1) / pf * pf;
    if (plo < lo && !page_in_use(z, plo, plo + pf)) lo = plo;
    if (phi > hi && !page_in_use(z, phi - pf, phi)) hi = phi < n ? phi : n;
    dt_arena_release(&z->w, lo, hi);
}

/* Releases bucket k after its use in a pass; the first passes sample the
 * arena's resident bytes (the whole-model gathers of dt_z3_full do not). */
static void release(dt_z3 *z, int k) {
    if (z->passes <= 2) {
        size_t r = dt_arena_resident(&z->w);
        if (r > z->peak) z->peak = r;
    }
    unmap(z, k);
}

/* ---- the model's hooks ------------------------------------------------------------------ */

/* Bucket k and the buckets its blocks read are gathered (and the bucket
 * `next` behind them, when there is one). */
static void acquire(dt_z3 *z, int k, int next) {
    int nb = z->nb;
    fetch(z, k);
    for (int j = 0; j < nb; j++)
        if (z->needs[k * nb + j]) fetch(z, j);
    if (next >= 0 && next < nb) fetch(z, next);
    wait_for(z, k);
    for (int j = 0; j < nb; j++)
        if (z->needs[k * nb + j]) wait_for(z, j);
}

static void release_shared(dt_z3 *z) {
    for (int j = 0; j < z->nb; j++)
        if (z->shared[j] && z->resident[j]) release(z, j);
}

/* Block i is the lowest (top: highest) of one of this rank's block ranges. */
static bool range_edge(const dt_z3 *z, int i, bool top) {
    int j = top ? i + 1 : i - 1;
    return z->block_bucket[i] >= 0 && (j < 0 || j >= z->m->n_blocks || z->block_bucket[j] < 0);
}

static void use(void *ctx, int block, dt_params_use u, bool eval) {
    dt_z3 *z = ctx;
    int k = z->block_bucket[block];
    if (z->pinned) return;
    /* The end of a pass (an evaluation's forward, a backward) over a range
     * lets the shared buckets go. */
    bool ends = (u == DT_PARAMS_FORWARD_DONE && eval && range_edge(z, block, true)) ||
                (u == DT_PARAMS_BACKWARD_DONE && range_edge(z, block, false));
    if (k >= 0) {
        const dt_bucket *b = &z->b[k];
        bool own = !z->shared[k];
        if (u == DT_PARAMS_FORWARD && block == b->first_block) { /* the next bucket's gather goes out behind */
            if (k == z->nb - 1) z->passes++;
            acquire(z, k, range_edge(z, b->top_block, true) ? -1 : k - 1);
        } else if (u == DT_PARAMS_FORWARD_DONE && block == b->top_block && own && (eval || (!z->keep && k != 0))) {
            release(z, k); /* the bucket backward starts with stays (and all with keep) */
        } else if (u == DT_PARAMS_BACKWARD && block == b->top_block) {
            acquire(z, k, range_edge(z, b->first_block, false) ? -1 : k + 1);
        } else if (u == DT_PARAMS_BACKWARD_DONE && block == b->first_block && own) {
            release(z, k);
        }
    }
    if (ends) release_shared(z);
}

/* Which buckets read which (a tensor used by blocks of two buckets: tied):
 * needs[k * nb + j], and shared[j] when any other bucket reads j. */
static void find_needs(const dt_model *m, const dt_bucket *b, int nb, const int *block_bucket, int first, int last,
                       bool *needs, bool *shared) {
    for (int i = first; i <= last; i++) { /* blocks of other ranges have no bucket */
        int k = block_bucket[i];
        const dt_block *blk = &m->blocks[i];
        for (int t = 0; t < blk->n_tensors && k >= 0; t++)
            for (int j = 0; j < nb; j++)
                if (j != k && blk->off[t] >= b[j].lo && blk->off[t] < b[j].hi) {
                    needs[k * nb + j] = true;
                    shared[j] = true;
                }
    }
}

/* The tensor at arena offset off read by one of this rank's blocks but in
 * none of its buckets (a tie across pipeline stages: the owner stage sends
 * its values after each update): its floats, 0 when it is in a bucket. */
static size_t foreign_numel(const dt_model *m, const dt_bucket *b, int nb, size_t off) {
    for (int j = 0; j < nb; j++)
        if (off >= b[j].lo && off < b[j].hi) return 0;
    for (int k = 0; k < m->n_params; k++)
        if (m->params[k].offset == off) return m->params[k].numel;
    return 0;
}

/* Floats of the foreign tensors this rank's blocks in [first, last] read
 * (each once). */
static size_t foreign_floats(const dt_model *m, const dt_bucket *b, int nb, const int *block_bucket, int first, int last) {
    size_t n = 0;
    for (int i = first; i <= last; i++)
        for (int t = 0; t < m->blocks[i].n_tensors && block_bucket[i] >= 0; t++) {
            size_t off = m->blocks[i].off[t];
            bool seen = false;
            for (int i2 = first; i2 <= i && !seen; i2++)
                for (int t2 = 0; t2 < m->blocks[i2].n_tensors && !(i2 == i && t2 >= t); t2++) seen |= m->blocks[i2].off[t2] == off;
            if (!seen) n += foreign_numel(m, b, nb, off);
        }
    return n;
}

size_t dt_z3_gather_bound(const dt_model *m, const dt_bucket *b, int nb, const int *block_bucket, int first, int last,
                          bool keep) {
    bool *needs = dt_calloc((size_t)nb * (size_t)nb + 1, sizeof(bool)), *shared = dt_calloc((size_t)nb + 1, sizeof(bool));
    size_t held = foreign_floats(m, b, nb, block_bucket, first, last), pair = 0;
    if (needs && shared) find_needs(m, b, nb, block_bucket, first, last, needs, shared);
    for (int k = 0; k < nb; k++) {
        bool adjacent = k + 1 < nb && b[k + 1].top_block + 1 == b[k].first_block; /* one range */
        size_t n = b[k].hi - b[k].lo, next = adjacent && !(shared && shared[k + 1]) ? b[k + 1].hi - b[k + 1].lo : 0;
        if (keep || (shared && shared[k])) held += n;
        else if (n + next > pair) pair = n + next;
    }
    dt_free(needs);
    dt_free(shared);
    return (held + pair) * sizeof(float);
}

size_t dt_dp_gather_bound_of(const dt_model *m, const int *first, const int *last, int n, size_t min_floats, bool keep) {
    dt_bucket *b = dt_calloc((size_t)m->n_blocks + 1, sizeof *b);
    int *block_bucket = dt_calloc((size_t)m->n_blocks + 1, sizeof(int)), nb = 0;
    int *low = dt_calloc((size_t)m->n_blocks + 1, sizeof(int)), *top = dt_calloc((size_t)m->n_blocks + 1, sizeof(int));
    size_t bound = 0;
    if (b && block_bucket && low && top && n > 0) {
        for (int i = 0; i < m->n_blocks; i++) block_bucket[i] = -1;
        nb = dt_dp_buckets(m, first, last, n, min_floats, low, top, m->n_blocks); /* as dp.c builds them */
        for (int k = 0; k < nb; k++) {
            b[k] = (dt_bucket){.lo = m->blocks[low[k]].param_lo, .hi = m->blocks[top[k]].param_hi,
                               .first_block = low[k], .top_block = top[k]};
            for (int i = low[k]; i <= top[k]; i++) block_bucket[i] = k;
        }
        bound = dt_z3_gather_bound(m, b, nb, block_bucket, first[0], last[n - 1], keep);
    }
    dt_free(b);
    dt_free(block_bucket);
    dt_free(low);
    dt_free(top);
    return bound;
}

/* The hooks of a pass, in its order, without the compute between them. */
static void skip(void *ctx, bool eval) {
    dt_z3 *z = ctx;
    for (int i = z->first; i <= z->last; i++) {
        use(z, i, DT_PARAMS_FORWARD, eval);
        use(z, i, DT_PARAMS_FORWARD_DONE, eval);
    }
    for (int i = z->last; i >= z->first && !eval; i--) {
        use(z, i, DT_PARAMS_BACKWARD, false);
        use(z, i, DT_PARAMS_BACKWARD_DONE, false);
    }
    /* (use() ignores blocks of other ranges: they have no bucket.) */
}

/* ---- life ----------------------------------------------------------------------------------- */

/* The foreign tensors' ranges in offset order into z->foreign (NULL, 0 when
 * none); false when out of memory. */
static bool collect_foreign(dt_z3 *z) {
    const dt_model *m = z->m;
    size_t done = 0;
    for (;;) { /* the next foreign tensor at or above done */
        size_t lo = m->n, n = 0;
        for (int i = z->first; i <= z->last; i++)
            for (int t = 0; t < m->blocks[i].n_tensors && z->block_bucket[i] >= 0; t++) {
                size_t off = m->blocks[i].off[t], k = off >= done && off < lo ? foreign_numel(m, z->b, z->nb, off) : 0;
                if (k) lo = off, n = k;
            }
        if (lo == m->n) return true;
        size_t *f = dt_realloc_array(z->foreign, (size_t)z->n_foreign + 1, 2 * sizeof(size_t));
        if (!f) return false;
        z->foreign = f;
        f[2 * z->n_foreign] = lo;
        f[2 * z->n_foreign + 1] = lo + n;
        z->n_foreign++;
        done = lo + n;
    }
}

/* Releases the whole arena but the foreign tensors (copied in from `from`
 * when it is not the arena), which stay resident: no gather brings them. */
static void release_all_but_foreign(dt_z3 *z, const float *from) {
    size_t done = 0;
    for (int f = 0; f < z->n_foreign; f++) {
        size_t lo = z->foreign[2 * f], hi = z->foreign[2 * f + 1];
        if (from != z->w.base) memcpy(z->w.base + lo, from + lo, (hi - lo) * sizeof(float));
        if (lo > done) dt_arena_release(&z->w, done, lo);
        done = hi;
    }
    if (done < z->m->n) dt_arena_release(&z->w, done, z->m->n);
}

dt_status dt_z3_create(dt_z3 **out, const dt_z3_cfg *c) {
    *out = NULL;
    dt_z3 *z = dt_calloc(1, sizeof *z);
    if (!z) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    *z = (dt_z3){.m = c->m, .b = c->buckets, .nb = c->nb, .first = c->first, .last = c->last,
                 .block_bucket = c->block_bucket, .keep = c->keep, .algo = c->algo, .shard_n = c->shard_n};
    pthread_mutex_init(&z->mu, NULL);
    pthread_cond_init(&z->cv, NULL);
    dt_status st = dt_comm_split(c->comm, 0, dt_comm_rank(c->comm), &z->comm);
    if (st) goto fail;
    dt_comm_set_timeout(z->comm, dt_comm_timeout(c->comm));
    z->shard = dt_alloc_floats(c->shard_n);
    z->resident = dt_calloc((size_t)c->nb + 1, sizeof(bool));
    z->ticket = dt_calloc((size_t)c->nb + 1, sizeof(int64_t));
    z->queue = dt_calloc((size_t)c->nb + 1, sizeof(int));
    z->needs = dt_calloc((size_t)c->nb * (size_t)c->nb + 1, sizeof(bool));
    z->shared = dt_calloc((size_t)c->nb + 1, sizeof(bool));
    if (!z->shard || !z->resident || !z->ticket || !z->queue || !z->needs || !z->shared) {
        st = dt_errorf(DT_ERR_NOMEM, "cannot allocate the ZeRO-3 parameter shard");
        goto fail;
    }
    find_needs(z->m, z->b, z->nb, z->block_bucket, z->first, z->last, z->needs, z->shared);
    if (!collect_foreign(z)) {
        st = dt_errorf(DT_ERR_NOMEM, "cannot allocate the ZeRO-3 parameter shard");
        goto fail;
    }
    if ((st = dt_arena_map_create(&z->w, c->m->n, c->m->n / (size_t)c->nb, "ZeRO-3 parameter arena"))) goto fail;
    if (dt_comm_size(c->comm) > 1 && c->overlap) {
        if (pthread_create(&z->thread, NULL, gather_thread, z) != 0) {
            st = dt_errorf(DT_ERR_NOMEM, "cannot start the ZeRO-3 gather thread");
            goto fail;
        }
        z->thread_started = true;
    }
    *out = z;
    return DT_OK;
fail:
    dt_z3_destroy(z);
    return st;
}

void dt_z3_destroy(dt_z3 *z) {
    if (!z) return;
    if (z->thread_started) {
        pthread_mutex_lock(&z->mu);
        z->quit = true;
        pthread_cond_broadcast(&z->cv);
        pthread_mutex_unlock(&z->mu);
        pthread_join(z->thread, NULL);
    }
    dt_model *m = z->m;
    if (z->w.base && m->w == z->w.base) {
        /* Hand the model back an ordinary arena: what is gathered, and this rank's chunks. */
        float *w = dt_alloc_floats(m->n);
        if (w) {
            memcpy(w, z->w.base, m->n * sizeof(float));
            for (int k = 0; k < z->nb; k++)
                memcpy(w + z->b[k].own_off, z->shard + z->b[k].state_off, z->b[k].own_len * sizeof(float));
        }
        m->w = w;
    }
    if (m->params_hook.ctx == z) m->params_hook = (dt_param_hooks){0};
    dt_arena_map_destroy(&z->w);
    dt_comm_destroy(z->comm);
    pthread_mutex_destroy(&z->mu);
    pthread_cond_destroy(&z->cv);
    dt_free(z->shard);
    dt_free(z->resident);
    dt_free(z->ticket);
    dt_free(z->queue);
    dt_free(z->needs);
    dt_free(z->shared);
    dt_free(z->foreign);
    dt_free(z);
}

void dt_z3_adopt(dt_z3 *z) {
    dt_model *m = z->m;
    if (z->thread_started) drain(z);
    for (int k = 0; k < z->nb; k++)
        memcpy(z->shard + z->b[k].state_off, m->w + z->b[k].own_off, z->b[k].own_len * sizeof(float));
    float *old = m->w;
    release_all_but_foreign(z, old);
    if (old != z->w.base) {
        dt_free(old);
        m->w = z->w.base;
        m->params_hook = (dt_param_hooks){.use = use, .skip = skip, .ctx = z};
    }
    memset(z->resident, 0, (size_t)z->nb * sizeof(bool));
    z->pinned = false;
}

dt_status dt_z3_hold(dt_z3 *z, size_t lo, size_t hi, bool hold) {
    for (int k = 0; k < z->nb; k++) {
        if (z->b[k].lo >= hi || z->b[k].hi <= lo) continue;
        if (hold) fetch(z, k);
        else if (z->resident[k] && !z->pinned) unmap(z, k);
    }
    if (!hold) return DT_OK;
    for (int k = 0; k < z->nb; k++)
        if (z->b[k].lo < hi && z->b[k].hi > lo) wait_for(z, k);
    return dt_z3_status(z);
}

dt_status dt_z3_full(dt_z3 *z, bool full) {
    if (!full) {
        z->pinned = false;
        for (int k = 0; k < z->nb; k++)
            if (z->resident[k]) unmap(z, k);
        return DT_OK;
    }
    for (int k = z->nb - 1; k >= 0; k--) fetch(z, k);
    if (z->thread_started) drain(z);
    z->pinned = true;
    return dt_z3_status(z);
}

dt_status dt_z3_status(dt_z3 *z) {
    pthread_mutex_lock(&z->mu);
    dt_status st = z->err;
    if (st) dt_errorf(st, "ZeRO-3 parameter all-gather failed: %s", z->errmsg);
    pthread_mutex_unlock(&z->mu);
    return st;
}

float *dt_z3_shard(dt_z3 *z) { return z->shard; }

void dt_z3_take_times(dt_z3 *z, double *gather_s, double *wait_s) {
    pthread_mutex_lock(&z->mu);
    *gather_s = z->gather_s;
    *wait_s = z->wait_s;
    z->gather_s = z->wait_s = 0;
    pthread_mutex_unlock(&z->mu);
}

void dt_z3_set_step(dt_z3 *z, int64_t step) { dt_comm_set_step(z->comm, step); }

uint64_t dt_z3_bytes_sent(const dt_z3 *z) { return dt_comm_bytes_sent(z->comm); }

size_t dt_z3_resident_peak(const dt_z3 *z) { return z->peak; }

void dt_z3_set_trace(dt_z3 *z, dt_z3_trace_fn fn, void *ctx) {
    z->trace = fn;
    z->trace_ctx = ctx;
}
