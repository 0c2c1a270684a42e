/* safetensors writer: builds the header with jansson in insertion order, pads
 * it with spaces to a multiple of 8 (so the data buffer is 8-byte aligned in
 * the file) and writes atomically: temporary file in the same directory,
 * fsync, rename, fsync of the directory. Cost: one write of the bytes and two
 * fsyncs. */
#include "st_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct st_entry {
    char *name;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_ST_MAX_DIMS];
    size_t bytes;
    const void *data; /* borrowed */
} st_entry;

struct dt_st_writer {
    st_entry *entries; /* (count), insertion order */
    int count, cap;
    json_t *meta;      /* object of strings */
};

/* jansson refuses keys and strings that are not UTF-8. */
static bool utf8_ok(const char *s) {
    json_t *j = json_string(s);
    json_decref(j);
    return j != NULL;
}

dt_status dt_st_writer_create(dt_st_writer **out) {
    *out = NULL;
    dt_st_writer *w = dt_calloc(1, sizeof *w);
    if (!w) return dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory");
    w->meta = json_object();
    if (!w->meta) {
        dt_free(w);
        return dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory");
    }
    *out = w;
    return DT_OK;
}

void dt_st_writer_destroy(dt_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->count; i++) dt_free(w->entries[i].name);
    dt_free(w->entries);
    json_decref(w->meta);
    dt_free(w);
}

dt_status dt_st_writer_add(dt_st_writer *w, const char *name, dt_dtype dtype, int ndim,
                           const int64_t *shape, const void *data) {
    if (!name || !name[0]) return dt_errorf(DT_ERR_INVALID, "safetensors writer: empty tensor name");
    char nb[96];
    const char *pn = dt_st_printable(name, nb, sizeof nb);
    if (strcmp(name, ST_META_KEY) == 0)
        return dt_errorf(DT_ERR_INVALID, "safetensors writer: tensor name '%s' is reserved", name);
    if (!utf8_ok(name))
        return dt_errorf(DT_ERR_INVALID, "safetensors writer: tensor name '%s' is not valid UTF-8", pn);
    for (int i = 0; i < w->count; i++)
        if (strcmp(w->entries[i].name, name) == 0)
            return dt_errorf(DT_ERR_INVALID, "safetensors writer: duplicate tensor name '%s'", pn);
    if ((unsigned)dtype >= DT_DTYPE_COUNT)
        return dt_errorf(DT_ERR_INVALID, "safetensors writer: tensor '%s': bad dtype %d", pn, (int)dtype);
    if (ndim < 0 || ndim > DT_ST_MAX_DIMS)
        return dt_errorf(DT_ERR_INVALID, "safetensors writer: tensor '%s': %d dimensions (0..%d allowed)",
                         pn, ndim, DT_ST_MAX_DIMS);
    st_entry e = {.dtype = dtype, .ndim = ndim, .data = data};
    size_t bytes = dt_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return dt_errorf(DT_ERR_INVALID, "safetensors writer: tensor '%s': negative dimension %lld",
                             pn, (long long)shape[d]);
        e.shape[d] = shape[d];
        if (!dt_size_mul(bytes, (size_t)shape[d], &bytes))
            return dt_errorf(DT_ERR_INVALID, "safetensors writer: tensor '%s': size overflows", pn);
    }
    if (bytes > (size_t)INT64_MAX / 2)
        return dt_errorf(DT_ERR_INVALID, "safetensors writer: tensor '%s': too large", pn);
    if (bytes && !data)
        return dt_errorf(DT_ERR_INVALID, "safetensors writer: tensor '%s': NULL data", pn);
    e.bytes = bytes;
    if (w->count == w->cap) {
        int ncap = w->cap ? 2 * w->cap : 16;
        st_entry *ne = dt_realloc_array(w->entries, (size_t)ncap, sizeof *ne);
        if (!ne) return dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory");
        w->entries = ne;
        w->cap = ncap;
    }
    e.name = dt_strdup(name);
    if (!e.name) return dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory");
    w->entries[w->count++] = e;
    return DT_OK;
}

/* A later value for the same key replaces the earlier one. */
dt_status dt_st_writer_meta(dt_st_writer *w, const char *key, const char *value) {
    if (!key || !value) return dt_errorf(DT_ERR_INVALID, "safetensors writer: NULL metadata key or value");
    char kb[96];
    if (!utf8_ok(key) || !utf8_ok(value))
        return dt_errorf(DT_ERR_INVALID, "safetensors writer: metadata '%s' is not valid UTF-8",
                         dt_st_printable(key, kb, sizeof kb));
    if (json_object_set_new(w->meta, key, json_string(value)) != 0)
        return dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory");
    return DT_OK;
}

/* The header JSON padded with spaces to a multiple of 8; caller frees. */
static dt_status build_header(const dt_st_writer *w, char **out, size_t *out_len) {
    dt_status st = DT_OK;
    char *text = NULL;
    json_t *root = json_object();
    if (!root) return dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory");
    if (json_object_size(w->meta) && json_object_set(root, ST_META_KEY, w->meta) != 0) {
        st = dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory");
        goto done;
    }
    size_t off = 0;
    for (int i = 0; i < w->count; i++) {
        const st_entry *e = &w->entries[i];
        json_t *shape = json_array();
        json_t *offs = json_pack("[II]", (json_int_t)off, (json_int_t)(off + e->bytes));
        json_t *ent = json_object();
        bool ok = shape && offs && ent;
        for (int d = 0; ok && d < e->ndim; d++)
            ok = json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) == 0;
        ok = ok && json_object_set_new(ent, "dtype", json_string(dt_dtype_name(e->dtype))) == 0;
        ok = ok && json_object_set(ent, "shape", shape) == 0;
        ok = ok && json_object_set(ent, "data_offsets", offs) == 0;
        ok = ok && json_object_set(root, e->name, ent) == 0;
        json_decref(shape);
        json_decref(offs);
        json_decref(ent);
        if (!ok) {
            st = dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory building the header");
            goto done;
        }
        off += e->bytes;
    }
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) {
        st = dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory building the header");
        goto done;
    }
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    char *p = dt_malloc(padded);
    if (!p) {
        st = dt_errorf(DT_ERR_NOMEM, "safetensors writer: out of memory building the header");
        goto done;
    }
    memcpy(p, text, len);
    memset(p + len, ' ', padded - len);
    *out = p;
    *out_len = padded;
done:
    free(text);
    json_decref(root);
    return st;
}

/* fsync of the directory makes the rename durable. Some file systems refuse
 * fsync on directories (EINVAL); nothing more can be done there. */
static dt_status sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return dt_errorf(DT_ERR_IO, "%s: cannot open directory to fsync: %s", dir, strerror(errno));
    dt_status st = DT_OK;
    if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
        st = dt_errorf(DT_ERR_IO, "%s: fsync of directory failed: %s", dir, strerror(errno));
    close(fd);
    return st;
}

dt_status dt_st_writer_write(dt_st_writer *w, const char *path) {
    dt_status st = DT_OK;
    char *header = NULL, *dir = NULL, *tmp = NULL;
    FILE *fp = NULL;
    bool tmp_exists = false;
    size_t hlen = 0;

    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!base[0]) return dt_errorf(DT_ERR_INVALID, "%s: path names a directory, not a file", path);
    size_t dlen = slash ? (size_t)(slash - path) : 1;
    size_t tcap = strlen(path) + 48;
    dir = dt_malloc(dlen + 2);
    tmp = dt_malloc(tcap);
    if (!dir || !tmp) {
        st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (!slash) strcpy(dir, ".");
    else if (dlen == 0) strcpy(dir, "/");
    else { memcpy(dir, path, dlen); dir[dlen] = '\0'; }
    snprintf(tmp, tcap, "%s%s.%s.tmp.%ld", slash ? dir : "", slash && dlen ? "/" : "", base,
             (long)getpid());

    if ((st = build_header(w, &header, &hlen)) != DT_OK) goto done;

    fp = fopen(tmp, "wb");
    if (!fp) {
        st = dt_errorf(DT_ERR_IO, "%s: cannot create temporary file: %s", tmp, strerror(errno));
        goto done;
    }
    tmp_exists = true;
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    bool ok = fwrite(lenbuf, 1, 8, fp) == 8 && fwrite(header, 1, hlen, fp) == hlen;
    for (int i = 0; ok && i < w->count; i++)
        ok = w->entries[i].bytes == 0 ||
             fwrite(w->entries[i].data, 1, w->entries[i].bytes, fp) == w->entries[i].bytes;
    if (!ok || fflush(fp) != 0) {
        st = dt_errorf(DT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (fsync(fileno(fp)) != 0) {
        st = dt_errorf(DT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
        goto done;
    }
    int rc = fclose(fp);
    fp = NULL;
    if (rc != 0) {
        st = dt_errorf(DT_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        st = dt_errorf(DT_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        goto done;
    }
    tmp_exists = false;
    st = sync_dir(dir);
done:
    if (fp) fclose(fp);
    if (tmp_exists) unlink(tmp);
    dt_free(header);
    dt_free(dir);
    dt_free(tmp);
    return st;
}
