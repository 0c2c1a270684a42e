/* Fashion-MNIST (and MNIST) image sets: four IDX files in one directory, each
 * plain or gzipped. The checks here are the ones the IDX layer cannot make:
 * the images/labels pair must agree in type, rank, count and label range.
 * data_idx_pair reads the same folder layout for IDX of any shape and type
 * (the dataset layer's "idx" format). */
#include "data_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define IMG_CLASSES 10
#define IMG_HINT_INSTALL                                                                   \
    "install the Debian package dataset-fashion-mnist (it fills " DT_FMNIST_DEFAULT_DIR    \
    ") or point --data at a directory holding them"
#define IMG_HINT_REDOWNLOAD "re-download it or point --data at a complete copy"

static bool img_is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

/* Finds dir/base or dir/base.gz (plain first); *out is malloc'ed. */
static dt_status img_find(const char *dir, const char *base, char **out) {
    *out = NULL;
    size_t n = strlen(dir) + strlen(base) + 8;
    char *p = dt_malloc(n);
    if (!p) return dt_errorf(DT_ERR_NOMEM, "out of memory building a path in %s", dir);
    snprintf(p, n, "%s/%s", dir, base);
    if (img_is_file(p)) {
        *out = p;
        return DT_OK;
    }
    snprintf(p, n, "%s/%s.gz", dir, base);
    if (img_is_file(p)) {
        *out = p;
        return DT_OK;
    }
    dt_free(p);
    return dt_errorf(DT_ERR_IO, "%s: neither %s nor %s.gz is there; " IMG_HINT_INSTALL, dir, base,
                     base);
}

/* Reads one IDX file; a malformed file's message gets the re-download hint. */
static dt_status img_read(const char *path, dt_idx *out) {
    dt_status st = dt_idx_read(path, out);
    if (st == DT_ERR_FORMAT && !strstr(dt_error_msg(), "re-download")) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", dt_error_msg());
        return dt_errorf(st, "%s; " IMG_HINT_REDOWNLOAD, msg);
    }
    return st;
}

dt_status dt_imageset_load(const char *dir, bool train, dt_imageset *out) {
    DT_ASSERT(out);
    memset(out, 0, sizeof *out);
    if (!dir) dir = DT_FMNIST_DEFAULT_DIR;
    const char *img_base = train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
    const char *lab_base = train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
    dt_status st = DT_OK;
    char *img_path = NULL, *lab_path = NULL;
    dt_idx img = {0}, lab = {0};

    struct stat sb;
    int src = stat(dir, &sb);
    if (src != 0 || !S_ISDIR(sb.st_mode)) {
        st = dt_errorf(DT_ERR_IO,
                       "%s: %s (looked there for %s[.gz] and %s[.gz]); " IMG_HINT_INSTALL, dir,
                       src != 0 ? (errno == ENOENT ? "no such directory" : strerror(errno))
                                : "not a directory",
                       img_base, lab_base);
        goto done;
    }
    if ((st = img_find(dir, img_base, &img_path)) != DT_OK) goto done;
    if ((st = img_find(dir, lab_base, &lab_path)) != DT_OK) goto done;
    if ((st = img_read(img_path, &img)) != DT_OK) goto done;
    if ((st = img_read(lab_path, &lab)) != DT_OK) goto done;

    char dims[96] = "";
    for (int i = 0, used = 0; i < img.ndim && used < (int)sizeof dims; i++)
        used += snprintf(dims + used, sizeof dims - (size_t)used, i ? "x%u" : "%u",
                         (unsigned)img.dims[i]);
    if (img.type != 0x08 || img.ndim != 3) {
        st = dt_errorf(DT_ERR_FORMAT,
                       "%s: images must be u8 (type 0x08) with 3 dimensions (n, rows, cols) but "
                       "the file has type 0x%02x with %d (%s); not an image file, "
                       IMG_HINT_REDOWNLOAD,
                       img_path, img.type, img.ndim, dims);
        goto done;
    }
    if (lab.type != 0x08 || lab.ndim != 1) {
        st = dt_errorf(DT_ERR_FORMAT,
                       "%s: labels must be u8 (type 0x08) with 1 dimension (n) but the file has "
                       "type 0x%02x with %d; not a label file, " IMG_HINT_REDOWNLOAD,
                       lab_path, lab.type, lab.ndim);
        goto done;
    }
    if (img.dims[0] != lab.dims[0]) {
        st = dt_errorf(DT_ERR_FORMAT,
                       "%s has %u images but %s has %u labels; the two files come from different "
                       "sets, re-download both",
                       img_path, (unsigned)img.dims[0], lab_path, (unsigned)lab.dims[0]);
        goto done;
    }
    if (img.dims[1] > INT_MAX || img.dims[2] > INT_MAX ||
        (uint64_t)img.dims[1] * img.dims[2] > INT_MAX) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: images of %ux%u pixels are too large", img_path,
                       (unsigned)img.dims[1], (unsigned)img.dims[2]);
        goto done;
    }
    const uint8_t *labels = lab.data;
    for (size_t i = 0; i < lab.count; i++) {
        if (labels[i] >= IMG_CLASSES) {
            st = dt_errorf(DT_ERR_FORMAT,
                           "%s: label %u at index %zu is out of range (%d classes, 0..%d); "
                           "corrupt file, " IMG_HINT_REDOWNLOAD,
                           lab_path, labels[i], i, IMG_CLASSES, IMG_CLASSES - 1);
            goto done;
        }
    }

    out->n = (int64_t)img.dims[0];
    out->rows = (int)img.dims[1];
    out->cols = (int)img.dims[2];
    out->n_classes = IMG_CLASSES;
    out->pixels = img.data; /* ownership moves to the set */
    out->labels = lab.data;
    img.data = NULL;
    lab.data = NULL;

done:
    dt_idx_free(&img);
    dt_idx_free(&lab);
    dt_free(img_path);
    dt_free(lab_path);
    return st;
}

void dt_imageset_free(dt_imageset *s) {
    if (!s) return;
    dt_free(s->pixels);
    dt_free(s->labels);
    memset(s, 0, sizeof *s);
}

void dt_imageset_gather(const dt_imageset *s, const int64_t *idx, int B, float *x,
                        int32_t *labels) {
    DT_ASSERT(s && (B == 0 || (idx && x && labels)));
    size_t hw = (size_t)s->rows * (size_t)s->cols;
    for (int b = 0; b < B; b++) {
        int64_t k = idx[b];
        DT_ASSERT(k >= 0 && k < s->n);
        const uint8_t *src = s->pixels + (size_t)k * hw;
        float *dst = x + (size_t)b * hw;
        /* Division, not multiplication by 1/255: it is what ToTensor() does, and
         * the two round differently for some pixel values. */
        for (size_t j = 0; j < hw; j++) dst[j] = (float)src[j] / 255.0f;
        labels[b] = s->labels[k];
    }
}

dt_status data_idx_pair(const char *dir, bool train, dt_idx *img, dt_idx *lab) {
    memset(img, 0, sizeof *img);
    memset(lab, 0, sizeof *lab);
    const char *img_base = train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
    const char *lab_base = train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
    char *img_path = NULL, *lab_path = NULL;
    dt_status st = DT_OK;
    struct stat sb;
    int src = stat(dir, &sb);
    if (src != 0 || !S_ISDIR(sb.st_mode)) {
        st = dt_errorf(DT_ERR_IO, "%s: %s (looked there for %s[.gz] and %s[.gz]); " IMG_HINT_INSTALL, dir,
                       src != 0 ? (errno == ENOENT ? "no such directory" : strerror(errno)) : "not a directory",
                       img_base, lab_base);
        goto done;
    }
    if ((st = img_find(dir, img_base, &img_path)) != DT_OK) goto done;
    if ((st = img_find(dir, lab_base, &lab_path)) != DT_OK) goto done;
    if ((st = img_read(img_path, img)) != DT_OK) goto done;
    if ((st = img_read(lab_path, lab)) != DT_OK) goto done;
    if (img->dims[0] != lab->dims[0])
        st = dt_errorf(DT_ERR_FORMAT,
                       "%s has %u samples but %s has %u labels; the two files come from different sets, re-download both",
                       img_path, (unsigned)img->dims[0], lab_path, (unsigned)lab->dims[0]);
done:
    if (st) {
        dt_idx_free(img);
        dt_idx_free(lab);
    }
    dt_free(img_path);
    dt_free(lab_path);
    return st;
}
