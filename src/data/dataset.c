/* A run's dataset whatever its format (the list and the rules are in
 * loader.h): which reader a path needs, the tensor splits built from the
 * readers' arrays (labels checked and converted, float targets converted,
 * the held-out tail), and the gathers the loader calls. */
#include "dtrain/loader.h"

#include "data_int.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define DS_MAX_LABEL ((int64_t)1 << 24)
#define DS_FORMATS                                                                                     \
    "dtrain reads a folder of IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-...), " \
    "a folder with x.npy and y.npy, a .npz with members x and y, a .csv with --target COLUMN, and for " \
    "language models llm.c .bin token shards or any text file or folder (bytes)"

struct dt_data_store {
    dt_corpus corpus;
    dt_tokbin tok;
    dt_npz npz;
    dt_npy npy[4];
    dt_csv csv[2];
    dt_idx idx[4];
    int32_t *labels[2];   /* train, test split arrays (test NULL when it is the train arrays' tail) */
    float *y[2];
};

typedef enum { F_UNKNOWN, F_IDX, F_NPY, F_NPZ, F_CSV, F_BIN, F_BYTES } ds_fmt;
static const char *const ds_names[] = {"unknown", "idx", "npy", "npz", "csv", "bin", "bytes"};

static bool ds_ext(const char *path, const char *ext) {
    size_t n = strlen(path), k = strlen(ext);
    return n >= k && !strcmp(path + n - k, ext);
}

static bool ds_in_dir(const char *dir, const char *name) {
    char *p = data_join(dir, name);
    bool ok = p && data_is_file(p);
    dt_free(p);
    return ok;
}

static ds_fmt ds_sniff_dir(const char *dir, bool lm) {
    if (ds_in_dir(dir, "x.npy")) return F_NPY;
    static const char *const idx[] = {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
                                      "t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz"};
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++)
        if (ds_in_dir(dir, idx[i])) return F_IDX;
    if (data_dir_has_suffix(dir, ".bin")) return F_BIN;
    return lm ? F_BYTES : F_UNKNOWN;
}

/* The reader for path: what it is (a folder), its first bytes, its name. */
static ds_fmt ds_sniff(const char *path, bool lm) {
    if (data_is_dir(path)) return ds_sniff_dir(path, lm);
    uint8_t h[8] = {0};
    size_t got = 0;
    FILE *f = data_is_file(path) ? fopen(path, "rb") : NULL;
    if (f) {
        got = fread(h, 1, sizeof h, f);
        fclose(f);
    }
    int32_t magic;
    memcpy(&magic, h, 4);
    if (got >= 6 && !memcmp(h, "\x93NUMPY", 6)) return F_NPY;
    if (got >= 4 && !memcmp(h, "PK\x03\x04", 4)) return F_NPZ;
    if (got >= 4 && magic == DT_TOKBIN_MAGIC) return F_BIN;
    if (ds_ext(path, ".csv")) return F_CSV;
    if (ds_ext(path, ".npy")) return F_NPY;
    if (ds_ext(path, ".npz")) return F_NPZ;
    if (ds_ext(path, ".bin")) return F_BIN;
    if (lm) return F_BYTES;
    return f ? F_UNKNOWN : F_IDX; /* a missing path: the IDX folder's message */
}

/* ---- tensor splits ------------------------------------------------------------ */

static bool ds_int_at(const dt_array *a, size_t i, int64_t *v) {
    const uint8_t *p = (const uint8_t *)a->data + i * dt_elem_size(a->type);
    switch (a->type) {
    case DT_EL_U8: *v = *p; return true;
    case DT_EL_I8: *v = (int8_t)*p; return true;
    case DT_EL_U16: { uint16_t t; memcpy(&t, p, 2); *v = t; return true; }
    case DT_EL_I16: { int16_t t; memcpy(&t, p, 2); *v = t; return true; }
    case DT_EL_U32: { uint32_t t; memcpy(&t, p, 4); *v = t; return true; }
    case DT_EL_I32: { int32_t t; memcpy(&t, p, 4); *v = t; return true; }
    case DT_EL_U64: { uint64_t t; memcpy(&t, p, 8); *v = t > INT64_MAX ? INT64_MAX : (int64_t)t; return true; }
    case DT_EL_I64: memcpy(v, p, 8); return true;
    default: return false;
    }
}

/* Split `which` (0 train, 1 test) from x (n, ...) and y (n[, ...]). */
static dt_status ds_pair(dt_dataset *d, int which, const dt_array *x, const dt_array *y, const char *xn, const char *yn,
                         bool div255) {
    dt_tensorset *s = which ? &d->te : &d->tr;
    if (x->ndim < 1 || x->ndim > 5)
        return dt_errorf(DT_ERR_SHAPE, "%s: x has %d dimensions; it must be (n, ...) with at most 4 per sample", xn, x->ndim);
    if (y->ndim < 1 || y->shape[0] != x->shape[0])
        return dt_errorf(DT_ERR_SHAPE, "%s: y must have one row per sample: x has %lld samples, y has shape %s%lld%s", yn,
                         (long long)x->shape[0], y->ndim ? "(" : "", y->ndim ? (long long)y->shape[0] : 0LL,
                         y->ndim ? ", ...)" : " dimensions");
    int64_t n = x->shape[0];
    size_t in_dim = n ? x->count / (size_t)n : 1;
    for (int i = 1; i < x->ndim && !n; i++) in_dim *= (size_t)x->shape[i];
    if (in_dim < 1 || in_dim > INT_MAX) return dt_errorf(DT_ERR_SHAPE, "%s: %zu inputs per sample (1..%d)", xn, in_dim, INT_MAX);
    size_t ydim = n ? y->count / (size_t)n : 1;
    for (int i = 1; i < y->ndim && !n; i++) ydim *= (size_t)y->shape[i];
    *s = (dt_tensorset){.n = n, .x = *x, .in_dim = in_dim, .div255 = div255};
    dt_data_store *st = d->store;
    if (dt_elem_is_int(y->type)) {
        if (ydim != 1)
            return dt_errorf(DT_ERR_SHAPE, "%s: integer y must be one class label per sample, not %zu; store float "
                             "regression targets as float32", yn, ydim);
        if (!(st->labels[which] = dt_calloc(n ? (size_t)n : 1, sizeof(int32_t))))
            return dt_errorf(DT_ERR_NOMEM, "%s: out of memory for %lld labels", yn, (long long)n);
        for (int64_t i = 0; i < n; i++) {
            int64_t v = 0;
            ds_int_at(y, (size_t)i, &v);
            if (v < 0 || v >= DS_MAX_LABEL)
                return dt_errorf(DT_ERR_FORMAT, "%s: label %lld at sample %lld is %s; class labels must be 0..K-1 (K <= %lld)",
                                 yn, (long long)v, (long long)i, v < 0 ? "negative" : "too large", (long long)DS_MAX_LABEL);
            st->labels[which][i] = (int32_t)v;
        }
        s->labels = st->labels[which];
    } else {
        if (ydim < 1 || ydim > INT_MAX) return dt_errorf(DT_ERR_SHAPE, "%s: %zu targets per sample", yn, ydim);
        if (!(st->y[which] = dt_alloc_floats(y->count ? y->count : 1)))
            return dt_errorf(DT_ERR_NOMEM, "%s: out of memory for %zu targets", yn, y->count);
        dt_array_to_float(y, 0, y->count, st->y[which]);
        s->y = st->y[which];
        s->y_dim = (int)ydim;
    }
    return DT_OK;
}

/* The test split as the last val_frac of the training arrays. */
static void ds_tail(dt_dataset *d, double val_frac) {
    dt_tensorset *tr = &d->tr, *te = &d->te;
    int64_t n_test = (int64_t)floor((double)tr->n * val_frac);
    int64_t n_train = tr->n - n_test;
    *te = *tr;
    te->n = n_test;
    te->x.data = (const uint8_t *)tr->x.data + (size_t)n_train * tr->in_dim * dt_elem_size(tr->x.type);
    if (tr->labels) te->labels = tr->labels + n_train;
    if (tr->y) te->y = tr->y + (size_t)n_train * (size_t)tr->y_dim;
    tr->n = n_train;
}

static void ds_meta(dt_imageset *m, const dt_dataset *d, int64_t n) {
    memset(m, 0, sizeof *m);
    m->n = n;
    m->rows = d->in_ndim == 2 ? (int)d->in_shape[0] : 1;
    m->cols = d->in_ndim == 2 ? (int)d->in_shape[1] : d->in_dim;
    m->n_classes = d->n_classes;
}

/* Checks the splits agree and fills the dataset's shape fields. has_train:
 * d->tr was read; has_test: d->te was read (else it is cut from d->tr). */
static dt_status ds_finish(dt_dataset *d, const char *path, bool has_train, bool has_test, bool need_train, double val_frac) {
    if (!has_test) ds_tail(d, val_frac);
    const dt_tensorset *ref = has_train ? &d->tr : &d->te;
    if (has_train && has_test) {
        const dt_tensorset *a = &d->tr, *b = &d->te;
        bool same = a->x.ndim == b->x.ndim && !memcmp(a->x.shape + 1, b->x.shape + 1, sizeof(int64_t) * (size_t)(a->x.ndim - 1)) &&
                    !a->labels == !b->labels && a->y_dim == b->y_dim;
        if (!same)
            return dt_errorf(DT_ERR_SHAPE, "%s: the training and test splits differ in per-sample shape or in the kind of "
                             "targets; save both the same way", path);
    }
    d->in_dim = (int)ref->in_dim;
    d->in_ndim = ref->x.ndim - 1;
    for (int i = 0; i < d->in_ndim; i++) d->in_shape[i] = ref->x.shape[i + 1];
    d->y_dim = ref->y_dim;
    for (int w = 0; w < 2; w++) {
        const dt_tensorset *s = w ? &d->te : &d->tr;
        for (int64_t i = 0; s->labels && i < s->n; i++)
            if (s->labels[i] + 1 > d->n_classes) d->n_classes = s->labels[i] + 1;
    }
    if (!need_train) d->tr.n = 0;
    d->n_train = d->tr.n;
    if (need_train && d->n_train < 1)
        return dt_errorf(DT_ERR_INVALID, "%s: no training samples%s", path, has_test ? "" : " (after holding out the validation fraction)");
    ds_meta(&d->train, d, d->tr.n);
    ds_meta(&d->test, d, d->te.n);
    return DT_OK;
}

/* ---- the formats ------------------------------------------------------------------ */

static dt_array ds_from_idx(const dt_idx *f) {
    dt_array a = {.ndim = f->ndim, .count = f->count, .data = f->data};
    switch (f->type) {
    case 0x08: a.type = DT_EL_U8; break;
    case 0x09: a.type = DT_EL_I8; break;
    case 0x0B: a.type = DT_EL_I16; break;
    case 0x0C: a.type = DT_EL_I32; break;
    case 0x0D: a.type = DT_EL_F32; break;
    default: a.type = DT_EL_F64; break;
    }
    for (int i = 0; i < f->ndim; i++) a.shape[i] = f->dims[i];
    return a;
}

static dt_status ds_open_idx(dt_dataset *d, const char *dir, bool need_train) {
    dt_idx *f = d->store->idx;
    dt_status st = DT_OK;
    for (int w = need_train ? 0 : 1; w < 2 && !st; w++) {
        if ((st = data_idx_pair(dir, w == 0, &f[2 * w], &f[2 * w + 1]))) break;
        dt_array x = ds_from_idx(&f[2 * w]), y = ds_from_idx(&f[2 * w + 1]);
        const char *xn = w ? "t10k-images-idx3-ubyte" : "train-images-idx3-ubyte";
        const char *yn = w ? "t10k-labels-idx1-ubyte" : "train-labels-idx1-ubyte";
        char xp[1024], yp[1024];
        snprintf(xp, sizeof xp, "%s/%s", dir, xn);
        snprintf(yp, sizeof yp, "%s/%s", dir, yn);
        st = ds_pair(d, w, &x, &y, xp, yp, x.type == DT_EL_U8);
    }
    return st ? st : ds_finish(d, dir, need_train, true, need_train, 0.0);
}

static dt_status ds_open_npy(dt_dataset *d, const char *dir, bool need_train, double val_frac) {
    static const char *const names[] = {"x.npy", "y.npy", "x_test.npy", "y_test.npy"};
    dt_npy *f = d->store->npy;
    char *p[4] = {0};
    dt_status st = DT_OK;
    for (int i = 0; i < 4 && !st; i++)
        if (!(p[i] = data_join(dir, names[i]))) st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory", dir);
    bool has_test = !st && (data_is_file(p[2]) || data_is_file(p[3]));
    if (!st && has_test && !(data_is_file(p[2]) && data_is_file(p[3])))
        st = dt_errorf(DT_ERR_INVALID, "%s: has %s but not %s; a test split needs both", dir,
                       names[data_is_file(p[2]) ? 2 : 3], names[data_is_file(p[2]) ? 3 : 2]);
    if (!st && !data_is_file(p[1]))
        st = dt_errorf(DT_ERR_INVALID, "%s: has x.npy but no y.npy; save the targets as y.npy beside it", dir);
    for (int i = 0; i < (has_test ? 4 : 2) && !st; i++) st = dt_npy_open(p[i], &f[i]);
    if (!st) st = ds_pair(d, 0, &f[0].a, &f[1].a, p[0], p[1], false);
    if (!st && has_test) st = ds_pair(d, 1, &f[2].a, &f[3].a, p[2], p[3], false);
    if (!st) st = ds_finish(d, dir, true, has_test, need_train, val_frac);
    for (int i = 0; i < 4; i++) dt_free(p[i]);
    return st;
}

static dt_status ds_open_npz(dt_dataset *d, const char *path, bool need_train, double val_frac) {
    dt_npz *z = &d->store->npz;
    dt_status st = dt_npz_open(path, z);
    if (st) return st;
    const dt_array *x = dt_npz_get(z, "x"), *y = dt_npz_get(z, "y");
    const dt_array *xt = dt_npz_get(z, "x_test"), *yt = dt_npz_get(z, "y_test");
    if (!x || !y) {
        char have[256] = "";
        for (int i = 0, k = 0; i < z->n && k < (int)sizeof have - 8; i++) {
            char shown[64];
            int w = snprintf(have + k, sizeof have - (size_t)k, "%s%s", i ? ", " : "",
                             data_clean(z->m[i].name, SIZE_MAX, shown, sizeof shown));
            k = w < 0 ? k : k + w;
        }
        return dt_errorf(DT_ERR_INVALID, "%s: no member %s.npy (members: %s); save it as np.savez(file, x=inputs, y=targets)",
                         path, x ? "y" : "x", z->n ? have : "none");
    }
    if (!xt != !yt) return dt_errorf(DT_ERR_INVALID, "%s: has %s but not %s; a test split needs both", path,
                                     xt ? "x_test" : "y_test", xt ? "y_test" : "x_test");
    char xn[1024], yn[1024];
    snprintf(xn, sizeof xn, "%s:x", path);
    snprintf(yn, sizeof yn, "%s:y", path);
    if ((st = ds_pair(d, 0, x, y, xn, yn, false))) return st;
    if (xt) {
        snprintf(xn, sizeof xn, "%s:x_test", path);
        snprintf(yn, sizeof yn, "%s:y_test", path);
        if ((st = ds_pair(d, 1, xt, yt, xn, yn, false))) return st;
    }
    return ds_finish(d, path, true, xt != NULL, need_train, val_frac);
}

/* NAME_test.csv beside NAME.csv, or the name with its last "train" made "test". */
static char *ds_csv_test(const char *path) {
    size_t n = strlen(path);
    char *p = dt_malloc(n + 8);
    if (!p) return NULL;
    snprintf(p, n + 8, "%.*s_test.csv", (int)(n - 4), path);
    if (data_is_file(p)) return p;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *t = NULL;
    for (const char *s = strstr(base, "train"); s; s = strstr(s + 1, "train")) t = s;
    if (t) {
        snprintf(p, n + 8, "%.*stest%s", (int)(t - path), path, t + 5);
        if (data_is_file(p)) return p;
    }
    dt_free(p);
    return NULL;
}

static dt_array ds_csv_x(const dt_csv *c) {
    return (dt_array){.type = DT_EL_F32, .ndim = 2, .shape = {c->rows, c->cols}, .count = (size_t)c->rows * (size_t)c->cols, .data = c->x};
}
static dt_array ds_csv_y(const dt_csv *c) {
    return (dt_array){.type = DT_EL_F32, .ndim = 1, .shape = {c->rows}, .count = (size_t)c->rows, .data = c->y};
}

static dt_status ds_open_csv(dt_dataset *d, const char *path, const char *target, bool need_train, double val_frac) {
    dt_csv *c = d->store->csv;
    char *test = ds_csv_test(path);
    dt_status st = dt_csv_read(path, target, &c[0]);
    if (!st && test) st = dt_csv_read(test, target, &c[1]);
    if (!st && test && c[1].cols != c[0].cols)
        st = dt_errorf(DT_ERR_SHAPE, "%s has %d input columns but %s has %d; the test file must have the same columns", path,
                       c[0].cols, test, c[1].cols);
    dt_array x = ds_csv_x(&c[0]), y = ds_csv_y(&c[0]), xt = ds_csv_x(&c[1]), yt = ds_csv_y(&c[1]);
    if (!st) st = ds_pair(d, 0, &x, &y, path, path, false);
    if (!st && test) st = ds_pair(d, 1, &xt, &yt, test, test, false);
    if (!st) st = ds_finish(d, path, true, test != NULL, need_train, val_frac);
    dt_free(test);
    return st;
}

static dt_status ds_open_tokens(dt_dataset *d, ds_fmt f, const char *path, int T, double val_frac) {
    dt_data_store *s = d->store;
    dt_status st;
    d->T = T;
    if (f == F_BIN) {
        if ((st = dt_tokbin_open(path, val_frac, T, &s->tok))) return st;
        d->vocab = s->tok.vocab;
        d->n_train = dt_tokbin_train_windows(&s->tok, T);
        return DT_OK;
    }
    if ((st = dt_corpus_load(path, val_frac, T, &s->corpus))) return st;
    d->vocab = 256;
    d->n_train = dt_corpus_train_windows(&s->corpus, T);
    return DT_OK;
}

dt_status dt_dataset_open(dt_dataset *d, const dt_data_opts *o) {
    DT_ASSERT(d && o);
    memset(d, 0, sizeof *d);
    d->lm = o->lm;
    if (!(d->store = dt_calloc(1, sizeof *d->store))) return dt_errorf(DT_ERR_NOMEM, "out of memory opening the data");
    const char *path = o->path ? o->path : o->lm ? DT_CORPUS_DEFAULT_PATH : DT_FMNIST_DEFAULT_DIR;
    ds_fmt f = ds_sniff(path, o->lm);
    d->format = ds_names[f];
    if (f == F_UNKNOWN) return dt_errorf(DT_ERR_INVALID, "%s: cannot tell the data format; " DS_FORMATS, path);
    const char *target = o->target && o->target[0] ? o->target : NULL;
    if (target && f != F_CSV)
        return dt_errorf(DT_ERR_INVALID, "%s: --target %s names a CSV column but the data is %s", path, target, d->format);
    if (o->lm && f != F_BIN && f != F_BYTES)
        return dt_errorf(DT_ERR_INVALID, "%s: %s data holds tensors but the model reads tokens; pass llm.c .bin token "
                         "shards or a text file", path, d->format);
    if (!o->lm && (f == F_BIN || f == F_BYTES))
        return dt_errorf(DT_ERR_INVALID, "%s: llm.c token shards are for a model that reads tokens (a language model); "
                         "this model reads tensors: " DS_FORMATS, path);
    if (f == F_NPY && !data_is_dir(path)) {
        const char *base = strrchr(path, '/');
        if (strcmp(base ? base + 1 : path, "x.npy"))
            return dt_errorf(DT_ERR_INVALID, "%s: a .npy holds one array; put x.npy and y.npy in a folder and pass the "
                             "folder (or np.savez(file.npz, x=..., y=...))", path);
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", base ? (int)(base - path) : 1, base ? path : ".");
        return ds_open_npy(d, dir, o->need_train, o->val_frac);
    }
    switch (f) {
    case F_IDX: return ds_open_idx(d, path, o->need_train);
    case F_NPY: return ds_open_npy(d, path, o->need_train, o->val_frac);
    case F_NPZ: return ds_open_npz(d, path, o->need_train, o->val_frac);
    case F_CSV: return ds_open_csv(d, path, target, o->need_train, o->val_frac);
    default: return ds_open_tokens(d, f, path, o->T, o->val_frac);
    }
}

dt_status dt_dataset_load(dt_dataset *d, const char *path, bool lm, int T, double val_frac, bool need_train) {
    dt_data_opts o = {.path = path, .lm = lm, .T = T, .val_frac = val_frac, .need_train = need_train};
    return dt_dataset_open(d, &o);
}

void dt_dataset_free(dt_dataset *d) {
    if (!d) return;
    dt_data_store *s = d->store;
    if (s) {
        dt_corpus_free(&s->corpus);
        dt_tokbin_close(&s->tok);
        dt_npz_close(&s->npz);
        for (int i = 0; i < 4; i++) {
            dt_npy_close(&s->npy[i]);
            dt_idx_free(&s->idx[i]);
        }
        for (int i = 0; i < 2; i++) {
            dt_csv_free(&s->csv[i]);
            dt_free(s->labels[i]);
            dt_free(s->y[i]);
        }
        dt_free(s);
    }
    memset(d, 0, sizeof *d);
}

int64_t dt_dataset_eval_size(const dt_dataset *d, int eval_max) {
    if (!d->lm) return d->te.n;
    int64_t total = d->store->tok.nfiles ? dt_tokbin_val_windows(&d->store->tok, d->T)
                                         : dt_corpus_val_windows(&d->store->corpus, d->T);
    return eval_max > 0 && total > eval_max ? eval_max : total;
}

void dt_tensorset_gather(const dt_tensorset *s, const int64_t *idx, int n, float *x, int32_t *labels, float *y) {
    DT_ASSERT(s && (n == 0 || (idx && x)));
    size_t dim = s->in_dim;
    for (int b = 0; b < n; b++) {
        int64_t k = idx[b];
        DT_ASSERT(k >= 0 && k < s->n);
        float *dst = x + (size_t)b * dim;
        dt_array_to_float(&s->x, (size_t)k * dim, dim, dst);
        /* Division, not multiplication by 1/255: it is what ToTensor() does, and
         * the two round differently for some pixel values. */
        if (s->div255)
            for (size_t j = 0; j < dim; j++) dst[j] = dst[j] / 255.0f;
        if (s->labels && labels) labels[b] = s->labels[k];
        if (s->y && y) memcpy(y + (size_t)b * (size_t)s->y_dim, s->y + (size_t)k * (size_t)s->y_dim, sizeof(float) * (size_t)s->y_dim);
    }
}

int64_t dt_dataset_gather(const dt_dataset *d, const int64_t *idx, int n, int shift, float *x, int32_t *tokens,
                          int32_t *targets, float *y) {
    if (n <= 0) return 0;
    if (!d->lm) {
        dt_tensorset_gather(&d->tr, idx, n, x, targets, y);
        return 0;
    }
    if (d->store->tok.nfiles) return dt_tokbin_gather(&d->store->tok, idx, n, d->T, shift, tokens, targets);
    dt_corpus_gather(&d->store->corpus, idx, n, d->T, shift, tokens, targets);
    return 0;
}

int64_t dt_dataset_gather_eval(const dt_dataset *d, int64_t first, int n, int64_t *idx, float *x, int32_t *tokens,
                               int32_t *targets, float *y) {
    if (n <= 0) return 0;
    if (!d->lm) {
        for (int i = 0; i < n; i++) idx[i] = first + i;
        dt_tensorset_gather(&d->te, idx, n, x, targets, y);
        return 0;
    }
    if (d->store->tok.nfiles) return dt_tokbin_gather_val(&d->store->tok, first, n, d->T, tokens, targets);
    dt_corpus_gather_val(&d->store->corpus, first, n, d->T, tokens, targets);
    return 0;
}
