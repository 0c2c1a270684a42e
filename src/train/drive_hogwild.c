/* The Hogwild! driver (--strategy hogwild): threads of this process share the
 * model's weights with no locks (src/parallel/hogwild.c); each draws its shard
 * (thread t of T) of every global batch from its own loader. The step figures
 * are reported at the end (the threads run free until then).
 *
 * Checkpoints and stops are meetings of the threads at one step boundary: the
 * weights, thread 0's optimizer state in the usual place and the other
 * threads' as two extra tensors ((T-1) x n each), the sampler position (every
 * thread has drawn the same number of global batches). One thread resumes
 * bitwise; more do not, as Hogwild! never repeats itself. */
#include "run.h"

#include "dtrain/hogwild.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

typedef struct hw_ctx {
    tr_run *r;
    const dt_model *m;
    int B;
    dt_loader *lds;
    dt_ckpt_writer *ckw;
    char resume_path[4096];
    dt_ckpt_state rcs;
    float *rM, *rV;            /* the checkpoint's thread-0 optimizer state */
    bool *all;                 /* every parameter (the checkpoint's mask) */
    double last_poll;          /* the stop poll's clock (calls are serialised) */
} hw_ctx;

static void hw_batch(void *vctx, int t, int64_t step, dt_batch *out) {
    hw_ctx *h = vctx;
    dt_loader *ld = &h->lds[t];
    int ln, gn;
    dt_loader_next(ld, h->B, &ln, &gn);
    memset(out, 0, sizeof *out);
    out->B = ln;
    out->ids = ld->idx;
    out->y = ld->y;
    out->step = step;
    out->seed = h->r->c->seed;
    out->targets = ld->targets;
    if (ln <= 0) return;
    out->loss_scale = 1.0f / ((float)ln * (float)h->m->loss_terms);
    out->x = ld->x;
    out->tokens = ld->tokens;
}

/* Called under the threads' lock, once per thread step: T times the gap since
 * the last call is one thread's step, for the deadline's estimate. */
static int hw_stop_poll(void *vctx) {
    hw_ctx *h = vctx;
    double now = dt_now();
    if (h->last_poll > 0) tr_stop_timed(h->r, (now - h->last_poll) * h->r->c->hogwild_threads, h->ckw);
    h->last_poll = now;
    return tr_stop_code(h->r, true);
}

/* The other threads' moment `which` (0: m, 1: v) side by side, or NULL. */
static float *others(dt_optim *const *opts, int T, int which) {
    size_t n = opts[0]->n;
    if (T < 2 || !(which ? opts[0]->v : opts[0]->m)) return NULL;
    float *buf = dt_alloc_floats((size_t)(T - 1) * n);
    for (int t = 1; buf && t < T; t++) memcpy(buf + (size_t)(t - 1) * n, which ? opts[t]->v : opts[t]->m, n * sizeof(float));
    return buf;
}

static dt_status hw_meet(void *vctx, int64_t step, dt_optim *const *opts, int T, int stop_code) {
    hw_ctx *h = vctx;
    tr_run *r = h->r;
    const dt_train_cfg *c = r->c;
    if (!h->ckw) return DT_OK;
    dt_ckpt_state cs = {.step = step, .epoch = h->lds[0].sampler.epoch, .index = h->lds[0].sampler.index, .seed = c->seed,
                        .optim_t = opts[0]->t, .world = 1, .dp = T, .pp = 1, .tp = 1, .batch = c->batch, .optim = c->optim.kind};
    snprintf(cs.config, sizeof cs.config, "%s", c->config_json ? c->config_json : "{}");
    float *om = others(opts, T, 0), *ov = others(opts, T, 1);
    size_t lo = 0, n = r->m->n;
    dt_ckpt_shard sh = {.n = 1, .arena_off = &lo, .len = &n, .state_off = &lo};
    dt_ckpt_extras x = {0};
    dt_status st = (om || !opts[0]->m || T < 2) && (ov || !opts[0]->v || T < 2) ? DT_OK : dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (!st && om) st = dt_ckpt_extras_add(&x, "optim.m.threads", om, (size_t)(T - 1) * n);
    if (!st && ov) st = dt_ckpt_extras_add(&x, "optim.v.threads", ov, (size_t)(T - 1) * n);
    dt_ckpt_extras_attach(&x, &sh);
    if (!st) st = dt_ckpt_save_async(h->ckw, r->m, opts[0], &sh, h->all, &cs);
    dt_free(om);
    dt_free(ov);
    if (!st && stop_code) st = dt_ckpt_flush(h->ckw);
    return st;
}

/* One moment of threads 1..T-1 from the checkpoint (absent: zero). */
static dt_status load_others(hw_ctx *h, dt_optim *const *opts, int T, int which) {
    size_t n = opts[0]->n;
    if (T < 2 || !(which ? opts[0]->v : opts[0]->m)) return DT_OK;
    float *buf = dt_alloc_floats((size_t)(T - 1) * n);
    bool found = false;
    dt_status st = buf ? dt_ckpt_read_extra(h->resume_path, which ? "optim.v.threads" : "optim.m.threads", buf,
                                            (size_t)(T - 1) * n, &found)
                       : dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int t = 1; !st && found && t < T; t++) memcpy(which ? opts[t]->v : opts[t]->m, buf + (size_t)(t - 1) * n, n * sizeof(float));
    dt_free(buf);
    return st;
}

static dt_status hw_load(void *vctx, dt_optim *const *opts, int T) {
    hw_ctx *h = vctx;
    if (!h->resume_path[0]) return DT_OK;
    size_t n = opts[0]->n * sizeof(float);
    if (opts[0]->m) memcpy(opts[0]->m, h->rM, n);
    if (opts[0]->v) memcpy(opts[0]->v, h->rV, n);
    for (int t = 0; t < T; t++) opts[t]->t = h->rcs.optim_t;
    dt_status st = load_others(h, opts, T, 0);
    return st ? st : load_others(h, opts, T, 1);
}

/* The checkpoint writer, and the checkpoint to resume from (same --threads). */
static dt_status hw_begin(hw_ctx *h) {
    tr_run *r = h->r;
    const dt_train_cfg *c = r->c;
    dt_status st = DT_OK;
    if (c->ckpt_dir && (st = dt_ckpt_writer_create(&h->ckw, c->ckpt_dir, 0, 1, NULL, 1, c->ckpt_keep, 10 * c->timeout)))
        return st;
    if (!(h->all = dt_calloc((size_t)r->m->n_params, sizeof(bool)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < r->m->n_params; i++) h->all[i] = true;
    if (!c->resume || !tr_resume_path(c, true, h->resume_path, sizeof h->resume_path)) {
        h->resume_path[0] = '\0';
        return DT_OK;
    }
    if (!(h->rM = dt_alloc_floats(r->m->n)) || !(h->rV = dt_alloc_floats(r->m->n))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    if ((st = dt_ckpt_load(h->resume_path, r->m, h->rM, h->rV, &h->rcs)) || (st = tr_same_run(c, h->resume_path, &h->rcs)))
        return st;
    if (h->rcs.dp != c->hogwild_threads)
        return dt_errorf(DT_ERR_INVALID, "%s was written by %d hogwild threads; resume with --threads %d", h->resume_path,
                         h->rcs.dp, h->rcs.dp);
    r->start_step = h->rcs.step > r->total ? r->total : h->rcs.step;
    for (int t = 0; t < c->hogwild_threads && !st; t++) st = dt_sampler_seek(&h->lds[t].sampler, h->rcs.epoch, h->rcs.index);
    if (!st && !c->quiet) dt_log(DT_LOG_INFO, "resuming hogwild from %s (step %lld)", h->resume_path, (long long)r->start_step);
    return st;
}

static dt_status report(tr_run *r, const dt_hogwild_cfg *hc, const double *loss, int64_t end) {
    const dt_train_cfg *c = r->c;
    dt_train_result *res = r->res;
    dt_run_info info;
    tr_run_info(r, DT_STRATEGY_HOGWILD, &info);
    dt_status st = tr_report_start(r, &info);
    for (int64_t s = r->start_step + 1; s <= end && !st; s++) {
        if (s % c->log_every != 0 && s != end) continue;
        dt_step_info si = {.strategy = DT_STRATEGY_HOGWILD, .step = s, .total_steps = r->total, .loss = (float)loss[s - 1],
                           .lr = dt_lr_at(&hc->sched, s - 1), .items_per_s = res->items_per_s,
                           .unit = r->data.lm ? "tokens" : "samples", .time_s = -1, .threads = hc->threads};
        st = tr_report_step(c, &si);
    }
    bool stopped = res->stopped_at >= 0;
    dt_eval_info e = {.step = r->total, .lm = r->data.lm, .acc = res->test_acc, .loss = res->eval_loss, .time_s = -1};
    if (!st && !stopped) st = tr_report_eval(c, &e);
    if (!st && stopped) st = tr_stop_note(r, res->stopped_at, res->stop_signal, res->final_loss, r->c->ckpt_dir != NULL);
    dt_end_info end_i = {.res = res, .model = r->m, .strategy = DT_STRATEGY_HOGWILD, .world = 1, .local_params = r->m->n};
    return st ? st : tr_report_end(c, &end_i);
}

/* Trains, then the figures: steps, time, the last loss and the evaluation
 * (not of a stopped run: it is evaluated when it ends). */
static dt_status hw_train(hw_ctx *h, dt_hogwild_cfg *hc, double *loss) {
    tr_run *r = h->r;
    const dt_train_cfg *c = r->c;
    dt_train_result *res = r->res;
    dt_hogwild_hooks hooks = {.ctx = h, .every = c->ckpt_stop_only ? 0 : c->ckpt_every, .at_end = c->ckpt_dir && !c->ckpt_stop_only,
                              .stop_poll = hw_stop_poll, .meet = hw_meet, .load = hw_load};
    hc->start = r->start_step;
    int64_t stopped = -1;
    int code = 0;
    double t0 = dt_now();
    dt_status st = dt_hogwild_train(r->m, hc, hw_batch, h, loss, &hooks, &stopped, &code);
    if (st) return st;
    int64_t end = stopped >= 0 ? stopped : r->total;
    res->stopped_at = stopped;
    res->stop_signal = stopped >= 0 ? dt_train_stop_reason(code) : 0;
    res->resumed_from = r->start_step > 0 ? r->start_step : -1;
    res->seconds = dt_now() - t0;
    res->steps = end;
    res->items_per_s = (double)(end - r->start_step) * c->batch * (r->data.lm ? r->data.T : 1) / (res->seconds > 1e-9 ? res->seconds : 1e-9);
    res->final_loss = end > r->start_step ? (float)loss[end - 1] : NAN;
    if (h->ckw && (st = dt_ckpt_flush(h->ckw))) return st;
    if (c->ckpt_stop_only && stopped < 0) rmdir(c->ckpt_dir);
    if (stopped >= 0) return DT_OK;
    if ((st = dt_loader_init(&r->ld, &r->data, r->data.lm ? 16 : 256, c->seed, 0, 1))) return st;
    return tr_evaluate_alone(r->m, &r->ld, c->eval_max, &res->test_acc, &res->eval_loss);
}

dt_status tr_drive_hogwild(tr_run *r) {
    const dt_train_cfg *c = r->c;
    int T = c->hogwild_threads, B = c->batch;
    int maxB = (B + T - 1) / T;
    dt_loader *lds = dt_calloc((size_t)T, sizeof *lds);
    double *loss = dt_calloc((size_t)r->total, sizeof(double));
    dt_status st = lds && loss ? DT_OK : dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int t = 0; t < T && !st; t++) st = dt_loader_init(&lds[t], &r->data, maxB, c->seed, t, T);
    dt_hogwild_cfg hc = {.threads = T, .steps = r->total, .maxB = maxB, .optim = c->optim,
                         .sched = {c->lr, c->min_lr, c->warmup, r->total, c->cosine}};
    hw_ctx h = {.r = r, .m = r->m, .B = B, .lds = lds};
    if (!st) st = hw_begin(&h);
    if (!st) st = tr_stop_init(r, r->m->n * sizeof(float) * (size_t)(1 + 2 * T));
    if (!st && !c->quiet)
        dt_log(DT_LOG_INFO, "hogwild: %d threads share one %s (%zu parameters) with no locks, %lld steps each", T,
               dt_model_name(&r->m->cfg), r->m->n, (long long)(r->total - r->start_step));
    if (!st) st = hw_train(&h, &hc, loss);
    if (!st && r->lead) st = report(r, &hc, loss, r->res->stopped_at >= 0 ? r->res->stopped_at : r->total);
    dt_ckpt_writer_destroy(h.ckw);
    dt_free(h.rM);
    dt_free(h.rV);
    dt_free(h.all);
    for (int t = 0; lds && t < T; t++) dt_loader_free(&lds[t]);
    dt_free(lds);
    dt_free(loss);
    return st;
}
