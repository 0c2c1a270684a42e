/* LayerNorm over the last dimension, as torch.nn.LayerNorm: biased variance,
 * eps DT_LAYERNORM_EPS inside the square root. mean and rstd are saved so the
 * backward need not recompute the statistics. The variance is taken around the
 * mean in a second pass (not E[x^2] - E[x]^2) to avoid cancellation. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <math.h>

DT_HOT void dt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *restrict x = inp + (size_t)i * C;
        float *restrict o = out + (size_t)i * C;
        float s = 0.0f;
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / (float)C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
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
        float sg = 0.0f, sgx = 0.0f;
        for (int c = 0; c < C; c++) {
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
        for (int c = 0; c < C; c++) {
            float xh = (x[c] - m) * r;
            dx[c] += r * (w[c] * g[c] - sg - xh * sgx);
        }
    }
}
