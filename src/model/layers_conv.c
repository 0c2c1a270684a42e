/* Leaf layers on images (C, H, W) and elementwise ones: conv2d (ReLU fused
 * when asked, as the CNN ran before descriptions), max-pool 2x2, ReLU, GELU.
 * FLOPs per sample of a training step: conv 2*IC*K*K*OC*OH*OW for each of
 * forward, weight gradient and input gradient (none for the first layer). */
#include "layer.h"

#include "dtrain/nn.h"

#include <math.h>
#include <string.h>

static size_t none(const dt_layer *l, int B) { return 0; }

/* ---- conv2d: d = {IC, H, W, OC, K, stride, pad, bias}; off = {weight, bias} -------- */

static dt_conv2d_dims cdims(const dt_layer *l, int B) {
    dt_conv2d_dims d = {B, l->d[0], l->d[1], l->d[2], l->d[3], l->d[4], l->d[4], l->d[5], l->d[6]};
    return d;
}

/* Scratch: the fused ReLU's masked gradient (backward), the kernel's, then under
 * bf16-emulated/fp16 the rounded copies of input, weight and output gradient
 * (bf16 native: the kernel is dt_conv2d_*_bf16, which rounds while packing). */
static bool conv_native(const dt_layer *l) { return l->lowp == DT_LOWP_BF16_NATIVE; }
static size_t conv_base(const dt_layer *l, int B) {
    dt_conv2d_dims d = cdims(l, B);
    size_t k = conv_native(l) ? dt_conv2d_bf16_scratch_floats(&d) : dt_conv2d_scratch_floats(&d);
    return k + (l->ops->uses_out ? (size_t)B * l->out_dim : 0);
}
static size_t conv_wsize(const dt_layer *l) { return (size_t)l->d[3] * l->d[0] * l->d[4] * l->d[4]; }
static size_t conv_scratch(const dt_layer *l, int B) {
    if (conv_native(l)) return conv_base(l, B);
    return conv_base(l, B) + dt_lowp_floats(l, (size_t)B * l->in_dim, conv_wsize(l), (size_t)B * l->out_dim);
}

static void conv_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                         float *scratch) {
    dt_conv2d_dims d = cdims(l, c->batch->B);
    const float *b = l->d[7] ? c->P + l->off[1] : NULL;
    if (conv_native(l)) {
        dt_conv2d_forward_bf16(out, scratch, in, c->P + l->off[0], b, &d);
    } else {
        float *at = scratch + conv_base(l, c->batch->B);
        const float *x = dt_lowp_operand(l, &at, in, (size_t)c->batch->B * l->in_dim);
        const float *w = dt_lowp_operand(l, &at, c->P + l->off[0], conv_wsize(l));
        dt_conv2d_forward(out, scratch, x, w, b, &d);
    }
    if (l->ops->uses_out) dt_relu_forward(out, out, (size_t)c->batch->B * l->out_dim);
}

static void conv_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                          const float *dout, float *din, const float *saved, float *scratch) {
    dt_conv2d_dims d = cdims(l, c->batch->B);
    const float *dpre = dout;
    float *cscratch = scratch;
    if (l->ops->uses_out) {
        size_t n = (size_t)c->batch->B * l->out_dim;
        dt_relu_mask(scratch, dout, out, n);
        dpre = scratch;
        cscratch = scratch + n;
    }
    float *dw = c->G + l->off[0], *db = l->d[7] ? c->G + l->off[1] : NULL;
    if (conv_native(l)) {
        dt_conv2d_backward_bf16(din, dw, db, cscratch, dpre, in, c->P + l->off[0], &d);
        return;
    }
    float *at = scratch + conv_base(l, c->batch->B);
    const float *x = dt_lowp_operand(l, &at, in, (size_t)c->batch->B * l->in_dim);
    const float *w = dt_lowp_operand(l, &at, c->P + l->off[0], conv_wsize(l));
    dpre = dt_lowp_operand(l, &at, dpre, (size_t)c->batch->B * l->out_dim);
    dt_conv2d_backward(din, dw, db, cscratch, dpre, x, w, &d);
}

static const dt_layer_ops conv_ops = {"conv2d", false, none, conv_scratch, conv_forward, conv_backward};
static const dt_layer_ops conv_relu_ops = {"conv2d", true, none, conv_scratch, conv_forward, conv_backward};

static dt_status conv_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    static const char *acts[] = {"none", "relu", NULL};
    int64_t OC, K, stride, pad;
    bool bias;
    int act;
    dt_ls_int(s, "out", DT_LS_REQUIRED, 1, 1 << 16, &OC);
    dt_ls_int(s, "kernel", DT_LS_REQUIRED, 1, 64, &K);
    dt_ls_int(s, "stride", 1, 1, 64, &stride);
    dt_ls_int(s, "pad", 0, 0, 64, &pad);
    dt_ls_bool(s, "bias", true, &bias);
    dt_ls_word(s, "activation", acts, 0, &act);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (in->tokens || in->split || in->nd != 3)
        return dt_ls_fail(s, "needs a (channels, height, width) input, got %d dimension(s)", in->nd);
    int64_t IC = in->d[0], H = in->d[1], W = in->d[2];
    int64_t OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
    if (H + 2 * pad < K || W + 2 * pad < K)
        return dt_ls_fail(s, "kernel %lld is larger than its padded %lldx%lld input", (long long)K, (long long)H, (long long)W);
    int v[8] = {(int)IC, (int)H, (int)W, (int)OC, (int)K, (int)stride, (int)pad, bias};
    memcpy(l->d, v, sizeof v);
    l->ops = act ? &conv_relu_ops : &conv_ops;
    float bound = 1.0f / sqrtf((float)(IC * K * K)); /* PyTorch's nn.Conv2d default */
    int64_t ws[4] = {OC, IC, K, K};
    l->off[0] = dt_ls_param(s, "weight", 4, ws, DT_INIT_UNIFORM, bound, false, DT_SPLIT_NONE, 0, NULL, NULL);
    if (bias) l->off[1] = dt_ls_param(s, "bias", 1, &OC, DT_INIT_UNIFORM, bound, false, DT_SPLIT_NONE, 0, NULL, NULL);
    dt_ls_flops(s, (l->reads_batch ? 4 : 6) * IC * K * K * OC * OH * OW);
    *out = (dt_shape){.nd = 3, .d = {OC, OH, OW}};
    return dt_ls_status(s);
}

/* ---- max-pool 2x2 stride 2: d = {C, H, W}; saved argmax (int32) --------------------- */

static size_t pool_saved(const dt_layer *l, int B) { return (size_t)B * l->out_dim; }

static void pool_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                         float *scratch) {
    dt_maxpool2x2_forward(out, (int32_t *)saved, in, c->batch->B, l->d[0], l->d[1], l->d[2]);
}

static void pool_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                          const float *dout, float *din, const float *saved, float *scratch) {
    if (din) dt_maxpool2x2_backward(din, dout, (const int32_t *)saved, c->batch->B, l->d[0], l->d[1], l->d[2]);
}

static const dt_layer_ops pool_ops = {"maxpool2d", false, pool_saved, none, pool_forward, pool_backward};

static dt_status pool_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    int64_t K, stride;
    dt_ls_int(s, "kernel", 2, 1, 64, &K);
    dt_ls_int(s, "stride", 2, 1, 64, &stride);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (K != 2 || stride != 2) return dt_ls_fail(s, "only kernel 2, stride 2 is built");
    if (in->tokens || in->split || in->nd != 3 || in->d[1] % 2 || in->d[2] % 2)
        return dt_ls_fail(s, "needs a (channels, height, width) input with even height and width");
    l->d[0] = (int)in->d[0];
    l->d[1] = (int)in->d[1];
    l->d[2] = (int)in->d[2];
    *out = (dt_shape){.nd = 3, .d = {in->d[0], in->d[1] / 2, in->d[2] / 2}};
    return DT_OK;
}

/* ---- elementwise: relu (backward on its output), gelu (on its input) -------------- */

static size_t n_of(const dt_layer *l, const dt_lctx *c) { return (size_t)c->batch->B * l->in_dim; }

static void relu_fwd(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved, float *scratch) {
    dt_relu_forward(out, in, n_of(l, c));
}
static void relu_bwd(const dt_layer *l, const dt_lctx *c, const float *in, const float *out, const float *dout,
                     float *din, const float *saved, float *scratch) {
    if (din) dt_relu_backward(din, dout, out, n_of(l, c));
}
static void gelu_fwd(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved, float *scratch) {
    dt_gelu_forward(out, in, n_of(l, c));
}
static void gelu_bwd(const dt_layer *l, const dt_lctx *c, const float *in, const float *out, const float *dout,
                     float *din, const float *saved, float *scratch) {
    if (din) dt_gelu_backward(din, dout, in, n_of(l, c));
}

static dt_status elementwise_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    if (in->tokens) return dt_ls_fail(s, "takes floats, but its input is token ids");
    return DT_OK;
}

static const dt_layer_ops relu_ops = {"relu", true, none, none, relu_fwd, relu_bwd};
static const dt_layer_ops gelu_ops = {"gelu", false, none, none, gelu_fwd, gelu_bwd};

const dt_layer_type dt_layer_conv2d = {"conv2d", &conv_ops, conv_setup};
const dt_layer_type dt_layer_maxpool2d = {"maxpool2d", &pool_ops, pool_setup};
const dt_layer_type dt_layer_relu = {"relu", &relu_ops, elementwise_setup};
const dt_layer_type dt_layer_gelu = {"gelu", &gelu_ops, elementwise_setup};
