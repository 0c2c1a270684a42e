/* Linear layer, out = inp @ w^T + b, with w (OC, IC) as in torch.nn.Linear.
 *
 * Both directions are single dt_sgemm calls (sgemm.c), since a GEMM is the only way to
 * get near-peak throughput; the bias is folded into the forward GEMM by filling
 * the output with it first and accumulating with beta = 1. The _bf16 pair runs
 * the same GEMMs through dt_gemm_bf16 (gemm_bf16.c). */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <string.h>

/* Every row of out = b, for a GEMM to accumulate onto: its beta (1, or 0 without b). */
static float fill_bias(float *out, const float *b, int N, int OC) {
    if (!b) return 0.0f;
    for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof(float));
    return 1.0f;
}

DT_HOT void dt_linear_forward(float *out, const float *inp, const float *w, const float *b,
                       int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) {
        /* Empty reduction: the output is just the bias. */
        for (int i = 0; i < N; i++) {
            if (b) memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof(float));
            else memset(out + (size_t)i * OC, 0, (size_t)OC * sizeof(float));
        }
        return;
    }
    const float beta = fill_bias(out, b, N, OC);
    dt_sgemm(false, true, N, OC, IC, 1.0f, inp, IC, w, IC, beta, out, OC);
}

DT_HOT void dt_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC > 0) {
        /* dinp (N, IC) += dout (N, OC) @ w (OC, IC) */
        if (dinp)
            dt_sgemm(false, false, N, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC);
        /* dw (OC, IC) += dout^T (OC, N) @ inp (N, IC) */
        dt_sgemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    }
    if (db) {
        for (int i = 0; i < N; i++) {
            const float *restrict g = dout + (size_t)i * OC;
            float *restrict d = db;
            for (int o = 0; o < OC; o++) d[o] += g[o];
        }
    }
}

size_t dt_linear_bf16_scratch_floats(int N, int IC, int OC) {
    size_t f = dt_gemm_bf16_scratch_floats(N, OC, IC), x = dt_gemm_bf16_scratch_floats(N, IC, OC),
           w = dt_gemm_bf16_scratch_floats(OC, IC, N);
    return f > x ? (f > w ? f : w) : (x > w ? x : w);
}

void dt_linear_forward_bf16(float *out, const float *inp, const float *w, const float *b, int N, int IC, int OC,
                            float *scratch) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) {
        dt_linear_forward(out, inp, w, b, N, IC, OC);
        return;
    }
    dt_gemm_bf16_bias(false, true, N, OC, IC, inp, IC, w, IC, b, out, OC, scratch);
}

void dt_linear_backward_bf16(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                             int N, int IC, int OC, float *scratch) {
    if (N <= 0 || OC <= 0) return;
    if (IC > 0) {
        if (dinp) dt_gemm_bf16(false, false, N, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC, scratch);
        dt_gemm_bf16(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC, scratch);
    }
    if (!db) return;
    float r[256];
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o += 256) {
            const int n = OC - o < 256 ? OC - o : 256;
            dt_round_bf16(r, dout + (size_t)i * OC + o, (size_t)n);
            for (int k = 0; k < n; k++) db[o + k] += r[k];
        }
}
