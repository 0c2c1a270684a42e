/* Global-norm gradient clipping as torch.nn.utils.clip_grad_norm_. The sum of
 * squares is accumulated in double across 8 fixed lanes: the result does not
 * depend on the compiler, and per-shard sums can be added across ranks. */
#include "dtrain/optim.h"

double dt_sumsq(const float *g, size_t n) {
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)g[i + k] * (double)g[i + k];
    for (int k = 0; i < n; i++, k++) acc[k] += (double)g[i] * (double)g[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* PyTorch holds the norm as a float tensor: the norm is rounded to float, the
 * 1e-6 added in float and the quotient clamped at 1 (a NaN norm stays NaN, so a
 * NaN gradient is not silently rescaled into finite numbers). */
float dt_clip_factor(double global_norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    float c = max_norm / ((float)global_norm + 1e-6f);
    return c > 1.0f ? 1.0f : c;
}

void dt_scale(float *restrict g, size_t n, float s) {
    for (size_t i = 0; i < n; i++) g[i] *= s;
}
