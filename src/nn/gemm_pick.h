/* Private to src/nn: the kernels that run their products in fp32 or, under
 * --precision bf16 on a CPU with AVX512-BF16, through dt_gemm_bf16 (the
 * im2col convolution, attention's per-head products) pick the GEMM here. */
#ifndef DT_NN_GEMM_PICK_H
#define DT_NN_GEMM_PICK_H

#include "dtrain/nn.h"

#include <cblas.h>
#include <stdbool.h>

/* Row-major C = alpha op(A) op(B) + beta C: cblas_sgemm, or dt_gemm_bf16
 * (operands rounded to bf16 while packed, sums in fp32) when pack, its
 * packing scratch, is given. */
static inline void dt_nn_gemm(float *pack, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                              int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (pack) {
        dt_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, pack);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                lda, B, ldb, beta, C, ldc);
}

#endif
