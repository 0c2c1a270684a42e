/* Acrobot, Gym's Acrobot-v1 (Sutton 1996; the "book" dynamics of
 * gym/envs/classic_control/acrobot.py): two links hanging from a pivot, torque
 * -1, 0 or +1 on the joint between them; m1 = m2 = 1, l1 = 1, lc1 = lc2 = 0.5,
 * I1 = I2 = 1, g = 9.8; one RK4 step of 0.2 s with the torque held:
 *   d1 = m1 lc1^2 + m2 (l1^2 + lc2^2 + 2 l1 lc2 cos t2) + I1 + I2
 *   d2 = m2 (lc2^2 + l1 lc2 cos t2) + I2
 *   phi2 = m2 lc2 g cos(t1 + t2 - pi/2)
 *   phi1 = -m2 l1 lc2 t2'^2 sin t2 - 2 m2 l1 lc2 t2' t1' sin t2 + (m1 lc1 + m2 l1) g cos(t1 - pi/2) + phi2
 *   t2" = (a + d2/d1 phi1 - m2 l1 lc2 t1'^2 sin t2 - phi2) / (m2 lc2^2 + I2 - d2^2/d1)
 *   t1" = -(d2 t2" + phi1) / d1
 * then the angles wrapped into [-pi, pi), the speeds clipped to 4 pi and 9 pi.
 * Reward -1 per step until the tip swings above the bar (-cos t1 - cos(t1 + t2)
 * > 1), the end; truncated at 500 steps; start uniform in [-0.1, 0.1]^4.
 * Observed: cos t1, sin t1, cos t2, sin t2, t1', t2'. A longer horizon than
 * CartPole: a random policy needs ~500 steps, a good one ~60-100. */
#include "rl_internal.h"

#include <math.h>

static void start(double *s, dt_rng *r) {
    for (int k = 0; k < 4; k++) s[k] = 0.2 * (double)dt_rng_uniform(r) - 0.1;
}

static void dsdt(const double *s, double a, double *d) {
    const double m1 = 1, m2 = 1, l1 = 1, lc1 = 0.5, lc2 = 0.5, I1 = 1, I2 = 1, g = 9.8;
    double t1 = s[0], t2 = s[1], w1 = s[2], w2 = s[3];
    double d1 = m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * cos(t2)) + I1 + I2;
    double d2 = m2 * (lc2 * lc2 + l1 * lc2 * cos(t2)) + I2;
    double phi2 = m2 * lc2 * g * cos(t1 + t2 - M_PI / 2);
    double phi1 = -m2 * l1 * lc2 * w2 * w2 * sin(t2) - 2 * m2 * l1 * lc2 * w2 * w1 * sin(t2) +
                  (m1 * lc1 + m2 * l1) * g * cos(t1 - M_PI / 2) + phi2;
    double dd2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * w1 * w1 * sin(t2) - phi2) / (m2 * lc2 * lc2 + I2 - d2 * d2 / d1);
    d[0] = w1;
    d[1] = w2;
    d[2] = -(d2 * dd2 + phi1) / d1;
    d[3] = dd2;
}

static double wrap(double x) {
    const double two_pi = 2 * M_PI;
    while (x > M_PI) x -= two_pi;
    while (x < -M_PI) x += two_pi;
    return x;
}

static double clip(double x, double m) { return x < -m ? -m : x > m ? m : x; }

static bool step(double *s, int action, float *reward) {
    const double dt = 0.2, a = (double)(action - 1);
    double k1[4], k2[4], k3[4], k4[4], y[4];
    dsdt(s, a, k1);
    for (int i = 0; i < 4; i++) y[i] = s[i] + dt / 2 * k1[i];
    dsdt(y, a, k2);
    for (int i = 0; i < 4; i++) y[i] = s[i] + dt / 2 * k2[i];
    dsdt(y, a, k3);
    for (int i = 0; i < 4; i++) y[i] = s[i] + dt * k3[i];
    dsdt(y, a, k4);
    for (int i = 0; i < 4; i++) s[i] += dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
    s[0] = wrap(s[0]);
    s[1] = wrap(s[1]);
    s[2] = clip(s[2], 4 * M_PI);
    s[3] = clip(s[3], 9 * M_PI);
    bool term = -cos(s[0]) - cos(s[1] + s[0]) > 1.0;
    *reward = term ? 0.0f : -1.0f;
    return term;
}

static void observe(const double *s, float *obs) {
    obs[0] = (float)cos(s[0]);
    obs[1] = (float)sin(s[0]);
    obs[2] = (float)cos(s[1]);
    obs[3] = (float)sin(s[1]);
    obs[4] = (float)s[2];
    obs[5] = (float)s[3];
}

const rl_env_kind rl_acrobot = {"acrobot", 4, 6, 3, 500, start, step, observe};
