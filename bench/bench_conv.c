/* The two convolution algorithms (src/nn/conv2d_impl.h) side by side: direct
 * kernel against im2col + GEMM, forward and backward (input and weight
 * gradients), on the W3 CNN's layers and on ResNet-like 3x3 and 1x1 layers,
 * batch 64, on one thread or --threads N (the direct kernel and the bf16 one
 * on N parts, the fp32 GEMM on N BLAS threads). Rounds interleave the two
 * algorithms shape by shape so both see the same background load; each prints
 * its best round in GFLOP/s and the ratio. On a CPU with AVX512-BF16 a third,
 * --precision bf16's im2col + dt_gemm_bf16 (dt_conv2d_*_bf16_on), runs in the
 * same rounds, its ratio taken against the faster fp32 algorithm.
 *
 *   bench_conv [--rounds N] [--threads N]       (defaults 5, 1)
 */
#include "dtrain/core.h"
#include "dtrain/nn.h"
#include "nn/conv2d_impl.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct {
    const char *name;
    dt_conv2d_dims d;
} shape;

static float *rnd(size_t n) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return x;
}

static int threads = 1;

/* Seconds for one forward + one backward (dinp too unless first layer). */
static double run(int alg, const dt_conv2d_dims *d, float *s, float *y, float *x, float *w,
                  float *b, float *dx, float *dw, float *db, double *tf) {
    double t0 = now();
    if (alg == 0)
        dt_conv2d_direct_forward(y, s, x, w, b, d, threads);
    else if (alg == 1)
        dt_conv2d_im2col_forward(y, s, x, w, b, d);
    else
        dt_conv2d_forward_bf16_on(y, s, x, w, b, d, threads);
    double t1 = now();
    if (alg == 0)
        dt_conv2d_direct_backward(d->IC > 1 ? dx : NULL, dw, db, s, y, x, w, d, threads);
    else if (alg == 1)
        dt_conv2d_im2col_backward(d->IC > 1 ? dx : NULL, dw, db, s, y, x, w, d);
    else
        dt_conv2d_backward_bf16_on(d->IC > 1 ? dx : NULL, dw, db, s, y, x, w, d, threads);
    *tf = t1 - t0;
    return now() - t0;
}

int main(int argc, char **argv) {
    int rounds = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else rounds = 0;
    }
    if (rounds < 1 || threads < 1 || threads > 64 || argc % 2 != 1) {
        fprintf(stderr, "usage: bench_conv [--rounds N] [--threads N]\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    static const shape shapes[] = {
        {"W3 conv1 1->32 5x5 28x28", {64, 1, 28, 28, 32, 5, 5, 1, 2}},
        {"W3 conv2 32->64 5x5 14x14", {64, 32, 14, 14, 64, 5, 5, 1, 2}},
        {"3x3 64->64 14x14", {64, 64, 14, 14, 64, 3, 3, 1, 1}},
        {"3x3 128->128 7x7", {64, 128, 7, 7, 128, 3, 3, 1, 1}},
        {"1x1 64->256 14x14", {64, 64, 14, 14, 256, 1, 1, 1, 0}},
    };
    const int algs = dt_gemm_bf16_available() ? 3 : 2;
    printf("threads %d\n%-28s %12s %12s %12s %12s %7s", threads, "shape (batch 64)", "direct fwd", "im2col fwd",
           "direct f+b", "im2col f+b", "ratio");
    printf(algs == 3 ? " %12s %12s %9s\n" : "\n", "bf16 fwd", "bf16 f+b", "bf16/fp32");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const dt_conv2d_dims *d = &shapes[i].d;
        size_t P = (size_t)dt_conv2d_out_h(d) * dt_conv2d_out_w(d);
        size_t nx = (size_t)d->B * d->IC * d->H * d->W, nw = (size_t)d->OC * d->IC * d->KH * d->KW;
        size_t ny = (size_t)d->B * d->OC * P;
        size_t ns = dt_conv2d_direct_scratch_floats(d, threads), ni = dt_conv2d_im2col_scratch_floats(d);
        size_t nh = algs == 3 ? dt_conv2d_bf16_scratch_floats_on(d, threads) : 0;
        ns = ns > ni ? ns : ni;
        float *s = rnd(ns > nh ? ns : nh), *y = rnd(ny), *x = rnd(nx), *w = rnd(nw), *b = rnd(d->OC);
        float *dx = rnd(nx), *dw = rnd(nw), *db = rnd(d->OC);
        double best[3] = {1e30, 1e30, 1e30}, bestf[3] = {1e30, 1e30, 1e30};
        double flop = 2.0 * nw * P * d->B; /* one product */
        double flops_fb = flop * (d->IC > 1 ? 3 : 2);
        for (int r = 0; r < rounds; r++)
            for (int a = 0; a < algs; a++) {
                double tf, t = run(a, d, s, y, x, w, b, dx, dw, db, &tf);
                if (t < best[a]) best[a] = t;
                if (tf < bestf[a]) bestf[a] = tf;
            }
        printf("%-28s %7.1f GF/s %7.1f GF/s %7.1f GF/s %7.1f GF/s %6.2fx", shapes[i].name,
               flop / bestf[0] / 1e9, flop / bestf[1] / 1e9, flops_fb / best[0] / 1e9,
               flops_fb / best[1] / 1e9, best[1] / best[0]);
        const double fp32 = best[0] < best[1] ? best[0] : best[1];
        if (algs == 3)
            printf(" %7.1f GF/s %7.1f GF/s %8.2fx", flop / bestf[2] / 1e9, flops_fb / best[2] / 1e9, fp32 / best[2]);
        printf("\n");
        printf("RESULT bench_conv shape=\"%s\" threads=%d direct_ms=%.2f im2col_ms=%.2f ratio=%.3f",
               shapes[i].name, threads, best[0] * 1e3, best[1] * 1e3, best[1] / best[0]);
        if (algs == 3) printf(" bf16_ms=%.2f bf16_vs_fp32=%.3f", best[2] * 1e3, fp32 / best[2]);
        printf("\n");
        free(s); free(y); free(x); free(w); free(b); free(dx); free(dw); free(db);
    }
    return 0;
}
