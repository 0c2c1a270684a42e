/* `dtrain rl --async`: the IMPALA actor-learner (Espeholt et al. 2018). Actors
 * never wait for each other: each rolls out with the weights it has, sends
 * the rollout with their version, and receives the learner's newest weights
 * in reply. The learner takes rollouts in the order they arrive, one Adam step
 * each; V-trace corrects for the policy lag (behaviour log-probabilities come
 * with the rollout, the target is the learner's current policy). A rollout
 * more than max_lag versions behind is dropped (counted), as SSP bounds a
 * worker's staleness. The run stops after `updates` steps, or once a stop is
 * asked for (the learner's own, or an actor's in its rollout's header): every
 * actor gets version -1 in reply to its next rollout, and a stopped learner
 * checkpoints its state (the actors' episodes start anew when resumed). Not
 * bitwise repeatable (arrival order). Per rollout: its bytes to the learner,
 * P.4 bytes back. */
#include "rl_internal.h"

#include <string.h>
#include <time.h>

/* Has actor k's whole rollout arrived (its RL_MSGS requests done)? */
static dt_status arrived(dt_comm *w, dt_req *q, bool *yes) {
    *yes = false;
    for (int i = 0; i < RL_MSGS; i++) {
        int idx = -1;
        if (q[i].done) continue;
        dt_status st = dt_testany(w, &q[i], 1, &idx);
        if (st || idx < 0) return st;
    }
    *yes = true;
    return DT_OK;
}

static void nap(void) {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

typedef struct {
    dt_req *q;        /* (K, RL_MSGS) rollout receives */
    dt_req *out;      /* (K, 2) replies */
    double *ctl;      /* (K) version sent back */
    float *wbuf;      /* (K, P) weights being sent */
    bool *busy, *stopped;
    bool *lost;       /* (K) dropped: silent past the deadline, or its connection failed */
    double *seen;     /* (K) when its last rollout arrived */
} learner_io;

/* Drops actor k (as an ASP worker is dropped): its receives given up, the
 * run goes on with the others. */
static void drop(rl_run *r, learner_io *io, int k, int64_t u, const char *why, dt_rl_result *res) {
    dt_cancel(r->w, io->q + (size_t)RL_MSGS * k, RL_MSGS);
    io->lost[k] = io->stopped[k] = true;
    int left = 0;
    for (int j = 0; j < r->K; j++) left += !io->lost[j];
    size_t used = strlen(res->lost_desc);
    snprintf(res->lost_desc + used, sizeof res->lost_desc - used, "%srank %d at update %lld", res->lost_actors ? ", " : "", k + 1,
             (long long)u);
    res->lost_actors++;
    dt_log(DT_LOG_WARN, "rl: actor rank %d is lost (%s) at update %lld; going on with %d of %d actors", k + 1, why, (long long)u,
           left, r->K);
}

/* Whether actor k's rollout is in; a failed connection or a silence past the
 * deadline drops it (*gone). */
static dt_status poll_actor(rl_run *r, learner_io *io, int k, int64_t u, dt_rl_result *res, bool *yes, bool *gone) {
    *gone = false;
    dt_status st = arrived(r->w, io->q + (size_t)RL_MSGS * k, yes);
    char why[320];
    if (st) snprintf(why, sizeof why, "its connection failed: %s", dt_error_msg());
    else if (!*yes && r->c->timeout > 0 && dt_now() - io->seen[k] > r->c->timeout)
        snprintf(why, sizeof why, "no rollout for %.1f s", dt_now() - io->seen[k]);
    else return DT_OK;
    drop(r, io, k, u, why, res);
    *gone = true;
    *yes = false;
    return DT_OK;
}

/* Replies to actor k with version v (-1: stop) and the current weights, and
 * posts the receives of its next rollout unless it stops. */
static dt_status reply(rl_run *r, learner_io *io, int k, double v) {
    size_t P = dt_policy_n_params(r->p);
    dt_status st = io->busy[k] ? dt_waitall(r->w, io->out + 2 * k, 2, "rl: weights to an actor") : DT_OK;
    if (st) return st;
    io->ctl[k] = v;
    memcpy(io->wbuf + (size_t)k * P, dt_policy_params(r->p), P * sizeof(float));
    if ((st = dt_isend(r->w, &io->ctl[k], sizeof(double), k + 1, RL_TAG_CTL, &io->out[2 * k]))) return st;
    if ((st = dt_isend(r->w, io->wbuf + (size_t)k * P, P * sizeof(float), k + 1, RL_TAG_W, &io->out[2 * k + 1]))) return st;
    io->busy[k] = true;
    if (v < 0) {
        io->stopped[k] = true;
        return DT_OK;
    }
    return rl_exchange(r->w, &r->in[k], r->hdr + RL_HDR * k, k + 1, false, io->q + (size_t)RL_MSGS * k);
}

/* One arrived rollout of actor k: learn from it unless it lags too far. */
static dt_status take(rl_run *r, int k, int64_t *u, dt_rl_result *res) {
    int64_t lag = *u - (int64_t)r->hdr[RL_HDR * k + 2];
    r->lag_hist[lag < 7 ? lag : 7]++;
    r->ret_sum += r->hdr[RL_HDR * k];
    r->ret_n += (int)r->hdr[RL_HDR * k + 1];
    if (lag > r->c->max_lag) {
        r->dropped++;
        return DT_OK;
    }
    double loss;
    memset(dt_policy_grads(r->p), 0, dt_policy_n_params(r->p) * sizeof(float));
    dt_status st = rl_learn_grad(&r->learn, &r->in[k], &loss);
    if (st) return st;
    r->loss_sum += loss, r->loss_n++;
    r->steps += (int64_t)r->in[k].T * r->in[k].E;
    ++*u;
    dt_comm_set_step(r->w, *u);
    rl_step(r, *u, 1);
    if ((st = rl_report(r, *u, res))) return st;
    const dt_rl_cfg *c = r->c;
    bool due = c->ckpt_every > 0 && (*u % c->ckpt_every == 0 || *u == c->updates);
    return c->ckpt_dir && due ? rl_ckpt_save(r, *u, false) : DT_OK;
}

static dt_status serve(rl_run *r, learner_io *io, dt_rl_result *res) {
    int K = r->K;
    int64_t u = r->start;
    dt_status st = DT_OK;
    for (int k = 0; k < K && !st; k++) st = rl_exchange(r->w, &r->in[k], r->hdr + RL_HDR * k, k + 1, false, io->q + (size_t)RL_MSGS * k);
    double last = dt_now();
    for (int k = 0; k < K; k++) io->seen[k] = last;
    int live = K;
    while (!st && live > 0) {
        bool any = false;
        for (int k = 0; k < K && !st; k++) {
            bool yes = false, gone = false;
            if (io->stopped[k] || (st = poll_actor(r, io, k, u, res, &yes, &gone))) continue;
            live -= gone;
            if (!yes) continue;
            any = true;
            io->seen[k] = dt_now();
            if (!r->stop_code) r->stop_code = (int)r->hdr[RL_HDR * k + 3];
            rl_poll_stop(r);
            bool going = u < r->c->updates && !r->stop_code;
            if (going) st = take(r, k, &u, res);
            if (!st) st = reply(r, io, k, going ? (double)u : -1.0);
            live -= io->stopped[k];
        }
        if (any) last = dt_now();
        else if (r->c->timeout > 0 && dt_now() - last > r->c->timeout)
            return dt_errorf(DT_ERR_TIMEOUT, "rl: no rollout from any actor for %.1f s (update %lld)", dt_now() - last, (long long)u);
        else nap();
    }
    if (!st && res->lost_actors == K)
        return dt_errorf(DT_ERR_TIMEOUT, "rl: every actor is lost (%s); the learner cannot go on", res->lost_desc);
    for (int k = 0; k < K && !st; k++)
        if (io->busy[k] && !io->lost[k]) st = dt_waitall(r->w, io->out + 2 * k, 2, "rl: weights to an actor");
    /* The farewell: how many were lost (the others end without MPI_Finalize then). */
    double lost = res->lost_actors;
    for (int k = 0; k < K && !st; k++) {
        dt_req q;
        if (io->lost[k]) continue;
        st = dt_isend(r->w, &lost, sizeof lost, k + 1, RL_TAG_BYE, &q);
        if (!st) st = dt_waitall(r->w, &q, 1, "rl: the farewell to an actor");
    }
    if (st || !r->stop_code || u >= r->c->updates) return st;
    res->stopped_at = u;
    const dt_rl_cfg *c = r->c;
    bool saved = c->ckpt_every > 0 && u % c->ckpt_every == 0 && u > r->start;
    return c->ckpt_dir && !saved ? rl_ckpt_save(r, u, false) : DT_OK;
}

dt_status rl_learner_async(rl_run *r, dt_rl_result *res) {
    int K = r->K;
    size_t P = dt_policy_n_params(r->p);
    learner_io io = {0};
    io.q = dt_calloc((size_t)K * RL_MSGS, sizeof(dt_req));
    io.out = dt_calloc((size_t)K * 2, sizeof(dt_req));
    io.ctl = dt_calloc((size_t)K, sizeof(double));
    io.wbuf = dt_alloc_floats((size_t)K * P);
    io.busy = dt_calloc((size_t)K, sizeof(bool));
    io.stopped = dt_calloc((size_t)K, sizeof(bool));
    io.lost = dt_calloc((size_t)K, sizeof(bool));
    io.seen = dt_calloc((size_t)K, sizeof(double));
    bool ok = io.q && io.out && io.ctl && io.wbuf && io.busy && io.stopped && io.lost && io.seen;
    dt_status st = ok ? serve(r, &io, res) : dt_errorf(DT_ERR_NOMEM, "out of memory for the learner");
    /* MPI may still hold a lost actor's requests: their buffers stay. */
    if (!res->lost_actors) dt_free(io.q), dt_free(io.wbuf), dt_free(io.ctl);
    dt_free(io.out), dt_free(io.busy), dt_free(io.stopped), dt_free(io.lost), dt_free(io.seen);
    return st;
}

dt_status rl_actor_async(rl_run *r) {
    size_t P = dt_policy_n_params(r->p);
    double version = (double)r->start, ctl = 0; /* resumed: the learner's weights came with the resume */
    dt_req q[RL_MSGS + 2];
    for (;;) {
        dt_status st = rl_act(r);
        rl_poll_stop(r);
        double hdr[RL_HDR] = {r->actor.traj.ret_sum, (double)r->actor.traj.ret_n, version, (double)r->stop_code};
        if (!st) st = rl_exchange(r->w, &r->actor.traj, hdr, 0, true, q);
        if (!st) st = dt_irecv(r->w, &ctl, sizeof ctl, 0, RL_TAG_CTL, &q[RL_MSGS]);
        /* the actor is idle until the reply: the weights land in its policy */
        if (!st) st = dt_irecv(r->w, dt_policy_params(r->p), P * sizeof(float), 0, RL_TAG_W, &q[RL_MSGS + 1]);
        if (!st) st = dt_waitall(r->w, q, RL_MSGS + 2, "rl: the learner's reply");
        if (st) return st;
        if (ctl < 0) { /* the farewell says whether actors were lost */
            double lost = 0;
            if (!(st = dt_irecv(r->w, &lost, sizeof lost, 0, RL_TAG_BYE, &q[0])))
                st = dt_waitall(r->w, &q[0], 1, "rl: the learner's farewell");
            r->lost_seen = (int)lost;
            return st;
        }
        version = ctl;
    }
}
