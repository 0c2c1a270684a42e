/* Sequence parallelism (--sequence-parallel; Korthikanti et al. 2022, "Reducing
 * Activation Recomputation in Large Transformer Models") on top of Megatron's
 * tensor parallelism: the parts of a transformer block that plain tp repeats
 * on every rank (layer norms, dropout, the residual adds, the block's
 * boundaries) run on this rank's part of the token rows instead.
 *
 * The split: the B x T token rows of a micro-batch, in their order, cut into
 * tp contiguous parts (T % tp == 0), part r on tp rank r. With B = 1 that is
 * exactly the sequence; Megatron cuts the sequence of every sample because
 * its layout is [s, b, h], ours is [b, s, h], where a contiguous cut lets the
 * collectives work on the buffers as they lie (no reordering pass). Row-wise
 * layers do not care which rows they get; dropout keys each row by its place
 * in its sample, so every layout draws the same masks.
 *
 * The region starts at the first block with tensor-parallel layers (the
 * enter layer keeps this rank's rows; backward all-gathers the input
 * gradient, since the replicated layers before it need all of it) and ends in
 * the first block without, after its leading norms (the leave layer
 * all-gathers; backward keeps this rank's rows of the gradient, which the
 * replicated layers after it compute whole on every rank). desc.c places both. In between, a column-parallel linear all-gathers its
 * input (g-bar of the paper) and in backward gathers it again (only this
 * rank's part is kept, as Megatron does) and reduce-scatters its input
 * gradient (instead of plain tp's all-reduce f); a row-parallel linear
 * reduce-scatters its partial outputs (instead of the all-reduce g) and
 * all-gathers its output gradient in backward. Replicated parameters used on
 * this rank's rows (layer norm's, a linear without "tp") get a partial
 * gradient: backward writes the increment to scratch and all-reduces that.
 *
 * Cost per column/row pair over n = B*T*C floats, ring on t ranks: forward
 * an all-gather and a reduce-scatter, backward two all-gathers and a
 * reduce-scatter, each (t-1)/t * n floats sent per rank, against plain tp's
 * two all-reduces (a reduce-scatter plus an all-gather each): 5/4 of its
 * bytes, the extra quarter being the input's second gather. Memory: what the
 * region keeps (norms' inputs and statistics, residual streams, boundaries)
 * is 1/t of plain tp's; a pair's scratch grows by its gathered input and its
 * gathered gradient (n floats each, freed after the layer). */
#include "layer.h"

#include <string.h>

/* The tp group, or NULL once a tp collective has failed (nothing more starts). */
static dt_comm *group(const dt_block *b) { return b->tp && !*b->tp_err ? b->tp : NULL; }

static void record(const dt_block *b, dt_status st) {
    if (st && !*b->tp_err) *b->tp_err = st;
}

size_t dt_sp_off(const dt_block *b, size_t n) {
    if (!b->tp) return 0;
    return dt_chunk_off(n, dt_comm_size(b->tp), dt_comm_rank(b->tp));
}

void dt_sp_allgather(const dt_block *b, float *buf, size_t n) {
    dt_comm *g = group(b);
    if (g) record(b, dt_allgather(g, buf, n, DT_ALGO_AUTO));
}

void dt_sp_reduce_scatter(const dt_block *b, float *buf, size_t n) {
    dt_comm *g = group(b);
    if (g) record(b, dt_reduce_scatter(g, buf, n, DT_OP_SUM, DT_ALGO_AUTO));
}

void dt_sp_sum_into(const dt_block *b, float *tmp, float *dst, size_t n) {
    dt_comm *g = group(b);
    if (g) record(b, dt_allreduce(g, tmp, n, DT_OP_SUM, DT_ALGO_AUTO));
    for (size_t k = 0; k < n; k++) dst[k] += tmp[k];
}

/* ---- entering: whole rows (in_dim per sample) -> this rank's (out_dim) ---------------- */

static size_t none(const dt_layer *l, int B) { return 0; }
static size_t enter_scratch(const dt_layer *l, int B) { return (size_t)B * l->in_dim; }

static void enter_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                          float *scratch) {
    size_t n = (size_t)c->batch->B * l->in_dim;
    memcpy(out, in + dt_sp_off(c->b, n), (size_t)c->batch->B * l->out_dim * sizeof(float));
}

static void enter_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                           const float *dout, float *din, const float *saved, float *scratch) {
    if (!din) return;
    size_t n = (size_t)c->batch->B * l->in_dim, part = (size_t)c->batch->B * l->out_dim;
    memcpy(scratch + dt_sp_off(c->b, n), dout, part * sizeof(float));
    dt_sp_allgather(c->b, scratch, n);
    for (size_t k = 0; k < n; k++) din[k] += scratch[k];
}

/* ---- leaving: this rank's rows (in_dim per sample) -> whole (out_dim) ----------------- */

static void leave_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                          float *scratch) {
    size_t n = (size_t)c->batch->B * l->out_dim;
    memcpy(out + dt_sp_off(c->b, n), in, (size_t)c->batch->B * l->in_dim * sizeof(float));
    dt_sp_allgather(c->b, out, n);
}

static void leave_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                           const float *dout, float *din, const float *saved, float *scratch) {
    if (!din) return;
    size_t n = (size_t)c->batch->B * l->out_dim, part = (size_t)c->batch->B * l->in_dim;
    const float *d = dout + dt_sp_off(c->b, n);
    for (size_t k = 0; k < part; k++) din[k] += d[k];
}

const dt_layer_ops dt_sp_enter_ops = {"sequence_split", false, none, enter_scratch, enter_forward, enter_backward};
const dt_layer_ops dt_sp_leave_ops = {"sequence_gather", false, none, none, leave_forward, leave_backward};
