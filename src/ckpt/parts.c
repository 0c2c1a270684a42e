/* Checkpoint parts (see include/dtrain/ckpt.h): the extra-tensor list a part
 * fills, and the sampler's part (its position is scalar state, no tensor). */
#include "dtrain/ckpt.h"
#include "dtrain/data.h"

#include <stdio.h>
#include <string.h>

dt_status dt_ckpt_extras_add(dt_ckpt_extras *x, const char *name, const float *data, size_t len) {
    if (x->n == DT_CKPT_MAX_EXTRA)
        return dt_errorf(DT_ERR_INVALID, "a checkpoint rank file holds at most %d extra tensors (adding %s)",
                         DT_CKPT_MAX_EXTRA, name);
    snprintf(x->names[x->n], sizeof x->names[x->n], "%s", name);
    x->name[x->n] = x->names[x->n];
    x->data[x->n] = data;
    x->len[x->n++] = len;
    return DT_OK;
}

void dt_ckpt_extras_attach(const dt_ckpt_extras *x, dt_ckpt_shard *shard) {
    shard->n_extra = x->n;
    shard->extra_name = x->name;
    shard->extra_data = x->data;
    shard->extra_len = x->len;
}

static dt_status sampler_save(void *ctx, const dt_ckpt_place *at, dt_ckpt_snapshot *snap) {
    const dt_sampler *sp = ctx;
    snap->state->epoch = sp->epoch;
    snap->state->index = sp->index;
    return DT_OK;
}

static dt_status sampler_load(void *ctx, const char *path, const dt_ckpt_state *s, const dt_ckpt_place *at) {
    return dt_sampler_seek(ctx, s->epoch, s->index);
}

void dt_ckpt_part_sampler(dt_sampler *s, dt_ckpt_part *part) {
    part->ctx = s;
    part->save = sampler_save;
    part->load = sampler_load;
}
