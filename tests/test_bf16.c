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
 *   double from the rounded operands at fp32 tolerance (atol 1e-5, rtol 1e-4). */
#include "dtrain/nn.h"
#include "dtrain/testing.h"
#include "fixturehelp.h"
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

/* Convolution, emulated: the fp32 kernels (whose error test_reference and
 * test_conv bound) on rounded operands, against autocast; and rounding must
 * change the result (an unrounded run would pass the bf16-resolution bound). */
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
    float *S = fx_zeros(&x, dt_conv2d_scratch_floats(&d));
    float *out = fx_zeros(&x, no), *dinp = fx_zeros(&x, ni), *dw = fx_zeros(&x, nw), *db = fx_zeros(&x, (size_t)d.OC);
    float *o32 = fx_zeros(&x, no);
    dt_conv2d_forward(out, S, rounded(&x, inp, ni), rounded(&x, w, nw), b, &d);
    dt_conv2d_backward(dinp, dw, db, S, rounded(&x, dout, no), rounded(&x, inp, ni), rounded(&x, w, nw), &d);
    dt_conv2d_forward(o32, S, inp, w, b, &d);
    const double res = ldexp(1, -7);
    test_close("conv2d bf16 (emulated) out vs autocast", out, fx_f32(&x, "out", no), no,
               res * max_abs(fx_f32(&x, "out", no), no), 0);
    test_close("conv2d bf16 (emulated) dinp vs autocast", dinp, fx_f32(&x, "dinp", ni), ni,
               res * max_abs(fx_f32(&x, "dinp", ni), ni), 0);
    test_close("conv2d bf16 (emulated) dw vs autocast", dw, fx_f32(&x, "dw", nw), nw,
               res * max_abs(fx_f32(&x, "dw", nw), nw), 0);
    test_close("conv2d bf16 (emulated) db vs autocast", db, fx_f32(&x, "db", (size_t)d.OC), (size_t)d.OC,
               res * max_abs(fx_f32(&x, "db", (size_t)d.OC), (size_t)d.OC), 0);
    test_cond("conv2d: rounding the operands changes the output", memcmp(out, o32, no * sizeof(float)) != 0);
    fx_close(&x);
}

int main(void) {
    test_round();
    test_round_fp16();
    test_gemm();
    test_linear_autocast();
    test_conv_autocast();
    return test_report();
}
