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

/* One segment: scale and bits of x[0..len) into out (scale) and bitsp (bit
 * offset i0 of the value stream, i0 a multiple of 8 unless it is the last). */
static float seg_encode(const float *x, size_t len, size_t i0, uint8_t *bitsp) {
    double a = 0;
    for (size_t i = 0; i < len; i++) a += fabsf(x[i]);
    size_t i = 0;
    if (i0 % 8 == 0)
        for (; i + 8 <= len; i += 8) {
            unsigned b = 0;
            for (unsigned j = 0; j < 8; j++) b |= (unsigned)(x[i + j] < 0) << j;
            bitsp[(i0 + i) / 8] = (uint8_t)b;
        }
    for (; i < len; i++)
        if (x[i] < 0) bitsp[(i0 + i) / 8] |= (uint8_t)(1u << ((i0 + i) % 8));
    return (float)(a / (double)len);
}

size_t dt_comp_sign_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out) {
    size_t seg = c->segment ? c->segment : 256, S = nseg(n, seg);
    uint8_t *bitsp = out + 4 * S;
    memset(bitsp, 0, (n + 7) / 8);
    for (size_t s = 0; s < S; s++) {
        size_t lo = s * seg, len = n - lo < seg ? n - lo : seg;
        float scale = seg_encode(x + lo, len, lo, bitsp);
        memcpy(out + 4 * s, &scale, 4);
    }
    return 4 * S + (n + 7) / 8;
}

/* Error feedback fused into the encoder, segment by segment while it is in
 * cache: e += g; encode e; e -= decode. Same result as the generic path. */
size_t dt_comp_sign_encode_ef(const dt_comp_cfg *c, const float *g, float *e, size_t n, uint8_t *out) {
    size_t seg = c->segment ? c->segment : 256, S = nseg(n, seg);
    uint8_t *bitsp = out + 4 * S;
    memset(bitsp, 0, (n + 7) / 8);
    for (size_t s = 0; s < S; s++) {
        size_t lo = s * seg, len = n - lo < seg ? n - lo : seg;
        float *x = e + lo;
        for (size_t i = 0; i < len; i++) x[i] += g[lo + i];
        float scale = seg_encode(x, len, lo, bitsp);
        memcpy(out + 4 * s, &scale, 4);
        for (size_t i = 0; i < len; i++) x[i] -= x[i] < 0 ? -scale : scale;
    }
    return 4 * S + (n + 7) / 8;
}

static float flip(float s, uint32_t bit) {
    uint32_t u;
    memcpy(&u, &s, 4);
    u ^= bit << 31;
    memcpy(&s, &u, 4);
    return s;
}

dt_status dt_comp_sign_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n) {
    size_t seg = c->segment ? c->segment : 256, S = nseg(n, seg);
    if (bytes != 4 * S + (n + 7) / 8) return dt_errorf(DT_ERR_FORMAT, "sign gradient: %zu bytes for %zu values", bytes, n);
    const uint8_t *bitsp = in + 4 * S;
    for (size_t s = 0; s < S; s++) {
        size_t lo = s * seg, len = n - lo < seg ? n - lo : seg;
        float scale;
        memcpy(&scale, in + 4 * s, 4);
        for (size_t i = lo; i < lo + len; i++) y[i] = flip(scale, (bitsp[i / 8] >> (i % 8)) & 1u);
    }
    return DT_OK;
}
