/* Test fixtures (tests/fixtures, made by tools/gen_fixtures.py):
 * everything a test loads is tracked in one list and freed by fx_close, so each
 * test has a single exit. Shared by test_reference.c and test_bf16.c. */
#ifndef DT_FIXTUREHELP_H
#define DT_FIXTUREHELP_H

#include "dtrain/core.h"
#include "dtrain/safetensors.h"
#include "testhelp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_MAX_ALLOCS 64
typedef struct fx {
    const char *path;
    dt_st_file *f;
    void *allocs[FX_MAX_ALLOCS];
    int n_allocs;
} fx;

static inline int fx_open(fx *x, const char *path) {
    memset(x, 0, sizeof *x);
    x->path = path;
    dt_status st = dt_st_open(path, &x->f);
    if (st) {
        fprintf(stderr, "%s: %s (regenerate with /usr/bin/python3 tools/gen_fixtures.py)\n",
                path, dt_error_msg());
        test_cond("fixture opens", 0);
        return 0;
    }
    return 1;
}

static inline void fx_close(fx *x) {
    for (int i = 0; i < x->n_allocs; i++) free(x->allocs[i]);
    dt_st_close(x->f);
    memset(x, 0, sizeof *x);
}

static inline void *fx_track(fx *x, void *p) {
    DT_ASSERT(x->n_allocs < FX_MAX_ALLOCS);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    x->allocs[x->n_allocs++] = p;
    return p;
}

/* A zeroed float buffer owned by the fixture. */
static inline float *fx_zeros(fx *x, size_t n) { return fx_track(x, calloc(n ? n : 1, sizeof(float))); }

static inline float *fx_fill(fx *x, size_t n, float v) {
    float *p = fx_zeros(x, n);
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}

static inline int fx_meta_int(const fx *x, const char *key) {
    const char *v = dt_st_meta(x->f, key);
    if (!v) {
        fprintf(stderr, "%s: metadata %s missing\n", x->path, key);
        abort();
    }
    return atoi(v);
}

static inline const dt_st_tensor *fx_tensor(const fx *x, const char *name, size_t n) {
    const dt_st_tensor *t = dt_st_find(x->f, name);
    if (!t || (n && t->numel != n)) {
        fprintf(stderr, "%s: tensor %s %s (want %zu elements)\n", x->path, name,
                t ? "has the wrong size" : "is missing", n);
        abort(); /* the fixture and this test disagree: a test bug, not a kernel bug */
    }
    return t;
}

/* Loads a float tensor of exactly n elements (n = 0: any size). */
static inline float *fx_f32(fx *x, const char *name, size_t n) {
    const dt_st_tensor *t = fx_tensor(x, name, n);
    float *p = fx_zeros(x, t->numel);
    DT_ASSERT(dt_st_read_f32(x->f, t, p, t->numel) == DT_OK);
    return p;
}

static inline int32_t *fx_i32(fx *x, const char *name, size_t n) {
    const dt_st_tensor *t = fx_tensor(x, name, n);
    int32_t *p = fx_track(x, calloc(t->numel ? t->numel : 1, sizeof(int32_t)));
    DT_ASSERT(dt_st_read_i32(x->f, t, p, t->numel) == DT_OK);
    return p;
}

#endif
