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
 * A product of op NT whose C is wider than tall (M < N, K >= 64: a linear
 * layer's forward, batch x outputs) runs on oneDNN as its transpose,
 * C^T = B A^T, into scratch, then transposed into C: dnnl_sgemm ran the W1
 * forward 128 x 1024, K 1024 at 89 GFLOP/s and its transpose at 106 (Zen 4,
 * one thread; 128 x 2048 x 1024 89 -> 104, 128 x 512 x 512 100 -> 106, none
 * of the M < N shapes measured slower). The threads then take blocks of 64
 * columns of C (rows of C^T: blocks of C^T's columns changed the bits), so
 * the bits again do not depend on --threads.
 *
 * Cost: 2MNK flops; one thread start per extra part (tens of microseconds);
 * the transposed product also reads and writes M x N floats once more. */
#include "dtrain/core.h"
#include "dtrain/nn.h"
#include "parts.h"
#include "transpose16.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef DT_HAVE_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif

#define DT_SGEMM_COLS 64                    /* the column block a thread takes */
#define DT_SGEMM_SPLIT_FLOPS (8.0 * 1024 * 1024) /* below: one thread (~40 us at 200 GFLOP/s) */
#define DT_SGEMM_SWAP_MIN_K 64              /* a transposed NT product's K at least (its extra pass ~1/K) */
/* The transposed NT product (a build can turn it off: -DDT_SGEMM_SWAP=0). One session saw
 * 2 of 18 runs of test_stop's n4_zero1 (4 ranks, SIGTERM mid-run) abort on heap corruption
 * in dnnl_sgemm's free under onednn_swapped; the next found none in 100 such runs, two
 * test_stop passes under load, make test-slow and valgrind's memcheck of the path (JIT code
 * included): docs/BENCHMARKS.md. */
#ifndef DT_SGEMM_SWAP
#define DT_SGEMM_SWAP 1
#endif

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

/* ---- NT with M < N: C^T = B A^T into scratch, then C = C^T^T + beta C ---- */

/* The calling thread's scratch for C^T, kept between calls (freed when the thread ends). */
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
typedef struct {
    float *p;
    size_t n;
} scratch;
static void scratch_free(void *v) {
    scratch *s = v;
    free(s->p);
    free(s);
}
static void scratch_key(void) {
    if (pthread_key_create(&g_scratch_key, scratch_free) != 0) g_scratch_key = (pthread_key_t)-1;
}
/* n floats of this thread's scratch, or NULL (the caller then multiplies as asked). */
static float *scratch_get(size_t n) {
    pthread_once(&g_scratch_once, scratch_key);
    if (g_scratch_key == (pthread_key_t)-1) return NULL;
    scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return NULL;
        if (pthread_setspecific(g_scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->n < n) {
        void *p = NULL;
        if (posix_memalign(&p, 64, n * sizeof(float)) != 0) return NULL;
        free(s->p);
        s->p = p;
        s->n = n;
    }
    return s->p;
}

/* C[i][j] = T[j][i] (+ beta C[i][j]) for i in [i0, i1), j in [j0, j1) (C is not read
 * when beta = 0: BLAS's rule, NaN there stays out). */
static void transpose_tile(float *C, int ldc, const float *T, int ldt, int i0, int i1, int j0, int j1, float beta) {
    for (int i = i0; i < i1; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f)
            for (int j = j0; j < j1; j++) c[j] = T[(size_t)j * ldt + i];
        else
            for (int j = j0; j < j1; j++) c[j] = T[(size_t)j * ldt + i] + beta * c[j];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same for a whole 16 x 16 tile at (i0, j0), through the registers. */
DT_T16_TARGET static void transpose_tile16(float *C, int ldc, const float *T, int ldt, int i0, int j0, float beta) {
    __m512 r[16];
    for (int a = 0; a < 16; a++) r[a] = _mm512_loadu_ps(T + (size_t)(j0 + a) * ldt + i0);
    dt_transpose16(r); /* r[a] = row i0 + a of C's tile */
    const __m512 vb = _mm512_set1_ps(beta);
    for (int a = 0; a < 16; a++) {
        float *c = C + (size_t)(i0 + a) * ldc + j0;
        /* beta C rounded, then added: the scalar edge's arithmetic, so every tile agrees */
        _mm512_storeu_ps(c, beta == 0.0f ? r[a] : _mm512_add_ps(r[a], _mm512_mul_ps(vb, _mm512_loadu_ps(c))));
    }
}
#endif

/* C[i][j] = T[j][i] (+ beta C[i][j]) for every row i < M and columns j in [j0, j1). */
static void transpose_into(float *C, int ldc, const float *T, int ldt, int M, int j0, int j1, float beta) {
#if defined(__x86_64__) && defined(__GNUC__)
    static int avx512 = -1; /* a benign race: same answer */
    if (avx512 < 0) avx512 = cpu_avx512(); /* F with BW, VL, DQ: the tile needs F */
#else
    const int avx512 = 0;
#endif
    for (int ib = 0; ib < M; ib += 16)
        for (int jb = j0; jb < j1; jb += 16) {
            int ie = ib + 16 < M ? ib + 16 : M, je = jb + 16 < j1 ? jb + 16 : j1;
#if defined(__x86_64__) && defined(__GNUC__)
            if (avx512 && ie - ib == 16 && je - jb == 16) {
                transpose_tile16(C, ldc, T, ldt, ib, jb, beta);
                continue;
            }
#endif
            transpose_tile(C, ldc, T, ldt, ib, ie, jb, je, beta);
        }
}

/* Columns [j0, j1) of C through their rows of T = alpha B A^T (ldt = M). */
static void swapped_cols(const gemm_job *g, float *T, int j0, int j1) {
    onednn_one(false, true, j1 - j0, g->M, g->K, g->alpha, g->B + (size_t)j0 * (size_t)g->ldb, g->ldb, g->A, g->lda,
               0.0f, T + (size_t)j0 * (size_t)g->M, g->M);
    transpose_into(g->C, g->ldc, T, g->M, g->M, j0, j1, g->beta);
}

typedef struct {
    const gemm_job *g;
    float *T;
} swap_job;

static void swapped_part(void *ctx, int j) {
    const swap_job *s = ctx;
    size_t lo, hi, blocks = ((size_t)s->g->N + DT_SGEMM_COLS - 1) / DT_SGEMM_COLS;
    dt_nn_share(blocks, j, s->g->T, &lo, &hi);
    int j0 = (int)lo * DT_SGEMM_COLS, j1 = (int)hi * DT_SGEMM_COLS;
    if (j1 > s->g->N) j1 = s->g->N;
    if (j1 > j0) swapped_cols(s->g, s->T, j0, j1);
}

/* The NT product as its transpose; false (nothing written) when no scratch. */
static bool onednn_swapped(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                           const float *B, int ldb, float beta, float *C, int ldc) {
    float *T = scratch_get((size_t)M * (size_t)N);
    if (!T) return false;
    int threads = dt_nn_threads(), blocks = (N + DT_SGEMM_COLS - 1) / DT_SGEMM_COLS;
    if (threads > blocks) threads = blocks;
    if (2.0 * M * N * K < DT_SGEMM_SPLIT_FLOPS) threads = 1;
    gemm_job g = {ta, tb, M, N, K, lda, ldb, ldc, threads, alpha, beta, A, B, C};
    if (threads <= 1) {
        swapped_cols(&g, T, 0, N);
        return true;
    }
    swap_job s = {&g, T};
    dt_nn_run_parts(swapped_part, &s, threads);
    return true;
}

static void onednn_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    if (DT_SGEMM_SWAP && !ta && tb && M < N && K >= DT_SGEMM_SWAP_MIN_K &&
        onednn_swapped(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
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
