/* ReLU. Backward reads the forward OUTPUT (out > 0 exactly when inp > 0), so the
 * forward may overwrite its input and the block need not keep both tensors.
 * GCC 12 at -O2 only vectorises loops whose trip count is a multiple of the
 * vector width (and never when out may alias inp), so the bulk runs in blocks of
 * 16 with GCC/Clang vector extensions; loading a whole block before storing it
 * keeps out == inp correct. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <string.h>

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
#define VL 16

DT_HOT void dt_relu_forward(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf x;
        memcpy(&x, inp + i, sizeof x);
        const vf zero = {0};
        x = (vf)((vi)x & (x > zero)); /* NaN compares false -> 0, as x > 0 ? x : 0 */
        memcpy(out + i, &x, sizeof x);
    }
    for (; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

DT_HOT void dt_relu_backward(float *restrict dinp, const float *restrict dout,
                      const float *restrict out, size_t n) {
    if (!dinp) return;
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf o, g, d;
        const vf zero = {0};
        memcpy(&o, out + i, sizeof o);
        memcpy(&g, dout + i, sizeof g);
        memcpy(&d, dinp + i, sizeof d);
        d += (vf)((vi)g & (o > zero));
        memcpy(dinp + i, &d, sizeof d);
    }
    for (; i < n; i++) dinp[i] += out[i] > 0.0f ? dout[i] : 0.0f;
}

DT_HOT void dt_relu_mask(float *restrict dst, const float *restrict dout, const float *restrict out,
                         size_t n) {
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf o, g;
        const vf zero = {0};
        memcpy(&o, out + i, sizeof o);
        memcpy(&g, dout + i, sizeof g);
        g = (vf)((vi)g & (o > zero));
        memcpy(dst + i, &g, sizeof g);
    }
    for (; i < n; i++) dst[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}
