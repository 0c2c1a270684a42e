/* fp16 and bf16 conversions, round to nearest even, with subnormals, inf, nan. */
#include "dtrain/compress.h"

#include <string.h>

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t dt_f32_to_bf16(float x) {
    uint32_t u = bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1u);                                       /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float dt_bf16_to_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

uint16_t dt_f32_to_f16(float x) {
    uint32_t u = bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);     /* nan */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);    /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {
        /* Below 2^-14: an fp16 subnormal r * 2^-24, r = mant * 2^(E-126). */
        int shift = 126 - (int)(a >> 23); /* >= 14 */
        if (shift > 24) return (uint16_t)sign;
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t e = (a >> 23) - 112, m = a & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13), rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;     /* may carry into the exponent: fine */
    return (uint16_t)(sign | h);
}

float dt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return from_bits(sign);
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31) return from_bits(sign | 0x7f800000u | (m << 13));
    return from_bits(sign | ((e + 112) << 23) | (m << 13));
}
