/* `dtrain rl`, synchronous mode (A2C with V-trace targets): rank 0 is the
 * learner, the others actors (alone, rank 0 does both). Each update: the
 * learner's weights go to every actor (one broadcast), every actor runs its E
 * copies for T steps and sends the rollout to the learner, which takes them
 * in rank order (so a layout's result is bitwise repeatable), sums their
 * gradients (IMPALA's loss, src/rl/learner.c), averages and takes an Adam
 * step (learning rate decaying linearly to 0 over the run). Per update: P.4 bytes to each actor, (T+1)E.D.4 + T.E.13 bytes from
 * each. Evaluation: the greedy policy on M fresh copies, each played until
 * its first episode ends, mean return. */
#include "rl_internal.h"

#include "dtrain/ckpt.h"
#include "dtrain/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* The per-environment defaults, in one place: the settings that dt_rl_cfg
 * leaves at 0 to mean "the environment's". Acrobot: reward -1 per step over
 * episodes of 60-500 steps gives values of -50 to -100 at gamma 0.99; a value
 * head that must reach them through the shared tanh layers saturates them, the
 * policy collapses to one torque and never reaches the goal again (greedy and
 * sampled return -500). Scaled by 0.01 (= 1 - gamma: values in [-1, 0]) it
 * learns with CartPole's other settings (docs/BENCHMARKS.md). */
static const struct {
    const char *env;
    float reward_scale;
} env_defaults[] = {{"cartpole", 1.0f}, {"acrobot", 0.01f}};

float rl_reward_scale(const dt_rl_cfg *c) {
    if (c->reward_scale > 0) return c->reward_scale;
    for (size_t i = 0; i < sizeof env_defaults / sizeof env_defaults[0]; i++)
        if (c->env && strcmp(c->env, env_defaults[i].env) == 0) return env_defaults[i].reward_scale;
    return 1.0f;
}

void dt_rl_cfg_default(dt_rl_cfg *c) {
    *c = (dt_rl_cfg){.env = "cartpole", .envs = 16, .unroll = 16, .hidden = 64, .updates = 600, .lr = 2e-3f,
                     .gamma = 0.99f, .value_coef = 0.5f, .entropy_coef = 0.01f, .rho_bar = 1.0f, .c_bar = 1.0f,
                     .seed = 1, .log_every = 20, .eval_every = 100, .eval_episodes = 20, .timeout = 60, .max_lag = 4,
                     .ckpt_keep = 3};
}

/* The greedy policy on `episodes` fresh copies, each until its first episode ends. */
static dt_status evaluate(dt_policy *p, const dt_rl_cfg *c, float *mean) {
    dt_env *e;
    int M = c->eval_episodes;
    dt_status st = dt_env_create(&e, c->env, M, c->seed + 0x5eed);
    if (st) return st;
    int D = dt_env_obs_dim(e), A = dt_env_n_actions(e);
    float *obs = dt_alloc_floats((size_t)M * D), *z = dt_alloc_floats((size_t)M * A), *v = dt_alloc_floats((size_t)M);
    float *r = dt_alloc_floats((size_t)M);
    int *act = dt_calloc((size_t)M, sizeof(int));
    uint8_t *done = dt_calloc((size_t)M, 1), *tr = dt_calloc((size_t)M, 1), *over = dt_calloc((size_t)M, 1);
    double *ret = dt_calloc((size_t)M, sizeof(double));
    if (!obs || !z || !v || !r || !act || !done || !tr || !over || !ret) st = dt_errorf(DT_ERR_NOMEM, "out of memory for evaluation");
    if (!st) dt_env_reset(e, obs);
    for (int left = M; !st && left > 0;) {
        if ((st = dt_policy_forward(p, obs, M, z, v))) break;
        for (int i = 0; i < M; i++) {
            act[i] = 0;
            for (int j = 1; j < A; j++) act[i] = z[(size_t)i * A + j] > z[(size_t)i * A + act[i]] ? j : act[i];
        }
        if ((st = dt_env_step(e, act, obs, r, done, tr))) break;
        for (int i = 0; i < M; i++) {
            if (over[i]) continue;
            ret[i] += r[i];
            if (done[i]) over[i] = 1, left--;
        }
    }
    double s = 0;
    for (int i = 0; i < M && !st; i++) s += ret[i];
    *mean = (float)(s / M);
    dt_free(obs), dt_free(z), dt_free(v), dt_free(r), dt_free(act), dt_free(done), dt_free(tr), dt_free(over), dt_free(ret);
    dt_env_destroy(e);
    return st;
}

/* A rollout's messages to or from the learner (tags RL_TAG + 0..6). */
dt_status rl_exchange(dt_comm *w, rl_traj *t, double *hdr, int k, bool send, dt_req *q) {
    size_t te = (size_t)t->T * t->E, ob = (te + (size_t)t->E) * t->D;
    void *bufs[RL_MSGS] = {hdr, t->obs, t->act, t->rew, t->logp, t->done, t->trunc};
    size_t bytes[RL_MSGS] = {RL_HDR * sizeof(double), ob * sizeof(float), te * sizeof(int32_t), te * sizeof(float), te * sizeof(float),
                             te, te};
    dt_status st = DT_OK;
    for (int i = 0; i < RL_MSGS && !st; i++)
        st = send ? dt_isend(w, bufs[i], bytes[i], k, RL_TAG + i, &q[i]) : dt_irecv(w, bufs[i], bytes[i], k, RL_TAG + i, &q[i]);
    return st;
}


static void put_line(rl_run *r, json_t *o) {
    if (r->metrics) {
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
        if (s) fprintf(r->metrics, "%s\n", s), fflush(r->metrics);
        free(s);
    }
    json_decref(o);
}

dt_status rl_act(rl_run *r) {
    r->rollouts++;
    if (r->c->rollout_hook) r->c->rollout_hook(r->c->hook_ctx, r->rank, r->rollouts, r->roll_s);
    double t = dt_now();
    dt_status st = rl_actor_rollout(&r->actor);
    r->roll_s = dt_now() - t;
    return st;
}

void rl_poll_stop(rl_run *r) {
    if (!r->stop_code && r->c->stop_poll) r->stop_code = r->c->stop_poll(r->c->stop_ctx);
}

/* The learner's weights, with the stop code after them, to every actor (one
 * broadcast); *stop: the learner said stop (nothing more of this update). */
static dt_status share_weights(rl_run *r, bool *stop) {
    size_t P = dt_policy_n_params(r->p);
    *stop = false;
    if (r->n == 1) return DT_OK;
    if (r->rank == 0) {
        memcpy(r->wbuf, dt_policy_params(r->p), P * sizeof(float));
        r->wbuf[P] = (float)r->stop_code;
    }
    dt_status st = dt_bcast(r->w, r->wbuf, (P + 1) * sizeof(float), 0, DT_ALGO_AUTO);
    if (st) return st;
    if (r->rank > 0) memcpy(dt_policy_params(r->p), r->wbuf, P * sizeof(float));
    *stop = r->wbuf[P] > 0;
    if (*stop) r->stop_code = (int)r->wbuf[P];
    return DT_OK;
}

/* One update: weights out, rollouts in, one Adam step on the learner. */
static dt_status update(rl_run *r, int64_t u, bool *stop) {
    size_t P = dt_policy_n_params(r->p);
    dt_status st = share_weights(r, stop);
    if (st || *stop) return st;
    dt_req q[RL_MSGS * 64];
    if (!st && (r->rank > 0 || r->n == 1)) st = rl_act(r);
    if (!st && r->rank > 0) {
        rl_poll_stop(r);
        double hdr[RL_HDR] = {r->actor.traj.ret_sum, (double)r->actor.traj.ret_n, 0, (double)r->stop_code};
        st = rl_exchange(r->w, &r->actor.traj, hdr, 0, true, q);
        return st ? st : dt_waitall(r->w, q, RL_MSGS, "rl: a rollout to the learner");
    }
    for (int k = 0; k < r->K && r->n > 1 && !st; k++) st = rl_exchange(r->w, &r->in[k], r->hdr + RL_HDR * k, k + 1, false, q + RL_MSGS * k);
    if (!st && r->n > 1) st = dt_waitall(r->w, q, RL_MSGS * r->K, "rl: rollouts from the actors");
    float *g = dt_policy_grads(r->p);
    memset(g, 0, P * sizeof(float));
    for (int k = 0; k < r->K && !st; k++) {
        const rl_traj *t = r->n > 1 ? &r->in[k] : &r->actor.traj;
        double loss;
        st = rl_learn_grad(&r->learn, t, &loss);
        r->loss_sum += loss, r->loss_n++;
        r->ret_sum += r->n > 1 ? r->hdr[RL_HDR * k] : t->ret_sum;
        r->ret_n += (int)(r->n > 1 ? r->hdr[RL_HDR * k + 1] : t->ret_n);
        r->steps += (int64_t)t->T * t->E;
        if (!r->stop_code && r->n > 1) r->stop_code = (int)r->hdr[RL_HDR * k + 3]; /* an actor's request */
    }
    rl_poll_stop(r);
    if (!st) rl_step(r, u, r->K);
    return st;
}

void rl_step(rl_run *r, int64_t u, int k) {
    size_t P = dt_policy_n_params(r->p);
    float *g = dt_policy_grads(r->p);
    for (size_t i = 0; i < P; i++) g[i] /= (float)k;
    /* the learning rate decays linearly to 0 over the run (as in A2C and PPO) */
    float lr = r->c->lr * (1.0f - (float)(u - 1) / (float)r->c->updates);
    dt_optim_begin_step(r->opt);
    dt_optim_update(r->opt, dt_policy_params(r->p), g, 0, P, lr, 0.0f);
}

/* The learner's log and evaluation lines. */
dt_status rl_report(rl_run *r, int64_t u, dt_rl_result *res) {
    const dt_rl_cfg *c = r->c;
    double now = dt_now() - r->t0;
    if (u % c->log_every == 0 || u == c->updates) {
        double tr = r->ret_n ? r->ret_sum / r->ret_n : -1;
        if (r->ret_n) res->train_return = tr;
        put_line(r, json_pack("{s:I,s:I,s:f,s:f,s:i,s:f,s:f}", "update", (json_int_t)u, "env_steps", (json_int_t)r->steps, "loss",
                              r->loss_n ? r->loss_sum / r->loss_n : 0.0, "train_return", tr, "episodes", r->ret_n, "steps_per_s",
                              (double)r->steps / (now > 1e-9 ? now : 1e-9), "time_s", now));
        if (!c->quiet)
            dt_log(DT_LOG_INFO, "update %lld/%lld: %lld env steps, train return %.1f (%d episodes), loss %.4f", (long long)u,
                   (long long)c->updates, (long long)r->steps, tr, r->ret_n, r->loss_n ? r->loss_sum / r->loss_n : 0.0);
        r->ret_sum = r->loss_sum = 0;
        r->ret_n = r->loss_n = 0;
    }
    if ((c->eval_every > 0 && u % c->eval_every == 0) || u == c->updates) {
        float m;
        dt_status st = evaluate(r->p, c, &m);
        if (st) return st;
        res->eval_return = m;
        put_line(r, json_pack("{s:I,s:I,s:f,s:i,s:f}", "update", (json_int_t)u, "env_steps", (json_int_t)r->steps, "eval_return",
                              (double)m, "eval_episodes", c->eval_episodes, "time_s", dt_now() - r->t0));
        if (!c->quiet) dt_log(DT_LOG_INFO, "update %lld: eval return %.1f over %d episodes", (long long)u, m, c->eval_episodes);
    }
    return DT_OK;
}

/* PyTorch names for nn.Sequential(Linear(D,H), Tanh, Linear(H,H), Tanh) as
 * `body` and Linear(H, A+1) as `head` (the last output is the value). */
static dt_status save_weights(rl_run *r, const char *path, int D, int A) {
    dt_st_writer *w;
    dt_status st = dt_st_writer_create(&w);
    if (st) return st;
    int H = r->c->hidden;
    const float *p = dt_policy_params(r->p);
    int64_t s1[2] = {H, D}, b[1] = {H}, s2[2] = {H, H}, sh[2] = {A + 1, H}, bh[1] = {A + 1};
    size_t o = 0;
    const struct { const char *name; int nd; int64_t *shape; size_t n; } t[6] = {
        {"body.0.weight", 2, s1, (size_t)H * D}, {"body.0.bias", 1, b, (size_t)H}, {"body.2.weight", 2, s2, (size_t)H * H},
        {"body.2.bias", 1, b, (size_t)H}, {"head.weight", 2, sh, (size_t)(A + 1) * H}, {"head.bias", 1, bh, (size_t)A + 1}};
    for (int i = 0; i < 6 && !st; i++, o += t[i - 1].n) st = dt_st_writer_add(w, t[i].name, DT_F32, t[i].nd, t[i].shape, p + o);
    if (!st) st = dt_st_writer_meta(w, "env", r->c->env);
    float rs = rl_reward_scale(r->c);
    char rss[32];
    snprintf(rss, sizeof rss, "%g", (double)rs);
    if (!st && rs != 1.0f) st = dt_st_writer_meta(w, "reward_scale", rss); /* the value head's units */
    if (!st) st = dt_st_writer_write(w, path);
    dt_st_writer_destroy(w);
    return st;
}

static dt_status setup(rl_run *r, int *D, int *A) {
    const dt_rl_cfg *c = r->c;
    r->K = r->n > 1 ? r->n - 1 : 1;
    if (r->n > 65) return dt_errorf(DT_ERR_INVALID, "rl: %d ranks; at most 64 actors and the learner", r->n);
    if (c->envs < 1 || c->unroll < 1 || c->hidden < 1 || c->updates < 1 || c->eval_episodes < 1)
        return dt_errorf(DT_ERR_INVALID, "rl: --envs, --unroll, --hidden, --updates and --eval-episodes must be >= 1");
    dt_env *probe;
    dt_status st = dt_env_create(&probe, c->env, 1, 0);
    if (st) return st;
    *D = dt_env_obs_dim(probe), *A = dt_env_n_actions(probe);
    dt_env_destroy(probe);
    int rows = (c->unroll + 1) * c->envs;
    if ((st = dt_policy_create(&r->p, *D, *A, c->hidden, rows > c->eval_episodes ? rows : c->eval_episodes, c->seed))) return st;
    if ((r->rank > 0 || r->n == 1) && (st = rl_actor_create(&r->actor, c->env, c->envs, c->unroll, r->p, c->seed, r->rank)))
        return st;
    if (r->rank > 0) return DT_OK;
    if (!(r->in = dt_calloc((size_t)r->K, sizeof(rl_traj))) || !(r->hdr = dt_calloc((size_t)r->K * RL_HDR, sizeof(double))))
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int k = 0; k < r->K && r->n > 1 && !st; k++) st = rl_traj_alloc(&r->in[k], c->unroll, c->envs, *D, *A);
    if (!st) st = rl_learn_create(&r->learn, r->p, c->unroll, c->envs, *A);
    r->learn.gamma = c->gamma, r->learn.value_coef = c->value_coef, r->learn.entropy_coef = c->entropy_coef;
    r->learn.rho_bar = c->rho_bar, r->learn.c_bar = c->c_bar, r->learn.reward_scale = rl_reward_scale(c);
    dt_optim_cfg oc;
    dt_optim_cfg_default(&oc, DT_OPTIM_ADAMW);
    oc.weight_decay = 0;
    if (!st) st = dt_optim_create(&r->opt, &oc, dt_policy_n_params(r->p));
    return st;
}

/* rank 0's metrics.jsonl: continued by a resumed run. */
static dt_status open_metrics(rl_run *r) {
    const dt_rl_cfg *c = r->c;
    if (r->rank != 0 || !c->out) return DT_OK;
    char path[4200];
    if (mkdir(c->out, 0755) != 0 && errno != EEXIST) return dt_errorf(DT_ERR_IO, "cannot create --out %s: %s", c->out, strerror(errno));
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->out);
    if (!(r->metrics = fopen(path, r->start > 0 ? "a" : "w"))) return dt_errorf(DT_ERR_IO, "cannot write %s", path);
    return DT_OK;
}

/* --resume: rank 0 picks the checkpoint (auto: the newest whole one), every
 * rank loads its part of it. */
static dt_status resume(rl_run *r, dt_rl_result *res) {
    const dt_rl_cfg *c = r->c;
    char cdir[4200] = "";
    double pick = -1;
    bool autop = strcmp(c->resume, "auto") == 0;
    dt_status st = DT_OK;
    if (r->rank == 0) {
        int64_t u = -1;
        st = autop ? rl_ckpt_find(c->ckpt_dir, cdir, sizeof cdir, &u) : rl_ckpt_check(c->resume, &u);
        pick = st ? -2 : autop ? (double)u : 0; /* -2: rank 0 refused it, -1: none */
        if (!st && autop && u < 0 && !c->quiet) dt_log(DT_LOG_INFO, "rl: no checkpoint in %s: starting afresh", c->ckpt_dir);
    }
    dt_status cs = r->n > 1 ? dt_bcast(r->w, &pick, sizeof pick, 0, DT_ALGO_AUTO) : DT_OK;
    if (st || cs) return st ? st : cs;
    if (pick < -1.5) return dt_errorf(DT_ERR_INVALID, "%s", ""); /* rank 0 says why */
    if (pick < 0) return DT_OK;
    if (autop) dt_ckpt_dir_name(cdir, sizeof cdir, c->ckpt_dir, (int64_t)pick);
    else snprintf(cdir, sizeof cdir, "%s", c->resume);
    int64_t u = 0;
    st = rl_ckpt_load(r, cdir, &u);
    double ok[2] = {st ? 1.0 : 0.0, r->rank == 0 ? (double)u : 0.0};
    cs = r->n > 1 ? dt_allreduce_f64(r->w, ok, 2) : DT_OK;
    if (st || cs) return st ? st : cs;
    /* The rank that failed says why; the others go quietly (an empty line). */
    if (ok[0] > 0) return dt_errorf(DT_ERR_IO, "%s", "");
    r->start = r->rollouts = (int64_t)ok[1];
    res->resumed_from = r->start;
    /* Asynchronous actors have no part: they start from the learner's weights. */
    size_t P = dt_policy_n_params(r->p);
    if (c->async && r->n > 1 && (st = dt_bcast(r->w, dt_policy_params(r->p), P * sizeof(float), 0, DT_ALGO_AUTO))) return st;
    if (r->rank == 0 && !c->quiet) dt_log(DT_LOG_INFO, "rl: resuming from %s (update %lld)", cdir, (long long)r->start);
    return DT_OK;
}

/* The synchronous updates; *stopped: the update every rank stopped after. */
static dt_status run_sync(rl_run *r, dt_rl_result *res, int64_t *stopped) {
    const dt_rl_cfg *c = r->c;
    dt_status st = DT_OK;
    int64_t saved = r->start;
    for (int64_t u = r->start + 1; u <= c->updates && !st; u++) {
        dt_comm_set_step(r->w, u);
        bool stop = false;
        if ((st = update(r, u, &stop))) break;
        if (stop) { /* the learner said so in this update's broadcast */
            *stopped = u - 1;
            break;
        }
        if (r->rank == 0 && (st = rl_report(r, u, res))) break;
        if (c->ckpt_dir && c->ckpt_every > 0 && (u % c->ckpt_every == 0 || u == c->updates)) {
            st = rl_ckpt_save(r, u, true);
            saved = u;
        }
        if (r->n == 1 && r->stop_code && u < c->updates) *stopped = u;
        if (*stopped >= 0) break;
    }
    if (!st && *stopped >= 0 && c->ckpt_dir && saved != *stopped) st = rl_ckpt_save(r, *stopped, true);
    return st;
}

static void teardown(rl_run *r) {
    for (int k = 0; r->in && k < r->K; k++) rl_traj_free(&r->in[k]);
    dt_free(r->in);
    dt_free(r->hdr);
    dt_free(r->wbuf);
    if (r->rank == 0) rl_learn_free(&r->learn);
    if (r->rank > 0 || r->n == 1) rl_actor_free(&r->actor);
    dt_optim_destroy(r->opt);
    dt_policy_destroy(r->p);
    if (r->metrics) fclose(r->metrics);
}

dt_status dt_rl_run(const dt_rl_cfg *c, dt_comm *world, dt_rl_result *res) {
    rl_run r = {.c = c, .w = world, .rank = dt_comm_rank(world), .n = dt_comm_size(world)};
    memset(res, 0, sizeof *res);
    res->eval_return = res->train_return = -1;
    dt_comm_set_timeout(world, c->timeout);
    res->stopped_at = res->resumed_from = -1;
    int D = 0, A = 0;
    dt_status st = setup(&r, &D, &A);
    if (!st && r.n > 1 && !(r.wbuf = dt_alloc_floats(dt_policy_n_params(r.p) + 1))) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (!st && c->resume) st = resume(&r, res);
    if (!st) st = open_metrics(&r);
    if (!st && r.rank == 0 && !c->quiet)
        dt_log(DT_LOG_INFO, "rl: %s, %s with V-trace targets: %s%d actor%s x %d copies, unroll %d, %zu parameters, reward scale %g",
               c->env, c->async && r.n > 1 ? "asynchronous (IMPALA)" : "synchronous A2C", r.n > 1 ? "" : "one process, ", r.K,
               r.K == 1 ? "" : "s", c->envs, c->unroll, dt_policy_n_params(r.p), (double)rl_reward_scale(c));
    r.t0 = dt_now();
    int64_t steps0 = r.steps;
    if (!st && c->async && r.n > 1) st = r.rank == 0 ? rl_learner_async(&r, res) : rl_actor_async(&r);
    else if (!st) st = run_sync(&r, res, &res->stopped_at);
    if (!st && r.rank > 0) res->lost_actors = r.lost_seen;
    if (!st && r.rank == 0 && r.start >= c->updates) { /* resumed at its end: still evaluated */
        float m;
        if (!(st = evaluate(r.p, c, &m))) res->eval_return = m;
    }
    res->seconds = dt_now() - r.t0;
    res->env_steps = r.steps;
    res->env_steps_per_s = (double)(r.steps - steps0) / (res->seconds > 1e-9 ? res->seconds : 1e-9);
    if (!st && res->stopped_at >= 0) {
        res->stop_code = r.stop_code;
        if (c->ckpt_dir) dt_ckpt_dir_name(res->stop_ckpt, sizeof res->stop_ckpt, c->ckpt_dir, res->stopped_at);
        put_line(&r, json_pack("{s:b,s:I}", "stopped", 1, "update", (json_int_t)res->stopped_at));
    } else if (!st && r.rank == 0 && c->out) {
        char path[4200];
        snprintf(path, sizeof path, "%s/policy.safetensors", c->out);
        st = save_weights(&r, path, D, A);
        json_t *lags = json_array();
        for (int i = 0; i < 8; i++) json_array_append_new(lags, json_integer((json_int_t)r.lag_hist[i]));
        put_line(&r, json_pack("{s:I,s:f,s:f,s:f,s:I,s:o,s:s}", "env_steps", (json_int_t)r.steps, "eval_return", res->eval_return,
                               "seconds", res->seconds, "env_steps_per_s", res->env_steps_per_s, "dropped", (json_int_t)r.dropped,
                               "lag_hist", lags, "lost_actors", res->lost_desc));
    }
    teardown(&r);
    return st;
}
