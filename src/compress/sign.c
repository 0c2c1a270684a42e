/* Scaled sign: per segment of `segment` values, delta = (|x|_1 / len) * sign(x)
 * (one scale per segment keeps layers of very different gradient size apart).
 * Wire: the segments' f32 scales, then one bit per value (1 = negative), least
 * significant bit first. */
#include "compress_internal.h"

#include <math.h>
#include <string.h>

static size_t nseg(size_t n, size_t seg) { return (n + seg - 1) / seg; }

size_t dt_comp_sign_bytes(const dt_comp_cfg *c, size_t n) {
    size_t seg = c->segment ? c->segment : 256;
    return 4 * nseg(n, seg) + (n + 7) / 8;
}

size_t dt_comp_sign_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out) {
    size_t seg = c->segment ? c->segment : 256, S = nseg(n, seg);
    uint8_t *bitsp = out + 4 * S;
    memset(bitsp, 0, (n + 7) / 8);
    for (size_t s = 0; s < S; s++) {
        size_t lo = s * seg, len = n - lo < seg ? n - lo : seg;
        double a = 0;
        for (size_t i = 0; i < len; i++) a += fabsf(x[lo + i]);
        float scale = (float)(a / (double)len);
        memcpy(out + 4 * s, &scale, 4);
    }
    for (size_t i = 0; i < n; i++)
        if (x[i] < 0) bitsp[i / 8] |= (uint8_t)(1u << (i % 8));
    return 4 * S + (n + 7) / 8;
}

dt_status dt_comp_sign_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n) {
    size_t seg = c->segment ? c->segment : 256, S = nseg(n, seg);
    if (bytes != 4 * S + (n + 7) / 8) return dt_errorf(DT_ERR_FORMAT, "sign gradient: %zu bytes for %zu values", bytes, n);
    const uint8_t *bitsp = in + 4 * S;
    for (size_t s = 0; s < S; s++) {
        size_t lo = s * seg, len = n - lo < seg ? n - lo : seg;
        float scale;
        memcpy(&scale, in + 4 * s, 4);
        for (size_t i = lo; i < lo + len; i++) y[i] = (bitsp[i / 8] >> (i % 8)) & 1 ? -scale : scale;
    }
    return DT_OK;
}
