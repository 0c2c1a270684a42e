/* Private to src/nn: 16-lane float vectors (GCC/Clang vector extensions,
 * lowered to whatever ISA -march or a DT_HOT clone gives) and Cephes' exp on
 * them: range reduction and a degree-6 polynomial (~2 ulp), the argument
 * clamped to [-87, 88] so it never overflows. Shared by the activation kernels
 * (gelu.c, silu.c, tanh.c), where a scalar libm call per element would cost
 * more than the whole vectorised layer, and by layernorm.c's lane sums. */
#ifndef DT_NN_VEXP_H
#define DT_NN_VEXP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
#define VL 16

/* k <= VL floats at p into a vector's first lanes (the rest 0), and a
 * vector's first k lanes back to p. Always inlined, so they compile inside
 * each DT_HOT clone (core/cpu.h): as separate functions they are baseline
 * x86-64 code (LayerNorm's forward measured 0.37 ms that way, 0.15 inlined). */
__attribute__((always_inline)) static inline vf vload(const float *p, size_t k) {
    vf v = {0};
    memcpy(&v, p, k * sizeof(float));
    return v;
}
__attribute__((always_inline)) static inline void vstore(float *p, vf v, size_t k) { memcpy(p, &v, k * sizeof(float)); }

static inline vf vsel(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }

/* Cephes' exp stopped before its last step, for x already clamped to
 * [-87, 88]: x = n ln2 + r, returns exp(r) - 1 and sets *ni = n, so that
 * exp(x) = 2^n (q + 1) and expm1(x) = 2^n q + (2^n - 1) (tanh.c). */
static inline vf vexp_reduced(vf x, vi *ni) {
    /* Round x*log2(e) to nearest with the 1.5*2^23 trick: the low mantissa bits
     * of t then hold n as an integer. */
    const float magic = 12582912.0f;
    vf t = x * 1.44269504088896341f + magic;
    vf n = t - magic;
    *ni = (vi)t - (vi)(t - t + magic);
    vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vf p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * r * r + r;
}

/* 2^n as floats. */
static inline vf vpow2(vi ni) { return (vf)((ni + 127) << 23); }

static inline vf vexp(vf x) {
    const vf lo = x - x - 87.0f, hi = x - x + 88.0f;
    x = vsel(x < lo, lo, x);
    x = vsel(x > hi, hi, x);
    vi ni;
    vf q = vexp_reduced(x, &ni);
    return (q + 1.0f) * vpow2(ni);
}

#endif
