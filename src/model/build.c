/* A model from its configuration: the kinds' names, defaults and checks, and
 * dt_model_create, which compiles the model's description (a shipped one,
 * models/NAME.json, with the size flags as its variables, or the user's file;
 * desc.c) and then allocates the arenas the blocks were laid out in. The block
 * machinery is in model.c, the layers in layers_*.c. */
#include "blocks.h"

#include "expr.h"
#include "layer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_names[DT_MODEL_COUNT] = {"mlp", "cnn", "gpt", "file"};

const char *dt_model_kind_name(dt_model_kind k) {
    return (unsigned)k < DT_MODEL_COUNT ? kind_names[k] : "unknown";
}

dt_status dt_model_kind_parse(const char *s, dt_model_kind *out) {
    for (int k = 0; k < DT_MODEL_FILE; k++)
        if (s && strcmp(s, kind_names[k]) == 0) {
            *out = (dt_model_kind)k;
            return DT_OK;
        }
    return dt_errorf(DT_ERR_INVALID, "unknown model '%s': choose mlp, cnn or gpt", s ? s : "");
}

dt_status dt_model_select(dt_model_cfg *c, const char *s) {
    dt_model_kind k = DT_MODEL_MLP;
    if (s && dt_model_kind_parse(s, &k) == DT_OK) {
        c->kind = k;
        c->file[0] = 0;
        return DT_OK;
    }
    bool path = s && (strchr(s, '/') || strstr(s, ".json"));
    if (!s || !*s || (!path && !dt_model_builtin(s)))
        return dt_errorf(DT_ERR_INVALID, "unknown model '%s': give mlp, cnn, gpt, a shipped description (resnet, llama, "
                         "regressor) or a description file (FILE.json, docs/MODELS.md)", s ? s : "");
    if (strlen(s) >= sizeof c->file) return dt_errorf(DT_ERR_INVALID, "model path '%s' is too long", s);
    c->kind = DT_MODEL_FILE;
    snprintf(c->file, sizeof c->file, "%s", s);
    return DT_OK;
}

const char *dt_model_name(const dt_model_cfg *c) {
    return c->kind == DT_MODEL_FILE ? c->file : dt_model_kind_name(c->kind);
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
    if (c->seq_parallel && c->kind == DT_MODEL_MLP)
        return dt_errorf(DT_ERR_INVALID, "--sequence-parallel splits a sequence, and the mlp has none: use it with the gpt "
                         "or a description whose tensor-parallel blocks take (positions, width)");
    if (c->seq_parallel && c->kind == DT_MODEL_GPT && c->block_size % T)
        return dt_errorf(DT_ERR_INVALID, "--sequence-parallel: --tp %d must divide --block-size %d (each rank holds 1/%d of "
                         "the positions)", T, c->block_size, T);
    if (c->kind == DT_MODEL_MLP) {
        if (c->n_hidden < 1) return dt_errorf(DT_ERR_INVALID, "--tp needs at least one hidden layer");
        for (int i = 0; i < c->n_hidden; i++)
            if (i % 2 == 0 && c->hidden[i] % T)
                return dt_errorf(DT_ERR_INVALID, "--tp %d must divide the hidden size %d (it is split across the tp group)", T, c->hidden[i]);
    }
    return DT_OK;
}

static dt_status sizes_check(const dt_model_cfg *c) {
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
        if (c->n_classes < 2 || c->n_classes > 65536)
            return dt_errorf(DT_ERR_INVALID, "number of classes %d is out of range [2, 65536]", c->n_classes);
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
        if (c->vocab_size < 2 || c->vocab_size > (1 << 24))
            return dt_errorf(DT_ERR_INVALID, "vocab_size %d is out of range [2, 16777216]", c->vocab_size);
        return DT_OK;
    case DT_MODEL_FILE:
        return c->file[0] ? DT_OK : dt_errorf(DT_ERR_INVALID, "no model description file given");
    default:
        return dt_errorf(DT_ERR_INVALID, "unknown model kind %d", (int)c->kind);
    }
}

/* --set's NAME=VALUE pairs into v (replacing what is there). */
static dt_status parse_set(const char *s, dt_vars *v) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1] || eq - tok >= 32)
            return dt_errorf(DT_ERR_INVALID, "'%s' is not NAME=VALUE", tok);
        *eq = 0;
        dt_value x = {.t = DT_V_INT};
        char *end;
        if (strchr(eq + 1, ':')) {
            x.t = DT_V_LIST;
            for (char *p = eq + 1; *p && x.n < DT_EXPR_MAX_LIST; p = *end ? end + 1 : end) {
                x.list[x.n++] = strtoll(p, &end, 10);
                if (end == p || (*end && *end != ':')) return dt_errorf(DT_ERR_INVALID, "%s: '%s' is not a list of integers", tok, eq + 1);
            }
        } else if (strpbrk(eq + 1, ".eE")) {
            x.t = DT_V_FLOAT;
            x.f = strtof(eq + 1, &end);
        } else {
            x.i = strtoll(eq + 1, &end, 10);
        }
        if (x.t != DT_V_LIST && (end == eq + 1 || *end)) return dt_errorf(DT_ERR_INVALID, "%s: '%s' is not a number", tok, eq + 1);
        if (!dt_vars_set(v, tok, &x)) return dt_errorf(DT_ERR_INVALID, "too many variables set");
    }
    return DT_OK;
}

dt_status dt_model_set_check(const char *s) {
    dt_vars v;
    memset(&v, 0, sizeof v);
    return parse_set(s, &v);
}

/* The built-in kinds' size flags as their descriptions' variables. */
static void size_vars(const dt_model_cfg *c, dt_vars *v) {
    memset(v, 0, sizeof *v);
    dt_value x = {.t = DT_V_INT};
    if (c->kind == DT_MODEL_MLP) {
        x.i = c->in_dim;
        dt_vars_set(v, "in", &x);
        dt_value h = {.t = DT_V_LIST, .n = c->n_hidden};
        for (int i = 0; i < c->n_hidden; i++) h.list[i] = c->hidden[i];
        dt_vars_set(v, "hidden", &h);
    }
    if (c->kind == DT_MODEL_MLP || c->kind == DT_MODEL_CNN) {
        x.i = c->n_classes;
        dt_vars_set(v, "classes", &x);
    }
    if (c->kind == DT_MODEL_GPT) {
        const char *names[5] = {"n_layer", "n_head", "n_embd", "block_size", "vocab_size"};
        int vals[5] = {c->n_layer, c->n_head, c->n_embd, c->block_size, c->vocab_size};
        for (int i = 0; i < 5; i++) {
            x.i = vals[i];
            dt_vars_set(v, names[i], &x);
        }
    }
}

/* The description's text: a shipped one by name, or a file (malloc'd into *owned). */
static dt_status desc_text(const dt_model_cfg *c, const char **text, char **owned) {
    *owned = NULL;
    const char *name = dt_model_name(c);
    bool path = strchr(name, '/') || strstr(name, ".json");
    if (!path) {
        *text = dt_model_builtin(name);
        return *text ? DT_OK : dt_errorf(DT_ERR_INVALID, "no shipped model description '%s'", name);
    }
    FILE *f = fopen(name, "rb");
    if (!f) return dt_errorf(DT_ERR_IO, "%s: cannot open the model description: %s", name, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    dt_status st = DT_OK;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *nb = cap > (1u << 24) ? NULL : realloc(buf, cap);
            if (!nb) {
                st = dt_errorf(DT_ERR_FORMAT, "%s: a model description of more than 16 MiB is not one", name);
                break;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r < 4096) break;
    }
    if (!st && ferror(f)) st = dt_errorf(DT_ERR_IO, "%s: read failed", name);
    fclose(f);
    if (st) {
        free(buf);
        return st;
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        free(buf);
        return dt_errorf(DT_ERR_FORMAT, "%s: a model description is JSON text, this file holds a NUL byte", name);
    }
    *text = *owned = buf;
    return DT_OK;
}

/* Builds the blocks (not the arenas) into m. */
static dt_status build(dt_model *m) {
    const dt_model_cfg *c = &m->cfg;
    const char *text;
    char *owned;
    dt_status st = desc_text(c, &text, &owned);
    if (st) return st;
    dt_vars over;
    size_vars(c, &over);
    if (!st && c->set[0]) st = parse_set(c->set, &over);
    dt_builder bd = {.m = m};
    char what[300];
    snprintf(what, sizeof what, "%s%s", dt_model_name(c), strchr(dt_model_name(c), '/') || strstr(dt_model_name(c), ".json") ? "" : ".json");
    if (!st) st = dt_desc_build(&bd, text, what, &over);
    free(owned);
    return st;
}

dt_status dt_model_cfg_check(const dt_model_cfg *c) {
    dt_status st = tp_check(c);
    if (!st) st = sizes_check(c);
    return st;
}

dt_status dt_model_probe(const dt_model_cfg *cfg, dt_model **out) {
    *out = NULL;
    dt_status st = dt_model_cfg_check(cfg);
    if (st) return st;
    dt_model *m = dt_calloc(1, sizeof *m);
    if (!m) return dt_errorf(DT_ERR_NOMEM, "out of memory creating the model");
    m->cfg = *cfg;
    m->loss_terms = 1;
    if ((st = build(m))) {
        dt_model_destroy(m);
        return st;
    }
    *out = m;
    return DT_OK;
}

dt_status dt_model_create(dt_model **out, const dt_model_cfg *cfg) {
    dt_status st = dt_model_probe(cfg, out);
    if (st) return st;
    dt_model *m = *out;
    m->w = dt_alloc_floats(m->n);
    m->g = dt_alloc_floats(m->n);
    if (!m->w || !m->g) {
        *out = NULL;
        st = dt_errorf(DT_ERR_NOMEM, "cannot allocate %zu parameters", m->n);
        dt_model_destroy(m);
        return st;
    }
    return DT_OK;
}
