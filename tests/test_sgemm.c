/* dt_sgemm, dtrain's fp32 GEMM (src/nn/sgemm.c), on each library this build
 * has (OpenBLAS always; oneDNN when built with libdnnl, on any CPU: its JIT
 * has kernels for every x86-64):
 *
 * - against its definition in double, every element within
 *   1e-5 * sum_k |alpha a_ik b_kj| + 1e-6 |beta c_ij| + 1e-30 (fp32 sums):
 *   every transposition, sizes off every tile (1, 7, 63, 65, 130), odd K,
 *   leading dimensions past the row, alpha and beta, beta = 0 over a NaN-filled
 *   C (not read), K = 0 (C = beta C), and the training shapes of W1 and W2;
 *   (an NT product wider than tall, which oneDNN runs as its transpose,
 *   among them);
 * - oneDNN on 2 and 3 threads (the column blocks of sgemm.c) bit for bit the
 *   same as on one, so --threads does not change a run's numbers (OpenBLAS's
 *   own threads do: measured, printed, not required);
 * - DTRAIN_SGEMM's names: auto, openblas and onednn accepted (onednn refused
 *   in one line by a build without it), anything else refused in one line, the
 *   choice unchanged by a refusal. */
#include "dtrain/core.h"
#include "dtrain/nn.h"
#include "testhelp.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

static unsigned g_seed = 12345;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

typedef struct {
    int M, N, K;
    bool ta, tb;
    int pad; /* extra leading-dimension floats */
    float alpha, beta;
} shape;

/* Runs one shape at `threads`; fills out with C. Returns whether it matched the double reference. */
static bool run_shape(const shape *s, int threads, float *out_c, bool check) {
    int lda = (s->ta ? s->M : s->K) + s->pad, ldb = (s->tb ? s->K : s->N) + s->pad, ldc = s->N + s->pad;
    size_t na = (size_t)(s->ta ? s->K : s->M) * lda, nb = (size_t)(s->tb ? s->N : s->K) * ldb,
           nc = (size_t)s->M * ldc;
    float *A = malloc((na ? na : 1) * sizeof(float)), *B = malloc((nb ? nb : 1) * sizeof(float));
    float *C = malloc(nc * sizeof(float)), *C0 = malloc(nc * sizeof(float));
    g_seed = 777u + (unsigned)(s->M * 31 + s->N * 7 + s->K);
    for (size_t i = 0; i < na; i++) A[i] = frand();
    for (size_t i = 0; i < nb; i++) B[i] = frand();
    for (size_t i = 0; i < nc; i++) C0[i] = s->beta == 0.0f ? NAN : frand();
    memcpy(C, C0, nc * sizeof(float));
    openblas_set_num_threads(threads);
    dt_sgemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, A, lda, B, ldb, s->beta, C, ldc);
    openblas_set_num_threads(1);
    bool ok = true;
    for (int i = 0; i < s->M && check; i++)
        for (int j = 0; j < s->N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < s->K; k++) {
                double a = s->ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = s->tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                ref += (double)s->alpha * a * b;
                mag += fabs((double)s->alpha * a * b);
            }
            double c0 = C0[(size_t)i * ldc + j];
            if (s->beta != 0.0f) {
                ref += (double)s->beta * c0;
                mag += 1e-1 * fabs((double)s->beta * c0);
            }
            double got = C[(size_t)i * ldc + j];
            if (!(fabs(got - ref) <= 1e-5 * mag + 1e-30)) ok = false;
        }
    for (size_t i = 0; i < nc && check; i++) /* the padding past N is not written */
        if ((int)(i % (size_t)ldc) >= s->N && memcmp(&C[i], &C0[i], sizeof(float)) != 0) ok = false;
    if (out_c) memcpy(out_c, C, nc * sizeof(float));
    free(A);
    free(B);
    free(C);
    free(C0);
    return ok;
}

static size_t c_floats(const shape *s) { return (size_t)s->M * (size_t)(s->N + s->pad); }

static void check_library(const char *lib) {
    static const int sizes[] = {1, 7, 63, 65, 130};
    char what[160];
    int bad = 0, n = 0;
    for (int t = 0; t < 4; t++)
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 5; b++) {
                shape s = {sizes[a], sizes[b], sizes[(a + b + t) % 5] + (t & 1), t & 1, (t >> 1) & 1, t,
                           t == 3 ? -0.5f : 1.0f, (a + b) % 3 == 0 ? 0.0f : (a % 2 ? 1.0f : 0.75f)};
                if (!run_shape(&s, 1, NULL, true)) {
                    if (bad++ < 5)
                        fprintf(stderr, "%s: %dx%d K %d t%d%d pad %d alpha %g beta %g off\n", lib, s.M, s.N, s.K,
                                s.ta, s.tb, s.pad, (double)s.alpha, (double)s.beta);
                }
                n++;
            }
    snprintf(what, sizeof what, "%s: %d odd shapes against double (beta 0 over NaN)", lib, n);
    test_cond(what, bad == 0);
    printf("%s %s\n", bad ? "FAIL" : "ok  ", what);
    shape k0 = {5, 9, 0, false, false, 0, 1.0f, 0.5f};
    snprintf(what, sizeof what, "%s: K = 0 gives beta C", lib);
    test_cond(what, run_shape(&k0, 1, NULL, true));

    /* The training shapes, and the same bits on 1, 2 and 3 threads. */
    static const shape train[] = {
        {128, 1024, 784, false, true, 0, 1.0f, 1.0f},   {128, 1024, 1024, false, false, 0, 1.0f, 1.0f},
        {1024, 784, 128, true, false, 0, 1.0f, 1.0f},   {128, 10, 1024, false, true, 0, 1.0f, 1.0f},
        {2048, 768, 256, false, true, 0, 1.0f, 0.0f},   {256, 768, 2048, true, false, 0, 1.0f, 1.0f},
        {2048, 256, 1024, false, false, 0, 1.0f, 1.0f}, {128, 128, 64, false, true, 0, 0.125f, 0.0f},
        {300, 200, 100, true, true, 3, 1.0f, 1.0f},
        /* NT with M < N: oneDNN runs the transpose (sgemm.c), in blocks of 64 rows */
        {128, 1024, 1024, false, true, 0, 1.0f, 0.0f}, {130, 1000, 1024, false, true, 2, 0.5f, 0.75f},
    };
    int nt = (int)(sizeof train / sizeof train[0]), bits = 0, close = 0;
    for (int i = 0; i < nt; i++) {
        size_t nc = c_floats(&train[i]);
        float *one = malloc(nc * sizeof(float)), *many = malloc(nc * sizeof(float));
        close += run_shape(&train[i], 1, one, true);
        for (int T = 2; T <= 3; T++) {
            run_shape(&train[i], T, many, false);
            bits += memcmp(one, many, nc * sizeof(float)) == 0;
        }
        free(one);
        free(many);
    }
    snprintf(what, sizeof what, "%s: %d training shapes on 1 thread against double", lib, nt);
    test_cond(what, close == nt);
    printf("%s %s\n", close == nt ? "ok  " : "FAIL", what);
    snprintf(what, sizeof what, "%s: 2 and 3 threads = 1 thread, bit for bit (%d of %d)", lib, bits, 2 * nt);
    if (strcmp(lib, "onednn") == 0) {
        test_cond(what, bits == 2 * nt);
        printf("%s %s\n", bits == 2 * nt ? "ok  " : "FAIL", what);
    } else {
        /* OpenBLAS's own threads share out the work differently: not promised. */
        printf("note %s (OpenBLAS's threading: not required)\n", what);
    }
}

int main(void) {
    test_cond("auto accepted", dt_sgemm_use("auto") == DT_OK);
    const char *def = dt_sgemm_library();
    printf("default library here: %s\n", def);
    test_cond("an unknown name refused", dt_sgemm_use("mkl") == DT_ERR_INVALID);
    test_cond("the refusal names the variable and the choices",
              strstr(dt_error_msg(), "DTRAIN_SGEMM=mkl") && strstr(dt_error_msg(), "openblas or onednn"));
    test_cond("a refusal leaves the choice", strcmp(dt_sgemm_library(), def) == 0);

    test_cond("openblas accepted", dt_sgemm_use("openblas") == DT_OK);
    test_cond("openblas chosen", strcmp(dt_sgemm_library(), "openblas") == 0);
    check_library("openblas");

    dt_status st = dt_sgemm_use("onednn");
    if (st == DT_ERR_UNSUPPORTED) {
        test_cond("a build without oneDNN says how to get it", strstr(dt_error_msg(), "libdnnl-dev") != NULL);
        printf("skip onednn: this build has no oneDNN (%s)\n", dt_error_msg());
    } else {
        test_cond("onednn accepted", st == DT_OK && strcmp(dt_sgemm_library(), "onednn") == 0);
        check_library("onednn");
    }
    return test_report();
}
