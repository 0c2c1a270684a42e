/* int8, QSGD-style: per segment, scale = max |x|; q = stochastic rounding of
 * x / scale * 127 to an integer in [-127, 127], so E[q * scale / 127] = x
 * (unbiased). Wire: per segment a little-endian f32 scale, then its int8s. */
#include "compress_internal.h"

#include <math.h>
#include <string.h>

size_t dt_comp_int8_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out, dt_rng *rng) {
    size_t seg = c->segment ? c->segment : 256, w = 0;
    for (size_t lo = 0; lo < n; lo += seg) {
        size_t len = n - lo < seg ? n - lo : seg;
        float scale = 0;
        for (size_t i = 0; i < len; i++) scale = fmaxf(scale, fabsf(x[lo + i]));
        memcpy(out + w, &scale, 4);
        w += 4;
        float inv = scale > 0 ? 127.0f / scale : 0;
        for (size_t i = 0; i < len; i++) {
            float v = x[lo + i] * inv;             /* in [-127, 127] */
            float f = floorf(v);
            float q = f + (dt_rng_uniform(rng) < v - f ? 1.0f : 0.0f);
            if (q > 127) q = 127;
            if (q < -127) q = -127;
            out[w++] = (uint8_t)(int8_t)q;
        }
    }
    return w;
}

dt_status dt_comp_int8_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n) {
    size_t seg = c->segment ? c->segment : 256, r = 0;
    for (size_t lo = 0; lo < n; lo += seg) {
        size_t len = n - lo < seg ? n - lo : seg;
        if (r + 4 + len > bytes) return dt_errorf(DT_ERR_FORMAT, "int8 gradient: %zu bytes is short for %zu values", bytes, n);
        float scale;
        memcpy(&scale, in + r, 4);
        r += 4;
        float k = scale / 127.0f;
        for (size_t i = 0; i < len; i++) y[lo + i] = (float)(int8_t)in[r++] * k;
    }
    if (r != bytes) return dt_errorf(DT_ERR_FORMAT, "int8 gradient: %zu bytes, expected %zu", bytes, r);
    return DT_OK;
}
