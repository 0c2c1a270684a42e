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
#include <zlib.h>

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

/* The header's payload size, from the first bytes of the (inflated) input;
 * 0 when there is no complete, known header. */
static uint64_t declared_bytes(const uint8_t *data, size_t size) {
    uint8_t h[36];
    size_t n = size < sizeof h ? size : sizeof h;
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
        z_stream z;
        memset(&z, 0, sizeof z);
        if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return 0;
        z.next_in = (Bytef *)(uintptr_t)data;
        z.avail_in = (uInt)(size > 65536 ? 65536 : size);
        z.next_out = h;
        z.avail_out = sizeof h;
        inflate(&z, Z_SYNC_FLUSH);
        n = sizeof h - z.avail_out;
        inflateEnd(&z);
    } else {
        memcpy(h, data, n);
    }
    if (n < 4 || h[3] < 1 || h[3] > 8 || n < 4 + 4 * (size_t)h[3]) return 0;
    uint64_t b = type_size(h[2]);
    for (int i = 0; i < h[3]; i++) {
        uint64_t d = (uint64_t)h[4 + 4 * i] << 24 | (uint64_t)h[5 + 4 * i] << 16 |
                     (uint64_t)h[6 + 4 * i] << 8 | h[7 + 4 * i];
        if (d && b > UINT64_MAX / d) return UINT64_MAX;
        b *= d;
    }
    return b;
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
    /* A header asking for 16 MiB .. 4 GiB (the reader's cap) of a short file
     * makes the reader allocate all of it before it finds the file short:
     * correct, but about a second per input under ASan, which would starve the
     * fuzzer. Smaller claims reach the same "truncated" path; larger ones are
     * refused before any allocation and still run. */
    uint64_t want = declared_bytes(data, size);
    if (want > ((uint64_t)16 << 20) && want <= ((uint64_t)4 << 30)) return 0;
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
