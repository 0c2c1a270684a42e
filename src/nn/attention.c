/* Causal multi-head self-attention over nanoGPT's c_attn layout: token t holds
 * [q | k | v] (3C floats), head h at offset h*HS inside each part. Every (b, h)
 * is three GEMMs reading Q, K, V in place with leading dimension 3C, so nothing
 * is transposed or copied:
 *   forward:  S = scale Q K^T;  att = softmax(S + causal mask);  out = att V
 *   backward: dV += att^T dout;  datt = dout V^T;
 *             dS = att * (datt - rowsum(att * datt));
 *             dQ += scale dS K;  dK += scale dS^T Q
 * The full T x T products are computed and the upper triangle discarded; att
 * holds exact zeros there, so att V and the softmax backward need no mask.
 * Backward scratch is one T x T buffer (datt, then dS in place), reused for
 * every (b, h): dt_attention_scratch_floats = T*T. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

size_t dt_attention_scratch_floats(int B, int T, int C, int NH) {
    return (size_t)T * (size_t)T;
}

DT_HOT void dt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                          int NH) {
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * HS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, scale, q, C3, k,
                        C3, 0.0f, a, T);
            for (int t = 0; t < T; t++) {
                float *restrict row = a + (size_t)t * T;
                float mx = row[0];
                for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
                float s = 0.0f;
                for (int j = 0; j <= t; j++) {
                    row[j] = expf(row[j] - mx);
                    s += row[j];
                }
                float inv = 1.0f / s;
                for (int j = 0; j <= t; j++) row[j] *= inv;
                memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f, a, T, v,
                        C3, 0.0f, o, C);
        }
    }
}

DT_HOT void dt_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH) {
    if (!dqkv) return;
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    float *ds = scratch; /* (T, T) */
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t off = (size_t)b * T * C3 + (size_t)h * HS;
            const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *g = dout + (size_t)b * T * C + (size_t)h * HS;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f, a, T, g, C,
                        1.0f, dv, C3);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, 1.0f, g, C, v, C3,
                        0.0f, ds, T);
            for (int t = 0; t < T; t++) {
                const float *restrict ar = a + (size_t)t * T;
                float *restrict dr = ds + (size_t)t * T;
                float dot = 0.0f;
                for (int j = 0; j <= t; j++) dot += ar[j] * dr[j];
                for (int j = 0; j <= t; j++) dr[j] = ar[j] * (dr[j] - dot);
                memset(dr + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, scale, ds, T, k,
                        C3, 1.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, scale, ds, T, q, C3,
                        1.0f, dk, C3);
        }
    }
}
