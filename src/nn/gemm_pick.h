/* Private to src/nn: the kernels that run their products in fp32 or, under
 * --precision bf16 on a CPU with AVX512-BF16, through dt_gemm_bf16 (the
 * im2col convolution, attention's per-head products) pick the GEMM here. */
#ifndef DT_NN_GEMM_PICK_H
#define DT_NN_GEMM_PICK_H

#include "dtrain/nn.h"
#include "parts.h"

#include <stdbool.h>

/* dt_gemm_bf16 on at most `threads` threads instead of dt_nn_threads(), for
 * a caller that shares out its work itself (the bf16 convolution runs one
 * GEMM a thread); the same results whatever the count (gemm_bf16.c). */
void dt_gemm_bf16_on(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc, float *scratch, int threads);

/* Row-major C = alpha op(A) op(B) + beta C: dt_sgemm (on the BLAS's
 * threads), or dt_gemm_bf16_on up to `threads` (operands rounded to bf16 while
 * packed, sums in fp32) when pack, its packing scratch, is given. */
static inline void dt_nn_gemm_on(float *pack, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                                 int lda, const float *B, int ldb, float beta, float *C, int ldc, int threads) {
    if (pack) {
        dt_gemm_bf16_on(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, pack, threads);
        return;
    }
    dt_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* dt_nn_gemm_on with as many threads as the BLAS has (parts.h). */
static inline void dt_nn_gemm(float *pack, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                              int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    dt_nn_gemm_on(pack, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, dt_nn_threads());
}

#endif
