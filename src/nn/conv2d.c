/* conv2d, NCHW, weights (OC, IC, KH, KW): im2col + one GEMM per chunk of samples,
 * and the public entry points, which run the direct kernel (conv2d_direct.c)
 * instead where dt_conv2d_direct_ok says it applies (stride 1, pad < kernel,
 * not 1x1: W3's layers run 1.4-1.6x faster there, bench/bench_conv.c), on as
 * many threads as the BLAS has.
 *
 * With K = IC*KH*KW and P = OH*OW, im2col lays a chunk of nb samples out as
 * col (K, nb*P): row (c, kh, kw) matches the flattening of W, column (s, oh, ow).
 * Then
 *   forward:  Y (OC, nb*P) = W (OC, K) @ col            -> scattered to NCHW + bias
 *   backward: dW (OC, K) += dY (OC, nb*P) @ col^T        (col recomputed from inp)
 *             dcol (K, nb*P) = W^T @ dY;  col2im adds dcol into dinp
 * Chunking: a GEMM with few columns (P = 49 for 7x7 maps) runs well below
 * peak, so samples are batched until the GEMM has at least DT_CONV_COLS
 * columns, at the price of copying Y/dY between (OC, nb, P) and NCHW. Larger
 * chunks were measured slower (1 core, OpenBLAS, batch 64): a col buffer past L2
 * costs more than the GEMM gains, e.g. 32->64 5x5 on 14x14 (P = 196) takes
 * 12.9 ms forward one sample at a time, 13.7 ms with 2048-column chunks; 64->64
 * 3x3 on 7x7 takes 4.2 ms one at a time and 3.7 ms with 128-column chunks.
 *
 * Scratch (dt_conv2d_scratch_floats): col, K*nb*P floats (reused for dcol), then
 * a staging buffer of OC*nb*P floats for Y / dY when nb > 1; nb = chunk_samples(d).
 *
 * im2col copies whole output rows: for each (c, kh, kw) the valid ow range is
 * computed once, the padding at the edges is zero-filled and the middle is a
 * contiguous copy (stride 1) or a strided gather, with no per-element branches.
 *
 * --precision bf16 on a CPU with AVX512-BF16 runs this path for every
 * convolution with dt_gemm_bf16 in place of cblas_sgemm (dt_conv2d_*_bf16):
 * it rounds the operands while packing them, so no rounded copy is made. Its
 * chunks are DT_CONV_BF16_COLS = 512 columns: the bf16 GEMM gains more from
 * wide panels (bench_conv, W3 conv2: 26.5 ms a step at 64 columns, 24 at 512,
 * 24 at 1024). Against the faster fp32 kernel (bench_conv, forward and
 * backward, 3 runs of 10 rounds on a Zen 4 EPYC) it is 1.2-1.4x on W3's conv2,
 * 1.2-1.8x on 3x3 layers, 1.5-1.75x on a 1x1, and 0.91-1.02x on W3's conv1
 * (one input channel: K = 25, where packing costs as much as the products). A bf16 direct kernel
 * would save im2col's copy and the packing (a quarter of a bf16 W3 step) and
 * is not built. */
#include "conv2d_impl.h"
#include "parts.h"

#include "core/cpu.h"
#include "dtrain/core.h"
#include "dtrain/nn.h"
#include "gemm_pick.h"

#include <cblas.h>
#include <string.h>

#ifndef DT_CONV_COLS
#define DT_CONV_COLS 128
#endif
#ifndef DT_CONV_BF16_COLS
#define DT_CONV_BF16_COLS 512
#endif

int dt_conv2d_out_h(const dt_conv2d_dims *d) { return (d->H + 2 * d->pad - d->KH) / d->stride + 1; }

int dt_conv2d_out_w(const dt_conv2d_dims *d) { return (d->W + 2 * d->pad - d->KW) / d->stride + 1; }

/* Samples per chunk: enough for `cols` GEMM columns, at most the batch. */
static int chunk_samples(const dt_conv2d_dims *d, size_t cols) {
    size_t P = (size_t)dt_conv2d_out_h(d) * dt_conv2d_out_w(d);
    size_t nb = (cols + P - 1) / P;
    if (nb > (size_t)d->B) nb = (size_t)d->B;
    return nb < 1 ? 1 : (int)nb;
}

/* col, then the staging buffer (none for one sample), for chunks of nb. */
static size_t im2col_floats(const dt_conv2d_dims *d, int nb) {
    size_t K = (size_t)d->IC * d->KH * d->KW;
    size_t cols = (size_t)nb * dt_conv2d_out_h(d) * dt_conv2d_out_w(d);
    return (K + (nb > 1 ? (size_t)d->OC : 0)) * cols;
}

size_t dt_conv2d_im2col_scratch_floats(const dt_conv2d_dims *d) {
    return im2col_floats(d, chunk_samples(d, DT_CONV_COLS));
}

/* Output columns [lo, hi) whose input column ow*stride - pad + kw lies in [0, W). */
static void valid_range(int kw, int pad, int stride, int W, int OW, int *lo, int *hi) {
    int a = pad - kw; /* need ow*stride >= a */
    int l = a <= 0 ? 0 : (a + stride - 1) / stride;
    int b = W - 1 + pad - kw; /* need ow*stride <= b */
    int h = b < 0 ? 0 : b / stride + 1;
    if (h > OW) h = OW;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));

/* Rows are short (OW = 14 or 28 floats in a small CNN), so a libc memcpy call
 * per row costs more than the copy. These copy with fixed-size vector moves;
 * the last one overlaps the previous instead of looping over a scalar tail. */
static inline void copy_row(float *restrict dst, const float *restrict src, int n) {
    if (n >= 16) {
        int i = 0;
        for (; i + 16 <= n; i += 16) memcpy(dst + i, src + i, sizeof(v16f));
        if (i < n) memcpy(dst + n - 16, src + n - 16, sizeof(v16f));
    } else if (n >= 8) {
        memcpy(dst, src, sizeof(v8f));
        memcpy(dst + n - 8, src + n - 8, sizeof(v8f));
    } else {
        for (int i = 0; i < n; i++) dst[i] = src[i];
    }
}

/* dst[0..n) = 0 the same way: the padding edges are 1-2 floats, where the libc
 * memset call GCC makes of a plain loop costs more than the stores. */
static inline void zero_row(float *dst, int n) {
    if (n >= 16) {
        const v16f z = {0};
        int i = 0;
        for (; i + 16 <= n; i += 16) memcpy(dst + i, &z, sizeof z);
        if (i < n) memcpy(dst + n - 16, &z, sizeof z);
    } else if (n >= 8) {
        const v8f z = {0};
        memcpy(dst, &z, sizeof z);
        memcpy(dst + n - 8, &z, sizeof z);
    } else if (n >= 4) {
        const float z[4] = {0};
        memcpy(dst, z, sizeof z);
        memcpy(dst + n - 4, z, sizeof z);
    } else {
        if (n > 0) dst[0] = 0.0f;
        if (n > 1) dst[1] = 0.0f;
        if (n > 2) dst[2] = 0.0f;
    }
}

/* dst[0..n) += src[0..n). The tail re-reads the last 8 and masks off the lanes
 * already added. */
static inline void add_row(float *restrict dst, const float *restrict src, int n) {
    if (n < 8) {
        for (int i = 0; i < n; i++) dst[i] += src[i];
        return;
    }
    int i = 0;
    v8f a, b;
    for (; i + 8 <= n; i += 8) {
        memcpy(&a, dst + i, sizeof a);
        memcpy(&b, src + i, sizeof b);
        a += b;
        memcpy(dst + i, &a, sizeof a);
    }
    if (i < n) {
        const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
        const int skip = 8 - (n - i);
        memcpy(&a, dst + n - 8, sizeof a);
        memcpy(&b, src + n - 8, sizeof b);
        a += (v8f)((v8i)b & (lane >= skip));
        memcpy(dst + n - 8, &a, sizeof a);
    }
}

/* col rows are ld floats apart; this sample's columns start at col. */
DT_HOT static void im2col(float *col, size_t ld, const float *x, const dt_conv2d_dims *d, int OH,
                   int OW) {
    const int S = d->stride, Pd = d->pad;
    for (int c = 0; c < d->IC; c++) {
        const float *xc = x + (size_t)c * d->H * d->W;
        for (int kh = 0; kh < d->KH; kh++) {
            for (int kw = 0; kw < d->KW; kw++) {
                float *row = col + ((size_t)(c * d->KH + kh) * d->KW + kw) * ld;
                int lo, hi;
                valid_range(kw, Pd, S, d->W, OW, &lo, &hi);
                for (int oh = 0; oh < OH; oh++) {
                    float *dst = row + (size_t)oh * OW;
                    int ih = oh * S - Pd + kh;
                    if (ih < 0 || ih >= d->H) {
                        zero_row(dst, OW);
                        continue;
                    }
                    const float *src = xc + (size_t)ih * d->W + (lo * S - Pd + kw);
                    zero_row(dst, lo);
                    if (S == 1) {
                        copy_row(dst + lo, src, hi - lo);
                    } else {
                        for (int ow = lo; ow < hi; ow++) dst[ow] = src[(ow - lo) * S];
                    }
                    zero_row(dst + hi, OW - hi);
                }
            }
        }
    }
}

/* Adds the columns of one sample back into its input gradient dx. */
DT_HOT static void col2im_add(float *dx, const float *col, size_t ld, const dt_conv2d_dims *d, int OH,
                       int OW) {
    const int S = d->stride, Pd = d->pad;
    for (int c = 0; c < d->IC; c++) {
        float *xc = dx + (size_t)c * d->H * d->W;
        for (int kh = 0; kh < d->KH; kh++) {
            for (int kw = 0; kw < d->KW; kw++) {
                const float *row = col + ((size_t)(c * d->KH + kh) * d->KW + kw) * ld;
                int lo, hi;
                valid_range(kw, Pd, S, d->W, OW, &lo, &hi);
                for (int oh = 0; oh < OH; oh++) {
                    int ih = oh * S - Pd + kh;
                    if (ih < 0 || ih >= d->H) continue;
                    const float *restrict src = row + (size_t)oh * OW + lo;
                    float *restrict dst = xc + (size_t)ih * d->W + (lo * S - Pd + kw);
                    int n = hi - lo;
                    if (S == 1) {
                        add_row(dst, src, n);
                    } else {
                        for (int i = 0; i < n; i++) dst[i * S] += src[i];
                    }
                }
            }
        }
    }
}

/* The im2col forward on chunks of NB samples; col (the chunk's columns), then
 * the staging buffer, from scratch; pack: as gemm. */
static void im2col_forward(float *out, float *scratch, float *pack, const float *inp, const float *w, const float *b,
                           const dt_conv2d_dims *d, int NB) {
    DT_ASSERT(d->stride >= 1 && d->pad >= 0);
    const int OH = dt_conv2d_out_h(d), OW = dt_conv2d_out_w(d), OC = d->OC;
    const size_t P = (size_t)OH * OW, K = (size_t)d->IC * d->KH * d->KW;
    const size_t in_sz = (size_t)d->IC * d->H * d->W, out_sz = (size_t)OC * P;
    float *col = scratch;
    for (int b0 = 0; b0 < d->B; b0 += NB) {
        const int nb = d->B - b0 < NB ? d->B - b0 : NB;
        const size_t ld = (size_t)nb * P;
        for (int s = 0; s < nb; s++)
            im2col(col + (size_t)s * P, ld, inp + (b0 + s) * in_sz, d, OH, OW);
        if (nb == 1) {
            /* One sample: the GEMM writes NCHW directly, bias pre-filled. */
            float *y = out + (size_t)b0 * out_sz;
            for (int o = 0; o < OC; o++) {
                float bv = b ? b[o] : 0.0f;
                for (size_t i = 0; i < P; i++) y[o * P + i] = bv;
            }
            dt_nn_gemm(pack, false, false, OC, (int)P, (int)K, 1.0f, w, (int)K, col, (int)P, 1.0f, y, (int)P);
            continue;
        }
        float *stage = scratch + K * NB * P; /* (OC, nb*P) */
        dt_nn_gemm(pack, false, false, OC, (int)ld, (int)K, 1.0f, w, (int)K, col, (int)ld, 0.0f, stage, (int)ld);
        for (int s = 0; s < nb; s++) {
            float *y = out + (b0 + s) * out_sz;
            for (int o = 0; o < OC; o++) {
                const float *restrict src = stage + o * ld + s * P;
                float *restrict dst = y + o * P;
                float bv = b ? b[o] : 0.0f;
                for (size_t i = 0; i < P; i++) dst[i] = src[i] + bv;
            }
        }
    }
}

/* db[o] += the sum of row o of g (OC rows of n floats, ld apart). Under bf16
 * (round) its terms are rounded to bf16, as autocast sums the bf16 gradient,
 * and summed 16 lanes wide (fp32's serial sum, which the fp32 path keeps, took
 * most of W3 conv1's backward). */
static void bias_grad(float *db, const float *g, size_t ld, size_t n, int OC, bool round) {
    for (int o = 0; o < OC; o++) {
        const float *restrict r = g + o * ld;
        float acc = 0.0f;
        if (!round) {
            for (size_t i = 0; i < n; i++) acc += r[i];
            db[o] += acc;
            continue;
        }
        float t[256];
        v16f lanes = {0};
        for (size_t i = 0; i < n; i += 256) {
            const size_t m = n - i < 256 ? n - i : 256;
            dt_round_bf16(t, r + i, m);
            memset(t + m, 0, (256 - m) * sizeof(float));
            for (size_t j = 0; j < m; j += 16) {
                v16f x;
                memcpy(&x, t + j, sizeof x);
                lanes += x;
            }
        }
        for (int l = 0; l < 16; l++) acc += lanes[l];
        db[o] += acc;
    }
}

static void im2col_backward(float *dinp, float *dw, float *db, float *scratch, float *pack, const float *dout,
                            const float *inp, const float *w, const dt_conv2d_dims *d, int NB) {
    DT_ASSERT(d->stride >= 1 && d->pad >= 0);
    const int OH = dt_conv2d_out_h(d), OW = dt_conv2d_out_w(d), OC = d->OC;
    const size_t P = (size_t)OH * OW, K = (size_t)d->IC * d->KH * d->KW;
    const size_t in_sz = (size_t)d->IC * d->H * d->W, out_sz = (size_t)OC * P;
    float *col = scratch;
    for (int b0 = 0; b0 < d->B; b0 += NB) {
        const int nb = d->B - b0 < NB ? d->B - b0 : NB;
        const size_t ld = (size_t)nb * P;
        /* dY of the chunk as (OC, nb*P): the caller's memory when nb == 1. */
        const float *g = dout + (size_t)b0 * out_sz;
        if (nb > 1) {
            float *stage = scratch + K * NB * P;
            for (int s = 0; s < nb; s++)
                for (int o = 0; o < OC; o++)
                    memcpy(stage + o * ld + s * P, dout + (b0 + s) * out_sz + o * P,
                           P * sizeof(float));
            g = stage;
        }
        if (db) bias_grad(db, g, ld, ld, OC, pack != NULL);
        for (int s = 0; s < nb; s++)
            im2col(col + (size_t)s * P, ld, inp + (b0 + s) * in_sz, d, OH, OW);
        dt_nn_gemm(pack, false, true, OC, (int)K, (int)ld, 1.0f, g, (int)ld, col, (int)ld, 1.0f, dw, (int)K);
        if (!dinp) continue;
        dt_nn_gemm(pack, true, false, (int)K, (int)ld, OC, 1.0f, w, (int)K, g, (int)ld, 0.0f, col, (int)ld);
        for (int s = 0; s < nb; s++)
            col2im_add(dinp + (b0 + s) * in_sz, col + (size_t)s * P, ld, d, OH, OW);
    }
}

void dt_conv2d_im2col_forward(float *out, float *scratch, const float *inp, const float *w,
                       const float *b, const dt_conv2d_dims *d) {
    im2col_forward(out, scratch, NULL, inp, w, b, d, chunk_samples(d, DT_CONV_COLS));
}

void dt_conv2d_im2col_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                        const float *inp, const float *w, const dt_conv2d_dims *d) {
    im2col_backward(dinp, dw, db, scratch, NULL, dout, inp, w, d, chunk_samples(d, DT_CONV_COLS));
}

/* ---- bf16: im2col + dt_gemm_bf16 for all three products -------------------------- */

/* The columns and staging of chunks of nb samples, then dt_gemm_bf16's packing
 * for the largest of the three GEMMs. */
size_t dt_conv2d_bf16_scratch_floats(const dt_conv2d_dims *d) {
    const int nb = chunk_samples(d, DT_CONV_BF16_COLS);
    const int K = d->IC * d->KH * d->KW, cols = nb * dt_conv2d_out_h(d) * dt_conv2d_out_w(d);
    size_t f = dt_gemm_bf16_scratch_floats(d->OC, cols, K), g = dt_gemm_bf16_scratch_floats(d->OC, K, cols),
           x = dt_gemm_bf16_scratch_floats(K, cols, d->OC);
    size_t pack = f > g ? (f > x ? f : x) : (g > x ? g : x);
    return im2col_floats(d, nb) + pack;
}

void dt_conv2d_forward_bf16(float *out, float *scratch, const float *inp, const float *w, const float *b,
                            const dt_conv2d_dims *d) {
    const int nb = chunk_samples(d, DT_CONV_BF16_COLS);
    im2col_forward(out, scratch, scratch + im2col_floats(d, nb), inp, w, b, d, nb);
}

void dt_conv2d_backward_bf16(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                             const float *inp, const float *w, const dt_conv2d_dims *d) {
    const int nb = chunk_samples(d, DT_CONV_BF16_COLS);
    im2col_backward(dinp, dw, db, scratch, scratch + im2col_floats(d, nb), dout, inp, w, d, nb);
}

size_t dt_conv2d_scratch_floats(const dt_conv2d_dims *d) {
    return dt_conv2d_direct_ok(d) ? dt_conv2d_direct_scratch_floats(d, dt_nn_max_threads())
                                  : dt_conv2d_im2col_scratch_floats(d);
}

void dt_conv2d_forward(float *out, float *scratch, const float *inp, const float *w,
                       const float *b, const dt_conv2d_dims *d) {
    if (dt_conv2d_direct_ok(d))
        dt_conv2d_direct_forward(out, scratch, inp, w, b, d, dt_nn_threads());
    else
        dt_conv2d_im2col_forward(out, scratch, inp, w, b, d);
}

void dt_conv2d_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                        const float *inp, const float *w, const dt_conv2d_dims *d) {
    if (dt_conv2d_direct_ok(d))
        dt_conv2d_direct_backward(dinp, dw, db, scratch, dout, inp, w, d, dt_nn_threads());
    else
        dt_conv2d_im2col_backward(dinp, dw, db, scratch, dout, inp, w, d);
}
