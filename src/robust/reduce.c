/* Robust reduction over a data-parallel group (see include/dtrain/robust.h).
 *
 * Every worker's vector is gathered (an all-gather of n x P floats: cost
 * (n-1)/n * n*P*beta + lg(n)*alpha with the ring), attacks are simulated (the
 * worker's own vector before it is sent, the gathered rows after), and every
 * worker computes the same aggregate into its gradient arena. With worker
 * momentum the vector is the worker's SGD direction (one pass over P). */
#include "dtrain/robust.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct dt_robust {
    dt_robust_cfg cfg;
    dt_agg a;
    dt_comm *comm;
    int n, rank;
    size_t P;
    float *vecs;      /* (n, P) */
    float *scratch;
    float *wm;        /* worker momentum (P), or NULL */
    float *centre;    /* cclip: the last aggregate (P), or NULL */
    dt_robust_load ld;
};

void dt_worker_direction(const dt_optim_cfg *o, dt_model *m, float *buf, size_t lo, size_t hi) {
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t a = p->offset > lo ? p->offset : lo;
        size_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= e) continue;
        dt_sgd_direction(o, m->w + a, m->g + a, buf + a, e - a, p->decay ? o->weight_decay : 0.0f);
    }
}

dt_status dt_robust_create(dt_robust **out, const dt_robust_cfg *cfg, const dt_model *m, dt_comm *dpc) {
    *out = NULL;
    int n = dt_comm_size(dpc);
    dt_status st = dt_agg_check(&cfg->agg, n);
    if (st) return st;
    dt_robust *r = dt_calloc(1, sizeof *r);
    if (!r) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    r->cfg = *cfg;
    r->a = cfg->agg;
    r->comm = dpc;
    r->n = n;
    r->rank = dt_comm_rank(dpc);
    r->P = m->n;
    r->vecs = dt_alloc_floats((size_t)n * m->n);
    r->scratch = dt_alloc_floats(dt_agg_scratch_floats(&r->a, n, m->n));
    if (cfg->wm) r->wm = dt_alloc_floats(m->n); /* zeroed */
    if (cfg->agg.kind == DT_AGG_CCLIP) r->centre = dt_alloc_floats(m->n); /* zeroed: the first centre */
    if (!r->vecs || !r->scratch || (cfg->wm && !r->wm) || (cfg->agg.kind == DT_AGG_CCLIP && !r->centre)) {
        dt_robust_destroy(r);
        return dt_errorf(DT_ERR_NOMEM, "out of memory gathering %d worker gradients", n);
    }
    *out = r;
    return DT_OK;
}

void dt_robust_destroy(dt_robust *r) {
    if (!r) return;
    dt_free(r->vecs);
    dt_free(r->scratch);
    dt_free(r->wm);
    dt_free(r->centre);
    dt_free(r);
}

float *dt_robust_momentum(dt_robust *r) { return r ? r->wm : NULL; }

size_t dt_robust_state_bytes(const dt_robust *r) { return r && r->wm ? r->P * sizeof(float) : 0; }

dt_status dt_robust_reduce(dt_robust *r, dt_model *m, int64_t step) {
    size_t P = r->P;
    if (r->wm) {
        if (r->cfg.clip > 0) dt_scale(m->g, P, dt_clip_factor(sqrt(dt_sumsq(m->g, P)), r->cfg.clip));
        dt_worker_direction(r->cfg.wm, m, r->wm, 0, P);
    }
    if (r->cfg.corrupt) r->cfg.corrupt(r->cfg.corrupt_ctx, m->g, P, step);
    memcpy(r->vecs + (size_t)r->rank * P, m->g, P * sizeof(float));
    dt_status st = dt_allgather(r->comm, r->vecs, (size_t)r->n * P, r->cfg.algo);
    if (st) return st;
    if (r->cfg.tamper) r->cfg.tamper(r->cfg.tamper_ctx, r->vecs, r->n, P);
    if (r->centre) memcpy(m->g, r->centre, P * sizeof(float)); /* cclip starts from the last aggregate */
    dt_agg_apply(&r->a, m->g, r->vecs, r->n, P, r->scratch);
    if (r->centre) memcpy(r->centre, m->g, P * sizeof(float));
    return DT_OK;
}

/* ---- resume -----------------------------------------------------------------
 * Worker momentum (momentum.worker.<replica>, one per worker): on the layout
 * that wrote them each worker takes its own buffer, on another their mean (the
 * momentum of the mean gradient); a checkpoint of a run that kept the momentum
 * in the optimizer gives every worker that buffer (M), and the other way round
 * the optimizer gets the workers' mean (wm NULL, M filled, *have_m set). */
dt_status dt_resume_worker_momentum(const char *path, const dt_ckpt_state *s, float *wm, float *M, bool *have_m,
                                    const dt_ckpt_place *at, size_t n) {
    dt_status st = DT_OK;
    int count = 0;
    if (!wm) {
        if (s->n_states >= 1 || !M) return DT_OK;
        if ((st = dt_ckpt_sum_extra(path, "momentum.worker.", M, n, &count))) return st;
        if (!count) return DT_OK;
        dt_scale(M, n, 1.0f / (float)count);
        *have_m = true;
        if (at->lead) dt_log(DT_LOG_INFO, "the optimizer's momentum is the mean of the %d workers' momenta in %s", count, path);
        return DT_OK;
    }
    char name[64];
    snprintf(name, sizeof name, "momentum.worker.%d", at->replica);
    bool found = false;
    if (s->dp == at->replicas && (st = dt_ckpt_read_extra(path, name, wm, n, &found))) return st;
    if (found) return DT_OK;
    if ((st = dt_ckpt_sum_extra(path, "momentum.worker.", wm, n, &count))) return st;
    if (count) {
        dt_scale(wm, n, 1.0f / (float)count);
        if (at->lead) dt_log(DT_LOG_INFO, "every worker starts from the mean of the %d worker momenta in %s", count, path);
    } else if (s->n_states >= 1) {
        memcpy(wm, M, n * sizeof(float));
        if (at->lead) dt_log(DT_LOG_INFO, "every worker starts from the optimizer's momentum in %s", path);
    } else {
        memset(wm, 0, n * sizeof(float));
    }
    return DT_OK;
}

/* Centred clipping's history: the last aggregate, the same on every worker. A
 * centre of momenta (worker momentum) is ~1/(1-beta) times one of gradients:
 * it only carries over between runs that aggregate the same. */
static dt_status load_centre(dt_robust *r, const char *path, bool lead) {
    bool found = false, ck_wm = false;
    dt_status st = dt_ckpt_read_extra(path, "aggregate.centre", r->centre, r->P, &found);
    if (!st && found) {
        float *probe = dt_alloc_floats(r->P);
        st = probe ? dt_ckpt_read_extra(path, "momentum.worker.0", probe, r->P, &ck_wm)
                   : dt_errorf(DT_ERR_NOMEM, "out of memory resuming from %s", path);
        dt_free(probe);
    }
    if (st) return st;
    if (found && ck_wm != (r->wm != NULL)) {
        memset(r->centre, 0, r->P * sizeof(float));
        if (lead)
            dt_log(DT_LOG_INFO, "%s's centred-clipping centre is an aggregate of %s, this run aggregates %s: it starts from zero",
                   path, ck_wm ? "momenta" : "gradients", r->wm ? "momenta" : "gradients");
    } else if (!found && lead) {
        dt_log(DT_LOG_INFO, "%s has no centred-clipping centre (aggregate.centre): it starts from zero", path);
    }
    return DT_OK;
}

static dt_status part_load(void *ctx, const char *path, const dt_ckpt_state *s, const dt_ckpt_place *at) {
    dt_robust *r = ctx;
    dt_status st = dt_resume_worker_momentum(path, s, r->wm, r->ld.M, r->ld.have_m, at, r->P);
    if (!st && r->centre) st = load_centre(r, path, at->lead);
    return st;
}

static dt_status part_save(void *ctx, const dt_ckpt_place *at, dt_ckpt_snapshot *snap) {
    dt_ckpt_extras *x = snap->extras;
    dt_robust *r = ctx;
    dt_status st = DT_OK;
    if (r->wm) {
        /* Every replica's own buffer (the optimizer has none): every replica writes. */
        char name[64];
        snprintf(name, sizeof name, "momentum.worker.%d", at->replica);
        st = dt_ckpt_extras_add(x, name, r->wm, r->P);
    }
    if (!st && r->centre && at->replica == 0) st = dt_ckpt_extras_add(x, "aggregate.centre", r->centre, r->P);
    return st;
}

void dt_robust_part(dt_robust *r, dt_robust_load *ld, dt_ckpt_part *part) {
    r->ld = *ld;
    part->ctx = r;
    part->save = part_save;
    part->load = part_load;
}
