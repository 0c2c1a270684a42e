/* n copies of one environment stepped together (the dynamics are in
 * cartpole.c and acrobot.c). Copy i draws its start states from its own
 * stream (seed, i), so its episodes do not depend on n; a copy whose episode
 * ends starts the next within the same step. The state is kept in double (as
 * Gym's numpy does) and observed as float. Cost O(n) per step plus the
 * dynamics'. */
#include "rl_internal.h"

#include <string.h>

struct dt_env {
    const rl_env_kind *k;
    int n;
    double *s;      /* n x state_dim */
    int *steps;
    dt_rng *rng;    /* per copy */
};

dt_status dt_env_create(dt_env **out, const char *name, int n, uint64_t seed) {
    *out = NULL;
    const rl_env_kind *k = NULL;
    if (name && strcmp(name, "cartpole") == 0) k = &rl_cartpole;
    if (name && strcmp(name, "acrobot") == 0) k = &rl_acrobot;
    if (!k) return dt_errorf(DT_ERR_INVALID, "--env %s: the environments are cartpole and acrobot", name ? name : "(none)");
    if (n < 1 || n > 1 << 20) return dt_errorf(DT_ERR_INVALID, "%d environment copies: give 1 to %d", n, 1 << 20);
    dt_env *e = dt_calloc(1, sizeof *e);
    if (!e) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    e->k = k;
    e->n = n;
    e->s = dt_calloc((size_t)n * k->state_dim, sizeof(double));
    e->steps = dt_calloc((size_t)n, sizeof(int));
    e->rng = dt_calloc((size_t)n, sizeof(dt_rng));
    if (!e->s || !e->steps || !e->rng) {
        dt_env_destroy(e);
        return dt_errorf(DT_ERR_NOMEM, "out of memory for %d environments", n);
    }
    for (int i = 0; i < n; i++) dt_rng_init(&e->rng[i], seed, (uint64_t)i);
    *out = e;
    return DT_OK;
}

void dt_env_destroy(dt_env *e) {
    if (!e) return;
    dt_free(e->s);
    dt_free(e->steps);
    dt_free(e->rng);
    dt_free(e);
}

int dt_env_n(const dt_env *e) { return e->n; }
int dt_env_obs_dim(const dt_env *e) { return e->k->obs_dim; }
int dt_env_n_actions(const dt_env *e) { return e->k->n_actions; }

static double *state(const dt_env *e, int i) { return e->s + (size_t)i * e->k->state_dim; }

static void start(dt_env *e, int i) {
    e->k->start(state(e, i), &e->rng[i]);
    e->steps[i] = 0;
}

void dt_env_reset(dt_env *e, float *obs) {
    for (int i = 0; i < e->n; i++) {
        start(e, i);
        e->k->observe(state(e, i), obs + (size_t)i * e->k->obs_dim);
    }
}

dt_status dt_env_step(dt_env *e, const int *actions, float *obs, float *reward, uint8_t *done, uint8_t *truncated) {
    for (int i = 0; i < e->n; i++)
        if (actions[i] < 0 || actions[i] >= e->k->n_actions)
            return dt_errorf(DT_ERR_INVALID, "environment copy %d: action %d is not in [0, %d) (%s)", i, actions[i],
                             e->k->n_actions, e->k->name);
    for (int i = 0; i < e->n; i++) {
        bool term = e->k->step(state(e, i), actions[i], &reward[i]);
        bool cut = !term && ++e->steps[i] >= e->k->limit;
        done[i] = term || cut;
        truncated[i] = cut;
        if (done[i]) start(e, i);
        e->k->observe(state(e, i), obs + (size_t)i * e->k->obs_dim);
    }
    return DT_OK;
}

void dt_env_get_state(const dt_env *e, int i, double *s) { memcpy(s, state(e, i), (size_t)e->k->state_dim * sizeof(double)); }
void dt_env_set_state(dt_env *e, int i, const double *s) { memcpy(state(e, i), s, (size_t)e->k->state_dim * sizeof(double)); }
int dt_env_episode_steps(const dt_env *e, int i) { return e->steps[i]; }

void rl_env_expose(dt_env *e, rl_env_state *out) {
    *out = (rl_env_state){.n = e->n, .state_dim = e->k->state_dim, .s = e->s, .steps = e->steps, .rng = e->rng};
}
