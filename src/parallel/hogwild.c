/* Hogwild!: lock-free threads on one shared parameter arena. See
 * include/dtrain/hogwild.h for the data-race semantics and the meetings. */
#include "dtrain/hogwild.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* What the threads share besides the weights: the step boundary each passed
 * last, the stop boundary, the meetings' barrier and status. */
typedef struct meeting {
    const dt_hogwild_hooks *h;
    int T;
    pthread_mutex_t mu;
    pthread_cond_t gate;        /* the threads start together, or not at all */
    int go;                     /* 0: wait, 1: run, -1: a thread could not start */
    pthread_barrier_t bar;
    int64_t *at;                /* per thread: the last boundary it checked in at */
    int64_t stop_at;            /* INT64_MAX until a stop is asked for */
    int stop_code;
    dt_optim **opts;
    dt_status st;               /* a meeting's failure ends every thread */
} meeting;

typedef struct worker {
    int id;
    dt_model *m;                /* shares the leader's w, own g */
    dt_acts *acts;
    dt_optim *opt;
    const dt_hogwild_cfg *cfg;
    dt_hogwild_batch_fn fn;
    void *ctx;
    double *loss;               /* (steps) this thread's losses */
    meeting *mt;
    pthread_t th;
} worker;

/* Thread t at boundary s (s steps done): fixes the stop boundary when a stop
 * is first asked for. Another thread u is computing step at[u] + 1, so it
 * next checks in there; this one is here now. */
static int64_t check_in(meeting *mt, int t, int64_t s) {
    pthread_mutex_lock(&mt->mu);
    mt->at[t] = s;
    if (mt->stop_at == INT64_MAX && mt->h->stop_poll) {
        int code = mt->h->stop_poll(mt->h->ctx);
        if (code) {
            int64_t k = s;
            for (int u = 0; u < mt->T; u++)
                if (u != t && mt->at[u] + 1 > k) k = mt->at[u] + 1;
            mt->stop_at = k;
            mt->stop_code = code;
        }
    }
    int64_t k = mt->stop_at;
    pthread_mutex_unlock(&mt->mu);
    return k;
}

/* Every thread waits at boundary s while one calls the hook. Returns whether
 * the threads go on. */
static bool meet(meeting *mt, int64_t s, bool stop) {
    int rc = pthread_barrier_wait(&mt->bar);
    if (rc == PTHREAD_BARRIER_SERIAL_THREAD && mt->h->meet && !mt->st)
        mt->st = mt->h->meet(mt->h->ctx, s, mt->opts, mt->T, stop ? mt->stop_code : 0);
    pthread_barrier_wait(&mt->bar);
    return !stop && !mt->st;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    dt_model *m = w->m;
    meeting *mt = w->mt;
    const dt_hogwild_cfg *cfg = w->cfg;
    pthread_mutex_lock(&mt->mu);
    while (!mt->go) pthread_cond_wait(&mt->gate, &mt->mu);
    bool go = mt->go > 0;
    pthread_mutex_unlock(&mt->mu);
    bool full = go; /* no stop or failed meeting ended the loop */
    for (int64_t s = cfg->start; full && s < cfg->steps; s++) {
        int64_t k = check_in(mt, w->id, s);
        bool periodic = mt->h->every > 0 && s > cfg->start && s % mt->h->every == 0;
        if ((k == s || periodic) && !meet(mt, s, k == s)) {
            full = false;
            break;
        }
        dt_batch b;
        w->fn(w->ctx, w->id, s, &b);
        if (b.B <= 0) continue;
        w->loss[s] = dt_model_forward(m, w->acts, &b, NULL);
        dt_model_backward(m, w->acts, &b, NULL, NULL, NULL, NULL);
        float lr = dt_lr_at(&cfg->sched, s);
        dt_optim_begin_step(w->opt);
        for (int i = 0; i < m->n_params; i++) {
            const dt_param *p = &m->params[i];
            /* Unsynchronised read-modify-write of the shared weights (Hogwild!). */
            dt_optim_update(w->opt, m->w + p->offset, m->g + p->offset, p->offset, p->numel, lr,
                            p->decay ? w->opt->cfg.weight_decay : 0.0f);
            memset(m->g + p->offset, 0, p->numel * sizeof(float));
        }
    }
    check_in(mt, w->id, cfg->steps); /* done: no stop waits for this thread */
    if (full && mt->h->at_end) meet(mt, cfg->steps, false);
    return NULL;
}

static dt_status meeting_init(meeting *mt, const dt_hogwild_hooks *h, int T, dt_optim **opts) {
    memset(mt, 0, sizeof *mt);
    mt->h = h;
    mt->T = T;
    mt->opts = opts;
    mt->stop_at = INT64_MAX;
    if (!(mt->at = dt_calloc((size_t)T, sizeof(int64_t)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&mt->mu, NULL);
    pthread_cond_init(&mt->gate, NULL);
    if (pthread_barrier_init(&mt->bar, NULL, (unsigned)T) != 0) {
        pthread_cond_destroy(&mt->gate);
        pthread_mutex_destroy(&mt->mu);
        dt_free(mt->at);
        mt->at = NULL;
        return dt_errorf(DT_ERR_NOMEM, "cannot create the hogwild threads' barrier");
    }
    return DT_OK;
}

static void meeting_free(meeting *mt) {
    if (!mt->at) return;
    pthread_barrier_destroy(&mt->bar);
    pthread_cond_destroy(&mt->gate);
    pthread_mutex_destroy(&mt->mu);
    dt_free(mt->at);
}

/* Thread t's model (on the shared arena), activations and optimizer. */
static dt_status worker_init(worker *w, dt_model *m, const dt_hogwild_cfg *cfg) {
    dt_status st = dt_model_create(&w->m, &m->cfg);
    if (st) return st;
    dt_free(w->m->w);
    w->m->w = m->w; /* the shared arena */
    if ((st = dt_acts_create(&w->acts, w->m, 0, w->m->n_blocks - 1, cfg->maxB))) return st;
    return dt_optim_create(&w->opt, &cfg->optim, m->n);
}

dt_status dt_hogwild_train(dt_model *m, const dt_hogwild_cfg *cfg, dt_hogwild_batch_fn fn, void *ctx, double *loss,
                           const dt_hogwild_hooks *hooks, int64_t *stopped_at, int *stop_code) {
    int T = cfg->threads;
    if (stopped_at) *stopped_at = -1;
    if (stop_code) *stop_code = 0;
    if (T < 1 || T > 256) return dt_errorf(DT_ERR_INVALID, "--threads %d is out of range [1, 256] for hogwild", T);
    if (cfg->start < 0 || cfg->start > cfg->steps) return dt_errorf(DT_ERR_INVALID, "hogwild: start step out of range");
    size_t S = (size_t)(cfg->steps > 0 ? cfg->steps : 1);
    worker *ws = dt_calloc((size_t)T, sizeof *ws);
    double *losses = dt_calloc((size_t)T * S, sizeof(double));
    dt_optim **opts = dt_calloc((size_t)T, sizeof *opts);
    meeting mt = {0};
    dt_status st = DT_OK;
    int started = 0;
    if (!ws || !losses || !opts) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int t = 0; t < T && !st; t++) {
        worker *w = &ws[t];
        *w = (worker){.id = t, .cfg = cfg, .fn = fn, .ctx = ctx, .loss = losses + (size_t)t * S};
        st = worker_init(w, m, cfg);
        opts[t] = w->opt;
    }
    static const dt_hogwild_hooks none = {0};
    const dt_hogwild_hooks *h = hooks ? hooks : &none;
    if (!st && h->load) st = h->load(h->ctx, opts, T);
    if (!st && (st = meeting_init(&mt, h, T, opts))) goto out;
    for (int t = 0; t < T && !st; t++) {
        ws[t].mt = &mt;
        if (pthread_create(&ws[t].th, NULL, worker_main, &ws[t]) != 0) {
            st = dt_errorf(DT_ERR_NOMEM, "cannot start hogwild thread %d", t);
            break;
        }
        started++;
    }
    if (mt.at) { /* the barrier counts T threads: all of them run, or none */
        pthread_mutex_lock(&mt.mu);
        mt.go = st ? -1 : 1;
        pthread_cond_broadcast(&mt.gate);
        pthread_mutex_unlock(&mt.mu);
    }
    for (int t = 0; t < started; t++) pthread_join(ws[t].th, NULL);
    if (!st) st = mt.st;
    if (!st && mt.stop_at < cfg->steps) {
        if (stopped_at) *stopped_at = mt.stop_at;
        if (stop_code) *stop_code = mt.stop_code;
    }
    if (!st && loss)
        for (int64_t s = cfg->start; s < cfg->steps; s++) {
            double sum = 0;
            for (int t = 0; t < T; t++) sum += losses[(size_t)t * S + (size_t)s];
            loss[s] = sum / T;
        }
out:
    meeting_free(&mt);
    for (int t = 0; ws && t < T; t++) {
        if (ws[t].m) ws[t].m->w = NULL; /* not ours to free */
        dt_model_destroy(ws[t].m);
        dt_acts_destroy(ws[t].acts);
        dt_optim_destroy(ws[t].opt);
    }
    dt_free(ws);
    dt_free(losses);
    dt_free(opts);
    return st;
}
