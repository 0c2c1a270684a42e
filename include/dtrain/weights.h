/* dtrain weights files: a model's parameters as a safetensors file whose
 * tensor names, shapes and layouts are PyTorch's (nanoGPT's for the GPT), so
 * `safetensors.torch.load_file` + `load_state_dict` take them as they are.
 * The model config travels in __metadata__ (for the GPT with nanoGPT's keys
 * n_layer, n_head, n_embd, block_size, vocab_size). The GPT's LM head is tied
 * to transformer.wte.weight and stored once, as safetensors requires. */
#ifndef DTRAIN_WEIGHTS_H
#define DTRAIN_WEIGHTS_H

#include "dtrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes m->w atomically to path. extra: n_extra key/value pairs of metadata
 * (may be NULL). */
dt_status dt_weights_save(const dt_model *m, const char *path, int n_extra,
                          const char *const *extra_kv);
/* Reads only the metadata and fills cfg (DT_ERR_FORMAT when the file does not
 * say which model it holds). */
dt_status dt_weights_read_cfg(const char *path, dt_model_cfg *cfg);
/* Loads every parameter of m from path. Errors (DT_ERR_SHAPE) when a tensor is
 * missing, has another shape, or the file holds tensors m does not have, or the
 * metadata names another model; m is unchanged on error. */
dt_status dt_weights_load(dt_model *m, const char *path);
/* Writes the metadata pairs for m's config into kv (2*max_pairs strings,
 * static storage in buf of buflen bytes); returns the number of pairs. */
int dt_weights_cfg_meta(const dt_model_cfg *c, const char **kv, int max_pairs, char *buf,
                        size_t buflen);
/* Parses metadata (key -> value lookup) back into a config. */
dt_status dt_weights_cfg_from_meta(const char *(*get)(void *ctx, const char *key), void *ctx,
                                   const char *what, dt_model_cfg *cfg);

#ifdef __cplusplus
}
#endif
#endif
