/* LayerNorm over the last dimension, as torch.nn.LayerNorm: biased variance,
 * eps DT_LAYERNORM_EPS inside the square root. mean and rstd are saved so the
 * backward need not recompute the statistics. The variance is taken around the
 * mean in a second pass (not E[x^2] - E[x]^2) to avoid cancellation.
 *
 * A row's sums run in 16 lanes (vexp.h's vectors; two accumulators, added
 * lane by lane, then the lanes in order, then the tail past a multiple of 16),
 * as PyTorch's own vectorised kernel sums in lanes: a scalar sum waits on
 * each add's latency: W2's 2048 x 256 forward took 0.94 ms, in lanes 0.15
 * (backward 0.59 -> 0.23; Zen 4, one thread). The helpers are always inlined,
 * so they are compiled inside each DT_HOT clone (core/cpu.h): as separate
 * functions they were baseline x86-64 code and the forward took 0.37 ms.
 * Cost: forward 3 passes over a row, backward 2; O(NC) flops. */
#include "core/cpu.h"
#include "dtrain/nn.h"
#include "vexp.h"

#include <math.h>

__attribute__((always_inline)) static inline float lanes(vf v) {
    float s = 0.0f;
    for (int k = 0; k < VL; k++) s += v[k];
    return s;
}

/* sum of x[c] (sq false) or of (x[c] - m)^2, c < C */
__attribute__((always_inline)) static inline float row_sum(const float *restrict x, int C, float m, bool sq) {
    vf a0 = {0}, a1 = {0};
    int c = 0;
    for (; c + 2 * VL <= C; c += 2 * VL) {
        vf x0 = vload(x + c, VL), x1 = vload(x + c + VL, VL);
        if (sq) {
            x0 -= m;
            x1 -= m;
            x0 *= x0;
            x1 *= x1;
        }
        a0 += x0;
        a1 += x1;
    }
    for (; c + VL <= C; c += VL) {
        vf x0 = vload(x + c, VL);
        if (sq) {
            x0 -= m;
            x0 *= x0;
        }
        a0 += x0;
    }
    float s = lanes(a0 + a1);
    for (; c < C; c++) s += sq ? (x[c] - m) * (x[c] - m) : x[c];
    return s;
}

DT_HOT void dt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *restrict x = inp + (size_t)i * C;
        float *restrict o = out + (size_t)i * C;
        float m = row_sum(x, C, 0.0f, false) / (float)C;
        float v = row_sum(x, C, m, true);
        float r = 1.0f / sqrtf(v / (float)C + DT_LAYERNORM_EPS);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[i] = m;
        rstd[i] = r;
    }
}

/* With xhat = (x - mean) * rstd and g = w * dout:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
DT_HOT void dt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *restrict x = inp + (size_t)i * C;
        const float *restrict g = dout + (size_t)i * C;
        const float m = mean[i], r = rstd[i];
        vf vsg = {0}, vsgx = {0};
        int c = 0;
        for (; c + VL <= C; c += VL) {
            vf xh = (vload(x + c, VL) - m) * r, gc = vload(g + c, VL), gw = vload(w + c, VL) * gc;
            vsg += gw;
            vsgx += gw * xh;
            if (db) vstore(db + c, vload(db + c, VL) + gc, VL);
            vstore(dw + c, vload(dw + c, VL) + xh * gc, VL);
        }
        float sg = lanes(vsg), sgx = lanes(vsgx);
        for (; c < C; c++) {
            float xh = (x[c] - m) * r;
            float gw = w[c] * g[c];
            sg += gw;
            sgx += gw * xh;
            if (db) db[c] += g[c];
            dw[c] += xh * g[c];
        }
        if (!dinp) continue;
        sg /= (float)C;
        sgx /= (float)C;
        float *restrict dx = dinp + (size_t)i * C;
        for (c = 0; c < C; c++) {
            float xh = (x[c] - m) * r;
            dx[c] += r * (w[c] * g[c] - sg - xh * sgx);
        }
    }
}
