/* GELU, tanh approximation as in GPT-2:
 *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *
 * libm's tanhf is a scalar call (~20 ns) that dominated the layer. GCC 12 at -O2
 * does not vectorise such loops on its own, so this file computes 16 lanes at a
 * time with GCC/Clang vector extensions (lowered to whatever ISA -march gives):
 * tanh(a) = 1 - 2 / (exp(2a) + 1), exp by Cephes' range reduction and degree-6
 * polynomial (~2 ulp). Only 1 + tanh and 1 - tanh^2 are used, so the absolute
 * error of tanh (~1e-7) is what counts. Tails go through a zero-padded vector. */
#include "core/cpu.h"
#include "dtrain/nn.h"
#include "vexp.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static inline vf vtanh(vf a) { return 1.0f - 2.0f / (vexp(2.0f * a) + 1.0f); }

static inline vf vgelu(vf x) {
    vf t = vtanh(GELU_K * (x + GELU_C * x * x * x));
    return 0.5f * x * (1.0f + t);
}

static inline vf vgelu_grad(vf x) {
    vf t = vtanh(GELU_K * (x + GELU_C * x * x * x));
    vf sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}

DT_HOT void dt_gelu_forward(float *restrict out, const float *restrict inp, size_t n) {
    size_t i = 0;
    for (; i + VL <= n; i += VL) vstore(out + i, vgelu(vload(inp + i, VL)), VL);
    if (i < n) vstore(out + i, vgelu(vload(inp + i, n - i)), n - i);
}

DT_HOT void dt_gelu_backward(float *restrict dinp, const float *restrict dout,
                      const float *restrict inp, size_t n) {
    if (!dinp) return;
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf d = vload(dinp + i, VL) + vgelu_grad(vload(inp + i, VL)) * vload(dout + i, VL);
        vstore(dinp + i, d, VL);
    }
    if (i < n) {
        size_t k = n - i;
        vf d = vload(dinp + i, k) + vgelu_grad(vload(inp + i, k)) * vload(dout + i, k);
        vstore(dinp + i, d, k);
    }
}
