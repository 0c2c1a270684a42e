/* The MLP: in -> hidden... (ReLU) -> classes, then softmax cross-entropy.
 * Tensor names fc1, fc2, ... as an nn.Module with attributes fc1..fcK would
 * have them. */
#include "blocks.h"

#include <stdio.h>

dt_status dt_build_mlp(dt_builder *bd) {
    const dt_model_cfg *c = &bd->m->cfg;
    int prev = c->in_dim;
    char name[16];
    /* Tensor parallelism pairs layers Megatron-style: (column, row), (column,
     * row), ...; an unpaired last layer stays replicated. */
    int n_layers = c->n_hidden + 1;
    for (int i = 0; i < n_layers; i++) {
        int mode = i % 2 == 0 ? (i + 1 < n_layers ? DT_TP_COLUMN : DT_TP_NONE) : DT_TP_ROW;
        int out = i < c->n_hidden ? c->hidden[i] : c->n_classes;
        snprintf(name, sizeof name, "fc%d", i + 1);
        dt_add_linear(bd, name, prev, out, i < c->n_hidden, true, mode);
        prev = out;
    }
    /* The first layer never needs its input gradient: 2*IC*OC fewer FLOPs. */
    bd->m->flops_per_sample -= 2LL * c->in_dim * (c->n_hidden ? c->hidden[0] : c->n_classes);
    dt_add_xent(bd, c->n_classes, 1);
    return bd->st;
}
