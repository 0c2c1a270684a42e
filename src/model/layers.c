/* The leaf layer types a description may name (the containers are desc.c's). */
#include "layer.h"

#include "dtrain/nn.h"

#include <stdio.h>
#include <string.h>

static const dt_layer_type *const types[] = {
    &dt_layer_linear, &dt_layer_conv2d, &dt_layer_maxpool2d, &dt_layer_flatten, &dt_layer_relu, &dt_layer_gelu,
    &dt_layer_layernorm, &dt_layer_embedding, &dt_layer_pos_embedding, &dt_layer_attention, &dt_layer_silu,
    &dt_layer_tanh, &dt_layer_rmsnorm, &dt_layer_avgpool2d, &dt_layer_global_avgpool, &dt_layer_swiglu,
    &dt_layer_batchnorm1d, &dt_layer_batchnorm2d, &dt_layer_dropout,
};
#define N_TYPES (sizeof types / sizeof types[0])

const dt_layer_type *dt_layer_find(const char *type) {
    for (size_t i = 0; i < N_TYPES; i++)
        if (strcmp(types[i]->name, type) == 0) return types[i];
    return NULL;
}

void dt_layer_names(char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_TYPES && k < n; i++) {
        int w = snprintf(buf + k, n - k, "%s%s", i ? ", " : "", types[i]->name);
        if (w < 0) break;
        k += (size_t)w;
    }
}

const float *dt_lowp_operand(const dt_layer *l, float **at, const float *x, size_t n) {
    if (!l->lowp) return x;
    float *copy = *at;
    if (l->lowp == DT_LOWP_FP16) dt_round_fp16(copy, x, n);
    else dt_round_bf16(copy, x, n);
    *at += n;
    return copy;
}

size_t dt_lin_floats(const dt_layer *l, int64_t N, int IC, int OC) {
    if (l->lowp == DT_LOWP_BF16_NATIVE) return dt_linear_bf16_scratch_floats((int)N, IC, OC);
    return dt_lowp_floats(l, (size_t)N * IC, (size_t)OC * IC, (size_t)N * OC);
}

void dt_lin_forward(const dt_layer *l, float *out, const float *in, const float *w, const float *b, int N, int IC,
                    int OC, float *at) {
    if (l->lowp == DT_LOWP_BF16_NATIVE) {
        dt_linear_forward_bf16(out, in, w, b, N, IC, OC, at);
        return;
    }
    const float *x = dt_lowp_operand(l, &at, in, (size_t)N * IC);
    dt_linear_forward(out, x, dt_lowp_operand(l, &at, w, (size_t)OC * IC), b, N, IC, OC);
}

void dt_lin_backward(const dt_layer *l, float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int N, int IC, int OC, float *at) {
    if (l->lowp == DT_LOWP_BF16_NATIVE) {
        dt_linear_backward_bf16(din, dw, db, dout, in, w, N, IC, OC, at);
        return;
    }
    const float *x = dt_lowp_operand(l, &at, in, (size_t)N * IC), *wr = dt_lowp_operand(l, &at, w, (size_t)OC * IC);
    dt_linear_backward(din, dw, db, dt_lowp_operand(l, &at, dout, (size_t)N * OC), x, wr, N, IC, OC);
}
