/* Rounding fp32 values to bf16 or IEEE half (fp16) precision, kept in fp32
 * storage: the operands of the GEMMs and convolutions under --precision bf16
 * and fp16 (docs/PRECISION.md). 16 lanes at a time with vector extensions, one
 * loop for both (apply). Cost: one read and one write of n floats.
 *
 * bf16 is the top 16 bits of an fp32 (8-bit exponent, 7-bit mantissa), so
 * rounding to nearest even is integer arithmetic on the bits: add 0x7fff plus
 * the lowest kept bit, clear the low 16. Overflow carries into the exponent and
 * gives inf, as PyTorch's conversion does; NaN stays NaN (made quiet, so the
 * carry cannot turn it into inf); subnormals round like any other value.
 *
 * fp16 has a 5-bit exponent and a 10-bit mantissa: normal from 2^-14 up to
 * 65504, subnormal multiples of 2^-24 below. In the normal range rounding is
 * again integer arithmetic (add 0xfff plus the lowest kept bit, clear the low
 * 13); a result above 65504 is inf, as a conversion to half gives. Below 2^-14
 * the magnitude is rounded to a multiple of 2^-24 by adding and taking away 0.5
 * in fp32 (whose spacing in [0.5, 1) is 2^-24; the FPU rounds to nearest even),
 * so tiny values flush to zero as in half: the underflow that loss scaling
 * exists to avoid. NaN stays NaN (made quiet). Bitwise equal to a round trip
 * through fp16 (tests/test_bf16.c checks both on 2^20 bit patterns). */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <string.h>

typedef uint32_t vu __attribute__((vector_size(64)));
typedef float vf __attribute__((vector_size(64)));
#define VL 16

static inline vu bf16_bits(vu u) {
    const vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u); /* all ones where NaN */
    vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (nan & ((u | 0x00400000u) & 0xffff0000u)) | (~nan & r);
}

static inline vu fp16_bits(vu u) {
    const vu a = u & 0x7fffffffu, sign = u & 0x80000000u;
    const vu nan = (vu)(a > 0x7f800000u);      /* all ones where NaN */
    const vu tiny = (vu)(a < 0x38800000u);     /* below 2^-14: a half subnormal */
    vu r = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
    r = ((vu)(r > 0x477fe000u) & 0x7f800000u) | (~(vu)(r > 0x477fe000u) & r); /* above 65504: inf */
    vf m;
    memcpy(&m, &a, sizeof m);
    m = (m + 0.5f) - 0.5f;                     /* a multiple of 2^-24, nearest even */
    vu t;
    memcpy(&t, &m, sizeof t);
    r = (tiny & t) | (~tiny & r);
    return (nan & (u | 0x00400000u)) | (~nan & (sign | r));
}

/* dst = round(src) 16 lanes at a time, the tail through a zeroed vector. */
static inline __attribute__((always_inline)) void apply(float *dst, const float *src, size_t n, vu (*round)(vu)) {
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vu u;
        memcpy(&u, src + i, sizeof u);
        u = round(u);
        memcpy(dst + i, &u, sizeof u);
    }
    if (i < n) {
        vu u = {0};
        memcpy(&u, src + i, (n - i) * sizeof(float));
        u = round(u);
        memcpy(dst + i, &u, (n - i) * sizeof(float));
    }
}

DT_HOT void dt_round_bf16(float *dst, const float *src, size_t n) { apply(dst, src, n, bf16_bits); }

DT_HOT void dt_round_fp16(float *dst, const float *src, size_t n) { apply(dst, src, n, fp16_bits); }
