/* libFuzzer harness for the safetensors reader (dt_st_parse, from memory).
 *
 * A parse either fails cleanly or yields a file whose promises hold; the
 * harness checks them and aborts (a crash to libFuzzer) when one is broken:
 * every tensor's bytes lie inside the input, numel * dtype size == end - begin,
 * the tensors tile the data buffer in order, lookups by name and metadata key
 * find what was listed. Every tensor is read through dt_st_read_f32 and
 * dt_st_read_i32 (an error for the wrong dtype is fine) and its raw bytes are
 * summed, so ASan sees any out-of-bounds pointer. Built by tests/fuzz/run.sh. */
#include "dtrain/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_safetensors: invariant broken: %s\n", what);
    abort();
}

static volatile uint32_t g_sink;

static void touch_tensor(const dt_st_file *f, const dt_st_tensor *t, const uint8_t *lo,
                         const uint8_t *hi) {
    if ((unsigned)t->dtype >= DT_DTYPE_COUNT) fail("dtype out of range");
    if (t->ndim < 0 || t->ndim > DT_ST_MAX_DIMS) fail("ndim out of range");
    if (!t->name) fail("NULL name");
    if (t->end < t->begin) fail("end < begin");
    size_t bytes = t->end - t->begin;
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) fail("negative dimension");
        numel *= (size_t)t->shape[d]; /* cannot overflow if the reader checked */
    }
    if (numel != t->numel) fail("numel != product of shape");
    if (numel * dt_dtype_size(t->dtype) != bytes) fail("numel * dtype size != end - begin");
    const uint8_t *p = dt_st_data(f, t);
    if (bytes && (p < lo || p > hi || (size_t)(hi - p) < bytes)) fail("tensor bytes outside the input");
    uint32_t s = 0;
    for (size_t i = 0; i < bytes; i++) s += p[i];
    g_sink += s;

    if (dt_st_find(f, t->name) != t) fail("dt_st_find does not return the listed tensor");

    size_t n = numel ? numel : 1;
    float *fb = malloc(n * sizeof *fb);
    int32_t *ib = malloc(n * sizeof *ib);
    if (fb && ib) {
        if (dt_st_read_f32(f, t, fb, numel) == DT_OK)
            for (size_t i = 0; i < numel; i++) g_sink += (uint32_t)(fb[i] == fb[i]);
        if (dt_st_read_i32(f, t, ib, numel) == DT_OK)
            for (size_t i = 0; i < numel; i++) g_sink += (uint32_t)ib[i];
        /* Wrong count must be refused, not read. */
        if (dt_st_read_f32(f, t, fb, numel + 1) == DT_OK) fail("read_f32 accepted a wrong count");
    }
    free(fb);
    free(ib);
    g_sink += (uint32_t)strlen(dt_dtype_name(t->dtype));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_st_file *f = NULL;
    dt_error_clear();
    if (dt_st_parse(data, size, "fuzz", &f) != DT_OK) {
        if (f) fail("error but *out set");
        if (!dt_error_msg()[0]) fail("error without a message");
        return 0;
    }
    if (!f) fail("DT_OK but no handle");
    const uint8_t *lo = data, *hi = data + size;
    int n = dt_st_count(f);
    if (n < 0) fail("negative count");
    size_t next = 0;
    for (int i = 0; i < n; i++) {
        const dt_st_tensor *t = dt_st_get(f, i);
        if (!t) fail("dt_st_get NULL inside count");
        if (t->begin != next) fail("tensors do not tile the buffer (gap or overlap)");
        next = t->end;
        touch_tensor(f, t, lo, hi);
    }
    if (n > 0) {
        /* The last tensor ends exactly at the end of the input. */
        const dt_st_tensor *t = dt_st_get(f, n - 1);
        if ((const uint8_t *)dt_st_data(f, t) + (t->end - t->begin) != hi)
            fail("data buffer does not end with the last tensor");
    }
    if (dt_st_get(f, n) || dt_st_get(f, -1)) fail("dt_st_get outside count");
    int m = dt_st_meta_count(f);
    for (int i = 0; i < m; i++) {
        const char *k = NULL, *v = NULL;
        dt_st_meta_at(f, i, &k, &v);
        if (!k || !v) fail("NULL metadata key or value");
        if (dt_st_meta(f, k) != v) fail("dt_st_meta does not find a listed key");
        g_sink += (uint32_t)(strlen(k) + strlen(v));
    }
    if (dt_st_meta(f, "\x01 no such key") || dt_st_find(f, "\x01 no such tensor"))
        fail("lookup of an absent name succeeded");
    dt_st_close(f);
    return 0;
}
