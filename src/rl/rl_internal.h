/* Private to src/rl: rollouts (rollout.c) and the learner (learner.c) that the
 * driver (a2c.c) runs on the actor and learner ranks. */
#ifndef DTRAIN_RL_INTERNAL_H
#define DTRAIN_RL_INTERNAL_H

#include "dtrain/comm.h"

#include <stdio.h>
#include "dtrain/optim.h"
#include "dtrain/rl.h"

/* An environment's dynamics (cartpole.c, acrobot.c); env.c steps n copies. */
typedef struct rl_env_kind {
    const char *name;
    int state_dim, obs_dim, n_actions, limit; /* limit: steps before truncation */
    void (*start)(double *s, dt_rng *r);       /* a start state */
    bool (*step)(double *s, int action, float *reward); /* true: terminal */
    void (*observe)(const double *s, float *obs);
} rl_env_kind;
extern const rl_env_kind rl_cartpole, rl_acrobot;

/* Inside n copies (env.c), for checkpoints: n x state_dim doubles, each
 * copy's steps in its episode and its random stream. */
typedef struct rl_env_state {
    int n, state_dim;
    double *s;
    int *steps;
    dt_rng *rng;
} rl_env_state;
void rl_env_expose(dt_env *e, rl_env_state *out);

/* T steps of E copies: obs (T+1) x E x D (the last row the bootstrap), the
 * rest T x E; the returns of the episodes that ended during it. */
typedef struct rl_traj {
    int T, E, D, A;
    float *obs, *rew, *logp;
    int32_t *act;
    uint8_t *done, *trunc;      /* the episode ended; it was cut at the step limit */
    double ret_sum;
    int ret_n;
} rl_traj;

dt_status rl_traj_alloc(rl_traj *t, int T, int E, int D, int A);
void rl_traj_free(rl_traj *t);

typedef struct rl_actor {
    dt_env *env;
    dt_policy *p;       /* borrowed: the actor's copy of the weights */
    dt_rng rng;
    float *cur, *logits, *value;
    double *ret;        /* per copy: the running episode's return */
    rl_traj traj;
} rl_actor;

/* E copies of env, seeded from (seed, rank); the rollout length T. */
dt_status rl_actor_create(rl_actor *a, const char *env, int E, int T, dt_policy *p, uint64_t seed, int rank);
void rl_actor_free(rl_actor *a);
/* One rollout into a->traj with the policy's current weights. */
dt_status rl_actor_rollout(rl_actor *a);

/* The learner's gradient of one rollout (V-trace targets, IMPALA's loss),
 * added into p's gradients; returns the loss. */
typedef struct rl_learn {
    dt_policy *p;
    float gamma, value_coef, entropy_coef, rho_bar, c_bar;
    float reward_scale; /* the rewards' factor in the targets (the environment's default resolved) */
    float *logits, *value, *lsm, *dlogits, *dvalue, *vs, *adv;     /* (T+1)E rows */
    float *col_lr, *col_d, *col_r, *col_v, *col_vs, *col_adv;      /* one copy's T steps */
} rl_learn;
dt_status rl_learn_create(rl_learn *l, dt_policy *p, int T, int E, int A);
void rl_learn_free(rl_learn *l);
dt_status rl_learn_grad(rl_learn *l, const rl_traj *t, double *loss);

/* c->reward_scale, or when 0 the environment's default (a2c.c, the table of
 * per-environment defaults). */
float rl_reward_scale(const dt_rl_cfg *c);

#define RL_TAG 0x7e00     /* rollout messages: RL_TAG + 0..RL_MSGS-1 */
#define RL_MSGS 7         /* messages per rollout */
#define RL_HDR 4          /* a rollout's header: return sum, episodes, the weights' version, a stop code */
#define RL_TAG_CTL (RL_TAG + 16) /* asynchronous: the version sent back (-1: stop) */
#define RL_TAG_W (RL_TAG + 17)   /* asynchronous: the weights sent back */
#define RL_TAG_BYE (RL_TAG + 18) /* asynchronous, at the end: how many actors were lost */

/* A run (a2c.c): the learner's and the actors' state. */
typedef struct rl_run {
    const dt_rl_cfg *c;
    dt_comm *w;
    int rank, n, K;
    dt_policy *p;
    rl_actor actor;
    rl_traj *in;       /* learner: one per actor */
    double *hdr;       /* learner: (K, RL_HDR) */
    rl_learn learn;
    dt_optim *opt;
    FILE *metrics;
    double t0, ret_sum, loss_sum;
    int ret_n, loss_n;
    int64_t steps, dropped;
    uint64_t lag_hist[8];  /* asynchronous: versions a rollout lagged (last bin: more) */
    int64_t start;         /* the update resumed after (0: none) */
    int stop_code;         /* a stop asked for (cfg.stop_poll or an actor's header), 0 none */
    float *wbuf;           /* synchronous: the weights and the stop code, broadcast (P + 1) */
    int64_t rollouts;      /* an actor's rollouts so far */
    int lost_seen;         /* asynchronous actor: the learner's farewell, actors lost */
    double roll_s;         /* the last one's seconds */
} rl_run;

/* A rollout's messages (its header of RL_HDR doubles first) to or from rank k
 * of w, posted non-blocking into q (RL_MSGS requests). */
dt_status rl_exchange(dt_comm *w, rl_traj *t, double *hdr, int k, bool send, dt_req *q);
/* The learner's metrics and evaluation lines after update u. */
dt_status rl_report(rl_run *r, int64_t u, dt_rl_result *res);
/* Update u's Adam step with the gradients summed over k rollouts. */
void rl_step(rl_run *r, int64_t u, int k);
/* Checkpoints (ckpt.c): update u into c->ckpt_dir; collective: every rank
 * writes its part (synchronous), else the learner alone (asynchronous). */
dt_status rl_ckpt_save(rl_run *r, int64_t u, bool collective);
/* The newest whole checkpoint under dir into path (*u its update, -1 none). */
dt_status rl_ckpt_find(const char *dir, char *path, size_t n, int64_t *u);
/* Whether cdir is a whole checkpoint (*u its update), or a line saying not. */
dt_status rl_ckpt_check(const char *cdir, int64_t *u);
/* This rank's part of the checkpoint cdir (the learner: *u its update). */
dt_status rl_ckpt_load(rl_run *r, const char *cdir, int64_t *u);
/* An actor's next rollout (the hook first). */
dt_status rl_act(rl_run *r);
/* The learner's stop request: its own (cfg.stop_poll) unless one came already. */
void rl_poll_stop(rl_run *r);

/* The asynchronous mode (impala.c). */
dt_status rl_learner_async(rl_run *r, dt_rl_result *res);
dt_status rl_actor_async(rl_run *r);

#endif
