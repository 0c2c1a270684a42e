/* Gradient compressors: round-trip error bounds, unbiasedness of int8, exact
 * byte counts, varint edge cases, top-k selection, error feedback's invariant. */
#include "dtrain/compress.h"
#include "dtrain/testing.h"

#include "testhelp.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static void test_half(void) {
    struct { float x; uint16_t h; } known[] = {{1.0f, 0x3c00}, {-2.5f, 0xc100}, {65504.0f, 0x7bff}, {0.0f, 0},
                                               {5.9604645e-8f, 0x0001}, {6.1035156e-5f, 0x0400}, {INFINITY, 0x7c00}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        test_cond("f32 -> f16 known value", dt_f32_to_f16(known[i].x) == known[i].h);
    test_cond("65520 rounds to inf", dt_f32_to_f16(65520.0f) == 0x7c00);
    test_cond("2^-25 ties to even (0)", dt_f32_to_f16(2.9802322e-8f) == 0);
    test_cond("nan stays nan", isnan(dt_f16_to_f32(dt_f32_to_f16(NAN))));
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* nan payloads */
        if (dt_f32_to_f16(dt_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    test_cond("every finite fp16 round-trips through fp32", bad == 0);
    double worst = 0;
    dt_rng r;
    dt_rng_init(&r, 7, 1);
    for (int i = 0; i < 100000; i++) {
        float x = (dt_rng_uniform(&r) - 0.5f) * 1000.0f;
        if (fabsf(x) < 1e-3f) continue;
        double e16 = fabs(dt_f16_to_f32(dt_f32_to_f16(x)) - x) / fabs(x);
        double eb = fabs(dt_bf16_to_f32(dt_f32_to_bf16(x)) - x) / fabs(x);
        test_cond("fp16 relative error <= 2^-11", e16 <= 1.0 / 2048 + 1e-12);
        if (eb > worst) worst = eb;
    }
    printf("bf16 worst relative error %.3g (bound 2^-8 = %.3g: 8 significant bits, round to nearest)\n", worst, 1.0 / 256);
    test_cond("bf16 relative error <= 2^-8", worst <= 1.0 / 256);
}

static void test_varint(void) {
    uint64_t cases[] = {0, 1, 127, 128, 300, (1ull << 28) - 1, 1ull << 28, (1ull << 28) + 12345, 1ull << 35, UINT64_MAX};
    size_t lens[] = {1, 1, 1, 2, 2, 4, 5, 5, 6, 10};
    uint8_t buf[16];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = dt_varint_put(buf, cases[i]);
        uint64_t v = 0;
        test_cond("varint length", n == lens[i]);
        test_cond("varint round trip", dt_varint_get(buf, n, &v) == n && v == cases[i]);
        if (n > 1) test_cond("truncated varint refused", dt_varint_get(buf, n - 1, &v) == 0);
    }
    uint8_t over[11];
    memset(over, 0xff, sizeof over);
    uint64_t v;
    test_cond("more than 64 bits refused", dt_varint_get(over, sizeof over, &v) == 0);
}

static void test_int8(void) {
    dt_comp_cfg c;
    test_cond("parse int8", dt_comp_parse("int8", &c) == DT_OK);
    c.segment = 64;
    enum { N = 200 };
    float x[N], y[N], mean[N] = {0};
    uint8_t buf[N + 64];
    dt_rng r;
    dt_rng_init(&r, 3, 3);
    for (int i = 0; i < N; i++) x[i] = dt_rng_normal(&r);
    size_t bytes = dt_comp_encode(&c, x, N, buf, &r);
    test_cond("int8 bytes = n + 4 per segment", bytes == N + 4 * 4 && bytes <= dt_comp_max_bytes(&c, N));
    const int draws = 4000;
    for (int d = 0; d < draws; d++) {
        bytes = dt_comp_encode(&c, x, N, buf, &r);
        test_cond("int8 decodes", dt_comp_decode(&c, buf, bytes, y, N) == DT_OK);
        for (int i = 0; i < N; i++) mean[i] += y[i] / draws;
    }
    /* Per element the rounding noise is at most scale/127 (std <= scale/254);
     * the mean of 4000 draws is within 5 sigma of x. */
    int bad = 0;
    for (int i = 0; i < N; i++) {
        float scale = 0;
        int lo = i / 64 * 64;
        for (int j = lo; j < lo + 64 && j < N; j++) scale = fmaxf(scale, fabsf(x[j]));
        if (fabs(mean[i] - x[i]) > 5.0 * scale / 254.0 / sqrt((double)draws)) bad++;
    }
    printf("int8: %d of %d means outside 5 sigma of the true value\n", bad, N);
    test_cond("int8 is unbiased", bad == 0);
    test_cond("int8 short buffer refused", dt_comp_decode(&c, buf, bytes - 1, y, N) != DT_OK);
}

static void test_topk(void) {
    dt_comp_cfg c;
    test_cond("parse topk", dt_comp_parse("topk:0.1", &c) == DT_OK && c.kind == DT_COMP_TOPK);
    enum { N = 1000 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)((i * 7919) % 1000) - 500.0f; /* a permutation of -500..499 */
    uint8_t buf[8192];
    size_t bytes = dt_comp_encode(&c, x, N, buf, NULL);
    test_cond("topk decodes", dt_comp_decode(&c, buf, bytes, y, N) == DT_OK);
    int kept = 0, right = 1;
    for (int i = 0; i < N; i++) {
        if (y[i] != 0) {
            kept++;
            right &= y[i] == x[i] && fabsf(x[i]) >= 450.0f;
        }
    }
    test_cond("topk keeps exactly the 100 largest magnitudes", kept == 100 && right);
    test_cond("topk bytes within the bound", bytes <= dt_comp_max_bytes(&c, N));
    /* Exact byte count: varint(k) + index varints + 4 bytes per value. */
    size_t want = 1, prev = 0, first = 1;
    uint8_t tmp[16];
    for (int i = 0; i < N; i++)
        if (y[i] != 0) {
            want += dt_varint_put(tmp, first ? (size_t)i : (size_t)i - prev);
            prev = (size_t)i;
            first = 0;
        }
    want += 4 * 100;
    test_cond("topk byte count is exact", bytes == want);
    /* Ties: all equal, k = 3 of 10 -> the first three indices. */
    float t[10];
    for (int i = 0; i < 10; i++) t[i] = 1.0f;
    c.ratio = 0.3f;
    bytes = dt_comp_encode(&c, t, 10, buf, NULL);
    test_cond("ties decode", dt_comp_decode(&c, buf, bytes, y, 10) == DT_OK);
    test_cond("ties taken in index order", y[0] == 1 && y[1] == 1 && y[2] == 1 && y[3] == 0);
    /* All selected, and an empty input. */
    c.ratio = 1.0f;
    bytes = dt_comp_encode(&c, x, N, buf, NULL);
    test_cond("ratio 1 keeps everything", dt_comp_decode(&c, buf, bytes, y, N) == DT_OK && memcmp(x, y, sizeof x) == 0);
    bytes = dt_comp_encode(&c, x, 0, buf, NULL);
    test_cond("empty input: one byte (k = 0)", bytes == 1 && dt_comp_decode(&c, buf, bytes, y, 0) == DT_OK);
    /* fp16 values */
    c.ratio = 0.1f;
    c.fp16_values = true;
    bytes = dt_comp_encode(&c, x, N, buf, NULL);
    test_cond("topk fp16 values decode", dt_comp_decode(&c, buf, bytes, y, N) == DT_OK);
    /* Malformed: an index past n. */
    uint8_t bad[8];
    size_t w = dt_varint_put(bad, 1);
    w += dt_varint_put(bad + w, 5000);
    test_cond("index past n refused", dt_comp_decode(&c, bad, w + 2, y, N) != DT_OK);
}

static void test_sign_ef(void) {
    dt_comp_cfg c;
    test_cond("parse sign", dt_comp_parse("sign", &c) == DT_OK);
    enum { N = 37 };
    float g[N], e[N] = {0}, tmp[N], sent[N], sum_g[N] = {0}, sum_sent[N] = {0};
    uint8_t buf[64];
    dt_rng r;
    dt_rng_init(&r, 9, 9);
    for (int step = 0; step < 50; step++) {
        for (int i = 0; i < N; i++) {
            g[i] = dt_rng_normal(&r);
            sum_g[i] += g[i];
        }
        size_t bytes = dt_comp_encode_ef(&c, g, e, N, buf, tmp, &r);
        test_cond("sign bytes = 4 per segment + ceil(n/8)", bytes == 4 * ((N + 255) / 256) + (N + 7) / 8);
        dt_comp_decode(&c, buf, bytes, sent, N);
        for (int i = 0; i < N; i++) sum_sent[i] += sent[i];
    }
    /* Error feedback: what was sent plus what is left equals what was given. */
    float lhs[N];
    for (int i = 0; i < N; i++) lhs[i] = sum_sent[i] + e[i];
    test_close("sum(sent) + residual = sum(gradients)", lhs, sum_g, N, 1e-4, 1e-5);
    test_cond("bad compressor name refused", dt_comp_parse("zip", &c) != DT_OK && dt_comp_parse("topk:0", &c) != DT_OK);
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Large inputs take the sampled-threshold path: the selection must still be
 * exactly the k largest magnitudes (checked against a full sort), also with
 * heavy ties (values on a coarse grid) and a spiky vector the sample misses. */
static void test_topk_large(void) {
    size_t n = 300000;
    float *x = dt_alloc_floats(n), *y = dt_alloc_floats(n), *mag = dt_alloc_floats(n);
    dt_comp_cfg c;
    dt_comp_parse("topk:0.01", &c);
    uint8_t *buf = malloc(dt_comp_max_bytes(&c, n));
    for (int kind = 0; kind < 3; kind++) {
        dt_rng r;
        dt_rng_init(&r, 42, (uint64_t)kind);
        for (size_t i = 0; i < n; i++) {
            float z = dt_rng_normal(&r);
            x[i] = kind == 0 ? z : kind == 1 ? (float)(int)(z * 4.0f) : (i % 50000 == 7 ? 100.0f : 1e-3f * z);
        }
        size_t bytes = dt_comp_encode(&c, x, n, buf, NULL);
        dt_comp_decode(&c, buf, bytes, y, n);
        size_t k = (size_t)(0.01 * (double)n), kept = 0;
        for (size_t i = 0; i < n; i++) mag[i] = fabsf(x[i]);
        qsort(mag, n, sizeof(float), cmp_desc);
        float kth = mag[k - 1];
        int ok = 1;
        for (size_t i = 0; i < n; i++) {
            if (y[i] != 0.0f) {
                kept++;
                ok &= y[i] == x[i] && fabsf(x[i]) >= kth;
            } else {
                ok &= fabsf(x[i]) <= kth; /* everything left out is not larger than the k-th */
            }
        }
        char what[96];
        snprintf(what, sizeof what, "top-k of %zu (%s): exactly the %zu largest", n,
                 kind == 0 ? "normal" : kind == 1 ? "ties" : "spikes", k);
        test_cond(what, ok && kept == k);
        printf("%s %s\n", ok && kept == k ? "ok  " : "FAIL", what);
    }
    free(buf);
    dt_free(x);
    dt_free(y);
    dt_free(mag);
}

int main(void) {
    test_half();
    test_varint();
    test_int8();
    test_topk();
    test_topk_large();
    test_sign_ef();
    return test_report();
}
