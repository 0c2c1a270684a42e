/* Environments, vectorised and deterministic from a seed. CartPole is Gym's
 * CartPole-v1 (Barto, Sutton & Anderson 1983, as in gym/envs/classic_control/
 * cartpole.py): a pole hinged on a cart, force +-10 N, Euler integration with
 * tau = 0.02 s:
 *   temp   = (F + m_p l theta_dot^2 sin theta) / (m_c + m_p)
 *   theta" = (g sin theta - cos theta temp) / (l (4/3 - m_p cos^2 theta / (m_c + m_p)))
 *   x"     = temp - m_p l theta" cos theta / (m_c + m_p)
 *   x += tau x', x' += tau x", theta += tau theta', theta' += tau theta"
 * g = 9.8, m_c = 1, m_p = 0.1, l = 0.5 (half the pole). Reward 1 per step; the
 * episode ends when |x| > 2.4 or |theta| > 12 degrees, and is truncated at 500
 * steps; start states uniform in [-0.05, 0.05]^4. The state is kept in double
 * (as Gym's numpy does) and observed as float. Cost O(n) per step. */
#include "dtrain/rl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CP_DIM 4
#define CP_LIMIT 500

struct dt_env {
    int n;
    double *s;      /* n x 4 */
    int *steps;
    dt_rng *rng;    /* per copy */
};

dt_status dt_env_create(dt_env **out, const char *name, int n, uint64_t seed) {
    *out = NULL;
    if (!name || strcmp(name, "cartpole") != 0)
        return dt_errorf(DT_ERR_INVALID, "--env %s: the environments are cartpole", name ? name : "(none)");
    if (n < 1 || n > 1 << 20) return dt_errorf(DT_ERR_INVALID, "%d environment copies: give 1 to %d", n, 1 << 20);
    dt_env *e = dt_calloc(1, sizeof *e);
    if (!e) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    e->n = n;
    e->s = dt_calloc((size_t)n * CP_DIM, sizeof(double));
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
int dt_env_obs_dim(const dt_env *e) { (void)e; return CP_DIM; }
int dt_env_n_actions(const dt_env *e) { (void)e; return 2; }

static void observe(const dt_env *e, int i, float *obs) {
    for (int k = 0; k < CP_DIM; k++) obs[(size_t)i * CP_DIM + k] = (float)e->s[(size_t)i * CP_DIM + k];
}

static void start(dt_env *e, int i) {
    for (int k = 0; k < CP_DIM; k++) e->s[(size_t)i * CP_DIM + k] = 0.1 * (double)dt_rng_uniform(&e->rng[i]) - 0.05;
    e->steps[i] = 0;
}

void dt_env_reset(dt_env *e, float *obs) {
    for (int i = 0; i < e->n; i++) {
        start(e, i);
        observe(e, i, obs);
    }
}

/* One Euler step of copy i under force f; true when the episode is over. */
static bool cartpole_step(double *s, double f) {
    const double g = 9.8, mc = 1.0, mp = 0.1, total = mc + mp, l = 0.5, pml = mp * l, tau = 0.02;
    double x = s[0], xd = s[1], th = s[2], thd = s[3];
    double c = cos(th), sn = sin(th);
    double temp = (f + pml * thd * thd * sn) / total;
    double thacc = (g * sn - c * temp) / (l * (4.0 / 3.0 - mp * c * c / total));
    double xacc = temp - pml * thacc * c / total;
    s[0] = x + tau * xd;
    s[1] = xd + tau * xacc;
    s[2] = th + tau * thd;
    s[3] = thd + tau * thacc;
    const double th_limit = 12.0 * 2.0 * M_PI / 360.0;
    return s[0] < -2.4 || s[0] > 2.4 || s[2] < -th_limit || s[2] > th_limit;
}

dt_status dt_env_step(dt_env *e, const int *actions, float *obs, float *reward, uint8_t *done, uint8_t *truncated) {
    for (int i = 0; i < e->n; i++)
        if (actions[i] < 0 || actions[i] > 1)
            return dt_errorf(DT_ERR_INVALID, "environment copy %d: action %d is not 0 or 1 (cartpole)", i, actions[i]);
    for (int i = 0; i < e->n; i++) {
        bool term = cartpole_step(e->s + (size_t)i * CP_DIM, actions[i] == 1 ? 10.0 : -10.0);
        bool cut = !term && ++e->steps[i] >= CP_LIMIT;
        reward[i] = 1.0f;
        done[i] = term || cut;
        truncated[i] = cut;
        if (done[i]) start(e, i);
        observe(e, i, obs);
    }
    return DT_OK;
}

void dt_env_get_state(const dt_env *e, int i, double *s) { memcpy(s, e->s + (size_t)i * CP_DIM, CP_DIM * sizeof(double)); }
void dt_env_set_state(dt_env *e, int i, const double *s) { memcpy(e->s + (size_t)i * CP_DIM, s, CP_DIM * sizeof(double)); }

int dt_env_episode_steps(const dt_env *e, int i) { return e->steps[i]; }
