/* The resume phase of the sync driver. Every rank reads the checkpoint (a
 * shared file system for multi-host jobs), takes the full logical parameters
 * and its own shard of the optimizer state; every state owner (sampler,
 * compression, robust aggregation) loads its own part: any layout resumes any
 * checkpoint. */
#include "run.h"

#include <stdio.h>
#include <string.h>

bool tr_resume_path(const dt_train_cfg *c, bool lead, char *path, size_t n) {
    if (strcmp(c->resume, "auto") != 0) {
        snprintf(path, n, "%s", c->resume);
        return true;
    }
    if (dt_ckpt_find_latest(c->ckpt_dir, path, n) == DT_OK) return true;
    if (lead) dt_log(DT_LOG_INFO, "no valid checkpoint in %s: starting from scratch", c->ckpt_dir);
    return false;
}

dt_status tr_same_run(const dt_train_cfg *c, const char *path, const dt_ckpt_state *s) {
    if (s->optim != c->optim.kind)
        return dt_errorf(DT_ERR_INVALID, "%s was written with --optim %s; resume with the same optimizer", path,
                         s->optim == DT_OPTIM_ADAMW ? "adamw" : "sgd");
    if (s->batch != c->batch)
        return dt_errorf(DT_ERR_INVALID, "%s was written with global --batch %d, not %d; resume with the same global batch",
                         path, s->batch, c->batch);
    if (s->seed != c->seed)
        return dt_errorf(DT_ERR_INVALID, "%s was written with --seed %llu, not %llu; resume with the same seed",
                         path, (unsigned long long)s->seed, (unsigned long long)c->seed);
    return DT_OK;
}

/* The parts that restore themselves from the logical state, in the order they
 * load (the optimizer shard comes after them: worker momentum may give it its
 * momentum). */
static int resume_parts(tr_run *r, dt_robust_load *rl, dt_ckpt_part *parts) {
    int n = 0;
    if (r->rob) dt_robust_part(r->rob, rl, &parts[n++]);
    dt_gc *gc = dt_dp_gc(r->dp);
    if (gc) dt_gc_part(gc, &parts[n++]);
    dt_ckpt_part_sampler(&r->ld.sampler, &parts[n++]);
    return n;
}

/* Loads path into the run: parameters and logical optimizer state M, V (of
 * the unsharded model lm), then the parts. */
static dt_status load(tr_run *r, const char *path, dt_model *lm, float *M, float *V, dt_ckpt_state *s) {
    double tl = dt_now();
    dt_status st = dt_ckpt_load(path, lm, M, V, s);
    tl = dt_now() - tl;
    if (!st) st = tr_same_run(r->c, path, s);
    if (st) return st;
    bool have_m = s->n_states >= 1;
    dt_ckpt_place at = {.replica = r->replica, .replicas = r->D, .lead = r->lead};
    dt_robust_load rl = {M, &have_m};
    /* Worker momenta <-> optimizer momentum on the logical M (before tensor
     * parallelism takes its shards; worker momentum never runs with --tp). */
    if (!r->rob && (st = dt_resume_worker_momentum(path, s, NULL, M, &have_m, &at, lm->n))) return st;
    dt_ckpt_part parts[4];
    int n = resume_parts(r, &rl, parts);
    for (int i = 0; i < n && !st; i++) st = parts[i].load(parts[i].ctx, path, s, &at);
    if (st) return st;
    /* The optimizer shard last, from the logical state in this rank's layout:
     * with tensor parallelism each rank takes its shards. */
    dt_dp_part_ctx dl = {r->dp, have_m ? M : NULL, s->n_states >= 2 ? V : NULL};
    float *Ml = NULL, *Vl = NULL;
    if (r->full && r->TP > 1) {
        Ml = dt_alloc_floats(r->m->n);
        Vl = dt_alloc_floats(r->m->n);
        if (!Ml || !Vl) st = dt_errorf(DT_ERR_NOMEM, "out of memory resuming from %s", path);
        if (!st) {
            dt_model_local_from_logical(r->m, r->m->w, r->full, r->full->w);
            dt_model_local_from_logical(r->m, Ml, r->full, M);
            dt_model_local_from_logical(r->m, Vl, r->full, V);
            dl.M = have_m ? Ml : NULL;
            dl.V = s->n_states >= 2 ? Vl : NULL;
        }
    }
    dt_ckpt_part dp, local;
    dt_dp_part(&dl, &dp);
    if (!st) st = dp.load(dp.ctx, path, s, &at);
    if (!st && tr_local_state(r)) { /* each worker's own optimizer state over the shard's copy */
        tr_local_part(r, &local);
        st = local.load(local.ctx, path, s, &at);
    }
    dt_free(Ml);
    dt_free(Vl);
    if (!st && r->lead)
        dt_log(DT_LOG_INFO, "resuming from %s (step %lld, written by %d rank%s with ZeRO-%d; verified and loaded in %.3f s)",
               path, (long long)s->step, s->world, s->world == 1 ? "" : "s", s->zero, tl);
    return st;
}

dt_status tr_load_checkpoint(tr_run *r, const char *path, dt_ckpt_state *s) {
    /* With tensor parallelism the checkpoint's logical tensors are loaded into
     * the unsharded model, and this rank takes its shards. */
    dt_model *lm = r->TP > 1 ? r->full : r->m;
    float *M = dt_alloc_floats(lm->n), *V = dt_alloc_floats(lm->n);
    dt_status st = M && V ? load(r, path, lm, M, V, s) : dt_errorf(DT_ERR_NOMEM, "out of memory resuming from %s", path);
    dt_free(M);
    dt_free(V);
    if (!st && r->fp16 && s->loss_scale > 0) { /* an fp16 run's scale goes on; any other starts at --loss-scale */
        r->scaler.scale = s->loss_scale;
        r->scaler.clean = r->scaler.window > 0 ? s->scale_clean % r->scaler.window : 0;
    }
    return st;
}

dt_status tr_resume(tr_run *r) {
    r->res->resumed_from = -1;
    if (!r->c->resume) return DT_OK;
    char path[4096];
    bool found = false;
    dt_status gs = r->ck.net ? tr_ckpt_gather(r, path, sizeof path, &found) : DT_OK;
    if (gs) return gs;
    if (!(r->ck.net ? found : tr_resume_path(r->c, r->lead, path, sizeof path))) return DT_OK;
    dt_ckpt_state s;
    dt_status st = tr_load_checkpoint(r, path, &s);
    if (st) return st;
    r->start_step = s.step;
    if (s.step > 0) r->res->resumed_from = s.step;
    return DT_OK;
}
