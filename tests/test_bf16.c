/* --precision bf16's kernels (issue 17).
 *
 * - dt_round_bf16 and dt_round_fp16 (--precision fp16) against the wire's
 *   scalar conversions (dt_f32_to_bf16, dt_f32_to_f16, their own test in
 *   test_compress) on special values and 2^20 random bit patterns, in place and
 *   with tails.
 * - dt_gemm_bf16 (AVX512-BF16; skipped, saying so, on a CPU without it) against
 *   its definition: both operands rounded, products summed in double. The
 *   products of bf16 values are exact in fp32, so the only difference is fp32
 *   summation: |got - ref| <= 1e-5 * sum_k |a_ik b_kj| + 1e-30. Every
 *   transposition, sizes off the 8 x 32 tile and odd K, alpha, beta, and
 *   beta = 0 over a NaN-filled C.
 * - PyTorch's bf16 autocast (fixtures ref_linear_bf16, ref_conv2d_bf16): linear
 *   and conv2d forward and backward run on rounded operands, through the
 *   emulated path (dt_round_bf16 + the fp32 kernels) and, where available,
 *   dt_linear_*_bf16. Autocast returns bf16 results and rounds the bias, so
 *   the comparison is at bf16's resolution: |got - ref| <= 2^-7 max|ref| per
 *   tensor (a bf16 has an 8-bit significand: half an ulp is 2^-9 relative, and
 *   sums of rounded terms drift by a few of those). A run without rounding
 *   also passes that bound, so each is compared as well with its exact value in
 *   double from the rounded operands at fp32 tolerance (atol 1e-5, rtol 1e-4).
 *   conv2d runs emulated and, where available, natively (dt_conv2d_*_bf16).
 * - conv2d, emulated and native, on odd shapes (1x1, 3x3, 5x5, 3x2 kernels,
 *   stride 2, padding 0/1/2, channels off 16, batch 1, chunks of one and of
 *   several samples) against its exact value from rounded operands, each
 *   element within 1e-5 sum|terms| (fp32 summation); natively also on 1, 2
 *   and 3 threads (more than the batch for B <= 2; dt_conv2d_*_bf16_on, each
 *   with exactly the scratch it asks for, NaN-filled) against the public
 *   entry points, bit for bit.
 * - Attention's per-head products natively (dt_attention_gqa_*_bf16, grouped
 *   and not, T and head sizes off the tiles) against double from rounded q, k,
 *   v, dout and the rounded probabilities and dS, the rounding autocast does
 *   (an unrounded-probability run fails this by ~300x its bound). */
#include "dtrain/nn.h"
#include "dtrain/testing.h"
#include "fixturehelp.h"
#include "nn/conv2d_impl.h"
#include "testhelp.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float of_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static float wire(float x) { return dt_bf16_to_f32(dt_f32_to_bf16(x)); }

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float uniform(void) { return (float)(next() % 2000001) / 1000000.0f - 1.0f; }

static void test_patterns(const char *what, void (*round)(float *, const float *, size_t), float (*conv)(float));

static void test_round(void) {
    const float special[] = {0.0f, -0.0f, 1.0f, of_bits(0x3f808000u), of_bits(0x3f818000u), of_bits(0x3f808001u),
                             3.4e38f, -3.4e38f, 3.38e38f, INFINITY, -INFINITY, NAN, -NAN, of_bits(0x7f800001u),
                             1e-40f, -1e-45f, 1.17549435e-38f, 65504.0f, 0.1f, -2.5f, 1e20f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    float out[32];
    dt_round_bf16(out, special, (size_t)ns);
    int same = 1;
    for (int i = 0; i < ns; i++)
        if (bits(out[i]) != bits(wire(special[i]))) {
            same = 0;
            printf("  round(%a) = %08x, wire %08x\n", special[i], bits(out[i]), bits(wire(special[i])));
        }
    test_cond("special values round as the wire's conversion (ties to even, overflow to inf, NaN kept)", same);
    test_cond("1 + 2^-8 is a tie: rounds to 1", out[3] == 1.0f);
    test_cond("1 + 3 2^-8 is a tie: rounds up to even", bits(out[4]) == 0x3f820000u);
    test_cond("3.4e38 overflows to inf", isinf(out[6]) && out[6] > 0);
    test_cond("NaN stays NaN", isnan(out[11]) && isnan(out[13]));

    test_patterns("bf16", dt_round_bf16, wire);
}

/* Equal bits, or both NaN (fp16's conversion gives the canonical NaN, the
 * rounding keeps the payload: both are NaN, as a half has fewer payload bits). */
static int same_value(float a, float b) { return bits(a) == bits(b) || (isnan(a) && isnan(b)); }

/* 2^20 random bit patterns through round (lengths 0..39 across the 16-wide
 * tail, the whole array, in place) against the scalar conversion there and back. */
static void test_patterns(const char *what, void (*round)(float *, const float *, size_t), float (*conv)(float)) {
    enum { N = 1 << 20 };
    static float x[N + 7], y[N + 7];
    for (int i = 0; i < N + 7; i++) x[i] = of_bits(next() << 1 ^ next());
    for (int i = 0; i < N + 7; i += 3) x[i] = of_bits(bits(x[i]) & 0x87ffffffu); /* a third near 1 and below */
    int bad = 0;
    for (int n = 0; n < 40 && !bad; n++) {
        round(y, x, (size_t)n);
        for (int i = 0; i < n; i++) bad |= !same_value(y[i], conv(x[i]));
    }
    round(y, x, N + 7);
    for (int i = 0; i < N + 7; i++) bad |= !same_value(y[i], conv(x[i]));
    memcpy(y, x, sizeof x);
    round(y, y, N + 7); /* in place */
    for (int i = 0; i < N + 7; i++) bad |= !same_value(y[i], conv(x[i]));
    char d[128];
    snprintf(d, sizeof d, "%s: 2^20 random bit patterns (lengths 0..39, in place) round as the conversion there and back",
             what);
    test_cond(d, !bad);
}

static float half_wire(float x) { return dt_f16_to_f32(dt_f32_to_f16(x)); }

/* dt_round_fp16 against the wire's fp16 conversion: ties, the largest half, the
 * overflow to inf, subnormals (2^-24 steps) and their flush to zero. */
static void test_round_fp16(void) {
    const float special[] = {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f,
                             -65520.0f, 1e9f, INFINITY, -INFINITY, NAN, 0x1p-14f, 0x1p-15f, 0x1p-24f, 0x1p-25f,
                             0x1.8p-25f, 0x1.000002p-25f, 3 * 0x1p-25f, 1e-30f, -1e-40f, 0.1f, -2.5f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    float out[32];
    dt_round_fp16(out, special, (size_t)ns);
    int same = 1;
    for (int i = 0; i < ns; i++)
        if (!same_value(out[i], half_wire(special[i]))) {
            same = 0;
            printf("  round(%a) = %08x, wire %08x\n", special[i], bits(out[i]), bits(half_wire(special[i])));
        }
    test_cond("fp16: special values round as the wire's conversion", same);
    test_cond("fp16: 1 + 2^-11 is a tie: rounds to 1; 1 + 3 2^-11 up to even", out[3] == 1.0f && out[4] == 1.0f + 0x1p-9f);
    test_cond("fp16: 65504 kept, 65519 rounds to 65504, 65520 overflows to inf",
              out[5] == 65504.0f && out[6] == 65504.0f && isinf(out[7]) && isinf(out[8]) && out[8] < 0);
    test_cond("fp16: 2^-24 kept, 2^-25 a tie to 0, just above it to 2^-24, 3 2^-25 to 2^-23",
              out[15] == 0x1p-24f && out[16] == 0.0f && out[18] == 0x1p-24f && out[19] == 0x1p-23f);
    test_cond("fp16: 1e-30 flushes to zero (what loss scaling is for), NaN stays NaN", out[20] == 0.0f && isnan(out[12]));
    test_patterns("fp16", dt_round_fp16, half_wire);
}

/* C = alpha op(A) op(B) + beta C in double from rounded operands; err[i] gets
 * the bound on fp32 summation (1e-5 sum |terms|). */
static void gemm_ref(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, const float *C0, float *C, float *err) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)wire(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                           wire(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                s += p, a += fabs(p);
            }
            double c = beta == 0.0f ? 0.0 : (double)beta * C0[(size_t)i * N + j];
            C[(size_t)i * N + j] = (float)(alpha * s + c);
            err[(size_t)i * N + j] = (float)(1e-5 * (fabs(alpha) * a + fabs(c)) + 1e-30);
        }
}

static int gemm_case(bool ta, bool tb, int M, int N, int K, float alpha, float beta) {
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1; /* padded leading dimensions */
    float *A = malloc(sizeof(float) * (size_t)lda * (ta ? K : M)), *B = malloc(sizeof(float) * (size_t)ldb * (tb ? N : K));
    float *C = malloc(sizeof(float) * (size_t)M * N), *C0 = malloc(sizeof(float) * (size_t)M * N);
    float *R = malloc(sizeof(float) * (size_t)M * N), *E = malloc(sizeof(float) * (size_t)M * N);
    float *S = malloc(sizeof(float) * (dt_gemm_bf16_scratch_floats(M, N, K) + 1));
    for (int i = 0; i < lda * (ta ? K : M); i++) A[i] = uniform();
    for (int i = 0; i < ldb * (tb ? N : K); i++) B[i] = uniform() * 3.0f;
    for (int i = 0; i < M * N; i++) C0[i] = C[i] = beta == 0.0f ? NAN : uniform();
    gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, R, E);
    dt_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, N, S);
    int ok = 1;
    for (int i = 0; i < M * N && ok; i++)
        if (!(fabsf(C[i] - R[i]) <= E[i])) {
            ok = 0;
            printf("  %c%c M=%d N=%d K=%d alpha=%g beta=%g: C[%d] = %.9g, want %.9g (+- %.3g)\n", ta ? 'T' : 'N',
                   tb ? 'T' : 'N', M, N, K, alpha, beta, i, C[i], R[i], E[i]);
        }
    free(A), free(B), free(C), free(C0), free(R), free(E), free(S);
    return ok;
}

/* dt_gemm_bf16_bias = dt_gemm_bf16 with beta 1 on a C filled with the bias, bit for bit
 * (NT, a linear layer's forward, and NN; shapes off the 8 x 32 tile; 3 threads too),
 * and with no bias = beta 0. */
static void test_gemm_bias(void) {
    static const int sizes[][3] = {{1, 1, 1}, {7, 31, 3}, {9, 33, 37}, {17, 70, 16}, {70, 520, 130}};
    int ok = 1;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int t = 0; t < 3; t++) {
            const int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
            const bool tb = t != 1;
            float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *bias = malloc(sizeof(float) * N);
            float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
            float *S = malloc(sizeof(float) * dt_gemm_bf16_scratch_floats(M, N, K));
            for (int i = 0; i < M * K; i++) A[i] = uniform();
            for (int i = 0; i < K * N; i++) B[i] = uniform();
            for (int j = 0; j < N; j++) bias[j] = uniform();
            openblas_set_num_threads(t == 2 ? 3 : 1);
            for (int i = 0; i < M; i++) memcpy(C1 + (size_t)i * N, bias, sizeof(float) * N);
            dt_gemm_bf16(false, tb, M, N, K, 1.0f, A, K, B, tb ? K : N, 1.0f, C1, N, S);
            for (int i = 0; i < M * N; i++) C2[i] = NAN; /* not read */
            dt_gemm_bf16_bias(false, tb, M, N, K, A, K, B, tb ? K : N, bias, C2, N, S);
            ok &= memcmp(C1, C2, sizeof(float) * M * N) == 0;
            dt_gemm_bf16(false, tb, M, N, K, 1.0f, A, K, B, tb ? K : N, 0.0f, C1, N, S);
            for (int i = 0; i < M * N; i++) C2[i] = NAN;
            dt_gemm_bf16_bias(false, tb, M, N, K, A, K, B, tb ? K : N, NULL, C2, N, S);
            ok &= memcmp(C1, C2, sizeof(float) * M * N) == 0;
            free(A), free(B), free(bias), free(C1), free(C2), free(S);
        }
    openblas_set_num_threads(1);
    test_cond("dt_gemm_bf16_bias = dt_gemm_bf16 on a bias-filled C with beta 1, bit for bit (NT, NN, 3 threads; "
              "no bias = beta 0; C not read)", ok);
}

static void test_gemm(void) {
    if (!dt_gemm_bf16_available()) {
        printf("skip dt_gemm_bf16: this CPU has no AVX512-BF16 (the emulated path is tested below)\n");
        return;
    }
    static const int sizes[][3] = {{1, 1, 1},   {8, 32, 2},  {7, 31, 3},   {9, 33, 37}, {17, 70, 16},
                                   {64, 96, 128}, {13, 5, 255}, {3, 100, 1}, {40, 17, 64}};
    int ok = 1;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int t = 0; t < 4; t++) {
            const int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
            ok &= gemm_case(t & 1, t & 2, M, N, K, 1.0f, 0.0f);
            ok &= gemm_case(t & 1, t & 2, M, N, K, 0.5f, 1.0f);
            ok &= gemm_case(t & 1, t & 2, M, N, K, -1.25f, 0.75f);
        }
    test_cond("dt_gemm_bf16 = rounded operands summed in double (NN, NT, TN, TT; 9 shapes; alpha, beta; beta 0 over NaN)",
              ok);
    /* large enough to be split over threads: the same bits on 1 and 3 */
    const int M = 70, N = 520, K = 130;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C1 = malloc(sizeof(float) * M * N);
    float *C3 = malloc(sizeof(float) * M * N), *S = malloc(sizeof(float) * dt_gemm_bf16_scratch_floats(M, N, K));
    for (int i = 0; i < M * K; i++) A[i] = uniform();
    for (int i = 0; i < K * N; i++) B[i] = uniform();
    openblas_set_num_threads(1);
    dt_gemm_bf16(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N, S);
    openblas_set_num_threads(3);
    dt_gemm_bf16(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C3, N, S);
    openblas_set_num_threads(1);
    test_cond("dt_gemm_bf16 with 3 BLAS threads (2 parts at this size) = with 1, bit for bit", memcmp(C1, C3, sizeof(float) * M * N) == 0);
    ok = gemm_case(false, false, M, N, K, 1.0f, 0.0f);
    test_cond("... and = its definition", ok);
    free(A), free(B), free(C1), free(C3), free(S);
    test_gemm_bias();
}

/* ---- against PyTorch's autocast ------------------------------------------------- */

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* got against the fixture's autocast tensor at bf16 resolution and against
 * `exact` (double from rounded operands) at fp32 tolerance. */
static void check(fx *x, const char *what, const float *got, const char *name, const float *exact, size_t n) {
    const float *ref = fx_f32(x, name, n);
    char w[96];
    snprintf(w, sizeof w, "%s vs autocast (2^-7 max|ref|)", what);
    test_close(w, got, ref, n, ldexp(max_abs(ref, n), -7), 0);
    snprintf(w, sizeof w, "%s vs exact", what);
    test_close(w, got, exact, n, 1e-5, 1e-4);
}

static float *rounded(fx *x, const float *src, size_t n) {
    float *r = fx_zeros(x, n);
    dt_round_bf16(r, src, n);
    return r;
}

/* out = x w^T + b, dinp = dout w, dw = dout^T x, db = sum dout, in double from
 * rounded x, w, dout (the bias as given). */
static void linear_exact(fx *f, const float *x, const float *w, const float *b, const float *dout, int N, int IC,
                         int OC, float **out, float **dinp, float **dw, float **db) {
    *out = fx_zeros(f, (size_t)N * OC), *dinp = fx_zeros(f, (size_t)N * IC), *dw = fx_zeros(f, (size_t)OC * IC);
    *db = fx_zeros(f, (size_t)OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int i = 0; i < IC; i++) s += (double)x[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            (*out)[(size_t)n * OC + o] = (float)s;
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += (double)dout[(size_t)n * OC + o] * w[(size_t)o * IC + i];
            (*dinp)[(size_t)n * IC + i] = (float)s;
        }
    for (int o = 0; o < OC; o++) {
        double t = 0;
        for (int i = 0; i < IC; i++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += (double)dout[(size_t)n * OC + o] * x[(size_t)n * IC + i];
            (*dw)[(size_t)o * IC + i] = (float)s;
        }
        for (int n = 0; n < N; n++) t += dout[(size_t)n * OC + o];
        (*db)[o] = (float)t;
    }
}

static void test_linear_autocast(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_linear_bf16.safetensors")) return;
    const int N = fx_meta_int(&x, "N"), IC = fx_meta_int(&x, "IC"), OC = fx_meta_int(&x, "OC");
    const size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    const float *inp = fx_f32(&x, "inp", ni), *w = fx_f32(&x, "w", nw), *b = fx_f32(&x, "b", OC);
    const float *dout = fx_f32(&x, "dout", no);
    const float *ri = rounded(&x, inp, ni), *rw = rounded(&x, w, nw), *rd = rounded(&x, dout, no);
    float *eo, *ed, *ew, *eb;
    linear_exact(&x, ri, rw, b, rd, N, IC, OC, &eo, &ed, &ew, &eb);
    for (int native = 0; native < 2; native++) {
        if (native && !dt_gemm_bf16_available()) break;
        float *out = fx_fill(&x, no, 12345.0f), *dinp = fx_zeros(&x, ni), *dw = fx_zeros(&x, nw), *db = fx_zeros(&x, OC);
        float *S = fx_zeros(&x, dt_linear_bf16_scratch_floats(N, IC, OC));
        if (native) {
            dt_linear_forward_bf16(out, inp, w, b, N, IC, OC, S);
            dt_linear_backward_bf16(dinp, dw, db, dout, inp, w, N, IC, OC, S);
        } else {
            dt_linear_forward(out, ri, rw, b, N, IC, OC);
            dt_linear_backward(dinp, dw, db, rd, ri, rw, N, IC, OC);
        }
        const char *tag = native ? "linear bf16 (dt_gemm_bf16)" : "linear bf16 (emulated)";
        char what[64];
        snprintf(what, sizeof what, "%s out", tag), check(&x, what, out, "out", eo, no);
        snprintf(what, sizeof what, "%s dinp", tag), check(&x, what, dinp, "dinp", ed, ni);
        snprintf(what, sizeof what, "%s dw", tag), check(&x, what, dw, "dw", ew, nw);
        snprintf(what, sizeof what, "%s db", tag), check(&x, what, db, "db", eb, OC);
    }
    fx_close(&x);
}

/* Convolution against autocast, emulated (the fp32 kernels, whose error
 * test_reference and test_conv bound, on rounded operands) and, where
 * available, native (dt_conv2d_*_bf16: im2col + dt_gemm_bf16, what
 * --precision bf16 runs on this CPU); and rounding must change the result (an
 * unrounded run would pass the bf16-resolution bound). */
static void test_conv_autocast(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_conv2d_bf16.safetensors")) return;
    dt_conv2d_dims d = {fx_meta_int(&x, "B"), fx_meta_int(&x, "IC"), fx_meta_int(&x, "H"), fx_meta_int(&x, "W"),
                        fx_meta_int(&x, "OC"), fx_meta_int(&x, "K"), fx_meta_int(&x, "K"),
                        fx_meta_int(&x, "stride"), fx_meta_int(&x, "pad")};
    const int OH = dt_conv2d_out_h(&d), OW = dt_conv2d_out_w(&d);
    const size_t ni = (size_t)d.B * d.IC * d.H * d.W, nw = (size_t)d.OC * d.IC * d.KH * d.KW,
                 no = (size_t)d.B * d.OC * OH * OW;
    const float *inp = fx_f32(&x, "inp", ni), *w = fx_f32(&x, "w", nw), *b = fx_f32(&x, "b", (size_t)d.OC);
    const float *dout = fx_f32(&x, "dout", no);
    const size_t ns = dt_conv2d_scratch_floats(&d), nn = dt_conv2d_bf16_scratch_floats(&d);
    float *S = fx_zeros(&x, ns > nn ? ns : nn), *o32 = fx_zeros(&x, no), *out = NULL;
    dt_conv2d_forward(o32, S, inp, w, b, &d);
    const double res = ldexp(1, -7);
    for (int native = 0; native < 2; native++) {
        if (native && !dt_gemm_bf16_available()) {
            printf("skip conv2d bf16 (dt_gemm_bf16): this CPU has no AVX512-BF16\n");
            break;
        }
        out = fx_zeros(&x, no);
        float *dinp = fx_zeros(&x, ni), *dw = fx_zeros(&x, nw), *db = fx_zeros(&x, (size_t)d.OC);
        if (native) {
            dt_conv2d_forward_bf16(out, S, inp, w, b, &d);
            dt_conv2d_backward_bf16(dinp, dw, db, S, dout, inp, w, &d);
        } else {
            dt_conv2d_forward(out, S, rounded(&x, inp, ni), rounded(&x, w, nw), b, &d);
            dt_conv2d_backward(dinp, dw, db, S, rounded(&x, dout, no), rounded(&x, inp, ni), rounded(&x, w, nw), &d);
        }
        const char *tag = native ? "conv2d bf16 (dt_gemm_bf16)" : "conv2d bf16 (emulated)";
        const struct { const char *name; const float *got; size_t n; } t[] = {
            {"out", out, no}, {"dinp", dinp, ni}, {"dw", dw, nw}, {"db", db, (size_t)d.OC}};
        for (int i = 0; i < 4; i++) {
            char what[80];
            const float *ref = fx_f32(&x, t[i].name, t[i].n);
            snprintf(what, sizeof what, "%s %s vs autocast", tag, t[i].name);
            test_close(what, t[i].got, ref, t[i].n, res * max_abs(ref, t[i].n), 0);
        }
        test_cond("conv2d: rounding the operands changes the output", memcmp(out, o32, no * sizeof(float)) != 0);
    }
    fx_close(&x);
}

/* |got - ref| <= bound elementwise (both computed by the caller); prints the worst. */
static void test_bound(const char *what, const float *got, const double *ref, const double *bound, size_t n) {
    double worst = 0, worst_abs = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]), r = e / bound[i];
        if (!(r <= worst)) worst = r, at = i;
        if (e > worst_abs) worst_abs = e;
    }
    printf("%s %-52s n=%zu max|diff|=%.3g (at %zu, %.2f of its bound)\n", worst <= 1 ? "ok  " : "FAIL", what, n,
           worst_abs, at, worst);
    test_cond(what, worst <= 1);
}

/* Adds v to r[i] and |v| to a[i]. */
static void acc2(double *r, double *a, size_t i, double v) { r[i] += v, a[i] += fabs(v); }

/* A convolution in double from rounded x, w, dout (the bias as given): out,
 * dinp, dw, db, each with the bound 1e-5 sum|terms| + 1e-30 on fp32 summation. */
static void conv_exact(const dt_conv2d_dims *d, const float *x, const float *w, const float *b, const float *g,
                       double *r[4], double *e[4]) {
    const int OH = dt_conv2d_out_h(d), OW = dt_conv2d_out_w(d);
    for (int n = 0; n < d->B; n++)
        for (int o = 0; o < d->OC; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    const size_t io = (((size_t)n * d->OC + o) * OH + oh) * OW + ow;
                    const double gv = wire(g[io]);
                    acc2(r[0], e[0], io, b[o]), acc2(r[3], e[3], (size_t)o, gv);
                    for (int c = 0; c < d->IC; c++)
                        for (int kh = 0; kh < d->KH; kh++)
                            for (int kw = 0; kw < d->KW; kw++) {
                                const int ih = oh * d->stride - d->pad + kh, iw = ow * d->stride - d->pad + kw;
                                if (ih < 0 || ih >= d->H || iw < 0 || iw >= d->W) continue;
                                const size_t ix = (((size_t)n * d->IC + c) * d->H + ih) * d->W + iw;
                                const size_t iw_ = (((size_t)o * d->IC + c) * d->KH + kh) * d->KW + kw;
                                const double xv = wire(x[ix]), wv = wire(w[iw_]);
                                acc2(r[0], e[0], io, xv * wv), acc2(r[1], e[1], ix, gv * wv);
                                acc2(r[2], e[2], iw_, gv * xv);
                            }
                }
}

static float *rnd_floats(size_t n, float scale) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = uniform() * scale;
    return p;
}

/* The native convolution on `threads` threads, into zeroed out, dinp, dw, db,
 * its scratch exactly the size it asks for (ASan sees an overrun) and NaN (a
 * value read before it is written shows). Equal bits to ref[0..3]: the
 * elements that differ, for each tensor. */
static size_t native_diffs(const dt_conv2d_dims *d, float *const ref[4], const size_t n[4], const float *x,
                           const float *w, const float *b, const float *g, int threads) {
    const size_t ns = dt_conv2d_bf16_scratch_floats_on(d, threads);
    float *S = malloc(ns * sizeof(float) + 1), *got[4];
    for (size_t i = 0; i < ns; i++) S[i] = NAN;
    for (int t = 0; t < 4; t++) got[t] = calloc(n[t], sizeof(float));
    dt_conv2d_forward_bf16_on(got[0], S, x, w, b, d, threads);
    dt_conv2d_backward_bf16_on(got[1], got[2], got[3], S, g, x, w, d, threads);
    size_t bad = 0;
    for (int t = 0; t < 4; t++) {
        for (size_t i = 0; i < n[t]; i++) bad += bits(got[t][i]) != bits(ref[t][i]);
        free(got[t]);
    }
    free(S);
    return bad;
}

/* One shape: emulated (dt_conv2d_* on rounded copies) and native
 * (dt_conv2d_*_bf16 on the fp32 operands) against conv_exact; native on 1, 2
 * and 3 threads against the public entry, bit for bit. */
static void conv_exact_case(const dt_conv2d_dims *d) {
    const int OH = dt_conv2d_out_h(d), OW = dt_conv2d_out_w(d);
    const size_t n[4] = {(size_t)d->B * d->OC * OH * OW, (size_t)d->B * d->IC * d->H * d->W,
                         (size_t)d->OC * d->IC * d->KH * d->KW, (size_t)d->OC};
    float *x = rnd_floats(n[1], 1), *w = rnd_floats(n[2], 1), *b = rnd_floats(n[3], 1), *g = rnd_floats(n[0], 1);
    float *rx = rnd_floats(n[1], 1), *rw = rnd_floats(n[2], 1), *rg = rnd_floats(n[0], 1);
    dt_round_bf16(rx, x, n[1]), dt_round_bf16(rw, w, n[2]), dt_round_bf16(rg, g, n[0]);
    double *r[4], *e[4];
    for (int t = 0; t < 4; t++) r[t] = calloc(n[t], sizeof(double)), e[t] = calloc(n[t], sizeof(double));
    conv_exact(d, x, w, b, g, r, e);
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < n[t]; i++) e[t][i] = 1e-5 * e[t][i] + 1e-30;
    const size_t ns = dt_conv2d_scratch_floats(d), nn = dt_conv2d_bf16_scratch_floats(d);
    float *S = malloc((ns > nn ? ns : nn) * sizeof(float) + 4);
    for (int native = 0; native < 2; native++) {
        if (native && !dt_gemm_bf16_available()) break;
        float *got[4];
        for (int t = 0; t < 4; t++) got[t] = calloc(n[t], sizeof(float));
        if (native) {
            dt_conv2d_forward_bf16(got[0], S, x, w, b, d);
            dt_conv2d_backward_bf16(got[1], got[2], got[3], S, g, x, w, d);
        } else {
            dt_conv2d_forward(got[0], S, rx, rw, b, d);
            dt_conv2d_backward(got[1], got[2], got[3], S, rg, rx, rw, d);
        }
        static const char *names[4] = {"out", "dinp", "dw", "db"};
        for (int t = 0; t < 4; t++) {
            char what[128];
            snprintf(what, sizeof what, "conv2d %s B%d %d->%d %dx%d k%dx%d s%d p%d %s = exact", native ? "native" : "emul",
                     d->B, d->IC, d->OC, d->H, d->W, d->KH, d->KW, d->stride, d->pad, names[t]);
            test_bound(what, got[t], r[t], e[t], n[t]);
        }
        for (int T = 1; native && T <= 3; T++) {
            size_t bad = native_diffs(d, got, n, x, w, b, g, T);
            char what[160];
            snprintf(what, sizeof what, "conv2d native B%d %d->%d %dx%d k%dx%d s%d p%d on %d thread(s) = public entry, "
                     "bit for bit", d->B, d->IC, d->OC, d->H, d->W, d->KH, d->KW, d->stride, d->pad, T);
            printf("%s %s (%zu elements differ)\n", bad ? "FAIL" : "ok  ", what, bad);
            test_cond(what, bad == 0);
        }
        for (int t = 0; t < 4; t++) free(got[t]);
    }
    for (int t = 0; t < 4; t++) free(r[t]), free(e[t]);
    free(x), free(w), free(b), free(g), free(rx), free(rw), free(rg), free(S);
}

/* Odd shapes: 1x1 and 3x3, stride 2, padding 0/1/2, channels off 16, batch 1,
 * a chunk of several samples (small maps) and one of one (large); for the
 * threads, batch 2 with K = 297 (3 parts of dW, 2 of the forward, 1 chunk) and
 * batch 7 in 2 chunks of dW, 3 of the forward. */
static void test_conv_exact(void) {
    static const dt_conv2d_dims shapes[] = {
        {1, 3, 9, 9, 5, 3, 3, 2, 1},     {2, 17, 7, 7, 19, 1, 1, 1, 0},  {3, 5, 8, 6, 33, 3, 3, 1, 2},
        {1, 20, 11, 11, 7, 5, 5, 2, 2},  {5, 1, 28, 28, 32, 5, 5, 1, 2}, {4, 18, 5, 5, 40, 3, 3, 1, 1},
        {2, 9, 12, 10, 3, 1, 1, 2, 0},   {2, 4, 6, 7, 6, 3, 2, 1, 0},    {2, 33, 9, 9, 21, 3, 3, 2, 1},
        {7, 6, 10, 10, 9, 3, 3, 1, 1},
    };
    if (!dt_gemm_bf16_available()) printf("skip conv2d native = exact: this CPU has no AVX512-BF16\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) conv_exact_case(&shapes[i]);
}

/* ---- attention's per-head products (dt_attention_gqa_*_bf16) ----------------------
 * Against double from rounded q, k, v, dout and the probabilities the kernel
 * saved (att, fp32, checked against a softmax in double): out = r(att) r(v),
 * dv = r(att)^T r(dout) summed over the group; dS = att (datt - rowsum(att
 * datt)) with datt = r(dout) r(v)^T, then dq = scale r(dS) r(k), dk = scale
 * r(dS)^T r(q). r() is bf16 rounding; the kernel rounds the probabilities and dS
 * it computed in fp32, so where dS lies within its fp32 error of a bf16 rounding
 * boundary the bound also allows that term's one-step flip. */
typedef struct {
    int B, T, NH, NKV, HS;
} att_dims;

/* The reference for one (b, h): adds into r (out/dq/dk/dv slots by offset) and bounds e. */
static void att_head(const att_dims *a, int b, int h, const float *qkv, const float *dout, const float *att,
                     double *rout, double *eout, double *rd, double *ed) {
    const int T = a->T, HS = a->HS, C3 = (a->NH + 2 * a->NKV) * HS, C = a->NH * HS, kvh = h / (a->NH / a->NKV);
    const double scale = 1.0 / sqrt((double)HS);
    const size_t q0 = (size_t)h * HS, k0 = (size_t)(a->NH + kvh) * HS, v0 = (size_t)(a->NH + a->NKV + kvh) * HS;
    const float *X = qkv + (size_t)b * T * C3, *G = dout + (size_t)b * T * C, *A = att + ((size_t)b * a->NH + h) * T * T;
    double *dx = rd + (size_t)b * T * C3, *ex = ed + (size_t)b * T * C3;
    for (int t = 0; t < T; t++) {
        double datt[256], mag[256], dot = 0, dmag = 0;
        for (int j = 0; j <= t; j++) {
            datt[j] = mag[j] = 0;
            for (int c = 0; c < HS; c++) {
                const double p = (double)wire(G[(size_t)t * C + q0 + c]) * wire(X[(size_t)j * C3 + v0 + c]);
                datt[j] += p, mag[j] += fabs(p);
            }
            dot += A[(size_t)t * T + j] * datt[j], dmag += A[(size_t)t * T + j] * mag[j];
        }
        for (int j = 0; j <= t; j++) {
            const double pa = wire(A[(size_t)t * T + j]);
            const double ds = A[(size_t)t * T + j] * (datt[j] - dot);
            const double win = 1e-5 * A[(size_t)t * T + j] * (mag[j] + dmag) + 1e-30;
            const double rds = wire((float)ds), flip = fabs((double)wire((float)(ds + win)) - wire((float)(ds - win)));
            for (int c = 0; c < HS; c++) {
                const size_t ot = (size_t)b * T * C + (size_t)t * C + q0 + c;
                acc2(rout, eout, ot, pa * wire(X[(size_t)j * C3 + v0 + c]));
                acc2(dx, ex, (size_t)j * C3 + v0 + c, pa * wire(G[(size_t)t * C + q0 + c]));
                const double kj = wire(X[(size_t)j * C3 + k0 + c]), qt = wire(X[(size_t)t * C3 + q0 + c]);
                acc2(dx, ex, (size_t)t * C3 + q0 + c, scale * rds * kj);
                acc2(dx, ex, (size_t)j * C3 + k0 + c, scale * rds * qt);
                /* a possible flip of r(dS): 1e5 x its size, as e is scaled by 1e-5 later */
                ex[(size_t)t * C3 + q0 + c] += 1e5 * scale * flip * fabs(kj);
                ex[(size_t)j * C3 + k0 + c] += 1e5 * scale * flip * fabs(qt);
            }
        }
    }
}

/* The softmax in double from rounded q, k: the probabilities att should hold. */
static void att_probs(const att_dims *a, const float *qkv, double *p) {
    const int T = a->T, HS = a->HS, C3 = (a->NH + 2 * a->NKV) * HS;
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++) {
            const size_t q0 = (size_t)h * HS, k0 = (size_t)(a->NH + h / (a->NH / a->NKV)) * HS;
            const float *X = qkv + (size_t)b * T * C3;
            double *P = p + ((size_t)b * a->NH + h) * T * T;
            for (int t = 0; t < T; t++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int c = 0; c < HS; c++)
                        s += (double)wire(X[(size_t)t * C3 + q0 + c]) * wire(X[(size_t)j * C3 + k0 + c]);
                    P[(size_t)t * T + j] = s / sqrt((double)HS), mx = fmax(mx, P[(size_t)t * T + j]);
                }
                for (int j = 0; j <= t; j++) sum += P[(size_t)t * T + j] = exp(P[(size_t)t * T + j] - mx);
                for (int j = 0; j < T; j++) P[(size_t)t * T + j] = j <= t ? P[(size_t)t * T + j] / sum : 0;
            }
        }
}

static void att_case(const att_dims *a) {
    const int C3 = (a->NH + 2 * a->NKV) * a->HS, C = a->NH * a->HS;
    const size_t nq = (size_t)a->B * a->T * C3, no = (size_t)a->B * a->T * C, na = (size_t)a->B * a->NH * a->T * a->T;
    float *qkv = rnd_floats(nq, 2), *dout = rnd_floats(no, 1), *out = calloc(no, sizeof(float));
    float *att = calloc(na, sizeof(float)), *dqkv = calloc(nq, sizeof(float));
    float *S = malloc(dt_attention_gqa_bf16_scratch_floats(a->B, a->T, a->NH, a->NKV, a->HS) * sizeof(float));
    double *ro = calloc(no, sizeof(double)), *eo = calloc(no, sizeof(double)), *rd = calloc(nq, sizeof(double));
    double *ed = calloc(nq, sizeof(double)), *p = calloc(na, sizeof(double)), *ep = calloc(na, sizeof(double));
    dt_attention_gqa_forward_bf16(out, att, S, qkv, a->B, a->T, a->NH, a->NKV, a->HS);
    dt_attention_gqa_backward_bf16(dqkv, S, dout, qkv, att, a->B, a->T, a->NH, a->NKV, a->HS);
    att_probs(a, qkv, p);
    for (size_t i = 0; i < na; i++) ep[i] = 1e-6 + 1e-4 * p[i];
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++) att_head(a, b, h, qkv, dout, att, ro, eo, rd, ed);
    for (size_t i = 0; i < no; i++) eo[i] = 1e-5 * eo[i] + 1e-30;
    for (size_t i = 0; i < nq; i++) ed[i] = 1e-5 * ed[i] + 1e-30;
    char what[128];
    snprintf(what, sizeof what, "attention native B%d T%d NH%d NKV%d HS%d", a->B, a->T, a->NH, a->NKV, a->HS);
    char w2[160];
    snprintf(w2, sizeof w2, "%s probs = softmax", what), test_bound(w2, att, p, ep, na);
    snprintf(w2, sizeof w2, "%s out = exact", what), test_bound(w2, out, ro, eo, no);
    snprintf(w2, sizeof w2, "%s dq dk dv = exact", what), test_bound(w2, dqkv, rd, ed, nq);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(S);
    free(ro), free(eo), free(rd), free(ed), free(p), free(ep);
}

static void test_attention_exact(void) {
    if (!dt_gemm_bf16_available()) {
        printf("skip attention native: this CPU has no AVX512-BF16\n");
        return;
    }
    static const att_dims shapes[] = {{2, 13, 4, 2, 24}, {1, 33, 2, 2, 16}, {2, 40, 3, 1, 8}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) att_case(&shapes[i]);
}

int main(void) {
    test_round();
    test_round_fp16();
    test_gemm();
    test_linear_autocast();
    test_conv_autocast();
    test_conv_exact();
    test_attention_exact();
    return test_report();
}
