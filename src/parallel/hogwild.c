/* Hogwild!: lock-free threads on one shared parameter arena. See
 * include/dtrain/hogwild.h for the data-race semantics. */
#include "dtrain/hogwild.h"

#include <pthread.h>
#include <string.h>

typedef struct worker {
    int id;
    dt_model *m;                /* shares the leader's w, own g */
    dt_acts *acts;
    dt_optim *opt;
    const dt_model *shared;
    const dt_hogwild_cfg *cfg;
    dt_hogwild_batch_fn fn;
    void *ctx;
    double *loss;               /* (steps) this thread's losses */
    pthread_t th;
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    dt_model *m = w->m;
    for (int64_t s = 0; s < w->cfg->steps; s++) {
        dt_batch b;
        w->fn(w->ctx, w->id, s, &b);
        if (b.B <= 0) continue;
        w->loss[s] = dt_model_forward(m, w->acts, &b, NULL);
        dt_model_backward(m, w->acts, &b, NULL, NULL, NULL, NULL);
        float lr = dt_lr_at(&w->cfg->sched, s);
        dt_optim_begin_step(w->opt);
        for (int i = 0; i < m->n_params; i++) {
            const dt_param *p = &m->params[i];
            /* Unsynchronised read-modify-write of the shared weights (Hogwild!). */
            dt_optim_update(w->opt, m->w + p->offset, m->g + p->offset, p->offset, p->numel, lr,
                            p->decay ? w->opt->cfg.weight_decay : 0.0f);
            memset(m->g + p->offset, 0, p->numel * sizeof(float));
        }
    }
    return NULL;
}

dt_status dt_hogwild_train(dt_model *m, const dt_hogwild_cfg *cfg, dt_hogwild_batch_fn fn, void *ctx,
                           double *loss) {
    int T = cfg->threads;
    if (T < 1 || T > 256) return dt_errorf(DT_ERR_INVALID, "--threads %d is out of range [1, 256] for hogwild", T);
    worker *ws = dt_calloc((size_t)T, sizeof *ws);
    double *losses = dt_calloc((size_t)T * (size_t)(cfg->steps > 0 ? cfg->steps : 1), sizeof(double));
    dt_status st = DT_OK;
    int started = 0;
    if (!ws || !losses) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int t = 0; t < T && !st; t++) {
        worker *w = &ws[t];
        w->id = t;
        w->cfg = cfg;
        w->fn = fn;
        w->ctx = ctx;
        w->shared = m;
        w->loss = losses + (size_t)t * (size_t)cfg->steps;
        if ((st = dt_model_create(&w->m, &m->cfg))) break;
        dt_free(w->m->w);
        w->m->w = m->w; /* the shared arena */
        if ((st = dt_acts_create(&w->acts, w->m, 0, w->m->n_blocks - 1, cfg->maxB))) break;
        st = dt_optim_create(&w->opt, &cfg->optim, m->n);
    }
    for (int t = 0; t < T && !st; t++) {
        if (pthread_create(&ws[t].th, NULL, worker_main, &ws[t]) != 0) {
            st = dt_errorf(DT_ERR_NOMEM, "cannot start hogwild thread %d", t);
            break;
        }
        started++;
    }
    for (int t = 0; t < started; t++) pthread_join(ws[t].th, NULL);
    if (!st && loss)
        for (int64_t s = 0; s < cfg->steps; s++) {
            double sum = 0;
            for (int t = 0; t < T; t++) sum += losses[(size_t)t * (size_t)cfg->steps + (size_t)s];
            loss[s] = sum / T;
        }
out:
    for (int t = 0; ws && t < T; t++) {
        if (ws[t].m) ws[t].m->w = NULL; /* not ours to free */
        dt_model_destroy(ws[t].m);
        dt_acts_destroy(ws[t].acts);
        dt_optim_destroy(ws[t].opt);
    }
    dt_free(ws);
    dt_free(losses);
    return st;
}
