/* Element types, the array view's conversion to floats, and the small file
 * helpers the readers share (maps, paths). */
#include "data_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "the array readers assume a little-endian host"
#endif

size_t dt_elem_size(dt_elem t) {
    static const size_t sz[DT_EL_COUNT] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8};
    DT_ASSERT(t >= 0 && t < DT_EL_COUNT);
    return sz[t];
}

const char *dt_elem_name(dt_elem t) {
    static const char *nm[DT_EL_COUNT] = {"|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f4", "<f8"};
    DT_ASSERT(t >= 0 && t < DT_EL_COUNT);
    return nm[t];
}

bool dt_elem_is_int(dt_elem t) { return t != DT_EL_F32 && t != DT_EL_F64; }

/* One loop per type, each element read with memcpy (the data may be unaligned). */
#define ARR_CONVERT(ctype)                                                                         \
    do {                                                                                           \
        const uint8_t *p = (const uint8_t *)a->data + first * sizeof(ctype);                       \
        for (size_t i = 0; i < n; i++) {                                                           \
            ctype v;                                                                               \
            memcpy(&v, p + i * sizeof(ctype), sizeof v);                                           \
            out[i] = (float)v;                                                                     \
        }                                                                                          \
    } while (0)

void dt_array_to_float(const dt_array *a, size_t first, size_t n, float *out) {
    DT_ASSERT(a && first + n <= a->count && (n == 0 || out));
    switch (a->type) {
    case DT_EL_U8: ARR_CONVERT(uint8_t); break;
    case DT_EL_I8: ARR_CONVERT(int8_t); break;
    case DT_EL_U16: ARR_CONVERT(uint16_t); break;
    case DT_EL_I16: ARR_CONVERT(int16_t); break;
    case DT_EL_U32: ARR_CONVERT(uint32_t); break;
    case DT_EL_I32: ARR_CONVERT(int32_t); break;
    case DT_EL_U64: ARR_CONVERT(uint64_t); break;
    case DT_EL_I64: ARR_CONVERT(int64_t); break;
    case DT_EL_F32: ARR_CONVERT(float); break;
    case DT_EL_F64: ARR_CONVERT(double); break;
    default: DT_ASSERT(!"unknown element type");
    }
}

dt_status data_fmap_open(const char *path, data_fmap *m) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dt_errorf(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dt_status st = DT_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = dt_errorf(DT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = dt_errorf(DT_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    if (sb.st_size == 0) goto done;
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        st = dt_errorf(DT_ERR_NOMEM, "%s: too large to map", path);
        goto done;
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        st = dt_errorf(DT_ERR_IO, "%s: cannot map %lld bytes: %s", path, (long long)sb.st_size,
                       strerror(errno));
        goto done;
    }
    m->p = p;
    m->n = (size_t)sb.st_size;
done:
    close(fd);
    return st;
}

void data_fmap_close(data_fmap *m) {
    if (!m) return;
    if (m->p) munmap(m->p, m->n);
    memset(m, 0, sizeof *m);
}

char *data_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = dt_malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

bool data_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

bool data_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool data_dir_has_suffix(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    size_t k = strlen(suffix);
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || n < k || strcmp(e->d_name + n - k, suffix)) continue;
        char *p = data_join(dir, e->d_name);
        found = p && data_is_file(p);
        dt_free(p);
    }
    closedir(d);
    return found;
}

const char *data_clean(const char *s, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && s[i] && k + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[k++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    buf[k] = '\0';
    return buf;
}
