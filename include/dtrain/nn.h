/* dtrain layer kernels: pure forward/backward functions.
 *
 * Conventions (llm.c style):
 * - Outputs first, then saved activations, then inputs, parameters, dimensions.
 * - Forward functions WRITE their outputs.
 * - Backward functions ADD into every gradient they produce (parameter gradients
 *   and input gradients alike); the caller zeroes them. A NULL input-gradient
 *   pointer means "not needed" (e.g. the first layer) and is skipped.
 * - No allocation, no communication, no global state. Scratch memory, where a
 *   kernel needs it, is passed in by the caller with its size stated.
 * - Row-major, C order. Linear weights are (out, in) as in torch.nn.Linear.
 */
#ifndef DTRAIN_NN_H
#define DTRAIN_NN_H

#include "dtrain/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- linear: out = inp @ w^T + b -------------------------------------- */
void dt_linear_forward(float *out,       /* (N, OC) */
                       const float *inp, /* (N, IC) */
                       const float *w,   /* (OC, IC) */
                       const float *b,   /* (OC) or NULL */
                       int N, int IC, int OC);
void dt_linear_backward(float *dinp,       /* (N, IC) or NULL */
                        float *dw,         /* (OC, IC) */
                        float *db,         /* (OC) or NULL */
                        const float *dout, /* (N, OC) */
                        const float *inp,  /* (N, IC) */
                        const float *w,    /* (OC, IC) */
                        int N, int IC, int OC);

/* ---- ReLU ---------------------------------------------------------------
 * Backward uses the forward OUTPUT (out > 0), so forward may run in place. */
void dt_relu_forward(float *out, const float *inp, size_t n);
void dt_relu_backward(float *dinp, const float *dout, const float *out, size_t n);
/* dst[i] = out[i] > 0 ? dout[i] : 0, overwriting: the gradient before a ReLU
 * fused into a layer, in one pass (no zero-fill and add). */
void dt_relu_mask(float *dst, const float *dout, const float *out, size_t n);

/* ---- GELU, tanh form (GPT-2): 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) --- */
void dt_gelu_forward(float *out, const float *inp, size_t n);
void dt_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n);

/* ---- LayerNorm over the last dimension, eps 1e-5 ------------------------- */
#define DT_LAYERNORM_EPS 1e-5f
void dt_layernorm_forward(float *out,   /* (N, C) */
                          float *mean,  /* (N) saved */
                          float *rstd,  /* (N) saved */
                          const float *inp, /* (N, C) */
                          const float *w,   /* (C) */
                          const float *b,   /* (C) */
                          int N, int C);
void dt_layernorm_backward(float *dinp, /* (N, C) */
                           float *dw,   /* (C) */
                           float *db,   /* (C) */
                           const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int N, int C);

/* ---- embedding: out[i] = table[ids[i]] ----------------------------------
 * ids must be in [0, V); callers validate data before it reaches a kernel. */
void dt_embedding_forward(float *out,            /* (N, C) */
                          const int32_t *ids,    /* (N) */
                          const float *table,    /* (V, C) */
                          int N, int C);
void dt_embedding_backward(float *dtable,        /* (V, C) */
                           const float *dout,    /* (N, C) */
                           const int32_t *ids, int N, int C);

/* ---- causal multi-head self-attention ------------------------------------
 * qkv is the output of c_attn as in nanoGPT: per token [q | k | v], each of
 * width C = NH * HS, heads contiguous inside each (head h at h*HS).
 * out = softmax(q k^T / sqrt(HS) + causal mask) v, heads concatenated.
 * `att` saves the probabilities (B, NH, T, T) for backward (upper triangle 0).
 * Backward scratch: dt_attention_scratch_floats(B,T,C,NH) floats. */
void dt_attention_forward(float *out,       /* (B, T, C) */
                          float *att,       /* (B, NH, T, T) saved */
                          const float *qkv, /* (B, T, 3C) */
                          int B, int T, int C, int NH);
size_t dt_attention_scratch_floats(int B, int T, int C, int NH);
void dt_attention_backward(float *dqkv,       /* (B, T, 3C) */
                           float *scratch,    /* dt_attention_scratch_floats */
                           const float *dout, /* (B, T, C) */
                           const float *qkv, const float *att,
                           int B, int T, int C, int NH);

/* ---- softmax cross-entropy (fused) ---------------------------------------
 * losses[i] = -log softmax(logits[i])[targets[i]]; probs saved for backward.
 * Backward: dlogits[i] += scale * (probs[i] - onehot(targets[i])), where scale is
 * dL/dlosses[i] (1/N for a mean over N terms). */
void dt_crossentropy_forward(float *losses,         /* (N) */
                             float *probs,          /* (N, V) saved */
                             const float *logits,   /* (N, V) */
                             const int32_t *targets,/* (N) in [0, V) */
                             int N, int V);
void dt_crossentropy_backward(float *dlogits,        /* (N, V) */
                              const float *probs,
                              const int32_t *targets,
                              float scale, int N, int V);

/* ---- conv2d (im2col + GEMM), NCHW, weights (OC, IC, KH, KW) ---------------
 * OH = (H + 2*pad - KH) / stride + 1, likewise OW.
 * scratch: dt_conv2d_scratch_floats(...) floats (column buffers). */
typedef struct dt_conv2d_dims {
    int B, IC, H, W, OC, KH, KW, stride, pad;
} dt_conv2d_dims;
int dt_conv2d_out_h(const dt_conv2d_dims *d);
int dt_conv2d_out_w(const dt_conv2d_dims *d);
size_t dt_conv2d_scratch_floats(const dt_conv2d_dims *d);
void dt_conv2d_forward(float *out,        /* (B, OC, OH, OW) */
                       float *scratch,
                       const float *inp,  /* (B, IC, H, W) */
                       const float *w,    /* (OC, IC, KH, KW) */
                       const float *b,    /* (OC) or NULL */
                       const dt_conv2d_dims *d);
void dt_conv2d_backward(float *dinp,       /* (B, IC, H, W) or NULL */
                        float *dw,         /* (OC, IC, KH, KW) */
                        float *db,         /* (OC) or NULL */
                        float *scratch,
                        const float *dout, /* (B, OC, OH, OW) */
                        const float *inp, const float *w,
                        const dt_conv2d_dims *d);

/* ---- max-pool 2x2, stride 2 (H, W even) ----------------------------------
 * argmax saves, per output element, the flat index (within its (H, W) plane)
 * of the winning input; ties go to the first in row-major order (as PyTorch). */
void dt_maxpool2x2_forward(float *out,       /* (B, C, H/2, W/2) */
                           int32_t *argmax,  /* (B, C, H/2, W/2) saved */
                           const float *inp, /* (B, C, H, W) */
                           int B, int C, int H, int W);
void dt_maxpool2x2_backward(float *dinp,       /* (B, C, H, W) */
                            const float *dout, /* (B, C, H/2, W/2) */
                            const int32_t *argmax,
                            int B, int C, int H, int W);

/* ==== layers for CNNs beyond LeNet and for LLaMA-style transformers ========== */

/* ---- dropout (inverted) --------------------------------------------------
 * out = inp * keep / (1 - p), keep[r][j] = (u >= p), u the j-th
 * dt_rng_uniform of the Philox stream dt_rng_init(seed, key0 + r). The mask is
 * a pure function of (seed, key0 + r, j): backward regenerates it (nothing is
 * saved), and a caller holding rows [r0, r0 + N) of a larger tensor passes
 * key0 + r0 to get that slice of the same mask. p in [0, 1); p == 0 copies.
 * Forward may run in place (out == inp). */
void dt_dropout_forward(float *out,       /* (N, D) */
                        const float *inp, /* (N, D) */
                        int N, int D, float p, uint64_t seed, uint64_t key0);
void dt_dropout_backward(float *dinp,       /* (N, D) or NULL */
                         const float *dout, /* (N, D) */
                         int N, int D, float p, uint64_t seed, uint64_t key0);

/* ---- batch norm over x (N, C, S), statistics per channel over (n, s) -------
 * S = H*W for BatchNorm2d, 1 for BatchNorm1d on (N, C). Train mode is split so
 * that a caller can all-reduce the per-channel sums across data-parallel ranks
 * between the steps (SyncBatchNorm); without sync, count = N*S:
 *   dt_batchnorm_sum -> mean = sum / count
 *   dt_batchnorm_sqdev -> var = sq / count (biased), rstd = 1 / sqrt(var + eps)
 *   dt_batchnorm_forward
 *   dt_batchnorm_bwd_sums -> gsums (the group's) -> dt_batchnorm_backward
 * Eval mode is dt_batchnorm_forward with the running statistics. The running
 * statistics themselves (PyTorch: momentum 0.1, running_var from the unbiased
 * var * count / (count - 1)) are the caller's. Reductions run in double. */
#define DT_BATCHNORM_EPS 1e-5f
void dt_batchnorm_sum(float *sum,       /* (C) written: sum of x */
                      const float *inp, /* (N, C, S) */
                      int N, int C, int S);
void dt_batchnorm_sqdev(float *sq,        /* (C) written: sum (x - mean)^2 */
                        const float *inp, /* (N, C, S) */
                        const float *mean, /* (C) */
                        int N, int C, int S);
void dt_batchnorm_forward(float *out,        /* (N, C, S) */
                          const float *inp,  /* (N, C, S) */
                          const float *mean, /* (C) */
                          const float *rstd, /* (C) */
                          const float *gamma, /* (C) */
                          const float *beta, /* (C) */
                          int N, int C, int S);
/* Local sums for backward: sums[c] = sum dy, sums[C + c] = sum dy * xhat,
 * xhat = (x - mean) * rstd; written. */
void dt_batchnorm_bwd_sums(float *sums,       /* (2C) written */
                           const float *dout, /* (N, C, S) */
                           const float *inp,  /* (N, C, S) */
                           const float *mean, /* (C) */
                           const float *rstd, /* (C) */
                           int N, int C, int S);
/* dgamma += LOCAL sum dy * xhat, dbeta += LOCAL sum dy (recomputed here: the
 * parameter gradients are reduced later by the caller's data parallelism);
 * dinp += gamma * rstd * (dy - gsums[c] / count - xhat * gsums[C + c] / count),
 * gsums the dt_batchnorm_bwd_sums summed over every rank of the group (the
 * local ones without sync) and count the elements per channel over the group
 * (N_total * S). dinp, dgamma and dbeta may each be NULL (skipped). */
void dt_batchnorm_backward(float *dinp,        /* (N, C, S) or NULL */
                           float *dgamma,      /* (C) or NULL */
                           float *dbeta,       /* (C) or NULL */
                           const float *dout,  /* (N, C, S) */
                           const float *inp,   /* (N, C, S) */
                           const float *mean,  /* (C) */
                           const float *rstd,  /* (C) */
                           const float *gamma, /* (C) */
                           const float *gsums, /* (2C) */
                           double count, int N, int C, int S);

/* ---- average pooling, NCHW ----------------------------------------------
 * torch.nn.AvgPool2d(K, stride, pad), count_include_pad=True, ceil_mode=False:
 * OH = (H + 2*pad - K) / stride + 1, likewise OW; every window divides by K*K.
 * 2*pad <= K (PyTorch's limit). */
void dt_avgpool2d_forward(float *out,       /* (B, C, OH, OW) */
                          const float *inp, /* (B, C, H, W) */
                          int B, int C, int H, int W, int K, int stride, int pad);
void dt_avgpool2d_backward(float *dinp,       /* (B, C, H, W) or NULL */
                           const float *dout, /* (B, C, OH, OW) */
                           int B, int C, int H, int W, int K, int stride, int pad);
/* Global average pool: out[b][c] = mean over S of inp[b][c] (S = H*W). */
void dt_global_avgpool_forward(float *out,       /* (B, C) */
                               const float *inp, /* (B, C, S) */
                               int B, int C, int S);
void dt_global_avgpool_backward(float *dinp,       /* (B, C, S) or NULL */
                                const float *dout, /* (B, C) */
                                int B, int C, int S);

/* ---- SiLU: x * sigmoid(x) --------------------------------------------- */
void dt_silu_forward(float *out,       /* (n) */
                     const float *inp, /* (n) */
                     size_t n);
void dt_silu_backward(float *dinp,       /* (n) or NULL */
                      const float *dout, /* (n) */
                      const float *inp,  /* (n) */
                      size_t n);

/* ---- tanh ------------------------------------------------------------------
 * Backward uses the forward OUTPUT (1 - out^2), so forward may run in place. */
void dt_tanh_forward(float *out,       /* (n) */
                     const float *inp, /* (n) */
                     size_t n);
void dt_tanh_backward(float *dinp,       /* (n) or NULL */
                      const float *dout, /* (n) */
                      const float *out,  /* (n) forward output */
                      size_t n);

/* ---- RMSNorm over the last dimension (LLaMA) -------------------------------
 * out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); rstd saved. */
void dt_rmsnorm_forward(float *out,       /* (N, C) */
                        float *rstd,      /* (N) saved */
                        const float *inp, /* (N, C) */
                        const float *w,   /* (C) */
                        int N, int C, float eps);
void dt_rmsnorm_backward(float *dinp,       /* (N, C) or NULL */
                         float *dw,         /* (C) */
                         const float *dout, /* (N, C) */
                         const float *inp,  /* (N, C) */
                         const float *w,    /* (C) */
                         const float *rstd, /* (N) */
                         int N, int C);

/* ---- SwiGLU's elementwise part: out = silu(gate) * up ---------------------
 * out may alias gate or up. dgate and dup may each be NULL. */
void dt_swiglu_forward(float *out,        /* (n) */
                       const float *gate, /* (n) */
                       const float *up,   /* (n) */
                       size_t n);
void dt_swiglu_backward(float *dgate,      /* (n) or NULL */
                        float *dup,        /* (n) or NULL */
                        const float *dout, /* (n) */
                        const float *gate, /* (n) */
                        const float *up,   /* (n) */
                        size_t n);

/* ---- rotary position embedding, in place (Hugging Face LLaMA) -------------
 * rotate_half convention: for head h < nheads of token t, pair (i, i + HS/2),
 * i < HS/2, turns by t * theta^(-2i/HS) (inv_freq computed in float as HF
 * does). x[b, t] starts at x + (b*T + t) * row_stride, head h at + h*HS, so
 * q and k can be rotated inside a fused qkv buffer. dir = +1 rotates
 * (forward); dir = -1 applies the inverse rotation, which is the backward of a
 * gradient (in place, not added). HS even. */
void dt_rope_apply(float *x, /* (B, T, row_stride), nheads * HS used per row */
                   int B, int T, int nheads, int HS, size_t row_stride, float theta, int dir);

/* ---- causal grouped-query attention ----------------------------------------
 * qkv per token: [q (NH heads) | k (NKV heads) | v (NKV heads)], each head HS
 * wide; query head h uses kv head h / (NH / NKV) (HF repeat_kv); NH % NKV == 0.
 * Scale 1/sqrt(HS); att saves the probabilities (zeros above the diagonal).
 * With NKV == NH it computes what dt_attention_forward computes (not
 * necessarily bitwise). Backward scratch: dt_attention_gqa_scratch_floats. */
void dt_attention_gqa_forward(float *out,       /* (B, T, NH*HS) */
                              float *att,       /* (B, NH, T, T) saved */
                              const float *qkv, /* (B, T, (NH + 2*NKV)*HS) */
                              int B, int T, int NH, int NKV, int HS);
size_t dt_attention_gqa_scratch_floats(int B, int T, int NH, int NKV, int HS);
void dt_attention_gqa_backward(float *dqkv,       /* (B, T, (NH + 2*NKV)*HS) or NULL */
                               float *scratch,    /* dt_attention_gqa_scratch_floats */
                               const float *dout, /* (B, T, NH*HS) */
                               const float *qkv,  /* (B, T, (NH + 2*NKV)*HS) */
                               const float *att,  /* (B, NH, T, T) */
                               int B, int T, int NH, int NKV, int HS);

/* ---- mean squared error per row --------------------------------------------
 * losses[i] = sum_j (pred - target)^2 / D. Backward: dpred += scale * 2 *
 * (pred - target) / D; scale 1/N gives torch.nn.MSELoss() (mean over N*D). */
void dt_mse_forward(float *losses,       /* (N) */
                    const float *pred,   /* (N, D) */
                    const float *target, /* (N, D) */
                    int N, int D);
void dt_mse_backward(float *dpred,        /* (N, D) or NULL */
                     const float *pred,   /* (N, D) */
                     const float *target, /* (N, D) */
                     float scale, int N, int D);

/* ---- fp32 GEMM ---------------------------------------------------------------------------
 * C (M, N) = alpha op(A) op(B) + beta C, row-major, op(A) (M, K) = A or, with
 * transa, A^T (A stored (K, M)); op(B) (K, N) likewise; beta = 0: C is not
 * read. The library's fp32 products all run here: oneDNN's sgemm on an AVX-512
 * CPU (when built with libdnnl), OpenBLAS's elsewhere (sgemm.c says why), on
 * as many threads as the BLAS has (--threads). */
void dt_sgemm(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
              int ldb, float beta, float *C, int ldc);
/* Chooses dt_sgemm's library for the process: "auto" (or NULL/empty: the
 * default above), "openblas" or "onednn" (the value of DTRAIN_SGEMM for the
 * CLI). DT_ERR_INVALID for another name, DT_ERR_UNSUPPORTED for onednn in a
 * build without it; the choice is then unchanged. Call before training starts. */
dt_status dt_sgemm_use(const char *name);
/* "onednn" or "openblas": what dt_sgemm runs (the choice made on first use). */
const char *dt_sgemm_library(void);

/* ---- bf16 and fp16 operands ------------------------------------------------------------
 * dst[i] = src[i] rounded to bf16 precision (round to nearest even; overflow to
 * inf; NaN stays NaN), still stored as fp32. dst may equal src. */
void dt_round_bf16(float *dst, const float *src, size_t n);
/* dst[i] = src[i] rounded to IEEE half precision (round to nearest even; above
 * 65504 to inf; below 2^-14 to a multiple of 2^-24, so below 2^-25 to zero; NaN
 * stays NaN), still stored as fp32: --precision fp16's operands. dst may equal src. */
void dt_round_fp16(float *dst, const float *src, size_t n);

/* C (M, N) = alpha op(A) op(B) + beta C, row-major, op(A) (M, K) = A or, with
 * transa, A^T (A stored (K, M)); op(B) (K, N) likewise. Both operands rounded
 * to bf16 as by dt_round_bf16, products summed in fp32 (their order is not
 * cblas_sgemm's; subnormal bf16 inputs count as zero). beta = 0: C is not read.
 * scratch: dt_gemm_bf16_scratch_floats(M, N, K) floats. Only where
 * dt_gemm_bf16_available() (AVX512-BF16); elsewhere it does nothing. */
bool dt_gemm_bf16_available(void);
size_t dt_gemm_bf16_scratch_floats(int M, int N, int K);
void dt_gemm_bf16(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc, float *scratch);
/* C = op(A) op(B) + bias (bias[j] added to every row's column j; NULL: none),
 * as dt_gemm_bf16 with alpha 1 on a C filled with the bias and beta 1 (the
 * same bits), without that pass over C. */
void dt_gemm_bf16_bias(bool transa, bool transb, int M, int N, int K, const float *A, int lda, const float *B,
                       int ldb, const float *bias, float *C, int ldc, float *scratch);

/* dt_linear_forward / dt_linear_backward through dt_gemm_bf16 (only where it is
 * available): operands rounded to bf16, and the bias gradient summed from the
 * rounded output gradient, as under PyTorch's bf16 autocast. scratch:
 * dt_linear_bf16_scratch_floats(N, IC, OC) floats. */
size_t dt_linear_bf16_scratch_floats(int N, int IC, int OC);
void dt_linear_forward_bf16(float *out, const float *inp, const float *w, const float *b, int N, int IC, int OC,
                            float *scratch);
void dt_linear_backward_bf16(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                             int N, int IC, int OC, float *scratch);

/* dt_conv2d_forward / dt_conv2d_backward through dt_gemm_bf16 (only where it is
 * available): im2col and all three products (output, input gradient, weight
 * gradient) with their operands rounded to bf16 while packed, sums in fp32; the
 * bias stays fp32 and its gradient is summed from the rounded output gradient,
 * as under PyTorch's bf16 autocast. Any stride and padding. scratch:
 * dt_conv2d_bf16_scratch_floats(d) floats. */
size_t dt_conv2d_bf16_scratch_floats(const dt_conv2d_dims *d);
void dt_conv2d_forward_bf16(float *out, float *scratch, const float *inp, const float *w, const float *b,
                            const dt_conv2d_dims *d);
void dt_conv2d_backward_bf16(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                             const float *inp, const float *w, const dt_conv2d_dims *d);

/* dt_attention_gqa_forward / dt_attention_gqa_backward with the per-head
 * products (q k^T, p v; backward p^T dout, dout v^T, dS k, dS^T q) through
 * dt_gemm_bf16 (only where it is available): their operands, the softmax
 * probabilities p and the softmax gradient dS included, rounded to bf16 while
 * packed, as under PyTorch's bf16 autocast; the softmax and its gradient run in
 * fp32 and att saves fp32 probabilities. scratch (forward and backward):
 * dt_attention_gqa_bf16_scratch_floats floats. */
size_t dt_attention_gqa_bf16_scratch_floats(int B, int T, int NH, int NKV, int HS);
void dt_attention_gqa_forward_bf16(float *out, float *att, float *scratch, const float *qkv, int B, int T, int NH,
                                   int NKV, int HS);
void dt_attention_gqa_backward_bf16(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                    const float *att, int B, int T, int NH, int NKV, int HS);

#ifdef __cplusplus
}
#endif
#endif
