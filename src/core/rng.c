/* Philox4x32-10 (Salmon et al., SC'11): a counter-based generator. The output
 * of block `counter` depends only on (seed, stream, counter), so the state is
 * three integers and any position can be reached without replaying. */
#include "dtrain/core.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void dt_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int i = 0; i < 10; i++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

void dt_rng_init(dt_rng *r, uint64_t seed, uint64_t stream) {
    r->seed = seed;
    r->stream = stream;
    r->counter = 0;
    r->used = 4;
    r->buf[0] = r->buf[1] = r->buf[2] = r->buf[3] = 0;
}

uint32_t dt_rng_u32(dt_rng *r) {
    if (r->used >= 4) {
        dt_philox(r->seed, r->stream, r->counter++, r->buf);
        r->used = 0;
    }
    return r->buf[r->used++];
}

uint64_t dt_rng_u64(dt_rng *r) {
    uint64_t hi = dt_rng_u32(r);
    return (hi << 32) | dt_rng_u32(r);
}

float dt_rng_uniform(dt_rng *r) { return (float)(dt_rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

uint64_t dt_rng_below(dt_rng *r, uint64_t n) {
    DT_ASSERT(n > 0);
    /* Rejection sampling on the top of the range keeps it unbiased. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = dt_rng_u64(r);
    while (x >= limit);
    return x % n;
}

float dt_rng_normal(dt_rng *r) {
    /* Box-Muller; u1 in (0, 1] so log is finite. */
    double u1 = ((double)dt_rng_u32(r) + 1.0) / 4294967296.0;
    double u2 = (double)dt_rng_u32(r) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
