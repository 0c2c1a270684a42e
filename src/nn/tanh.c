/* tanh. Backward reads the forward OUTPUT (tanh' = 1 - out^2), so the forward
 * may run in place and the block need not keep its input.
 *
 * libm's tanhf costs ~25 ns an element here; this computes 16 lanes at a time
 * with GCC/Clang vector extensions, loading a whole block before storing it so
 * out == inp is safe. With m = expm1(-2|x|) in (-1, 0]:
 *   tanh(x) = sign(x) * -m / (2 + m),
 * which keeps full relative precision near 0, where 1 - 2/(exp(2x) + 1) would
 * cancel. expm1 is Cephes' exp (range reduction + degree-6 polynomial, as in
 * gelu.c) stopped before the final "+ 1": with r the reduced argument and
 * q = exp(r) - 1 the polynomial, expm1 = 2^n q + (2^n - 1), exact in form for
 * n = 0 (|x| < 0.17) and without cancellation otherwise. */
#include "core/cpu.h"
#include "dtrain/nn.h"
#include "vexp.h"

/* expm1(x) for x <= 0 (clamped at -87, where it is -1 to float precision). */
static inline vf vexpm1_neg(vf x) {
    const vf lo = x - x - 87.0f;
    vi small = x < lo;
    x = (vf)((small & (vi)lo) | (~small & (vi)x));
    vi ni;
    vf q = vexp_reduced(x, &ni);
    vf scale = vpow2(ni);
    return scale * q + (scale - 1.0f);
}

static inline vf vtanh(vf x) {
    const vi signbit = (vi){0} + INT32_MIN;
    const vi sign = (vi)x & signbit;
    vf ax = (vf)((vi)x & ~sign);
    vf m = vexpm1_neg(-2.0f * ax);
    return (vf)((vi)(-m / (2.0f + m)) | sign);
}

DT_HOT void dt_tanh_forward(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + VL <= n; i += VL) vstore(out + i, vtanh(vload(inp + i, VL)), VL);
    if (i < n) vstore(out + i, vtanh(vload(inp + i, n - i)), n - i);
}

DT_HOT void dt_tanh_backward(float *restrict dinp, const float *restrict dout,
                             const float *restrict out, size_t n) {
    if (!dinp) return;
    for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}
