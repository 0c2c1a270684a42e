/* Optimizer objects: configuration checks, state allocation and dispatch to
 * the kernels in sgd.c and adamw.c. */
#include "optim_internal.h"

#include <string.h>

#include <math.h>

void dt_optim_cfg_default(dt_optim_cfg *c, dt_optim_kind kind) {
    *c = (dt_optim_cfg){
        .kind = kind,
        .momentum = 0.0f,
        .nesterov = false,
        .weight_decay = kind == DT_OPTIM_ADAMW ? 0.01f : 0.0f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
    };
}

/* Every field is checked whatever the kind (defaults are valid for both), so a
 * nonsensical flag is reported even where it would be ignored. The negated
 * comparisons also reject NaN. */
dt_status dt_optim_cfg_check(const dt_optim_cfg *c) {
    if ((unsigned)c->kind >= DT_OPTIM_COUNT)
        return dt_errorf(DT_ERR_INVALID, "unknown optimizer kind %d", (int)c->kind);
    if (!(c->momentum >= 0.0f && c->momentum < 1.0f))
        return dt_errorf(DT_ERR_INVALID, "--momentum %g: must be in [0, 1)", (double)c->momentum);
    if (c->kind == DT_OPTIM_SGD && c->nesterov && c->momentum <= 0.0f)
        return dt_errorf(DT_ERR_INVALID, "--nesterov needs --momentum > 0");
    if (!(c->weight_decay >= 0.0f && isfinite(c->weight_decay)))
        return dt_errorf(DT_ERR_INVALID, "--weight-decay %g: must be a finite value >= 0",
                         (double)c->weight_decay);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
        return dt_errorf(DT_ERR_INVALID, "--beta1 %g: must be in [0, 1)", (double)c->beta1);
    if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return dt_errorf(DT_ERR_INVALID, "--beta2 %g: must be in [0, 1)", (double)c->beta2);
    if (!(c->eps > 0.0f && isfinite(c->eps)))
        return dt_errorf(DT_ERR_INVALID, "--eps %g: must be a finite value > 0", (double)c->eps);
    return DT_OK;
}

dt_status dt_optim_create(dt_optim **out, const dt_optim_cfg *cfg, size_t n) {
    *out = NULL;
    dt_status st = dt_optim_cfg_check(cfg);
    if (st != DT_OK) return st;
    dt_optim *o = dt_calloc(1, sizeof *o);
    if (!o) return dt_errorf(DT_ERR_NOMEM, "optimizer: out of memory");
    o->cfg = *cfg;
    o->n = n;
    bool need_m = cfg->kind == DT_OPTIM_ADAMW || cfg->momentum > 0.0f;
    bool need_v = cfg->kind == DT_OPTIM_ADAMW;
    if ((need_m && !(o->m = dt_alloc_floats(n))) || (need_v && !(o->v = dt_alloc_floats(n)))) {
        dt_optim_destroy(o);
        return dt_errorf(DT_ERR_NOMEM, "optimizer: out of memory for %zu floats of state", n);
    }
    *out = o;
    return DT_OK;
}

void dt_optim_destroy(dt_optim *o) {
    if (!o) return;
    dt_free(o->m);
    dt_free(o->v);
    dt_free(o);
}

size_t dt_optim_state_bytes(const dt_optim *o) {
    return ((o->m ? o->n : 0) + (o->v ? o->n : 0)) * sizeof(float);
}

void dt_optim_begin_step(dt_optim *o) { o->t++; }

void dt_optim_update(dt_optim *o, float *w, const float *g, size_t state_off, size_t n,
                     float lr, float wd) {
    DT_ASSERT(state_off <= o->n && n <= o->n - state_off);
    if (n == 0) return;
    switch (o->cfg.kind) {
    case DT_OPTIM_SGD:
        dt_sgd_update(o, w, g, o->m ? o->m + state_off : NULL, n, lr, wd);
        break;
    case DT_OPTIM_ADAMW:
        dt_adamw_update(o, w, g, o->m + state_off, o->v + state_off, n, lr, wd);
        break;
    default:
        DT_ASSERT(!"unknown optimizer kind");
    }
}

void dt_optim_update_zero(dt_optim *o, float *w, float *g, size_t state_off, size_t n, float lr, float wd) {
    for (size_t i = 0; i < n; i += DT_OPTIM_ZERO_CHUNK) {
        size_t k = n - i < DT_OPTIM_ZERO_CHUNK ? n - i : DT_OPTIM_ZERO_CHUNK;
        dt_optim_update(o, w + i, g + i, state_off + i, k, lr, wd);
        memset(g + i, 0, k * sizeof(float));
    }
}
