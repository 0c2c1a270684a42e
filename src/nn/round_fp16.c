/* Rounding fp32 values to IEEE half (fp16) precision, kept in fp32 storage: the
 * operands of the GEMMs and convolutions under --precision fp16 (docs/PRECISION.md).
 * A half has a 5-bit exponent and a 10-bit mantissa: normal from 2^-14 up to
 * 65504, subnormal multiples of 2^-24 below. In the normal range rounding to
 * nearest even is integer arithmetic on the fp32 bits (add 0xfff plus the lowest
 * kept bit, clear the low 13); a result above 65504 is inf, as a conversion to
 * half gives. Below 2^-14 the magnitude is rounded to a multiple of 2^-24 by
 * adding and taking away 0.5 in fp32 (whose spacing in [0.5, 1) is 2^-24; the
 * FPU rounds to nearest even), so tiny values flush to zero as in half: the
 * underflow that loss scaling exists to avoid. NaN stays NaN (made quiet).
 * Bitwise equal to a round trip through fp16 (tests/test_bf16.c checks it on
 * 2^20 bit patterns). 16 lanes at a time with vector extensions. Cost: one
 * read and one write of n floats. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <string.h>

typedef uint32_t vu __attribute__((vector_size(64)));
typedef float vf __attribute__((vector_size(64)));
#define VL 16

static inline vu round_bits(vu u) {
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

DT_HOT void dt_round_fp16(float *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vu u;
        memcpy(&u, src + i, sizeof u);
        u = round_bits(u);
        memcpy(dst + i, &u, sizeof u);
    }
    if (i < n) {
        vu u = {0};
        memcpy(&u, src + i, (n - i) * sizeof(float));
        u = round_bits(u);
        memcpy(dst + i, &u, (n - i) * sizeof(float));
    }
}
