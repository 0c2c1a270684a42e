/* libFuzzer harness for the model-description compiler (src/model/desc.c,
 * expr.c and the layers' setups): the input is a description's JSON text,
 * compiled at a tensor-parallel size and rank drawn from its first byte. A
 * refusal must be a status with a message; a success must give a model whose
 * blocks chain (each block's input is the previous one's output), whose layer
 * trees are well formed and whose tensors lie inside the arena. The collectives
 * the layers call at run time are never reached (nothing runs forward), so
 * they are stubs here; so is the table of shipped descriptions. Built by
 * tests/fuzz/run.sh. */
#include "model/blocks.h"
#include "model/layer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

const char *dt_model_builtin(const char *name) { return NULL; }
dt_status dt_allreduce(dt_comm *c, float *buf, size_t n, dt_reduce_op op, dt_algo algo) { return DT_OK; }
dt_status dt_allgather(dt_comm *c, float *buf, size_t count, dt_algo algo) { return DT_OK; }
dt_status dt_reduce_scatter(dt_comm *c, float *buf, size_t count, dt_reduce_op op, dt_algo algo) { return DT_OK; }
int dt_comm_size(const dt_comm *c) { return 1; }
int dt_comm_rank(const dt_comm *c) { return 0; }
size_t dt_chunk_off(size_t count, int size, int r) { return 0; }

static void fail(const char *what) {
    fprintf(stderr, "fuzz_desc: invariant broken: %s\n", what);
    abort();
}

static void check_tree(const dt_model *m, int i, int depth) {
    if (i < 0 || i >= m->n_layers || depth > 64) fail("layer index out of range");
    const dt_layer *l = &m->layers[i];
    if (l->container == DT_LAYER_LEAF) {
        if (!l->ops) fail("leaf without ops");
        return;
    }
    for (int c = l->first; c >= 0; c = m->layers[c].next) check_tree(m, c, depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    dt_model *m = calloc(1, sizeof *m);
    m->cfg.tp_size = 1 + data[0] % 3;
    m->cfg.tp_rank = (data[0] / 3) % m->cfg.tp_size;
    m->loss_terms = 1;
    dt_builder bd = {.m = m};
    dt_status st = dt_desc_build(&bd, text, "fuzz.json", NULL);
    if (st) {
        if (!dt_error_msg()[0]) fail("a refusal without a message");
    } else {
        if (m->n_blocks < 2 || !m->blocks[m->n_blocks - 1].is_loss) fail("no loss block");
        for (int b = 0; b < m->n_blocks; b++) {
            const dt_block *k = &m->blocks[b];
            if (b > 0 && k->in_dim != m->blocks[b - 1].out_dim) fail("blocks do not chain");
            if (!k->is_loss) check_tree(m, k->root, 0);
            for (int t = 0; t < k->n_tensors; t++)
                if (k->off[t] >= m->n) fail("tensor outside the arena");
        }
        for (int p = 0; p < m->n_params; p++)
            if (m->params[p].offset + m->params[p].numel > m->n) fail("tensor outside the arena");
    }
    dt_model_destroy(m);
    free(text);
    return 0;
}
