/* safetensors reader (the writer is safetensors_write.c).
 *
 * The reader trusts nothing: every number in the header is range-checked before
 * it is used as a size or an offset, and the tensors must tile the data buffer
 * exactly, as the reference implementation (huggingface/safetensors) demands.
 * Data is little-endian; this file assumes a little-endian host (checked in
 * st_internal.h) so tensor bytes are copied, never swapped. Cost: one read of
 * the file and one pass over the header. */
#include "st_internal.h"

#include "dtrain/testing.h" /* fp16/bf16 conversions */

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000) /* the reference reader's cap */

static const char *const g_dtype_names[DT_DTYPE_COUNT] = {
    [DT_F64] = "F64", [DT_F32] = "F32", [DT_F16] = "F16", [DT_BF16] = "BF16",
    [DT_I64] = "I64", [DT_I32] = "I32", [DT_I16] = "I16", [DT_I8] = "I8",
    [DT_U8] = "U8",   [DT_BOOL] = "BOOL",
};
static const size_t g_dtype_sizes[DT_DTYPE_COUNT] = {
    [DT_F64] = 8, [DT_F32] = 4, [DT_F16] = 2, [DT_BF16] = 2, [DT_I64] = 8,
    [DT_I32] = 4, [DT_I16] = 2, [DT_I8] = 1,  [DT_U8] = 1,   [DT_BOOL] = 1,
};

const char *dt_dtype_name(dt_dtype t) {
    if ((unsigned)t >= DT_DTYPE_COUNT) return "?";
    return g_dtype_names[t];
}

size_t dt_dtype_size(dt_dtype t) {
    if ((unsigned)t >= DT_DTYPE_COUNT) return 0;
    return g_dtype_sizes[t];
}

static bool dtype_from_name(const char *s, dt_dtype *out) {
    for (int i = 0; i < DT_DTYPE_COUNT; i++) {
        if (strcmp(s, g_dtype_names[i]) == 0) {
            *out = (dt_dtype)i;
            return true;
        }
    }
    return false;
}

struct dt_st_file {
    char *name;           /* for error messages */
    uint8_t *owned;       /* whole file when read by dt_st_open, else NULL */
    const uint8_t *data;  /* the byte buffer after the header */
    size_t data_len;
    int count;
    dt_st_tensor *tensors; /* (count), sorted by data offsets */
    int meta_count;
    char **meta_keys;     /* (meta_count) */
    char **meta_vals;     /* (meta_count) */
};

/* Names come from untrusted JSON: keep error messages on one line and short. */
const char *dt_st_printable(const char *s, char *buf, size_t cap) {
    size_t i = 0, j = 0;
    for (; s[i] && j + 4 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[j++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (s[i]) { buf[j++] = '.'; buf[j++] = '.'; buf[j++] = '.'; }
    buf[j] = '\0';
    return buf;
}

/* "[1024,784]" */
static void shape_str(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t j = 0;
    j += (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && j < cap; d++)
        j += (size_t)snprintf(buf + j, cap - j, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (j < cap) snprintf(buf + j, cap - j, "]");
}

void dt_st_close(dt_st_file *f) {
    if (!f) return;
    if (f->tensors)
        for (int i = 0; i < f->count; i++) dt_free(f->tensors[i].name);
    for (int i = 0; i < f->meta_count; i++) {
        dt_free(f->meta_keys[i]);
        dt_free(f->meta_vals[i]);
    }
    dt_free(f->tensors);
    dt_free(f->meta_keys);
    dt_free(f->meta_vals);
    dt_free(f->owned);
    dt_free(f->name);
    dt_free(f);
}

/* Parses one header entry into *t (name already set). */
static dt_status parse_entry(const char *fname, const char *key, json_t *val, size_t data_len,
                             dt_st_tensor *t) {
    char nb[96];
    const char *pn = dt_st_printable(key, nb, sizeof nb);
    if (!json_is_object(val))
        return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': header entry is not a JSON object", fname, pn);

    json_t *jd = json_object_get(val, "dtype");
    if (!jd) return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': missing \"dtype\"", fname, pn);
    if (!json_is_string(jd))
        return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is not a string", fname, pn);
    if (!dtype_from_name(json_string_value(jd), &t->dtype)) {
        char db[32];
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: tensor '%s': unknown dtype '%s' (expected F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)",
                         fname, pn, dt_st_printable(json_string_value(jd), db, sizeof db));
    }

    json_t *js = json_object_get(val, "shape");
    if (!js) return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': missing \"shape\"", fname, pn);
    if (!json_is_array(js))
        return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': \"shape\" is not an array", fname, pn);
    size_t nd = json_array_size(js);
    if (nd > DT_ST_MAX_DIMS)
        return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': shape has %zu dimensions, at most %d supported",
                         fname, pn, nd, DT_ST_MAX_DIMS);
    t->ndim = (int)nd;
    size_t numel = 1;
    bool overflow = false;
    for (size_t d = 0; d < nd; d++) {
        json_t *e = json_array_get(js, d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                             fname, pn, d);
        t->shape[d] = (int64_t)json_integer_value(e);
        if (!overflow && !dt_size_mul(numel, (size_t)t->shape[d], &numel)) overflow = true;
    }
    char sb[200];
    size_t bytes = 0;
    /* A zero dimension makes the product 0 even if other factors overflow. */
    for (size_t d = 0; d < nd; d++)
        if (t->shape[d] == 0) { overflow = false; numel = 0; }
    if (overflow || !dt_size_mul(numel, dt_dtype_size(t->dtype), &bytes)) {
        shape_str(t->shape, t->ndim, sb, sizeof sb);
        return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': shape %s overflows the size of a tensor",
                         fname, pn, sb);
    }
    t->numel = numel;

    json_t *jo = json_object_get(val, "data_offsets");
    if (!jo) return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': missing \"data_offsets\"", fname, pn);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is not [begin, end] integers",
                         fname, pn);
    json_int_t b = json_integer_value(json_array_get(jo, 0));
    json_int_t e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b)
        return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld,%lld] are not 0 <= begin <= end",
                         fname, pn, (long long)b, (long long)e);
    if ((unsigned long long)e > (unsigned long long)data_len)
        return dt_errorf(DT_ERR_FORMAT,
                         "%s: tensor '%s': data_offsets [%lld,%lld] run past the end of the %zu-byte data buffer",
                         fname, pn, (long long)b, (long long)e, data_len);
    t->begin = (size_t)b;
    t->end = (size_t)e;
    if (bytes != t->end - t->begin) {
        shape_str(t->shape, t->ndim, sb, sizeof sb);
        return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': %s shape %s needs %zu bytes but data_offsets span %zu",
                         fname, pn, dt_dtype_name(t->dtype), sb, bytes, t->end - t->begin);
    }
    return DT_OK;
}

static dt_status parse_meta(dt_st_file *f, const char *fname, json_t *meta) {
    if (!json_is_object(meta))
        return dt_errorf(DT_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", fname);
    size_t n = json_object_size(meta);
    f->meta_keys = dt_calloc(n, sizeof *f->meta_keys);
    f->meta_vals = dt_calloc(n, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals)
        return dt_errorf(DT_ERR_NOMEM, "%s: out of memory for %zu metadata entries", fname, n);
    const char *key;
    json_t *val;
    json_object_foreach(meta, key, val) {
        char kb[96];
        if (!json_is_string(val))
            return dt_errorf(DT_ERR_FORMAT, "%s: metadata '%s': value is not a string", fname,
                             dt_st_printable(key, kb, sizeof kb));
        int i = f->meta_count;
        f->meta_keys[i] = dt_strdup(key);
        f->meta_vals[i] = dt_strdup(json_string_value(val));
        if (f->meta_keys[i] || f->meta_vals[i]) f->meta_count++; /* close frees what exists */
        if (!f->meta_keys[i] || !f->meta_vals[i])
            return dt_errorf(DT_ERR_NOMEM, "%s: out of memory for metadata", fname);
    }
    return DT_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const dt_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Tensors sorted by offsets must cover [0, data_len) exactly once. */
static dt_status check_tiling(const dt_st_file *f, const char *fname) {
    size_t at = 0;
    for (int i = 0; i < f->count; i++) {
        const dt_st_tensor *t = &f->tensors[i];
        char nb[96];
        if (t->begin > at)
            return dt_errorf(DT_ERR_FORMAT, "%s: gap in the data buffer: bytes [%zu,%zu) belong to no tensor (next is '%s')",
                             fname, at, t->begin, dt_st_printable(t->name, nb, sizeof nb));
        if (t->begin < at)
            return dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%zu,%zu] overlap the previous tensor (which ends at %zu)",
                             fname, dt_st_printable(t->name, nb, sizeof nb), t->begin, t->end, at);
        at = t->end;
    }
    if (at != f->data_len)
        return dt_errorf(DT_ERR_FORMAT, "%s: data buffer is %zu bytes but the tensors cover only %zu",
                         fname, f->data_len, at);
    return DT_OK;
}

static dt_status parse_into(dt_st_file *f, const uint8_t *buf, size_t len, const char *fname) {
    if (len < 8)
        return dt_errorf(DT_ERR_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header length",
                         fname, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > ST_MAX_HEADER)
        return dt_errorf(DT_ERR_FORMAT, "%s: header length %llu exceeds the 100 MB limit (not a safetensors file?)",
                         fname, (unsigned long long)hlen);
    if (hlen > len - 8)
        return dt_errorf(DT_ERR_FORMAT, "%s: header length %llu runs past the end of the %zu-byte file (truncated?)",
                         fname, (unsigned long long)hlen, len);
    f->data = buf + 8 + hlen;
    f->data_len = len - 8 - (size_t)hlen;

    dt_status st = DT_OK;
    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen,
                              JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) {
        char eb[160];
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return dt_errorf(DT_ERR_FORMAT, "%s: duplicate tensor name in header: %s", fname,
                             dt_st_printable(jerr.text, eb, sizeof eb));
        return dt_errorf(DT_ERR_FORMAT, "%s: header is not valid JSON: %s (at byte %d of the header)",
                         fname, dt_st_printable(jerr.text, eb, sizeof eb), jerr.position);
    }
    if (!json_is_object(root)) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: header is JSON but not an object", fname);
        goto done;
    }
    json_t *meta = json_object_get(root, ST_META_KEY);
    size_t n = json_object_size(root) - (meta ? 1 : 0);
    if (n > (size_t)INT32_MAX) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: too many tensors (%zu)", fname, n);
        goto done;
    }
    f->tensors = dt_calloc(n, sizeof *f->tensors);
    if (!f->tensors) {
        st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory for %zu tensor entries", fname, n);
        goto done;
    }
    if (meta && (st = parse_meta(f, fname, meta)) != DT_OK) goto done;

    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, ST_META_KEY) == 0) continue;
        dt_st_tensor *t = &f->tensors[f->count];
        t->name = dt_strdup(key);
        if (!t->name) {
            st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory", fname);
            goto done;
        }
        f->count++;
        if ((st = parse_entry(fname, key, val, f->data_len, t)) != DT_OK) goto done;
    }
    qsort(f->tensors, (size_t)f->count, sizeof *f->tensors, cmp_offsets);
    st = check_tiling(f, fname);
done:
    json_decref(root);
    return st;
}

dt_status dt_st_parse(const uint8_t *buf, size_t len, const char *name, dt_st_file **out) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!buf && len) return dt_errorf(DT_ERR_INVALID, "%s: NULL buffer", name);
    dt_st_file *f = dt_calloc(1, sizeof *f);
    if (!f) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory", name);
    f->name = dt_strdup(name);
    if (!f->name) {
        dt_st_close(f);
        return dt_errorf(DT_ERR_NOMEM, "%s: out of memory", name);
    }
    dt_status st = parse_into(f, buf, len, f->name);
    if (st != DT_OK) {
        dt_st_close(f);
        return st;
    }
    *out = f;
    return DT_OK;
}

dt_status dt_st_open(const char *path, dt_st_file **out) {
    *out = NULL;
    dt_status st = DT_OK;
    uint8_t *buf = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return dt_errorf(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        st = dt_errorf(DT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = dt_errorf(DT_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    size_t len = (size_t)sb.st_size;
    buf = dt_malloc(len);
    if (!buf) {
        st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, len);
        goto done;
    }
    if (len && fread(buf, 1, len, fp) != len) {
        st = ferror(fp) ? dt_errorf(DT_ERR_IO, "%s: read failed: %s", path, strerror(errno))
                        : dt_errorf(DT_ERR_IO, "%s: file shrank while being read", path);
        goto done;
    }
    if ((st = dt_st_parse(buf, len, path, out)) != DT_OK) goto done;
    (*out)->owned = buf;
    buf = NULL;
done:
    fclose(fp);
    dt_free(buf);
    return st;
}

int dt_st_count(const dt_st_file *f) { return f->count; }

const dt_st_tensor *dt_st_get(const dt_st_file *f, int i) {
    if (i < 0 || i >= f->count) return NULL;
    return &f->tensors[i];
}

/* Linear: files hold hundreds of tensors at most and are looked up once. */
const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const void *dt_st_data(const dt_st_file *f, const dt_st_tensor *t) { return f->data + t->begin; }

const char *dt_st_meta(const dt_st_file *f, const char *key) {
    for (int i = 0; i < f->meta_count; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

int dt_st_meta_count(const dt_st_file *f) { return f->meta_count; }

void dt_st_meta_at(const dt_st_file *f, int i, const char **key, const char **value) {
    DT_ASSERT(i >= 0 && i < f->meta_count);
    *key = f->meta_keys[i];
    *value = f->meta_vals[i];
}

static char *tensor_label(const dt_st_file *f, const dt_st_tensor *t, char *buf, size_t cap) {
    char nb[96];
    snprintf(buf, cap, "%s: tensor '%s'", f->name, dt_st_printable(t->name, nb, sizeof nb));
    return buf;
}

dt_status dt_st_read_f32(const dt_st_file *f, const dt_st_tensor *t, float *dst, size_t n) {
    char lb[256];
    if (n != t->numel)
        return dt_errorf(DT_ERR_SHAPE, "%s: has %zu elements, caller expects %zu",
                         tensor_label(f, t, lb, sizeof lb), t->numel, n);
    const uint8_t *p = f->data + t->begin;
    switch (t->dtype) {
    case DT_F32:
        if (n) memcpy(dst, p, n * sizeof(float));
        return DT_OK;
    case DT_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, sizeof d);
            dst[i] = (float)d;
        }
        return DT_OK;
    case DT_F16:
    case DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, sizeof h);
            dst[i] = t->dtype == DT_F16 ? dt_f16_to_f32(h) : dt_bf16_to_f32(h);
        }
        return DT_OK;
    default:
        return dt_errorf(DT_ERR_FORMAT, "%s: dtype %s cannot be read as floats (expected F32, F16, BF16 or F64)",
                         tensor_label(f, t, lb, sizeof lb), dt_dtype_name(t->dtype));
    }
}

dt_status dt_st_read_i32(const dt_st_file *f, const dt_st_tensor *t, int32_t *dst, size_t n) {
    char lb[256];
    if (n != t->numel)
        return dt_errorf(DT_ERR_SHAPE, "%s: has %zu elements, caller expects %zu",
                         tensor_label(f, t, lb, sizeof lb), t->numel, n);
    const uint8_t *p = f->data + t->begin;
    switch (t->dtype) {
    case DT_I64:
        for (size_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, p + 8 * i, sizeof v);
            if (v < INT32_MIN || v > INT32_MAX)
                return dt_errorf(DT_ERR_FORMAT, "%s: element %zu = %lld does not fit in int32",
                                 tensor_label(f, t, lb, sizeof lb), i, (long long)v);
            dst[i] = (int32_t)v;
        }
        return DT_OK;
    case DT_I32:
        if (n) memcpy(dst, p, n * sizeof(int32_t));
        return DT_OK;
    case DT_I16:
        for (size_t i = 0; i < n; i++) {
            int16_t v;
            memcpy(&v, p + 2 * i, sizeof v);
            dst[i] = v;
        }
        return DT_OK;
    case DT_I8:
        for (size_t i = 0; i < n; i++) dst[i] = (int8_t)p[i];
        return DT_OK;
    case DT_U8:
        for (size_t i = 0; i < n; i++) dst[i] = p[i];
        return DT_OK;
    default:
        return dt_errorf(DT_ERR_FORMAT, "%s: dtype %s cannot be read as int32 (expected I64, I32, I16, I8 or U8)",
                         tensor_label(f, t, lb, sizeof lb), dt_dtype_name(t->dtype));
    }
}
