/* A zip reader for .npz archives: the central directory is the source of
 * truth (names, methods, sizes, offsets, zip64 extensions), the local header
 * only tells where a member's bytes start. np.savez writes every member with a
 * zip64 local header (force_zip64), so the local extra field is skipped by its
 * length and never interpreted. Sizes and offsets are checked against the
 * image before anything is read or allocated. */
#include "data_int.h"

#include <string.h>
#include <zlib.h>

#define ZIP_EOCD_SIG 0x06054b50u
#define ZIP_EOCD64_LOC_SIG 0x07064b50u
#define ZIP_EOCD64_SIG 0x06064b50u
#define ZIP_CDIR_SIG 0x02014b50u
#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_MAX_MEMBERS 65536
/* Deflate cannot compress better than about 1032:1; a larger claim is forged. */
#define ZIP_MAX_RATIO 1032u

/* A member's name for a message (a compound literal buffer per use). */
#define ZN(p, n) data_clean((p), (n), (char[96]){0}, 96)

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* Central directory size, offset and entry count, from the (zip64) end records. */
static dt_status zip_find_dir(const uint8_t *buf, size_t len, const char *name, uint64_t *cd_off,
                              uint64_t *cd_size, uint64_t *count) {
    if (len < 22) return dt_errorf(DT_ERR_FORMAT, "%s: not a zip archive (%zu bytes; a .npz is a zip file made by np.savez)", name, len);
    size_t lo = len > 22 + 65535 ? len - 22 - 65535 : 0;
    size_t at = SIZE_MAX;
    for (size_t i = len - 22 + 1; i-- > lo;)
        if (rd32(buf + i) == ZIP_EOCD_SIG) {
            at = i;
            break;
        }
    if (at == SIZE_MAX)
        return dt_errorf(DT_ERR_FORMAT, "%s: no zip end-of-directory record: truncated or not a zip archive; save it again with np.savez", name);
    const uint8_t *e = buf + at;
    if (rd16(e + 4) != 0 || rd16(e + 6) != 0)
        return dt_errorf(DT_ERR_FORMAT, "%s: multi-disk zip archives are not supported", name);
    *count = rd16(e + 10);
    *cd_size = rd32(e + 12);
    *cd_off = rd32(e + 16);
    if (at >= 20 && rd32(buf + at - 20) == ZIP_EOCD64_LOC_SIG) {
        uint64_t off64 = rd64(buf + at - 20 + 8);
        if (off64 > len || len - off64 < 56 || rd32(buf + off64) != ZIP_EOCD64_SIG)
            return dt_errorf(DT_ERR_FORMAT, "%s: bad zip64 end-of-directory record; the archive is corrupt", name);
        const uint8_t *z = buf + off64;
        *count = rd64(z + 32);
        *cd_size = rd64(z + 40);
        *cd_off = rd64(z + 48);
    }
    if (*cd_off > len || *cd_size > len - *cd_off)
        return dt_errorf(DT_ERR_FORMAT, "%s: the zip directory (offset %llu, %llu bytes) lies outside the %zu-byte file; truncated archive",
                         name, (unsigned long long)*cd_off, (unsigned long long)*cd_size, len);
    if (*count > ZIP_MAX_MEMBERS)
        return dt_errorf(DT_ERR_FORMAT, "%s: %llu zip members (at most %d)", name, (unsigned long long)*count, ZIP_MAX_MEMBERS);
    return DT_OK;
}

/* The zip64 extra field (id 1) holds, in order, the fields that are 0xFFFFFFFF. */
static dt_status zip_extra64(const uint8_t *x, size_t xlen, const char *name, uint64_t *usize,
                             uint64_t *csize, uint64_t *off, bool need_u, bool need_c, bool need_o) {
    while (xlen >= 4) {
        uint16_t id = rd16(x), sz = rd16(x + 2);
        if ((size_t)sz > xlen - 4) break;
        if (id == 1) {
            const uint8_t *p = x + 4;
            size_t left = sz;
            uint64_t *want[3] = {need_u ? usize : NULL, need_c ? csize : NULL, need_o ? off : NULL};
            for (int i = 0; i < 3; i++) {
                if (!want[i]) continue;
                if (left < 8) return dt_errorf(DT_ERR_FORMAT, "%s: short zip64 extra field; the archive is corrupt", name);
                *want[i] = rd64(p);
                p += 8;
                left -= 8;
            }
            return DT_OK;
        }
        x += 4 + sz;
        xlen -= 4 + (size_t)sz;
    }
    if (need_u || need_c || need_o) return dt_errorf(DT_ERR_FORMAT, "%s: a zip64 member without its zip64 extra field; the archive is corrupt", name);
    return DT_OK;
}

/* Member k's directory record at *pos into e; *pos moves past it. */
static dt_status zip_entry(const uint8_t *buf, size_t len, const char *name, size_t cd_end, size_t *pos,
                           data_zip_entry *e) {
    size_t p = *pos;
    if (cd_end - p < 46 || rd32(buf + p) != ZIP_CDIR_SIG)
        return dt_errorf(DT_ERR_FORMAT, "%s: bad zip directory record at offset %zu; the archive is corrupt", name, p);
    const uint8_t *c = buf + p;
    uint16_t flags = rd16(c + 8), nlen = rd16(c + 28), xlen = rd16(c + 30), clen = rd16(c + 32);
    if (cd_end - p - 46 < (size_t)nlen + xlen + clen)
        return dt_errorf(DT_ERR_FORMAT, "%s: zip directory record at offset %zu runs past the directory", name, p);
    e->method = rd16(c + 10);
    e->crc = rd32(c + 16);
    e->csize = rd32(c + 20);
    e->usize = rd32(c + 24);
    uint64_t off = rd32(c + 42);
    e->name = (const char *)c + 46;
    e->name_len = nlen;
    dt_status st = zip_extra64(c + 46 + nlen, xlen, name, &e->usize, &e->csize, &off, e->usize == 0xFFFFFFFFu,
                               e->csize == 0xFFFFFFFFu, off == 0xFFFFFFFFu);
    if (st) return st;
    if (flags & 1) return dt_errorf(DT_ERR_FORMAT, "%s: member '%s' is encrypted; save it again without encryption", name, ZN(e->name, nlen));
    if (off > len || len - off < 30 || rd32(buf + off) != ZIP_LOCAL_SIG)
        return dt_errorf(DT_ERR_FORMAT, "%s: member '%s': bad local header at offset %llu; truncated or corrupt archive", name,
                         ZN(e->name, nlen), (unsigned long long)off);
    uint64_t data = off + 30 + rd16(buf + off + 26) + rd16(buf + off + 28);
    if (data > len || e->csize > len - data)
        return dt_errorf(DT_ERR_FORMAT, "%s: member '%s' (%llu bytes at offset %llu) runs past the end of the %zu-byte file; truncated archive",
                         name, ZN(e->name, nlen), (unsigned long long)e->csize, (unsigned long long)data, len);
    e->data = buf + data;
    *pos = p + 46 + nlen + xlen + clen;
    return DT_OK;
}

dt_status data_zip_list(const uint8_t *buf, size_t len, const char *name, data_zip_entry **entries, int *n) {
    *entries = NULL;
    *n = 0;
    if (len < 4 || rd32(buf) != ZIP_LOCAL_SIG)
        return dt_errorf(DT_ERR_FORMAT, "%s: not a zip archive (no PK\\3\\4 signature); a .npz is written by np.savez", name);
    uint64_t cd_off = 0, cd_size = 0, count = 0;
    dt_status st = zip_find_dir(buf, len, name, &cd_off, &cd_size, &count);
    if (st) return st;
    data_zip_entry *es = dt_calloc(count ? (size_t)count : 1, sizeof *es);
    if (!es) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory listing the archive", name);
    size_t pos = (size_t)cd_off, end = (size_t)(cd_off + cd_size);
    for (uint64_t k = 0; k < count && !st; k++) st = zip_entry(buf, len, name, end, &pos, &es[k]);
    if (st) {
        dt_free(es);
        return st;
    }
    *entries = es;
    *n = (int)count;
    return DT_OK;
}

static dt_status zip_inflate(const data_zip_entry *e, const char *name, void **owned) {
    if (e->usize > e->csize * ZIP_MAX_RATIO + 1024 || e->usize > SIZE_MAX / 2)
        return dt_errorf(DT_ERR_FORMAT, "%s: member '%s' claims %llu bytes from %llu compressed; forged or corrupt archive",
                         name, ZN(e->name, e->name_len), (unsigned long long)e->usize, (unsigned long long)e->csize);
    /* One spare byte: a stream longer than it says fills it instead of stalling. */
    size_t cap = (size_t)e->usize + 1;
    uint8_t *out = dt_malloc(cap);
    if (!out) return dt_errorf(DT_ERR_NOMEM, "%s: cannot allocate %llu bytes to inflate '%s'", name,
                               (unsigned long long)e->usize, ZN(e->name, e->name_len));
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
        dt_free(out);
        return dt_errorf(DT_ERR_NOMEM, "%s: zlib out of memory", name);
    }
    /* avail_in/avail_out are 32-bit: feed and drain in chunks of at most 1 GiB. */
    const uint8_t *in = e->data;
    size_t in_left = (size_t)e->csize, out_done = 0;
    int zr = Z_OK;
    for (;;) {
        if (z.avail_in == 0 && in_left) {
            uInt c = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            z.next_in = (Bytef *)(uintptr_t)in;
            z.avail_in = c;
            in += c;
            in_left -= c;
        }
        if (z.avail_out == 0 && out_done < cap) {
            uInt o = cap - out_done > (1u << 30) ? (1u << 30) : (uInt)(cap - out_done);
            z.next_out = out + out_done;
            z.avail_out = o;
        }
        uInt before = z.avail_out;
        zr = inflate(&z, Z_NO_FLUSH);
        out_done += before - z.avail_out;
        if (zr != Z_OK) break;
    }
    inflateEnd(&z);
    dt_status st = DT_OK;
    if (zr != Z_STREAM_END || out_done != e->usize)
        st = dt_errorf(DT_ERR_FORMAT, "%s: member '%s': corrupt deflate data (%s, %llu of %llu bytes); save the archive again",
                       name, ZN(e->name, e->name_len), zr == Z_STREAM_END ? "wrong size" : zr == Z_DATA_ERROR ? "bad data" : "ends early",
                       (unsigned long long)out_done, (unsigned long long)e->usize);
    else {
        uLong crc = crc32(0L, Z_NULL, 0);
        for (uint64_t done = 0; done < e->usize;) {
            uInt c = e->usize - done > (1u << 30) ? (1u << 30) : (uInt)(e->usize - done);
            crc = crc32(crc, out + done, c);
            done += c;
        }
        if ((uint32_t)crc != e->crc)
            st = dt_errorf(DT_ERR_FORMAT, "%s: member '%s': CRC-32 mismatch; the archive is corrupt", name, ZN(e->name, e->name_len));
    }
    if (st) {
        dt_free(out);
        return st;
    }
    *owned = out;
    return DT_OK;
}

dt_status data_zip_read(const data_zip_entry *e, const char *name, const void **bytes, void **owned) {
    *owned = NULL;
    *bytes = NULL;
    if (e->method == 0) {
        if (e->csize != e->usize)
            return dt_errorf(DT_ERR_FORMAT, "%s: stored member '%s' has sizes %llu and %llu; the archive is corrupt", name,
                             ZN(e->name, e->name_len), (unsigned long long)e->csize, (unsigned long long)e->usize);
        *bytes = e->data;
        return DT_OK;
    }
    if (e->method != 8)
        return dt_errorf(DT_ERR_FORMAT, "%s: member '%s' uses zip method %d (only stored and deflated are read: np.savez, np.savez_compressed)",
                         name, ZN(e->name, e->name_len), e->method);
    dt_status st = zip_inflate(e, name, owned);
    if (!st) *bytes = *owned;
    return st;
}
