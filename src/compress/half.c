/* fp16 and bf16 conversions, round to nearest even, with subnormals, inf, nan. */
#include "dtrain/testing.h"

#include <string.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

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

/* Bulk conversions (the codec's hot loops): F16C when the build targets it,
 * bit-identical to the scalar versions above for every finite and infinite
 * value (both round to nearest even); NaNs stay NaNs. */
void dt_f32_to_f16_n(const float *x, uint8_t *out, size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i), h);
    }
#endif
    for (; i < n; i++) {
        uint16_t h = dt_f32_to_f16(x[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}

void dt_f16_to_f32_n(const uint8_t *in, float *y, size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i))));
#endif
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        y[i] = dt_f16_to_f32(h);
    }
}

void dt_f32_to_bf16_n(const float *x, uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h = dt_f32_to_bf16(x[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}

void dt_bf16_to_f32_n(const uint8_t *in, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        y[i] = dt_bf16_to_f32(h);
    }
}
