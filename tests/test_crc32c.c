/* CRC32C: the check value, empty input, chaining at every split point, the
 * SSE4.2 path against the software path on random lengths and misaligned
 * starts, and (informational) throughput of both paths on 64 MiB. */
#include "dtrain/core.h"
#include "dtrain/crc32c.h"
#include "dtrain/testing.h"
#include "testhelp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bitwise reference straight from the definition, independent of the tables. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static void test_known(void) {
    printf("implementation: %s\n", dt_crc32c_impl());
    test_cond("check value", dt_crc32c(0, "123456789", 9) == 0xE3069283u);
    test_cond("check value sw", dt_crc32c_sw(0, "123456789", 9) == 0xE3069283u);
    test_cond("empty", dt_crc32c(0, "", 0) == 0);
    test_cond("empty NULL", dt_crc32c(0, NULL, 0) == 0);
    test_cond("empty keeps crc", dt_crc32c(0x12345678u, NULL, 0) == 0x12345678u);
    test_cond("empty sw", dt_crc32c_sw(0xE3069283u, NULL, 0) == 0xE3069283u);
    /* RFC 3720 (iSCSI) B.4 vectors. */
    uint8_t buf[32];
    memset(buf, 0, sizeof buf);
    test_cond("32 zeros", dt_crc32c(0, buf, 32) == 0x8A9136AAu);
    memset(buf, 0xFF, sizeof buf);
    test_cond("32 0xFF", dt_crc32c(0, buf, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    test_cond("32 ascending", dt_crc32c(0, buf, 32) == 0x46DD794Eu);
    test_cond("32 ascending sw", dt_crc32c_sw(0, buf, 32) == 0x46DD794Eu);
}

static void test_chaining(void) {
    enum { N = 1000 };
    uint8_t buf[N];
    dt_rng r;
    dt_rng_init(&r, 42, 0);
    for (int i = 0; i < N; i++) buf[i] = (uint8_t)dt_rng_u32(&r);
    uint32_t whole = dt_crc32c(0, buf, N);
    test_cond("1000 bytes vs bitwise", whole == crc_bitwise(buf, N));
    int bad = 0, bad_sw = 0;
    for (size_t k = 0; k <= N; k++) {
        if (dt_crc32c(dt_crc32c(0, buf, k), buf + k, N - k) != whole) bad++;
        if (dt_crc32c_sw(dt_crc32c_sw(0, buf, k), buf + k, N - k) != whole) bad_sw++;
    }
    printf("chaining: %d/%d split points differ (hw dispatch), %d (sw)\n", bad, N + 1, bad_sw);
    test_cond("chaining at every split", bad == 0);
    test_cond("chaining at every split sw", bad_sw == 0);
}

static void test_hw_vs_sw(void) {
    enum { MAXN = 4096 };
    uint8_t *buf = malloc(MAXN + 16);
    dt_rng r;
    dt_rng_init(&r, 7, 1);
    for (int i = 0; i < MAXN + 16; i++) buf[i] = (uint8_t)dt_rng_u32(&r);
    int bad = 0, bad_ref = 0, trials = 0;
    for (size_t len = 0; len <= MAXN; len += 1 + len / 64) {
        for (size_t off = 0; off < 16; off++) {
            uint32_t seed = dt_rng_u32(&r);
            uint32_t a = dt_crc32c(seed, buf + off, len);
            uint32_t b = dt_crc32c_sw(seed, buf + off, len);
            if (a != b) bad++;
            if (off < 2 && dt_crc32c(0, buf + off, len) != crc_bitwise(buf + off, len)) bad_ref++;
            trials++;
        }
    }
    for (int t = 0; t < 2000; t++) { /* random lengths too */
        size_t len = dt_rng_below(&r, MAXN + 1), off = dt_rng_below(&r, 16);
        if (dt_crc32c(0, buf + off, len) != dt_crc32c_sw(0, buf + off, len)) bad++;
        trials++;
    }
    /* Around the three-way block sizes (3*256 and 3*8192 bytes) of the hw path. */
    size_t edges[] = {767, 768, 769, 775, 776, 1535, 1536, 24575, 24576, 24577, 24583,
                      24584, 25343, 25344, 25352, 49152, 49159, 100000};
    uint8_t *big = malloc(100000 + 16);
    for (size_t i = 0; i < 100000 + 16; i++) big[i] = (uint8_t)dt_rng_u32(&r);
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (size_t off = 0; off < 9; off++) {
            uint32_t a = dt_crc32c(0, big + off, edges[e]);
            if (a != dt_crc32c_sw(0, big + off, edges[e])) bad++;
            if (off == 3 && a != crc_bitwise(big + off, edges[e])) bad_ref++;
            trials++;
        }
    free(big);
    printf("hw vs sw: %d/%d mismatches, %d vs bitwise\n", bad, trials, bad_ref);
    test_cond("hw agrees with sw", bad == 0);
    test_cond("agrees with bitwise reference", bad_ref == 0);
    free(buf);
}

/* Best of 3 timings of `iters` passes over p[0, n). */
static double gbps(uint32_t (*fn)(uint32_t, const void *, size_t), const uint8_t *p, size_t n,
                   int iters, uint32_t *sink) {
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = dt_now();
        for (int i = 0; i < iters; i++) *sink = fn(*sink, p, n);
        double t = dt_now() - t0;
        if (t < best) best = t;
    }
    return (double)n * iters / best / 1e9;
}

static void test_throughput(void) {
    size_t n = (size_t)64 << 20;
    uint8_t *buf = malloc(n);
    if (!buf) return;
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 2654435761u >> 24);
    uint32_t sink = 0;
    double hw = gbps(dt_crc32c, buf, n, 1, &sink);
    double sw = gbps(dt_crc32c_sw, buf, n, 1, &sink);
    test_cond("64 MiB hw == sw", dt_crc32c(0, buf, n) == dt_crc32c_sw(0, buf, n));
    printf("throughput 64 MiB: dt_crc32c (%s) %.2f GB/s, software %.2f GB/s\n",
           dt_crc32c_impl(), hw, sw);
    /* The same from cache (64 KiB, 1024 passes): the 64 MiB figure can be
     * bounded by memory bandwidth rather than by the CRC. */
    hw = gbps(dt_crc32c, buf, 1 << 16, 1024, &sink);
    sw = gbps(dt_crc32c_sw, buf, 1 << 16, 1024, &sink);
    printf("throughput 64 KiB in cache: dt_crc32c (%s) %.2f GB/s, software %.2f GB/s (sink %08x)\n",
           dt_crc32c_impl(), hw, sw, (unsigned)sink);
    free(buf);
}

int main(void) {
    test_known();
    test_chaining();
    test_hw_vs_sw();
    test_throughput();
    return test_report();
}
