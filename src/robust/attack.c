/* Simulated Byzantine workers (tests and benchmarks; see include/dtrain/robust.h).
 * Cost: one pass over the vector (random: one normal draw per element). */
#include "dtrain/robust.h"

#include <math.h>

void dt_byz_corrupt(dt_byz_mode mode, float factor, uint64_t seed, float *g, size_t n, int64_t step) {
    if (mode == DT_BYZ_ALIE) return; /* rewritten where every vector meets (dt_agg_alie) */
    if (mode == DT_BYZ_SIGNFLIP) {
        dt_scale(g, n, -10.0f);
    } else if (mode == DT_BYZ_SCALE) {
        dt_scale(g, n, factor);
    } else {
        double rms = sqrt(dt_sumsq(g, n) / (double)(n ? n : 1));
        dt_rng rng;
        dt_rng_init(&rng, seed ^ 0xbad5eedull, 0x9000 + (uint64_t)step);
        for (size_t j = 0; j < n; j++) g[j] = (float)(100.0 * rms) * dt_rng_normal(&rng);
    }
}

dt_status dt_alie_mask(const int *attackers, int k, float z_given, int n, bool **bad, float *z) {
    int f = 0;
    *bad = NULL;
    *z = z_given;
    for (int i = 0; i < k; i++) {
        if (attackers[i] < 0 || attackers[i] >= n) continue;
        if (!*bad && !(*bad = dt_calloc((size_t)n, sizeof(bool)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
        f += !(*bad)[attackers[i]];
        (*bad)[attackers[i]] = true;
    }
    if (isnan(*z)) *z = dt_agg_alie_z(n, f);
    return DT_OK;
}
