/* dtrain's fp32 GEMM (dt_sgemm): every fp32 product of the library (linear
 * layers, the im2col convolution, attention, PowerSGD) runs through here, on
 * one of two libraries chosen once per process:
 *
 * - oneDNN's dnnl_sgemm (libdnnl, when the build found it), whose JIT picks
 *   its kernels from the CPU's own flags. On an AVX-512 CPU it is the default:
 *   measured on an AVX-512 EPYC (one thread, docs/BENCHMARKS.md), it ran the
 *   W1 and W2 shapes at 163-207 GFLOP/s against OpenBLAS's own AVX-512
 *   (Cooperlake) kernels' 54-194, ahead on 10 of 11 shapes (2-67%; behind by
 *   8% on one small-K weight gradient). OpenBLAS's kernel choice also follows
 *   OPENBLAS_CORETYPE, which can hold it to AVX2 (Haswell: 92-101 GFLOP/s
 *   there); oneDNN's does not.
 * - OpenBLAS's cblas_sgemm everywhere else (an AVX2 CPU, where OpenBLAS led
 *   oneDNN on the M = 128 forward products: ../shared/PERF-NOTES.md), or a
 *   build without oneDNN.
 * DTRAIN_SGEMM=openblas|onednn (dt_sgemm_use) overrides the choice.
 *
 * Threads: OpenBLAS's products run on its own threads (--threads). oneDNN's
 * are shared out here over dt_nn_threads() as blocks of 64 columns of C, each
 * a one-thread dnnl_sgemm (oneDNN's OpenMP team is never started: the calling
 * thread's OpenMP thread count is set to 1), so a hogwild thread's product
 * stays on its thread and nothing spins on an oversubscribed host. A product
 * under DT_SGEMM_SPLIT_FLOPS runs on the caller alone.
 *
 * Cost: 2MNK flops; one thread start per extra part (tens of microseconds). */
#include "dtrain/core.h"
#include "dtrain/nn.h"
#include "parts.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#ifdef DT_HAVE_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif

#define DT_SGEMM_COLS 64                    /* the column block a thread takes */
#define DT_SGEMM_SPLIT_FLOPS (8.0 * 1024 * 1024) /* below: one thread (~40 us at 200 GFLOP/s) */

enum { LIB_UNSET = 0, LIB_OPENBLAS, LIB_ONEDNN };
static int g_lib; /* written by dt_sgemm_use or the first dt_sgemm; a benign race: same answer */

static void openblas_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                lda, B, ldb, beta, C, ldc);
}

#ifdef DT_HAVE_ONEDNN
static bool cpu_avx512(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
}

/* One dnnl_sgemm on the calling thread; OpenBLAS's if oneDNN refuses (it checks
 * only what the callers already guarantee, so never in practice). */
static void onednn_one(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
    static _Thread_local bool one_thread;
    if (!one_thread) {
        omp_set_num_threads(1);
        one_thread = true;
    }
    if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != dnnl_success)
        openblas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

typedef struct {
    bool ta, tb;
    int M, N, K, lda, ldb, ldc, T;
    float alpha, beta;
    const float *A, *B;
    float *C;
} gemm_job;

static void columns_part(void *ctx, int j) {
    const gemm_job *g = ctx;
    size_t lo, hi, blocks = ((size_t)g->N + DT_SGEMM_COLS - 1) / DT_SGEMM_COLS;
    dt_nn_share(blocks, j, g->T, &lo, &hi);
    int n0 = (int)lo * DT_SGEMM_COLS, n1 = (int)hi * DT_SGEMM_COLS;
    if (n1 > g->N) n1 = g->N;
    if (n1 <= n0) return;
    const float *B = g->tb ? g->B + (size_t)n0 * (size_t)g->ldb : g->B + n0;
    onednn_one(g->ta, g->tb, g->M, n1 - n0, g->K, g->alpha, g->A, g->lda, B, g->ldb, g->beta, g->C + n0, g->ldc);
}

static void onednn_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    int T = dt_nn_threads(), blocks = (N + DT_SGEMM_COLS - 1) / DT_SGEMM_COLS;
    if (T > blocks) T = blocks;
    if (T <= 1 || 2.0 * M * N * K < DT_SGEMM_SPLIT_FLOPS) {
        onednn_one(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    gemm_job g = {ta, tb, M, N, K, lda, ldb, ldc, T, alpha, beta, A, B, C};
    dt_nn_run_parts(columns_part, &g, T);
}
#endif

static int auto_lib(void) {
#ifdef DT_HAVE_ONEDNN
    return cpu_avx512() ? LIB_ONEDNN : LIB_OPENBLAS;
#else
    return LIB_OPENBLAS;
#endif
}

dt_status dt_sgemm_use(const char *name) {
    if (!name || !*name || strcmp(name, "auto") == 0) {
        g_lib = auto_lib();
        return DT_OK;
    }
    if (strcmp(name, "openblas") == 0) {
        g_lib = LIB_OPENBLAS;
        return DT_OK;
    }
    if (strcmp(name, "onednn") == 0) {
#ifdef DT_HAVE_ONEDNN
        g_lib = LIB_ONEDNN;
        return DT_OK;
#else
        return dt_errorf(DT_ERR_UNSUPPORTED, "DTRAIN_SGEMM=onednn: this build has no oneDNN (install libdnnl-dev and "
                                     "rebuild, or unset DTRAIN_SGEMM)");
#endif
    }
    return dt_errorf(DT_ERR_INVALID, "DTRAIN_SGEMM=%s: expected auto, openblas or onednn", name);
}

const char *dt_sgemm_library(void) {
    if (g_lib == LIB_UNSET) g_lib = auto_lib();
    return g_lib == LIB_ONEDNN ? "onednn" : "openblas";
}

void dt_sgemm(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
              int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (g_lib == LIB_UNSET) g_lib = auto_lib();
#ifdef DT_HAVE_ONEDNN
    if (g_lib == LIB_ONEDNN) {
        onednn_gemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    openblas_gemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
