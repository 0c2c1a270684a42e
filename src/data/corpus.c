/* Byte corpus for the character-level GPT: one file, or every regular file of
 * a directory concatenated in strcmp order of names. Debian's fortunes
 * directory holds text files next to binary "*.dat" indexes and "*.u8"
 * symlinks to the same text, so both are skipped: the indexes are not text
 * and the symlinks would double the data. */
#include "dtrain/data.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct corpus_buf {
    uint8_t *p;
    size_t n, cap;
} corpus_buf;

/* Appends the whole of file `path` to b. */
static dt_status corpus_append_file(corpus_buf *b, const char *path) {
    dt_status st = DT_OK;
    FILE *f = fopen(path, "rb");
    if (!f) return dt_errorf(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    for (;;) {
        if (b->cap - b->n < 65536) {
            size_t cap;
            if (!dt_size_mul(b->cap ? b->cap : 65536, 2, &cap)) {
                st = dt_errorf(DT_ERR_NOMEM, "%s: corpus too large", path);
                goto done;
            }
            uint8_t *p = dt_realloc_array(b->p, cap, 1);
            if (!p) {
                st = dt_errorf(DT_ERR_NOMEM, "%s: cannot grow the corpus to %zu bytes", path, cap);
                goto done;
            }
            b->p = p;
            b->cap = cap;
        }
        size_t r = fread(b->p + b->n, 1, b->cap - b->n, f);
        b->n += r;
        if (r == 0) break;
    }
    if (ferror(f)) st = dt_errorf(DT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
done:
    fclose(f);
    return st;
}

static int corpus_name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool corpus_skip_name(const char *name) {
    size_t len = strlen(name);
    return len >= 4 && strcmp(name + len - 4, ".dat") == 0;
}

/* Appends the regular files of directory `dir` in name order; *nfiles counts them. */
static dt_status corpus_append_dir(corpus_buf *b, const char *dir, size_t *nfiles) {
    dt_status st = DT_OK;
    char **names = NULL;
    size_t nnames = 0, cap = 0;
    char *path = NULL;
    *nfiles = 0;
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(DT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));

    struct dirent *e;
    while ((errno = 0, e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        if (corpus_skip_name(e->d_name)) continue;
        if (nnames == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **p = dt_realloc_array(names, ncap, sizeof *names);
            if (!p) {
                st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory listing the directory", dir);
                goto done;
            }
            names = p;
            cap = ncap;
        }
        names[nnames] = dt_strdup(e->d_name);
        if (!names[nnames]) {
            st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory listing the directory", dir);
            goto done;
        }
        nnames++;
    }
    if (errno) {
        st = dt_errorf(DT_ERR_IO, "%s: cannot list directory: %s", dir, strerror(errno));
        goto done;
    }
    if (nnames) qsort(names, nnames, sizeof *names, corpus_name_cmp);

    for (size_t i = 0; i < nnames; i++) {
        size_t plen = strlen(dir) + strlen(names[i]) + 2;
        dt_free(path);
        path = dt_malloc(plen);
        if (!path) {
            st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory", dir);
            goto done;
        }
        snprintf(path, plen, "%s/%s", dir, names[i]);
        struct stat sb;
        if (lstat(path, &sb) != 0) {
            st = dt_errorf(DT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
            goto done;
        }
        if (!S_ISREG(sb.st_mode)) continue; /* symlinks, subdirectories, devices */
        if ((st = corpus_append_file(b, path)) != DT_OK) goto done;
        (*nfiles)++;
    }

done:
    closedir(d);
    for (size_t i = 0; i < nnames; i++) dt_free(names[i]);
    dt_free(names);
    dt_free(path);
    return st;
}

dt_status dt_corpus_load(const char *path, double val_frac, int T, dt_corpus *out) {
    DT_ASSERT(out);
    memset(out, 0, sizeof *out);
    if (!path) path = DT_CORPUS_DEFAULT_PATH;
    if (T < 1) return dt_errorf(DT_ERR_INVALID, "corpus: context length T=%d must be >= 1", T);
    if (!(val_frac >= 0.0 && val_frac < 1.0))
        return dt_errorf(DT_ERR_INVALID, "corpus: validation fraction %g must be in [0, 1)",
                         val_frac);

    dt_status st = DT_OK;
    corpus_buf b = {0};
    struct stat sb;
    if (stat(path, &sb) != 0) {
        st = dt_errorf(DT_ERR_IO, "%s: cannot open the corpus: %s", path, strerror(errno));
        goto done;
    }
    if (S_ISDIR(sb.st_mode)) {
        size_t nfiles = 0;
        if ((st = corpus_append_dir(&b, path, &nfiles)) != DT_OK) goto done;
        if (nfiles == 0) {
            st = dt_errorf(DT_ERR_INVALID,
                           "%s: the corpus directory has no regular files (symlinks and *.dat "
                           "are skipped); install the Debian package fortunes or pass a text file",
                           path);
            goto done;
        }
    } else if (S_ISREG(sb.st_mode)) {
        if ((st = corpus_append_file(&b, path)) != DT_OK) goto done;
    } else {
        st = dt_errorf(DT_ERR_INVALID, "%s: the corpus must be a regular file or a directory",
                       path);
        goto done;
    }
    if (b.n == 0) {
        st = dt_errorf(DT_ERR_INVALID, "%s: the corpus is empty", path);
        goto done;
    }

    size_t n_val = (size_t)floor((double)b.n * val_frac);
    size_t n_train = b.n - n_val;
    size_t need = (size_t)T + 1;
    if (n_train < need || (val_frac > 0.0 && n_val < need)) {
        st = dt_errorf(DT_ERR_INVALID,
                       "%s: corpus too small: %zu bytes give %zu for training and %zu for "
                       "validation, each side needs at least T+1 = %zu; use a larger corpus, a "
                       "smaller context or another validation fraction",
                       path, b.n, n_train, n_val, need);
        goto done;
    }

    out->bytes = b.p;
    out->n = b.n;
    out->n_train = n_train;
    b.p = NULL;

done:
    dt_free(b.p);
    return st;
}

void dt_corpus_free(dt_corpus *c) {
    if (!c) return;
    dt_free(c->bytes);
    memset(c, 0, sizeof *c);
}

/* Windows are counted for shift 0; a shifted window that would run past the
 * training bytes is pulled back to end exactly there (see dt_corpus_gather),
 * so every count of at least one (T+1)-byte window stays usable. */
int64_t dt_corpus_train_windows(const dt_corpus *c, int T) {
    DT_ASSERT(c && T >= 1);
    if (c->n_train < (size_t)T + 1) return 0;
    return (int64_t)((c->n_train - 1) / (size_t)T);
}

static void corpus_fill(const uint8_t *src, int T, int32_t *tokens, int32_t *targets) {
    for (int t = 0; t < T; t++) {
        tokens[t] = src[t];
        targets[t] = src[t + 1];
    }
}

void dt_corpus_gather(const dt_corpus *c, const int64_t *idx, int B, int T, int shift,
                      int32_t *tokens, int32_t *targets) {
    DT_ASSERT(c && T >= 1 && shift >= 0 && shift < T);
    int64_t nw = dt_corpus_train_windows(c, T);
    size_t last = c->n_train - (size_t)T - 1; /* last start that fits */
    for (int b = 0; b < B; b++) {
        DT_ASSERT(idx[b] >= 0 && idx[b] < nw);
        size_t start = (size_t)idx[b] * (size_t)T + (size_t)shift;
        if (start > last) start = last;
        size_t off = (size_t)b * (size_t)T;
        corpus_fill(c->bytes + start, T, tokens + off, targets + off);
    }
}

int64_t dt_corpus_val_windows(const dt_corpus *c, int T) {
    DT_ASSERT(c && T >= 1);
    size_t n_val = c->n - c->n_train;
    if (n_val < (size_t)T + 1) return 0;
    return (int64_t)((n_val - 1) / (size_t)T);
}

void dt_corpus_gather_val(const dt_corpus *c, int64_t first, int B, int T, int32_t *tokens,
                          int32_t *targets) {
    DT_ASSERT(c && T >= 1 && first >= 0 && B >= 0);
    DT_ASSERT(first + B <= dt_corpus_val_windows(c, T));
    for (int b = 0; b < B; b++) {
        size_t start = c->n_train + (size_t)(first + b) * (size_t)T;
        size_t off = (size_t)b * (size_t)T;
        corpus_fill(c->bytes + start, T, tokens + off, targets + off);
    }
}
