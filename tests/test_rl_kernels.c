/* The reinforcement-learning floor: CartPole and Acrobot against Gym's equations
 * computed independently (in Python, double precision; the values below), their ends,
 * truncation, auto-reset and determinism; V-trace against the paper's
 * non-recursive sum (computed in Python) and its on-policy limit; the
 * actor-critic network's and loss's gradients against central differences. */
#include "dtrain/rl.h"

#include "testhelp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool near(double a, double b, double tol) { return fabs(a - b) <= tol * (1.0 + fabs(b)); }

static void cartpole_equations(void) {
    dt_env *e;
    test_cond("create cartpole", dt_env_create(&e, "cartpole", 1, 7) == DT_OK);
    float obs[4], r;
    uint8_t d, tr;
    dt_env_reset(e, obs);
    const double s0[4] = {0.01, -0.02, 0.03, 0.04};
    dt_env_set_state(e, 0, s0);
    const int acts[8] = {1, 0, 0, 1, 1, 1, 0, 1};
    for (int k = 0; k < 8; k++) test_cond("step", dt_env_step(e, &acts[k], obs, &r, &d, &tr) == DT_OK && !d && r == 1.0f);
    double s[4];
    dt_env_get_state(e, 0, s);
    /* Python, Gym's cartpole.py equations in double */
    const double want[4] = {0.022168385080656248, 0.36682408600495897, 0.01829729102425976, -0.4700713747851109};
    bool ok = true;
    for (int k = 0; k < 4; k++) ok &= near(s[k], want[k], 1e-12) && obs[k] == (float)want[k];
    test_cond("8 steps match the equations (1e-12) and are observed as float", ok);
    /* pushed right from rest, the pole falls past 12 degrees at step 9 */
    const double rest[4] = {0, 0, 0, 0};
    dt_env_set_state(e, 0, rest);
    int one = 1, n = 0;
    do {
        dt_env_step(e, &one, obs, &r, &d, &tr);
        n++;
    } while (!d && n < 100);
    test_cond("terminal at step 9, not truncated", n == 9 && d && !tr);
    test_cond("restarted within the step: a start state in [-0.05, 0.05]", fabsf(obs[0]) <= 0.05f && fabsf(obs[2]) <= 0.05f &&
                                                                              dt_env_episode_steps(e, 0) == 0);
    int bad = 2;
    test_cond("an action out of range is refused", dt_env_step(e, &bad, obs, &r, &d, &tr) == DT_ERR_INVALID);
    dt_env_destroy(e);
}

/* Balanced by hand (push towards the pole's lean): truncated at 500 steps. */
static void cartpole_truncation(void) {
    dt_env *e;
    dt_env_create(&e, "cartpole", 1, 3);
    float obs[4], r;
    uint8_t d = 0, tr = 0;
    dt_env_reset(e, obs);
    int n = 0;
    while (!d && n < 1000) {
        int a = obs[2] + 0.5f * obs[3] > 0 ? 1 : 0;
        dt_env_step(e, &a, obs, &r, &d, &tr);
        n++;
    }
    test_cond("a balancing policy is truncated at 500 steps", n == 500 && d && tr);
    dt_env_destroy(e);
}

/* Copy i's episodes depend on the seed and i only, not on the copies beside it. */
static void cartpole_determinism(void) {
    dt_env *a, *b;
    dt_env_create(&a, "cartpole", 3, 11);
    dt_env_create(&b, "cartpole", 1, 11);
    float oa[12], ob[4], ra[3], rb;
    uint8_t da[3], ta[3], db, tb;
    dt_env_reset(a, oa);
    dt_env_reset(b, ob);
    bool same = memcmp(oa, ob, sizeof ob) == 0;
    for (int k = 0; k < 300; k++) {
        int acts[3] = {k % 3 == 0, 1, 0}, act = acts[0];
        dt_env_step(a, acts, oa, ra, da, ta);
        dt_env_step(b, &act, ob, &rb, &db, &tb);
        same &= memcmp(oa, ob, sizeof ob) == 0 && da[0] == db;
    }
    test_cond("copy 0 of 3 = the only copy, over episodes and resets", same);
    dt_env *c;
    test_cond("unknown environment refused", dt_env_create(&c, "pong", 1, 1) == DT_ERR_INVALID && !c);
    dt_env_destroy(a);
    dt_env_destroy(b);
}

static void vtrace(void) {
    const float log_rho[4] = {0.3f, -0.5f, 1.2f, 0.0f}, disc[4] = {0.9f, 0.9f, 0.0f, 0.9f};
    const float rew[4] = {1.0f, -0.5f, 2.0f, 0.25f}, val[4] = {0.5f, 0.1f, -0.3f, 0.8f};
    float vs[4], pg[4];
    dt_vtrace(4, log_rho, disc, rew, val, 0.6f, 1.0f, 0.9f, vs, pg);
    /* Python: v_s = V(x_s) + sum_t (prod_{i<t} gamma_i c_i) delta_t, delta_t = rho_t (r_t + gamma_t V(x_t+1) - V(x_t)) */
    const double wvs[4] = {1.6795478012406797, 0.8278367916551601, 2.0, 0.79};
    const double wpg[4] = {1.2450531124896442, 0.7278367916551599, 2.3, -0.01};
    bool ok = true;
    for (int s = 0; s < 4; s++) ok &= near(vs[s], wvs[s], 1e-6) && near(pg[s], wpg[s], 1e-6);
    test_cond("v-trace = the paper's sum (truncated rho and c, a terminal inside)", ok);
    /* on-policy, rho_bar = c_bar = 1: vs are the discounted returns bootstrapped from V(x_T) */
    const float zero[3] = {0, 0, 0}, g[3] = {0.5f, 0.5f, 0.5f}, r3[3] = {1, 2, 4}, v3[3] = {9, -3, 7};
    float vs3[3], pg3[3];
    dt_vtrace(3, zero, g, r3, v3, 8.0f, 1.0f, 1.0f, vs3, pg3);
    test_cond("on-policy: vs = discounted returns", vs3[2] == 4 + 0.5f * 8 && vs3[1] == 2 + 0.5f * vs3[2] && vs3[0] == 1 + 0.5f * vs3[1]);
    test_cond("on-policy: advantages = returns - values", pg3[0] == vs3[0] - 9 && pg3[2] == vs3[2] - 7);
}

/* The network's and the loss's gradients against central differences. */
static double loss_at(dt_policy *p, const float *obs, int N, const int *act, const float *adv, const float *vs, float *dz, float *dv) {
    float z[3 * 3], v[3];
    dt_policy_forward(p, obs, N, z, v);
    return dt_ac_loss(z, v, act, adv, vs, N, 3, 0.5f, 0.01f, dz, dv);
}

static void policy_gradcheck(void) {
    dt_policy *p;
    test_cond("policy create", dt_policy_create(&p, 4, 3, 5, 3, 42) == DT_OK);
    const float obs[12] = {0.1f, -0.2f, 0.3f, 0.05f, -0.4f, 0.2f, 0.0f, 0.3f, 0.25f, 0.1f, -0.15f, -0.3f};
    const int act[3] = {2, 0, 1};
    const float adv[3] = {0.7f, -1.2f, 0.4f}, vs[3] = {1.0f, -0.5f, 0.3f};
    float dz[9], dv[3];
    size_t n = dt_policy_n_params(p);
    float *w = dt_policy_params(p), *g = dt_policy_grads(p);
    memset(g, 0, n * sizeof(float));
    loss_at(p, obs, 3, act, adv, vs, dz, dv);
    dt_policy_backward(p, dz, dv);
    double worst = 0;
    for (size_t k = 0; k < n; k++) {
        float keep = w[k], eps = 5e-3f;
        w[k] = keep + eps;
        double lp = loss_at(p, obs, 3, act, adv, vs, dz, dv);
        w[k] = keep - eps;
        double lm = loss_at(p, obs, 3, act, adv, vs, dz, dv);
        w[k] = keep;
        double num = (lp - lm) / (2.0 * (double)eps), err = fabs(num - (double)g[k]) / (1e-3 + fabs(num));
        worst = err > worst ? err : worst;
    }
    printf("policy gradcheck: %zu parameters, worst relative error %.2g\n", n, worst);
    test_cond("network + loss gradients = central differences (2%)", worst < 0.02);
    float z[9], ls[9];
    dt_policy_forward(p, obs, 3, z, dv);
    dt_log_softmax(z, 3, 3, ls);
    double sum = 0;
    for (int j = 0; j < 3; j++) sum += exp((double)ls[j]);
    test_cond("log softmax rows sum to 1", fabs(sum - 1.0) < 1e-6);
    test_cond("batch larger than the network's is refused", dt_policy_forward(p, obs, 4, z, dv) == DT_ERR_INVALID);
    dt_policy_destroy(p);
}

/* Acrobot against Gym's book dynamics and RK4 computed independently in Python. */
static void acrobot(void) {
    dt_env *e;
    test_cond("create acrobot", dt_env_create(&e, "acrobot", 1, 5) == DT_OK);
    test_cond("acrobot: 6 observations, 3 torques", dt_env_obs_dim(e) == 6 && dt_env_n_actions(e) == 3);
    float obs[6], r;
    uint8_t d, tr;
    dt_env_reset(e, obs);
    const double s0[4] = {0.05, -0.03, 0.02, 0.01};
    dt_env_set_state(e, 0, s0);
    const int acts[10] = {2, 2, 0, 1, 2, 0, 0, 2, 1, 2};
    bool ok = true;
    for (int k = 0; k < 10; k++) ok &= dt_env_step(e, &acts[k], obs, &r, &d, &tr) == DT_OK && !d && r == -1.0f;
    double s[4];
    dt_env_get_state(e, 0, s);
    const double want[4] = {0.06554998153619086, -0.2294337521769223, -0.303368940116871, 0.5669854696465895};
    for (int k = 0; k < 4; k++) ok &= near(s[k], want[k], 1e-12);
    ok &= obs[0] == (float)cos(want[0]) && obs[3] == (float)sin(want[1]) && obs[5] == (float)want[3];
    test_cond("acrobot: 10 RK4 steps match the equations (1e-12), observed as cos, sin and speeds", ok);
    /* pumping energy (torque along the second link's swing) reaches the goal at step 73 */
    const double rest[4] = {0, 0, 0, 0};
    dt_env_set_state(e, 0, rest);
    double ret = 0;
    int n = 0;
    do {
        double cur[4];
        dt_env_get_state(e, 0, cur);
        int a = cur[3] > 0 ? 2 : 0;
        dt_env_step(e, &a, obs, &r, &d, &tr);
        ret += r;
        n++;
    } while (!d && n < 600);
    test_cond("acrobot: the swing-up ends at step 73 (return -72), not truncated", n == 73 && d && !tr && ret == -72.0);
    dt_env_destroy(e);
}

int main(void) {
    acrobot();
    policy_gradcheck();
    cartpole_equations();
    cartpole_truncation();
    cartpole_determinism();
    vtrace();
    return test_report();
}
