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
 * convolution with dt_gemm_bf16 in place of dt_sgemm (dt_conv2d_*_bf16):
 * it rounds the operands while packing them, so no rounded copy is made. Its
 * chunks are DT_CONV_BF16_COLS = 512 columns: the bf16 GEMM gains more from
 * wide panels (bench_conv, W3 conv2: 26.5 ms a step at 64 columns, 24 at 512,
 * 24 at 1024). Against the faster fp32 kernel (bench_conv, forward and
 * backward, one thread, 3 runs of 10 rounds on a Zen 4 EPYC) it is 1.2-1.4x on W3's conv2,
 * 1.2-1.8x on 3x3 layers, 1.5-1.75x on a 1x1, and 0.91-1.02x on W3's conv1
 * (one input channel: K = 25, where packing costs as much as the products).
 * A bf16 direct kernel would save im2col's copy and the packing (a quarter of
 * a bf16 W3 step) and is not built.
 *
 * Threads. The bf16 convolution shares its work out in T = dt_nn_threads()
 * parts (dt_nn_run_parts, one start per call), each with its own col, staging
 * and packing, each running dt_gemm_bf16 on its own thread only:
 *   forward:  part j takes its share of the chunks, which shrink to ceil(B/T)
 *             samples where the batch has fewer than T of them;
 *   backward: over every chunk in order, part j stages the chunk's dY, adds db
 *             at its share of the output channels, lays out only its share of
 *             col's rows k (16 at a time) and adds dW[:, its k] += dY @ col^T;
 *             on its share of the chunks it also computes dcol and col2im's it
 *             into dinp.
 * Each element is summed by one part in the one-thread order (Y and dcol do
 * not depend on the chunking; dW and db keep the chunks of nb samples), so
 * every T gives the same bits, the same as before the threads. Cost a part:
 * forward 1/T of the copies, packing and products; backward 1/T of im2col,
 * col2im and the products, plus the whole of dY staged and packed by every
 * part (OC*B*P floats each, against K*B*P/T of col: 16% of col's for W3's conv2
 * at T = 2, OC = 64, K = 800), the price of not joining the parts inside a
 * call. Before, the GEMMs alone were split (their threads started per GEMM)
 * and the copies ran on one: at two threads the bf16 W3 step ran at
 * 0.84-1.15x fp32's speed; now 1.7-2.2x, 1.9-2.2x its old speed
 * (docs/BENCHMARKS.md; at one thread unchanged). Scratch:
 * dt_conv2d_bf16_scratch_floats has room for dt_nn_max_threads() parts (no
 * more than the batch or dW's 16-column shares). */
#include "conv2d_impl.h"
#include "parts.h"

#include "core/cpu.h"
#include "dtrain/core.h"
#include "dtrain/nn.h"
#include "gemm_pick.h"

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

/* Rows [r0, r1) of one sample's col, row r (= (c, kh, kw)) at col + (r - r0) * ld;
 * this sample's columns start at col. */
DT_HOT static void im2col_rows(float *col, size_t ld, const float *x, const dt_conv2d_dims *d, int OH, int OW,
                               int r0, int r1) {
    const int S = d->stride, Pd = d->pad;
    int c = r0 / (d->KH * d->KW), kh = r0 / d->KW % d->KH, kw = r0 % d->KW - 1;
    for (int r = r0; r < r1; r++) {
        /* (c, kh, kw) of row r, counted on: three divisions a row cost ~5% of
         * bench_conv's 3x3 128->128 on 7x7 maps */
        if (++kw == d->KW) {
            kw = 0;
            if (++kh == d->KH) kh = 0, c++;
        }
        const float *xc = x + (size_t)c * d->H * d->W;
        float *row = col + (size_t)(r - r0) * ld;
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

/* ---- the work, in parts: one thread each, or the fp32 path's one part ------------- */

/* One call's work. Part j's scratch is scratch + j * per: col (K, NB*P), then
 * the staging (OC, NB*P) when NB > 1, then from pack on the bf16 GEMM's packing. */
typedef struct {
    const dt_conv2d_dims *d;
    int OH, OW, NB, T;
    size_t P, K, in_sz, out_sz, per, pack;
    bool bf16;
    float *out, *dinp, *dw, *db, *scratch;
    const float *inp, *w, *b, *dout;
} job;

static job job_of(const dt_conv2d_dims *d, int NB, bool bf16, float *scratch) {
    DT_ASSERT(d->stride >= 1 && d->pad >= 0);
    job J = {.d = d, .OH = dt_conv2d_out_h(d), .OW = dt_conv2d_out_w(d), .NB = NB, .T = 1, .bf16 = bf16,
             .scratch = scratch};
    J.P = (size_t)J.OH * J.OW;
    J.K = (size_t)d->IC * d->KH * d->KW;
    J.in_sz = (size_t)d->IC * d->H * d->W;
    J.out_sz = (size_t)d->OC * J.P;
    return J;
}

/* C = op(A) op(B) (+ C when beta is 1) on this thread: part j's packing for bf16. */
static void part_gemm(const job *J, int j, bool ta, bool tb, int M, int N, int K, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    float *pack = J->bf16 ? J->scratch + (size_t)j * J->per + J->pack : NULL;
    dt_nn_gemm_on(pack, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, 1);
}

/* Rows [r0, r1) of the col of samples [b0, b0 + nb) (ld = nb*P). */
static void chunk_col(const job *J, float *col, int b0, int nb, int r0, int r1) {
    for (int s = 0; s < nb; s++)
        im2col_rows(col + (size_t)s * J->P, (size_t)nb * J->P, J->inp + (b0 + s) * J->in_sz, J->d, J->OH, J->OW,
                    r0, r1);
}

/* Forward of samples [b0, b0 + nb) with part j's scratch. */
static void forward_chunk(const job *J, int j, int b0, int nb) {
    const int OC = J->d->OC;
    const size_t P = J->P, ld = (size_t)nb * P;
    float *col = J->scratch + (size_t)j * J->per, *stage = col + J->K * J->NB * P;
    chunk_col(J, col, b0, nb, 0, (int)J->K);
    if (nb == 1) {
        /* One sample: the GEMM writes NCHW directly, bias pre-filled. */
        float *y = J->out + (size_t)b0 * J->out_sz;
        for (int o = 0; o < OC; o++) {
            float bv = J->b ? J->b[o] : 0.0f;
            for (size_t i = 0; i < P; i++) y[o * P + i] = bv;
        }
        part_gemm(J, j, false, false, OC, (int)P, (int)J->K, J->w, (int)J->K, col, (int)P, 1.0f, y, (int)P);
        return;
    }
    part_gemm(J, j, false, false, OC, (int)ld, (int)J->K, J->w, (int)J->K, col, (int)ld, 0.0f, stage, (int)ld);
    for (int s = 0; s < nb; s++) {
        float *y = J->out + (b0 + s) * J->out_sz;
        for (int o = 0; o < OC; o++) {
            const float *restrict src = stage + o * ld + s * P;
            float *restrict dst = y + o * P;
            float bv = J->b ? J->b[o] : 0.0f;
            for (size_t i = 0; i < P; i++) dst[i] = src[i] + bv;
        }
    }
}

/* Forward, part j: its share of the chunks of NB samples. */
static void forward_part(void *p, int j) {
    const job *J = p;
    const int B = J->d->B, chunks = (B + J->NB - 1) / J->NB;
    size_t lo, hi;
    dt_nn_share((size_t)chunks, j, J->T, &lo, &hi);
    for (size_t c = lo; c < hi; c++) {
        const int b0 = (int)c * J->NB;
        forward_chunk(J, j, b0, B - b0 < J->NB ? B - b0 : J->NB);
    }
}

/* dY of samples [b0, b0 + nb) as (OC, nb*P): the caller's memory for one sample. */
static const float *chunk_dy(const job *J, float *stage, int b0, int nb) {
    const float *g = J->dout + (size_t)b0 * J->out_sz;
    if (nb == 1) return g;
    const size_t ld = (size_t)nb * J->P;
    for (int s = 0; s < nb; s++)
        for (int o = 0; o < J->d->OC; o++)
            memcpy(stage + o * ld + s * J->P, g + s * J->out_sz + o * J->P, J->P * sizeof(float));
    return stage;
}

/* Backward, part j, over the chunks of NB samples in order: db at its share of
 * the output channels, dW at its share of the columns k (16 at a time; it
 * lays out only those rows of col), and the input gradient of its share of the
 * chunks. Each sum runs in the same order whatever T: results do not depend on
 * it (the chunks do: dW adds one GEMM a chunk). */
static void backward_part(void *p, int j) {
    const job *J = p;
    const dt_conv2d_dims *d = J->d;
    const int B = d->B, NB = J->NB, OC = d->OC, chunks = (B + NB - 1) / NB;
    float *col = J->scratch + (size_t)j * J->per, *stage = col + J->K * NB * J->P;
    size_t klo, khi, olo, ohi, clo, chi;
    dt_nn_share((J->K + 15) / 16, j, J->T, &klo, &khi);
    klo *= 16;
    khi = khi * 16 < J->K ? khi * 16 : J->K;
    dt_nn_share(J->db ? (size_t)OC : 0, j, J->T, &olo, &ohi);
    dt_nn_share(J->dinp ? (size_t)chunks : 0, j, J->T, &clo, &chi);
    for (int c = 0; c < chunks; c++) {
        const bool dx = (size_t)c >= clo && (size_t)c < chi;
        if (klo == khi && olo == ohi && !dx) continue;
        const int b0 = c * NB, nb = B - b0 < NB ? B - b0 : NB;
        const size_t ld = (size_t)nb * J->P;
        const float *g = chunk_dy(J, stage, b0, nb);
        if (olo < ohi) bias_grad(J->db + olo, g + olo * ld, ld, ld, (int)(ohi - olo), J->bf16);
        if (klo < khi) {
            chunk_col(J, col, b0, nb, (int)klo, (int)khi);
            part_gemm(J, j, false, true, OC, (int)(khi - klo), (int)ld, g, (int)ld, col, (int)ld, 1.0f,
                      J->dw + klo, (int)J->K);
        }
        if (!dx) continue;
        part_gemm(J, j, true, false, (int)J->K, (int)ld, OC, J->w, (int)J->K, g, (int)ld, 0.0f, col, (int)ld);
        for (int s = 0; s < nb; s++)
            col2im_add(J->dinp + (b0 + s) * J->in_sz, col + (size_t)s * J->P, ld, d, J->OH, J->OW);
    }
}

/* fp32: one part, whose GEMMs (dt_sgemm) run on the BLAS's threads. */
void dt_conv2d_im2col_forward(float *out, float *scratch, const float *inp, const float *w,
                       const float *b, const dt_conv2d_dims *d) {
    job J = job_of(d, chunk_samples(d, DT_CONV_COLS), false, scratch);
    J.out = out, J.inp = inp, J.w = w, J.b = b;
    forward_part(&J, 0);
}

void dt_conv2d_im2col_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                        const float *inp, const float *w, const dt_conv2d_dims *d) {
    job J = job_of(d, chunk_samples(d, DT_CONV_COLS), false, scratch);
    J.dinp = dinp, J.dw = dw, J.db = db, J.dout = dout, J.inp = inp, J.w = w;
    backward_part(&J, 0);
}

/* ---- bf16: im2col + dt_gemm_bf16 for all three products, in parts -------------------- */

/* One part's scratch: the columns and staging of chunks of nb samples, then
 * dt_gemm_bf16's packing for the largest of the three GEMMs. */
static size_t bf16_part_floats(const dt_conv2d_dims *d, int nb) {
    const int K = d->IC * d->KH * d->KW, cols = nb * dt_conv2d_out_h(d) * dt_conv2d_out_w(d);
    size_t f = dt_gemm_bf16_scratch_floats(d->OC, cols, K), g = dt_gemm_bf16_scratch_floats(d->OC, K, cols),
           x = dt_gemm_bf16_scratch_floats(K, cols, d->OC);
    size_t pack = f > g ? (f > x ? f : x) : (g > x ? g : x);
    return im2col_floats(d, nb) + pack;
}

/* Parts for T threads: no more than there is work for (samples, or 16-column
 * shares of dW). */
static int bf16_parts(const dt_conv2d_dims *d, int T) {
    const int kunits = (d->IC * d->KH * d->KW + 15) / 16, most = d->B > kunits ? d->B : kunits;
    return T < 1 ? 1 : T > most ? most : T;
}

size_t dt_conv2d_bf16_scratch_floats_on(const dt_conv2d_dims *d, int threads) {
    return (size_t)bf16_parts(d, threads) * bf16_part_floats(d, chunk_samples(d, DT_CONV_BF16_COLS));
}

static job bf16_job(const dt_conv2d_dims *d, float *scratch, int threads) {
    const int NB = chunk_samples(d, DT_CONV_BF16_COLS);
    job J = job_of(d, NB, true, scratch);
    J.per = bf16_part_floats(d, NB);
    J.pack = im2col_floats(d, NB);
    J.T = bf16_parts(d, threads);
    return J;
}

void dt_conv2d_forward_bf16_on(float *out, float *scratch, const float *inp, const float *w, const float *b,
                               const dt_conv2d_dims *d, int threads) {
    job J = bf16_job(d, scratch, threads);
    J.out = out, J.inp = inp, J.w = w, J.b = b;
    /* smaller chunks where the batch has fewer than one a part (the output
     * does not depend on the chunking) */
    const int each = (d->B + J.T - 1) / J.T;
    if (J.NB > each) J.NB = each;
    const int chunks = (d->B + J.NB - 1) / J.NB;
    if (J.T > chunks) J.T = chunks;
    dt_nn_run_parts(forward_part, &J, J.T);
}

void dt_conv2d_backward_bf16_on(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                                const float *inp, const float *w, const dt_conv2d_dims *d, int threads) {
    job J = bf16_job(d, scratch, threads);
    J.dinp = dinp, J.dw = dw, J.db = db, J.dout = dout, J.inp = inp, J.w = w;
    dt_nn_run_parts(backward_part, &J, J.T);
}

size_t dt_conv2d_bf16_scratch_floats(const dt_conv2d_dims *d) {
    return dt_conv2d_bf16_scratch_floats_on(d, dt_nn_max_threads());
}

void dt_conv2d_forward_bf16(float *out, float *scratch, const float *inp, const float *w, const float *b,
                            const dt_conv2d_dims *d) {
    dt_conv2d_forward_bf16_on(out, scratch, inp, w, b, d, dt_nn_threads());
}

void dt_conv2d_backward_bf16(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                             const float *inp, const float *w, const dt_conv2d_dims *d) {
    dt_conv2d_backward_bf16_on(dinp, dw, db, scratch, dout, inp, w, d, dt_nn_threads());
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
