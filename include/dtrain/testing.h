/* dtrain testing hooks: functions that exist so the tests (and the collective
 * benchmark) can reach pieces the public API keeps inside. Installed with the
 * other headers but NOT part of the stable API: any of these may change or
 * disappear in any release. An embedder includes dtrain/dtrain.h, not this. */
#ifndef DTRAIN_TESTING_H
#define DTRAIN_TESTING_H

#include "dtrain/comm.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- compression pieces (src/compress) --------------------------------------- */
/* fp32 <-> IEEE half and bfloat16, one value (round to nearest even). */
uint16_t dt_f32_to_f16(float x);
float dt_f16_to_f32(uint16_t h);
uint16_t dt_f32_to_bf16(float x);
float dt_bf16_to_f32(uint16_t h);
/* n values to/from little-endian 16-bit words (F16C when built for it). */
void dt_f32_to_f16_n(const float *x, uint8_t *out, size_t n);
void dt_f16_to_f32_n(const uint8_t *in, float *y, size_t n);
void dt_f32_to_bf16_n(const float *x, uint8_t *out, size_t n);
void dt_bf16_to_f32_n(const uint8_t *in, float *y, size_t n);
/* LEB128: 7 bits per byte, high bit = more bytes follow. put returns the bytes
 * written (<= 10); get returns the bytes read, 0 if truncated or over 64 bits. */
size_t dt_varint_put(uint8_t *out, uint64_t v);
size_t dt_varint_get(const uint8_t *in, size_t len, uint64_t *v);

/* ---- CRC32C paths (src/ckpt/crc32c.c; dt_crc32c is in crc32c.h) ----------------- */
/* The table-driven (slicing-by-8) software path, always available; same
 * results as dt_crc32c, so tests can compare the two. */
uint32_t dt_crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* "sse4.2" or "software": the path dt_crc32c takes on this CPU. */
const char *dt_crc32c_impl(void);

/* ---- communicator knob (src/comm) ----------------------------------------------- */
/* Largest segment (bytes) a pipelined algorithm moves at once (default 1 MiB;
 * 0 means 1); tests set it small to reach the multi-segment paths, the
 * collective benchmark sweeps it. */
void dt_comm_set_max_segment(dt_comm *c, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
