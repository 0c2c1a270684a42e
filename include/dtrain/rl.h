/* dtrain reinforcement learning, the lower floor: environments (deterministic
 * from a seed, vectorised) and V-trace, IMPALA's off-policy targets
 * (Espeholt et al., 2018). The actor-learner driver (`dtrain rl`) is built on
 * these in a later step (issue 14). */
#ifndef DTRAIN_RL_H
#define DTRAIN_RL_H

#include "dtrain/comm.h"
#include "dtrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- environments ------------------------------------------------------------
 * n copies of one environment stepped together. Env i draws its start states
 * from its own stream (seed, i), so its episodes do not depend on n. A copy
 * that ends (terminal or truncated) starts its next episode within the same
 * step: the observation returned is the new episode's first. */
typedef struct dt_env dt_env;

/* name: "cartpole" (Gym's CartPole-v1: its constants, Euler steps of 0.02 s,
 * reward 1 per step, the episode ends when |x| > 2.4 or |theta| > 12 degrees,
 * and is truncated at 500 steps) or "acrobot" (Gym's Acrobot-v1: book
 * dynamics, RK4 steps of 0.2 s, reward -1 per step until the tip swings above
 * the bar, truncated at 500 steps). */
dt_status dt_env_create(dt_env **out, const char *name, int n, uint64_t seed);
void dt_env_destroy(dt_env *e); /* NULL ok */
int dt_env_n(const dt_env *e);
int dt_env_obs_dim(const dt_env *e);
int dt_env_n_actions(const dt_env *e);
/* Starts every copy's first episode; obs: n x obs_dim. */
void dt_env_reset(dt_env *e, float *obs);
/* One step of every copy with actions[i] in [0, n_actions): obs (n x
 * obs_dim) the next observations, reward[i], done[i] 1 when the episode
 * ended (terminal or truncated), truncated[i] 1 when it was cut at the step
 * limit (not a terminal state: a learner bootstraps there). Returns
 * DT_ERR_INVALID for an action out of range (nothing stepped). */
dt_status dt_env_step(dt_env *e, const int *actions, float *obs, float *reward, uint8_t *done, uint8_t *truncated);
/* For tests: the state of copy i (cartpole: x, x_dot, theta, theta_dot;
 * acrobot: theta1, theta2 and their speeds; in double), read or set, and its
 * steps so far in the episode. */
void dt_env_get_state(const dt_env *e, int i, double *s);
void dt_env_set_state(dt_env *e, int i, const double *s);
int dt_env_episode_steps(const dt_env *e, int i);

/* ---- V-trace -----------------------------------------------------------------
 * One trajectory of T steps: log_rho[s] = log pi(a_s|x_s) - log mu(a_s|x_s)
 * (target over behaviour policy), discount[s] = gamma, or 0 where x_{s+1} is
 * terminal, reward[s], value[s] = V(x_s), bootstrap = V(x_T). With
 * rho_s = min(rho_bar, e^log_rho[s]), c_s = min(c_bar, e^log_rho[s]):
 *   vs[s] = V(x_s) + rho_s (r_s + discount_s V(x_{s+1}) - V(x_s))
 *           + discount_s c_s (vs[s+1] - V(x_{s+1})),   vs[T] = bootstrap
 *   pg_adv[s] = rho_s (r_s + discount_s vs[s+1] - V(x_s))
 * computed backwards in double. Cost O(T). */
void dt_vtrace(int T, const float *log_rho, const float *discount, const float *reward, const float *value,
               float bootstrap, float rho_bar, float c_bar, float *vs, float *pg_adv);

/* ---- the actor-critic network and its loss (policy.c) --------------------------
 * obs (D) -> tanh(H) -> tanh(H) -> A policy logits and a value; batches of up to
 * max_batch rows. Forward keeps what backward needs (obs is borrowed until
 * then); backward adds the gradients of its last forward into the grads arena
 * (the caller zeroes it). */
typedef struct dt_policy dt_policy;
dt_status dt_policy_create(dt_policy **out, int obs_dim, int n_actions, int hidden, int max_batch, uint64_t seed);
void dt_policy_destroy(dt_policy *p); /* NULL ok */
size_t dt_policy_n_params(const dt_policy *p);
float *dt_policy_params(dt_policy *p);
float *dt_policy_grads(dt_policy *p);
dt_status dt_policy_forward(dt_policy *p, const float *obs, int N, float *logits, float *value);
void dt_policy_backward(dt_policy *p, const float *dlogits, const float *dvalue);
/* out = log softmax of each row of logits (N x A), in double inside. */
void dt_log_softmax(const float *logits, int N, int A, float *out);
/* The mean over N samples of -adv log pi(a) + value_coef/2 (V - vs)^2 -
 * entropy_coef H(pi); writes its gradient in the logits (N x A) and the
 * values (N). */
double dt_ac_loss(const float *logits, const float *value, const int *actions, const float *adv, const float *vs, int N, int A,
                  float value_coef, float entropy_coef, float *dlogits, float *dvalue);

/* ---- the actor-learner run (a2c.c) ---------------------------------------------
 * Synchronous mode: rank 0 learns, the other ranks act (alone, rank 0 does
 * both); collective over world. Writes out/metrics.jsonl (update lines with
 * train_return, evaluation lines with eval_return) and out/policy.safetensors
 * on rank 0 when out is set. */
typedef struct dt_rl_cfg {
    const char *env;          /* "cartpole" */
    int envs, unroll, hidden; /* copies per actor [16], steps per rollout [16], width [64] */
    int64_t updates;          /* learner updates [600] */
    float lr, gamma, value_coef, entropy_coef, rho_bar, c_bar;
    /* The rewards' factor in the learner's targets and advantages (the value
     * head learns returns in these units; the returns reported are not
     * scaled); 0 [default]: the environment's (cartpole 1, acrobot 0.01:
     * Acrobot's returns of -60 to -500 would otherwise need values near -100,
     * which the shared tanh layers reach only by saturating, and the policy
     * then collapses to one torque). */
    float reward_scale;
    uint64_t seed;
    int log_every, eval_every, eval_episodes;
    const char *out;          /* NULL: no files */
    double timeout;           /* every wait's deadline, seconds */
    bool quiet;
    bool async;               /* IMPALA: the learner takes rollouts as they come */
    int max_lag;              /* async: a rollout more versions behind is dropped [4] */
    /* Checkpoints (a directory the ranks share; NULL: none): every ckpt_every
     * updates (0: only when stopped), the newest ckpt_keep kept [3];
     * resume: "auto" (the newest whole one in ckpt_dir) or a checkpoint's
     * directory, NULL: start afresh. */
    const char *ckpt_dir, *resume;
    int64_t ckpt_every;
    int ckpt_keep;
    /* Any rank: a stop code (1..255) when this process was asked to stop, 0
     * otherwise (NULL: never). The run then stops after one update on every
     * rank, with a checkpoint of it when ckpt_dir is set. */
    int (*stop_poll)(void *ctx);
    void *stop_ctx;
    /* An actor, before each of its rollouts (1, 2, ...; prev_s: how long the
     * last one took): fault injection (NULL: none). */
    void (*rollout_hook)(void *ctx, int rank, int64_t rollout, double prev_s);
    void *hook_ctx;
} dt_rl_cfg;
void dt_rl_cfg_default(dt_rl_cfg *c);
typedef struct dt_rl_result {
    double eval_return, train_return, seconds, env_steps_per_s;
    int64_t env_steps;
    int64_t stopped_at;       /* the update the run stopped after, -1: it ran to its end */
    int stop_code;            /* the stop's code (the first asked for) */
    char stop_ckpt[4096];     /* its checkpoint, "" none */
    int64_t resumed_from;     /* -1: started afresh */
    /* --async: actors dropped (silent past the deadline, or their connection
     * failed) and which (the learner); every rank still there knows how many. */
    int lost_actors;
    char lost_desc[1024];
} dt_rl_result;
dt_status dt_rl_run(const dt_rl_cfg *c, dt_comm *world, dt_rl_result *res);

#ifdef __cplusplus
}
#endif
#endif
