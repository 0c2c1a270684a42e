/* The parameter-server driver of dt_train_run: --strategy ps. */
#include "internal.h"

#include "dtrain/ckpt.h"
#include "dtrain/trace.h"
#include "dtrain/weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Parameter-server checkpoints: each server writes its key range (parameters as
 * slices, its optimizer state) at a consistent cut; rank 0 (worker 0) writes
 * the run's state and the manifest. */
typedef struct ps_ckpt {
    dt_ckpt_writer *w;
    const dt_model *m;
    dt_ckpt_state base;
} ps_ckpt;

static dt_status ps_server_ckpt(void *ctx, int64_t clock, size_t lo, size_t len, const dt_optim *opt) {
    ps_ckpt *pc = ctx;
    dt_ckpt_state cs = pc->base;
    cs.step = clock;
    cs.optim_t = opt->t;
    size_t zero = 0;
    dt_ckpt_shard sh = {.n = 1, .arena_off = &lo, .len = &len, .state_off = &zero, .params_too = true};
    dt_status st = dt_ckpt_save_async(pc->w, pc->m, opt, &sh, NULL, &cs);
    /* Synchronous for the server: the range changes as soon as the workers go on. */
    if (!st) st = dt_ckpt_flush(pc->w);
    return st;
}

/* --inject byzantine:mode=alie on the server: the attackers' rows of a BSP
 * step become mean - z * std of the honest rows (coordinate-wise, so a server's
 * range gets what data parallelism computes over the whole vector). */
typedef struct ps_alie {
    bool *bad; /* W */
    float z;
} ps_alie;

static void ps_alie_tamper(void *ctx, float *vecs, int W, size_t len) {
    const ps_alie *a = ctx;
    dt_agg_alie(vecs, W, len, a->bad, a->z);
}

/* Worker momentum under the parameter server: as backward finishes a block,
 * its gradients become this worker's momentum direction, then the ranges that
 * are complete go (dt_ps_block_done). */
typedef struct wm_push {
    const dt_train_cfg *c;
    dt_model *m;
    float *buf;
    dt_ps_client *cl;
    size_t done_lo; /* [done_lo, n) already turned into the direction */
} wm_push;

static void wm_block_done(void *ctx, int block) {
    wm_push *p = ctx;
    size_t lo = p->m->blocks[block].param_lo;
    if (lo < p->done_lo) {
        tr_worker_direction(p->c, p->m, p->buf, lo, p->done_lo);
        p->done_lo = lo;
    }
    dt_ps_block_done(p->cl, block);
}

/* ---- parameter server ---------------------------------------------------------------
 * The last --servers ranks serve key ranges (src/ps/ps.c); the workers pull,
 * compute their shard's mean gradient and push each range as backward finishes it. */
dt_status tr_train_ps(const dt_train_cfg *c, const run_data *d, dt_model *m, dt_comm *world,
                          dt_train_result *res) {
    int N = dt_comm_size(world), rank = dt_comm_rank(world), S = c->ps.servers, W = N - S;
    bool lead = rank == 0, quiet = c->quiet || !lead;
    int B = c->batch;
    int64_t total = c->steps > 0 ? c->steps : c->epochs * ((d->n_train + B - 1) / B);
    dt_lr_sched sched = {c->lr, c->min_lr, c->warmup, total, c->cosine};
    dt_ps_client *cl = NULL;
    dt_acts *acts = NULL, *eacts = NULL;
    batch_buf bb = {0}, ebb = {0};
    dt_sampler sp = {0};
    dt_comm *self = NULL;
    FILE *metrics = NULL;
    uint64_t hist[DT_PS_HIST] = {0};
    int64_t *lost = NULL;
    dt_ckpt_writer *ckw = NULL;
    dt_optim *dummy = NULL;
    float *rM = NULL, *rV = NULL;
    int64_t rt = 0;
    dt_status st = DT_OK;
    if (W < 1) return dt_errorf(DT_ERR_INVALID, "--servers %d leaves no worker among %d ranks", S, N);
    /* Every rank refuses alike (rank 0 prints): a server alone refusing would
     * leave the workers waiting for it until the deadline. */
    if ((st = dt_agg_check(&c->agg, W))) return st;
    if (!(lost = dt_calloc((size_t)W, sizeof(int64_t)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int w = 0; w < W; w++) lost[w] = -1;
    if (lead && !quiet)
        dt_log(DT_LOG_INFO, "parameter server: %d server%s, %d worker%s, %s%s", S, S == 1 ? "" : "s", W, W == 1 ? "" : "s",
               c->ps.mode == DT_PS_BSP ? "BSP" : c->ps.mode == DT_PS_ASP ? "ASP" : "SSP", "");
    double t0 = dt_now();
    /* Checkpoint writers: rank 0 (state, manifest) and the servers (ranges). */
    /* Workers' error-feedback residuals go into BSP checkpoints (each worker
     * writes its own); under ASP/SSP a resume is not exact anyway and a lost
     * worker's file would never come, so they start from zero there. */
    bool ef_ckpt = c->ps.mode == DT_PS_BSP && dt_gc_cfg_uses_ef(&c->dp.comp);
    /* Worker momentum (BSP with --aggregate): the workers hold the momentum and
     * the weight decay, the servers apply the aggregate as plain SGD; every
     * worker writes its buffer into the checkpoints. */
    bool wmom = dt_train_worker_momentum(c);
    dt_optim_cfg scfg = tr_applied_optim(c); /* the servers' optimizer */
    float *wm = NULL;
    bool own_ckpt = ef_ckpt || wmom;
    if (c->ckpt_dir) {
        int *wr = dt_calloc((size_t)N, sizeof(int));
        if (!wr) {
            st = dt_errorf(DT_ERR_NOMEM, "out of memory");
            goto out;
        }
        int nw = 0;
        for (int r = 0; r < N; r++)
            if (r == 0 || r >= W || own_ckpt) wr[nw++] = r;
        if (rank == 0 || rank >= W || own_ckpt) st = dt_ckpt_writer_create(&ckw, c->ckpt_dir, rank, N, wr, nw, c->ckpt_keep, 10 * c->timeout);
        dt_free(wr);
        if (st) goto out;
    }
    ps_ckpt pck = {ckw, m, {0}};
    pck.base.seed = c->seed;
    pck.base.world = N;
    pck.base.dp = W;
    pck.base.pp = pck.base.tp = 1;
    pck.base.batch = B;
    pck.base.optim = c->optim.kind;
    snprintf(pck.base.config, sizeof pck.base.config, "%s", c->config_json ? c->config_json : "{}");
    /* Resume: every rank reads the logical state; servers take their range's
     * optimizer state, workers the sampler position. */
    int64_t start = 0, pos[2] = {-1, -1};
    char resume_path[4096] = "";
    dt_ckpt_state rcs = {0};
    if (wmom && rank < W && !(wm = dt_alloc_floats(m->n))) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory for the worker momentum");
        goto out;
    }
    if (c->resume) {
        char *path = resume_path;
        if (strcmp(c->resume, "auto") == 0) {
            if (dt_ckpt_find_latest(c->ckpt_dir, path, sizeof resume_path)) path[0] = '\0';
        } else {
            snprintf(path, sizeof resume_path, "%s", c->resume);
        }
        if (path[0]) {
            dt_ckpt_state cs;
            if (!(rM = dt_alloc_floats(m->n)) || !(rV = dt_alloc_floats(m->n))) {
                st = dt_errorf(DT_ERR_NOMEM, "out of memory");
                goto out;
            }
            if ((st = dt_ckpt_load(path, m, rM, rV, &cs))) goto out;
            rcs = cs;
            if (cs.batch != B || cs.optim != c->optim.kind || cs.seed != c->seed) {
                st = dt_errorf(DT_ERR_INVALID, "%s was written with another global batch, optimizer or seed; resume with the same", path);
                goto out;
            }
            start = cs.step;
            pos[0] = cs.epoch;
            pos[1] = cs.index;
            rt = cs.optim_t;
            if (lead) dt_log(DT_LOG_INFO, "resuming the parameter server from %s (step %lld)", path, (long long)start);
        } else if (lead) {
            dt_log(DT_LOG_INFO, "no valid checkpoint in %s: starting from scratch", c->ckpt_dir);
        }
    }
    res->resumed_from = start > 0 ? start : -1;
    if (rank >= W) {
        /* A server: serve, then hand the final range to rank 0. */
        dt_ps_cfg pc = c->ps;
        /* ASP/SSP: a worker silent for one deadline is lost (docs/FAULT_TOLERANCE.md). */
        pc.liveness = c->ps.mode == DT_PS_BSP ? 0 : c->timeout;
        pc.agg = c->agg;
        pc.comp = c->dp.comp;
        pc.comp.seed = c->seed;
        if (c->ckpt_dir) {
            pc.ckpt = ps_server_ckpt;
            pc.ckpt_ctx = &pck;
        }
        pc.start_clock = start;
        if (!wmom && start > 0) {
            bool have_m = rcs.n_states >= 1;
            if ((st = tr_resume_worker_momentum(resume_path, &rcs, NULL, rM, &have_m, 0, W, m->n, rank == W))) goto out;
        }
        pc.M0 = start > 0 ? rM : NULL;
        pc.V0 = start > 0 ? rV : NULL;
        /* The server's own update count: one per step under BSP, one per push otherwise. */
        pc.t0 = c->ps.mode == DT_PS_BSP ? start : start * W;
        (void)rt;
        ps_alie alie;
        if ((st = tr_alie_mask(c, W, &alie.bad, &alie.z))) goto out;
        if (alie.bad) {
            pc.tamper = ps_alie_tamper;
            pc.tamper_ctx = &alie;
        }
        st = dt_ps_serve(m, world, &pc, &scfg, &sched, hist, lost);
        dt_free(alie.bad);
    } else {
        int maxB = (B + W - 1) / W;
        dt_ps_cfg pc = c->ps;
        pc.liveness = c->ps.mode == DT_PS_BSP ? 0 : c->timeout;
        pc.comp = c->dp.comp;
        pc.comp.seed = c->seed;
        pc.start_clock = start; /* the servers register every worker's first pull */
        if ((st = dt_ps_client_create(&cl, m, world, &pc))) goto out;
        if (lead) { /* the servers inject it (ps_alie_tamper); rank 0 says so */
            bool *bad;
            float z;
            if ((st = tr_alie_mask(c, W, &bad, &z))) goto out;
            if (bad) tr_alie_log(z);
            dt_free(bad);
        }
        /* Resume: this worker's error-feedback residual (BSP checkpoints hold them). */
        dt_gc *gc = dt_ps_client_gc(cl);
        if (gc && dt_gc_error(gc) && start > 0 && resume_path[0]) {
            char name[64];
            bool found = false;
            snprintf(name, sizeof name, "compress.error.%d", rank);
            if ((st = dt_ckpt_read_extra(resume_path, name, dt_gc_error(gc), m->n, &found))) goto out;
        }
        if (wm && start > 0 && resume_path[0]) {
            bool have_m = false;
            if ((st = tr_resume_worker_momentum(resume_path, &rcs, wm, rM, &have_m, rank, W, m->n, lead))) goto out;
        }
        wm_push wp = {c, m, wm, cl, m->n};
        if ((st = dt_acts_create(&acts, m, 0, m->n_blocks - 1, maxB))) goto out;
        if ((st = tr_batch_buf_init(&bb, m, maxB > 256 ? maxB : 256, d->T))) goto out;
        if ((st = dt_sampler_init(&sp, d->n_train, c->seed, true, false, rank, W))) goto out;
        if (pos[0] >= 0 && (st = dt_sampler_seek(&sp, pos[0], pos[1]))) goto out;
        /* Rank 0's manifest names the servers' optimizer state: their kind. */
        if (ckw && (st = dt_optim_create(&dummy, &scfg, 0))) goto out;
        if (lead && c->out_dir) {
            char path[4096];
            if ((st = tr_make_dir(c->out_dir))) goto out;
            snprintf(path, sizeof path, "%s/metrics.jsonl", c->out_dir);
            if (start > 0) tr_keep_metrics_upto(path, start);
            if (!(metrics = fopen(path, start > 0 ? "a" : "w"))) {
                st = dt_errorf(DT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
                goto out;
            }
        }
        double win = 0, tw = dt_now(), slow_prev = 0;
        int wn = 0;
        bool byz_me = false;
        for (int i = 0; i < c->n_inject; i++) byz_me |= c->inject[i].kind == DT_INJECT_BYZANTINE && c->inject[i].rank == rank;
        for (int64_t step = start; step < total && !st; step++) {
            dt_comm_set_step(world, step + 1);
            tr_watchdog_tick(step + 1);
            tr_inject_at_step(c, rank, step + 1);
            if ((st = dt_ps_pull(cl, step, step + 1 == total))) break;
            tr_inject_slow(c, rank, slow_prev); /* before computing: a slower machine */
            double tcomp = dt_now();
            int ln, gn;
            dt_sampler_next(&sp, B, bb.idx, &ln, &gn);
            dt_batch b = {.B = ln, .targets = bb.targets, .loss_scale = ln ? 1.0f / ((float)ln * (float)m->loss_terms) : 0};
            if (ln > 0) {
                if (d->lm) {
                    dt_rng r;
                    dt_rng_init(&r, c->seed, 0x5000 + (uint64_t)sp.epoch);
                    int shift = (int)dt_rng_below(&r, (uint64_t)d->T);
                    dt_corpus_gather(&d->corpus, bb.idx, ln, d->T, shift, bb.tokens, bb.targets);
                    b.tokens = bb.tokens;
                } else {
                    dt_imageset_gather(&d->train, bb.idx, ln, bb.x, bb.targets);
                    b.x = bb.x;
                }
                float l = dt_model_forward(m, acts, &b, NULL);
                /* A Byzantine worker pushes only after corrupting its whole gradient. */
                wp.done_lo = m->n;
                if (byz_me) dt_model_backward(m, acts, &b, NULL, NULL, NULL, NULL);
                else if (wm) dt_model_backward(m, acts, &b, NULL, NULL, wm_block_done, &wp);
                else dt_model_backward(m, acts, &b, NULL, NULL, dt_ps_block_done, cl);
                if (wm && wp.done_lo > 0) tr_worker_direction(c, m, wm, 0, wp.done_lo);
                if (byz_me) tr_byzantine_corrupt(c, m, rank, step + 1);
                win += l;
                wn++;
            } else if (wm) {
                tr_worker_direction(c, m, wm, 0, m->n); /* no samples: the buffer still decays */
            }
            slow_prev = dt_now() - tcomp;
            if ((st = dt_ps_push_end(cl))) break;
            if (c->ckpt_dir && ((c->ckpt_every > 0 && (step + 1) % c->ckpt_every == 0) || step + 1 == total)) {
                /* A consistent cut: the servers write their ranges; rank 0 the run's state. */
                if ((st = dt_ps_checkpoint(cl, step + 1))) break;
                char ef_name[64], wm_name[64];
                const char *xn[2];
                const float *xd[2];
                size_t xl[2] = {m->n, m->n};
                int nx = 0;
                snprintf(ef_name, sizeof ef_name, "compress.error.%d", rank);
                snprintf(wm_name, sizeof wm_name, "momentum.worker.%d", rank);
                if (ef_ckpt) {
                    xn[nx] = ef_name;
                    xd[nx++] = dt_gc_error(dt_ps_client_gc(cl));
                }
                if (wm) {
                    xn[nx] = wm_name;
                    xd[nx++] = wm;
                }
                if (own_ckpt && !lead) {
                    dt_ckpt_state cs = pck.base;
                    cs.step = step + 1;
                    dt_ckpt_shard mine = {.n = 0, .n_extra = nx, .extra_name = xn, .extra_data = xd, .extra_len = xl};
                    if ((st = dt_ckpt_save_async(ckw, m, dummy, &mine, NULL, &cs))) break;
                }
                if (lead) {
                    dt_ckpt_state cs = pck.base;
                    cs.step = step + 1;
                    cs.epoch = sp.epoch;
                    cs.index = sp.index;
                    cs.optim_t = c->ps.mode == DT_PS_BSP ? step + 1 : (step + 1) * W;
                    dt_ckpt_shard none = {.n = 0, .n_extra = nx, .extra_name = xn, .extra_data = xd, .extra_len = xl};
                    if ((st = dt_ckpt_save_async(ckw, m, dummy, &none, NULL, &cs))) break;
                }
            }
            if (lead && c->eval_every > 0 && (step + 1) % c->eval_every == 0 && step + 1 < total) {
                /* Worker 0 evaluates the parameters it pulled this step (as fresh as
                 * the consistency model lets a worker see them). */
                float ea, el;
                if (!eacts && (st = dt_acts_create(&eacts, m, 0, m->n_blocks - 1, 256))) break;
                if (!self && (st = dt_comm_self(&self))) break;
                if (!ebb.targets && (st = tr_batch_buf_init(&ebb, m, 256, d->T))) break;
                if ((st = tr_evaluate(m, eacts, d, &ebb, d->lm ? 16 : 256, c->eval_max, self, NULL, 0, 1, true, &ea, &el))) break;
                if (metrics) {
                    if (d->lm) fprintf(metrics, "{\"step\":%lld,\"val_loss\":%.6f,\"time_s\":%.3f}\n", (long long)step + 1, (double)el, dt_now() - t0);
                    else fprintf(metrics, "{\"step\":%lld,\"test_acc\":%.6f,\"test_loss\":%.6f,\"time_s\":%.3f}\n",
                                 (long long)step + 1, (double)ea, (double)el, dt_now() - t0);
                    fflush(metrics);
                }
            }
            if (lead && ((step + 1) % c->log_every == 0 || step + 1 == total)) {
                double now = dt_now();
                float lw = wn ? (float)(win / wn) : NAN;
                double ips = (double)((step + 1) % c->log_every ? (step + 1) % c->log_every : c->log_every) * B *
                             (d->lm ? d->T : 1) / (now - tw);
                if (metrics) {
                    fprintf(metrics, "{\"step\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"items_per_s\":%.1f,\"time_s\":%.3f,\"workers\":%d,\"servers\":%d}\n",
                            (long long)step + 1, (double)lw, (double)dt_lr_at(&sched, step), ips, now - t0, W, S);
                    fflush(metrics);
                }
                if (!quiet) dt_log(DT_LOG_INFO, "step %lld/%lld loss %.4f (worker 0)", (long long)step + 1, (long long)total, (double)lw);
                res->final_loss = lw;
                win = 0;
                wn = 0;
                tw = now;
            }
        }
        if (!st) st = dt_ps_finish(cl);
        if (!st) memcpy(lost, dt_ps_client_lost(cl), (size_t)W * sizeof(int64_t));
    }
    res->seconds = dt_now() - t0;
    res->steps = total;
    /* This process's steps only (a resumed run did not train the first `start`). */
    res->items_per_s = (double)(total - start) * B * (d->lm ? d->T : 1) / (res->seconds > 1e-9 ? res->seconds : 1e-9);
    if (st) goto out;
    /* Every rank still here knows who was lost (the servers' farewell). */
    for (int w = 0; w < W; w++) {
        if (lost[w] < 0) continue;
        size_t used = strlen(res->lost_desc);
        snprintf(res->lost_desc + used, sizeof res->lost_desc - used, "%srank %d at clock %lld", res->lost_workers ? ", " : "",
                 dt_comm_world_rank(world, w), (long long)lost[w]);
        res->lost_workers++;
    }
    if ((st = dt_ps_gather_final(m, world, &c->ps, hist))) goto out;
    if (lead) {
        int eB = d->lm ? 16 : 256;
        batch_buf eb = {0};
        dt_acts_destroy(eacts);
        eacts = NULL;
        dt_comm_destroy(self);
        self = NULL;
        if ((st = dt_acts_create(&eacts, m, 0, m->n_blocks - 1, eB))) goto out;
        if ((st = tr_batch_buf_init(&eb, m, eB, d->T))) {
            tr_batch_buf_free(&eb);
            goto out;
        }
        if ((st = dt_comm_self(&self))) {
            tr_batch_buf_free(&eb);
            goto out;
        }
        st = tr_evaluate(m, eacts, d, &eb, eB, c->eval_max, self, NULL, 0, 1, true, &res->test_acc, &res->eval_loss);
        tr_batch_buf_free(&eb);
        if (st) goto out;
        if (metrics && start < total) { /* resumed at its end: the lines are there already */
            if (d->lm) fprintf(metrics, "{\"step\":%lld,\"val_loss\":%.6f,\"time_s\":%.3f}\n", (long long)total, (double)res->eval_loss, res->seconds);
            else fprintf(metrics, "{\"step\":%lld,\"test_acc\":%.6f,\"test_loss\":%.6f,\"time_s\":%.3f}\n", (long long)total,
                         (double)res->test_acc, (double)res->eval_loss, res->seconds);
            int maxs = 0;
            for (int i = 0; i < DT_PS_HIST; i++)
                if (hist[i] > 0) maxs = i;
            fprintf(metrics, "{\"staleness\":true,\"consistency\":\"%s\",\"bound\":%d,\"max\":%d,\"hist\":[",
                    c->ps.mode == DT_PS_BSP ? "bsp" : c->ps.mode == DT_PS_ASP ? "asp" : "ssp",
                    c->ps.mode == DT_PS_SSP ? c->ps.staleness : (c->ps.mode == DT_PS_BSP ? 0 : -1), maxs);
            for (int i = 0; i < DT_PS_HIST; i++) fprintf(metrics, "%s%llu", i ? "," : "", (unsigned long long)hist[i]);
            fprintf(metrics, "],\"lost_workers\":[");
            for (int w = 0, k = 0; w < W; w++)
                if (lost[w] >= 0) fprintf(metrics, "%s%d", k++ ? "," : "", dt_comm_world_rank(world, w));
            fprintf(metrics, "]}\n");
        }
        if (c->out_dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/model.safetensors", c->out_dir);
            if ((st = dt_weights_save(m, path, 0, NULL))) goto out;
        }
    }
out:
    if (ckw) {
        dt_status fs = dt_ckpt_flush(ckw);
        if (!st) st = fs;
    }
    dt_ckpt_writer_destroy(ckw);
    dt_optim_destroy(dummy);
    dt_free(rM);
    dt_free(rV);
    dt_free(wm);
    dt_free(lost);
    if (metrics) fclose(metrics);
    dt_ps_client_destroy(cl);
    dt_acts_destroy(acts);
    dt_acts_destroy(eacts);
    tr_batch_buf_free(&bb);
    tr_batch_buf_free(&ebb);
    dt_sampler_free(&sp);
    dt_comm_destroy(self);
    return st;
}
