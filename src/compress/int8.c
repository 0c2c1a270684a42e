/* int8, QSGD-style: per segment, scale = max |x|; q = stochastic rounding of
 * x / scale * 127 to an integer in [-127, 127], so E[q * scale / 127] = x
 * (unbiased). Wire: per segment a little-endian f32 scale, then its int8s. */
#include "compress_internal.h"

#include <math.h>
#include <string.h>

/* One segment x[0..len) -> scale + len int8s at out; with ef (the residual, x
 * == ef), subtracts what was sent while the segment is in cache. */
static size_t seg_encode(const float *x, size_t len, uint8_t *out, dt_rng *rng, float *ef) {
    float scale = 0;
    for (size_t i = 0; i < len; i++) scale = fmaxf(scale, fabsf(x[i]));
    memcpy(out, &scale, 4);
    float inv = scale > 0 ? 127.0f / scale : 0, k = scale / 127.0f;
    /* The rounding draws: one Philox block from the generator's stream seeds a
     * xorshift64* sequence for the segment (Philox per value was the codec's
     * main cost; rounding needs uniformity, not cryptographic strength). */
    uint32_t u[4];
    dt_philox(rng->seed, rng->stream, rng->counter++, u);
    uint64_t st = ((uint64_t)u[0] << 32 | u[1]) | 1u;
    for (size_t i = 0; i < len; i++) {
        st ^= st >> 12;
        st ^= st << 25;
        st ^= st >> 27;
        uint32_t r = (uint32_t)((st * 0x2545F4914F6CDD1Dull) >> 40); /* 24 bits */
        float v = x[i] * inv;                  /* in [-127, 127] */
        float f = floorf(v);
        float q = f + ((float)r * (1.0f / 16777216.0f) < v - f ? 1.0f : 0.0f);
        if (q > 127) q = 127;
        if (q < -127) q = -127;
        int8_t qi = (int8_t)q;
        out[4 + i] = (uint8_t)qi;
        if (ef) ef[i] -= (float)qi * k;
    }
    return 4 + len;
}

size_t dt_comp_int8_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out, dt_rng *rng) {
    size_t seg = c->segment ? c->segment : 256, w = 0;
    for (size_t lo = 0; lo < n; lo += seg) w += seg_encode(x + lo, n - lo < seg ? n - lo : seg, out + w, rng, NULL);
    rng->used = 4; /* a partly used block is not reused */
    return w;
}

size_t dt_comp_int8_encode_ef(const dt_comp_cfg *c, const float *g, float *e, size_t n, uint8_t *out, dt_rng *rng) {
    size_t seg = c->segment ? c->segment : 256, w = 0;
    for (size_t lo = 0; lo < n; lo += seg) {
        size_t len = n - lo < seg ? n - lo : seg;
        for (size_t i = 0; i < len; i++) e[lo + i] += g[lo + i];
        w += seg_encode(e + lo, len, out + w, rng, e + lo);
    }
    rng->used = 4;
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
