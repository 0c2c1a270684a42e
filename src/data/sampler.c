/* Deterministic sharded sampler.
 *
 * Epoch e's order is a Fisher-Yates shuffle driven by the counter-based RNG on
 * stream (seed, e), so it depends on (seed, e, n) only: not on the rank, the
 * world size, the batch size or how many batches came before. That is what
 * makes a position (epoch, index) enough to resume, and what lets every
 * data-parallel layout see the same global batches: rank r of W takes the
 * contiguous slice [r*b/W, (r+1)*b/W) of each global batch of size b.
 *
 * Epochs advance lazily, at the start of the next batch, so after a call
 * s->epoch is still the epoch the returned batch belongs to. */
#include "dtrain/data.h"

#include <string.h>

static void sampler_fill(dt_sampler *s) {
    for (int64_t i = 0; i < s->n; i++) s->perm[i] = i;
    if (!s->shuffle) return;
    dt_rng r;
    dt_rng_init(&r, s->seed, (uint64_t)s->epoch);
    for (int64_t i = s->n - 1; i > 0; i--) {
        int64_t j = (int64_t)dt_rng_below(&r, (uint64_t)i + 1);
        int64_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
}

dt_status dt_sampler_init(dt_sampler *s, int64_t n, uint64_t seed, bool shuffle, bool drop_last,
                          int rank, int world) {
    DT_ASSERT(s);
    memset(s, 0, sizeof *s);
    if (n < 1)
        return dt_errorf(DT_ERR_INVALID, "sampler: dataset size %lld must be >= 1", (long long)n);
    if (world < 1 || rank < 0 || rank >= world)
        return dt_errorf(DT_ERR_INVALID, "sampler: rank %d of world %d is out of range", rank,
                         world);
    if ((uint64_t)n > SIZE_MAX / sizeof(int64_t))
        return dt_errorf(DT_ERR_NOMEM, "sampler: dataset size %lld too large", (long long)n);
    s->perm = dt_malloc((size_t)n * sizeof *s->perm);
    if (!s->perm)
        return dt_errorf(DT_ERR_NOMEM, "sampler: cannot allocate a permutation of %lld",
                         (long long)n);
    s->n = n;
    s->seed = seed;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->rank = rank;
    s->world = world;
    sampler_fill(s);
    return DT_OK;
}

void dt_sampler_free(dt_sampler *s) {
    if (!s) return;
    dt_free(s->perm);
    memset(s, 0, sizeof *s);
}

void dt_sampler_next(dt_sampler *s, int global_batch, int64_t *idx, int *local_n, int *global_n) {
    DT_ASSERT(s && s->perm && global_batch >= 1 && local_n && global_n);
    *local_n = 0;
    *global_n = 0;
    /* With drop_last and a batch larger than the data set there is never a full
     * batch; answer an empty one instead of spinning through epochs. */
    if (s->drop_last && global_batch > s->n) return;

    int64_t left = s->n - s->index;
    if (left <= 0 || (s->drop_last && left < global_batch)) {
        s->epoch++;
        s->index = 0;
        sampler_fill(s);
        left = s->n;
    }
    int64_t b = left < global_batch ? left : global_batch;
    int64_t lo = (int64_t)s->rank * b / s->world;
    int64_t hi = ((int64_t)s->rank + 1) * b / s->world;
    if (s->weights) {
        /* Boundaries at floor(b * cumulative weight / total): contiguous, in rank
         * order, summing to b, identical on every rank. */
        double tot = 0, before = 0;
        for (int r = 0; r < s->world; r++) {
            tot += s->weights[r];
            if (r < s->rank) before += s->weights[r];
        }
        lo = (int64_t)((double)b * before / tot);
        hi = s->rank == s->world - 1 ? b : (int64_t)((double)b * (before + s->weights[s->rank]) / tot);
        if (hi < lo) hi = lo;
    }
    DT_ASSERT(hi - lo == 0 || idx);
    for (int64_t i = lo; i < hi; i++) idx[i - lo] = s->perm[s->index + i];
    s->index += b;
    *local_n = (int)(hi - lo);
    *global_n = (int)b;
}

void dt_sampler_set_weights(dt_sampler *s, const double *weights) { s->weights = weights; }

dt_status dt_sampler_seek(dt_sampler *s, int64_t epoch, int64_t index) {
    DT_ASSERT(s && s->perm);
    if (epoch < 0 || index < 0 || index > s->n)
        return dt_errorf(DT_ERR_INVALID,
                         "sampler: position (epoch %lld, index %lld) is out of range for %lld "
                         "samples; the checkpoint belongs to another data set",
                         (long long)epoch, (long long)index, (long long)s->n);
    s->epoch = epoch;
    s->index = index;
    sampler_fill(s);
    return DT_OK;
}

void dt_sampler_set_share(dt_sampler *s, int rank, int world) {
    DT_ASSERT(world >= 1 && rank >= 0 && rank < world);
    s->rank = rank;
    s->world = world;
}

dt_status dt_sampler_skip(dt_sampler *s, int global_batch, int64_t k) {
    if (global_batch < 1 || k < 0) return dt_errorf(DT_ERR_INVALID, "sampler: cannot skip %lld batches of %d", (long long)k, global_batch);
    int64_t per = s->drop_last ? s->n / global_batch : (s->n + global_batch - 1) / global_batch;
    if (per < 1) return dt_sampler_seek(s, 0, 0); /* no full batch ever: next answers empty */
    return dt_sampler_seek(s, k / per, (k % per) * global_batch);
}
