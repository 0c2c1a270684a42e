/* libFuzzer harness for the IDX reader (dt_idx_read, plain or gzipped).
 *
 * dt_idx_read takes a path, so each input is written to a memfd (no file is
 * left behind) and read back through /proc/self/fd/N. On success the harness
 * checks what data.h promises (known type, ndim 1..8, count == product of
 * dims, elem_size matching the type, and for plain input a payload of exactly
 * size - header bytes) and reads every payload byte so ASan sees any short
 * buffer. Built by tests/fuzz/run.sh. */
#define _GNU_SOURCE
#include "dtrain/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_fd = -1;
static char g_path[64];
static volatile uint32_t g_sink;

static void fail(const char *what) {
    fprintf(stderr, "fuzz_idx: invariant broken: %s\n", what);
    abort();
}

static size_t type_size(uint8_t t) {
    switch (t) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
    }
}

static void put_input(const uint8_t *data, size_t size) {
    if (g_fd < 0) {
        g_fd = memfd_create("fuzz_idx", 0);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    put_input(data, size);
    dt_idx idx;
    memset(&idx, 0xAB, sizeof idx);
    dt_error_clear();
    if (dt_idx_read(g_path, &idx) != DT_OK) {
        if (idx.data || idx.count) fail("error but out not cleared");
        if (!dt_error_msg()[0]) fail("error without a message");
        return 0;
    }
    size_t es = type_size(idx.type);
    if (!es || es != idx.elem_size) fail("type / elem_size");
    if (idx.ndim < 1 || idx.ndim > 8) fail("ndim out of range");
    size_t count = 1;
    for (int i = 0; i < idx.ndim; i++) {
        if (idx.dims[i] == 0) fail("zero dimension accepted");
        count *= idx.dims[i];
    }
    if (count != idx.count) fail("count != product of dims");
    if (!idx.data) fail("no data");
    size_t bytes = count * es;
    int gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    if (!gz && bytes + 4 + 4 * (size_t)idx.ndim != size) fail("plain payload size != file size - header");
    const uint8_t *p = idx.data;
    uint32_t s = 0;
    for (size_t i = 0; i < bytes; i++) s += p[i];
    g_sink += s;
    dt_idx_free(&idx);
    if (idx.data) fail("dt_idx_free left data");
    dt_idx_free(NULL);
    return 0;
}
