/* Private to src/nn: a 16 x 16 transpose of fp32 in AVX-512 registers, for
 * the kernels that turn a matrix over (the bf16 GEMM's packing, sgemm.c's
 * transposed product). Callers compile with AVX-512 F (DT_T16_TARGET) and
 * call it only on a CPU that has it. Cost: 64 shuffles per 256 floats. */
#ifndef DT_NN_TRANSPOSE16_H
#define DT_NN_TRANSPOSE16_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define DT_T16_TARGET __attribute__((target("avx512f")))

/* 16x16 transpose of r[0..15] in place (rows become columns). */
DT_T16_TARGET static inline void dt_transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) /* per 128-bit lane: r[i + c] = column c of rows i..i+3 */
        for (int j = 0; j < 2; j++) {
            __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
            r[i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            r[i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
}

#endif
#endif
