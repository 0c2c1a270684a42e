/* Max-pool 2x2, stride 2. The argmax (flat index inside the (H, W) plane) is
 * saved so backward is a scatter; ties go to the first element of the window in
 * row-major order, as PyTorch does, hence the strict '>' comparisons below;
 * a NaN wins, as in PyTorch, so it propagates. */
#include "core/cpu.h"
#include "dtrain/core.h"
#include "dtrain/nn.h"

#include <math.h>

#include <string.h>

/* Whether v replaces the current best: strictly greater, or the first NaN. */
static inline int beats(float v, float best) { return !isnan(best) && (v > best || isnan(v)); }

/* The same on N outputs at once (vector extensions): rows r0, r1 from column
 * 2*ow are split into even and odd columns, the four candidates compared in
 * window order with masks and selects. On real activations a window's winner
 * is a coin toss, and the scalar form's branches mispredicted about half the
 * time (maxpool forward was 5.7% of a W3 step). */
#define POOL_LIST(...) __VA_ARGS__
#define DEFINE_POOL(NAME, N, VF, VI, EVEN, ODD)                                                  \
    typedef float VF __attribute__((vector_size(4 * N)));                                       \
    typedef int32_t VI __attribute__((vector_size(4 * N)));                                     \
    static inline __attribute__((always_inline)) void NAME(float *o, int32_t *a, const float *r0,  \
                            const float *r1, int32_t i0, int W) {                               \
        VF x0, x1, y0, y1;                                                                      \
        memcpy(&x0, r0, sizeof x0);                                                             \
        memcpy(&x1, r0 + N, sizeof x1);                                                         \
        memcpy(&y0, r1, sizeof y0);                                                             \
        memcpy(&y1, r1 + N, sizeof y1);                                                         \
        const VI ev = {POOL_LIST EVEN};                                                         \
        const VF c[4] = {__builtin_shufflevector(x0, x1, POOL_LIST EVEN),                       \
                         __builtin_shufflevector(x0, x1, POOL_LIST ODD),                        \
                         __builtin_shufflevector(y0, y1, POOL_LIST EVEN),                       \
                         __builtin_shufflevector(y0, y1, POOL_LIST ODD)};                       \
        const VI base = i0 + ev, step[4] = {base, base + 1, base + W, base + W + 1};            \
        VF best = c[0];                                                                         \
        VI at = base;                                                                           \
        for (int k = 1; k < 4; k++) {                                                           \
            VI t = (best == best) & ((c[k] > best) | (c[k] != c[k]));                           \
            best = (VF)((t & (VI)c[k]) | (~t & (VI)best));                                      \
            at = (t & step[k]) | (~t & at);                                                     \
        }                                                                                       \
        memcpy(o, &best, sizeof best);                                                          \
        memcpy(a, &at, sizeof at);                                                              \
    }
DEFINE_POOL(pool8, 8, v8f, v8i, (0, 2, 4, 6, 8, 10, 12, 14), (1, 3, 5, 7, 9, 11, 13, 15))
DEFINE_POOL(pool4, 4, v4f, v4i, (0, 2, 4, 6), (1, 3, 5, 7))

/* One output row: blocks of 8 (4 when the row is shorter), the last block
 * moved back to end at the row's end (it recomputes a few outputs with the same
 * result), scalar only for rows under 4. Always inlined, so that each of
 * dt_maxpool2x2_forward's CPU-level clones gets its own vector code. */
static inline __attribute__((always_inline)) void pool_row(float *o, int32_t *a,
                                                           const float *r0, const float *r1,
                                                           int32_t i0, int W, int OW) {
    const int n = OW >= 8 ? 8 : OW >= 4 ? 4 : 0;
    if (!n) {
        for (int ow = 0; ow < OW; ow++) {
            const int32_t i = i0 + 2 * ow, cand[3] = {i + 1, i + W, i + W + 1};
            const float v[3] = {r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
            float best = r0[2 * ow];
            int32_t at = i;
            for (int k = 0; k < 3; k++)
                if (beats(v[k], best)) best = v[k], at = cand[k];
            o[ow] = best;
            a[ow] = at;
        }
        return;
    }
    for (int ow = 0;; ow += n) {
        if (ow + n > OW) ow = OW - n;
        if (n == 8)
            pool8(o + ow, a + ow, r0 + 2 * ow, r1 + 2 * ow, i0 + 2 * ow, W);
        else
            pool4(o + ow, a + ow, r0 + 2 * ow, r1 + 2 * ow, i0 + 2 * ow, W);
        if (ow + n == OW) break;
    }
}

DT_HOT void dt_maxpool2x2_forward(float *out, int32_t *argmax, const float *inp, int B, int C,
                           int H, int W) {
    DT_ASSERT(H % 2 == 0 && W % 2 == 0);
    const int OH = H / 2, OW = W / 2;
    for (size_t p = 0; p < (size_t)B * C; p++) {
        const float *x = inp + p * H * W;
        for (int oh = 0; oh < OH; oh++) {
            const float *r0 = x + (size_t)(2 * oh) * W;
            const size_t j = p * OH * OW + (size_t)oh * OW;
            pool_row(out + j, argmax + j, r0, r0 + W, 2 * oh * W, W, OW);
        }
    }
}

DT_HOT void dt_maxpool2x2_backward(float *dinp, const float *dout, const int32_t *argmax, int B,
                            int C, int H, int W) {
    if (!dinp) return;
    const size_t plane_out = (size_t)(H / 2) * (W / 2);
    for (size_t p = 0; p < (size_t)B * C; p++) {
        float *d = dinp + p * H * W;
        const float *g = dout + p * plane_out;
        const int32_t *a = argmax + p * plane_out;
        for (size_t i = 0; i < plane_out; i++) d[a[i]] += g[i];
    }
}
