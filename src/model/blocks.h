/* Private: the builder calls (model.c) that lay blocks and tensors out in the
 * arena, used by the description compiler (desc.c) and the layers. */
#ifndef DT_MODEL_BLOCKS_H
#define DT_MODEL_BLOCKS_H

#include "dtrain/model.h"

/* Builder state: blocks and parameter tensors are appended in order. */
typedef struct dt_builder {
    dt_model *m;
    int cap_blocks, cap_params;
    dt_status st;
} dt_builder;

dt_block *dt_builder_block(dt_builder *bd, const dt_block_ops *ops, const char *name,
                           size_t in_dim, size_t out_dim);
/* Adds a tensor owned by the last block; records its offset in the block's off[]
 * table and returns the arena offset. */
size_t dt_builder_param(dt_builder *bd, const char *name, int ndim, const int64_t *shape,
                        int init, float init_scale);
/* A tensor-parallel shard of a logical tensor of shape lshape (see dt_param). */
size_t dt_builder_param_tp(dt_builder *bd, const char *name, int ndim, const int64_t *lshape,
                           int init, float init_scale, int split, int nparts, const int64_t *pstart,
                           const int64_t *plen);
/* Records a tensor the last block uses but another block owns (tied weights). */
void dt_builder_use(dt_builder *bd, size_t offset);

struct dt_vars;
/* Builds the blocks and tensors of the description `text` (named `what` in
 * messages), its variables overridden by `over` (NULL: none). desc.c. */
dt_status dt_desc_build(dt_builder *bd, const char *text, const char *what, const struct dt_vars *over);
/* The text of a built-in description ("mlp", "cnn", "gpt"), NULL when none. */
const char *dt_model_builtin(const char *name);

extern const dt_block_ops dt_block_xent_ops;        /* dims: V (classes), terms per sample */

/* Megatron's two halves: a column-parallel linear holds OC/tp output features
 * (its input is replicated; its input gradient is all-reduced: f), a row-parallel
 * one holds IC/tp input features (its partial outputs are all-reduced before
 * the bias: g). */
enum { DT_TP_NONE, DT_TP_COLUMN, DT_TP_ROW };
/* Sums buf over the block's data-parallel group (dt_model_set_dp; no-op without one). */
void dt_block_dp_allreduce(const dt_block *b, float *buf, size_t n);
/* All-reduces buf over the block's tp group (no-op without one), recording a failure. */
void dt_block_tp_allreduce(const dt_block *b, float *buf, size_t n);
/* Softmax cross-entropy over V classes, `terms` per sample (in: (B, terms*V)). */
void dt_add_xent(dt_builder *bd, int V, int terms);
/* Mean squared error against batch->y, D floats per sample. */
void dt_add_mse(dt_builder *bd, int D);

#endif
