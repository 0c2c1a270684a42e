/* The learner's side of one rollout: a forward over its (T+1)E observations,
 * V-trace targets per environment copy (log rho = log pi(a) - log mu(a), the
 * rewards times reward_scale, so the value head learns returns in those units;
 * the discount 0 after a terminal state; after a truncation (the step limit, not
 * a failure) the target bootstraps from the value of the next observation,
 * which is the new episode's first: a start state stands in for the cut
 * episode's last, which the environment does not return), IMPALA's loss and
 * its gradient into the
 * policy's gradient arena. Cost: one forward and backward of (T+1)E rows, O(TE)
 * for the targets. */
#include "rl_internal.h"

#include <string.h>

dt_status rl_learn_create(rl_learn *l, dt_policy *p, int T, int E, int A) {
    size_t rows = (size_t)(T + 1) * E;
    *l = (rl_learn){.p = p};
    l->logits = dt_alloc_floats(rows * A);
    l->lsm = dt_alloc_floats(rows * A);
    l->dlogits = dt_alloc_floats(rows * A);
    l->value = dt_alloc_floats(rows);
    l->dvalue = dt_alloc_floats(rows);
    l->vs = dt_alloc_floats(rows);
    l->adv = dt_alloc_floats(rows);
    float **cols[6] = {&l->col_lr, &l->col_d, &l->col_r, &l->col_v, &l->col_vs, &l->col_adv};
    bool ok = l->logits && l->lsm && l->dlogits && l->value && l->dvalue && l->vs && l->adv;
    for (int k = 0; k < 6 && ok; k++) ok = (*cols[k] = dt_alloc_floats((size_t)T)) != NULL;
    return ok ? DT_OK : dt_errorf(DT_ERR_NOMEM, "out of memory for the learner");
}

void rl_learn_free(rl_learn *l) {
    float *all[13] = {l->logits, l->lsm, l->dlogits, l->value, l->dvalue, l->vs, l->adv,
                      l->col_lr, l->col_d, l->col_r, l->col_v, l->col_vs, l->col_adv};
    for (int k = 0; k < 13; k++) dt_free(all[k]);
}

/* V-trace for copy e: its T steps gathered into columns, the targets scattered back. */
static void targets(rl_learn *l, const rl_traj *t, int e) {
    int T = t->T, E = t->E, A = t->A;
    for (int s = 0; s < T; s++) {
        size_t i = (size_t)s * E + e;
        l->col_lr[s] = l->lsm[i * A + t->act[i]] - t->logp[i];
        l->col_d[s] = t->done[i] && !t->trunc[i] ? 0.0f : l->gamma;
        l->col_r[s] = t->rew[i] * l->reward_scale;
        l->col_v[s] = l->value[i];
    }
    dt_vtrace(T, l->col_lr, l->col_d, l->col_r, l->col_v, l->value[(size_t)T * E + e], l->rho_bar, l->c_bar, l->col_vs,
              l->col_adv);
    for (int s = 0; s < T; s++) {
        l->vs[(size_t)s * E + e] = l->col_vs[s];
        l->adv[(size_t)s * E + e] = l->col_adv[s];
    }
}

dt_status rl_learn_grad(rl_learn *l, const rl_traj *t, double *loss) {
    int T = t->T, E = t->E, A = t->A, rows = (T + 1) * E, n = T * E;
    dt_status st = dt_policy_forward(l->p, t->obs, rows, l->logits, l->value);
    if (st) return st;
    dt_log_softmax(l->logits, rows, A, l->lsm);
    for (int e = 0; e < E; e++) targets(l, t, e);
    *loss = dt_ac_loss(l->logits, l->value, t->act, l->adv, l->vs, n, A, l->value_coef, l->entropy_coef, l->dlogits, l->dvalue);
    /* the bootstrap row only gives V(x_T): no gradient through it */
    memset(l->dlogits + (size_t)n * A, 0, (size_t)E * A * sizeof(float));
    memset(l->dvalue + n, 0, (size_t)E * sizeof(float));
    dt_policy_backward(l->p, l->dlogits, l->dvalue);
    return DT_OK;
}
