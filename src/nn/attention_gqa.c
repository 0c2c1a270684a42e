/* Causal grouped-query attention (LLaMA 2/3, Mistral): NH query heads share
 * NKV key/value heads, query head h reading kv head h / (NH / NKV), which is
 * what Hugging Face's repeat_kv does by copying. Token t of qkv holds
 *   [q (NH*HS) | k (NKV*HS) | v (NKV*HS)],  width C3 = (NH + 2*NKV) * HS,
 * the layout of one fused projection (nanoGPT's c_attn when NKV = NH, which
 * is what attention.c runs). Per (b, h), with K and V read in place from the
 * shared kv head (leading
 * dimension C3, nothing repeated or copied):
 *   forward:  S = scale Q K^T;  att = softmax(S + causal mask);  out = att V
 *   backward: dV += att^T dout;  datt = dout V^T;
 *             dS = att * (datt - rowsum(att * datt));
 *             dQ += scale dS K;  dK += scale dS^T Q
 * The query heads of a group add into the same dK and dV (the GEMMs run with
 * beta = 1), which is repeat_kv's backward, a sum over the group.
 * Backward scratch: one T x T buffer (datt, then dS in place) reused for every
 * (b, h): dt_attention_gqa_scratch_floats = T*T.
 * The _bf16 pair runs the same six GEMMs through dt_gemm_bf16 (gemm_bf16.c),
 * which rounds their operands to bf16 while packing them, the probabilities
 * and dS among them; its packing scratch follows the T x T buffer. */
#include "core/cpu.h"
#include "vexp.h"
#include "dtrain/core.h"
#include "dtrain/nn.h"
#include "gemm_pick.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

size_t dt_attention_gqa_scratch_floats(int B, int T, int NH, int NKV, int HS) {
    return (size_t)T * (size_t)T;
}

/* Offsets inside one token's row of qkv. */
static size_t q_off(int h, int HS) { return (size_t)h * HS; }
static size_t k_off(int kvh, int NH, int HS) { return (size_t)(NH + kvh) * HS; }
static size_t v_off(int kvh, int NH, int NKV, int HS) { return (size_t)(NH + NKV + kvh) * HS; }

/* Row-wise causal softmax of the (T, T) scores in place; zeros above the
 * diagonal, so att V and the softmax backward need no mask. The exponentials
 * run 16 at a time through vexp.h (~2 ulp; a scalar libm expf per score was
 * 2.6% of a W2 step); the last partial block of a row goes through a padded
 * copy, so every score takes the same exp. */
static inline __attribute__((always_inline)) void causal_softmax(float *a, int T) {
    for (int t = 0; t < T; t++) {
        float *restrict row = a + (size_t)t * T;
        const int n = t + 1, full = n / VL * VL;
        float mx = row[0];
        for (int j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
        vf acc = {0};
        for (int j = 0; j < full; j += VL) {
            vf x;
            memcpy(&x, row + j, sizeof x);
            x = vexp(x - mx);
            memcpy(row + j, &x, sizeof x);
            acc += x;
        }
        float s = 0.0f;
        for (int l = 0; l < VL; l++) s += acc[l];
        if (full < n) {
            float pad[VL];
            for (int l = 0; l < VL; l++) pad[l] = full + l < n ? row[full + l] : mx;
            vf x;
            memcpy(&x, pad, sizeof x);
            x = vexp(x - mx);
            memcpy(pad, &x, sizeof x);
            for (int l = 0; l < n - full; l++) s += (row[full + l] = pad[l]);
        }
        const float inv = 1.0f / s;
        for (int j = 0; j < n; j++) row[j] *= inv;
        memset(row + n, 0, (size_t)(T - n) * sizeof(float));
    }
}

DT_HOT static void forward(float *out, float *att, float *pack, const float *qkv, int B, int T, int NH, int NKV,
                           int HS) {
    DT_ASSERT(NKV >= 1 && NH % NKV == 0);
    const int C3 = (NH + 2 * NKV) * HS, C = NH * HS, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) {
        const float *row0 = qkv + (size_t)b * T * C3;
        for (int h = 0; h < NH; h++) {
            const int kvh = h / group;
            const float *q = row0 + q_off(h, HS);
            const float *k = row0 + k_off(kvh, NH, HS);
            const float *v = row0 + v_off(kvh, NH, NKV, HS);
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * HS;
            dt_nn_gemm(pack, false, true, T, T, HS, scale, q, C3, k, C3, 0.0f, a, T);
            causal_softmax(a, T);
            dt_nn_gemm(pack, false, false, T, HS, T, 1.0f, a, T, v, C3, 0.0f, o, C);
        }
    }
}

/* ds: the (T, T) buffer for datt and dS. */
DT_HOT static void backward(float *dqkv, float *ds, float *pack, const float *dout, const float *qkv,
                            const float *att, int B, int T, int NH, int NKV, int HS) {
    DT_ASSERT(NKV >= 1 && NH % NKV == 0);
    const int C3 = (NH + 2 * NKV) * HS, C = NH * HS, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) {
        const size_t row0 = (size_t)b * T * C3;
        for (int h = 0; h < NH; h++) {
            const int kvh = h / group;
            const float *q = qkv + row0 + q_off(h, HS);
            const float *k = qkv + row0 + k_off(kvh, NH, HS);
            const float *v = qkv + row0 + v_off(kvh, NH, NKV, HS);
            float *dq = dqkv + row0 + q_off(h, HS);
            float *dk = dqkv + row0 + k_off(kvh, NH, HS);
            float *dv = dqkv + row0 + v_off(kvh, NH, NKV, HS);
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *g = dout + (size_t)b * T * C + (size_t)h * HS;
            dt_nn_gemm(pack, true, false, T, HS, T, 1.0f, a, T, g, C, 1.0f, dv, C3);
            dt_nn_gemm(pack, false, true, T, T, HS, 1.0f, g, C, v, C3, 0.0f, ds, T);
            for (int t = 0; t < T; t++) {
                const float *restrict ar = a + (size_t)t * T;
                float *restrict dr = ds + (size_t)t * T;
                float dot = 0.0f;
                for (int j = 0; j <= t; j++) dot += ar[j] * dr[j];
                for (int j = 0; j <= t; j++) dr[j] = ar[j] * (dr[j] - dot);
                memset(dr + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
            }
            dt_nn_gemm(pack, false, false, T, HS, T, scale, ds, T, k, C3, 1.0f, dq, C3);
            dt_nn_gemm(pack, true, false, T, HS, T, scale, ds, T, q, C3, 1.0f, dk, C3);
        }
    }
}

void dt_attention_gqa_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV, int HS) {
    forward(out, att, NULL, qkv, B, T, NH, NKV, HS);
}

void dt_attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                               int B, int T, int NH, int NKV, int HS) {
    if (dqkv) backward(dqkv, scratch, NULL, dout, qkv, att, B, T, NH, NKV, HS);
}

/* The (T, T) buffer of the backward, then dt_gemm_bf16's packing for the
 * larger of the two shapes, (T, T, HS) and (T, HS, T). */
size_t dt_attention_gqa_bf16_scratch_floats(int B, int T, int NH, int NKV, int HS) {
    size_t s = dt_gemm_bf16_scratch_floats(T, T, HS), p = dt_gemm_bf16_scratch_floats(T, HS, T);
    return dt_attention_gqa_scratch_floats(B, T, NH, NKV, HS) + (s > p ? s : p);
}

void dt_attention_gqa_forward_bf16(float *out, float *att, float *scratch, const float *qkv, int B, int T, int NH,
                                   int NKV, int HS) {
    forward(out, att, scratch + dt_attention_gqa_scratch_floats(B, T, NH, NKV, HS), qkv, B, T, NH, NKV, HS);
}

void dt_attention_gqa_backward_bf16(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                    const float *att, int B, int T, int NH, int NKV, int HS) {
    if (dqkv)
        backward(dqkv, scratch, scratch + dt_attention_gqa_scratch_floats(B, T, NH, NKV, HS), dout, qkv, att, B, T,
                 NH, NKV, HS);
}
