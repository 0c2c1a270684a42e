/* Checkpoints of the sync driver. Replica 0 of each stage writes its stage's
 * parameters; the optimizer state is written by every rank under ZeRO-1/2
 * (each holds a different shard), by replica 0 of each stage under ZeRO-0;
 * every state owner adds its own tensors (dt_ckpt_part). With tensor
 * parallelism the shards are gathered into logical tensors and rank 0 writes
 * them all. The snapshot is in memory; a background thread persists it. */
#include "run.h"

#include <string.h>

/* Each element of the logical model is held by exactly one (stage, tp rank)
 * pair of replica 0 (replicated tensors: tp rank 0); every such rank writes
 * its part into a zeroed logical buffer and a sum over the world assembles it. */
static dt_status gather_logical(const tr_run *r, const float *local, float *logical, bool contribute) {
    memset(logical, 0, r->full->n * sizeof(float));
    if (contribute) dt_model_local_to_logical(r->m, local, r->full, logical, true, r->smask);
    return dt_allreduce(r->world, logical, r->full->n, DT_OP_SUM, DT_ALGO_AUTO);
}

dt_status tr_gather_weights(tr_run *r) {
    return r->full ? gather_logical(r, r->m->w, r->full->w, r->replica == 0) : DT_OK;
}

/* The state owners, in the order they write: optimizer shard, sampler,
 * robust aggregation, compression, local SGD's per-worker optimizer state. */
static void collect_parts(tr_run *r) {
    tr_ckpt *k = &r->ck;
    k->n_parts = 0;
    k->dpp = (dt_dp_part_ctx){.dp = r->dp};
    dt_dp_part(&k->dpp, &k->parts[k->n_parts++]);
    dt_ckpt_part_sampler(&r->ld.sampler, &k->parts[k->n_parts++]);
    if (r->rob) {
        dt_robust_load none = {NULL, NULL};
        dt_robust_part(r->rob, &none, &k->parts[k->n_parts++]);
    }
    dt_gc *gc = dt_dp_gc(r->dp);
    if (gc) dt_gc_part(gc, &k->parts[k->n_parts++]);
    if (tr_local_state(r)) tr_local_part(r, &k->parts[k->n_parts++]);
}

dt_status tr_ckpt_open(tr_run *r) {
    const dt_train_cfg *c = r->c;
    if (!c->ckpt_dir) return DT_OK;
    tr_ckpt *k = &r->ck;
    dt_model *m = r->m;
    collect_parts(r);
    /* Per-rank state (error-feedback residuals, worker momenta, local SGD's
     * optimizer state): every replica writes. */
    dt_gc *gc = dt_dp_gc(r->dp);
    bool own = (gc && dt_gc_error(gc)) || dt_robust_momentum(r->rob) || tr_local_state(r);
    k->writers = dt_calloc((size_t)r->n, sizeof(int));
    k->pmask = dt_calloc((size_t)m->n_params + 1, sizeof(bool));
    if (!k->writers || !k->pmask) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    int n_writers = 0;
    for (int q = 0; q < r->n; q++)
        if (r->TP > 1 ? q == 0 : (c->dp.zero || own || (q / r->TP) % r->D == 0)) k->writers[n_writers++] = q;
    for (int i = 0; i < m->n_params; i++) k->pmask[i] = r->TP > 1 ? r->rank == 0 : (r->replica == 0 && r->smask[i]);
    if (r->TP > 1) {
        size_t len[4] = {m->n, m->n, r->full->n, r->full->n};
        for (int i = 0; i < 4; i++)
            if (!(k->gbuf[i] = dt_alloc_floats(len[i]))) return dt_errorf(DT_ERR_NOMEM, "out of memory for checkpoint buffers");
    }
    dt_status st = dt_ckpt_writer_create(&k->w, c->ckpt_dir, r->rank, r->n, k->writers, n_writers, c->ckpt_keep, 10 * c->timeout);
    if (!st) tr_ckpt_net_attach(r, k->w);
    return st;
}

/* Tensor parallelism: logical parameters and optimizer state gathered to rank
 * 0, which writes them. */
static dt_status save_gathered(tr_run *r, const dt_ckpt_snapshot *snap) {
    tr_ckpt *k = &r->ck;
    const dt_optim *o = snap->optim;
    const dt_ckpt_shard *shard = snap->shard;
    const dt_ckpt_state *cs = snap->state;
    bool owns = r->c->dp.zero || r->replica == 0;
    float *src[2] = {o->m, o->v};
    for (int q = 0; q < 2; q++) {
        memset(k->gbuf[q], 0, r->m->n * sizeof(float));
        if (owns && src[q])
            for (int i = 0; i < shard->n; i++)
                memcpy(k->gbuf[q] + shard->arena_off[i], src[q] + shard->state_off[i], shard->len[i] * sizeof(float));
    }
    dt_status st = gather_logical(r, r->m->w, r->full->w, r->replica == 0);
    if (!st) st = gather_logical(r, k->gbuf[0], k->gbuf[2], owns);
    if (!st) st = gather_logical(r, k->gbuf[1], k->gbuf[3], owns);
    if (st) return st;
    if (r->rank != 0) {
        /* Per-host directories: every rank takes part in every persist. */
        dt_ckpt_shard none = {0};
        return k->net ? dt_ckpt_save_async(k->w, r->m, o, &none, NULL, cs) : DT_OK;
    }
    dt_optim fo = *o;
    fo.n = r->full->n;
    fo.m = o->m ? k->gbuf[2] : NULL;
    fo.v = o->v ? k->gbuf[3] : NULL;
    size_t zero_off = 0, all = r->full->n;
    dt_ckpt_shard one = {.n = 1, .arena_off = &zero_off, .len = &all, .state_off = &zero_off};
    return dt_ckpt_save_async(k->w, r->full, &fo, &one, k->pmask, cs);
}

dt_status tr_ckpt_maybe_save(tr_run *r, int64_t step) {
    const dt_train_cfg *c = r->c;
    if (!r->ck.w || c->ckpt_stop_only || !((c->ckpt_every > 0 && step % c->ckpt_every == 0) || step == r->total)) return DT_OK;
    return tr_ckpt_save(r, step);
}

dt_status tr_ckpt_save(tr_run *r, int64_t step) {
    const dt_train_cfg *c = r->c;
    tr_ckpt *k = &r->ck;
    dt_ckpt_state cs;
    memset(&cs, 0, sizeof cs);
    cs.step = step;
    cs.seed = c->seed;
    cs.world = r->n;
    cs.zero = c->dp.zero;
    cs.dp = r->D;
    cs.pp = r->P;
    cs.tp = r->TP;
    cs.batch = c->batch;
    cs.optim = c->optim.kind;
    if (r->fp16) {
        cs.loss_scale = r->scaler.scale;
        cs.scale_clean = r->scaler.clean;
    }
    snprintf(cs.config, sizeof cs.config, "%s", c->config_json ? c->config_json : "{}");
    dt_ckpt_place at = {.replica = r->replica, .replicas = r->D, .lead = r->lead};
    dt_ckpt_extras x = {0};
    dt_ckpt_shard shard = {0};
    dt_ckpt_snapshot snap = {.state = &cs, .extras = &x, .shard = &shard};
    dt_status st = DT_OK;
    for (int i = 0; i < k->n_parts && !st; i++) st = k->parts[i].save(k->parts[i].ctx, &at, &snap);
    if (st) return st;
    dt_ckpt_extras_attach(&x, &shard);
    /* Under ZeRO-0 only replica 0 writes optimizer state (the others, writing
     * their own residuals or momenta, hold the same copy; under local SGD their
     * own copies go in as extras). */
    if ((dt_dp_gc(r->dp) || dt_robust_momentum(r->rob) || tr_local_state(r)) && !c->dp.zero && r->replica != 0)
        shard.n = 0;
    double ts = dt_now();
    /* ZeRO-3: the whole model for the snapshot's copy, released after it. */
    if ((st = dt_dp_params_full(r->dp, true))) return st;
    st = r->TP > 1 ? save_gathered(r, &snap) : dt_ckpt_save_async(k->w, r->m, snap.optim, &shard, k->pmask, &cs);
    dt_status rs = dt_dp_params_full(r->dp, false);
    if (!st) st = rs;
    if (!st && r->trace) dt_trace_event(r->trace, "checkpoint snapshot", DT_TRACE_COMPUTE, ts, dt_now(), step, -1);
    k->last_step = step;
    r->stop.snap_s = dt_now() - ts;
    return st;
}
