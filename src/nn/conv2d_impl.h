/* Private to src/nn (and to the tests and benchmarks that compare them): the
 * two convolution algorithms behind dt_conv2d_forward / dt_conv2d_backward.
 * conv2d.c runs the direct kernel (conv2d_direct.c) where dt_conv2d_direct_ok
 * says it applies and im2col + GEMM (conv2d.c) elsewhere. Each has the public
 * functions' contracts (dtrain/nn.h) with its own scratch size in floats; so
 * has the bf16 convolution with a thread count. */
#ifndef DT_NN_CONV2D_IMPL_H
#define DT_NN_CONV2D_IMPL_H

#include "dtrain/nn.h"

#include <stdbool.h>
#include <stddef.h>

/* Stride 1, pad smaller than the kernel in both directions, kernel not 1x1. */
bool dt_conv2d_direct_ok(const dt_conv2d_dims *d);
/* The direct kernel runs on up to `threads` threads (the caller's and
 * threads-1 started per call), each with its own planes in the scratch:
 * dt_conv2d_direct_scratch_floats(d, T) has room for T of them. Results are
 * the same for every thread count. */
size_t dt_conv2d_direct_scratch_floats(const dt_conv2d_dims *d, int threads);
void dt_conv2d_direct_forward(float *out, float *scratch, const float *inp, const float *w,
                              const float *b, const dt_conv2d_dims *d, int threads);
void dt_conv2d_direct_backward(float *dinp, float *dw, float *db, float *scratch,
                               const float *dout, const float *inp, const float *w,
                               const dt_conv2d_dims *d, int threads);

size_t dt_conv2d_im2col_scratch_floats(const dt_conv2d_dims *d);
void dt_conv2d_im2col_forward(float *out, float *scratch, const float *inp, const float *w,
                              const float *b, const dt_conv2d_dims *d);
void dt_conv2d_im2col_backward(float *dinp, float *dw, float *db, float *scratch,
                               const float *dout, const float *inp, const float *w,
                               const dt_conv2d_dims *d);

/* The bf16 convolution (dt_conv2d_forward_bf16 / dt_conv2d_backward_bf16,
 * im2col + dt_gemm_bf16, conv2d.c) on up to `threads` threads, the public
 * ones' on dt_nn_threads(): dt_conv2d_bf16_scratch_floats_on(d, T) has room for
 * T of them. Results are the same for every thread count. */
size_t dt_conv2d_bf16_scratch_floats_on(const dt_conv2d_dims *d, int threads);
void dt_conv2d_forward_bf16_on(float *out, float *scratch, const float *inp, const float *w, const float *b,
                               const dt_conv2d_dims *d, int threads);
void dt_conv2d_backward_bf16_on(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                                const float *inp, const float *w, const dt_conv2d_dims *d, int threads);

#endif
