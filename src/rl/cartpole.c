/* CartPole, Gym's CartPole-v1 (Barto, Sutton & Anderson 1983, as in
 * gym/envs/classic_control/cartpole.py): a pole hinged on a cart, force +-10 N,
 * Euler integration with tau = 0.02 s:
 *   temp   = (F + m_p l theta_dot^2 sin theta) / (m_c + m_p)
 *   theta" = (g sin theta - cos theta temp) / (l (4/3 - m_p cos^2 theta / (m_c + m_p)))
 *   x"     = temp - m_p l theta" cos theta / (m_c + m_p)
 *   x += tau x', x' += tau x", theta += tau theta', theta' += tau theta"
 * g = 9.8, m_c = 1, m_p = 0.1, l = 0.5 (half the pole). Reward 1 per step; the
 * episode ends when |x| > 2.4 or |theta| > 12 degrees, and is truncated at 500
 * steps; start states uniform in [-0.05, 0.05]^4. Observed: the state. */
#include "rl_internal.h"

#include <math.h>

static void start(double *s, dt_rng *r) {
    for (int k = 0; k < 4; k++) s[k] = 0.1 * (double)dt_rng_uniform(r) - 0.05;
}

static bool step(double *s, int action, float *reward) {
    const double g = 9.8, mc = 1.0, mp = 0.1, total = mc + mp, l = 0.5, pml = mp * l, tau = 0.02;
    double f = action == 1 ? 10.0 : -10.0;
    double x = s[0], xd = s[1], th = s[2], thd = s[3];
    double c = cos(th), sn = sin(th);
    double temp = (f + pml * thd * thd * sn) / total;
    double thacc = (g * sn - c * temp) / (l * (4.0 / 3.0 - mp * c * c / total));
    double xacc = temp - pml * thacc * c / total;
    s[0] = x + tau * xd;
    s[1] = xd + tau * xacc;
    s[2] = th + tau * thd;
    s[3] = thd + tau * thacc;
    *reward = 1.0f;
    const double th_limit = 12.0 * 2.0 * M_PI / 360.0;
    return s[0] < -2.4 || s[0] > 2.4 || s[2] < -th_limit || s[2] > th_limit;
}

static void observe(const double *s, float *obs) {
    for (int k = 0; k < 4; k++) obs[k] = (float)s[k];
}

const rl_env_kind rl_cartpole = {"cartpole", 4, 4, 2, 500, start, step, observe};
