/* Model weights <-> safetensors, with PyTorch's names and layouts. */
#include "dtrain/weights.h"

#include "dtrain/safetensors.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int put(const char **kv, int n, int max, char **buf, size_t *left, const char *k,
               const char *fmt, long long v) {
    if (n >= max) return n;
    int w = snprintf(*buf, *left, fmt, v);
    if (w < 0 || (size_t)w >= *left) return n;
    kv[2 * n] = k;
    kv[2 * n + 1] = *buf;
    *buf += w + 1;
    *left -= (size_t)w + 1;
    return n + 1;
}

int dt_weights_cfg_meta(const dt_model_cfg *c, const char **kv, int max_pairs, char *buf,
                        size_t buflen) {
    int n = 0;
    char *p = buf;
    size_t left = buflen;
    kv[0] = "format";
    kv[1] = "pt";
    kv[2] = "dtrain_model";
    kv[3] = dt_model_name(c); /* a description file: its path or shipped name */
    n = 2;
    if (c->set[0] && n < max_pairs) { /* --set: the description's variables */
        kv[2 * n] = "model_set";
        kv[2 * n + 1] = c->set;
        n++;
    }
    switch (c->kind) {
    case DT_MODEL_MLP: {
        n = put(kv, n, max_pairs, &p, &left, "in_dim", "%lld", c->in_dim);
        n = put(kv, n, max_pairs, &p, &left, "n_classes", "%lld", c->n_classes);
        char hid[256] = "";
        size_t used = 0;
        for (int i = 0; i < c->n_hidden && used < sizeof hid; i++)
            used += (size_t)snprintf(hid + used, sizeof hid - used, "%s%d", i ? "," : "", c->hidden[i]);
        if (n < max_pairs && strlen(hid) + 1 <= left) {
            memcpy(p, hid, strlen(hid) + 1);
            kv[2 * n] = "hidden";
            kv[2 * n + 1] = p;
            left -= strlen(hid) + 1;
            p += strlen(hid) + 1;
            n++;
        }
        break;
    }
    case DT_MODEL_CNN:
        n = put(kv, n, max_pairs, &p, &left, "n_classes", "%lld", c->n_classes);
        break;
    case DT_MODEL_GPT:
        n = put(kv, n, max_pairs, &p, &left, "n_layer", "%lld", c->n_layer);
        n = put(kv, n, max_pairs, &p, &left, "n_head", "%lld", c->n_head);
        n = put(kv, n, max_pairs, &p, &left, "n_embd", "%lld", c->n_embd);
        n = put(kv, n, max_pairs, &p, &left, "block_size", "%lld", c->block_size);
        n = put(kv, n, max_pairs, &p, &left, "vocab_size", "%lld", c->vocab_size);
        break;
    default:
        break;
    }
    return n;
}

static dt_status meta_int(const char *(*get)(void *, const char *), void *ctx, const char *what,
                          const char *key, int *out) {
    const char *v = get(ctx, key);
    if (!v) return dt_errorf(DT_ERR_FORMAT, "%s: metadata has no '%s'", what, key);
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 0 || x > INT_MAX)
        return dt_errorf(DT_ERR_FORMAT, "%s: metadata '%s' = '%s' is not a valid size", what, key, v);
    *out = (int)x;
    return DT_OK;
}

dt_status dt_weights_cfg_from_meta(const char *(*get)(void *ctx, const char *key), void *ctx,
                                   const char *what, dt_model_cfg *cfg) {
    const char *kind = get(ctx, "dtrain_model");
    dt_model_kind k;
    if (!kind) {
        /* A nanoGPT export carries only its config keys. */
        if (get(ctx, "n_layer") && get(ctx, "n_embd")) kind = "gpt";
        else
            return dt_errorf(DT_ERR_FORMAT, "%s: metadata does not say which model it holds; pass --model", what);
    }
    /* --set, which any model may have had: its description's variables */
    const char *set = get(ctx, "model_set");
    if (set && (strlen(set) >= sizeof cfg->set || dt_model_set_check(set)))
        return dt_errorf(DT_ERR_FORMAT, "%s: metadata 'model_set' = '%s' is not NAME=VALUE,...", what, set);
    if (dt_model_kind_parse(kind, &k)) {
        dt_model_cfg_default(cfg, DT_MODEL_FILE);
        if (dt_model_select(cfg, kind))
            return dt_errorf(DT_ERR_FORMAT, "%s: metadata names an unknown model '%s' (pass --model FILE.json)", what, kind);
        if (set) snprintf(cfg->set, sizeof cfg->set, "%s", set);
        return DT_OK;
    }
    dt_model_cfg_default(cfg, k);
    if (set) snprintf(cfg->set, sizeof cfg->set, "%s", set);
    dt_status st = DT_OK;
    switch (k) {
    case DT_MODEL_MLP: {
        if ((st = meta_int(get, ctx, what, "in_dim", &cfg->in_dim))) return st;
        if ((st = meta_int(get, ctx, what, "n_classes", &cfg->n_classes))) return st;
        const char *h = get(ctx, "hidden");
        if (!h) return dt_errorf(DT_ERR_FORMAT, "%s: metadata has no 'hidden'", what);
        cfg->n_hidden = 0;
        const char *p = h;
        while (*p) {
            char *end;
            long x = strtol(p, &end, 10);
            if (end == p || x < 1 || x > 65536 || cfg->n_hidden == DT_MLP_MAX_HIDDEN)
                return dt_errorf(DT_ERR_FORMAT, "%s: metadata 'hidden' = '%s' is not a list of sizes", what, h);
            cfg->hidden[cfg->n_hidden++] = (int)x;
            p = end;
            if (*p == ',') p++;
            else if (*p) return dt_errorf(DT_ERR_FORMAT, "%s: metadata 'hidden' = '%s' is not a list of sizes", what, h);
        }
        break;
    }
    case DT_MODEL_CNN:
        break;
    case DT_MODEL_GPT:
        if ((st = meta_int(get, ctx, what, "n_layer", &cfg->n_layer))) return st;
        if ((st = meta_int(get, ctx, what, "n_head", &cfg->n_head))) return st;
        if ((st = meta_int(get, ctx, what, "n_embd", &cfg->n_embd))) return st;
        if ((st = meta_int(get, ctx, what, "block_size", &cfg->block_size))) return st;
        if ((st = meta_int(get, ctx, what, "vocab_size", &cfg->vocab_size))) return st;
        break;
    default:
        break;
    }
    st = dt_model_cfg_check(cfg);
    if (st) return dt_errorf(DT_ERR_FORMAT, "%s: metadata describes an invalid model: %s", what, dt_error_msg());
    return DT_OK;
}

dt_status dt_weights_save(const dt_model *m, const char *path, int n_extra,
                          const char *const *extra_kv) {
    dt_st_writer *w = NULL;
    dt_status st = dt_st_writer_create(&w);
    if (st) return st;
    for (int i = 0; i < m->n_params && !st; i++) {
        const dt_param *p = &m->params[i];
        st = dt_st_writer_add(w, p->name, DT_F32, p->ndim, p->shape, m->w + p->offset);
    }
    const char *kv[64];
    char buf[1024];
    int n = dt_weights_cfg_meta(&m->cfg, kv, 24, buf, sizeof buf);
    for (int i = 0; i < n && !st; i++) st = dt_st_writer_meta(w, kv[2 * i], kv[2 * i + 1]);
    for (int i = 0; i < n_extra && !st; i++) st = dt_st_writer_meta(w, extra_kv[2 * i], extra_kv[2 * i + 1]);
    if (!st) st = dt_st_writer_write(w, path);
    dt_st_writer_destroy(w);
    return st;
}

static const char *st_get(void *ctx, const char *key) { return dt_st_meta((dt_st_file *)ctx, key); }

dt_status dt_weights_read_cfg(const char *path, dt_model_cfg *cfg) {
    dt_st_file *f = NULL;
    dt_status st = dt_st_open(path, &f);
    if (st) return st;
    st = dt_weights_cfg_from_meta(st_get, f, path, cfg);
    dt_st_close(f);
    return st;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && u < n; i++)
        u += (size_t)snprintf(buf + u, n - u, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (u < n) snprintf(buf + u, n - u, "]");
}

dt_status dt_weights_load(dt_model *m, const char *path) {
    dt_st_file *f = NULL;
    float *tmp = NULL;
    dt_status st = dt_st_open(path, &f);
    if (st) return st;
    const char *kind = dt_st_meta(f, "dtrain_model");
    if (kind && m->cfg.kind != DT_MODEL_FILE && strcmp(kind, dt_model_kind_name(m->cfg.kind)) != 0) {
        st = dt_errorf(DT_ERR_SHAPE, "%s holds a %s model, not a %s; pass --model %s or the right file",
                       path, kind, dt_model_kind_name(m->cfg.kind), kind);
        goto done;
    }
    /* Every tensor in the file must belong to the model. */
    for (int i = 0; i < dt_st_count(f); i++) {
        const dt_st_tensor *t = dt_st_get(f, i);
        if (!dt_model_find(m, t->name) && !(m->cfg.kind == DT_MODEL_GPT && strcmp(t->name, "lm_head.weight") == 0)) {
            st = dt_errorf(DT_ERR_SHAPE, "%s: tensor '%s' is not part of this %s (is the file for another model or size?)",
                           path, t->name, dt_model_name(&m->cfg));
            goto done;
        }
    }
    /* Check everything before changing anything. */
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        const dt_st_tensor *t = dt_st_find(f, p->name);
        if (!t) {
            st = dt_errorf(DT_ERR_SHAPE, "%s: tensor '%s' is missing (is the file for another model or size?)", path, p->name);
            goto done;
        }
        bool same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            char a[96], b[96];
            shape_str(a, sizeof a, t->ndim, t->shape);
            shape_str(b, sizeof b, p->ndim, p->shape);
            st = dt_errorf(DT_ERR_SHAPE, "%s: tensor '%s' has shape %s but this %s needs %s", path,
                           p->name, a, dt_model_name(&m->cfg), b);
            goto done;
        }
    }
    tmp = dt_alloc_floats(m->n);
    if (!tmp) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory loading %s", path);
        goto done;
    }
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        st = dt_st_read_f32(f, dt_st_find(f, p->name), tmp + p->offset, p->numel);
        if (st) goto done;
    }
    memcpy(m->w, tmp, m->n * sizeof(float));
done:
    dt_free(tmp);
    dt_st_close(f);
    return st;
}
