/* LEB128 varints: the sparse "pointer" encoding of top-k indices. */
#include "dtrain/testing.h"

size_t dt_varint_put(uint8_t *out, uint64_t v) {
    size_t n = 0;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        out[n++] = (uint8_t)(b | (v ? 0x80 : 0));
    } while (v);
    return n;
}

size_t dt_varint_get(const uint8_t *in, size_t len, uint64_t *v) {
    uint64_t x = 0;
    for (size_t i = 0; i < len && i < 10; i++) {
        uint64_t b = in[i] & 0x7f;
        if (i == 9 && (in[i] & 0x7e)) return 0; /* more than 64 bits */
        x |= b << (7 * i);
        if (!(in[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}
