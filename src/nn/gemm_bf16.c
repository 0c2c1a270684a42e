/* A bf16 GEMM for CPUs with AVX512-BF16: C = alpha op(A) op(B) + beta C with
 * both operands rounded to bf16 (nearest even, as dt_round_bf16) and the
 * products summed in fp32 by VDPBF16PS, which multiplies two pairs of bf16 and
 * adds both products to an fp32 lane. A bf16 product is exact in fp32, so the
 * result is dt_round_bf16 + cblas_sgemm's up to the order of the sums (and
 * VDPBF16PS treats subnormal inputs and results as zero).
 *
 * Packing: op(A) is cut into panels of MR rows and op(B) into panels of NR
 * columns, converted to bf16 and stored pair by pair along k: a 32-bit word
 * holds (x[k], x[k+1]) (k even; an odd K is padded with a zero), A's panel as
 * [k/2][MR] words, B's as [k/2][NR]. The micro-kernel keeps an MR x NR tile of C
 * in 16 zmm registers (MR rows x 2 vectors of 16 columns): per pair of k, two
 * loads of B and MR broadcasts of A feed 2 MR VDPBF16PS. Rows and columns past
 * M and N are zeros in the panels and masked at the store. Every packer reads
 * its source in 16-float vectors where the pairs lie along a row (the source's
 * rows are k) and through 16x16 transposes in registers where they lie along
 * columns; none is scalar except the edges.
 *
 * Threads (as many as the BLAS has, parts.h; dt_gemm_bf16_on, gemm_pick.h:
 * at most those given, for callers that share out the work themselves): A is
 * packed once, then each thread packs and multiplies its share of B's column
 * panels; each C element is summed by one thread in one order, so results do
 * not depend on the count.
 *
 * Cost: 2MNK flops at 32 multiply-adds per instruction; packing reads MK + NK
 * floats and writes half as many bytes. Scratch: dt_gemm_bf16_scratch_floats. */
#include "core/cpu.h"
#include "dtrain/nn.h"
#include "gemm_pick.h"
#include "parts.h"
#include "transpose16.h"

#include <string.h>

#define MR 8
#define NR 32

static size_t kpairs(int K) { return (size_t)(K + 1) / 2; }
static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

size_t dt_gemm_bf16_scratch_floats(int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    return kpairs(K) * (round_up((size_t)M, MR) + round_up((size_t)N, NR));
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

bool dt_gemm_bf16_available(void) { return dt_cpu_avx512bf16(); }

/* Words (lo[i], hi[i]) from two rows of 16 floats, the pair (k, k+1) per
 * lane, each rounded to bf16 as dt_round_bf16 (nearest even, NaN kept
 * quiet): VCVTNE2PS2BF16 rounds both rows into 32 halves (lo's in the low
 * 16), VPERMW interleaves them. Two instructions where the integer rounding
 * took about sixteen (W2's bf16 step spent ~14% packing); the same bits as
 * that rounding over 3.2e8 random words, subnormals and NaNs included, on
 * Zen 4. */
BF16_TARGET static inline __m512i pair_words(__m512 lo, __m512 hi) {
    static const uint16_t interleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                            8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(interleave), halves);
}

/* n floats from p (n <= 16), zeros past n. */
BF16_TARGET static inline __m512 load_n(const float *p, int n) {
    return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}

/* Packs a (rows x K) block of op(X) whose element (i, k) is X[i * rs + k * ks]
 * into words dst[k/2 * W + i] (W = the panel's width, rows <= W, rows past
 * `rows` zero). ks == 1: the pairs lie along X's rows (read through transposes);
 * otherwise rs == 1: X's rows are k (read as row pairs). */
BF16_TARGET static void pack_panel(uint32_t *dst, int W, const float *X, size_t rs, size_t ks, int rows, int K) {
    const size_t KP = kpairs(K);
    if (rows < W)
        for (size_t kk = 0; kk < KP; kk++) memset(dst + kk * W + rows, 0, (size_t)(W - rows) * 4);
    if (ks != 1) { /* rows of X are k: pairs of rows, 16 columns i at a time */
        for (size_t kk = 0; kk < KP; kk++) {
            const float *r0 = X + 2 * kk * ks, *r1 = r0 + ks;
            const bool odd = 2 * kk + 1 >= (size_t)K;
            for (int i = 0; i < rows; i += 16) {
                int n = rows - i < 16 ? rows - i : 16;
                __m512 lo = load_n(r0 + i, n), hi = odd ? _mm512_setzero_ps() : load_n(r1 + i, n);
                _mm512_mask_storeu_epi32(dst + kk * W + i, (__mmask16)((1u << n) - 1), pair_words(lo, hi));
            }
        }
        return;
    }
    /* pairs along X's rows: 16 rows x 16 k through a transpose, then pairs of the k-rows */
    for (int i = 0; i < rows; i += 16) {
        int ni = rows - i < 16 ? rows - i : 16;
        for (int k = 0; k < K; k += 16) {
            int nk = K - k < 16 ? K - k : 16;
            __m512 r[16];
            for (int a = 0; a < 16; a++)
                r[a] = a < ni ? load_n(X + (size_t)(i + a) * rs + k, nk) : _mm512_setzero_ps();
            dt_transpose16(r); /* r[c] = k + c across the 16 rows */
            for (int c = 0; c < nk; c += 2)
                _mm512_mask_storeu_epi32(dst + (size_t)(k + c) / 2 * W + i, (__mmask16)((1u << ni) - 1),
                                         pair_words(r[c], r[c + 1]));
        }
    }
}

/* Words w (16 rows' pair at kk) into two MR panels: the low 8 lanes to the
 * panel at dst, the high 8 to the next one (only when rows > MR: past the
 * last panel there is none). */
BF16_TARGET static inline void store_a16(uint32_t *dst, size_t KP, size_t kk, int rows, __m512i w) {
    _mm256_storeu_si256((__m256i *)(dst + kk * MR), _mm512_castsi512_si256(w));
    if (rows > MR) _mm256_storeu_si256((__m256i *)(dst + (KP + kk) * MR), _mm512_extracti64x4_epi64(w, 1));
}

/* Packs op(A)'s rows i0 .. i0 + rows - 1 (rows <= 16) into two MR panels at
 * once, where one panel's 8 rows would leave half of every vector zeros:
 * transa false, A (pairs along A's rows, through one transpose of 16 rows);
 * true, A^T (A's rows are k: a pair of them, 16 columns). X points at op(A)'s
 * row i0 (A + i0 lda, or A + i0). Rows past `rows` come out as zero words. */
_Static_assert(MR == 8, "pack_a16 splits 16 lanes into two panels of 8");
BF16_TARGET static void pack_a16(uint32_t *dst, size_t KP, const float *X, size_t lda, bool transa, int rows, int K) {
    if (transa) {
        for (size_t kk = 0; kk < KP; kk++) {
            const float *r0 = X + 2 * kk * lda, *r1 = r0 + lda;
            __m512 lo = load_n(r0, rows), hi = 2 * kk + 1 >= (size_t)K ? _mm512_setzero_ps() : load_n(r1, rows);
            store_a16(dst, KP, kk, rows, pair_words(lo, hi));
        }
        return;
    }
    const size_t rs = lda;
    for (int k = 0; k < K; k += 16) {
        int nk = K - k < 16 ? K - k : 16;
        __m512 r[16];
        for (int a = 0; a < 16; a++) r[a] = a < rows ? load_n(X + (size_t)a * rs + k, nk) : _mm512_setzero_ps();
        dt_transpose16(r); /* r[c] = k + c across the 16 rows; zeros past nk */
        for (int c = 0; c < nk; c += 2) store_a16(dst, KP, (size_t)(k + c) / 2, rows, pair_words(r[c], r[c + 1]));
    }
}

/* The MR x NR tile: C[0..mr) x [0..nr) = alpha * A_panel B_panel + beta * C,
 * or + bias[0..nr) on every row when bias (beta is then 0). */
BF16_TARGET static void tile(float *C, size_t ldc, const uint32_t *a, const uint32_t *b, size_t KP, int mr, int nr,
                             float alpha, float beta, const float *bias) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    if (beta != 0.0f) /* C's rows lie ldc apart (a weight gradient's: far in memory): asked for now, read last */
        for (int r = 0; r < mr; r++) {
            _mm_prefetch((const char *)(C + (size_t)r * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(C + (size_t)r * ldc + 16), _MM_HINT_T0);
        }
    for (size_t kk = 0; kk < KP; kk++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + kk * NR), b1 = (__m512bh)_mm512_loadu_si512(b + kk * NR + 16);
        for (int r = 0; r < MR; r++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[kk * MR + r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
    const __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
    const __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps(),
                 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int r = 0; r < mr; r++) {
        float *c = C + (size_t)r * ldc;
        __m512 x0 = _mm512_mul_ps(acc[r][0], va), x1 = _mm512_mul_ps(acc[r][1], va);
        if (bias) { /* the sum a bias-filled C with beta 1 gave, without that pass */
            x0 = _mm512_add_ps(x0, b0);
            x1 = _mm512_add_ps(x1, b1);
        } else if (beta != 0.0f) { /* beta = 0: C is not read (BLAS's rule: NaN there stays out) */
            x0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, c), vb, x0);
            x1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, c + 16), vb, x1);
        }
        _mm512_mask_storeu_ps(c, m0, x0);
        _mm512_mask_storeu_ps(c + 16, m1, x1);
    }
}

/* The job, shared by the threads: each packs and multiplies its share of B's panels. */
typedef struct {
    bool transb;
    int M, N, K, ldb, ldc;
    float alpha, beta;
    const float *B, *bias;
    float *C;
    const uint32_t *pa;
    uint32_t *pb;
} job;

BF16_TARGET static void columns(void *ctx, int j, int T) {
    const job *J = ctx;
    const size_t KP = kpairs(J->K), panels = ((size_t)J->N + NR - 1) / NR;
    size_t lo, hi;
    dt_nn_share(panels, j, T, &lo, &hi);
    for (size_t p = lo; p < hi; p++) {
        const int c = (int)p * NR, nr = J->N - c < NR ? J->N - c : NR;
        uint32_t *pb = J->pb + (size_t)c * KP;
        /* op(B)(k, j) = B[k ldb + j] or, transposed, B[j ldb + k] */
        pack_panel(pb, NR, J->transb ? J->B + (size_t)c * J->ldb : J->B + c, J->transb ? (size_t)J->ldb : 1,
                   J->transb ? 1 : (size_t)J->ldb, nr, J->K);
        for (int i = 0; i < J->M; i += MR)
            tile(J->C + (size_t)i * J->ldc + c, (size_t)J->ldc, J->pa + (size_t)i * KP, pb, KP,
                 J->M - i < MR ? J->M - i : MR, nr, J->alpha, J->beta, J->bias ? J->bias + c : NULL);
    }
}

typedef struct {
    job *J;
    int T;
} parts_ctx;

static void columns_part(void *ctx, int j) {
    const parts_ctx *P = ctx;
    columns(P->J, j, P->T);
}

/* dt_gemm_bf16_on, with + bias[j] on every row when bias (beta then 0). */
BF16_TARGET static void gemm(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda,
                             const float *B, int ldb, float beta, const float *bias, float *C, int ldc,
                             float *scratch, int threads) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = bias ? bias[j] : beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    const size_t KP = kpairs(K), Mp = round_up((size_t)M, MR), panels = ((size_t)N + NR - 1) / NR;
    uint32_t *pa = (uint32_t *)scratch;
    /* op(A)(i, k) = A[i lda + k] or, transposed, A[k lda + i] */
    for (int i = 0; i < M; i += 2 * MR)
        pack_a16(pa + (size_t)i * KP, KP, transa ? A + i : A + (size_t)i * lda, (size_t)lda, transa,
                 M - i < 2 * MR ? M - i : 2 * MR, K);
    job J = {transb, M, N, K, ldb, ldc, alpha, bias ? 0.0f : beta, B, bias, C, pa, pa + KP * Mp};
    /* a thread for every 4 panels at least, and 2 M-panels' worth of work in each */
    int T = threads;
    if ((size_t)T > panels / 4) T = (int)(panels / 4);
    if ((double)M * N * K < 2e6 * T) T = (int)((double)M * N * K / 2e6);
    if (T <= 1) {
        columns(&J, 0, 1);
        return;
    }
    parts_ctx P = {&J, T};
    dt_nn_run_parts(columns_part, &P, T);
}

void dt_gemm_bf16_on(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc, float *scratch, int threads) {
    gemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, NULL, C, ldc, scratch, threads);
}

void dt_gemm_bf16(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc, float *scratch) {
    dt_gemm_bf16_on(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch, dt_nn_threads());
}

void dt_gemm_bf16_bias(bool transa, bool transb, int M, int N, int K, const float *A, int lda, const float *B,
                       int ldb, const float *bias, float *C, int ldc, float *scratch) {
    gemm(transa, transb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, bias, C, ldc, scratch, dt_nn_threads());
}

#else
bool dt_gemm_bf16_available(void) { return false; }
void dt_gemm_bf16_on(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc, float *scratch, int threads) {
    (void)threads, (void)transa, (void)transb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)beta, (void)C, (void)ldc, (void)scratch;
}
void dt_gemm_bf16(bool transa, bool transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc, float *scratch) {
    (void)transa, (void)transb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb;
    (void)beta, (void)C, (void)ldc, (void)scratch;
}
void dt_gemm_bf16_bias(bool transa, bool transb, int M, int N, int K, const float *A, int lda, const float *B,
                       int ldb, const float *bias, float *C, int ldc, float *scratch) {
    (void)transa, (void)transb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)bias;
    (void)C, (void)ldc, (void)scratch;
}
#endif
