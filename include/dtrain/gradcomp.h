/* dtrain compressed gradient collectives: the codecs of compress.h (and
 * PowerSGD) applied to a rank's gradients, with error feedback, over the
 * point-to-point layer.
 *
 * Semantics are those of the uncompressed collectives: every rank contributes
 * its gradient g_r over an arena range and receives SUM_r C(g_r + e_r) (the
 * decoded encodings, summed in rank order, so every rank gets the same bits).
 *
 *   elementwise codecs (fp16, bf16, int8, topk, sign)
 *     all-reduce:      a ring all-gather of the variable-size encodings, then
 *                      decode-and-sum of all of them;
 *     reduce-scatter:  an all-to-all: chunk j of the range is encoded for rank
 *                      j only, which decodes and sums what it receives. No
 *                      second compression, so no error beyond the codec's.
 *   powersgd:RANK (Vogels et al. 2019), all-reduce-compatible: per matrix
 *     (tensors of >= 2 dims viewed as [shape0, rest]) M = g + e, P = M Q
 *     (all-reduced), P orthonormalised, Q = M^T P (all-reduced), result P Q^T;
 *     Q is kept between steps (warm start). Vectors and matrices too small to
 *     gain are all-reduced exactly with the P's. A reduce-scatter is the
 *     all-reduce with each rank keeping its chunk.
 *
 * Error feedback (on by default for int8, topk, sign, powersgd): e_r keeps
 * what rank r's encodings left out, e <- (g + e) - decode(C(g + e)); for
 * PowerSGD e_r <- M_r - (P Q^T) / N, so the ranks' residuals sum to what the
 * sum left out. */
#ifndef DTRAIN_GRADCOMP_H
#define DTRAIN_GRADCOMP_H

#include "dtrain/ckpt.h"
#include "dtrain/comm.h"
#include "dtrain/compress.h"
#include "dtrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_gc_cfg {
    dt_comp_cfg comp;        /* DT_COMP_NONE: the session is not used */
    int error_feedback;      /* 1 on, 0 off, -1: the codec's default */
    int64_t warmup;          /* uncompressed optimizer steps first */
    uint64_t seed;           /* int8's stochastic rounding, PowerSGD's first Q */
} dt_gc_cfg;

typedef struct dt_gc_stats {
    double encode_s, decode_s;   /* encoding (incl. error feedback, PowerSGD's products) / decoding and summing */
    uint64_t raw_bytes;          /* 4 x floats this rank contributed to compressed collectives */
    uint64_t payload_bytes;      /* bytes of this rank's encodings (or P, Q and exact floats for PowerSGD) */
} dt_gc_stats;

typedef struct dt_gc dt_gc;

/* The codec's default for error feedback. */
bool dt_gc_ef_default(dt_comp_kind k);
/* Whether a session of this config keeps a residual (the flag, or the default). */
bool dt_gc_cfg_uses_ef(const dt_gc_cfg *c);
/* m is borrowed; max_floats: the largest range a collective will be given. */
dt_status dt_gc_create(dt_gc **out, const dt_gc_cfg *cfg, const dt_model *m, int rank, int size,
                       size_t max_floats);
void dt_gc_destroy(dt_gc *gc); /* NULL ok */
bool dt_gc_uses_ef(const dt_gc *gc);

/* g is the gradient arena; [lo, hi) a range of whole parameters. stream makes
 * the stochastic rounding of this call distinct (e.g. step * buckets + bucket).
 * algo: the all-reduce algorithm for PowerSGD's dense parts. */
dt_status dt_gc_allreduce(dt_gc *gc, dt_comm *c, float *g, size_t lo, size_t hi, uint64_t stream, dt_algo algo);
/* Afterwards g's chunk dt_chunk_off/len(hi - lo, size, rank) of the range holds
 * the sum; the rest of the range is scratch. */
dt_status dt_gc_reduce_scatter(dt_gc *gc, dt_comm *c, float *g, size_t lo, size_t hi, uint64_t stream,
                               dt_algo algo);

/* One rank's encoding of g's arena range [lo, hi) (any range; error feedback
 * when on), as the collectives send it: for the parameter server's pushes.
 * max_bytes bounds it; decode writes the decoded range into out[0..hi-lo). */
size_t dt_gc_max_bytes(const dt_gc *gc, size_t lo, size_t hi);
size_t dt_gc_encode(dt_gc *gc, const float *g, size_t lo, size_t hi, uint8_t *out, uint64_t stream);
dt_status dt_gc_decode(dt_gc *gc, const uint8_t *in, size_t bytes, float *out, size_t lo, size_t hi);

/* Error-feedback residual, arena-indexed (m->n floats), or NULL without EF. */
float *dt_gc_error(dt_gc *gc);
/* PowerSGD's warm-start Q matrices (identical on every rank), or NULL. */
float *dt_gc_powersgd_q(dt_gc *gc, size_t *n);
/* Floats of the arena the compressor was made for. */
size_t dt_gc_params(const dt_gc *gc);
/* Bytes gc holds now: the error-feedback residual (4 per parameter when on),
 * the two bucket-sized float buffers, the encodings' buffers as grown so far
 * and PowerSGD's Q and P (the end-of-run memory report's buffers). */
size_t dt_gc_bytes(const dt_gc *gc);
void dt_gc_take_stats(dt_gc *gc, dt_gc_stats *s);
/* The compression state as a checkpoint part (src/parallel/gradcomp_ckpt.c):
 * error-feedback residuals per replica, PowerSGD's Q. */
void dt_gc_part(dt_gc *gc, dt_ckpt_part *part);

#ifdef __cplusplus
}
#endif
#endif
