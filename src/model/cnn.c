/* The CNN: conv5x5(1->32, pad 2)-ReLU-pool-conv5x5(32->64, pad 2)-ReLU-pool-
 * fc(3136->1024)-ReLU-fc(1024->10), then softmax cross-entropy. Names as an
 * nn.Module with conv1, conv2, fc1, fc2 attributes. */
#include "blocks.h"

#include "dtrain/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* conv block: dims = {IC, H, W, OC, K, pad}; off = {weight, bias}.
 * saved: ReLU output (B, OC, H, W) then pool argmax (B, OC, H/2, W/2) as int32. */
static dt_conv2d_dims conv_dims(const dt_block *b, int B) {
    dt_conv2d_dims d = {B, b->dims[0], b->dims[1], b->dims[2], b->dims[3], b->dims[4],
                        b->dims[4], 1, b->dims[5]};
    return d;
}

static size_t conv_plane(const dt_block *b) { return (size_t)b->dims[3] * b->dims[1] * b->dims[2]; }

static size_t conv_saved(const dt_block *b, int B) {
    return (size_t)B * (conv_plane(b) + conv_plane(b) / 4);
}

static size_t conv_scratch(const dt_block *b, int B) {
    dt_conv2d_dims d = conv_dims(b, B);
    return dt_conv2d_scratch_floats(&d) + (size_t)B * conv_plane(b);
}

static void conv_forward(const dt_block *b, const float *P, const dt_batch *batch,
                         const float *in, float *out, float *saved, float *scratch) {
    dt_conv2d_dims d = conv_dims(b, batch->B);
    const float *x = in ? in : batch->x;
    float *act = saved;
    int32_t *argmax = (int32_t *)(saved + (size_t)batch->B * conv_plane(b));
    dt_conv2d_forward(act, scratch, x, P + b->off[0], P + b->off[1], &d);
    size_t n = (size_t)batch->B * conv_plane(b);
    dt_relu_forward(act, act, n);
    dt_maxpool2x2_forward(out, argmax, act, batch->B, d.OC, d.H, d.W);
}

static void conv_backward(const dt_block *b, const float *P, float *G, const dt_batch *batch,
                          const float *in, const float *out, const float *dout, float *din,
                          const float *saved, float *scratch) {
    dt_conv2d_dims d = conv_dims(b, batch->B);
    const float *x = in ? in : batch->x;
    size_t n = (size_t)batch->B * conv_plane(b);
    const float *act = saved;
    const int32_t *argmax = (const int32_t *)(saved + n);
    float *dact = scratch;
    float *cscratch = scratch + n;
    memset(dact, 0, n * sizeof(float));
    dt_maxpool2x2_backward(dact, dout, argmax, batch->B, d.OC, d.H, d.W);
    for (size_t i = 0; i < n; i++) dact[i] = act[i] > 0.0f ? dact[i] : 0.0f;
    dt_conv2d_backward(din, G + b->off[0], G + b->off[1], cscratch, dact, x, P + b->off[0], &d);
}

static const dt_block_ops conv_ops = {"conv_relu_pool", conv_saved, conv_scratch,
                                      conv_forward, conv_backward};

static void add_conv(dt_builder *bd, const char *prefix, int IC, int H, int W, int OC, int K,
                     int pad) {
    size_t in_dim = (size_t)IC * H * W, out_dim = (size_t)OC * (H / 2) * (W / 2);
    dt_block *b = dt_builder_block(bd, &conv_ops, prefix, in_dim, out_dim);
    if (!b) return;
    int dims[6] = {IC, H, W, OC, K, pad};
    memcpy(b->dims, dims, sizeof dims);
    char name[64];
    float bound = 1.0f / sqrtf((float)(IC * K * K)); /* PyTorch's nn.Conv2d default */
    snprintf(name, sizeof name, "%s.weight", prefix);
    dt_builder_param(bd, name, 4, (int64_t[]){OC, IC, K, K}, DT_INIT_UNIFORM, bound);
    snprintf(name, sizeof name, "%s.bias", prefix);
    dt_builder_param(bd, name, 1, (int64_t[]){OC}, DT_INIT_UNIFORM, bound);
    int64_t f = 2LL * IC * K * K * OC * H * W; /* stride 1, same padding */
    bd->m->flops_per_sample += (in_dim == 784 ? 2 : 3) * f; /* first conv: no input gradient */
}

dt_status dt_build_cnn(dt_builder *bd) {
    add_conv(bd, "conv1", 1, 28, 28, 32, 5, 2);
    add_conv(bd, "conv2", 32, 14, 14, 64, 5, 2);
    dt_add_linear(bd, "fc1", 64 * 7 * 7, 1024, true, true, DT_TP_NONE);
    dt_add_linear(bd, "fc2", 1024, 10, false, true, DT_TP_NONE);
    dt_add_xent(bd, 10, 1);
    return bd->st;
}
