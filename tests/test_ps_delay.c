/* The parameter server's delay-tolerant updates (src/ps/delay.c) on
 * closed-form inputs: the staleness-aware step scale and the DC-ASGD
 * correction, every value exact in float. */
#include "dtrain/ps.h"

#include "testhelp.h"

int main(void) {
    /* 3 workers: fewer than a round of other pushes is no staleness */
    test_cond("no push since the read: full step", dt_ps_staleness_scale(0, 3) == 1.0f);
    test_cond("the other 2 pushed once: still one round", dt_ps_staleness_scale(2, 3) == 1.0f);
    test_cond("one round behind: half step", dt_ps_staleness_scale(3, 3) == 0.5f);
    test_cond("10 pushes behind, 3 workers: tau 3, a quarter", dt_ps_staleness_scale(10, 3) == 0.25f);
    test_cond("20 pushes, 2 workers: tau 10", dt_ps_staleness_scale(20, 2) == 1.0f / 11.0f);
    test_cond("negative counts clamp to no staleness", dt_ps_staleness_scale(-4, 3) == 1.0f);

    /* g' = g + lambda g g (w_now - w_read), lambda 0.5 */
    float g[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    const float now[4] = {1.0f, 1.0f, 1.0f, 0.0f}, read[4] = {0.0f, 2.0f, 1.0f, 0.25f};
    dt_ps_delay_compensate(g, now, read, 4, 0.5f);
    test_cond("dc: 1 + 0.5*1*1", g[0] == 1.5f);
    test_cond("dc: -2 + 0.5*4*(-1)", g[1] == -4.0f);
    test_cond("dc: unchanged where the parameter did not move", g[2] == 0.5f);
    test_cond("dc: 3 + 0.5*9*(-0.25)", g[3] == 3.0f - 1.125f);
    float h[2] = {2.0f, -1.0f};
    const float w1[2] = {5.0f, 6.0f}, w0[2] = {1.0f, 2.0f};
    dt_ps_delay_compensate(h, w1, w0, 2, 0.0f);
    test_cond("dc: lambda 0 changes nothing", h[0] == 2.0f && h[1] == -1.0f);
    dt_ps_delay_compensate(h, w1, w0, 0, 1.0f);
    test_cond("dc: n 0 touches nothing", h[0] == 2.0f && h[1] == -1.0f);
    return test_report();
}
