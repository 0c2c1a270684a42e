/* Max-pool 2x2, stride 2. The argmax (flat index inside the (H, W) plane) is
 * saved so backward is a scatter; ties go to the first element of the window in
 * row-major order, as PyTorch does, hence the strict '>' comparisons below;
 * a NaN wins, as in PyTorch, so it propagates. */
#include "core/cpu.h"
#include "dtrain/core.h"
#include "dtrain/nn.h"

#include <math.h>

/* Whether v replaces the current best: strictly greater, or the first NaN. */
static inline int beats(float v, float best) { return !isnan(best) && (v > best || isnan(v)); }

DT_HOT void dt_maxpool2x2_forward(float *out, int32_t *argmax, const float *inp, int B, int C,
                           int H, int W) {
    DT_ASSERT(H % 2 == 0 && W % 2 == 0);
    const int OH = H / 2, OW = W / 2;
    for (size_t p = 0; p < (size_t)B * C; p++) {
        const float *x = inp + p * H * W;
        float *o = out + p * OH * OW;
        int32_t *a = argmax + p * OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            const float *r0 = x + (size_t)(2 * oh) * W;
            const float *r1 = r0 + W;
            for (int ow = 0; ow < OW; ow++) {
                int i0 = 2 * oh * W + 2 * ow;
                float best = r0[2 * ow];
                int32_t at = i0;
                if (beats(r0[2 * ow + 1], best)) { best = r0[2 * ow + 1]; at = i0 + 1; }
                if (beats(r1[2 * ow], best)) { best = r1[2 * ow]; at = i0 + W; }
                if (beats(r1[2 * ow + 1], best)) { best = r1[2 * ow + 1]; at = i0 + W + 1; }
                o[oh * OW + ow] = best;
                a[oh * OW + ow] = at;
            }
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
