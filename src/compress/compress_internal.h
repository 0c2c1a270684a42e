/* Private to src/compress: the per-codec entry points. */
#ifndef DT_COMPRESS_INTERNAL_H
#define DT_COMPRESS_INTERNAL_H

#include "dtrain/compress.h"
#include "dtrain/testing.h" /* fp16/bf16 and varint pieces */

size_t dt_comp_topk_k(const dt_comp_cfg *c, size_t n);
size_t dt_comp_int8_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out, dt_rng *rng);
size_t dt_comp_int8_encode_ef(const dt_comp_cfg *c, const float *g, float *e, size_t n, uint8_t *out, dt_rng *rng);
dt_status dt_comp_int8_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n);
size_t dt_comp_topk_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out);
size_t dt_comp_topk_encode_ef(const dt_comp_cfg *c, const float *g, float *e, size_t n, uint8_t *out);
dt_status dt_comp_topk_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n);
size_t dt_comp_sign_bytes(const dt_comp_cfg *c, size_t n);
size_t dt_comp_sign_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out);
size_t dt_comp_sign_encode_ef(const dt_comp_cfg *c, const float *g, float *e, size_t n, uint8_t *out);
dt_status dt_comp_sign_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n);

#endif
