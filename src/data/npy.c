/* NumPy .npy and .npz readers.
 *
 * .npy layout: "\x93NUMPY", major and minor version bytes, the header length
 * (u16 for 1.0, u32 for 2.0 and 3.0), then the header: a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with
 * spaces and a newline, then the raw C-order data. The header is parsed as
 * that literal (keys in any order, each once), not with a general Python
 * parser. A .npz is a zip of .npy members (zipread.c). */
#include "data_int.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define NPY_MAX_HEADER ((size_t)1 << 20)

typedef struct npy_lex {
    const char *p, *end;
} npy_lex;

static void npy_blank(npy_lex *x) {
    while (x->p < x->end && isspace((unsigned char)*x->p)) x->p++;
}

static bool npy_eat(npy_lex *x, char c) {
    npy_blank(x);
    if (x->p < x->end && *x->p == c) {
        x->p++;
        return true;
    }
    return false;
}

/* A quoted string ('...' or "...", no escapes) into buf. */
static bool npy_string(npy_lex *x, char *buf, size_t cap) {
    npy_blank(x);
    if (x->p >= x->end || (*x->p != '\'' && *x->p != '"')) return false;
    char q = *x->p++;
    size_t n = 0;
    while (x->p < x->end && *x->p != q) {
        if (n + 1 >= cap) return false;
        buf[n++] = *x->p++;
    }
    if (x->p >= x->end) return false;
    x->p++;
    buf[n] = '\0';
    return true;
}

static bool npy_word(npy_lex *x, const char *w) {
    npy_blank(x);
    size_t n = strlen(w);
    if ((size_t)(x->end - x->p) < n || memcmp(x->p, w, n) != 0) return false;
    x->p += n;
    return true;
}

/* (d0, d1, ...) with an optional trailing comma; () is a scalar. */
static bool npy_shape(npy_lex *x, dt_array *a) {
    if (!npy_eat(x, '(')) return false;
    a->ndim = 0;
    for (;;) {
        if (npy_eat(x, ')')) return true;
        npy_blank(x);
        if (a->ndim == 8 || x->p >= x->end || !isdigit((unsigned char)*x->p)) return false;
        int64_t v = 0;
        while (x->p < x->end && isdigit((unsigned char)*x->p)) {
            if (v > (INT64_MAX - 9) / 10) return false;
            v = v * 10 + (*x->p++ - '0');
        }
        npy_blank(x);
        if (x->p < x->end && *x->p == 'L') x->p++; /* Python 2 longs */
        a->shape[a->ndim++] = v;
        if (!npy_eat(x, ',')) return npy_eat(x, ')');
    }
}

static bool npy_descr(const char *d, dt_elem *t) {
    static const struct { const char *s; dt_elem t; } tab[] = {
        {"|u1", DT_EL_U8}, {"<u1", DT_EL_U8}, {"|b1", DT_EL_U8}, {"|i1", DT_EL_I8}, {"<i1", DT_EL_I8},
        {"<u2", DT_EL_U16}, {"<i2", DT_EL_I16}, {"<u4", DT_EL_U32}, {"<i4", DT_EL_I32},
        {"<u8", DT_EL_U64}, {"<i8", DT_EL_I64}, {"<f4", DT_EL_F32}, {"<f8", DT_EL_F64},
    };
    char s[8];
    if (strlen(d) > 3) return false;
    snprintf(s, sizeof s, "%.7s", d);
    if (s[0] == '=') s[0] = '<';
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(s, tab[i].s)) {
            *t = tab[i].t;
            return true;
        }
    return false;
}

/* The dict literal h[0, n) into a (type, shape). */
static dt_status npy_header(const char *h, size_t n, const char *name, dt_array *a) {
    npy_lex x = {h, h + n};
    bool have_d = false, have_f = false, have_s = false, fortran = false;
    char descr[64] = "";
    if (!npy_eat(&x, '{')) goto bad;
    while (!npy_eat(&x, '}')) {
        char key[32];
        if (!npy_string(&x, key, sizeof key) || !npy_eat(&x, ':')) goto bad;
        if (!strcmp(key, "descr") && !have_d) {
            if (!npy_string(&x, descr, sizeof descr)) {
                return dt_errorf(DT_ERR_FORMAT, "%s: unsupported dtype (a structured or compound descr); save a plain numeric "
                                 "array (float32, float64, uint8, int8, (u)int16/32/64)", name);
            }
            have_d = true;
        } else if (!strcmp(key, "fortran_order") && !have_f) {
            if (npy_word(&x, "True")) fortran = true;
            else if (!npy_word(&x, "False")) goto bad;
            have_f = true;
        } else if (!strcmp(key, "shape") && !have_s) {
            if (!npy_shape(&x, a)) goto bad;
            have_s = true;
        } else {
            goto bad;
        }
        if (!npy_eat(&x, ',')) {
            if (!npy_eat(&x, '}')) goto bad;
            break;
        }
    }
    if (!have_d || !have_f || !have_s) goto bad;
    if (fortran)
        return dt_errorf(DT_ERR_FORMAT, "%s: the array is in Fortran order; only C order is read: save "
                         "np.ascontiguousarray(a)", name);
    char shown[64];
    if (!npy_descr(descr, &a->type))
        return dt_errorf(DT_ERR_FORMAT, "%s: unsupported dtype '%s' (read: <f4 <f8 |u1 |i1 |b1 <u2 <i2 <u4 <i4 <u8 <i8, "
                         "little-endian); convert with a.astype('<f4')", name, data_clean(descr, sizeof descr, shown, sizeof shown));
    return DT_OK;
bad:
    return dt_errorf(DT_ERR_FORMAT, "%s: malformed .npy header (expected {'descr': ..., 'fortran_order': ..., "
                     "'shape': (...)}); not a NumPy file or a corrupt one", name);
}

dt_status dt_npy_parse(const void *buf, size_t len, const char *name, dt_array *out) {
    DT_ASSERT(out && name && (buf || !len));
    memset(out, 0, sizeof *out);
    const uint8_t *b = buf;
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return dt_errorf(DT_ERR_FORMAT, "%s: not a .npy file (no \\x93NUMPY magic%s)", name, len < 10 ? ", too short" : "");
    int major = b[6];
    if (major < 1 || major > 3)
        return dt_errorf(DT_ERR_FORMAT, "%s: .npy format version %d.%d (read: 1.0, 2.0, 3.0)", name, major, b[7]);
    size_t hlen, hoff = major == 1 ? 10 : 12;
    if (len < hoff) return dt_errorf(DT_ERR_FORMAT, "%s: truncated .npy header (%zu bytes)", name, len);
    hlen = major == 1 ? (size_t)(b[8] | b[9] << 8)
                      : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (hlen > NPY_MAX_HEADER || hlen > len - hoff)
        return dt_errorf(DT_ERR_FORMAT, "%s: truncated .npy: the header says %zu bytes but the file has %zu after the preamble",
                         name, hlen, len - hoff);
    dt_status st = npy_header((const char *)b + hoff, hlen, name, out);
    if (st) {
        memset(out, 0, sizeof *out);
        return st;
    }
    size_t count = 1, bytes;
    bool over = false;
    for (int i = 0; i < out->ndim; i++)
        if (!dt_size_mul(count, (size_t)out->shape[i], &count)) over = true;
    if (over || !dt_size_mul(count, dt_elem_size(out->type), &bytes)) {
        memset(out, 0, sizeof *out);
        return dt_errorf(DT_ERR_FORMAT, "%s: the .npy shape overflows; corrupt header", name);
    }
    size_t have = len - hoff - hlen;
    if (have != bytes) {
        dt_elem t = out->type;
        memset(out, 0, sizeof *out);
        return dt_errorf(DT_ERR_FORMAT, "%s: %s: the header's shape of %s needs %zu data bytes but the file has %zu; %s", name,
                         have < bytes ? "truncated" : "trailing bytes", dt_elem_name(t), bytes, have,
                         have < bytes ? "copy or save it again" : "header and data disagree");
    }
    out->count = count;
    out->data = b + hoff + hlen;
    return DT_OK;
}

dt_status dt_npy_open(const char *path, dt_npy *out) {
    DT_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    data_fmap m;
    dt_status st = data_fmap_open(path, &m);
    if (st) return st;
    st = dt_npy_parse(m.p, m.n, path, &out->a);
    if (st) {
        data_fmap_close(&m);
        return st;
    }
    out->map = m.p;
    out->map_len = m.n;
    return DT_OK;
}

void dt_npy_close(dt_npy *f) {
    if (!f) return;
    data_fmap m = {f->map, f->map_len};
    data_fmap_close(&m);
    memset(f, 0, sizeof *f);
}

/* Member e of the archive into z->m[z->n] when it is a .npy. */
static dt_status npz_member(dt_npz *z, const data_zip_entry *e, const char *path) {
    if (e->name_len < 4 || memcmp(e->name + e->name_len - 4, ".npy", 4) != 0) return DT_OK;
    dt_npz_member *m = &z->m[z->n];
    char *nm = dt_malloc(e->name_len - 3);
    if (!nm) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory", path);
    memcpy(nm, e->name, e->name_len - 4);
    nm[e->name_len - 4] = '\0';
    m->name = nm;
    z->n++;
    size_t wlen = strlen(path) + e->name_len + 2;
    char *where = dt_malloc(wlen);
    if (!where) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory", path);
    char shown[128];
    snprintf(where, wlen, "%s:%s.npy", path, data_clean(nm, SIZE_MAX, shown, sizeof shown));
    const void *bytes;
    dt_status st = data_zip_read(e, path, &bytes, &m->inflated);
    if (!st) st = dt_npy_parse(bytes, (size_t)e->usize, where, &m->a);
    dt_free(where);
    return st;
}

dt_status dt_npz_open(const char *path, dt_npz *out) {
    DT_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    data_fmap m;
    data_zip_entry *es = NULL;
    int n = 0;
    dt_status st = data_fmap_open(path, &m);
    if (st) return st;
    out->map = m.p;
    out->map_len = m.n;
    if ((st = data_zip_list(m.p, m.n, path, &es, &n))) goto done;
    out->m = dt_calloc(n ? (size_t)n : 1, sizeof *out->m);
    if (!out->m) {
        st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int k = 0; k < n && !st; k++) st = npz_member(out, &es[k], path);
    for (int i = 0; i < out->n && !st; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(out->m[i].name, out->m[j].name)) {
                char shown[128];
                st = dt_errorf(DT_ERR_FORMAT, "%s: member %s.npy appears twice", path,
                               data_clean(out->m[i].name, SIZE_MAX, shown, sizeof shown));
                break;
            }
done:
    dt_free(es);
    if (st) dt_npz_close(out);
    return st;
}

void dt_npz_close(dt_npz *z) {
    if (!z) return;
    for (int i = 0; i < z->n; i++) {
        dt_free(z->m[i].name);
        dt_free(z->m[i].inflated);
    }
    dt_free(z->m);
    data_fmap m = {z->map, z->map_len};
    data_fmap_close(&m);
    memset(z, 0, sizeof *z);
}

const dt_array *dt_npz_get(const dt_npz *z, const char *name) {
    for (int i = 0; i < z->n; i++)
        if (!strcmp(z->m[i].name, name)) return &z->m[i].a;
    return NULL;
}
