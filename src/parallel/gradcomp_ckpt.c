/* Gradient compression's state as a checkpoint part: every data-parallel
 * replica's error-feedback residual (compress.error.<replica>) and PowerSGD's
 * Q (compress.powersgd_q, the same on every replica: replica 0 writes it).
 * On the layout that wrote them each replica takes its own residual; on
 * another number of replicas each takes an equal share of their sum, which
 * keeps the total of what is still owed to the model. */
#include "dtrain/gradcomp.h"

#include <stdio.h>

static dt_status gc_save(void *ctx, const dt_ckpt_place *at, dt_ckpt_snapshot *snap) {
    dt_ckpt_extras *x = snap->extras;
    dt_gc *gc = ctx;
    dt_status st = DT_OK;
    if (dt_gc_error(gc)) {
        char name[64];
        snprintf(name, sizeof name, "compress.error.%d", at->replica);
        st = dt_ckpt_extras_add(x, name, dt_gc_error(gc), dt_gc_params(gc));
    }
    size_t nq;
    const float *q = dt_gc_powersgd_q(gc, &nq);
    if (!st && q && nq && at->replica == 0) st = dt_ckpt_extras_add(x, "compress.powersgd_q", q, nq);
    return st;
}

static dt_status gc_load(void *ctx, const char *path, const dt_ckpt_state *s, const dt_ckpt_place *at) {
    dt_gc *gc = ctx;
    size_t n = dt_gc_params(gc);
    dt_status st = DT_OK;
    float *e = dt_gc_error(gc);
    if (e) {
        char name[64];
        snprintf(name, sizeof name, "compress.error.%d", at->replica);
        bool found = false;
        if (s->dp == at->replicas && (st = dt_ckpt_read_extra(path, name, e, n, &found))) return st;
        if (!found) {
            int count = 0;
            if ((st = dt_ckpt_sum_extra(path, "compress.error.", e, n, &count))) return st;
            if (count) dt_scale(e, n, 1.0f / (float)at->replicas);
            if (at->lead && count)
                dt_log(DT_LOG_INFO, "error-feedback residuals of %d replicas shared out over %d", count, at->replicas);
        }
    }
    size_t nq;
    float *q = dt_gc_powersgd_q(gc, &nq);
    if (q && nq) {
        bool found = false;
        if ((st = dt_ckpt_read_extra(path, "compress.powersgd_q", q, nq, &found))) return st;
    }
    return DT_OK;
}

void dt_gc_part(dt_gc *gc, dt_ckpt_part *part) {
    part->ctx = gc;
    part->save = gc_save;
    part->load = gc_load;
}
