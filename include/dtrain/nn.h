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

#ifdef __cplusplus
}
#endif
#endif
