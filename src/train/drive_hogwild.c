/* The Hogwild! driver (--strategy hogwild): threads of this process share the
 * model's weights with no locks (src/parallel/hogwild.c); each draws its shard
 * (thread t of T) of every global batch from its own loader. The step figures
 * are reported at the end (the threads run free until then). */
#include "run.h"

#include "dtrain/hogwild.h"

#include <string.h>

typedef struct hw_ctx {
    const dt_model *m;
    int B;
    dt_loader *lds;
} hw_ctx;

static void hw_batch(void *vctx, int t, int64_t step, dt_batch *out) {
    hw_ctx *h = vctx;
    dt_loader *ld = &h->lds[t];
    int ln, gn;
    dt_loader_next(ld, h->B, &ln, &gn);
    memset(out, 0, sizeof *out);
    out->B = ln;
    out->targets = ld->targets;
    if (ln <= 0) return;
    out->loss_scale = 1.0f / ((float)ln * (float)h->m->loss_terms);
    out->x = ld->x;
    out->tokens = ld->tokens;
}

static dt_status report(tr_run *r, const dt_hogwild_cfg *hc, const double *loss) {
    const dt_train_cfg *c = r->c;
    dt_train_result *res = r->res;
    dt_run_info info;
    tr_run_info(r, DT_STRATEGY_HOGWILD, &info);
    dt_status st = tr_report_start(r, &info);
    for (int64_t s = 1; s <= r->total && !st; s++) {
        if (s % c->log_every != 0 && s != r->total) continue;
        dt_step_info si = {.strategy = DT_STRATEGY_HOGWILD, .step = s, .total_steps = r->total, .loss = (float)loss[s - 1],
                           .lr = dt_lr_at(&hc->sched, s - 1), .items_per_s = res->items_per_s,
                           .unit = r->data.lm ? "tokens" : "samples", .time_s = -1, .threads = hc->threads};
        st = tr_report_step(c, &si);
    }
    dt_eval_info e = {.step = r->total, .lm = r->data.lm, .acc = res->test_acc, .loss = res->eval_loss, .time_s = -1};
    if (!st) st = tr_report_eval(c, &e);
    dt_end_info end = {.res = res, .model = r->m, .strategy = DT_STRATEGY_HOGWILD, .world = 1, .local_params = r->m->n};
    return st ? st : tr_report_end(c, &end);
}

dt_status tr_drive_hogwild(tr_run *r) {
    const dt_train_cfg *c = r->c;
    dt_train_result *res = r->res;
    int T = c->hogwild_threads, B = c->batch;
    int maxB = (B + T - 1) / T;
    dt_loader *lds = dt_calloc((size_t)T, sizeof *lds);
    double *loss = dt_calloc((size_t)r->total, sizeof(double));
    dt_status st = lds && loss ? DT_OK : dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int t = 0; t < T && !st; t++) st = dt_loader_init(&lds[t], &r->data, maxB, c->seed, t, T);
    dt_hogwild_cfg hc = {T, r->total, maxB, c->optim, {c->lr, c->min_lr, c->warmup, r->total, c->cosine}};
    hw_ctx h = {r->m, B, lds};
    if (!st && !c->quiet)
        dt_log(DT_LOG_INFO, "hogwild: %d threads share one %s (%zu parameters) with no locks, %lld steps each", T,
               dt_model_kind_name(r->m->cfg.kind), r->m->n, (long long)r->total);
    double t0 = dt_now();
    if (!st) st = dt_hogwild_train(r->m, &hc, hw_batch, &h, loss);
    if (!st) {
        res->seconds = dt_now() - t0;
        res->steps = r->total;
        res->items_per_s = (double)r->total * B * (r->data.lm ? r->data.T : 1) / (res->seconds > 1e-9 ? res->seconds : 1e-9);
        res->final_loss = (float)loss[r->total - 1];
        st = dt_loader_init(&r->ld, &r->data, r->data.lm ? 16 : 256, c->seed, 0, 1);
    }
    if (!st) st = tr_evaluate_alone(r->m, &r->ld, c->eval_max, &res->test_acc, &res->eval_loss);
    if (!st && r->lead) st = report(r, &hc, loss);
    for (int t = 0; lds && t < T; t++) dt_loader_free(&lds[t]);
    dt_free(lds);
    dt_free(loss);
    return st;
}
