/* SiLU (swish): silu(x) = x sigmoid(x) = x / (1 + exp(-x));
 *   silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
 *
 * A scalar libm expf costs ~8 ns here, as much per element as the whole
 * vectorised GELU, and this runs on the widest activation of a LLaMA MLP. So,
 * as in gelu.c (whose exp this repeats: a kernel may not reach into another
 * kernel's file), 16 lanes at a time with GCC/Clang vector extensions and
 * Cephes' exp (range reduction + degree-6 polynomial, ~2 ulp, argument clamped
 * to [-87, 88] so it never overflows; past the clamp silu is 0 or x to float
 * precision anyway). Tails go through a zero-padded vector. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <string.h>

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
#define VL 16

static inline vf vsel(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }

static inline vf vexp(vf x) {
    const vf lo = x - x - 87.0f, hi = x - x + 88.0f;
    x = vsel(x < lo, lo, x);
    x = vsel(x > hi, hi, x);
    /* Round x*log2(e) to nearest with the 1.5*2^23 trick: the low mantissa bits
     * of t then hold n as an integer. */
    const float magic = 12582912.0f;
    vf t = x * 1.44269504088896341f + magic;
    vf n = t - magic;
    vi ni = (vi)t - (vi)(t - t + magic);
    vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vf p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    vf y = p * r * r + r + 1.0f;
    return y * (vf)((ni + 127) << 23);
}

static inline vf vsigmoid(vf x) { return 1.0f / (1.0f + vexp(-x)); }

static inline vf vsilu_grad(vf x) {
    vf s = vsigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

static inline vf vload(const float *p, size_t k) {
    vf v = {0};
    memcpy(&v, p, k * sizeof(float));
    return v;
}

static inline void vstore(float *p, vf v, size_t k) { memcpy(p, &v, k * sizeof(float)); }

DT_HOT void dt_silu_forward(float *restrict out, const float *restrict inp, size_t n) {
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf x = vload(inp + i, VL);
        vstore(out + i, x * vsigmoid(x), VL);
    }
    if (i < n) {
        vf x = vload(inp + i, n - i);
        vstore(out + i, x * vsigmoid(x), n - i);
    }
}

DT_HOT void dt_silu_backward(float *restrict dinp, const float *restrict dout,
                             const float *restrict inp, size_t n) {
    if (!dinp) return;
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf d = vload(dinp + i, VL) + vsilu_grad(vload(inp + i, VL)) * vload(dout + i, VL);
        vstore(dinp + i, d, VL);
    }
    if (i < n) {
        size_t k = n - i;
        vf d = vload(dinp + i, k) + vsilu_grad(vload(inp + i, k)) * vload(dout + i, k);
        vstore(dinp + i, d, k);
    }
}
