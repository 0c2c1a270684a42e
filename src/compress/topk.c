/* top-k: the k = ceil(ratio * n) largest-|x| values. Wire: k as a varint, the
 * k sorted indices as varint deltas (the first absolute), then the k values
 * (little-endian f32, or f16). Selection: a quickselect finds the k-th largest
 * magnitude; ties at the threshold are taken in index order. */
#include "compress_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* k for n values: ceil(ratio * n), at least 1 (n > 0), at most n. */
size_t dt_comp_topk_k(const dt_comp_cfg *c, size_t n) {
    if (n == 0) return 0;
    /* ratio is a float (0.1f is 0.100000001): shave the representation error off
     * before rounding up, so topk:0.1 of 1000 keeps 100, not 101. */
    double v = (double)c->ratio * (double)n;
    size_t k = (size_t)ceil(v - 1e-6 * (v > 1 ? v : 1));
    return k < 1 ? 1 : (k > n ? n : k);
}

static float kth_largest(float *a, size_t n, size_t k) {
    /* Hoare-style quickselect for the k-th largest (1-based) of a[0..n). */
    size_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                float t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return a[want];
}

/* The k-th largest |x[i]| (exact). Large n: a sample of 4096 magnitudes gives
 * a threshold above which about 3k values are expected to lie; only those
 * candidates are selected among (one pass over x instead of a quickselect over
 * all of it). If the sample misjudged (fewer than k candidates, or too many),
 * the full selection runs. The sample's positions follow the golden ratio
 * (j phi mod 1, scaled to n), not a fixed stride: a stride of n/4096 can divide
 * a weight matrix's rows (W1's first layer, 803840 = 4096 x 196.25 and rows of
 * 784 = 4 x 196) and sample the same few input columns, there the always-zero
 * border pixels, misjudge every step and pay the full selection (8.7 ns a value
 * on W1's gradients against 5.0 on normal values). */
static float kth_magnitude(const float *x, size_t n, size_t k) {
    enum { SAMPLES = 4096 };
    float *mag;
    if (n >= 16 * SAMPLES && k * 8 <= n) {
        float samp[SAMPLES];
        double u = 0;
        for (size_t j = 0; j < SAMPLES; j++) {
            samp[j] = fabsf(x[(size_t)(u * (double)n)]);
            u += 0.6180339887498949;
            if (u >= 1) u -= 1;
        }
        size_t want = (size_t)((double)SAMPLES * 3.0 * (double)k / (double)n) + 1;
        float lowt = kth_largest(samp, SAMPLES, want > SAMPLES ? SAMPLES : want);
        size_t cap = 8 * k + 64, m = 0;
        mag = dt_malloc(cap * sizeof(float));
        DT_ASSERT(mag);
        for (size_t i = 0; i < n && m <= cap; i++) {
            float a = fabsf(x[i]);
            if (a >= lowt) {
                if (m < cap) mag[m] = a;
                m++;
            }
        }
        if (m >= k && m <= cap) {
            float t = kth_largest(mag, m, k);
            dt_free(mag);
            return t;
        }
        dt_free(mag);
    }
    mag = dt_malloc(n * sizeof(float));
    DT_ASSERT(mag);
    for (size_t i = 0; i < n; i++) mag[i] = fabsf(x[i]);
    float t = kth_largest(mag, n, k);
    dt_free(mag);
    return t;
}

/* resid (error feedback, the same array as x, or NULL): what is sent is taken
 * out of it, so no decode pass is needed. */
static size_t encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out, float *resid) {
    size_t k = dt_comp_topk_k(c, n), w = 0;
    w += dt_varint_put(out + w, k);
    if (k == 0) return w;
    float thr = kth_magnitude(x, n, k);
    size_t above = 0;
    for (size_t i = 0; i < n; i++) above += fabsf(x[i]) > thr;
    size_t ties = k - above; /* values equal to thr to take, in index order */
    size_t prev = 0, taken = 0;
    size_t *list = dt_malloc(k * sizeof(size_t));
    DT_ASSERT(list);
    for (size_t i = 0; i < n && taken < k; i++) {
        float a = fabsf(x[i]);
        bool take = a > thr || (a == thr && ties > 0);
        if (!take) continue;
        if (!(a > thr)) ties--;
        list[taken++] = i;
    }
    for (size_t t = 0; t < k; t++) {
        w += dt_varint_put(out + w, t == 0 ? list[t] : list[t] - prev);
        prev = list[t];
    }
    for (size_t t = 0; t < k; t++) {
        if (c->fp16_values) {
            uint16_t h = dt_f32_to_f16(x[list[t]]);
            memcpy(out + w, &h, 2);
            w += 2;
            if (resid) resid[list[t]] -= dt_f16_to_f32(h);
        } else {
            memcpy(out + w, &x[list[t]], 4);
            w += 4;
            if (resid) resid[list[t]] = 0.0f; /* sent exactly */
        }
    }
    dt_free(list);
    return w;
}

size_t dt_comp_topk_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out) {
    return encode(c, x, n, out, NULL);
}

size_t dt_comp_topk_encode_ef(const dt_comp_cfg *c, const float *g, float *e, size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++) e[i] += g[i];
    return encode(c, e, n, out, e);
}

dt_status dt_comp_topk_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n) {
    uint64_t k;
    size_t r = dt_varint_get(in, bytes, &k);
    if (!r || k > n) return dt_errorf(DT_ERR_FORMAT, "top-k gradient: bad count");
    memset(y, 0, n * sizeof(float));
    size_t *list = dt_malloc((k ? k : 1) * sizeof(size_t));
    if (!list) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    uint64_t pos = 0;
    for (uint64_t t = 0; t < k; t++) {
        uint64_t d;
        size_t m = dt_varint_get(in + r, bytes - r, &d);
        if (!m || (t > 0 && d == 0) || d > n || (pos = (t ? pos : 0) + d) >= n) {
            dt_free(list);
            return dt_errorf(DT_ERR_FORMAT, "top-k gradient: bad index delta at %llu", (unsigned long long)t);
        }
        list[t] = (size_t)pos;
        r += m;
    }
    size_t vb = c->fp16_values ? 2 : 4;
    if (bytes - r != vb * k) {
        dt_free(list);
        return dt_errorf(DT_ERR_FORMAT, "top-k gradient: %zu value bytes for %llu values", bytes - r, (unsigned long long)k);
    }
    for (uint64_t t = 0; t < k; t++) {
        if (vb == 2) {
            uint16_t h;
            memcpy(&h, in + r + 2 * t, 2);
            y[list[t]] = dt_f16_to_f32(h);
        } else {
            memcpy(&y[list[t]], in + r + 4 * t, 4);
        }
    }
    dt_free(list);
    return DT_OK;
}
