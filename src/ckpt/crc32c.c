/* CRC32C (Castagnoli), reflected polynomial 0x82F63B78.
 *
 * Two paths giving identical results:
 * - SSE4.2: the crc32 instruction, 8 bytes per step on an 8-aligned pointer
 *   (byte steps for the unaligned head and the tail). One dependent chain:
 *   about 8 bytes per 3 cycles (latency bound).
 * - software: slicing-by-8 (Kounavis & Berry), eight 256-entry tables so one
 *   step folds 8 bytes with 8 independent lookups.
 * The path is chosen once, at the first call, with __builtin_cpu_supports, so
 * the library runs on CPUs without SSE4.2. The instruction works on the raw
 * (pre-inverted) register, so both paths apply the ~ at entry and exit. */
#include "dtrain/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC_HAVE_SSE42 1
#include <nmmintrin.h>
#endif

#define CRC32C_POLY 0x82F63B78u

static uint32_t g_table[8][256];
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
__attribute__((target("sse4.2")))
static uint32_t crc_hw_raw(uint32_t c, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* aligned here; memcpy keeps it free of aliasing UB */
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

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
