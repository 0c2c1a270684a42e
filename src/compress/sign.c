/* Scaled sign: delta = (|x|_1 / n) * sign(x). Wire: an f32 scale, then one bit
 * per value (1 = negative), least significant bit first. */
#include "compress_internal.h"

#include <math.h>
#include <string.h>

size_t dt_comp_sign_encode(const float *x, size_t n, uint8_t *out) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += fabsf(x[i]);
    float scale = n ? (float)(s / (double)n) : 0.0f;
    memcpy(out, &scale, 4);
    memset(out + 4, 0, (n + 7) / 8);
    for (size_t i = 0; i < n; i++)
        if (x[i] < 0) out[4 + i / 8] |= (uint8_t)(1u << (i % 8));
    return 4 + (n + 7) / 8;
}

dt_status dt_comp_sign_decode(const uint8_t *in, size_t bytes, float *y, size_t n) {
    if (bytes != 4 + (n + 7) / 8) return dt_errorf(DT_ERR_FORMAT, "sign gradient: %zu bytes for %zu values", bytes, n);
    float scale;
    memcpy(&scale, in, 4);
    for (size_t i = 0; i < n; i++) y[i] = (in[4 + i / 8] >> (i % 8)) & 1 ? -scale : scale;
    return DT_OK;
}
