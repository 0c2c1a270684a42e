/* CRC32C (Castagnoli), reflected polynomial 0x82F63B78.
 *
 * Two paths giving identical results:
 * - SSE4.2: the crc32 instruction, 8 bytes per step on an 8-aligned pointer
 *   (byte steps for the unaligned head and the tail). The instruction has a
 *   latency of 3 cycles and a throughput of 1, so one chain runs at a third of
 *   the peak: long inputs are cut into three adjacent blocks crc'd in
 *   parallel, then joined with crc(A||B) = shift(crc(A), |B|) ^ crc0(B), where
 *   crc0 starts from a zero register and shift, "append |B| zero bytes", is a
 *   linear map applied with four 256-entry tables (after Mark Adler's crc32c.c).
 * - software: slicing-by-8 (Kounavis & Berry), eight 256-entry tables so one
 *   step folds 8 bytes with 8 independent lookups.
 * The path is chosen once, at the first call, with __builtin_cpu_supports, so
 * the library runs on CPUs without SSE4.2. The instruction works on the raw
 * (pre-inverted) register, so both paths apply the ~ at entry and exit. */
#include "dtrain/crc32c.h"
#include "dtrain/testing.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC_HAVE_SSE42 1
#include <nmmintrin.h>
#endif

#define CRC32C_POLY 0x82F63B78u

/* Block sizes of the three-way split: LONG for big inputs, SHORT for the rest. */
#define CRC_LONG 8192
#define CRC_SHORT 256

static uint32_t g_table[8][256];
static uint32_t g_shift_long[4 * 256];  /* register after CRC_LONG zero bytes */
static uint32_t g_shift_short[4 * 256]; /* ... after CRC_SHORT zero bytes */
static uint32_t (*g_impl)(uint32_t, const uint8_t *, size_t);
static const char *g_impl_name = "software";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* ---- software: slicing-by-8 ------------------------------------------------- */

static uint32_t crc_sw_raw(uint32_t c, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        c = g_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        /* Little-endian assembly by hand so the path is endian-neutral. */
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        c = g_table[7][lo & 0xFF] ^ g_table[6][(lo >> 8) & 0xFF] ^
            g_table[5][(lo >> 16) & 0xFF] ^ g_table[4][lo >> 24] ^
            g_table[3][hi & 0xFF] ^ g_table[2][(hi >> 8) & 0xFF] ^
            g_table[1][(hi >> 16) & 0xFF] ^ g_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = g_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

/* ---- hardware: SSE4.2 crc32 --------------------------------------------------- */

#ifdef CRC_HAVE_SSE42
/* t: (4, 256), the map applied to one byte of the register each. */
static uint32_t crc_shift(const uint32_t *t, uint32_t c) {
    return t[c & 0xFF] ^ t[256 + ((c >> 8) & 0xFF)] ^ t[512 + ((c >> 16) & 0xFF)] ^
           t[768 + (c >> 24)];
}

static uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8); /* aligned where used; memcpy keeps it free of aliasing UB */
    return v;
}

/* Three chains over adjacent blocks of `blk` bytes while at least 3 remain;
 * p is 8-aligned. Returns the register, advances *pp and *pn. */
__attribute__((target("sse4.2")))
static uint64_t crc_hw_3way(uint64_t c0, const uint8_t **pp, size_t *pn, size_t blk,
                            const uint32_t *shift) {
    const uint8_t *p = *pp;
    size_t n = *pn;
    while (n >= 3 * blk) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < blk; i += 8) {
            c0 = _mm_crc32_u64(c0, load64(p + i));
            c1 = _mm_crc32_u64(c1, load64(p + blk + i));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * blk + i));
        }
        c0 = crc_shift(shift, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(shift, (uint32_t)c0) ^ (uint32_t)c2;
        p += 3 * blk;
        n -= 3 * blk;
    }
    *pp = p;
    *pn = n;
    return c0;
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw_raw(uint32_t c, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    uint64_t c64 = c;
    c64 = crc_hw_3way(c64, &p, &n, CRC_LONG, g_shift_long);
    c64 = crc_hw_3way(c64, &p, &n, CRC_SHORT, g_shift_short);
    while (n >= 8) {
        c64 = _mm_crc32_u64(c64, load64(p));
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

/* Tables of the linear map "append `zeros` zero bytes" on a raw register:
 * column b is the image of bit b, found by running the byte step. */
static void crc_shift_table(uint32_t *t, size_t zeros) { /* t: (4, 256) */
    uint32_t col[32];
    for (int b = 0; b < 32; b++) {
        uint32_t c = 1u << b;
        for (size_t i = 0; i < zeros; i++) c = g_table[0][c & 0xFF] ^ (c >> 8);
        col[b] = c;
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t r = 0;
            for (int b = 0; b < 8; b++)
                if (v >> b & 1) r ^= col[8 * k + b];
            t[256 * k + v] = r;
        }
}

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1)));
        g_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            g_table[t][i] = (g_table[t - 1][i] >> 8) ^ g_table[0][g_table[t - 1][i] & 0xFF];
    g_impl = crc_sw_raw;
#ifdef CRC_HAVE_SSE42
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        crc_shift_table(g_shift_long, CRC_LONG);
        crc_shift_table(g_shift_short, CRC_SHORT);
        g_impl = crc_hw_raw;
        g_impl_name = "sse4.2";
    }
#endif
}

uint32_t dt_crc32c(uint32_t crc, const void *buf, size_t len) {
    pthread_once(&g_once, crc_init);
    if (len == 0) return crc;
    return ~g_impl(~crc, buf, len);
}

uint32_t dt_crc32c_sw(uint32_t crc, const void *buf, size_t len) {
    pthread_once(&g_once, crc_init);
    if (len == 0) return crc;
    return ~crc_sw_raw(~crc, buf, len);
}

const char *dt_crc32c_impl(void) {
    pthread_once(&g_once, crc_init);
    return g_impl_name;
}
