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

#include <jansson.h>
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

static const dt_layer_ops enter_ops = {"sequence_split", false, none, enter_scratch, enter_forward, enter_backward};
static const dt_layer_ops leave_ops = {"sequence_gather", false, none, none, leave_forward, leave_backward};

/* ---- where the region starts and ends (desc.c places the layers) -------------------- */

bool dt_sp_marked(const json_t *j) {
    if (json_is_array(j)) {
        size_t i;
        const json_t *c;
        json_array_foreach((json_t *)j, i, c) if (dt_sp_marked(c)) return true;
        return false;
    }
    if (!json_is_object(j)) return false;
    const json_t *t = json_object_get(j, "tp");
    if (json_is_string(t) && strcmp(json_string_value(t), "none") != 0) return true;
    return dt_sp_marked(json_object_get(j, "layers"));
}

/* All leading layers row-wise: 0 too, since the region must end inside the block. */
int dt_sp_leave_at(const json_t *block) {
    static const char *const rowwise[] = {"layernorm", "rmsnorm", "dropout", "gelu", "relu", "silu", "tanh"};
    const json_t *t = json_object_get(block, "type"), *list = json_object_get(block, "layers");
    if (!json_is_string(t) || !json_is_array(list) ||
        (strcmp(json_string_value(t), "sequential") && strcmp(json_string_value(t), "repeat")))
        return 0;
    size_t n = 0;
    for (; n < json_array_size(list); n++) {
        const json_t *c = json_object_get(json_array_get(list, n), "type");
        bool ok = false;
        for (size_t k = 0; json_is_string(c) && k < sizeof rowwise / sizeof *rowwise; k++)
            ok |= strcmp(json_string_value(c), rowwise[k]) == 0;
        if (!ok) break;
    }
    return n < json_array_size(list) ? (int)n : 0;
}

dt_status dt_sp_enter_check(const dt_shape *sh, int sp, const char *what, const char *name) {
    if (sh->tokens || sh->split || sh->nd != 2)
        return dt_errorf(DT_ERR_INVALID, "%s: --sequence-parallel splits a (positions, width) activation along its "
                         "positions, but block '%s' takes %s", what, name,
                         sh->tokens ? "token ids" : sh->split ? "a tensor-parallel shard" : "an input without positions");
    if (sh->d[0] % sp)
        return dt_errorf(DT_ERR_INVALID, "%s: --sequence-parallel: --tp %d must divide the %lld positions of block '%s'",
                         what, sp, (long long)sh->d[0], name);
    return DT_OK;
}

void dt_sp_layer_init(dt_layer *l, dt_block *b, bool enter, int sp, dt_shape *sh) {
    size_t whole = 1;
    for (int i = 0; i < sh->nd; i++) whole *= (size_t)sh->d[i];
    l->ops = enter ? &enter_ops : &leave_ops;
    l->sp = sp;
    l->in_dim = whole;
    l->rows = sh->d[0];
    sh->d[0] = enter ? sh->d[0] / sp : sh->d[0] * sp;
    sh->seq = enter;
    l->out_dim = enter ? whole / (size_t)sp : whole * (size_t)sp;
    if (!enter) whole = l->out_dim;
    /* one all-gather of the whole rows (backward entering, forward leaving): half an all-reduce's bytes */
    b->tp_bytes += 2 * (int64_t)whole;
}
