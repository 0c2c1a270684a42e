/* An actor's rollout: E environment copies stepped T times with the current
 * policy (actions sampled from its softmax with the actor's own stream), and
 * what the learner needs of them: observations (T+1 rows of E, the last the
 * bootstrap), actions, rewards, ends, the behaviour log-probabilities, and the
 * returns of the episodes that ended. The environments carry on across
 * rollouts. Cost per rollout: T policy forwards of E rows, T.E env steps. */
#include "rl_internal.h"

#include <math.h>
#include <string.h>

dt_status rl_traj_alloc(rl_traj *t, int T, int E, int D, int A) {
    *t = (rl_traj){.T = T, .E = E, .D = D, .A = A};
    size_t te = (size_t)T * E;
    t->obs = dt_alloc_floats((te + (size_t)E) * D);
    t->rew = dt_alloc_floats(te);
    t->logp = dt_alloc_floats(te);
    t->act = dt_calloc(te, sizeof(int32_t));
    t->done = dt_calloc(te, sizeof(uint8_t));
    t->trunc = dt_calloc(te, sizeof(uint8_t));
    if (!t->obs || !t->rew || !t->logp || !t->act || !t->done || !t->trunc) return dt_errorf(DT_ERR_NOMEM, "out of memory for a rollout");
    return DT_OK;
}

void rl_traj_free(rl_traj *t) {
    dt_free(t->obs);
    dt_free(t->rew);
    dt_free(t->logp);
    dt_free(t->act);
    dt_free(t->done);
    dt_free(t->trunc);
}

dt_status rl_actor_create(rl_actor *a, const char *env, int E, int T, dt_policy *p, uint64_t seed, int rank) {
    memset(a, 0, sizeof *a);
    a->p = p;
    dt_status st = dt_env_create(&a->env, env, E, seed * 1000003ull + (uint64_t)rank);
    if (st) return st;
    int D = dt_env_obs_dim(a->env), A = dt_env_n_actions(a->env);
    dt_rng_init(&a->rng, seed, 0xac70 + (uint64_t)rank);
    a->cur = dt_alloc_floats((size_t)E * D);
    a->logits = dt_alloc_floats((size_t)E * A);
    a->value = dt_alloc_floats((size_t)E);
    a->ret = dt_calloc((size_t)E, sizeof(double));
    if (!a->cur || !a->logits || !a->value || !a->ret) return dt_errorf(DT_ERR_NOMEM, "out of memory for an actor");
    if ((st = rl_traj_alloc(&a->traj, T, E, D, A))) return st;
    dt_env_reset(a->env, a->cur);
    return DT_OK;
}

void rl_actor_free(rl_actor *a) {
    dt_env_destroy(a->env);
    dt_free(a->cur);
    dt_free(a->logits);
    dt_free(a->value);
    dt_free(a->ret);
    rl_traj_free(&a->traj);
}

/* Samples from softmax(z) (A entries) with u in [0, 1); *lp its log-probability. */
static int sample(const float *z, int A, float u, float *lp) {
    double m = z[0], s = 0, acc = 0;
    for (int j = 1; j < A; j++) m = z[j] > m ? z[j] : m;
    for (int j = 0; j < A; j++) s += exp((double)z[j] - m);
    int pick = A - 1;
    for (int j = 0; j < A; j++) {
        acc += exp((double)z[j] - m) / s;
        if ((double)u < acc) {
            pick = j;
            break;
        }
    }
    *lp = (float)((double)z[pick] - m - log(s));
    return pick;
}

dt_status rl_actor_rollout(rl_actor *a) {
    rl_traj *t = &a->traj;
    int E = t->E, D = t->D, A = t->A;
    t->ret_sum = 0;
    t->ret_n = 0;
    dt_status st = DT_OK;
    for (int s = 0; s < t->T && !st; s++) {
        float *o = t->obs + (size_t)s * E * D;
        memcpy(o, a->cur, (size_t)E * D * sizeof(float));
        if ((st = dt_policy_forward(a->p, o, E, a->logits, a->value))) return st;
        int32_t *act = t->act + (size_t)s * E;
        float *lp = t->logp + (size_t)s * E;
        for (int e = 0; e < E; e++) act[e] = sample(a->logits + (size_t)e * A, A, dt_rng_uniform(&a->rng), &lp[e]);
        float *rew = t->rew + (size_t)s * E;
        uint8_t *done = t->done + (size_t)s * E;
        st = dt_env_step(a->env, act, a->cur, rew, done, t->trunc + (size_t)s * E);
        for (int e = 0; e < E && !st; e++) {
            a->ret[e] += rew[e];
            if (!done[e]) continue;
            t->ret_sum += a->ret[e];
            t->ret_n++;
            a->ret[e] = 0;
        }
    }
    memcpy(t->obs + (size_t)t->T * E * D, a->cur, (size_t)E * D * sizeof(float));
    return st;
}
