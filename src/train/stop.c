/* Stopping well: requests to stop (a signal the program caught, or the
 * deadline coming near), loss spikes (skip the step, or rewind to a checkpoint
 * and skip the batches that caused it), and the batches a run is told to skip.
 *
 * The verdict of a step costs no extra round trip: the step already sums its
 * loss over the world (one all-reduce of a few doubles); the request, the
 * deadline votes and the finiteness of the gradient ride in the same vector.
 * Every rank then decides alike from the same sums: stop after this step,
 * drop its update, or rewind. The library installs no signal handler and
 * reads no resource manager's clock: the program calls dt_train_request_stop
 * from its handler and passes the deadline in (cfg.deadline). */
#include "run.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -1: no request; otherwise the first request's signal (0: none named). */
static atomic_int g_stop = -1;

void dt_train_request_stop(int signo) {
    int none = -1;
    atomic_compare_exchange_strong(&g_stop, &none, signo < 0 ? 0 : signo);
}

int dt_train_stop_signal(void) { return atomic_load(&g_stop); }

void dt_train_stop_reset(void) { atomic_store(&g_stop, -1); }

dt_status dt_diverge_parse(const char *spec, dt_diverge_cfg *out) {
    const char *p = strchr(spec, ':');
    size_t kl = p ? (size_t)(p - spec) : strlen(spec);
    if (kl == 4 && strncmp(spec, "stop", 4) == 0 && !p) out->mode = DT_DIVERGE_STOP;
    else if (kl == 4 && strncmp(spec, "skip", 4) == 0 && !p) out->mode = DT_DIVERGE_SKIP;
    else if (kl == 6 && strncmp(spec, "rewind", 6) == 0) out->mode = DT_DIVERGE_REWIND;
    else return dt_errorf(DT_ERR_INVALID, "--on-divergence '%s': expected stop, skip or rewind[:K[:SKIP]]", spec);
    for (int k = 0; p && k < 2; k++) {
        char *end;
        errno = 0;
        long long v = strtoll(p + 1, &end, 10);
        if (errno || end == p + 1 || v < (k == 0 ? 1 : 0) || v > 1000000000LL || (*end && *end != ':'))
            return dt_errorf(DT_ERR_INVALID, "--on-divergence '%s': %s must be a whole number%s", spec,
                             k == 0 ? "K (steps back)" : "SKIP (batches skipped)", k == 0 ? " >= 1" : " >= 0");
        if (k == 0) out->back = v;
        else out->skip = v;
        p = *end ? end : NULL;
    }
    if (p) return dt_errorf(DT_ERR_INVALID, "--on-divergence '%s': rewind takes at most K and SKIP", spec);
    return DT_OK;
}

dt_status tr_stop_init(tr_run *r, size_t state_bytes) {
    const dt_train_cfg *c = r->c;
    tr_stop *s = &r->stop;
    memset(s, 0, sizeof *s);
    s->rewind_to = -1;
    s->n_skips = c->n_skips;
    memcpy(s->skips, c->skips, (size_t)c->n_skips * sizeof c->skips[0]);
    s->z = c->diverge.z > 0 ? c->diverge.z : c->diverge.mode == DT_DIVERGE_STOP ? 0.0f : 6.0f;
    if (!(s->win = dt_calloc((size_t)c->diverge.window, sizeof(double)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    /* Until a checkpoint has been timed: its bytes at 200 MB/s, plus 0.2 s. */
    s->save_s = 0.2 + (double)state_bytes / 200e6;
    return DT_OK;
}

void tr_stop_free(tr_run *r) {
    dt_free(r->stop.win);
    r->stop.win = NULL;
}

int64_t tr_skip_at(const tr_run *r, int64_t step) {
    int64_t n = 0;
    for (int i = 0; i < r->stop.n_skips; i++)
        if (r->stop.skips[i].step == step) n += r->stop.skips[i].count;
    return n;
}

float tr_spike_scale(const tr_run *r, int64_t step) {
    int64_t batch = step; /* the global batch this step draws, skipped ones counted */
    for (int i = 0; i < r->stop.n_skips; i++)
        if (r->stop.skips[i].step <= step) batch += r->stop.skips[i].count;
    float f = 1.0f;
    for (int i = 0; i < r->c->n_inject; i++)
        if (r->c->inject[i].kind == DT_INJECT_SPIKE && r->c->inject[i].step == batch) f *= r->c->inject[i].factor;
    return f;
}

/* The deadline is near when what is left would not hold one more step, a
 * checkpoint and a margin (two steps, at least a second). */
static bool near(double deadline, double step_s, double save_s) {
    double margin = 2 * step_s > 1.0 ? 2 * step_s : 1.0;
    return deadline > 0 && dt_now() + step_s + save_s + margin >= deadline;
}

static bool deadline_near(const tr_run *r) { return near(r->c->deadline, r->stop.step_s, r->stop.save_s); }

int dt_train_stop_code(double deadline, double step_s, double save_s) {
    int sig = dt_train_stop_signal();
    if (sig >= 0) return sig + 2 < 256 ? sig + 2 : 2;
    return near(deadline, step_s, save_s) ? 1 : 0;
}

int dt_train_stop_reason(int code) { return code == 1 ? -1 : code - 2; }

void tr_stop_timed(tr_run *r, double step_s, const dt_ckpt_writer *w) {
    tr_stop *s = &r->stop;
    s->step_s = s->step_s > 0 ? 0.8 * s->step_s + 0.2 * step_s : step_s;
    if (s->step_s < step_s) s->step_s = step_s; /* a slow step counts at once */
    double p = w ? dt_ckpt_persist_seconds(w) + s->snap_s : 0;
    if (p > 0) s->save_s = p;
}

int tr_stop_code(const tr_run *r, bool deadline) {
    return dt_train_stop_code(deadline ? r->c->deadline : 0, r->stop.step_s, r->stop.save_s);
}

dt_status tr_vote(tr_run *r, double loss_d, bool grad_bad, tr_verdict *v) {
    int sig = dt_train_stop_signal();
    double x[5] = {loss_d, sig >= 0 ? 1.0 : 0.0, sig > 0 ? (double)sig : 0.0, deadline_near(r) ? 1.0 : 0.0,
                   grad_bad ? 1.0 : 0.0};
    dt_status st = r->n > 1 ? dt_allreduce_f64(r->world, x, 5) : DT_OK;
    if (st) return st;
    memset(v, 0, sizeof *v);
    v->loss = x[0];
    v->grad_bad = x[4] > 0;
    if (x[1] > 0) {
        /* The signal this rank got, else the one every requester got (the
         * launcher sends every rank the same). */
        long q = (long)x[1], sum = (long)x[2];
        v->stop = sig > 0 ? sig : sum % q == 0 ? (int)(sum / q) : 0;
    } else if (x[3] > 0) {
        v->stop = -1;
    }
    v->stopping = x[1] > 0 || x[3] > 0;
    return DT_OK;
}

bool tr_spike(tr_run *r, const tr_verdict *v, char *why, size_t n) {
    const tr_stop *s = &r->stop;
    if (!isfinite(v->loss) || v->grad_bad) {
        snprintf(why, n, "the %s became %s", isfinite(v->loss) ? "gradient" : "loss",
                 isnan(v->loss) || v->grad_bad ? "NaN or inf" : "inf");
        return true;
    }
    int need = r->c->diverge.window < 10 ? r->c->diverge.window : 10;
    if (s->z <= 0 || s->win_n < need) return false;
    double mean = 0, var = 0;
    for (int i = 0; i < s->win_n; i++) mean += s->win[i];
    mean /= s->win_n;
    for (int i = 0; i < s->win_n; i++) var += (s->win[i] - mean) * (s->win[i] - mean);
    double sd = sqrt(var / (s->win_n > 1 ? s->win_n - 1 : 1));
    if (v->loss <= mean + (double)s->z * sd || !(sd > 0 || v->loss > mean * 1.5)) return false;
    snprintf(why, n, "the loss %.6g is %.3g standard deviations above the mean %.6g of the last %d steps (--spike-z %g)",
             v->loss, sd > 0 ? (v->loss - mean) / sd : INFINITY, mean, s->win_n, (double)s->z);
    return true;
}

void tr_spike_push(tr_run *r, double loss) {
    tr_stop *s = &r->stop;
    int w = r->c->diverge.window;
    s->win[s->win_at] = loss;
    s->win_at = (s->win_at + 1) % w;
    if (s->win_n < w) s->win_n++;
}

dt_status tr_event(tr_run *r, const char *kind, int64_t step, int64_t to, int64_t batches, double loss, const char *why) {
    if (!r->lead) return DT_OK;
    dt_event_info e = {.kind = kind, .step = step, .to_step = to, .batches = batches, .loss = (float)loss, .why = why};
    return tr_report_event(r->c, &e);
}

/* One more skip or rewind, or the line that gives up. */
static dt_status recover(tr_run *r, int64_t step, const char *why) {
    const dt_train_cfg *c = r->c;
    if (++r->stop.recoveries <= c->diverge.max_rewinds) return DT_OK;
    return dt_errorf(DT_ERR_INVALID, "divergence at step %lld (%s) after %d skips and rewinds (--max-rewinds %d): giving up; "
                     "lower --lr, set --clip, or allow more with --max-rewinds", (long long)step, why,
                     r->stop.recoveries - 1, c->diverge.max_rewinds);
}

dt_status tr_skip_step(tr_run *r, int64_t step, double loss, const char *why) {
    dt_status st = recover(r, step, why);
    if (!st) st = dt_dp_discard(r->dp);
    if (st) return st;
    r->res->skipped_steps++;
    if (r->lead)
        dt_log(DT_LOG_WARN, "divergence at step %lld: %s; its update is dropped on every rank (skip %d of at most %d)",
               (long long)step, why, r->stop.recoveries, r->c->diverge.max_rewinds);
    return tr_event(r, "skip", step, 0, 0, loss, why);
}

dt_status tr_rewind(tr_run *r, int64_t step, double loss, const char *why) {
    const dt_train_cfg *c = r->c;
    tr_stop *s = &r->stop;
    dt_status st = recover(r, step, why);
    if (st) return st;
    if (s->n_skips == (int)(sizeof s->skips / sizeof s->skips[0]))
        return dt_errorf(DT_ERR_INVALID, "divergence at step %lld: no room for another skipped range", (long long)step);
    if ((st = dt_ckpt_flush(r->ck.w))) return st;
    /* Rank 0 picks the checkpoint; every rank loads the same one. */
    int64_t upto = step - c->diverge.back;
    char path[4096];
    double pick = 0;
    if (r->lead && upto >= 0 && dt_ckpt_find_latest_upto(c->ckpt_dir, upto, path, sizeof path) == DT_OK) {
        const char *base = strrchr(path, '/'); /* verified already; its name gives the step */
        long long found;
        if (sscanf(base ? base + 1 : path, "ckpt-%lld", &found) == 1) pick = (double)found + 1;
    }
    if (r->n > 1 && (st = dt_allreduce_f64(r->world, &pick, 1))) return st;
    if (pick <= 0)
        return dt_errorf(DT_ERR_INVALID, "divergence at step %lld (%s): no valid checkpoint of step %lld or earlier in %s to rewind "
                         "to; checkpoint more often (--ckpt-every) or rewind fewer steps (--on-divergence rewind:K)",
                         (long long)step, why, (long long)upto, c->ckpt_dir);
    int64_t to = (int64_t)pick - 1;
    dt_ckpt_dir_name(path, sizeof path, c->ckpt_dir, to);
    dt_ckpt_state cs;
    if ((st = tr_load_checkpoint(r, path, &cs))) return st;
    s->skips[s->n_skips++] = (dt_skip_range){step, c->diverge.skip};
    s->win_n = s->win_at = 0;
    s->rewind_to = to;
    r->res->rewinds++;
    memset(&r->win, 0, sizeof r->win);
    r->win.t0 = dt_now();
    if (r->lead)
        dt_log(DT_LOG_WARN, "divergence at step %lld: %s; rewinding to the checkpoint of step %lld and skipping %lld batches "
               "from step %lld on (rewind %d of at most %d)", (long long)step, why, (long long)to,
               (long long)c->diverge.skip, (long long)step, s->recoveries, c->diverge.max_rewinds);
    return tr_event(r, "rewind", step, to, c->diverge.skip, loss, why);
}

dt_status tr_stop_note(tr_run *r, int64_t step, int stop, double loss, bool ckpt) {
    dt_train_result *res = r->res;
    res->stopped_at = step;
    res->stop_signal = stop;
    res->stop_ckpt[0] = '\0';
    if (ckpt) dt_ckpt_dir_name(res->stop_ckpt, sizeof res->stop_ckpt, r->c->ckpt_dir, step);
    char why[64];
    if (stop > 0) snprintf(why, sizeof why, "signal %d (%s)", stop, strsignal(stop));
    else snprintf(why, sizeof why, "%s", stop < 0 ? "the time limit" : "a stop request");
    return tr_event(r, "stop", step, 0, 0, loss, why);
}

dt_status tr_stop_save(tr_run *r, int64_t step, const tr_verdict *v) {
    dt_status st = DT_OK;
    if (r->ck.w) {
        if (r->ck.last_step != step) st = tr_ckpt_save(r, step);
        if (!st) st = dt_ckpt_flush(r->ck.w);
        if (st) return st;
    }
    return tr_stop_note(r, step, v->stop, v->loss, r->ck.w != NULL);
}
