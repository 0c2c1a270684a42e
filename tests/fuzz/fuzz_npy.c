/* libFuzzer harness for the tabular and array readers: dt_npy_parse (from
 * memory), dt_npz_open (zip directory, stored and deflated members, zip64
 * fields), dt_csv_read (target column "y") and dt_tokbin_open (llm.c shard
 * headers), each on the same input.
 *
 * The path-taking readers read the input through a memfd (/proc/self/fd/N),
 * as fuzz_idx does. On success the harness checks what data.h promises
 * (count == product of shape, the data inside the input for .npy, every
 * element readable: each is converted to float so ASan sees a short buffer;
 * CSV rows and columns consistent and every value finite) and frees. On error
 * the message must be one non-empty line and the output cleared. Built by
 * tests/fuzz/run.sh. */
#define _GNU_SOURCE
#include "dtrain/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_fd = -1;
static char g_path[64];
static volatile float g_sink;

static void fail(const char *what) {
    fprintf(stderr, "fuzz_npy: invariant broken: %s\n", what);
    abort();
}

static void put_input(const uint8_t *data, size_t size) {
    if (g_fd < 0) {
        g_fd = memfd_create("fuzz_npy", 0);
        if (g_fd < 0) { perror("memfd_create"); abort(); }
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    }
    if (ftruncate(g_fd, 0) != 0) { perror("ftruncate"); abort(); }
    size_t off = 0;
    while (off < size) {
        ssize_t w = pwrite(g_fd, data + off, size - off, (off_t)off);
        if (w <= 0) { perror("pwrite"); abort(); }
        off += (size_t)w;
    }
}

static void check_error(void) {
    const char *m = dt_error_msg();
    if (!m[0]) fail("error without a message");
    if (strchr(m, '\n')) fail("message of more than one line");
}

/* Every element of a through the float conversion. */
static void touch(const dt_array *a) {
    size_t count = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] < 0) fail("negative dimension");
        count *= (size_t)a->shape[i];
    }
    if (count != a->count) fail("count != product of shape");
    if (a->type < 0 || a->type >= DT_EL_COUNT) fail("unknown element type");
    float buf[256], s = 0;
    for (size_t i = 0; i < a->count; i += 256) {
        size_t n = a->count - i < 256 ? a->count - i : 256;
        dt_array_to_float(a, i, n, buf);
        for (size_t k = 0; k < n; k++) s += buf[k];
    }
    g_sink += s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_array a;
    dt_error_clear();
    if (dt_npy_parse(data, size, "mem.npy", &a) == DT_OK) {
        touch(&a);
        const uint8_t *p = a.data;
        if (p < data || p + a.count * dt_elem_size(a.type) != data + size) fail("npy data not the input's tail");
    } else {
        check_error();
        if (a.data || a.count) fail("npy error but out not cleared");
    }

    put_input(data, size);
    dt_npz z;
    dt_error_clear();
    if (dt_npz_open(g_path, &z) == DT_OK) {
        for (int i = 0; i < z.n; i++) {
            touch(&z.m[i].a);
            if (dt_npz_get(&z, z.m[i].name) == NULL) fail("npz member not found by name");
        }
        dt_npz_close(&z);
        if (z.m || z.n) fail("npz close left members");
    } else {
        check_error();
        if (z.m || z.n || z.map) fail("npz error but out not cleared");
    }

    dt_csv c;
    dt_error_clear();
    if (dt_csv_read(g_path, "y", &c) == DT_OK) {
        if (c.rows < 1 || c.cols < 1 || !c.x || !c.y) fail("csv shape");
        for (int64_t r = 0; r < c.rows; r++) {
            if (!isfinite(c.y[r])) fail("csv non-finite target");
            for (int k = 0; k < c.cols; k++)
                if (!isfinite(c.x[(size_t)r * (size_t)c.cols + (size_t)k])) fail("csv non-finite value");
        }
        dt_csv_free(&c);
    } else {
        check_error();
        if (c.x || c.y || c.rows) fail("csv error but out not cleared");
    }

    dt_tokbin t;
    dt_error_clear();
    if (dt_tokbin_open(g_path, 0.25, 2, &t) == DT_OK) {
        int64_t nw = dt_tokbin_train_windows(&t, 2), nv = dt_tokbin_val_windows(&t, 2);
        if (nw < 1 || t.vocab < 1 || t.vocab > 65536) fail("tokbin windows or vocab");
        int32_t tok[2], tgt[2];
        int64_t idx = nw - 1;
        if (dt_tokbin_gather(&t, &idx, 1, 2, 1, tok, tgt) != 0) fail("tokbin: a small shard has an id >= vocab");
        if (nv > 0) dt_tokbin_gather_val(&t, nv - 1, 1, 2, tok, tgt);
        dt_tokbin_close(&t);
    } else {
        check_error();
        if (t.files || t.nfiles) fail("tokbin error but out not cleared");
    }
    return 0;
}
