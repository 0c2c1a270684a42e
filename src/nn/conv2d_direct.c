/* conv2d, NCHW, by a direct register-tiled kernel (no im2col, no GEMM call).
 *
 * All three products of a convolution are one loop shape: for a tile of 6 (or 12)
 * "rows" i and 16 "columns" v,
 *     acc[i][v] += a_i[off[t]] * b[t][v]     summed over t,
 * 12 vector accumulators (6 x 2 x 8 floats), each step 2 vector loads of b, 6
 * broadcasts of a_i and 12 multiply-adds, which keeps the FMA units busy on
 * AVX2 without packing anything larger than the weights; where AVX-512 runs,
 * a tile is 12 rows of one 16-float vector (tile12: 12 accumulators again, 1
 * load of b, 12 broadcasts, twice the work per multiply-add):
 *   forward:   i = 6 (12) output pixels, v = 16 output channels, t = (ic, kh, kw);
 *              a_i points into the zero-padded input at pixel i's window,
 *              b = the weights packed (OC/16, IC*KH*KW, 16).
 *   input grad (stride 1): the same with dY zero-padded by K-1-pad, the
 *              weights flipped and packed (IC/16, OC*KH*KW, 16): dX is the
 *              convolution of dY with the flipped, transposed kernel.
 *   weight grad: i = 6 (12) positions k = (ic, kh, kw), v = 16 output channels,
 *              t = output pixels; a_i points into the padded input at k's
 *              offset, b = dY transposed to (P, OC) for the sample.
 * Cost per sample: 2*OC*IC*KH*KW*OH*OW FLOPs per product, plus O(IC*H*W +
 * OC*OH*OW) for padding and transposes and O(OC*IC*KH*KW) per call for packing;
 * columns and rows past OC or the pixel count are computed on zeros or on a
 * repeated last row and discarded. Summation order differs from im2col + GEMM
 * (float rounding only).
 *
 * Threads: the samples are shared out for the forward and the input gradient,
 * the positions k for the weight gradient (each thread then pads and transposes
 * every sample for itself: O(data) per thread against O(data x K) of tiles).
 *
 * Used for stride 1 with pad < kernel and a kernel larger than 1x1 (conv2d.c
 * decides): strided convolutions keep im2col, whose col2im handles the input
 * gradient's scatter, and a 1x1 convolution is a plain GEMM, where OpenBLAS's
 * packing wins (bench/bench_conv.c: 0.5-0.7x for the direct kernel). */
#include "conv2d_impl.h"
#include "parts.h"

#include "core/cpu.h"

#include <stdint.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));

#define TR 12 /* rows of a tile at most: 12 with AVX-512 (tile12), else 6 (tile6) */
#define TC 16 /* columns of a tile: two 8-float vectors, or one of 16 */

/* The sum runs over t in [0, T): a_i's element for t is a_i[off[t]], b's row
 * for t is b + t*bs. A flat offset table, built once per call, makes every
 * shape one loop with no nest overhead (1x1 kernels, 3-wide rows). */
static inline v8f ld8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st8(float *p, v8f v) { memcpy(p, &v, sizeof v); }

/* acc (6 x TC floats, row-major) += the tile's sum. */
DT_HOT static void tile6(float *restrict acc, const float *const a[TR], const int32_t *off, size_t T,
                         const float *b, ptrdiff_t bs) {
    v8f c00 = ld8(acc + 0), c01 = ld8(acc + 8), c10 = ld8(acc + 16), c11 = ld8(acc + 24);
    v8f c20 = ld8(acc + 32), c21 = ld8(acc + 40), c30 = ld8(acc + 48), c31 = ld8(acc + 56);
    v8f c40 = ld8(acc + 64), c41 = ld8(acc + 72), c50 = ld8(acc + 80), c51 = ld8(acc + 88);
    const float *p0 = a[0], *p1 = a[1], *p2 = a[2], *p3 = a[3], *p4 = a[4], *p5 = a[5];
    for (size_t t = 0; t < T; t++, b += bs) {
        const ptrdiff_t q = off[t];
        const v8f b0 = ld8(b), b1 = ld8(b + 8);
        float x;
        x = p0[q]; c00 += b0 * x; c01 += b1 * x;
        x = p1[q]; c10 += b0 * x; c11 += b1 * x;
        x = p2[q]; c20 += b0 * x; c21 += b1 * x;
        x = p3[q]; c30 += b0 * x; c31 += b1 * x;
        x = p4[q]; c40 += b0 * x; c41 += b1 * x;
        x = p5[q]; c50 += b0 * x; c51 += b1 * x;
    }
    st8(acc + 0, c00); st8(acc + 8, c01); st8(acc + 16, c10); st8(acc + 24, c11);
    st8(acc + 32, c20); st8(acc + 40, c21); st8(acc + 48, c30); st8(acc + 56, c31);
    st8(acc + 64, c40); st8(acc + 72, c41); st8(acc + 80, c50); st8(acc + 88, c51);
}

#if defined(__x86_64__) && defined(__GNUC__)
typedef float v16f __attribute__((vector_size(64)));
#define TILE12_TARGET __attribute__((target("avx512f,fma")))

/* The same for 12 rows in one 16-float vector each: 12 accumulators again, each step
 * one load of b, 12 broadcasts and 12 multiply-adds of twice the width, for a CPU
 * whose FMA units are 512 bits wide (Zen 5: W3's step ran tile6 at 44% of the sgemm
 * peak). Each element's sum runs over t in the same order as tile6's (with FMA, as
 * tile6's AVX2 and AVX-512 builds): the same bits. */
TILE12_TARGET static void tile12(float *restrict acc, const float *const a[TR], const int32_t *off, size_t T,
                                 const float *b, ptrdiff_t bs) {
    v16f c[12];
    const float *p[12];
    for (int i = 0; i < 12; i++) {
        memcpy(&c[i], acc + i * TC, sizeof c[i]);
        p[i] = a[i];
    }
    for (size_t t = 0; t < T; t++, b += bs) {
        const ptrdiff_t q = off[t];
        v16f b0;
        memcpy(&b0, b, sizeof b0);
        for (int i = 0; i < 12; i++) c[i] += b0 * p[i][q];
    }
    for (int i = 0; i < 12; i++) memcpy(acc + i * TC, &c[i], sizeof c[i]);
}

/* The rows of a tile on this CPU: 12 where AVX-512 runs (tile12), else 6. */
static int tile_rows(void) {
    static int rows; /* a benign race: same answer */
    if (!rows) {
        __builtin_cpu_init();
        rows = __builtin_cpu_supports("avx512f") ? 12 : 6;
    }
    return rows;
}
#else
static int tile_rows(void) { return 6; }
#endif

/* acc (rows x TC) += the tile's sum, rows = tile_rows(). */
static void tile(int rows, float *restrict acc, const float *const a[TR], const int32_t *off, size_t T,
                 const float *b, ptrdiff_t bs) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (rows == 12) {
        tile12(acc, a, off, T, b, bs);
        return;
    }
#endif
    (void)rows;
    tile6(acc, a, off, T, b, bs);
}

/* off[(i0*n1 + i1)*n2 + i2] = i0*s0 + i1*s1 + i2 for a 3-deep nest. */
static void offsets(int32_t *off, int n0, int n1, int n2, ptrdiff_t s0, ptrdiff_t s1) {
    for (int i0 = 0; i0 < n0; i0++)
        for (int i1 = 0; i1 < n1; i1++)
            for (int i2 = 0; i2 < n2; i2++) *off++ = (int32_t)(i0 * s0 + i1 * s1 + i2);
}

typedef struct {
    int OH, OW, Hp, Wp; /* output; input padded by pad */
    int Hq, Wq;         /* dY padded by K-1-pad (input gradient) */
    size_t P, K, OCB, ICB, OCp;
} geom;

static geom geometry(const dt_conv2d_dims *d) {
    geom g;
    g.OH = dt_conv2d_out_h(d);
    g.OW = dt_conv2d_out_w(d);
    g.Hp = d->H + 2 * d->pad;
    g.Wp = d->W + 2 * d->pad;
    g.Hq = g.OH + 2 * (d->KH - 1 - d->pad);
    g.Wq = g.OW + 2 * (d->KW - 1 - d->pad);
    g.P = (size_t)g.OH * g.OW;
    g.K = (size_t)d->IC * d->KH * d->KW;
    g.OCB = (size_t)(d->OC + TC - 1) / TC;
    g.ICB = (size_t)(d->IC + TC - 1) / TC;
    g.OCp = g.OCB * TC;
    return g;
}

bool dt_conv2d_direct_ok(const dt_conv2d_dims *d) {
    return d->stride == 1 && d->pad < d->KH && d->pad < d->KW && d->KH * d->KW > 1;
}

/* Scratch, in floats (an int32 offset takes one float's room): what the
 * threads share, then each thread's own planes.
 *   shared, forward:  packed weights OCB*16*K, offsets K;
 *   shared, backward: weight-gradient tiles OCB*16*K, flipped weights
 *                     ICB*16*R, offsets P + R, with R = OC*KH*KW;
 *   per thread:       padded input IC*Hp*Wp, dY^T P*OCp, padded dY OC*Hq*Wq. */
static size_t shared_floats(const dt_conv2d_dims *d, const geom *g) {
    size_t R = (size_t)d->OC * d->KH * d->KW;
    return g->OCB * TC * g->K + g->ICB * TC * R + g->K + g->P + R;
}

static size_t thread_floats(const dt_conv2d_dims *d, const geom *g) {
    return (size_t)d->IC * g->Hp * g->Wp + g->P * g->OCp + (size_t)d->OC * g->Hq * g->Wq;
}

size_t dt_conv2d_direct_scratch_floats(const dt_conv2d_dims *d, int threads) {
    geom g = geometry(d);
    return shared_floats(d, &g) + (size_t)(threads < 1 ? 1 : threads) * thread_floats(d, &g);
}

/* C planes of h x w from src into dst, zero-bordered by (ph, pw): (C, h+2ph, w+2pw). */
static void pad_planes(float *dst, const float *src, int C, int h, int w, int ph, int pw) {
    const int hp = h + 2 * ph, wp = w + 2 * pw;
    memset(dst, 0, (size_t)C * hp * wp * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int y = 0; y < h; y++)
            memcpy(dst + ((size_t)c * hp + y + ph) * wp + pw, src + ((size_t)c * h + y) * w,
                   (size_t)w * sizeof(float));
}

/* Forward weights (OC, IC, KH, KW) as (OCB, K, 16), zero past OC. */
static void pack_weights(float *wp, const float *w, const dt_conv2d_dims *d, const geom *g) {
    memset(wp, 0, g->OCB * TC * g->K * sizeof(float));
    for (int oc = 0; oc < d->OC; oc++)
        for (size_t k = 0; k < g->K; k++)
            wp[((oc / TC) * g->K + k) * TC + oc % TC] = w[oc * g->K + k];
}

/* Input-gradient weights: (ICB, OC*KH*KW, 16) with the kernel flipped,
 * wf[ic/16][(oc, kh, kw)][ic%16] = w[oc][ic][KH-1-kh][KW-1-kw]. */
static void pack_flipped(float *wf, const float *w, const dt_conv2d_dims *d, const geom *g) {
    const size_t KK = (size_t)d->KH * d->KW, R = (size_t)d->OC * KK;
    memset(wf, 0, g->ICB * TC * R * sizeof(float));
    for (int oc = 0; oc < d->OC; oc++)
        for (int ic = 0; ic < d->IC; ic++)
            for (int kh = 0; kh < d->KH; kh++)
                for (int kw = 0; kw < d->KW; kw++) {
                    size_t r = oc * KK + (size_t)kh * d->KW + kw;
                    size_t src = ((size_t)oc * d->IC + ic) * KK +
                                 (size_t)(d->KH - 1 - kh) * d->KW + (d->KW - 1 - kw);
                    wf[((ic / TC) * R + r) * TC + ic % TC] = w[src];
                }
}

/* Tile row pointers (tr of them) for pixels p0.. of a (rows, cols) output whose pixel
 * (y, x) reads base + y*ld + x; rows past n repeat the last pixel. Returns rows used. */
static int pixel_rows(const float *a[TR], int tr, const float *base, size_t p0, size_t n, int cols,
                      ptrdiff_t ld) {
    int used = n - p0 < (size_t)tr ? (int)(n - p0) : tr;
    for (int i = 0; i < tr; i++) {
        size_t p = p0 + (i < used ? i : used - 1);
        a[i] = base + (ptrdiff_t)(p / cols) * ld + (ptrdiff_t)(p % cols);
    }
    return used;
}

/* out (C, n) [+]= a same-shaped convolution: for each block of 16 channels
 * and each tile of 6 pixels, the sum over off (T entries) with the packed
 * weights wpk (CB, T, 16). Pixel (y, x) of the n = rows*cols reads base + y*ld + x. */
static void conv_planes(float *out, int C, size_t n, int cols, const float *base, ptrdiff_t ld,
                        const int32_t *off, size_t T, const float *wpk, const float *bias,
                        bool add) {
    float acc[TR * TC];
    const int tr = tile_rows();
    for (size_t cb = 0; cb * TC < (size_t)C; cb++) {
        const int nc = C - (int)(cb * TC) < TC ? C - (int)(cb * TC) : TC;
        for (size_t p0 = 0; p0 < n; p0 += (size_t)tr) {
            const float *a[TR];
            const int used = pixel_rows(a, tr, base, p0, n, cols, ld);
            memset(acc, 0, sizeof acc);
            tile(tr, acc, a, off, T, wpk + cb * T * TC, TC);
            for (int v = 0; v < nc; v++) {
                float *o = out + (cb * TC + v) * n + p0;
                const float bv = bias ? bias[cb * TC + v] : 0.0f;
                for (int i = 0; i < used; i++) o[i] = (add ? o[i] : bv) + acc[i * TC + v];
            }
        }
    }
}

/* What every part of a call reads, and where each part's own planes are. */
typedef struct {
    const dt_conv2d_dims *d;
    geom g;
    float *out, *dinp, *db, *wacc, *mine;
    const float *inp, *dout, *b, *wpk, *wf;
    const int32_t *off, *offp, *offx;
    int T;
} job;

static float *own_planes(const job *J, int j) { return J->mine + (size_t)j * thread_floats(J->d, &J->g); }

/* Forward, part j: its share of the samples. */
static void forward_part(void *p, int j) {
    const job *J = p;
    const dt_conv2d_dims *d = J->d;
    const size_t in_sz = (size_t)d->IC * d->H * d->W, out_sz = (size_t)d->OC * J->g.P;
    float *xp = own_planes(J, j);
    size_t lo, hi;
    dt_nn_share((size_t)d->B, j, J->T, &lo, &hi);
    for (size_t n = lo; n < hi; n++) {
        pad_planes(xp, J->inp + n * in_sz, d->IC, d->H, d->W, d->pad, d->pad);
        conv_planes(J->out + n * out_sz, d->OC, J->g.P, J->g.OW, xp, J->g.Wp, J->off, J->g.K, J->wpk,
                    J->b, false);
    }
}

void dt_conv2d_direct_forward(float *out, float *scratch, const float *inp, const float *w,
                              const float *b, const dt_conv2d_dims *d, int threads) {
    job J = {.d = d, .g = geometry(d), .out = out, .inp = inp, .b = b};
    float *wpk = scratch;
    int32_t *off = (int32_t *)(wpk + J.g.OCB * TC * J.g.K);
    J.mine = scratch + shared_floats(d, &J.g);
    pack_weights(wpk, w, d, &J.g);
    offsets(off, d->IC, d->KH, d->KW, (ptrdiff_t)J.g.Hp * J.g.Wp, J.g.Wp);
    J.wpk = wpk;
    J.off = off;
    J.T = threads < 1 ? 1 : threads > d->B ? d->B : threads;
    dt_nn_run_parts(forward_part, &J, J.T);
}

/* wacc (OCB, K, 16) += this sample's weight gradient at the positions k of
 * tiles [t0, t1) (tile_rows() positions a tile): rows are positions, summed over the
 * output pixels (offsets offp) with dY^T (P, OCp) as b. */
static void weight_grad(float *wacc, const float *xp, const float *gT, const int32_t *offp,
                        const dt_conv2d_dims *d, const geom *g, size_t t0, size_t t1) {
    const size_t KK = (size_t)d->KH * d->KW;
    float acc[TR * TC];
    const size_t tr = (size_t)tile_rows();
    for (size_t cb = 0; cb < g->OCB; cb++) {
        float *wb = wacc + cb * g->K * TC;
        for (size_t k0 = t0 * tr; k0 < g->K && k0 < t1 * tr; k0 += tr) {
            const int used = g->K - k0 < tr ? (int)(g->K - k0) : (int)tr;
            const float *a[TR];
            for (int i = 0; i < (int)tr; i++) {
                size_t k = k0 + (i < used ? i : used - 1);
                size_t ic = k / KK, kh = k % KK / d->KW, kw = k % d->KW;
                a[i] = xp + (ic * g->Hp + kh) * g->Wp + kw;
            }
            memcpy(acc, wb + k0 * TC, (size_t)used * TC * sizeof(float));
            tile((int)tr, acc, a, offp, g->P, gT + cb * TC, (ptrdiff_t)g->OCp);
            memcpy(wb + k0 * TC, acc, (size_t)used * TC * sizeof(float));
        }
    }
}

/* Backward, part j: the weight gradient at its share of the positions k over
 * every sample (each part pads and transposes every sample for itself), db in
 * part 0, then the input gradient of its share of the samples. Every sum runs
 * in the same order whatever the number of parts: results do not depend on it. */
static void backward_part(void *p, int j) {
    const job *J = p;
    const dt_conv2d_dims *d = J->d;
    const geom *g = &J->g;
    const size_t in_sz = (size_t)d->IC * d->H * d->W, out_sz = (size_t)d->OC * g->P;
    float *xp = own_planes(J, j), *gT = xp + (size_t)d->IC * g->Hp * g->Wp, *gp = gT + g->P * g->OCp;
    size_t lo, hi;
    dt_nn_share((g->K + (size_t)tile_rows() - 1) / (size_t)tile_rows(), j, J->T, &lo, &hi);
    memset(gT, 0, g->P * g->OCp * sizeof(float));
    for (int n = 0; n < d->B && (lo < hi || (j == 0 && J->db)); n++) {
        /* dY^T row by row of dY: dY is read once, in order (it comes from
         * memory; blocking the transpose to write in order read 16-64
         * streams at once and was 1.6x slower), into gT, which stays in L2. */
        const float *gy = J->dout + n * out_sz;
        for (int oc = 0; oc < d->OC; oc++) {
            const float *r = gy + oc * g->P;
            float s = 0.0f;
            for (size_t q = 0; q < g->P; q++) {
                gT[q * g->OCp + oc] = r[q];
                s += r[q];
            }
            if (j == 0 && J->db) J->db[oc] += s;
        }
        if (lo == hi) continue;
        pad_planes(xp, J->inp + n * in_sz, d->IC, d->H, d->W, d->pad, d->pad);
        weight_grad(J->wacc, xp, gT, J->offp, d, g, lo, hi);
    }
    if (!J->dinp) return;
    const size_t R = (size_t)d->OC * d->KH * d->KW;
    dt_nn_share((size_t)d->B, j, J->T, &lo, &hi);
    for (size_t n = lo; n < hi; n++) {
        pad_planes(gp, J->dout + n * out_sz, d->OC, g->OH, g->OW, d->KH - 1 - d->pad, d->KW - 1 - d->pad);
        conv_planes(J->dinp + n * in_sz, d->IC, (size_t)d->H * d->W, d->W, gp, g->Wq, J->offx, R, J->wf,
                    NULL, true);
    }
}

void dt_conv2d_direct_backward(float *dinp, float *dw, float *db, float *scratch,
                               const float *dout, const float *inp, const float *w,
                               const dt_conv2d_dims *d, int threads) {
    job J = {.d = d, .g = geometry(d), .dinp = dinp, .db = db, .inp = inp, .dout = dout};
    const geom *g = &J.g;
    const size_t R = (size_t)d->OC * d->KH * d->KW;
    float *wacc = scratch, *wf = wacc + g->OCB * TC * g->K;
    int32_t *offp = (int32_t *)(wf + g->ICB * TC * R), *offx = offp + g->P;
    J.mine = scratch + shared_floats(d, g);
    memset(wacc, 0, g->OCB * TC * g->K * sizeof(float));
    offsets(offp, 1, g->OH, g->OW, 0, g->Wp);
    if (dinp) {
        pack_flipped(wf, w, d, g);
        offsets(offx, d->OC, d->KH, d->KW, (ptrdiff_t)g->Hq * g->Wq, g->Wq);
    }
    J.wacc = wacc;
    J.wf = wf;
    J.offp = offp;
    J.offx = offx;
    J.T = threads < 1 ? 1 : threads;
    dt_nn_run_parts(backward_part, &J, J.T);
    for (int oc = 0; oc < d->OC; oc++)
        for (size_t k = 0; k < g->K; k++) dw[oc * g->K + k] += wacc[((oc / TC) * g->K + k) * TC + oc % TC];
}
