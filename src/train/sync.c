/* The synchronous driver: data parallelism (any ZeRO stage, compressed or
 * robust), pipeline and tensor parallelism, local SGD. One step reads as a
 * textbook's: next batch, forward/backward, reduce, update, then checkpoint,
 * account and report. */
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Synchronous: every loss term weighs 1/(terms in the global batch) and the
 * collectives sum. Local SGD and gathered (robust) aggregation: each worker's
 * gradient is the mean over its own shard. */
static float loss_scale(const tr_run *r, int local_n, int global_n) {
    float terms = (float)r->m->loss_terms;
    if (r->per_worker) return local_n > 0 ? 1.0f / ((float)local_n * terms) : 0.0f;
    return 1.0f / ((float)global_n * terms);
}

static dt_status tp_status(const dt_model *m) {
    return m->tp_err ? dt_errorf(m->tp_err, "tensor-parallel all-reduce failed: %s", dt_error_msg()) : DT_OK;
}

/* Forward and backward of this rank's shard: through the pipeline schedule, or
 * as --accum micro-batches whose buckets go out as backward finishes them. */
static dt_status forward_backward(tr_run *r, int64_t step, int local_n, float scale, double *loss, double *bwd_s) {
    const dt_train_cfg *c = r->c;
    dt_model *m = r->m;
    dt_loader *ld = &r->ld;
    dt_status st = DT_OK;
    if (r->pipe) {
        dt_batch sb = {.B = local_n, .x = ld->x, .tokens = ld->tokens, .targets = ld->targets, .loss_scale = scale,
                       .y = ld->y, .ids = ld->idx, .step = step, .seed = c->seed};
        double tb = dt_now();
        if ((st = dt_pipe_step(r->pipe, r->dp, &sb, m->in_floats, loss)) || (st = tp_status(m))) return st;
        *bwd_s = dt_now() - tb;
        if (r->trace) dt_trace_event(r->trace, "pipeline schedule", DT_TRACE_COMPUTE, tb, tb + *bwd_s, step, -1);
        return DT_OK;
    }
    size_t per = dt_loader_sample_len(ld), tper = ld->d->lm ? per : 1;
    for (int mi = 0; mi < c->accum; mi++) {
        int lo = (int)((int64_t)local_n * mi / c->accum), hi = (int)((int64_t)local_n * (mi + 1) / c->accum);
        dt_batch b = {.B = hi - lo, .targets = ld->targets + (size_t)lo * tper, .loss_scale = scale,
                      .ids = ld->idx + lo, .step = step, .seed = c->seed};
        if (ld->y) b.y = ld->y + (size_t)lo * (size_t)ld->d->y_dim;
        if (ld->d->lm) b.tokens = ld->tokens + (size_t)lo * per;
        else b.x = ld->x + (size_t)lo * per;
        dt_dp_begin_backward(r->dp, mi == c->accum - 1 && !r->per_worker);
        if (b.B > 0) {
            double tf = dt_now();
            *loss += dt_model_forward(m, r->acts, &b, NULL);
            double tb = dt_now();
            dt_model_backward(m, r->acts, &b, NULL, NULL, dt_dp_block_done, r->dp);
            double te = dt_now();
            *bwd_s += te - tb;
            if (r->trace) {
                dt_trace_event(r->trace, "forward", DT_TRACE_COMPUTE, tf, tb, step, mi);
                dt_trace_event(r->trace, "backward", DT_TRACE_COMPUTE, tb, te, step, mi);
            }
        } else {
            dt_model_params_skip(m, false); /* ZeRO-3: the gathers every other rank makes */
        }
        if ((st = tp_status(m)) || (st = dt_dp_end_backward(r->dp))) return st;
    }
    return DT_OK;
}

/* Local SGD: the workers' parameters are averaged every H steps (optimizer
 * state stays local), a step whose update was dropped included (checkpoints
 * are taken at those steps and hold one worker's copy). */
static dt_status local_average(tr_run *r, int64_t step) {
    const dt_train_cfg *c = r->c;
    if (!(c->strategy == DT_STRATEGY_LOCALSGD && r->D > 1 && step % c->local_h == 0)) return DT_OK;
    double ta = dt_now();
    dt_status st = dt_allreduce(r->dpc, r->m->w, r->m->n, DT_OP_AVG, c->dp.algo);
    if (!st && r->trace) dt_trace_event(r->trace, "parameter average", DT_TRACE_COMPUTE, ta, dt_now(), step, -1);
    return st;
}

/* Robust reduction (when gathered), the optimizer, local SGD's averaging and
 * the pipeline's tied tensors. */
static dt_status reduce_update(tr_run *r, int64_t step, float lr) {
    dt_status st = DT_OK;
    if (r->rob && (st = dt_robust_reduce(r->rob, r->m, step))) return st;
    if ((st = dt_dp_step(r->dp, lr, dt_robust_momentum(r->rob) ? 0.0f : r->c->clip, NULL))) return st;
    if ((st = local_average(r, step))) return st;
    return r->pipe ? dt_pipe_sync_tied(r->pipe, r->dp) : DT_OK;
}

/* --balance dynamic: each worker's speed (samples per second of its own
 * compute, slowness included), smoothed, sets its share of the next batch. */
static dt_status rebalance(tr_run *r, int local_n, double own) {
    int D = r->D;
    double *bal = r->bal, *v = r->bal + D;
    memset(v, 0, (size_t)D * sizeof(double));
    v[r->replica] = local_n > 0 && own > 0 ? (double)local_n / own : bal[r->replica];
    dt_status st = dt_allreduce_f64(r->dpc, v, (size_t)D);
    if (st) return st;
    for (int k = 0; k < D; k++) bal[k] = bal[k] > 0 ? 0.5 * bal[k] + 0.5 * v[k] : v[k];
    dt_sampler_set_weights(&r->ld.sampler, bal);
    return DT_OK;
}

static void add_stats(dt_dp_stats *to, const dt_dp_stats *s) {
    to->comm_s += s->comm_s;
    to->exposed_s += s->exposed_s;
    to->backward_s += s->backward_s;
    to->bytes_sent += s->bytes_sent;
    to->comp.encode_s += s->comp.encode_s;
    to->comp.decode_s += s->comp.decode_s;
    to->comp.raw_bytes += s->comp.raw_bytes;
    to->comp.payload_bytes += s->comp.payload_bytes;
}

/* This rank's share of the step's loss over the world. */
static double loss_share(const tr_run *r, int local_n, int global_n, double local_loss) {
    double loss_d = r->tpr == 0 ? local_loss : 0.0; /* tp ranks compute the same loss */
    if (r->per_worker && global_n > 0) loss_d *= (double)local_n / (double)global_n; /* worker mean -> global mean */
    return loss_d;
}

/* The step's figures (its loss over the world voted already) into the window
 * and the run. */
static dt_status account(tr_run *r, int local_n, int global_n, double loss_d, double t[3], double bwd_s, double slept) {
    dt_train_result *res = r->res;
    dt_status st = DT_OK;
    float loss = (float)loss_d;
    dt_dp_stats ss;
    dt_dp_take_stats(r->dp, &ss);
    ss.backward_s = bwd_s;
    double compute = (t[2] - t[0]) - ss.exposed_s;
    r->slow_prev = compute - slept;
    if (r->bal && r->D > 1 && (st = rebalance(r, local_n, dt_now() - t[0] - ss.exposed_s))) return st;
    add_stats(&r->win.dp, &ss);
    res->comp.encode_s += ss.comp.encode_s;
    res->comp.decode_s += ss.comp.decode_s;
    res->comp.raw_bytes += ss.comp.raw_bytes;
    res->comp.payload_bytes += ss.comp.payload_bytes;
    res->comm_s += ss.comm_s;
    res->exposed_s += ss.exposed_s;
    res->gather_s += ss.gather_s;
    res->gather_exposed_s += ss.gather_wait_s;
    res->backward_s += ss.backward_s;
    res->bytes_sent += ss.bytes_sent;
    r->win.compute_s += compute;
    if (isfinite(loss)) { /* a skipped step's loss is not the model's */
        r->win.loss += loss;
        r->win.loss_n++;
    }
    r->win.steps++;
    int64_t items = (int64_t)global_n * (r->data.lm ? r->data.T : 1);
    r->win.items += items;
    r->all_items += items;
    return DT_OK;
}

/* Every --log-every steps and at the last: the window's figures to the reporters. */
static dt_status report_window(tr_run *r, int64_t step, float lr) {
    const dt_train_cfg *c = r->c;
    if (step % c->log_every != 0 && step != r->total) return DT_OK;
    tr_window *w = &r->win;
    double now = dt_now(), n = (double)w->steps;
    r->res->final_loss = w->loss_n ? (float)(w->loss / (double)w->loss_n) : NAN;
    dt_step_info s = {
        .strategy = c->strategy, .step = step, .total_steps = r->total, .epoch = r->ld.sampler.epoch,
        .loss = r->res->final_loss, .lr = lr, .items_per_s = w->items / (now - w->t0 > 1e-9 ? now - w->t0 : 1e-9),
        .unit = r->data.lm ? "tokens" : "samples", .time_s = now - r->t0,
        .eta_s = (double)(r->total - step) * (now - r->t0) / (double)step,
        .compute_s = w->compute_s / n, .comm_exposed_s = w->dp.exposed_s / n, .comm_s = w->dp.comm_s / n,
        .bytes_sent = w->dp.bytes_sent / (uint64_t)w->steps, .ranks = r->n,
        .loss_scale = r->fp16 ? r->scaler.scale : 0.0f, .overflow_steps = r->res->overflow_steps,
    };
    char codec[48];
    if (dt_dp_gc(r->dp)) {
        /* Compression: the codec, raw / encoded bytes of this rank's
         * contributions, its time per step (0 during the warm-up). */
        dt_comp_name(&c->dp.comp.comp, codec, sizeof codec);
        const dt_gc_stats *g = &w->dp.comp;
        s.compress = codec;
        s.compress_ratio = g->payload_bytes ? (double)g->raw_bytes / (double)g->payload_bytes : 1.0;
        s.encode_s = g->encode_s / n;
        s.decode_s = g->decode_s / n;
        /* rank 0 reports: only it reads its residual (stable here: the step's collectives are done) */
        const float *e = r->lead ? dt_gc_error(dt_dp_gc(r->dp)) : NULL;
        s.ef_norm = e ? sqrt(dt_sumsq(e, dt_gc_params(dt_dp_gc(r->dp)))) : -1.0;
    }
    memset(w, 0, sizeof *w);
    w->t0 = now;
    return r->lead ? tr_report_step(c, &s) : DT_OK;
}

/* Every --eval-every steps and at the last. Evaluation time is not training
 * time: the clocks move past it. */
static dt_status maybe_evaluate(tr_run *r, int64_t step) {
    const dt_train_cfg *c = r->c;
    if (!((c->eval_every > 0 && step % c->eval_every == 0) || step == r->total)) return DT_OK;
    double te = dt_now();
    bool counts = (!r->pipe || r->stage == r->P - 1) && r->tpr == 0;
    dt_status st = tr_evaluate(r->m, r->eacts, &r->ld, r->eB, c->eval_max, r->world, r->pipe, r->replica, r->D, counts,
                               &r->acc, &r->eloss);
    if (st || (st = dt_dp_params_status(r->dp))) return st;
    if (r->trace) dt_trace_event(r->trace, "eval", DT_TRACE_COMPUTE, te, dt_now(), step, -1);
    double at = te - r->t0; /* training time when evaluated (earlier evaluations excluded) */
    r->t0 += dt_now() - te;
    r->win.t0 += dt_now() - te;
    dt_eval_info e = {.step = step, .lm = r->data.lm, .acc = r->acc, .loss = r->eloss, .time_s = at};
    return r->lead ? tr_report_eval(c, &e) : DT_OK;
}

/* After the update (every mode but skip): the verdict in the loss's
 * all-reduce (taken already when voted). A spike rewinds, or ends the run
 * under stop. */
static dt_status judge(tr_run *r, int64_t step, double loss_d, bool voted, tr_verdict *v, bool *spike) {
    char why[256];
    dt_status st = voted ? DT_OK : tr_vote(r, loss_d, false, v);
    if (st || !(*spike = tr_spike(r, v, why, sizeof why))) return st;
    if (r->c->diverge.mode == DT_DIVERGE_REWIND) return tr_rewind(r, step, v->loss, why);
    if (!isfinite(v->loss))
        return dt_errorf(DT_ERR_INVALID, "the loss became %f at step %lld: lower --lr or set --clip (or --on-divergence "
                         "skip|rewind)", v->loss, (long long)step);
    return dt_errorf(DT_ERR_INVALID, "divergence at step %lld: %s; stopping (--on-divergence stop; skip or rewind would go "
                     "on)", (long long)step, why);
}

/* --inject overflow: this rank's gradient of this step turns inf. */
static bool overflow_injected(const tr_run *r, int64_t step) {
    for (int i = 0; i < r->c->n_inject; i++) {
        const dt_inject *in = &r->c->inject[i];
        if (in->kind == DT_INJECT_OVERFLOW && in->rank == r->rank && in->step == step) return true;
    }
    return false;
}

/* --precision fp16, after the vote: an inf or NaN anywhere (an fp16 overflow)
 * drops the step on every rank and halves the scale (*dropped); else the
 * gradient is unscaled for clipping and the optimizer. */
static dt_status unscale(tr_run *r, int64_t step, const tr_verdict *v, bool *dropped) {
    float s = r->scaler.scale;
    dt_scaler_verdict sv = dt_scaler_update(&r->scaler, v->grad_bad);
    if (sv == DT_SCALER_APPLY) {
        dt_dp_scale_grad(r->dp, 1.0f / s);
        return DT_OK;
    }
    *dropped = true;
    if (sv == DT_SCALER_STUCK)
        return dt_errorf(DT_ERR_INVALID, "the gradient is inf or NaN at step %lld with the loss scale at %g (%lld "
                         "overflows in a row): not fp16's range but a diverging run; lower --lr, set --clip, or try "
                         "--precision bf16", (long long)step, (double)s, (long long)r->scaler.in_a_row);
    r->res->overflow_steps++;
    char why[96];
    snprintf(why, sizeof why, "fp16 overflow: loss scale %g -> %g", (double)s, (double)r->scaler.scale);
    if (r->lead)
        dt_log(DT_LOG_INFO, "fp16: the gradient of step %lld overflowed; its update is dropped on every rank and the "
               "loss scale goes %g -> %g", (long long)step, (double)s, (double)r->scaler.scale);
    dt_status st = dt_dp_discard(r->dp);
    return st ? st : tr_event(r, "overflow", step, 0, 0, v->loss, why);
}

/* Reduce and update, or under --on-divergence skip and --precision fp16 first
 * the verdict (its collectives waited for, the gradient's finiteness in the
 * vote), and no update when it is a spike (*spike) or an fp16 overflow
 * (*dropped). *voted: v holds the verdict. */
static dt_status update(tr_run *r, int64_t step, float lr, double loss_d, tr_verdict *v, bool *voted, bool *spike,
                        bool *dropped) {
    char why[256];
    dt_status st = DT_OK;
    *voted = r->c->diverge.mode == DT_DIVERGE_SKIP || r->fp16;
    *spike = *dropped = false;
    if (*voted) {
        if ((st = dt_dp_wait(r->dp))) return st;
        if (r->fp16 && overflow_injected(r, step)) dt_dp_scale_grad(r->dp, INFINITY);
        if ((st = tr_vote(r, loss_d, !dt_dp_grad_finite(r->dp), v))) return st;
        if (r->fp16 && (st = unscale(r, step, v, dropped))) return st;
        if (!*dropped && r->c->diverge.mode == DT_DIVERGE_SKIP && (*spike = tr_spike(r, v, why, sizeof why)) &&
            (st = tr_skip_step(r, step, v->loss, why)))
            return st;
        if (*dropped || *spike) return local_average(r, step);
    }
    return reduce_update(r, step, lr);
}

/* A rewind or a stop ends the step early: the loop reads r->stop.rewind_to
 * and r->res->stopped_at. A step whose spike was applied (the rewind comes
 * after the update) is never checkpointed. */
static dt_status step(tr_run *r, int64_t step) {
    const dt_train_cfg *c = r->c;
    dt_comm_set_step(r->world, step);
    dt_dp_set_step(r->dp, step);
    tr_step_hook(c, r->rank, step, DT_STEP_BEGIN, r->slow_prev);
    double t[3];
    t[0] = dt_now();
    tr_step_hook(c, r->rank, step, DT_STEP_COMPUTE, r->slow_prev); /* --inject slow: a slower machine */
    double slept = dt_now() - t[0];
    int local_n, global_n;
    dt_loader_skip(&r->ld, c->batch, tr_skip_at(r, step));
    dt_loader_next(&r->ld, c->batch, &local_n, &global_n);
    double loss = 0, bwd_s = 0;
    float ls = r->fp16 ? r->scaler.scale : 1.0f; /* the loss scale; the loss is reported without it */
    float scale = loss_scale(r, local_n, global_n) * tr_spike_scale(r, step) * ls;
    dt_status st = forward_backward(r, step, local_n, scale, &loss, &bwd_s);
    if (st) return st;
    loss /= ls;
    t[1] = dt_now();
    float lr = dt_lr_at(&r->sched, step - 1);
    tr_verdict v;
    bool voted, spike, dropped;
    double loss_d = loss_share(r, local_n, global_n, loss);
    if ((st = update(r, step, lr, loss_d, &v, &voted, &spike, &dropped))) return st;
    t[2] = dt_now();
    if (r->trace) dt_trace_event(r->trace, "optimizer", DT_TRACE_COMPUTE, t[1], t[2], step, -1);
    if (r->c->diverge.mode != DT_DIVERGE_SKIP && !dropped && ((st = judge(r, step, loss_d, voted, &v, &spike)) || spike))
        return st; /* spike: rewound */
    if ((st = tr_ckpt_maybe_save(r, step))) return st;
    if (!spike && !dropped) tr_spike_push(r, v.loss);
    if ((st = account(r, local_n, global_n, spike ? NAN : v.loss, t, bwd_s, slept))) return st;
    tr_stop_timed(r, dt_now() - t[0], r->ck.w);
    if ((st = report_window(r, step, lr))) return st;
    if (v.stopping && step < r->total) return tr_stop_save(r, step, &v);
    return maybe_evaluate(r, step);
}

static void trace_hook(void *ctx, const char *name, int bucket, double t0, double t1, bool comm_thread) {
    dt_trace_event(ctx, name, comm_thread ? DT_TRACE_COMM : DT_TRACE_COMPUTE, t0, t1, -1, bucket);
}

static void log_start(const tr_run *r) {
    const dt_train_cfg *c = r->c;
    dt_dp_mem mem;
    dt_dp_memory(r->dp, &mem);
    mem.optim_bytes += dt_robust_state_bytes(r->rob);
    dt_log(DT_LOG_INFO, "training %s (%zu parameters) on %lld %s, %lld steps of batch %d, %s lr %g",
           dt_model_name(&r->m->cfg), r->m->n, (long long)r->data.n_train, r->data.lm ? "windows" : "images",
           (long long)r->total, c->batch, c->optim.kind == DT_OPTIM_SGD ? "sgd" : "adamw", (double)c->lr);
    if (r->n > 1)
        dt_log(DT_LOG_INFO, "data parallel on %d ranks: %d buckets, %s, ZeRO-%d, %zu optimizer bytes per rank", r->n,
               dt_dp_n_buckets(r->dp), dt_algo_name(c->dp.algo), c->dp.zero, mem.optim_bytes);
    static const char *const rule[DT_AGG_COUNT] = {"mean", "mean", "coordinate-wise median", "trimmed mean", "Multi-Krum",
                                                   "centred clipping"};
    if (r->rob)
        dt_log(DT_LOG_INFO, "aggregation: %s%s of the %d workers' %s", rule[r->robcfg.agg.kind],
               r->robcfg.agg.nnm ? " after nearest-neighbour mixing" : "", r->D,
               dt_robust_momentum(r->rob) ? "momenta (worker momentum)" : "gradients");
    if (r->start_step > 0) dt_log(DT_LOG_INFO, "resumed at step %lld of %lld", (long long)r->start_step, (long long)r->total);
    if (r->fp16 && r->lead)
        dt_log(DT_LOG_INFO, "fp16 loss scale %g, %s", (double)r->scaler.scale,
               r->scaler.window ? "halved on an overflow, doubled after --loss-scale-window clean steps" : "static");
}

/* Rank 0's reporters start (they may open files); every rank learns whether
 * they could, so a failure ends every rank at once. Also the barrier before
 * the clock starts. */
static dt_status start_reporters(tr_run *r) {
    dt_run_info info;
    tr_run_info(r, r->c->strategy, &info);
    dt_status st = tr_report_start(r, &info);
    double failed = st ? 1.0 : 0.0;
    dt_status cs = dt_allreduce_f64(r->world, &failed, 1);
    if (st || cs) return st ? st : cs;
    dt_dp_stats discard; /* this exchange is not step 1's traffic */
    dt_dp_take_stats(r->dp, &discard);
    return failed > 0 ? dt_errorf(DT_ERR_IO, "rank 0 could not start its reporters") : DT_OK;
}

static dt_status stop_init(tr_run *r) {
    dt_dp_mem mem;
    dt_dp_memory(r->dp, &mem);
    return tr_stop_init(r, mem.param_bytes + mem.optim_bytes);
}

static dt_status begin(tr_run *r) {
    const dt_train_cfg *c = r->c;
    dt_status st = DT_OK;
    r->ck.last_step = -1;
    r->fp16 = c->model.precision == DT_PRECISION_FP16;
    dt_scaler_init(&r->scaler, c->loss_scale, c->loss_scale_window); /* a resume may set it */
    if ((st = tr_setup_strategy(r)) || (st = tr_ckpt_storage(r, true))) return st;
    if (c->diverge.mode == DT_DIVERGE_REWIND && r->ck.net)
        return dt_errorf(DT_ERR_INVALID, "--on-divergence rewind reloads checkpoints during the run: it needs a --ckpt-dir "
                         "every rank shares (%s is each host's own)", c->ckpt_dir);
    if ((st = tr_resume(r)) || (st = tr_ckpt_open(r)) || (st = tr_mem_check(r)) || (st = stop_init(r)) ||
        (st = start_reporters(r)))
        return st;
    r->t0 = r->win.t0 = dt_now();
    if (c->trace) {
        if ((st = dt_trace_create(&r->trace, r->rank, r->t0))) return st;
        dt_dp_set_trace(r->dp, trace_hook, r->trace);
    }
    r->sched = (dt_lr_sched){c->lr, c->min_lr, c->warmup, r->total, c->cosine};
    if (!r->quiet) log_start(r);
    return DT_OK;
}

/* Every stage's pipeline schedule figures, to rank 0 (collective). */
static dt_status pipe_summary(tr_run *r, double *arr, dt_pipe_summary *ps, int *blocks) {
    int P = r->P, M = r->c->pipe.micro_batches;
    dt_pipe_stats s;
    dt_pipe_take_stats(r->pipe, &s);
    memset(arr, 0, (size_t)P * 9 * sizeof(double));
    if (r->replica == 0) {
        double *a = arr + 5 * r->stage;
        a[0] = s.step_s;
        a[1] = s.busy_s;
        a[2] = s.idle_s;
        a[3] = (double)s.act_floats;
        a[4] = s.acts_alive_peak;
    }
    dt_status st = dt_allreduce_f64(r->world, arr, (size_t)P * 5);
    if (st) return st;
    /* Idle = 1 - busy / the pipeline's span (the longest stage schedule). */
    double span = 0, *idle = arr + 5 * P, *act = arr + 6 * P, *busy = arr + 7 * P, *peak = arr + 8 * P;
    for (int k = 0; k < P; k++) span = arr[5 * k] > span ? arr[5 * k] : span;
    for (int k = 0; k < P; k++) {
        idle[k] = span > 0 ? 1.0 - arr[5 * k + 1] / span : 0.0;
        act[k] = 4 * arr[5 * k + 3];
        busy[k] = arr[5 * k + 1];
        peak[k] = arr[5 * k + 4];
        blocks[k] = dt_partition_blocks(&r->part, k);
        if (idle[k] > r->res->pp_idle_frac) r->res->pp_idle_frac = idle[k];
    }
    int V = dt_partition_virt(&r->part);
    *ps = (dt_pipe_summary){.stages = P, .micro_batches = M, .virtual_stages = V,
                            .schedule = dt_pipe_schedule_name(r->c->pipe.schedule),
                            .recompute = r->c->pipe.recompute, .bubble_formula = dt_pipe_bubble(P, V, M),
                            .idle_frac = idle, .act_bytes = act, .busy_s = busy, .acts_alive_peak = peak,
                            .blocks_per_stage = blocks};
    return DT_OK;
}

/* The end of the run: the last evaluation of a run resumed at its end, the
 * checkpoint writer drained, the results, the reporters' end (weights, summary
 * lines), the timeline. */
static dt_status finish(tr_run *r) {
    const dt_train_cfg *c = r->c;
    dt_train_result *res = r->res;
    dt_status st = DT_OK;
    /* Resumed at its end: no step ran, but the weights are still evaluated. */
    bool counts = (!r->pipe || r->stage == r->P - 1) && r->tpr == 0;
    if (r->start_step >= r->total &&
        (st = tr_evaluate(r->m, r->eacts, &r->ld, r->eB, c->eval_max, r->world, r->pipe, r->replica, r->D, counts, &r->acc, &r->eloss)))
        return st;
    if (r->ck.w) {
        if ((st = dt_ckpt_flush(r->ck.w))) return st;
        res->ckpt_blocking_s = dt_ckpt_blocking_seconds(r->ck.w);
    }
    /* A stopped run keeps its replicas' memory copies for the resume. */
    if (res->stopped_at < 0 && (st = tr_ckpt_net_end(r))) return st;
    /* Where only a stop writes: no empty folder left in --out by a run that
     * was not stopped (one holding an earlier stop's checkpoint stays). */
    if (c->ckpt_stop_only && res->stopped_at < 0 && r->lead) rmdir(c->ckpt_dir);
    res->seconds = dt_now() - r->t0;
    res->steps = res->stopped_at >= 0 ? res->stopped_at : r->total;
    res->test_acc = r->acc;
    res->eval_loss = r->eloss;
    res->loss_scale = r->fp16 ? r->scaler.scale : 0.0f;
    res->items_per_s = (double)r->all_items / (res->seconds > 1e-9 ? res->seconds : 1e-9);
    dt_dp_memory(r->dp, &res->mem);
    res->mem.optim_bytes += dt_robust_state_bytes(r->rob); /* the worker's momentum is its optimizer state */
    dt_end_info e = {.res = res, .model = r->full ? r->full : r->m, .strategy = c->strategy, .world = r->n, .zero = c->dp.zero,
                     .buckets = dt_dp_n_buckets(r->dp), .local_params = r->m->n};
    dt_pipe_summary ps;
    double *arr = NULL;
    int *blocks = NULL;
    if (r->pipe) {
        arr = dt_calloc((size_t)r->P * 9, sizeof(double));
        blocks = dt_calloc((size_t)r->P, sizeof(int));
        st = arr && blocks ? pipe_summary(r, arr, &ps, blocks) : dt_errorf(DT_ERR_NOMEM, "out of memory");
        e.pipe = &ps;
    }
    /* Memory last, so each rank's peak resident set includes the gather;
     * under ZeRO-3 before it: its peak is the steps', not the whole model's
     * one gather for the weights file. */
    double *mem = NULL;
    dt_mem_summary ms = {.ranks = r->n};
    if (!st && c->dp.zero == 3) st = tr_mem_gather(r, &mem);
    if (!st) st = dt_dp_params_full(r->dp, true);
    if (!st) st = tr_gather_weights(r); /* every rank alike, whatever reporters each has */
    if (!st && c->dp.zero != 3) st = tr_mem_gather(r, &mem);
    ms.bytes = mem;
    e.mem = &ms;
    if (!st && r->lead) st = tr_report_end(c, &e);
    dt_free(mem);
    dt_free(arr);
    dt_free(blocks);
    if (st || !r->trace) return st;
    if ((st = dt_trace_write(r->trace, r->world, c->trace))) return st;
    if (!r->quiet) dt_log(DT_LOG_INFO, "wrote the timeline %s (open it in https://ui.perfetto.dev)", c->trace);
    return DT_OK;
}

dt_status tr_drive_sync(tr_run *r) {
    dt_status st = begin(r);
    for (int64_t s = r->start_step + 1; !st && s <= r->total && r->res->stopped_at < 0; s++) {
        st = step(r, s);
        if (r->stop.rewind_to >= 0) {
            s = r->stop.rewind_to;
            r->stop.rewind_to = -1;
        }
    }
    return st ? st : finish(r);
}
