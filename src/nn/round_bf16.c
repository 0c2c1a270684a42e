/* Rounding fp32 values to bf16 precision, kept in fp32 storage: the operands of
 * the GEMMs and convolutions under --precision bf16 (docs/PRECISION.md). A bf16
 * is the top 16 bits of an fp32 (8-bit exponent, 7-bit mantissa), so rounding to
 * nearest even is integer arithmetic on the bits: add 0x7fff plus the lowest kept
 * bit, clear the low 16. Overflow carries into the exponent and gives inf, as
 * PyTorch's conversion does; NaN stays NaN (made quiet, so the carry cannot turn
 * it into inf); subnormals round like any other value. 16 lanes at a time with
 * vector extensions. Cost: one read and one write of n floats. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <string.h>

typedef uint32_t vu __attribute__((vector_size(64)));
#define VL 16

static inline vu round_bits(vu u) {
    const vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u); /* all ones where NaN */
    vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (nan & ((u | 0x00400000u) & 0xffff0000u)) | (~nan & r);
}

DT_HOT void dt_round_bf16(float *dst, const float *src, size_t n) {
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
