/* Running a block's layer tree (layer.h): a sequential container keeps every
 * child's output but the last (it is the next child's input, which backward
 * needs); a residual runs its children as a sequence and adds its input.
 *
 * Memory, for B samples: saved = the outputs of all but each sequence's last
 * child, plus every leaf's own saved floats (and a residual's inner output when
 * its last layer's backward reads its own output, since the sum overwrites it);
 * scratch = the largest leaf scratch, plus two ping-pong buffers per sequence
 * level for the gradients between children. */
#include "layer.h"

#include <string.h>

static size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The residual's inner output may go straight into its output unless the last
 * inner layer reads its own output in backward. */
static bool residual_keeps(const dt_layer *L, int i) {
    int last = -1;
    for (int c = L[i].first; c >= 0; c = L[c].next) last = c;
    return last >= 0 && L[last].container == DT_LAYER_LEAF && L[last].ops->uses_out;
}

size_t dt_layer_saved_floats(const dt_layer *L, int i, int B) {
    const dt_layer *l = &L[i];
    if (l->container == DT_LAYER_LEAF) return r16(l->ops->saved(l, B));
    size_t n = 0;
    for (int c = l->first; c >= 0; c = L[c].next) {
        if (L[c].next >= 0) n += r16((size_t)B * L[c].out_dim);
        n += dt_layer_saved_floats(L, c, B);
    }
    if (l->container == DT_LAYER_RESIDUAL && residual_keeps(L, i)) n += r16((size_t)B * l->out_dim);
    return n;
}

size_t dt_layer_scratch_floats(const dt_layer *L, int i, int B) {
    const dt_layer *l = &L[i];
    if (l->container == DT_LAYER_LEAF) return r16(l->ops->scratch(l, B));
    size_t maxdim = 0, inner = 0;
    for (int c = l->first; c >= 0; c = L[c].next) {
        if (L[c].in_dim > maxdim) maxdim = L[c].in_dim;
        size_t s = dt_layer_scratch_floats(L, c, B);
        if (s > inner) inner = s;
    }
    return 2 * r16((size_t)B * maxdim) + inner;
}

static void forward(const dt_layer *L, int i, const dt_lctx *c, const float *in, float *out, float *saved,
                    float *scratch);

static void seq_forward(const dt_layer *L, int i, const dt_lctx *c, const float *in, float *out, float *saved,
                        float *scratch) {
    int B = c->batch->B;
    const float *x = in;
    for (int k = L[i].first; k >= 0; k = L[k].next) {
        float *y = out;
        if (L[k].next >= 0) {
            y = saved;
            saved += r16((size_t)B * L[k].out_dim);
        }
        forward(L, k, c, x, y, saved, scratch);
        saved += dt_layer_saved_floats(L, k, B);
        x = y;
    }
}

static void forward(const dt_layer *L, int i, const dt_lctx *c, const float *in, float *out, float *saved,
                    float *scratch) {
    const dt_layer *l = &L[i];
    if (l->container == DT_LAYER_LEAF) {
        l->ops->forward(l, c, in, out, saved, scratch);
        return;
    }
    if (l->container == DT_LAYER_SEQ) {
        seq_forward(L, i, c, in, out, saved, scratch);
        return;
    }
    size_t n = (size_t)c->batch->B * l->out_dim;
    float *y = out;
    if (residual_keeps(L, i)) y = saved + dt_layer_saved_floats(L, i, c->batch->B) - r16(n);
    seq_forward(L, i, c, in, y, saved, scratch);
    for (size_t k = 0; k < n; k++) out[k] = y[k] + in[k];
}

static void backward(const dt_layer *L, int i, const dt_lctx *c, const float *in, const float *out,
                     const float *dout, float *din, const float *saved, float *scratch);

/* The children in reverse: each child's input gradient goes into a zeroed
 * ping-pong buffer, the first child's into din. */
static void seq_backward(const dt_layer *L, int i, const dt_lctx *c, const float *in, const float *out,
                         const float *dout, float *din, const float *saved, float *scratch) {
    int B = c->batch->B;
    int kids[DT_LAYER_MAX_CHILDREN], n = 0;
    const float *outs[DT_LAYER_MAX_CHILDREN], *saves[DT_LAYER_MAX_CHILDREN];
    const float *s = saved;
    for (int k = L[i].first; k >= 0; k = L[k].next) {
        DT_ASSERT(n < DT_LAYER_MAX_CHILDREN); /* desc.c refuses more */
        kids[n] = k;
        outs[n] = out;
        if (L[k].next >= 0) {
            outs[n] = s;
            s += r16((size_t)B * L[k].out_dim);
        }
        saves[n++] = s;
        s += dt_layer_saved_floats(L, k, B);
    }
    size_t maxdim = 0;
    for (int k = 0; k < n; k++)
        if (L[kids[k]].in_dim > maxdim) maxdim = L[kids[k]].in_dim;
    float *pp[2] = {scratch, scratch + r16((size_t)B * maxdim)};
    float *inner = scratch + 2 * r16((size_t)B * maxdim);
    const float *d = dout;
    int which = 0;
    for (int k = n - 1; k >= 0; k--) {
        const dt_layer *l = &L[kids[k]];
        float *dk = din;
        if (k > 0) {
            dk = pp[which];
            which ^= 1;
            memset(dk, 0, (size_t)B * l->in_dim * sizeof(float));
        }
        backward(L, kids[k], c, k > 0 ? outs[k - 1] : in, outs[k], d, dk, saves[k], inner);
        d = dk;
    }
}

static void backward(const dt_layer *L, int i, const dt_lctx *c, const float *in, const float *out,
                     const float *dout, float *din, const float *saved, float *scratch) {
    const dt_layer *l = &L[i];
    if (l->container == DT_LAYER_LEAF) {
        l->ops->backward(l, c, in, out, dout, din, saved, scratch);
        return;
    }
    if (l->container == DT_LAYER_SEQ) {
        seq_backward(L, i, c, in, out, dout, din, saved, scratch);
        return;
    }
    size_t n = (size_t)c->batch->B * l->out_dim;
    const float *y = out;
    if (residual_keeps(L, i)) y = saved + dt_layer_saved_floats(L, i, c->batch->B) - r16(n);
    if (din)
        for (size_t k = 0; k < n; k++) din[k] += dout[k];
    seq_backward(L, i, c, in, y, dout, din, saved, scratch);
}

/* ---- the block ---------------------------------------------------------------- */

static size_t blk_saved(const dt_block *b, int B) { return dt_layer_saved_floats(b->layers, b->root, B); }
static size_t blk_scratch(const dt_block *b, int B) { return dt_layer_scratch_floats(b->layers, b->root, B); }

static void blk_forward(const dt_block *b, const float *P, const dt_batch *batch, const float *in, float *out,
                        float *saved, float *scratch) {
    dt_lctx c = {.b = b, .P = P, .batch = batch};
    forward(b->layers, b->root, &c, in ? in : batch->x, out, saved, scratch);
}

static void blk_backward(const dt_block *b, const float *P, float *G, const dt_batch *batch, const float *in,
                         const float *out, const float *dout, float *din, const float *saved, float *scratch) {
    dt_lctx c = {.b = b, .P = P, .G = G, .batch = batch};
    backward(b->layers, b->root, &c, in ? in : batch->x, out, dout, din, saved, scratch);
}

const dt_block_ops dt_block_layers_ops = {"layers", blk_saved, blk_scratch, blk_forward, blk_backward};
