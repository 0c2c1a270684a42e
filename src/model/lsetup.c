/* A leaf layer's attributes as its setup reads them (layer.h's dt_ls_*
 * calls): integers, reals, booleans and words from numbers or expressions,
 * initialisations, tensors (tied, split across the tp group), and the marks
 * that let the compiler refuse an attribute nobody read. Every failure is one
 * line naming the layer. Cost: a lookup per attribute read. */
#include "lsetup.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void dt_ls_mark(dt_lsetup *s, const char *key) {
    if (s->n_read < 32) snprintf(s->read[s->n_read++], sizeof s->read[0], "%.23s", key);
}

dt_status dt_ls_fail(dt_lsetup *s, const char *fmt, ...) {
    if (s->st) return s->st;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->st = dt_errorf(DT_ERR_INVALID, "%s: layer %s%s%s%s (%s): %s", s->what, s->where, s->name[0] ? " '" : "",
                      s->name, s->name[0] ? "'" : "", s->type, msg);
    return s->st;
}

dt_status dt_ls_status(const dt_lsetup *s) { return s->st; }
int dt_ls_tp_size(const dt_lsetup *s) { return s->bd->m->cfg.tp_size > 1 ? s->bd->m->cfg.tp_size : 1; }
int dt_ls_tp_rank(const dt_lsetup *s) { return s->bd->m->cfg.tp_size > 1 ? s->bd->m->cfg.tp_rank : 0; }
int dt_ls_seq_parallel(const dt_lsetup *s) {
    const dt_model_cfg *c = &s->bd->m->cfg;
    return c->seq_parallel && c->tp_size > 1 ? c->tp_size : 0;
}
void dt_ls_flops(dt_lsetup *s, int64_t flops) {
    dt_model *m = s->bd->m;
    m->flops_per_sample += flops;
    if (m->n_blocks > 0) m->blocks[m->n_blocks - 1].flops += flops;
}

void dt_ls_tp_bytes(dt_lsetup *s, int64_t bytes) {
    dt_model *m = s->bd->m;
    if (m->n_blocks > 0 && dt_ls_tp_size(s) > 1) m->blocks[m->n_blocks - 1].tp_bytes += bytes;
}

void dt_ls_buffers(dt_lsetup *s, int n) {
    dt_model *m = s->bd->m;
    if (s->st) return;
    for (int i = m->n_params - n; i < m->n_params; i++) m->params[i].buffer = true;
    m->has_batchnorm = true;
}

/* A JSON value as an expression's value: numbers as they are, strings evaluated. */
dt_status dt_ls_value(dt_lsetup *s, const char *key, const json_t *j, dt_value *v) {
    if (json_is_integer(j)) *v = (dt_value){.t = DT_V_INT, .i = json_integer_value(j)};
    else if (json_is_real(j)) *v = (dt_value){.t = DT_V_FLOAT, .f = (float)json_real_value(j)};
    else if (json_is_boolean(j)) *v = (dt_value){.t = DT_V_INT, .i = json_is_true(j)};
    else if (json_is_string(j)) {
        if (dt_expr_eval(json_string_value(j), s->vars, v))
            return dt_ls_fail(s, "'%s': %s", key, dt_error_msg());
    } else return dt_ls_fail(s, "'%s' must be a number or an expression", key);
    return DT_OK;
}

dt_status dt_ls_int(dt_lsetup *s, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    dt_ls_mark(s, key);
    const json_t *j = json_object_get(s->obj, key);
    if (!j) {
        if (def == DT_LS_REQUIRED) return dt_ls_fail(s, "needs '%s'", key);
        *out = def;
        return DT_OK;
    }
    dt_value v;
    if (dt_ls_value(s, key, j, &v)) return s->st;
    if (v.t != DT_V_INT) return dt_ls_fail(s, "'%s' must be an integer", key);
    if (v.i < lo || v.i > hi)
        return dt_ls_fail(s, "'%s' is %lld, out of range [%lld, %lld]", key, (long long)v.i, (long long)lo, (long long)hi);
    *out = v.i;
    return DT_OK;
}

dt_status dt_ls_float(dt_lsetup *s, const char *key, float def, float *out) {
    dt_ls_mark(s, key);
    const json_t *j = json_object_get(s->obj, key);
    if (!j) {
        *out = def;
        return DT_OK;
    }
    dt_value v;
    if (dt_ls_value(s, key, j, &v)) return s->st;
    if (v.t != DT_V_INT && v.t != DT_V_FLOAT) return dt_ls_fail(s, "'%s' must be a number", key);
    *out = v.t == DT_V_INT ? (float)v.i : v.f;
    return DT_OK;
}

dt_status dt_ls_bool(dt_lsetup *s, const char *key, bool def, bool *out) {
    dt_ls_mark(s, key);
    const json_t *j = json_object_get(s->obj, key);
    if (!j) *out = def;
    else if (json_is_boolean(j)) *out = json_is_true(j);
    else return dt_ls_fail(s, "'%s' must be true or false", key);
    return DT_OK;
}

/* A string attribute with {expr} templates expanded; false when absent. */
bool dt_ls_text(dt_lsetup *s, const char *key, char *out, size_t cap) {
    dt_ls_mark(s, key);
    const json_t *j = json_object_get(s->obj, key);
    if (!j) return false;
    if (!json_is_string(j)) {
        dt_ls_fail(s, "'%s' must be a string", key);
        return false;
    }
    if (dt_expr_template(json_string_value(j), s->vars, out, cap)) {
        dt_ls_fail(s, "'%s': %s", key, dt_error_msg());
        return false;
    }
    return true;
}

dt_status dt_ls_word(dt_lsetup *s, const char *key, const char *const *choices, int def, int *out) {
    char w[64];
    *out = def;
    if (!dt_ls_text(s, key, w, sizeof w)) return s->st;
    char list[160] = "";
    for (int i = 0; choices[i]; i++) {
        if (strcmp(w, choices[i]) == 0) {
            *out = i;
            return DT_OK;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", choices[i]);
    }
    return dt_ls_fail(s, "'%s' is '%s'; choose %s", key, w, list);
}

/* "init": {"normal": STD} | {"uniform": BOUND} | {"const": V} overrides a default. */
static void read_init(dt_lsetup *s, const char *key, int *init, float *scale) {
    dt_ls_mark(s, key);
    const json_t *j = json_object_get(s->obj, key);
    if (!j) return;
    static const char *kinds[] = {"uniform", "normal", "const"};
    const char *k;
    const json_t *v;
    if (!json_is_object(j) || json_object_size(j) != 1)
        goto bad;
    json_object_foreach((json_t *)j, k, v) {
        for (int i = 0; i < 3; i++) {
            if (strcmp(k, kinds[i]) != 0) continue;
            dt_value x;
            if (dt_ls_value(s, key, v, &x)) return;
            if (x.t != DT_V_INT && x.t != DT_V_FLOAT) goto bad;
            *init = i;
            *scale = x.t == DT_V_INT ? (float)x.i : x.f;
            return;
        }
    }
bad:
    dt_ls_fail(s, "'%s' must be {\"normal\": STD}, {\"uniform\": BOUND} or {\"const\": VALUE}", key);
}

size_t dt_ls_param(dt_lsetup *s, const char *suffix, int ndim, const int64_t *shape, int init, float scale,
                   bool tieable, int split, int nparts, const int64_t *pstart, const int64_t *plen) {
    if (s->st) return 0;
    if (!s->name[0]) {
        dt_ls_fail(s, "has tensors, so it needs a \"name\" (its PyTorch attribute path)");
        return 0;
    }
    char key[48], pname[160];
    snprintf(key, sizeof key, "%s_init", suffix);
    if (strcmp(suffix, "weight") == 0) snprintf(key, sizeof key, "init");
    read_init(s, key, &init, &scale);
    const dt_model *m = s->bd->m;
    if (m->n_blocks > 0 && m->blocks[m->n_blocks - 1].n_tensors >= DT_BLOCK_MAX_TENSORS) {
        dt_ls_fail(s, "its block would use more than %d tensors: split it into more top-level layers",
                   DT_BLOCK_MAX_TENSORS);
        return 0;
    }
    char tie[128];
    if (tieable && dt_ls_text(s, "tie", tie, sizeof tie)) {
        const dt_param *p = dt_model_find(s->bd->m, tie);
        if (!p) {
            dt_ls_fail(s, "ties its %s to '%s', which no earlier layer has", suffix, tie);
            return 0;
        }
        bool same = p->ndim == ndim && p->split == DT_SPLIT_NONE && split == DT_SPLIT_NONE;
        for (int i = 0; same && i < ndim; i++) same = p->shape[i] == shape[i];
        if (!same) {
            dt_ls_fail(s, "ties its %s to '%s' of another shape (or split across the tp group)", suffix, tie);
            return 0;
        }
        dt_builder_use(s->bd, p->offset);
        return p->offset;
    }
    if (s->st) return 0;
    int w = snprintf(pname, sizeof pname, "%s.%s", s->name, suffix);
    if (w >= (int)sizeof(((dt_param *)0)->name)) {
        dt_ls_fail(s, "tensor name '%s' is longer than 63 characters", pname);
        return 0;
    }
    if (dt_model_find(s->bd->m, pname)) {
        dt_ls_fail(s, "tensor '%s' is declared twice: names must be unique", pname);
        return 0;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1) {
            dt_ls_fail(s, "tensor '%s' would have an empty dimension", pname);
            return 0;
        }
    if (split != DT_SPLIT_NONE)
        return dt_builder_param_tp(s->bd, pname, ndim, shape, init, scale, split, nparts, pstart, plen);
    return dt_builder_param(s->bd, pname, ndim, shape, init, scale);
}

dt_status dt_ls_check_keys(dt_lsetup *s) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s->obj, k, v) {
        bool known = false;
        for (int i = 0; i < s->n_read && !known; i++) known = strcmp(s->read[i], k) == 0;
        if (!known) return dt_ls_fail(s, "unknown attribute '%s'", k);
    }
    return DT_OK;
}
