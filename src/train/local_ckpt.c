/* Local SGD's optimizer state as a checkpoint part. Local SGD averages the
 * workers' parameters every H steps but never their optimizer state, so each
 * worker's momentum (SGD) or moments (AdamW) are its own: every replica writes
 * them (optim.m.<replica>, optim.v.<replica>) beside replica 0's copy that
 * stands as the checkpoint's optimizer state. On the number of replicas that
 * wrote them each replica takes its own back, so a resume is exact; on another
 * number each starts from their mean, said in one line. Loaded after the
 * optimizer shard, which it overrides. Local SGD runs on plain data
 * parallelism (ZeRO-0), so each worker's state is the whole model's. */
#include "run.h"

#include <stdio.h>
#include <string.h>

static dt_status local_save(void *ctx, const dt_ckpt_place *at, dt_ckpt_snapshot *snap) {
    const dt_optim *o = dt_dp_optim(ctx);
    const float *mom[2] = {o->m, o->v};
    static const char *const kind[2] = {"m", "v"};
    dt_status st = DT_OK;
    for (int q = 0; q < 2 && !st; q++) {
        if (!mom[q]) continue;
        char name[64];
        snprintf(name, sizeof name, "optim.%s.%d", kind[q], at->replica);
        st = dt_ckpt_extras_add(snap->extras, name, mom[q], o->n);
    }
    return st;
}

static dt_status local_load(void *ctx, const char *path, const dt_ckpt_state *s, const dt_ckpt_place *at) {
    dt_optim *o = dt_dp_optim(ctx);
    float *mom[2] = {o->m, o->v};
    static const char *const kind[2] = {"m", "v"};
    dt_status st = DT_OK;
    for (int q = 0; q < 2 && !st; q++) {
        if (!mom[q]) continue;
        char name[64], prefix[16];
        snprintf(name, sizeof name, "optim.%s.%d", kind[q], at->replica);
        snprintf(prefix, sizeof prefix, "optim.%s.", kind[q]);
        bool found = false;
        if (s->dp == at->replicas && (st = dt_ckpt_read_extra(path, name, mom[q], o->n, &found))) return st;
        if (found) continue;
        /* Another layout (or a checkpoint without them: the shard's copy stays). */
        float *sum = dt_alloc_floats(o->n);
        int count = 0;
        if (!sum) return dt_errorf(DT_ERR_NOMEM, "out of memory resuming from %s", path);
        st = dt_ckpt_sum_extra(path, prefix, sum, o->n, &count);
        if (!st && count) {
            dt_scale(sum, o->n, 1.0f / (float)count);
            memcpy(mom[q], sum, o->n * sizeof(float));
            if (at->lead && q == 0)
                dt_log(DT_LOG_INFO, "local SGD: every worker's optimizer state starts from the mean of the %d workers' in %s",
                       count, path);
        }
        dt_free(sum);
    }
    return st;
}

bool tr_local_state(const tr_run *r) {
    return r->c->strategy == DT_STRATEGY_LOCALSGD && r->D > 1;
}

void tr_local_part(tr_run *r, dt_ckpt_part *part) {
    *part = (dt_ckpt_part){.ctx = r->dp, .save = local_save, .load = local_load};
}
