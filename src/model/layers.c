/* The leaf layer types a description may name (the containers are desc.c's). */
#include "layer.h"

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
