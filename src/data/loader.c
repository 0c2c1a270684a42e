/* The run's data behind "next batch" (see include/dtrain/loader.h). Costs: a
 * batch is one gather of its samples (B * in_dim bytes converted to floats, or
 * 2 * B * T bytes to int32); nothing is allocated after dt_loader_init. */
#include "dtrain/loader.h"

#include <string.h>

dt_status dt_dataset_load(dt_dataset *d, const char *path, bool lm, int T, double val_frac, bool need_train) {
    memset(d, 0, sizeof *d);
    d->lm = lm;
    dt_status st = DT_OK;
    if (lm) {
        d->T = T;
        if ((st = dt_corpus_load(path ? path : DT_CORPUS_DEFAULT_PATH, val_frac, T, &d->corpus))) return st;
        d->n_train = dt_corpus_train_windows(&d->corpus, T);
        return DT_OK;
    }
    const char *dir = path ? path : DT_FMNIST_DEFAULT_DIR;
    if (need_train && (st = dt_imageset_load(dir, true, &d->train))) return st;
    if ((st = dt_imageset_load(dir, false, &d->test))) return st;
    const dt_imageset *s = need_train ? &d->train : &d->test;
    d->in_dim = s->rows * s->cols;
    d->n_train = need_train ? d->train.n : 0;
    return DT_OK;
}

void dt_dataset_free(dt_dataset *d) {
    if (!d) return;
    dt_imageset_free(&d->train);
    dt_imageset_free(&d->test);
    dt_corpus_free(&d->corpus);
}

int64_t dt_dataset_eval_size(const dt_dataset *d, int eval_max) {
    if (!d->lm) return d->test.n;
    int64_t total = dt_corpus_val_windows(&d->corpus, d->T);
    return eval_max > 0 && total > eval_max ? eval_max : total;
}

size_t dt_loader_sample_len(const dt_loader *l) {
    return l->d->lm ? (size_t)l->d->T : (size_t)l->d->in_dim;
}

dt_status dt_loader_init(dt_loader *l, const dt_dataset *d, int cap, uint64_t seed, int rank, int world) {
    memset(l, 0, sizeof *l);
    l->d = d;
    l->seed = seed;
    l->cap = cap;
    size_t per = d->lm ? (size_t)d->T : 1;
    l->idx = dt_calloc((size_t)cap, sizeof(int64_t));
    l->targets = dt_calloc((size_t)cap * per, sizeof(int32_t));
    if (d->lm) l->tokens = dt_calloc((size_t)cap * per, sizeof(int32_t));
    else l->x = dt_alloc_floats((size_t)cap * (size_t)d->in_dim);
    if (!l->idx || !l->targets || (!l->tokens && !l->x))
        return dt_errorf(DT_ERR_NOMEM, "cannot allocate batch buffers for batch %d", cap);
    if (d->n_train > 0) return dt_sampler_init(&l->sampler, d->n_train, seed, true, false, rank, world);
    return DT_OK;
}

void dt_loader_free(dt_loader *l) {
    if (!l) return;
    dt_sampler_free(&l->sampler);
    dt_free(l->idx);
    dt_free(l->x);
    dt_free(l->tokens);
    dt_free(l->targets);
    memset(l, 0, sizeof *l);
}

static void gather_train(dt_loader *l, int n, int shift) {
    if (n <= 0) return;
    if (l->d->lm) dt_corpus_gather(&l->d->corpus, l->idx, n, l->d->T, shift, l->tokens, l->targets);
    else dt_imageset_gather(&l->d->train, l->idx, n, l->x, l->targets);
}

void dt_loader_next(dt_loader *l, int global_batch, int *local_n, int *global_n) {
    dt_sampler_next(&l->sampler, global_batch, l->idx, local_n, global_n);
    int shift = 0;
    if (l->d->lm) { /* after next: the epoch this batch belongs to */
        dt_rng r;
        dt_rng_init(&r, l->seed, 0x5000 + (uint64_t)l->sampler.epoch);
        shift = (int)dt_rng_below(&r, (uint64_t)l->d->T);
    }
    gather_train(l, *local_n, shift);
}

void dt_loader_skip(dt_loader *l, int global_batch, int64_t n) {
    int local_n, global_n;
    for (int64_t k = 0; k < n; k++) dt_sampler_next(&l->sampler, global_batch, l->idx, &local_n, &global_n);
}

void dt_loader_first(dt_loader *l, int n) {
    for (int i = 0; i < n; i++) l->idx[i] = i % l->d->n_train;
    gather_train(l, n, 0);
}

void dt_loader_eval(dt_loader *l, int64_t first, int n) {
    if (l->d->lm) {
        dt_corpus_gather_val(&l->d->corpus, first, n, l->d->T, l->tokens, l->targets);
        return;
    }
    for (int i = 0; i < n; i++) l->idx[i] = first + i;
    dt_imageset_gather(&l->d->test, l->idx, n, l->x, l->targets);
}
