/* SiLU (swish): silu(x) = x sigmoid(x) = x / (1 + exp(-x));
 *   silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
 *
 * A scalar libm expf costs ~8 ns here, as much per element as the whole
 * vectorised GELU, and this runs on the widest activation of a LLaMA MLP. So,
 * as in gelu.c, 16 lanes at a time with GCC/Clang vector extensions and
 * Cephes' exp (vexp.h) (range reduction + degree-6 polynomial, ~2 ulp, argument clamped
 * to [-87, 88] so it never overflows; past the clamp silu is 0 or x to float
 * precision anyway). Tails go through a zero-padded vector. */
#include "core/cpu.h"
#include "dtrain/nn.h"
#include "vexp.h"

static inline vf vsigmoid(vf x) { return 1.0f / (1.0f + vexp(-x)); }

static inline vf vsilu_grad(vf x) {
    vf s = vsigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

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
