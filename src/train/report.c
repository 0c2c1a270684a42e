/* Calling the reporters a run was given (include/dtrain/report.h), on rank 0.
 * The first hook to fail ends the run with its status. */
#include "run.h"

enum { ON_START, ON_STEP, ON_EVAL, ON_END, ON_EVENT };

static dt_status call_hooks(const dt_train_cfg *c, int which, const void *arg) {
    for (int i = 0; i < c->n_reporters; i++) {
        const dt_reporter *r = &c->reporters[i];
        dt_status st = DT_OK;
        if (which == ON_START && r->on_start) st = r->on_start(r->ctx, arg);
        if (which == ON_STEP && r->on_step) st = r->on_step(r->ctx, arg);
        if (which == ON_EVAL && r->on_eval) st = r->on_eval(r->ctx, arg);
        if (which == ON_END && r->on_end) st = r->on_end(r->ctx, arg);
        if (which == ON_EVENT && r->on_event) st = r->on_event(r->ctx, arg);
        if (st) return st;
    }
    return DT_OK;
}

void tr_run_info(const tr_run *r, dt_strategy s, dt_run_info *info) {
    const dt_train_cfg *c = r->c;
    *info = (dt_run_info){
        .model = dt_model_name(&c->model),
        .params = r->full ? r->full->n : r->m->n,
        .lm = r->data.lm,
        .n_train = r->data.n_train,
        .total_steps = r->total,
        .start_step = r->start_step,
        .world = r->n,
        .dp = r->D,
        .pp = r->P,
        .tp = r->TP,
        .strategy = s,
        .out_dir = c->out_dir,
    };
}

dt_status tr_report_start(const tr_run *r, const dt_run_info *info) {
    return r->lead ? call_hooks(r->c, ON_START, info) : DT_OK;
}

dt_status tr_report_step(const dt_train_cfg *c, const dt_step_info *s) { return call_hooks(c, ON_STEP, s); }

dt_status tr_report_eval(const dt_train_cfg *c, const dt_eval_info *e) { return call_hooks(c, ON_EVAL, e); }

dt_status tr_report_end(const dt_train_cfg *c, const dt_end_info *e) { return call_hooks(c, ON_END, e); }

dt_status tr_report_event(const dt_train_cfg *c, const dt_event_info *e) { return call_hooks(c, ON_EVENT, e); }
