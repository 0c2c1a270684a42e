/* A model from its configuration: the kinds' names, defaults and checks, and
 * dt_model_create, which hands a builder to the kind's file (mlp.c, cnn.c,
 * gpt.c) and then allocates the arenas the blocks were laid out in. The block
 * machinery the builders use is in model.c. */
#include "blocks.h"

#include <string.h>

static const char *kind_names[DT_MODEL_COUNT] = {"mlp", "cnn", "gpt"};

const char *dt_model_kind_name(dt_model_kind k) {
    return (unsigned)k < DT_MODEL_COUNT ? kind_names[k] : "unknown";
}

dt_status dt_model_kind_parse(const char *s, dt_model_kind *out) {
    for (int k = 0; k < DT_MODEL_COUNT; k++)
        if (s && strcmp(s, kind_names[k]) == 0) {
            *out = (dt_model_kind)k;
            return DT_OK;
        }
    return dt_errorf(DT_ERR_INVALID, "unknown model '%s': choose mlp, cnn or gpt", s ? s : "");
}

void dt_model_cfg_default(dt_model_cfg *c, dt_model_kind kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->in_dim = 784;
    c->n_hidden = 2;
    c->hidden[0] = c->hidden[1] = 1024;
    c->n_classes = 10;
    c->img_c = 1;
    c->img_h = c->img_w = 28;
    c->n_layer = 4;
    c->n_head = 4;
    c->n_embd = 256;
    c->block_size = 128;
    c->vocab_size = 256;
}

static dt_status tp_check(const dt_model_cfg *c) {
    int T = c->tp_size > 1 ? c->tp_size : 1;
    if (T == 1) return DT_OK;
    if (c->tp_rank < 0 || c->tp_rank >= T) return dt_errorf(DT_ERR_INVALID, "tp rank %d of %d", c->tp_rank, T);
    if (c->kind == DT_MODEL_CNN) return dt_errorf(DT_ERR_INVALID, "--tp supports the mlp and the gpt, not the cnn");
    if (c->kind == DT_MODEL_GPT && c->n_head % T)
        return dt_errorf(DT_ERR_INVALID, "--tp %d must divide --n-head %d (heads are split across the tp group)", T, c->n_head);
    if (c->kind == DT_MODEL_MLP) {
        if (c->n_hidden < 1) return dt_errorf(DT_ERR_INVALID, "--tp needs at least one hidden layer");
        for (int i = 0; i < c->n_hidden; i++)
            if (i % 2 == 0 && c->hidden[i] % T)
                return dt_errorf(DT_ERR_INVALID, "--tp %d must divide the hidden size %d (it is split across the tp group)", T, c->hidden[i]);
    }
    return DT_OK;
}

dt_status dt_model_cfg_check(const dt_model_cfg *c) {
    dt_status tst = tp_check(c);
    if (tst) return tst;
    switch (c->kind) {
    case DT_MODEL_MLP:
        if (c->in_dim < 1 || c->in_dim > (1 << 24))
            return dt_errorf(DT_ERR_INVALID, "mlp input size %d is out of range [1, 16777216]", c->in_dim);
        if (c->n_hidden < 0 || c->n_hidden > DT_MLP_MAX_HIDDEN)
            return dt_errorf(DT_ERR_INVALID, "--hidden: 0 to %d hidden layers, got %d", DT_MLP_MAX_HIDDEN, c->n_hidden);
        for (int i = 0; i < c->n_hidden; i++)
            if (c->hidden[i] < 1 || c->hidden[i] > 65536)
                return dt_errorf(DT_ERR_INVALID, "--hidden: layer size %d is out of range [1, 65536]", c->hidden[i]);
        if (c->n_classes < 2 || c->n_classes > 65536)
            return dt_errorf(DT_ERR_INVALID, "number of classes %d is out of range [2, 65536]", c->n_classes);
        return DT_OK;
    case DT_MODEL_CNN:
        if (c->img_c != 1 || c->img_h != 28 || c->img_w != 28 || c->n_classes != 10)
            return dt_errorf(DT_ERR_INVALID, "the cnn is defined for 1x28x28 inputs and 10 classes");
        return DT_OK;
    case DT_MODEL_GPT:
        if (c->n_layer < 1 || c->n_layer > 256)
            return dt_errorf(DT_ERR_INVALID, "--n-layer %d is out of range [1, 256]", c->n_layer);
        if (c->n_head < 1 || c->n_head > 256)
            return dt_errorf(DT_ERR_INVALID, "--n-head %d is out of range [1, 256]", c->n_head);
        if (c->n_embd < 1 || c->n_embd > 16384)
            return dt_errorf(DT_ERR_INVALID, "--n-embd %d is out of range [1, 16384]", c->n_embd);
        if (c->n_embd % c->n_head)
            return dt_errorf(DT_ERR_INVALID, "--n-embd %d must be divisible by --n-head %d", c->n_embd, c->n_head);
        if (c->block_size < 1 || c->block_size > 8192)
            return dt_errorf(DT_ERR_INVALID, "--block-size %d is out of range [1, 8192]", c->block_size);
        if (c->vocab_size != 256)
            return dt_errorf(DT_ERR_INVALID, "the gpt is byte-level: vocab_size must be 256, got %d", c->vocab_size);
        return DT_OK;
    default:
        return dt_errorf(DT_ERR_INVALID, "unknown model kind %d", (int)c->kind);
    }
}

dt_status dt_model_create(dt_model **out, const dt_model_cfg *cfg) {
    *out = NULL;
    dt_status st = dt_model_cfg_check(cfg);
    if (st) return st;
    dt_model *m = dt_calloc(1, sizeof *m);
    if (!m) return dt_errorf(DT_ERR_NOMEM, "out of memory creating the model");
    m->cfg = *cfg;
    m->loss_terms = 1;
    dt_builder bd = {.m = m};
    switch (cfg->kind) {
    case DT_MODEL_MLP: st = dt_build_mlp(&bd); break;
    case DT_MODEL_CNN: st = dt_build_cnn(&bd); break;
    case DT_MODEL_GPT: st = dt_build_gpt(&bd); break;
    default: st = DT_ERR_INVALID; break;
    }
    if (!st) st = bd.st;
    if (st) goto fail;
    m->w = dt_alloc_floats(m->n);
    m->g = dt_alloc_floats(m->n);
    if (!m->w || !m->g) {
        st = dt_errorf(DT_ERR_NOMEM, "cannot allocate %zu parameters", m->n);
        goto fail;
    }
    *out = m;
    return DT_OK;
fail:
    dt_model_destroy(m);
    return st;
}
