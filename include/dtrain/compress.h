/* dtrain gradient compressors behind one interface (the codecs and error
 * feedback; the collectives that use them are in gradcomp.h).
 *
 *   fp16, bf16   cast (round to nearest even); decode back to fp32
 *   int8         QSGD-style: per segment of `segment` values a scale (max |x|)
 *                and stochastic rounding of x/scale*127 to an integer: unbiased
 *   topk:RATIO   the largest-|x| ceil(RATIO*n) values; indices sorted and
 *                delta-encoded as LEB128 varints, values fp32 (or fp16)
 *   sign         1 bit per value plus one scale (mean |x|) per segment: the
 *                scaled sign
 *   powersgd:R   low-rank; a collective, not a codec (gradcomp.h)
 * Every encoder reports the exact bytes it wrote (the bytes on the wire). */
#ifndef DTRAIN_COMPRESS_H
#define DTRAIN_COMPRESS_H

#include "dtrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_COMP_NONE, DT_COMP_FP16, DT_COMP_BF16, DT_COMP_INT8, DT_COMP_TOPK, DT_COMP_SIGN, DT_COMP_POWERSGD, DT_COMP_COUNT } dt_comp_kind;

typedef struct dt_comp_cfg {
    dt_comp_kind kind;
    float ratio;           /* topk: fraction kept, (0, 1] */
    bool fp16_values;      /* topk: values as fp16 */
    size_t segment;        /* int8, sign: values per scale [256] */
    int rank;              /* powersgd: rank of the approximation */
} dt_comp_cfg;

/* "none", "fp16", "bf16", "int8", "topk:0.01", "sign", "powersgd:4" (PowerSGD is
 * not an elementwise codec: see gradcomp.h; encode/decode refuse it). */
dt_status dt_comp_parse(const char *s, dt_comp_cfg *out);
/* The --compress spelling of c ("topk:0.01"). */
void dt_comp_name(const dt_comp_cfg *c, char *buf, size_t n);
/* Largest encoding of n values (capacity to give dt_comp_encode). */
size_t dt_comp_max_bytes(const dt_comp_cfg *c, size_t n);
/* Encodes x[0..n) into out; returns the bytes written. rng: int8's stochastic rounding. */
size_t dt_comp_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out, dt_rng *rng);
/* Decodes into y[0..n) (written). DT_ERR_FORMAT on a malformed or short buffer. */
dt_status dt_comp_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n);

/* Error feedback (Seide 2014; Karimireddy et al. 2019): e += g; send C(e);
 * e -= decode(C(e)). Writes the encoding to out and returns its bytes; tmp: n
 * floats of scratch. */
size_t dt_comp_encode_ef(const dt_comp_cfg *c, const float *g, float *e, size_t n, uint8_t *out,
                         float *tmp, dt_rng *rng);

#ifdef __cplusplus
}
#endif
#endif
