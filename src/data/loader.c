/* The run's data behind "next batch" (see include/dtrain/loader.h). Costs: a
 * batch is one gather of its samples (B * in_dim elements converted to floats,
 * or 2 * B * T tokens to int32); nothing is allocated after dt_loader_init
 * and dt_loader_set_prefetch (but a larger weights copy when the world grows).
 *
 * Prefetch: a second buffer set, a shadow sampler with its own permutation,
 * and one thread. After batch k is handed out, the shadow takes the real
 * sampler's position (epoch, index, share, a copy of the weights) and the
 * thread computes batch k+1 from it into the spare set; a new epoch's
 * permutation is generated there too. At the next call the real sampler
 * computes its batch as without prefetch, and the spare set is taken (the two
 * sets' pointers swapped) only when its indices, sizes and shift are the same:
 * the data is a pure function of those, so batches are bitwise the same
 * whether prefetch is on or off, and nothing that moves the sampler needs to
 * tell the loader. next never waits for the thread: when its job has not
 * finished (the cores are busy, or steps are shorter than a gather) the batch
 * is gathered here as without prefetch, and no new job starts until the
 * thread is idle, so a starved thread costs a lock, never a stall. */
#include "dtrain/loader.h"

#include <pthread.h>
#include <string.h>

struct dt_loader_prefetch {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy;               /* a job is in flight: the thread owns sh and the spare set */
    bool quit;
    bool ready;              /* the spare set holds the last job's batch */
    bool reseek;             /* the shadow must regenerate its permutation first */
    const dt_dataset *d;
    uint64_t seed;
    dt_sampler sh;           /* shadow sampler */
    double *w;               /* (wcap) weights copy */
    int wcap;
    int gb;                  /* the job's global batch */
    int64_t epoch, index;    /* the job's starting position */
    /* the spare set and what is in it */
    int64_t *idx;
    float *x, *y;
    int32_t *tokens, *targets;
    int local_n, global_n, shift;
    int64_t bad;
};

static int loader_shift(const dt_dataset *d, uint64_t seed, int64_t epoch) {
    if (!d->lm) return 0;
    dt_rng r;
    dt_rng_init(&r, seed, 0x5000 + (uint64_t)epoch);
    return (int)dt_rng_below(&r, (uint64_t)d->T);
}

size_t dt_loader_sample_len(const dt_loader *l) {
    return l->d->lm ? (size_t)l->d->T : (size_t)l->d->in_dim;
}

/* One buffer set for cap samples of d; false when out of memory (partial sets are freed by the caller). */
static bool loader_alloc(const dt_dataset *d, int cap, int64_t **idx, float **x, int32_t **tokens, int32_t **targets,
                         float **y) {
    size_t c = (size_t)cap;
    *idx = dt_calloc(c, sizeof(int64_t));
    if (d->lm) {
        *tokens = dt_calloc(c * (size_t)d->T, sizeof(int32_t));
        *targets = dt_calloc(c * (size_t)d->T, sizeof(int32_t));
        return *idx && *tokens && *targets;
    }
    *x = dt_alloc_floats(c * (size_t)d->in_dim);
    if (d->y_dim > 0) *y = dt_alloc_floats(c * (size_t)d->y_dim);
    else *targets = dt_calloc(c, sizeof(int32_t));
    return *idx && *x && (d->y_dim > 0 ? *y != NULL : *targets != NULL);
}

dt_status dt_loader_init(dt_loader *l, const dt_dataset *d, int cap, uint64_t seed, int rank, int world) {
    memset(l, 0, sizeof *l);
    l->d = d;
    l->seed = seed;
    l->cap = cap;
    if (!loader_alloc(d, cap, &l->idx, &l->x, &l->tokens, &l->targets, &l->y)) {
        dt_loader_free(l);
        return dt_errorf(DT_ERR_NOMEM, "cannot allocate batch buffers for batch %d", cap);
    }
    if (d->n_train > 0) return dt_sampler_init(&l->sampler, d->n_train, seed, true, false, rank, world);
    return DT_OK;
}

/* ---- prefetch ------------------------------------------------------------------ */

static void pf_job(dt_loader_prefetch *pf) {
    if (pf->reseek) dt_sampler_seek(&pf->sh, pf->epoch, pf->index); /* in range: the real sampler's position */
    else pf->sh.index = pf->index;
    dt_sampler_next(&pf->sh, pf->gb, pf->idx, &pf->local_n, &pf->global_n);
    pf->shift = loader_shift(pf->d, pf->seed, pf->sh.epoch);
    pf->bad = dt_dataset_gather(pf->d, pf->idx, pf->local_n, pf->shift, pf->x, pf->tokens, pf->targets, pf->y);
}

static void *pf_main(void *arg) {
    dt_loader_prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->busy && !pf->quit) pthread_cond_wait(&pf->cv, &pf->mu);
        if (pf->quit) break;
        pthread_mutex_unlock(&pf->mu);
        pf_job(pf);
        pthread_mutex_lock(&pf->mu);
        pf->busy = false;
        pf->ready = true;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

/* Whether the thread is idle (then the spare set and the shadow are ours, and
 * the thread's writes to them are visible: it clears busy under the lock). */
static bool pf_idle(dt_loader_prefetch *pf) {
    pthread_mutex_lock(&pf->mu);
    bool idle = !pf->busy;
    pthread_mutex_unlock(&pf->mu);
    return idle;
}

/* Starts the job "the batch after the real sampler's position" (thread idle). */
static void pf_start(dt_loader *l, int gb) {
    dt_loader_prefetch *pf = l->pf;
    const dt_sampler *s = &l->sampler;
    pf->ready = false;
    pf->sh.weights = NULL;
    if (s->weights) {
        if (pf->wcap < s->world) {
            double *w = dt_realloc_array(pf->w, (size_t)s->world, sizeof *w);
            if (!w) return; /* no prefetch this time: next loads synchronously */
            pf->w = w;
            pf->wcap = s->world;
        }
        memcpy(pf->w, s->weights, sizeof(double) * (size_t)s->world);
        pf->sh.weights = pf->w;
    }
    pf->sh.rank = s->rank;
    pf->sh.world = s->world;
    pf->reseek = pf->sh.epoch != s->epoch;
    pf->epoch = s->epoch;
    pf->index = s->index;
    pf->gb = gb;
    pthread_mutex_lock(&pf->mu);
    pf->busy = true;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
}

static void pf_free(dt_loader_prefetch *pf) {
    dt_sampler_free(&pf->sh);
    dt_free(pf->w);
    dt_free(pf->idx);
    dt_free(pf->x);
    dt_free(pf->y);
    dt_free(pf->tokens);
    dt_free(pf->targets);
    dt_free(pf);
}

dt_status dt_loader_set_prefetch(dt_loader *l, bool on) {
    dt_loader_prefetch *pf = l->pf;
    if (!on) {
        if (!pf) return DT_OK;
        pthread_mutex_lock(&pf->mu);
        pf->quit = true;
        pthread_cond_broadcast(&pf->cv);
        pthread_mutex_unlock(&pf->mu);
        pthread_join(pf->th, NULL);
        pthread_mutex_destroy(&pf->mu);
        pthread_cond_destroy(&pf->cv);
        pf_free(pf);
        l->pf = NULL;
        return DT_OK;
    }
    if (pf || l->d->n_train <= 0) return DT_OK;
    pf = dt_calloc(1, sizeof *pf);
    if (!pf) return dt_errorf(DT_ERR_NOMEM, "cannot allocate the prefetch state");
    pf->d = l->d;
    pf->seed = l->seed;
    const dt_sampler *s = &l->sampler;
    dt_status st = DT_OK;
    if (!loader_alloc(l->d, l->cap, &pf->idx, &pf->x, &pf->tokens, &pf->targets, &pf->y))
        st = dt_errorf(DT_ERR_NOMEM, "cannot allocate prefetch buffers for batch %d", l->cap);
    if (!st) st = dt_sampler_init(&pf->sh, s->n, s->seed, s->shuffle, s->drop_last, s->rank, s->world);
    if (st) {
        pf_free(pf);
        return st;
    }
    pf->sh.epoch = -1; /* the first job seeks */
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    if (pthread_create(&pf->th, NULL, pf_main, pf) != 0) {
        pthread_mutex_destroy(&pf->mu);
        pthread_cond_destroy(&pf->cv);
        pf_free(pf);
        return dt_errorf(DT_ERR_IO, "cannot start the prefetch thread");
    }
    l->pf = pf;
    return DT_OK;
}

void dt_loader_free(dt_loader *l) {
    if (!l) return;
    if (l->pf) dt_loader_set_prefetch(l, false);
    dt_sampler_free(&l->sampler);
    dt_free(l->idx);
    dt_free(l->x);
    dt_free(l->y);
    dt_free(l->tokens);
    dt_free(l->targets);
    memset(l, 0, sizeof *l);
}

/* ---- batches ---------------------------------------------------------------------- */

#define SWAP(T, a, b) do { T t_ = (a); (a) = (b); (b) = t_; } while (0)

void dt_loader_next(dt_loader *l, int global_batch, int *local_n, int *global_n) {
    dt_loader_prefetch *pf = l->pf;
    bool idle = pf && pf_idle(pf);
    dt_sampler_next(&l->sampler, global_batch, l->idx, local_n, global_n);
    /* After next: the epoch this batch belongs to. */
    int shift = loader_shift(l->d, l->seed, l->sampler.epoch);
    if (idle && pf->ready && pf->local_n == *local_n && pf->global_n == *global_n && pf->shift == shift &&
        !memcmp(pf->idx, l->idx, sizeof(int64_t) * (size_t)*local_n)) {
        SWAP(int64_t *, l->idx, pf->idx);
        SWAP(float *, l->x, pf->x);
        SWAP(float *, l->y, pf->y);
        SWAP(int32_t *, l->tokens, pf->tokens);
        SWAP(int32_t *, l->targets, pf->targets);
        l->bad_tokens += pf->bad;
        l->prefetched++;
    } else {
        l->bad_tokens += dt_dataset_gather(l->d, l->idx, *local_n, shift, l->x, l->tokens, l->targets, l->y);
    }
    if (idle) pf_start(l, global_batch);
}

void dt_loader_skip(dt_loader *l, int global_batch, int64_t n) {
    int local_n, global_n;
    for (int64_t k = 0; k < n; k++) dt_sampler_next(&l->sampler, global_batch, l->idx, &local_n, &global_n);
}

void dt_loader_first(dt_loader *l, int n) {
    DT_ASSERT(n <= l->cap);
    for (int i = 0; i < n; i++) l->idx[i] = i % l->d->n_train;
    l->bad_tokens += dt_dataset_gather(l->d, l->idx, n, 0, l->x, l->tokens, l->targets, l->y);
}

void dt_loader_eval(dt_loader *l, int64_t first, int n) {
    DT_ASSERT(n <= l->cap);
    l->bad_tokens += dt_dataset_gather_eval(l->d, first, n, l->idx, l->x, l->tokens, l->targets, l->y);
}
