/* IDX reader (the MNIST / Fashion-MNIST container).
 *
 * Layout: two zero bytes, a type byte, a dimension count, then ndim big-endian
 * u32 dimensions, then the payload of prod(dims) big-endian elements. The file
 * may be gzipped: gzopen/gzread detect the gzip magic and read plain files
 * transparently, so one code path serves both. Every check that can fail names
 * the file and the fault, because a half-downloaded dataset is the usual cause
 * and the user needs to know which file to fetch again. */
#include "dtrain/data.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* A forged or corrupt header could ask for terabytes; real IDX sets are well
 * below this (Fashion-MNIST train images are 47 MB). */
#define IDX_MAX_BYTES ((size_t)4 << 30)

/* How many trailing bytes we count before giving up and saying "at least". */
#define IDX_TRAIL_COUNT_MAX ((size_t)1 << 20)

static size_t idx_elem_size(uint8_t type) {
    switch (type) {
    case 0x08: return 1; /* u8 */
    case 0x09: return 1; /* i8 */
    case 0x0B: return 2; /* i16 */
    case 0x0C: return 4; /* i32 */
    case 0x0D: return 4; /* f32 */
    case 0x0E: return 8; /* f64 */
    default: return 0;
    }
}

static const char *idx_type_name(uint8_t type) {
    switch (type) {
    case 0x08: return "u8";
    case 0x09: return "i8";
    case 0x0B: return "i16";
    case 0x0C: return "i32";
    case 0x0D: return "f32";
    case 0x0E: return "f64";
    default: return "unknown";
    }
}

/* "60000x28x28" into buf. */
static void idx_dims_str(const uint32_t *dims, int ndim, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, i ? "x%u" : "%u", (unsigned)dims[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Turns the zlib error state of f into a status and message. `what` says which
 * part of the file was being read. */
static dt_status idx_gz_error(gzFile f, const char *path, const char *what) {
    int errnum = Z_OK;
    const char *zmsg = gzerror(f, &errnum);
    if (errnum == Z_ERRNO)
        return dt_errorf(DT_ERR_IO, "%s: read failed in the %s: %s", path, what, strerror(errno));
    if (errnum == Z_MEM_ERROR) return dt_errorf(DT_ERR_NOMEM, "%s: zlib out of memory", path);
    /* zlib prefixes its message with the path, which ours already leads with.
     * No "where" here: zlib decompresses ahead of what was asked for. */
    size_t plen = strlen(path);
    if (!zmsg) zmsg = "unknown zlib error";
    if (!strncmp(zmsg, path, plen) && !strncmp(zmsg + plen, ": ", 2)) zmsg += plen + 2;
    if (errnum == Z_BUF_ERROR)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: truncated: the gzip stream ends early (%s); re-download the file",
                         path, zmsg);
    return dt_errorf(DT_ERR_FORMAT, "%s: corrupt gzip data (%s); re-download the file", path,
                     zmsg);
}

/* Reads up to n bytes; *got is how many arrived before end of file. Returns
 * false on a zlib or system error (a short read at end of file is not one). */
static bool idx_read(gzFile f, void *buf, size_t n, size_t *got) {
    uint8_t *p = buf;
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30; /* gzread takes unsigned */
        int r = gzread(f, p + *got, (unsigned)want);
        if (r < 0) return false;
        if (r == 0) break;
        *got += (size_t)r;
    }
    if (*got < n) {
        /* zlib reports a cut-off gzip stream as a short read plus Z_BUF_ERROR. */
        int errnum = Z_OK;
        gzerror(f, &errnum);
        if (errnum != Z_OK) return false;
    }
    return true;
}

static void idx_to_host(void *data, size_t count, size_t elem_size) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    (void)data; (void)count; (void)elem_size;
#else
    uint8_t *p = data;
    if (elem_size == 2) {
        for (size_t i = 0; i < count; i++, p += 2) {
            uint8_t t = p[0]; p[0] = p[1]; p[1] = t;
        }
    } else if (elem_size == 4) {
        for (size_t i = 0; i < count; i++, p += 4) {
            uint32_t v;
            memcpy(&v, p, 4);
            v = __builtin_bswap32(v);
            memcpy(p, &v, 4);
        }
    } else if (elem_size == 8) {
        for (size_t i = 0; i < count; i++, p += 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            v = __builtin_bswap64(v);
            memcpy(p, &v, 8);
        }
    }
#endif
}

/* What the header says, for the later checks and their messages. */
typedef struct idx_head {
    uint8_t type;
    int ndim;
    size_t elem, count, bytes;
    size_t head_bytes;   /* 4 + 4 * ndim */
    char dimstr[128];    /* "60000x28x28" */
} idx_head;

/* Opens path (plain or gzipped), refusing what is not a readable file. */
static dt_status idx_open(const char *path, gzFile *f) {
    struct stat sb;
    if (stat(path, &sb) != 0) return dt_errorf(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return dt_errorf(DT_ERR_IO, "%s: is a directory, expected an IDX file", path);
    errno = 0;
    *f = gzopen(path, "rb");
    if (!*f)
        return errno ? dt_errorf(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno))
                     : dt_errorf(DT_ERR_NOMEM, "%s: zlib out of memory", path);
    gzbuffer(*f, 1 << 17);
    return DT_OK;
}

/* The first four bytes: magic zeros, element type, dimension count. */
static dt_status idx_read_magic(gzFile f, const char *path, idx_head *h) {
    uint8_t head[4];
    size_t got = 0;
    if (!idx_read(f, head, sizeof head, &got)) return idx_gz_error(f, path, "header");
    if (got < sizeof head)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: truncated header: file has %zu bytes, an IDX header needs at least 4",
                         path, got);
    if (head[0] != 0 || head[1] != 0)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: bad leading bytes %02x %02x (an IDX file starts with two zero "
                         "bytes); not an IDX file",
                         path, head[0], head[1]);
    h->type = head[2];
    h->elem = idx_elem_size(head[2]);
    if (h->elem == 0)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: unknown IDX type byte 0x%02x (known: 0x08 u8, 0x09 i8, 0x0B i16, "
                         "0x0C i32, 0x0D f32, 0x0E f64)",
                         path, head[2]);
    h->ndim = head[3];
    if (h->ndim < 1 || h->ndim > 8)
        return dt_errorf(DT_ERR_FORMAT, "%s: bad dimension count %d in the header (IDX allows 1..8)",
                         path, h->ndim);
    return DT_OK;
}

/* The big-endian dimensions into dims. */
static dt_status idx_read_dims(gzFile f, const char *path, idx_head *h, uint32_t *dims) {
    uint8_t dbytes[32];
    size_t dlen = (size_t)h->ndim * 4, got = 0;
    h->head_bytes = 4 + dlen;
    if (!idx_read(f, dbytes, dlen, &got)) return idx_gz_error(f, path, "header");
    if (got < dlen)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: truncated header: %d dimensions need %zu header bytes but the file "
                         "has %zu",
                         path, h->ndim, 4 + dlen, 4 + got);
    for (int i = 0; i < h->ndim; i++) {
        const uint8_t *b = dbytes + 4 * i;
        dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    }
    idx_dims_str(dims, h->ndim, h->dimstr, sizeof h->dimstr);
    return DT_OK;
}

/* Element count and payload bytes, refusing a forged header before anything
 * is allocated for it. */
static dt_status idx_size(const char *path, const uint32_t *dims, idx_head *h) {
    size_t count = 1, bytes = 0;
    bool overflow = false;
    for (int i = 0; i < h->ndim; i++) {
        if (dims[i] == 0)
            return dt_errorf(DT_ERR_FORMAT, "%s: dimension %d is 0 in the header (dims %s)", path, i,
                             h->dimstr);
        if (!overflow && !dt_size_mul(count, dims[i], &count)) overflow = true;
    }
    if (overflow || !dt_size_mul(count, h->elem, &bytes))
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: header dims %s (%s) overflow: the product does not fit in memory "
                         "sizes; forged or corrupt header",
                         path, h->dimstr, idx_type_name(h->type));
    if (bytes > IDX_MAX_BYTES)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: header says %s %s (%zu bytes), over the 4 GiB limit; forged or "
                         "corrupt header",
                         path, h->dimstr, idx_type_name(h->type), bytes);
    h->count = count;
    h->bytes = bytes;
    return DT_OK;
}

/* The payload into *data (dt_free), all of it. */
static dt_status idx_read_payload(gzFile f, const char *path, const idx_head *h, void **data) {
    *data = dt_malloc(h->bytes);
    if (!*data) return dt_errorf(DT_ERR_NOMEM, "%s: cannot allocate %zu bytes for the payload", path, h->bytes);
    size_t got = 0;
    if (!idx_read(f, *data, h->bytes, &got)) return idx_gz_error(f, path, "payload");
    if (got < h->bytes)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: truncated: header says %s %s (%zu bytes) but only %zu payload bytes "
                         "follow the %zu-byte header",
                         path, h->dimstr, idx_type_name(h->type), h->bytes, got, h->head_bytes);
    return DT_OK;
}

/* Anything after the payload means the header and the data disagree. */
static dt_status idx_check_end(gzFile f, const char *path, const idx_head *h) {
    uint8_t trail[4096];
    size_t extra = 0, got = 0;
    for (;;) {
        if (!idx_read(f, trail, sizeof trail, &got)) return idx_gz_error(f, path, "end of the file");
        extra += got;
        if (got < sizeof trail || extra >= IDX_TRAIL_COUNT_MAX) break;
    }
    if (extra)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: %s%zu trailing bytes after the payload (header says %s %s, %zu "
                         "bytes); header and data disagree",
                         path, extra >= IDX_TRAIL_COUNT_MAX ? "at least " : "", extra, h->dimstr,
                         idx_type_name(h->type), h->bytes);
    return DT_OK;
}

dt_status dt_idx_read(const char *path, dt_idx *out) {
    DT_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    gzFile f = NULL;
    void *data = NULL;
    idx_head h = {0};
    dt_status st = idx_open(path, &f);
    if (!st) st = idx_read_magic(f, path, &h);
    if (!st) st = idx_read_dims(f, path, &h, out->dims);
    if (!st) st = idx_size(path, out->dims, &h);
    if (!st) st = idx_read_payload(f, path, &h, &data);
    if (!st) st = idx_check_end(f, path, &h);
    if (st) goto done;
    idx_to_host(data, h.count, h.elem);
    out->type = h.type;
    out->ndim = h.ndim;
    out->count = h.count;
    out->elem_size = h.elem;
    out->data = data;
    data = NULL;
done:
    if (f) gzclose(f);
    dt_free(data);
    if (st != DT_OK) memset(out, 0, sizeof *out);
    return st;
}

void dt_idx_free(dt_idx *idx) {
    if (!idx) return;
    dt_free(idx->data);
    memset(idx, 0, sizeof *idx);
}
