/* Batch norm (1d on (C) or (C, L), 2d on (C, H, W)) and dropout.
 *
 * Batch norm normalises with the batch's statistics in training and the
 * running ones in evaluation. The running mean and variance are tensors of the
 * arena (NAME.running_mean, NAME.running_var, as PyTorch's buffers), never
 * given a gradient, so the optimizers leave them as they are and checkpoints
 * carry them like weights. With "sync": true the batch statistics are summed
 * over the data-parallel group (SyncBatchNorm: -n 2 computes what -n 1 does);
 * without, each rank normalises with its own shard's, as PyTorch's DDP does,
 * and the running statistics are averaged over the group so replicas agree.
 * Cost per layer and step: 3 passes forward, 3 backward; synchronised, two
 * all-reduces of C + 1 and C floats forward and one of 2C backward.
 *
 * Dropout's mask for a sample is drawn from (seed, step, layer, the sample's
 * dataset index), so every layout and a resumed run draw the same masks; it is
 * regenerated in backward, nothing is kept. */
#include "layer.h"

#include "dtrain/nn.h"

#include <math.h>
#include <string.h>

static size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- batch norm: d = {C, S, sync}, f = {eps, momentum};
 * off = {weight, bias, running_mean, running_var}; saved mean, rstd (C each), count */

static size_t bn_saved(const dt_layer *l, int B) { return 2 * r16((size_t)l->d[0]) + 16; }
static size_t bn_scratch(const dt_layer *l, int B) { return 2 * r16(2 * (size_t)l->d[0] + 1); }

static void bn_stats(const dt_layer *l, const dt_lctx *c, const float *in, float *mean, float *rstd, float *count,
                     float *buf) {
    int B = c->batch->B, C = l->d[0], S = l->d[1];
    bool sync = l->d[2] && c->b->dp;
    dt_batchnorm_sum(buf, in, B, C, S);
    buf[C] = (float)B * (float)S;
    if (sync) dt_block_dp_allreduce(c->b, buf, (size_t)C + 1);
    *count = buf[C];
    for (int k = 0; k < C; k++) mean[k] = buf[k] / *count;
    dt_batchnorm_sqdev(buf, in, mean, B, C, S);
    if (sync) dt_block_dp_allreduce(c->b, buf, (size_t)C);
    for (int k = 0; k < C; k++) rstd[k] = 1.0f / sqrtf(buf[k] / *count + l->f[0]);
    if (c->batch->recompute) return;
    /* running statistics: PyTorch's update, the variance unbiased */
    float *rm = (float *)c->P + l->off[2], *rv = (float *)c->P + l->off[3], m = l->f[1];
    float unb = *count > 1 ? *count / (*count - 1) : 1.0f;
    for (int k = 0; k < C; k++) {
        rm[k] = (1 - m) * rm[k] + m * mean[k];
        rv[k] = (1 - m) * rv[k] + m * (buf[k] / *count) * unb;
    }
    if (!sync && c->b->dp) {
        memcpy(buf, rm, (size_t)C * sizeof(float));
        memcpy(buf + C, rv, (size_t)C * sizeof(float));
        dt_block_dp_allreduce(c->b, buf, 2 * (size_t)C);
        float inv = 1.0f / (float)dt_comm_size(c->b->dp);
        for (int k = 0; k < C; k++) {
            rm[k] = buf[k] * inv;
            rv[k] = buf[C + k] * inv;
        }
    }
}

static void bn_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                       float *scratch) {
    int C = l->d[0];
    float *mean = saved, *rstd = saved + r16((size_t)C), *count = rstd + r16((size_t)C);
    if (c->batch->eval) {
        const float *rm = c->P + l->off[2], *rv = c->P + l->off[3];
        for (int k = 0; k < C; k++) {
            mean[k] = rm[k];
            rstd[k] = 1.0f / sqrtf(rv[k] + l->f[0]);
        }
    } else {
        bn_stats(l, c, in, mean, rstd, count, scratch);
    }
    dt_batchnorm_forward(out, in, mean, rstd, c->P + l->off[0], c->P + l->off[1], c->batch->B, C, l->d[1]);
}

static void bn_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                        const float *dout, float *din, const float *saved, float *scratch) {
    int B = c->batch->B, C = l->d[0], S = l->d[1];
    const float *mean = saved, *rstd = saved + r16((size_t)C), *count = rstd + r16((size_t)C);
    float *sums = scratch;
    dt_batchnorm_bwd_sums(sums, dout, in, mean, rstd, B, C, S);
    if (l->d[2]) dt_block_dp_allreduce(c->b, sums, 2 * (size_t)C);
    dt_batchnorm_backward(din, c->G + l->off[0], c->G + l->off[1], dout, in, mean, rstd, c->P + l->off[0], sums,
                          (double)*count, B, C, S);
}

static const dt_layer_ops bn_ops = {"batchnorm", false, bn_saved, bn_scratch, bn_forward, bn_backward};

static dt_status bn_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out, bool two_d) {
    bool sync;
    dt_ls_float(s, "eps", DT_BATCHNORM_EPS, &l->f[0]);
    dt_ls_float(s, "momentum", 0.1f, &l->f[1]);
    dt_ls_bool(s, "sync", false, &sync);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (in->tokens || in->split || in->seq)
        return dt_ls_fail(s, "needs a whole float input (not tokens, not a tp shard, not a sequence part)");
    if (two_d && in->nd != 3) return dt_ls_fail(s, "needs a (channels, height, width) input");
    if (!two_d && in->nd > 2) return dt_ls_fail(s, "needs a (features) or (channels, length) input");
    if (!(l->f[0] > 0) || !(l->f[1] >= 0 && l->f[1] <= 1)) return dt_ls_fail(s, "'eps' must be > 0, 'momentum' in [0, 1]");
    int64_t C = in->d[0];
    l->d[0] = (int)C;
    l->d[1] = (int)(l->in_dim / (size_t)C);
    l->d[2] = sync;
    l->off[0] = dt_ls_param(s, "weight", 1, &C, DT_INIT_CONST, 1.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    l->off[1] = dt_ls_param(s, "bias", 1, &C, DT_INIT_CONST, 0.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    l->off[2] = dt_ls_param(s, "running_mean", 1, &C, DT_INIT_CONST, 0.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    l->off[3] = dt_ls_param(s, "running_var", 1, &C, DT_INIT_CONST, 1.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    dt_ls_buffers(s, 2);
    return dt_ls_status(s);
}

static dt_status bn1_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    return bn_setup(l, s, in, out, false);
}
static dt_status bn2_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    return bn_setup(l, s, in, out, true);
}

/* ---- dropout: f = {p}; d = {rows per sample (this rank's), D} -------------------------------------- */

static size_t none(const dt_layer *l, int B) { return 0; }

static uint64_t drop_seed(const dt_layer *l, const dt_batch *b) {
    return b->seed ^ ((uint64_t)b->step * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(l->index + 1) * 0xC2B2AE3D27D4EB4Full);
}

static bool drop_active(const dt_layer *l, const dt_batch *b) { return !b->eval && b->ids && l->f[0] > 0; }

/* Each row's key is its sample's dataset index times the rows per sample plus
 * its place in the sample. Under --sequence-parallel this rank holds the rows
 * [off, off + n) of the micro-batch's whole ones (seq_parallel.c): they are
 * walked in runs that stay inside one sample. */
static void drop_rows(const dt_layer *l, const dt_lctx *c, float *out, const float *in, bool fwd) {
    const dt_batch *b = c->batch;
    int64_t T = (int64_t)l->d[0] * (l->sp ? l->sp : 1), D = l->d[1], n = (int64_t)b->B * l->d[0];
    int64_t off = l->sp ? (int64_t)dt_sp_off(c->b, (size_t)(n * l->sp)) : 0;
    uint64_t seed = drop_seed(l, b);
    for (int64_t k = 0; k < n;) {
        int64_t g = off + k, i = g / T, pos = g % T, run = T - pos < n - k ? T - pos : n - k;
        uint64_t key = (uint64_t)b->ids[i] * (uint64_t)T + (uint64_t)pos;
        if (fwd) dt_dropout_forward(out + k * D, in + k * D, (int)run, (int)D, l->f[0], seed, key);
        else dt_dropout_backward(out + k * D, in + k * D, (int)run, (int)D, l->f[0], seed, key);
        k += run;
    }
}

static void drop_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                         float *scratch) {
    const dt_batch *b = c->batch;
    if (!drop_active(l, b)) {
        memcpy(out, in, (size_t)b->B * l->in_dim * sizeof(float));
        return;
    }
    drop_rows(l, c, out, in, true);
}

static void drop_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                          const float *dout, float *din, const float *saved, float *scratch) {
    const dt_batch *b = c->batch;
    if (!din) return;
    if (!drop_active(l, b)) {
        for (size_t k = 0; k < (size_t)b->B * l->in_dim; k++) din[k] += dout[k];
        return;
    }
    drop_rows(l, c, din, dout, false);
}

static const dt_layer_ops drop_ops = {"dropout", false, none, none, drop_forward, drop_backward};

static dt_status drop_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    dt_ls_float(s, "p", 0.1f, &l->f[0]);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (in->tokens) return dt_ls_fail(s, "takes floats, but its input is token ids");
    if (!(l->f[0] >= 0 && l->f[0] < 1)) return dt_ls_fail(s, "'p' must be in [0, 1)");
    l->d[1] = (int)in->d[in->nd - 1];
    l->d[0] = (int)(l->in_dim / (size_t)l->d[1]);
    l->sp = in->seq ? dt_ls_seq_parallel(s) : 0;
    return DT_OK;
}

const dt_layer_type dt_layer_batchnorm1d = {"batchnorm1d", &bn_ops, bn1_setup};
const dt_layer_type dt_layer_batchnorm2d = {"batchnorm2d", &bn_ops, bn2_setup};
const dt_layer_type dt_layer_dropout = {"dropout", &drop_ops, drop_setup};
