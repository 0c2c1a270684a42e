/* RMSNorm over the last dimension, as LLaMA's (Hugging Face LlamaRMSNorm):
 *   out = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps),
 * no mean subtracted, no bias. rstd is saved for backward. Sums run in float
 * as in layernorm.c: rows are a model width (hundreds to thousands) of O(1)
 * terms, all of one sign here. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <math.h>

DT_HOT void dt_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                               int C, float eps) {
    for (int i = 0; i < N; i++) {
        const float *restrict x = inp + (size_t)i * C;
        float *restrict o = out + (size_t)i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        const float r = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        rstd[i] = r;
    }
}

/* With xhat = x * rstd and g = w * dout (rstd depends on every x of the row):
 *   dx = rstd * (g - xhat * mean(g * xhat)),  dw += dout * xhat. */
DT_HOT void dt_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                const float *w, const float *rstd, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *restrict x = inp + (size_t)i * C;
        const float *restrict g = dout + (size_t)i * C;
        const float r = rstd[i];
        float sgx = 0.0f;
        for (int c = 0; c < C; c++) {
            const float xh = x[c] * r;
            sgx += w[c] * g[c] * xh;
            dw[c] += g[c] * xh;
        }
        if (!dinp) continue;
        sgx /= (float)C;
        float *restrict dx = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) dx[c] += r * (w[c] * g[c] - x[c] * r * sgx);
    }
}
