/* The MLP: in -> hidden... (ReLU) -> classes, then softmax cross-entropy.
 * Tensor names fc1, fc2, ... as an nn.Module with attributes fc1..fcK would
 * have them. */
#include "blocks.h"

#include <stdio.h>

dt_status dt_build_mlp(dt_builder *bd) {
    const dt_model_cfg *c = &bd->m->cfg;
    int prev = c->in_dim;
    char name[16];
    for (int i = 0; i < c->n_hidden; i++) {
        snprintf(name, sizeof name, "fc%d", i + 1);
        dt_add_linear(bd, name, prev, c->hidden[i], true, true);
        prev = c->hidden[i];
    }
    snprintf(name, sizeof name, "fc%d", c->n_hidden + 1);
    dt_add_linear(bd, name, prev, c->n_classes, false, true);
    /* The first layer never needs its input gradient: 2*IC*OC fewer FLOPs. */
    bd->m->flops_per_sample -= 2LL * c->in_dim * (c->n_hidden ? c->hidden[0] : c->n_classes);
    dt_add_xent(bd, c->n_classes, 1);
    return bd->st;
}
