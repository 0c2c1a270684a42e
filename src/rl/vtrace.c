/* V-trace (Espeholt et al., "IMPALA", ICML 2018, section 4.1, lambda = 1): the
 * n-step value targets of an off-policy trajectory with truncated importance
 * weights rho (how far the target policy's value is pulled towards the
 * behaviour's returns) and c (how far corrections propagate back). With
 * rho_bar = c_bar = 1 and on-policy data (log_rho = 0) vs are the discounted
 * returns bootstrapped from V(x_T). One backward pass, O(T), in double. */
#include "dtrain/rl.h"

#include <math.h>

void dt_vtrace(int T, const float *log_rho, const float *discount, const float *reward, const float *value,
               float bootstrap, float rho_bar, float c_bar, float *vs, float *pg_adv) {
    double next_vs = bootstrap, next_v = bootstrap;
    for (int s = T - 1; s >= 0; s--) {
        double ratio = exp((double)log_rho[s]);
        double rho = ratio < rho_bar ? ratio : rho_bar, c = ratio < c_bar ? ratio : c_bar;
        double d = discount[s], v = value[s];
        double delta = rho * (reward[s] + d * next_v - v);
        double out = v + delta + d * c * (next_vs - next_v);
        pg_adv[s] = (float)(rho * (reward[s] + d * next_vs - v));
        vs[s] = (float)out;
        next_vs = out;
        next_v = v;
    }
}
