/* Rotary position embedding, in place, in Hugging Face LLaMA's convention
 * (rotate_half): the head vector is split into halves x1 = x[:HS/2] and
 * x2 = x[HS/2:], and pair i (x1[i], x2[i]) of token t turns by the angle
 * t * inv_freq[i], inv_freq[i] = 1 / theta^(2i/HS):
 *   x1' = x1 cos - x2 sin,   x2' = x2 cos + x1 sin.
 * inv_freq and the angle are computed in float, as HF computes them, so that a
 * checkpoint trained there sees the same rotations here even at large t
 * (where a float angle has lost its low bits). A rotation's gradient is the
 * inverse rotation, so backward is the same kernel with dir = -1 (sin negated)
 * applied to the gradient in place; nothing is saved.
 *
 * cos and sin depend on (t, i) only: they are computed once per token for a
 * chunk of ROPE_CHUNK pairs on the stack and applied to every sample and head,
 * so the trigonometry costs T * HS/2 calls, not B * T * nheads * HS/2. */
#include "core/cpu.h"
#include "dtrain/core.h"
#include "dtrain/nn.h"

#include <math.h>

#define ROPE_CHUNK 64

DT_HOT void dt_rope_apply(float *x, int B, int T, int nheads, int HS, size_t row_stride,
                          float theta, int dir) {
    DT_ASSERT(HS % 2 == 0 && (dir == 1 || dir == -1));
    const int half = HS / 2;
    float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
    for (int t = 0; t < T; t++) {
        for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
            const int ni = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
            for (int k = 0; k < ni; k++) {
                const float inv_freq = 1.0f / powf(theta, (float)(2 * (i0 + k)) / (float)HS);
                const float angle = (float)t * inv_freq;
                cs[k] = cosf(angle);
                sn[k] = (float)dir * sinf(angle);
            }
            for (int b = 0; b < B; b++)
                for (int h = 0; h < nheads; h++) {
                    float *restrict x1 = x + ((size_t)b * T + t) * row_stride + (size_t)h * HS + i0;
                    float *restrict x2 = x1 + half;
                    for (int k = 0; k < ni; k++) {
                        const float a = x1[k], c = x2[k];
                        x1[k] = a * cs[k] - c * sn[k];
                        x2[k] = c * cs[k] + a * sn[k];
                    }
                }
        }
    }
}
