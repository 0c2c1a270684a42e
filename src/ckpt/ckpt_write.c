/* The checkpoint writer: the step loop takes an in-memory snapshot (a copy of
 * the parameters this rank writes, its optimizer shard and its extra tensors:
 * O(bytes owned) memcpy, the only cost on the step's critical path), and a
 * background thread persists it (ckpt_persist.c). One persist is in flight at
 * a time; a save while one runs waits for it (back-pressure, counted in
 * dt_ckpt_blocking_seconds). */
#include "ckpt_internal.h"

#include <stdio.h>
#include <string.h>

static int n_states_of(const dt_optim *o) {
    if (o->cfg.kind == DT_OPTIM_ADAMW) return 2;
    return o->m ? 1 : 0;
}

static void extras_free(dt_ckpt_writer *w) {
    for (int i = 0; i < w->n_extra; i++) dt_free(w->extra_data[i]);
    dt_free(w->extra_name);
    dt_free(w->extra_data);
    dt_free(w->extra_len);
    w->extra_name = NULL;
    w->extra_data = NULL;
    w->extra_len = NULL;
    w->n_extra = 0;
}

static void *writer_thread(void *arg) {
    dt_ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && !w->pending) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->pending && w->quit) break;
        pthread_mutex_unlock(&w->mu);
        double t0 = dt_now();
        dt_status st = dt_ckpt_persist(w);
        pthread_mutex_lock(&w->mu);
        w->persist_s = dt_now() - t0;
        w->last = st;
        if (st) snprintf(w->last_msg, sizeof w->last_msg, "%s", dt_error_msg());
        w->pending = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

dt_status dt_ckpt_writer_create(dt_ckpt_writer **out, const char *dir, int rank, int world,
                                const int *writers, int n_writers, int keep, double timeout) {
    *out = NULL;
    dt_status st = dt_ckpt_mkdir_p(dir);
    if (st) return st;
    dt_ckpt_writer *w = dt_calloc(1, sizeof *w);
    if (!w) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    w->dir = dt_strdup(dir);
    w->rank = rank;
    w->world = world;
    w->keep = keep;
    w->timeout = timeout > 0 ? timeout : 600;
    w->n_writers = writers ? n_writers : world;
    w->writers = dt_calloc((size_t)w->n_writers, sizeof(int));
    if (!w->writers) {
        dt_ckpt_writer_destroy(w);
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < w->n_writers; i++) {
        w->writers[i] = writers ? writers[i] : i;
        w->writes |= w->writers[i] == rank;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (!w->dir || pthread_create(&w->thread, NULL, writer_thread, w) != 0) {
        dt_ckpt_writer_destroy(w);
        return dt_errorf(DT_ERR_NOMEM, "cannot start the checkpoint writer");
    }
    w->started = true;
    *out = w;
    return DT_OK;
}

void dt_ckpt_writer_destroy(dt_ckpt_writer *w) {
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->quit = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    dt_free(w->dir);
    dt_free(w->writers);
    dt_free(w->mask);
    dt_free(w->params);
    dt_free(w->st[0]);
    dt_free(w->st[1]);
    dt_free(w->runs);
    extras_free(w);
    dt_free(w);
}

static dt_status wait_idle(dt_ckpt_writer *w) {
    pthread_mutex_lock(&w->mu);
    while (w->pending) pthread_cond_wait(&w->cv, &w->mu);
    dt_status st = w->last;
    if (st) dt_errorf(st, "%s", w->last_msg);
    w->last = DT_OK;
    pthread_mutex_unlock(&w->mu);
    return st;
}

dt_status dt_ckpt_flush(dt_ckpt_writer *w) { return w ? wait_idle(w) : DT_OK; }

double dt_ckpt_blocking_seconds(const dt_ckpt_writer *w) { return w ? w->blocking_s : 0; }

double dt_ckpt_persist_seconds(const dt_ckpt_writer *w) {
    if (!w) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&w->mu);
    double s = w->persist_s;
    pthread_mutex_unlock((pthread_mutex_t *)&w->mu);
    return s;
}

void dt_ckpt_writer_set_net(dt_ckpt_writer *w, const dt_ckpt_net *net) {
    if (net) w->net = *net;
    else memset(&w->net, 0, sizeof w->net);
}

/* The parameters: rank 0's whole tensors (mask) or the shard's runs
 * (params_too) need m->w as it is now; the buffer is kept between saves. */
static dt_status snapshot_params(dt_ckpt_writer *w, const dt_model *m, const dt_ckpt_shard *shard,
                                 const bool *param_mask) {
    dt_free(w->mask);
    w->mask = dt_calloc((size_t)m->n_params + 1, sizeof(bool));
    if (!w->mask) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    bool any = false;
    for (int i = 0; i < m->n_params; i++) any |= (w->mask[i] = param_mask && param_mask[i]);
    w->params_too = shard->params_too;
    if (!any && !shard->params_too) return DT_OK;
    if (w->params_cap < m->n) {
        dt_free(w->params);
        w->params = dt_alloc_floats(m->n);
        w->params_cap = w->params ? m->n : 0;
        if (!w->params) return dt_errorf(DT_ERR_NOMEM, "out of memory for a checkpoint snapshot");
    }
    memcpy(w->params, m->w, m->n * sizeof(float));
    return DT_OK;
}

/* This rank's optimizer state (m, v) and the runs that place it in the arena. */
static dt_status snapshot_optim(dt_ckpt_writer *w, const dt_optim *o, const dt_ckpt_shard *shard) {
    if (w->st_cap < o->n) {
        dt_free(w->st[0]);
        dt_free(w->st[1]);
        w->st[0] = dt_alloc_floats(o->n);
        w->st[1] = dt_alloc_floats(o->n);
        w->st_cap = (w->st[0] && w->st[1]) ? o->n : 0;
        if (!w->st_cap) return dt_errorf(DT_ERR_NOMEM, "out of memory for a checkpoint snapshot");
    }
    if (o->n && w->n_states >= 1) memcpy(w->st[0], o->m, o->n * sizeof(float));
    if (o->n && w->n_states >= 2) memcpy(w->st[1], o->v, o->n * sizeof(float));
    dt_free(w->runs);
    w->runs = dt_calloc((size_t)shard->n * 3 + 1, sizeof(size_t));
    if (!w->runs) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < shard->n; i++) {
        w->runs[3 * i] = shard->arena_off[i];
        w->runs[3 * i + 1] = shard->len[i];
        w->runs[3 * i + 2] = shard->state_off[i];
    }
    w->nruns = shard->n;
    return DT_OK;
}

/* Extra tensors are borrowed only until the save returns: copy them. */
static dt_status snapshot_extras(dt_ckpt_writer *w, const dt_ckpt_shard *shard) {
    extras_free(w);
    if (shard->n_extra <= 0) return DT_OK;
    w->extra_name = dt_calloc((size_t)shard->n_extra, sizeof *w->extra_name);
    w->extra_data = dt_calloc((size_t)shard->n_extra, sizeof(float *));
    w->extra_len = dt_calloc((size_t)shard->n_extra, sizeof(size_t));
    if (!w->extra_name || !w->extra_data || !w->extra_len) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    w->n_extra = shard->n_extra;
    for (int i = 0; i < shard->n_extra; i++) {
        snprintf(w->extra_name[i], sizeof w->extra_name[i], "%s", shard->extra_name[i]);
        w->extra_len[i] = shard->extra_len[i];
        w->extra_data[i] = dt_alloc_floats(shard->extra_len[i] ? shard->extra_len[i] : 1);
        if (!w->extra_data[i]) return dt_errorf(DT_ERR_NOMEM, "out of memory for a checkpoint snapshot");
        memcpy(w->extra_data[i], shard->extra_data[i], shard->extra_len[i] * sizeof(float));
    }
    return DT_OK;
}

dt_status dt_ckpt_save_async(dt_ckpt_writer *w, const dt_model *m, const dt_optim *o,
                             const dt_ckpt_shard *shard, const bool *param_mask,
                             const dt_ckpt_state *state) {
    double t0 = dt_now();
    dt_status st = wait_idle(w);
    if (st) return st;
    w->model = m;
    w->state = *state;
    w->n_states = n_states_of(o);
    w->state.n_states = w->n_states;
    if ((st = snapshot_params(w, m, shard, param_mask))) return st;
    if ((st = snapshot_optim(w, o, shard))) return st;
    if ((st = snapshot_extras(w, shard))) return st;
    pthread_mutex_lock(&w->mu);
    w->pending = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    w->blocking_s += dt_now() - t0;
    return DT_OK;
}
