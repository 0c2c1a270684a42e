/* Checked allocation: every size product is overflow-checked; float buffers
 * are 64-byte aligned (one cache line, one AVX-512 register) and zeroed. */
#include "dtrain/core.h"

#include <stdlib.h>
#include <string.h>

bool dt_size_mul(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

bool dt_size_add(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

void *dt_malloc(size_t n) { return malloc(n ? n : 1); }

void *dt_calloc(size_t count, size_t size) {
    size_t n;
    if (!dt_size_mul(count, size, &n)) return NULL;
    return calloc(n ? n : 1, 1);
}

void *dt_realloc_array(void *p, size_t count, size_t size) {
    size_t n;
    if (!dt_size_mul(count, size, &n)) return NULL;
    return realloc(p, n ? n : 1);
}

float *dt_alloc_floats(size_t n) {
    size_t bytes;
    if (!dt_size_mul(n ? n : 1, sizeof(float), &bytes)) return NULL;
    size_t rounded;
    if (!dt_size_add(bytes, 63, &rounded)) return NULL;
    rounded &= ~(size_t)63;
    float *p = aligned_alloc(64, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

size_t dt_alloc_floats_held(size_t n) { return (n + 15) / 16 * 16; }

void dt_free(void *p) { free(p); }

char *dt_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}
