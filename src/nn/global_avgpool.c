/* Global average pooling (B, C, S) -> (B, C), S = H*W: the pool that ends a
 * ResNet. The S terms of a plane (49 for 7x7) are summed in float; backward
 * spreads dout / S over the plane. */
#include "core/cpu.h"
#include "dtrain/nn.h"

DT_HOT void dt_global_avgpool_forward(float *out, const float *inp, int B, int C, int S) {
    const float inv = 1.0f / (float)S;
    for (size_t p = 0; p < (size_t)B * C; p++) {
        const float *restrict x = inp + p * S;
        float s = 0.0f;
        for (int i = 0; i < S; i++) s += x[i];
        out[p] = s * inv;
    }
}

DT_HOT void dt_global_avgpool_backward(float *dinp, const float *dout, int B, int C, int S) {
    if (!dinp) return;
    const float inv = 1.0f / (float)S;
    for (size_t p = 0; p < (size_t)B * C; p++) {
        float *restrict d = dinp + p * S;
        const float v = dout[p] * inv;
        for (int i = 0; i < S; i++) d[i] += v;
    }
}
