/* dtrain CRC32C (Castagnoli): checksums for checkpoints.
 *
 * Reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF, both applied
 * inside, so a checksum is chained by passing the previous result:
 *   dt_crc32c(dt_crc32c(0, a, n), b, m) == dt_crc32c(0, a||b, n + m)
 * and dt_crc32c(0, "123456789", 9) == 0xE3069283. Any alignment, len 0 ok
 * (returns crc unchanged). Thread-safe. */
#ifndef DTRAIN_CRC32C_H
#define DTRAIN_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Uses the SSE4.2 crc32 instruction when the CPU has it (checked at run time),
 * else the software path. testing.h exposes each path for tests. */
uint32_t dt_crc32c(uint32_t crc, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
