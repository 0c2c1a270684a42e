/* Inverted dropout: out = inp * keep / (1 - p), keep = (u >= p) with u uniform
 * in [0, 1). Row r draws its uniforms from the Philox stream (seed, key0 + r),
 * the j-th uniform for column j. Because the generator is counter based, the
 * mask is a pure function of (seed, key0 + r, j): backward regenerates it
 * instead of saving N*D bytes, and a caller that splits the rows (pipeline or
 * data parallelism) gets the same mask as one that does not, as long as it
 * passes key0 + (first row) for its slice.
 * Cost: one Philox block (10 rounds) per 4 elements, ~8 ns an element here,
 * which dominates the multiply (calling dt_philox directly instead of
 * dt_rng_uniform per element saved only 10%); backward regenerates the mask,
 * doubling it, still far below the GEMMs around it. */
#include "core/cpu.h"
#include "dtrain/core.h"
#include "dtrain/nn.h"

#include <string.h>

DT_HOT void dt_dropout_forward(float *out, const float *inp, int N, int D, float p, uint64_t seed,
                               uint64_t key0) {
    DT_ASSERT(p >= 0.0f && p < 1.0f);
    if (p == 0.0f) { /* no draws at all: evaluation and p = 0 cost a copy */
        if (out != inp) memmove(out, inp, (size_t)N * D * sizeof(float));
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * D;
        float *o = out + (size_t)r * D;
        dt_rng rng;
        dt_rng_init(&rng, seed, key0 + (uint64_t)r);
        for (int j = 0; j < D; j++) o[j] = dt_rng_uniform(&rng) >= p ? x[j] * scale : 0.0f;
    }
}

DT_HOT void dt_dropout_backward(float *dinp, const float *dout, int N, int D, float p,
                                uint64_t seed, uint64_t key0) {
    if (!dinp) return;
    DT_ASSERT(p >= 0.0f && p < 1.0f);
    if (p == 0.0f) {
        const size_t n = (size_t)N * D;
        for (size_t i = 0; i < n; i++) dinp[i] += dout[i];
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    for (int r = 0; r < N; r++) {
        const float *g = dout + (size_t)r * D;
        float *d = dinp + (size_t)r * D;
        dt_rng rng;
        dt_rng_init(&rng, seed, key0 + (uint64_t)r);
        for (int j = 0; j < D; j++) d[j] += dt_rng_uniform(&rng) >= p ? g[j] * scale : 0.0f;
    }
}
