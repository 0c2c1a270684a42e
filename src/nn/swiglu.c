/* SwiGLU's elementwise part (LLaMA MLP): out = silu(gate) * up;
 *   dgate += dout * up * silu'(gate),  dup += dout * silu(gate).
 * Built on dt_silu_forward / dt_silu_backward (silu.c holds the vectorised
 * exp), a stack chunk of SWIGLU_CHUNK floats at a time: the chunk stays in L1
 * between the silu pass and the multiply, and no scratch is asked of the
 * caller. Staging through the chunk also lets out alias gate or up. */
#include "dtrain/nn.h"

#define SWIGLU_CHUNK 512

void dt_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    float s[SWIGLU_CHUNK];
    for (size_t i = 0; i < n; i += SWIGLU_CHUNK) {
        const size_t k = n - i < SWIGLU_CHUNK ? n - i : SWIGLU_CHUNK;
        dt_silu_forward(s, gate + i, k);
        for (size_t j = 0; j < k; j++) out[i + j] = s[j] * up[i + j];
    }
}

void dt_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                        const float *up, size_t n) {
    float s[SWIGLU_CHUNK];
    for (size_t i = 0; i < n; i += SWIGLU_CHUNK) {
        const size_t k = n - i < SWIGLU_CHUNK ? n - i : SWIGLU_CHUNK;
        if (dgate) {
            for (size_t j = 0; j < k; j++) s[j] = dout[i + j] * up[i + j];
            dt_silu_backward(dgate + i, s, gate + i, k);
        }
        if (dup) {
            dt_silu_forward(s, gate + i, k);
            for (size_t j = 0; j < k; j++) dup[i + j] += dout[i + j] * s[j];
        }
    }
}
