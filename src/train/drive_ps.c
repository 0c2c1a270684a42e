/* The parameter-server driver (--strategy ps). The last --servers ranks serve
 * key ranges (src/ps/ps.c); the workers pull, compute their shard's mean
 * gradient and push each range as backward finishes it. Checkpoints are a
 * consistent cut: each server writes its key range (parameters as slices, its
 * optimizer state), every worker its own residual or momentum, rank 0 (worker
 * 0) the run's state and the manifest. A stop (a signal or the deadline on
 * any rank) ends every worker at the clock server 0 fixes, with a checkpoint
 * of that cut (include/dtrain/ps.h). */
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct ps_run {
    tr_run *r;
    int S, W;
    bool ef_ckpt, own_ckpt;  /* workers write residuals / momenta into checkpoints */
    dt_optim_cfg scfg;       /* the servers' optimizer */
    dt_ckpt_writer *ckw;
    dt_ckpt_state base;
    dt_optim *dummy;         /* rank 0's manifest names the servers' optimizer state */
    char resume_path[4096];
    dt_ckpt_state rcs;
    float *rM, *rV;          /* the checkpoint's logical optimizer state */
    float *wm;               /* worker momentum (P), or NULL */
    int64_t *lost;           /* (W) clock at which each worker was dropped, -1 */
    uint64_t hist[DT_PS_HIST];
    dt_ps_client *cl;
    tr_attack att;
    bool byz_me;
    size_t done_lo;          /* worker momentum: [done_lo, n) already a direction */
    int64_t last_ckpt;       /* the clock of this worker's last checkpoint, -1 */
    int stop_code;           /* stopped: the stop's code (tr_stop_code), else 0 */
    dt_ps_outcome out;       /* a server's counts (rank 0: every server's, after the final gather) */
    /* elastic (src/train/elastic.c) */
    int cap;                 /* worker slots */
    int slot;                /* this worker's slot (its rank, or the one it joined as) */
    bool left;               /* this worker left the job on request */
    int members;             /* the workers the last step's batch was split over */
    char secret[80];
} ps_run;

#include "elastic.h"

static dt_status server_ckpt(void *ctx, int64_t clock, size_t lo, size_t len, const dt_optim *opt) {
    ps_run *p = ctx;
    dt_ckpt_state cs = p->base;
    cs.step = clock;
    cs.optim_t = opt->t;
    size_t zero = 0;
    dt_ckpt_shard sh = {.n = 1, .arena_off = &lo, .len = &len, .state_off = &zero, .params_too = true};
    dt_status st = dt_ckpt_save_async(p->ckw, p->r->m, opt, &sh, NULL, &cs);
    /* On a shared directory the file is on disk before the workers go on.
     * On per-host disks the writers meet over the network (rank 0's only
     * after this acknowledgement): the snapshot is taken, the write goes on
     * behind the serving. */
    return st || p->r->ck.net ? st : dt_ckpt_flush(p->ckw);
}

/* Worker momentum: as backward finishes a block, its gradients become this
 * worker's direction, then the complete ranges go. */
static void wm_block_done(void *ctx, int block) {
    ps_run *p = ctx;
    dt_model *m = p->r->m;
    size_t lo = m->blocks[block].param_lo;
    if (lo < p->done_lo) {
        dt_worker_direction(&p->r->c->optim, m, p->wm, lo, p->done_lo);
        p->done_lo = lo;
    }
    dt_ps_block_done(p->cl, block);
}

/* Checks, the checkpoint writers, and the checkpoint to resume from. */
static dt_status ps_begin(ps_run *p) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    int N = r->n;
    p->S = c->ps.servers;
    p->W = N - p->S;
    if (p->W < 1) return dt_errorf(DT_ERR_INVALID, "--servers %d leaves no worker among %d ranks", p->S, N);
    /* Every rank refuses alike (rank 0 prints): a server alone refusing would
     * leave the workers waiting for it until the deadline. */
    dt_status st = dt_agg_check(&c->agg, p->W);
    if (st) return st;
    p->cap = dt_ps_slots(&c->ps, p->W);
    p->slot = r->rank;
    p->members = p->W;
    if (c->ps.max_workers > 0 && c->ps.max_workers < p->W)
        return dt_errorf(DT_ERR_INVALID, "--elastic %d is fewer than the job's %d workers: give the most workers the run may have",
                         c->ps.max_workers, p->W);
    if (c->ps.max_workers > 0 && (st = tr_elastic_secret(c->out_dir, p->secret, sizeof p->secret))) return st;
    if (!(p->lost = dt_calloc((size_t)p->cap, sizeof(int64_t)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int w = 0; w < p->cap; w++) p->lost[w] = -1;
    if (!r->quiet) {
        char dc[64] = "";
        if (c->ps.dc_lambda > 0) snprintf(dc, sizeof dc, ", delay-compensated (DC-ASGD, lambda %g)", c->ps.dc_lambda);
        dt_log(DT_LOG_INFO, "parameter server: %d server%s, %d worker%s, %s%s%s", p->S, p->S == 1 ? "" : "s", p->W,
               p->W == 1 ? "" : "s", c->ps.mode == DT_PS_BSP ? "BSP" : c->ps.mode == DT_PS_ASP ? "ASP" : "SSP",
               c->ps.staleness_lr ? ", steps scaled by 1/(1 + staleness)" : "", dc);
    }
    /* Workers' residuals go into BSP checkpoints (each worker writes its own);
     * under ASP/SSP a resume is not exact anyway and a lost worker's file would
     * never come, so they start from zero there. Worker momentum (BSP with
     * --aggregate): the servers apply the aggregate as plain SGD. */
    p->ef_ckpt = c->ps.mode == DT_PS_BSP && dt_gc_cfg_uses_ef(&c->dp.comp);
    p->own_ckpt = p->ef_ckpt || dt_train_worker_momentum(c);
    p->scfg = tr_applied_optim(c);
    if (c->ckpt_dir) {
        bool writes = r->rank == 0 || r->rank >= p->W || p->own_ckpt;
        int *wr = dt_calloc((size_t)N, sizeof(int)), nw = 0;
        if (!wr) return dt_errorf(DT_ERR_NOMEM, "out of memory");
        for (int q = 0; q < N; q++)
            if (q == 0 || q >= p->W || p->own_ckpt) wr[nw++] = q;
        st = tr_ckpt_storage(r, writes);
        if (!st && writes) st = dt_ckpt_writer_create(&p->ckw, c->ckpt_dir, r->rank, N, wr, nw, c->ckpt_keep, 10 * c->timeout);
        dt_free(wr);
        if (st) return st;
        tr_ckpt_net_attach(r, p->ckw);
    }
    p->base = (dt_ckpt_state){.seed = c->seed, .world = N, .dp = p->W, .pp = 1, .tp = 1, .batch = c->batch, .optim = c->optim.kind};
    snprintf(p->base.config, sizeof p->base.config, "%s", c->config_json ? c->config_json : "{}");
    if (dt_train_worker_momentum(c) && r->rank < p->W && !(p->wm = dt_alloc_floats(r->m->n)))
        return dt_errorf(DT_ERR_NOMEM, "out of memory for the worker momentum");
    bool found = false;
    if (c->resume && r->ck.net && (st = tr_ckpt_gather(r, p->resume_path, sizeof p->resume_path, &found))) return st;
    if (!c->resume || !(r->ck.net ? found : tr_resume_path(c, r->lead, p->resume_path, sizeof p->resume_path))) {
        p->resume_path[0] = '\0';
        return DT_OK;
    }
    if (!(p->rM = dt_alloc_floats(r->m->n)) || !(p->rV = dt_alloc_floats(r->m->n))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    if ((st = dt_ckpt_load(p->resume_path, r->m, p->rM, p->rV, &p->rcs))) return st;
    if ((st = tr_same_run(c, p->resume_path, &p->rcs))) return st;
    r->start_step = p->last_ckpt = p->rcs.step;
    if (r->lead) dt_log(DT_LOG_INFO, "resuming the parameter server from %s (step %lld)", p->resume_path, (long long)r->start_step);
    return DT_OK;
}

/* A server's own stop request: a signal it caught (the workers watch the deadline). */
static int server_stop_poll(void *ctx) { return tr_stop_code(ctx, false); }

/* A server: serve, then hand the final range to rank 0. */
static dt_status ps_serve(ps_run *p) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    int64_t start = r->start_step;
    dt_ps_cfg pc = c->ps;
    /* ASP/SSP: a worker silent for one deadline is lost (docs/FAULT_TOLERANCE.md). */
    pc.liveness = c->ps.mode == DT_PS_BSP ? 0 : c->timeout;
    pc.agg = c->agg;
    pc.comp = c->dp.comp;
    pc.comp.seed = c->seed;
    if (c->ckpt_dir) {
        pc.ckpt = server_ckpt;
        pc.ckpt_ctx = p;
    }
    pc.start_clock = start;
    pc.stop_poll = server_stop_poll;
    pc.stop_ctx = r;
    pc.secret = p->secret;
    pc.publish = tr_elastic_publish;
    pc.publish_ctx = r;
    dt_status st = DT_OK;
    if (!dt_train_worker_momentum(c) && start > 0) {
        bool have_m = p->rcs.n_states >= 1;
        dt_ckpt_place at = {.replica = 0, .replicas = p->W, .lead = r->rank == p->W};
        if ((st = dt_resume_worker_momentum(p->resume_path, &p->rcs, NULL, p->rM, &have_m, &at, r->m->n))) return st;
    }
    pc.M0 = start > 0 ? p->rM : NULL;
    pc.V0 = start > 0 ? p->rV : NULL;
    /* The server's own update count: one per step under BSP, one per push otherwise. */
    pc.t0 = c->ps.mode == DT_PS_BSP ? start : start * p->W;
    if ((st = tr_attacks(c, -1, p->W, &p->att, NULL, false))) return st;
    if (p->att.bad) {
        pc.tamper = tr_attack_tamper;
        pc.tamper_ctx = &p->att;
    }
    dt_ps_outcome out;
    if ((st = dt_ps_serve(r->m, r->world, &pc, &p->scfg, &r->sched, p->hist, p->lost, &out))) return st;
    p->out = out;
    if (out.stop_at >= 0) return tr_stop_note(r, out.stop_at, dt_train_stop_reason(out.stop_code), NAN, c->ckpt_dir != NULL);
    return DT_OK;
}

/* A worker's checkpoint share: a consistent cut (the servers write their
 * ranges); this worker's residual and momentum; rank 0 the run's state. */
static dt_status worker_ckpt(ps_run *p, int64_t step) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    p->last_ckpt = step;
    dt_status st = dt_ps_checkpoint(p->cl, step);
    if (st || !(p->own_ckpt || r->lead)) return st;
    dt_ckpt_extras x = {0};
    char name[64];
    snprintf(name, sizeof name, "compress.error.%d", r->rank);
    if (p->ef_ckpt && (st = dt_ckpt_extras_add(&x, name, dt_gc_error(dt_ps_client_gc(p->cl)), r->m->n))) return st;
    snprintf(name, sizeof name, "momentum.worker.%d", r->rank);
    if (p->wm && (st = dt_ckpt_extras_add(&x, name, p->wm, r->m->n))) return st;
    dt_ckpt_state cs = p->base;
    cs.step = step;
    dt_ckpt_shard none = {.n = 0};
    dt_ckpt_extras_attach(&x, &none);
    if (r->lead) {
        cs.epoch = r->ld.sampler.epoch;
        cs.index = r->ld.sampler.index;
        cs.optim_t = c->ps.mode == DT_PS_BSP ? step : step * p->W;
    }
    return dt_ckpt_save_async(p->ckw, r->m, p->dummy, &none, NULL, &cs);
}

/* After the pull of step: whether the run stops here instead (at the clock
 * server 0 fixed, when that comes before the end). */
static dt_status stop_here(ps_run *p, int64_t step, bool *stop) {
    int code;
    int64_t k = dt_ps_client_stop_at(p->cl, &code);
    *stop = k >= 0 && k < p->r->total && k == step - 1;
    if (*stop) p->stop_code = code;
    int64_t l = dt_ps_client_leave_at(p->cl);
    if (!*stop && l >= 0 && l == step - 1 && l < p->r->total) *stop = p->left = true;
    if (k >= 0 && k < step - 1)
        return dt_errorf(DT_ERR_COMM, "parameter server: told to stop at clock %lld, but this worker is at %lld already",
                         (long long)k, (long long)step - 1);
    return DT_OK;
}

/* One worker step: pull, compute (corrupting it when Byzantine), push. */
static dt_status worker_step(ps_run *p, int64_t step, double *win, int *wn) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    dt_model *m = r->m;
    dt_comm_set_step(r->world, step);
    tr_step_hook(c, r->rank, step, DT_STEP_BEGIN, r->slow_prev);
    dt_status st = dt_ps_pull(p->cl, step - 1, step == r->total);
    bool stop = false;
    if (!st) st = stop_here(p, step, &stop);
    if (st || stop) return st;
    tr_step_hook(c, r->rank, step, DT_STEP_COMPUTE, r->slow_prev); /* before computing: a slower machine */
    double tcomp = dt_now();
    int ln, gn, index, members;
    dt_ps_client_share(p->cl, &index, &members);
    if (index >= 0 && members > 0) dt_sampler_set_share(&r->ld.sampler, index, members);
    p->members = members;
    dt_loader_next(&r->ld, c->batch, &ln, &gn);
    if (index < 0) ln = 0; /* not a member of this clock (cannot happen: it would have left) */
    dt_ps_client_count(p->cl, ln);
    dt_batch b = {.B = ln, .x = r->ld.x, .tokens = r->ld.tokens, .targets = r->ld.targets,
                  .loss_scale = ln ? 1.0f / ((float)ln * (float)m->loss_terms) : 0, .y = r->ld.y, .ids = r->ld.idx, .step = step,
                  .seed = c->seed};
    if (ln > 0) {
        float l = dt_model_forward(m, r->acts, &b, NULL);
        /* A Byzantine worker pushes only after corrupting its whole gradient. */
        p->done_lo = m->n;
        if (p->byz_me) dt_model_backward(m, r->acts, &b, NULL, NULL, NULL, NULL);
        else if (p->wm) dt_model_backward(m, r->acts, &b, NULL, NULL, wm_block_done, p);
        else dt_model_backward(m, r->acts, &b, NULL, NULL, dt_ps_block_done, p->cl);
        if (p->wm && p->done_lo > 0) dt_worker_direction(&c->optim, m, p->wm, 0, p->done_lo);
        if (p->byz_me) tr_attack_corrupt(&p->att, m->g, m->n, step);
        *win += l;
        (*wn)++;
    } else if (p->wm) {
        dt_worker_direction(&c->optim, m, p->wm, 0, m->n); /* no samples: the buffer still decays */
    }
    r->slow_prev = dt_now() - tcomp;
    if ((st = dt_ps_push_end(p->cl))) return st;
    bool due = (c->ckpt_every > 0 && step % c->ckpt_every == 0) || step == r->total;
    return c->ckpt_dir && !c->ckpt_stop_only && due ? worker_ckpt(p, step) : DT_OK;
}


/* Rank 0's evaluation lines (of the parameters it pulled this step: as fresh
 * as the consistency model lets a worker see them) and step lines. */
static dt_status worker_report(ps_run *p, int64_t step, double *win, int *wn, double *tw) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    dt_status st = DT_OK;
    if (c->eval_every > 0 && step % c->eval_every == 0 && step < r->total) {
        float ea, el;
        if ((st = tr_evaluate_alone(r->m, &r->ld, c->eval_max, &ea, &el))) return st;
        dt_eval_info e = {.step = step, .lm = r->data.lm, .acc = ea, .loss = el, .time_s = dt_now() - r->t0};
        if ((st = tr_report_eval(c, &e))) return st;
    }
    if (step % c->log_every != 0 && step != r->total) return DT_OK;
    double now = dt_now();
    float lw = *wn ? (float)(*win / *wn) : NAN;
    int64_t n = step % c->log_every ? step % c->log_every : c->log_every;
    dt_step_info s = {.strategy = DT_STRATEGY_PS, .step = step, .total_steps = r->total, .loss = lw,
                      .lr = dt_lr_at(&r->sched, step - 1),
                      .items_per_s = (double)(n * c->batch * (r->data.lm ? r->data.T : 1)) / (now - *tw),
                      .unit = r->data.lm ? "tokens" : "samples", .time_s = now - r->t0,
                      .eta_s = (double)(r->total - step) * (now - r->t0) / (double)(step - r->start_step),
                      .workers = p->members, .servers = p->S};
    dt_ps_client_clocks(p->cl, &s.clock_min, &s.clock_max);
    r->res->final_loss = lw;
    *win = 0;
    *wn = 0;
    *tw = now;
    return tr_report_step(c, &s);
}

/* Stopped after step: the cut's checkpoint (unless that step took one). */
static dt_status stop_save(ps_run *p, int64_t step) {
    tr_run *r = p->r;
    bool ck = r->c->ckpt_dir != NULL; /* every worker meets at the barrier, the writers write */
    dt_status st = ck && p->last_ckpt != step ? worker_ckpt(p, step) : DT_OK;
    if (!st && p->ckw) st = dt_ckpt_flush(p->ckw);
    return st ? st : tr_stop_note(r, step, dt_train_stop_reason(p->stop_code), r->res->final_loss, ck);
}

static dt_status ps_loop(ps_run *p, int64_t start);

static dt_status ps_work(ps_run *p) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    dt_model *m = r->m;
    int64_t start = r->start_step;
    /* Elastic: a shrinking job splits the batch over fewer workers. */
    int maxB = c->ps.max_workers > 0 ? c->batch : (c->batch + p->W - 1) / p->W;
    dt_ps_cfg pc = c->ps;
    pc.liveness = c->ps.mode == DT_PS_BSP ? 0 : c->timeout;
    pc.comp = c->dp.comp;
    pc.comp.seed = c->seed;
    pc.start_clock = start; /* the servers register every worker's first pull */
    pc.secret = p->secret;  /* worker 0 knocks with it to close the join ports */
    dt_status st = DT_OK;
    if ((st = dt_ps_client_create(&p->cl, m, r->world, &pc))) return st;
    /* The servers inject ALIE; rank 0 says so. */
    if ((st = tr_attacks(c, r->rank, p->W, &p->att, NULL, r->lead))) return st;
    for (int i = 0; i < c->n_inject; i++) p->byz_me |= c->inject[i].kind == DT_INJECT_BYZANTINE && c->inject[i].rank == r->rank;
    dt_ckpt_place at = {.replica = r->rank, .replicas = p->W, .lead = r->lead};
    dt_gc *gc = dt_ps_client_gc(p->cl);
    if (gc && dt_gc_error(gc) && start > 0 && p->resume_path[0]) { /* this worker's residual (BSP checkpoints hold them) */
        char name[64];
        bool found = false;
        snprintf(name, sizeof name, "compress.error.%d", r->rank);
        if ((st = dt_ckpt_read_extra(p->resume_path, name, dt_gc_error(gc), m->n, &found))) return st;
    }
    bool have_m = false;
    if (p->wm && start > 0 && p->resume_path[0] &&
        (st = dt_resume_worker_momentum(p->resume_path, &p->rcs, p->wm, p->rM, &have_m, &at, m->n)))
        return st;
    if ((st = dt_acts_create(&r->acts, m, 0, m->n_blocks - 1, maxB))) return st;
    if ((st = dt_loader_init(&r->ld, &r->data, maxB > 256 ? maxB : 256, c->seed, r->rank, p->W))) return st;
    if (start > 0 && p->resume_path[0] && (st = dt_sampler_seek(&r->ld.sampler, p->rcs.epoch, p->rcs.index))) return st;
    if (p->ckw && (st = dt_optim_create(&p->dummy, &p->scfg, 0))) return st;
    dt_run_info info;
    tr_run_info(r, DT_STRATEGY_PS, &info);
    info.dp = p->W;
    if ((st = tr_report_start(r, &info))) return st;
    return ps_loop(p, start);
}

/* A worker's steps after `start`, to the end, a stop, or its leave; then its
 * farewell. */
static dt_status ps_loop(ps_run *p, int64_t start) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    double win = 0, tw = dt_now();
    int wn = 0;
    int64_t s = start + 1;
    dt_status st = tr_stop_init(r, r->m->n * sizeof(float) * 3);
    for (; s <= r->total && !st; s++) {
        int code = tr_stop_code(r, true);
        /* A joined worker's signal takes it out of the job, not the job down. */
        if (c->join_port && code) dt_ps_client_request_leave(p->cl);
        else dt_ps_client_request_stop(p->cl, code);
        if (c->ps.max_workers > 0 && !r->lead && tr_elastic_leave_asked(c, p->slot)) dt_ps_client_request_leave(p->cl);
        double t = dt_now();
        st = worker_step(p, s, &win, &wn);
        if (st || p->stop_code || p->left) break;
        tr_stop_timed(r, dt_now() - t, p->ckw);
        if (r->lead) st = worker_report(p, s, &win, &wn, &tw);
    }
    if (!st && p->stop_code) st = stop_save(p, s - 1);
    if (!st) st = dt_ps_finish(p->cl);
    if (!st) memcpy(p->lost, dt_ps_client_lost(p->cl), (size_t)p->cap * sizeof(int64_t));
    if (!st && p->left) {
        r->res->left = true;
        dt_log(DT_LOG_INFO, "worker %d left the job after step %lld", p->slot, (long long)(s - 1));
    }
    return st;
}

/* A worker joining a running elastic job (dtrain train --join): its slot and
 * first clock from server 0, its sampler at that clock's global batch, then
 * the steps of any worker. It writes nothing: rank 0 of the job does. */
static dt_status ps_join(ps_run *p) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    dt_status st = tr_elastic_secret(c->join_dir, p->secret, sizeof p->secret);
    if (st) return st;
    dt_ps_cfg pc = c->ps;
    pc.liveness = c->timeout;
    pc.comp = c->dp.comp;
    pc.comp.seed = c->seed;
    pc.secret = p->secret;
    int64_t clock;
    if ((st = dt_ps_client_join(&p->cl, r->m, c->join_port, &pc, c->timeout, &p->slot, &clock))) return st;
    p->S = c->ps.servers;
    p->cap = dt_ps_slots(&c->ps, 0);
    if (!(p->lost = dt_calloc((size_t)p->cap, sizeof(int64_t)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    r->lead = false;
    r->quiet = true;
    r->rank = p->slot;
    dt_log(DT_LOG_INFO, "joined the job as worker %d at step %lld of %lld", p->slot, (long long)clock, (long long)r->total);
    if ((st = dt_acts_create(&r->acts, r->m, 0, r->m->n_blocks - 1, c->batch))) return st;
    if ((st = dt_loader_init(&r->ld, &r->data, c->batch > 256 ? c->batch : 256, c->seed, 0, 1))) return st;
    if ((st = dt_sampler_skip(&r->ld.sampler, c->batch, clock))) return st;
    return ps_loop(p, clock < r->total ? clock : r->total);
}

/* Rank 0: the final parameters, their evaluation, the reporters' end. */
static dt_status ps_finish(ps_run *p) {
    tr_run *r = p->r;
    const dt_train_cfg *c = r->c;
    dt_train_result *res = r->res;
    /* Every rank still here knows who was lost (the servers' farewell). */
    int lost_ranks[1024], n_lost = 0;
    for (int w = 0; w < p->cap; w++) {
        if (p->lost[w] < 0) continue;
        if (w >= p->W) { /* a joined worker: not a rank of this job */
            if (r->lead) dt_log(DT_LOG_WARN, "joined worker %d was lost at clock %lld", w, (long long)p->lost[w]);
            continue;
        }
        size_t used = strlen(res->lost_desc);
        snprintf(res->lost_desc + used, sizeof res->lost_desc - used, "%srank %d at clock %lld", res->lost_workers ? ", " : "",
                 dt_comm_world_rank(r->world, w), (long long)p->lost[w]);
        res->lost_workers++;
        if (n_lost < 1024) lost_ranks[n_lost++] = dt_comm_world_rank(r->world, w);
    }
    dt_status st = dt_ps_gather_final(r->m, r->world, &c->ps, p->hist, &p->out);
    res->samples = p->out.samples;
    if (st || !r->lead) return st;
    bool stopped = res->stopped_at >= 0; /* evaluated when the run ends, not at each stop */
    if (!r->ld.idx && (st = dt_loader_init(&r->ld, &r->data, 256, c->seed, 0, 1))) return st;
    if (!stopped && (st = tr_evaluate_alone(r->m, &r->ld, c->eval_max, &res->test_acc, &res->eval_loss))) return st;
    int maxs = 0;
    for (int i = 0; i < DT_PS_HIST; i++)
        if (p->hist[i] > 0) maxs = i;
    dt_ps_summary ps = {.consistency = c->ps.mode == DT_PS_BSP ? "bsp" : c->ps.mode == DT_PS_ASP ? "asp" : "ssp",
                        .bound = c->ps.mode == DT_PS_SSP ? c->ps.staleness : (c->ps.mode == DT_PS_BSP ? 0 : -1),
                        .max_staleness = maxs, .hist = p->hist, .n_hist = DT_PS_HIST, .lost = lost_ranks, .n_lost = n_lost,
                        .samples = p->out.samples, .joined = p->out.joined, .departed = p->out.departed};
    dt_end_info e = {.res = res, .model = r->m, .strategy = DT_STRATEGY_PS, .world = r->n, .local_params = r->m->n};
    if (r->start_step < r->total && !stopped) { /* resumed at its end: the lines are there already */
        dt_eval_info ev = {.step = r->total, .lm = r->data.lm, .acc = res->test_acc, .loss = res->eval_loss, .time_s = res->seconds};
        if ((st = tr_report_eval(c, &ev))) return st;
        e.ps = &ps;
    }
    return tr_report_end(c, &e);
}

dt_status tr_drive_ps(tr_run *r) {
    ps_run p = {.r = r, .last_ckpt = -1};
    const dt_train_cfg *c = r->c;
    r->sched = (dt_lr_sched){c->lr, c->min_lr, c->warmup, r->total, c->cosine};
    r->t0 = dt_now();
    if (c->join_port) { /* a joiner: not a rank of the job; it only trains */
        dt_status st = ps_join(&p);
        r->res->seconds = dt_now() - r->t0;
        r->res->steps = r->total;
        r->res->stopped_at = -1;
        dt_free(p.lost);
        dt_ps_client_destroy(p.cl);
        return st;
    }
    dt_status st = ps_begin(&p);
    if (!st) {
        r->res->resumed_from = r->start_step > 0 ? r->start_step : -1;
        st = r->rank >= p.W ? ps_serve(&p) : ps_work(&p);
    }
    dt_train_result *res = r->res;
    res->seconds = dt_now() - r->t0;
    res->steps = res->stopped_at >= 0 ? res->stopped_at : r->total;
    /* This process's steps only (a resumed run did not train the first `start`). */
    res->items_per_s = (double)(res->steps - r->start_step) * c->batch * (r->data.lm ? r->data.T : 1) /
                       (res->seconds > 1e-9 ? res->seconds : 1e-9);
    if (!st && p.ckw) st = dt_ckpt_flush(p.ckw);
    /* A stopped run keeps its memory copies for the resume (every rank knows). */
    if (!st && res->stopped_at < 0) st = tr_ckpt_net_end(r);
    if (!st && c->ckpt_stop_only && res->stopped_at < 0 && r->lead) rmdir(c->ckpt_dir);
    if (!st) st = ps_finish(&p);
    if (p.ckw) {
        dt_status fs = dt_ckpt_flush(p.ckw);
        if (!st) st = fs;
    }
    dt_ckpt_writer_destroy(p.ckw);
    dt_optim_destroy(p.dummy);
    dt_free(p.rM);
    dt_free(p.rV);
    dt_free(p.wm);
    dt_free(p.lost);
    dt_free(p.att.bad);
    dt_ps_client_destroy(p.cl);
    return st;
}
