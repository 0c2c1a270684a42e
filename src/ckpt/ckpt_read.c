/* Reading checkpoints: verification, discovery of the newest valid one,
 * loading into any layout (whole parameters and slices reassembled into the
 * logical tensors, every arena float checked to be written exactly once:
 * O(model) memory for the coverage counts), and extra tensors. Every read
 * first verifies the whole checkpoint (ckpt_manifest.c). */
#include "ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

dt_status dt_ckpt_verify(const char *path, dt_ckpt_state *state) {
    dt_ckpt_files cf;
    dt_status st = dt_ckpt_files_open(path, state, &cf, NULL);
    if (!st) dt_ckpt_files_free(&cf);
    return st;
}

/* Steps of the ckpt-<step> directories in dir into *steps (dt_free). */
static dt_status list_steps(const char *dir, int64_t **steps, size_t *ns) {
    *steps = NULL;
    *ns = 0;
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(DT_ERR_IO, "--ckpt-dir %s: %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long long sv;
        char tail;
        if (sscanf(de->d_name, "ckpt-%lld%c", &sv, &tail) != 1 || sv < 0) continue;
        if (*ns == cap) {
            cap = cap ? 2 * cap : 64;
            int64_t *ns2 = dt_realloc_array(*steps, cap, sizeof **steps);
            if (!ns2) break;
            *steps = ns2;
        }
        (*steps)[(*ns)++] = sv;
    }
    closedir(d);
    return DT_OK;
}

dt_status dt_ckpt_find_latest(const char *dir, char *path, size_t n) {
    return dt_ckpt_find_latest_upto(dir, INT64_MAX, path, n);
}

dt_status dt_ckpt_find_latest_upto(const char *dir, int64_t max_step, char *path, size_t n) {
    int64_t *steps;
    size_t ns;
    dt_status st = list_steps(dir, &steps, &ns);
    if (st) return st;
    for (size_t i = 0; i < ns;) /* later ones are not candidates */
        if (steps[i] > max_step) steps[i] = steps[--ns];
        else i++;
    st = dt_errorf(DT_ERR_IO, "no valid checkpoint in %s", dir);
    while (ns > 0) {
        size_t best = 0;
        for (size_t i = 1; i < ns; i++)
            if (steps[i] > steps[best]) best = i;
        char c[4096];
        dt_ckpt_dir_name(c, sizeof c, dir, steps[best]);
        steps[best] = steps[--ns];
        dt_status vs = dt_ckpt_verify(c, NULL);
        if (vs == DT_OK) {
            snprintf(path, n, "%s", c);
            st = DT_OK;
            break;
        }
        dt_log(DT_LOG_WARN, "skipping checkpoint %s: %s", c, dt_error_msg());
        st = dt_errorf(DT_ERR_IO, "no valid checkpoint in %s", dir);
    }
    dt_free(steps);
    return st;
}

/* ---- loading -------------------------------------------------------------------- */

/* A load in progress: where each tensor goes and how often each arena float
 * was written (capped at 255). */
typedef struct load_ctx {
    const char *path;
    dt_model *m;
    const dt_ckpt_files *cf;
    const dt_ckpt_state *s;
    float *w;                /* m->n floats: the parameters, copied to m->w at the end */
    uint8_t *pcover;         /* m->n: parameter coverage */
    bool *whole;             /* n_params: found whole under its name */
    float *dst[2];           /* M, V (NULL: not wanted) */
    uint8_t *cover[2];       /* m->n each where dst[k] */
} load_ctx;

/* Parameters: every model tensor once, in some file, whole under its name or
 * as slices (parameter-server key ranges, checked for coverage later). */
static dt_status load_whole_params(load_ctx *L) {
    const dt_model *m = L->m;
    dt_status st = DT_OK;
    for (int i = 0; i < m->n_params && !st; i++) {
        const dt_param *p = &m->params[i];
        const dt_st_tensor *t = NULL;
        int fi = 0;
        for (; fi < L->cf->n && !t; fi++) t = dt_st_find(L->cf->f[fi], p->name);
        if (!t) continue;
        bool same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same)
            return dt_errorf(DT_ERR_SHAPE, "%s: parameter '%s' has another shape than this model's (a checkpoint of another model size?)",
                             L->path, p->name);
        st = dt_st_read_f32(L->cf->f[fi - 1], t, L->w + p->offset, p->numel);
        L->whole[i] = true;
        memset(L->pcover + p->offset, 1, p->numel);
    }
    return st;
}

/* One slice (metadata entry e under key) of file fi into its logical tensor. */
static dt_status load_slice(load_ctx *L, int fi, const char *key, json_t *e) {
    const dt_st_file *f = L->cf->f[fi];
    const char *pn = json_string_value(json_object_get(e, "param"));
    const char *sn = json_string_value(json_object_get(e, "state"));
    json_t *off = json_object_get(e, "offset");
    const dt_st_tensor *t = dt_st_find(f, key);
    const dt_param *p = pn ? dt_model_find(L->m, pn) : NULL;
    int k = -1;
    bool is_param = sn && strcmp(sn, "param") == 0;
    for (int j = 0; j < L->s->n_states; j++)
        if (sn && strcmp(sn, dt_ckpt_state_name(L->s->optim, j)) == 0) k = j;
    if (!t || !p || (k < 0 && !is_param) || !json_is_integer(off))
        return dt_errorf(DT_ERR_FORMAT, "%s: slice '%s' names an unknown parameter or state", L->cf->names[fi], key);
    json_int_t o = json_integer_value(off);
    if (o < 0 || (size_t)o > p->numel || t->numel > p->numel - (size_t)o)
        return dt_errorf(DT_ERR_FORMAT, "%s: slice '%s' runs past its tensor", L->cf->names[fi], key);
    uint8_t *cov = is_param ? L->pcover : L->cover[k];
    float *into = is_param ? L->w : L->dst[k];
    if (!into) return DT_OK;
    dt_status st = dt_st_read_f32(f, t, into + p->offset + (size_t)o, t->numel);
    if (st) return st;
    for (size_t j = 0; j < t->numel; j++) {
        size_t x = p->offset + (size_t)o + j;
        if (cov[x] < 255) cov[x]++;
    }
    return DT_OK;
}

/* Every slice listed in the files' "slices" metadata. */
static dt_status load_slices(load_ctx *L) {
    dt_status st = DT_OK;
    for (int fi = 0; fi < L->cf->n && !st; fi++) {
        const char *sl_text = dt_st_meta(L->cf->f[fi], "slices");
        json_t *sl = sl_text ? json_loads(sl_text, 0, NULL) : json_object();
        if (!json_is_object(sl)) {
            json_decref(sl);
            return dt_errorf(DT_ERR_FORMAT, "%s: slices metadata is not a JSON object", L->cf->names[fi]);
        }
        const char *key;
        json_t *e;
        json_object_foreach(sl, key, e) {
            if ((st = load_slice(L, fi, key, e))) break;
        }
        json_decref(sl);
    }
    return st;
}

/* Every parameter float written exactly once (a parameter with nothing at all
 * is reported as missing: a checkpoint of another model). */
static dt_status check_param_cover(const load_ctx *L) {
    const dt_model *m = L->m;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        for (size_t j = 0; j < p->numel; j++) {
            uint8_t c = L->pcover[p->offset + j];
            if (c == 1) continue;
            if (!c && j == 0 && !L->whole[i])
                return dt_errorf(DT_ERR_SHAPE, "%s: parameter '%s' is missing (a checkpoint of another model?)", L->path, p->name);
            return dt_errorf(DT_ERR_FORMAT, "%s: parameter '%s' is %s at element %zu", L->path, p->name,
                             c ? "written twice" : "missing", j);
        }
    }
    return DT_OK;
}

/* Every wanted optimizer-state float written exactly once. */
static dt_status check_state_cover(const load_ctx *L) {
    const dt_model *m = L->m;
    for (int k = 0; k < 2; k++) {
        if (!L->dst[k] || k >= L->s->n_states) continue;
        if (!L->cover[k]) return dt_errorf(DT_ERR_NOMEM, "out of memory");
        for (int i = 0; i < m->n_params; i++) {
            const dt_param *p = &m->params[i];
            for (size_t j = 0; j < p->numel; j++)
                if (L->cover[k][p->offset + j] != 1)
                    return dt_errorf(DT_ERR_FORMAT, "%s: optimizer state %s of '%s' is %s at element %zu",
                                     L->path, dt_ckpt_state_name(L->s->optim, k), p->name,
                                     L->cover[k][p->offset + j] ? "written twice" : "missing", j);
        }
    }
    return DT_OK;
}

/* The load's buffers; M and V zeroed (their coverage is checked later). */
static dt_status load_alloc(load_ctx *L) {
    const dt_model *m = L->m;
    L->w = dt_alloc_floats(m->n);
    if (!L->w) return dt_errorf(DT_ERR_NOMEM, "out of memory loading %s", L->path);
    L->pcover = dt_calloc(m->n ? m->n : 1, 1);
    L->whole = dt_calloc((size_t)m->n_params + 1, sizeof(bool));
    if (!L->pcover || !L->whole) return dt_errorf(DT_ERR_NOMEM, "out of memory loading %s", L->path);
    return DT_OK;
}

static dt_status alloc_state_cover(load_ctx *L) {
    for (int k = 0; k < 2; k++) {
        if (!L->dst[k]) continue;
        memset(L->dst[k], 0, L->m->n * sizeof(float));
        if (!(L->cover[k] = dt_calloc(L->m->n ? L->m->n : 1, 1)))
            return dt_errorf(DT_ERR_NOMEM, "out of memory loading %s", L->path);
    }
    return DT_OK;
}

dt_status dt_ckpt_load(const char *path, dt_model *m, float *M, float *V, dt_ckpt_state *state) {
    dt_ckpt_files cf;
    dt_ckpt_state s;
    dt_status st = dt_ckpt_files_open(path, &s, &cf, NULL);
    if (st) return st;
    load_ctx L = {.path = path, .m = m, .cf = &cf, .s = &s, .dst = {M, V}};
    if ((st = load_alloc(&L))) goto out;
    if ((st = load_whole_params(&L))) goto out;
    if ((st = alloc_state_cover(&L))) goto out;
    if ((st = load_slices(&L))) goto out;
    if ((st = check_param_cover(&L))) goto out;
    if ((st = check_state_cover(&L))) goto out;
    memcpy(m->w, L.w, m->n * sizeof(float));
    if (state) *state = s;
out:
    dt_free(L.w);
    dt_free(L.whole);
    dt_free(L.cover[0]);
    dt_free(L.cover[1]);
    dt_free(L.pcover);
    dt_ckpt_files_free(&cf);
    return st;
}

/* ---- extra tensors ---------------------------------------------------------------- */

/* Extra tensors named `key` (prefix: every name starting with it) into out
 * (n floats each): the first exact match, or the sum of the prefix matches.
 * *count: how many were read. */
static dt_status load_extras(const char *path, const char *key, bool prefix, float *out, size_t n, int *count) {
    dt_ckpt_files cf;
    dt_ckpt_state s;
    *count = 0;
    dt_status st = dt_ckpt_files_open(path, &s, &cf, NULL);
    if (st) return st;
    float *tmp = prefix ? dt_alloc_floats(n ? n : 1) : out;
    if (!tmp) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (prefix) memset(out, 0, n * sizeof(float));
    size_t kl = strlen(key);
    for (int fi = 0; fi < cf.n && !st && (prefix || !*count); fi++)
        for (int i = 0; i < dt_st_count(cf.f[fi]) && !st && (prefix || !*count); i++) {
            const dt_st_tensor *t = dt_st_get(cf.f[fi], i);
            if (prefix ? strncmp(t->name, key, kl) != 0 : strcmp(t->name, key) != 0) continue;
            if (t->numel != n) {
                st = dt_errorf(DT_ERR_SHAPE, "%s: '%s' holds %zu values, this run needs %zu", cf.names[fi], t->name, t->numel, n);
                break;
            }
            if ((st = dt_st_read_f32(cf.f[fi], t, tmp, n))) break;
            if (prefix)
                for (size_t j = 0; j < n; j++) out[j] += tmp[j];
            (*count)++;
        }
    if (prefix) dt_free(tmp);
    dt_ckpt_files_free(&cf);
    return st;
}

dt_status dt_ckpt_read_extra(const char *path, const char *name, float *out, size_t n, bool *found) {
    int count;
    dt_status st = load_extras(path, name, false, out, n, &count);
    *found = !st && count > 0;
    return st;
}

dt_status dt_ckpt_sum_extra(const char *path, const char *prefix, float *out, size_t n, int *count) {
    return load_extras(path, prefix, true, out, n, count);
}
