/* Data layer: IDX reading (plain, gzipped, big-endian payloads, a table of
 * malformed files), the Fashion-MNIST loader (tiny synthetic sets, and the real
 * test set when Debian's package is installed), the byte corpus, the
 * sharded sampler (permutation, sharding across world sizes, resume by seek),
 * the formats behind dt_dataset_open (.npy, .npz stored and deflated, llm.c
 * token shards, CSV, IDX of any shape; good files read back exactly, bad ones
 * refused with one line), and the loader's prefetch (bitwise the same batches). */
#include "dtrain/data.h"
#include "dtrain/loader.h"
#include "testhelp.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char g_tmp[64];

static void tpath(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_tmp, name);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n && fwrite(p, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

static void write_gz(const char *path, const void *p, size_t n) {
    gzFile f = gzopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n && gzwrite(f, p, (unsigned)n) != (int)n) { fprintf(stderr, "gzwrite failed\n"); exit(2); }
    gzclose(f);
}

static uint8_t *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    if (!p || fread(p, 1, (size_t)len, f) != (size_t)len) { perror(path); exit(2); }
    fclose(f);
    *n = (size_t)len;
    return p;
}

static void rm_rf(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_rf(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* Header + payload (already big-endian) into a malloc'ed buffer. */
static uint8_t *make_idx(uint8_t type, int ndim, const uint32_t *dims, const void *payload,
                         size_t plen, size_t *n) {
    size_t hlen = 4 + 4 * (size_t)ndim;
    uint8_t *p = calloc(1, hlen + plen + 1);
    p[2] = type;
    p[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) put_be32(p + 4 + 4 * i, dims[i]);
    if (plen) memcpy(p + hlen, payload, plen);
    *n = hlen + plen;
    return p;
}

static void write_idx(const char *path, bool gz, uint8_t type, int ndim, const uint32_t *dims,
                      const void *payload, size_t plen) {
    size_t n;
    uint8_t *p = make_idx(type, ndim, dims, payload, plen, &n);
    if (gz) write_gz(path, p, n); else write_file(path, p, n);
    free(p);
}

static bool msg_has(const char *needle) { return strstr(dt_error_msg(), needle) != NULL; }

/* ---- IDX ------------------------------------------------------------------ */

static void test_idx_good(void) {
    char plain[256], gz[256];
    tpath(plain, sizeof plain, "u8.idx");
    tpath(gz, sizeof gz, "u8.idx.gz");
    uint8_t pay[2 * 3 * 4];
    for (int i = 0; i < 24; i++) pay[i] = (uint8_t)(i * 11);
    uint32_t dims[3] = {2, 3, 4};
    write_idx(plain, false, 0x08, 3, dims, pay, sizeof pay);
    write_idx(gz, true, 0x08, 3, dims, pay, sizeof pay);

    dt_idx a, b;
    test_cond("plain u8 idx reads", dt_idx_read(plain, &a) == DT_OK);
    test_cond("gz u8 idx reads", dt_idx_read(gz, &b) == DT_OK);
    test_cond("u8 header", a.type == 0x08 && a.ndim == 3 && a.dims[0] == 2 && a.dims[1] == 3 &&
                               a.dims[2] == 4 && a.count == 24 && a.elem_size == 1);
    test_cond("plain and gz agree", b.type == a.type && b.ndim == a.ndim && b.count == a.count &&
                                        !memcmp(a.dims, b.dims, sizeof a.dims) &&
                                        !memcmp(a.data, b.data, 24));
    test_cond("u8 payload", a.data && !memcmp(a.data, pay, 24));
    dt_idx_free(&a);
    dt_idx_free(&b);
    test_cond("free zeroes", a.data == NULL && a.count == 0);
    dt_idx_free(NULL);

    /* i32, big-endian on disk */
    int32_t iv[5] = {1, -2, 0x01020304, INT32_MIN, INT32_MAX};
    uint8_t ibe[20];
    for (int i = 0; i < 5; i++) put_be32(ibe + 4 * i, (uint32_t)iv[i]);
    uint32_t d1[1] = {5};
    tpath(plain, sizeof plain, "i32.idx.gz");
    write_idx(plain, true, 0x0C, 1, d1, ibe, sizeof ibe);
    test_cond("i32 idx reads", dt_idx_read(plain, &a) == DT_OK);
    test_cond("i32 converted to host order",
              a.type == 0x0C && a.elem_size == 4 && a.count == 5 && !memcmp(a.data, iv, sizeof iv));
    dt_idx_free(&a);

    /* f32 */
    float fv[4] = {1.5f, -0.25f, 3.14159f, 1e-30f};
    uint8_t fbe[16];
    for (int i = 0; i < 4; i++) {
        uint32_t u;
        memcpy(&u, &fv[i], 4);
        put_be32(fbe + 4 * i, u);
    }
    uint32_t d2[2] = {2, 2};
    tpath(plain, sizeof plain, "f32.idx");
    write_idx(plain, false, 0x0D, 2, d2, fbe, sizeof fbe);
    test_cond("f32 idx reads", dt_idx_read(plain, &a) == DT_OK);
    test_cond("f32 converted to host order",
              a.type == 0x0D && a.elem_size == 4 && a.count == 4 && !memcmp(a.data, fv, sizeof fv));
    dt_idx_free(&a);

    /* i16 and f64 */
    int16_t sv[3] = {-1, 258, -32768};
    uint8_t sbe[6];
    for (int i = 0; i < 3; i++) {
        sbe[2 * i] = (uint8_t)((uint16_t)sv[i] >> 8);
        sbe[2 * i + 1] = (uint8_t)(uint16_t)sv[i];
    }
    uint32_t d3[1] = {3};
    tpath(plain, sizeof plain, "i16.idx");
    write_idx(plain, false, 0x0B, 1, d3, sbe, sizeof sbe);
    test_cond("i16 idx reads and converts", dt_idx_read(plain, &a) == DT_OK && a.elem_size == 2 &&
                                                !memcmp(a.data, sv, sizeof sv));
    dt_idx_free(&a);
    double dv[2] = {-2.5, 1e300};
    uint8_t dbe[16];
    for (int i = 0; i < 2; i++) {
        uint64_t u;
        memcpy(&u, &dv[i], 8);
        for (int k = 0; k < 8; k++) dbe[8 * i + k] = (uint8_t)(u >> (56 - 8 * k));
    }
    uint32_t d4[1] = {2};
    tpath(plain, sizeof plain, "f64.idx");
    write_idx(plain, false, 0x0E, 1, d4, dbe, sizeof dbe);
    test_cond("f64 idx reads and converts", dt_idx_read(plain, &a) == DT_OK && a.elem_size == 8 &&
                                                !memcmp(a.data, dv, sizeof dv));
    dt_idx_free(&a);
}

typedef struct bad_case {
    const char *name;
    const uint8_t *bytes;
    size_t n;
    bool gz;
    dt_status want;
    const char *needle;
} bad_case;

static void test_idx_bad(void) {
    static const uint8_t lead[] = {1, 0, 8, 1, 0, 0, 0, 1, 7};
    static const uint8_t type[] = {0, 0, 0x0A, 1, 0, 0, 0, 1, 7};
    static const uint8_t nd0[] = {0, 0, 8, 0};
    static const uint8_t nd9[] = {0, 0, 8, 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1,
                                  0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 7};
    static const uint8_t shorthead[] = {0, 0};
    static const uint8_t cuthead[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0};
    static const uint8_t cutpay[] = {0, 0, 8, 1, 0, 0, 0, 10, 1, 2, 3, 4, 5};
    static const uint8_t trail[] = {0, 0, 8, 1, 0, 0, 0, 4, 1, 2, 3, 4, 5, 6};
    static const uint8_t ovf[] = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff};
    static const uint8_t huge[] = {0, 0, 0x0C, 2, 0, 1, 0, 0, 0, 1, 0, 0};
    static const uint8_t zero[] = {0, 0, 8, 2, 0, 0, 0, 3, 0, 0, 0, 0};
    static const uint8_t cut_i32[] = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0};
    const bad_case cases[] = {
        {"bad leading bytes", lead, sizeof lead, false, DT_ERR_FORMAT, "leading bytes"},
        {"bad leading bytes (gz)", lead, sizeof lead, true, DT_ERR_FORMAT, "leading bytes"},
        {"unknown type", type, sizeof type, false, DT_ERR_FORMAT, "type byte 0x0a"},
        {"ndim 0", nd0, sizeof nd0, false, DT_ERR_FORMAT, "dimension count 0"},
        {"ndim 9", nd9, sizeof nd9, false, DT_ERR_FORMAT, "dimension count 9"},
        {"empty file", shorthead, 0, false, DT_ERR_FORMAT, "truncated header"},
        {"2-byte file", shorthead, sizeof shorthead, false, DT_ERR_FORMAT, "truncated header"},
        {"truncated dims", cuthead, sizeof cuthead, false, DT_ERR_FORMAT, "truncated header"},
        {"truncated payload", cutpay, sizeof cutpay, false, DT_ERR_FORMAT, "but only 5 payload"},
        {"truncated payload (gz)", cutpay, sizeof cutpay, true, DT_ERR_FORMAT, "truncated"},
        {"truncated i32 payload", cut_i32, sizeof cut_i32, false, DT_ERR_FORMAT, "(8 bytes)"},
        {"trailing bytes", trail, sizeof trail, false, DT_ERR_FORMAT, "2 trailing bytes"},
        {"trailing bytes (gz)", trail, sizeof trail, true, DT_ERR_FORMAT, "trailing"},
        {"dims product overflow", ovf, sizeof ovf, false, DT_ERR_FORMAT, "overflow"},
        {"over the size cap", huge, sizeof huge, false, DT_ERR_FORMAT, "4 GiB"},
        {"zero dimension", zero, sizeof zero, false, DT_ERR_FORMAT, "is 0"},
    };
    char path[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        snprintf(path, sizeof path, "%s/bad%zu%s", g_tmp, i, c->gz ? ".gz" : "");
        if (c->gz) write_gz(path, c->bytes, c->n); else write_file(path, c->bytes, c->n);
        dt_idx x;
        memset(&x, 0xAB, sizeof x);
        dt_error_clear();
        dt_status st = dt_idx_read(path, &x);
        bool ok = st == c->want && msg_has(c->needle) && msg_has(path) && x.data == NULL;
        if (!ok) fprintf(stderr, "  case '%s': status %s, message: %s\n", c->name,
                         dt_status_str(st), dt_error_msg());
        test_cond(c->name, ok);
    }

    /* A gzip file whose compressed body is damaged, and one cut in half. */
    uint8_t pay[4000];
    for (size_t i = 0; i < sizeof pay; i++) pay[i] = (uint8_t)((i * 2654435761u) >> 13);
    uint32_t d[1] = {sizeof pay};
    char good[256];
    tpath(good, sizeof good, "good.idx.gz");
    write_idx(good, true, 0x08, 1, d, pay, sizeof pay);
    size_t n;
    uint8_t *gzb = read_whole(good, &n);
    test_cond("gz fixture is compressed", n > 100 && gzb[0] == 0x1f && gzb[1] == 0x8b);
    tpath(path, sizeof path, "cut.idx.gz");
    write_file(path, gzb, n / 2);
    dt_idx x;
    dt_status st = dt_idx_read(path, &x);
    test_cond("gz cut in half rejected", st == DT_ERR_FORMAT && msg_has("truncated"));
    if (st != DT_ERR_FORMAT) fprintf(stderr, "  %s\n", dt_error_msg());
    for (size_t i = n / 2; i < n / 2 + 16; i++) gzb[i] ^= 0x5A;
    tpath(path, sizeof path, "corrupt.idx.gz");
    write_file(path, gzb, n);
    st = dt_idx_read(path, &x);
    test_cond("corrupt gz rejected", st == DT_ERR_FORMAT && msg_has("gzip") && msg_has(path));
    if (st != DT_ERR_FORMAT || !msg_has("gzip")) fprintf(stderr, "  %s\n", dt_error_msg());
    free(gzb);

    tpath(path, sizeof path, "no-such-file.idx");
    st = dt_idx_read(path, &x);
    test_cond("missing file is an i/o error", st == DT_ERR_IO && msg_has(path));
    st = dt_idx_read(g_tmp, &x);
    test_cond("directory is an i/o error", st == DT_ERR_IO && msg_has("directory"));
}

/* ---- image sets ----------------------------------------------------------- */

static void make_set(const char *sub, int n, int ndim_img, int n_labels, uint8_t bad_label,
                     bool missing_labels) {
    char dir[256], p[320];
    tpath(dir, sizeof dir, sub);
    mkdir(dir, 0700);
    uint8_t *pix = malloc((size_t)n * 256);
    for (int i = 0; i < n * 256; i++) pix[i] = (uint8_t)(i % 256 ^ (i / 256) * 37);
    uint32_t dims[3] = {(uint32_t)n, 16, 16};
    if (ndim_img == 2) dims[1] = 256;
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    write_idx(p, false, 0x08, ndim_img, dims, pix, (size_t)n * 256);
    free(pix);
    if (missing_labels) return;
    uint8_t lab[16];
    for (int i = 0; i < n_labels; i++) lab[i] = (uint8_t)((i * 3) % 10);
    if (bad_label) lab[n_labels - 1] = bad_label;
    uint32_t ld[1] = {(uint32_t)n_labels};
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    write_idx(p, true, 0x08, 1, ld, lab, (size_t)n_labels);
}

static void test_imageset(void) {
    char dir[256];
    dt_imageset s;

    make_set("set_good", 3, 3, 3, 0, false);
    tpath(dir, sizeof dir, "set_good");
    test_cond("tiny set loads", dt_imageset_load(dir, true, &s) == DT_OK);
    test_cond("tiny set shape", s.n == 3 && s.rows == 16 && s.cols == 16 && s.n_classes == 10);
    test_cond("tiny set labels", s.labels && s.labels[0] == 0 && s.labels[1] == 3 && s.labels[2] == 6);
    float x[2 * 256];
    int32_t lab[2];
    int64_t idx[2] = {2, 0};
    dt_imageset_gather(&s, idx, 2, x, lab);
    bool exact = true, cover = true;
    bool seen[256] = {false};
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 256; j++) {
            uint8_t p = s.pixels[idx[b] * 256 + j];
            float want = (float)p / 255.0f;
            if (memcmp(&x[b * 256 + j], &want, sizeof want)) exact = false;
            seen[p] = true;
        }
    for (int p = 0; p < 256; p++) cover &= seen[p];
    test_cond("gather is pixel/255.0f bitwise", exact);
    test_cond("gather saw every pixel value", cover);
    test_cond("gather labels", lab[0] == 6 && lab[1] == 0);
    test_cond("gather 255 -> 1", x[255] == 1.0f || s.pixels[2 * 256 + 255] != 255);
    dt_imageset_free(&s);
    test_cond("imageset free zeroes", s.pixels == NULL && s.n == 0);
    dt_imageset_free(NULL);

    dt_status st = dt_imageset_load(dir, false, &s);
    test_cond("missing t10k files: i/o error naming them",
              st == DT_ERR_IO && msg_has("t10k-images-idx3-ubyte") && msg_has(".gz") &&
                  msg_has("dataset-fashion-mnist"));

    make_set("set_count", 3, 3, 2, 0, false);
    tpath(dir, sizeof dir, "set_count");
    st = dt_imageset_load(dir, true, &s);
    test_cond("mismatched counts rejected", st == DT_ERR_FORMAT && msg_has("3 images") &&
                                                msg_has("2 labels") && s.pixels == NULL);

    make_set("set_label", 3, 3, 3, 10, false);
    tpath(dir, sizeof dir, "set_label");
    st = dt_imageset_load(dir, true, &s);
    test_cond("label >= 10 rejected", st == DT_ERR_FORMAT && msg_has("label 10 at index 2") &&
                                          msg_has("train-labels-idx1-ubyte.gz"));

    make_set("set_ndim", 3, 2, 3, 0, false);
    tpath(dir, sizeof dir, "set_ndim");
    st = dt_imageset_load(dir, true, &s);
    test_cond("images with 2 dims rejected", st == DT_ERR_FORMAT && msg_has("3 dimensions") &&
                                                 msg_has("train-images-idx3-ubyte"));

    make_set("set_missing", 3, 3, 3, 0, true);
    tpath(dir, sizeof dir, "set_missing");
    st = dt_imageset_load(dir, true, &s);
    test_cond("missing label file rejected",
              st == DT_ERR_IO && msg_has("train-labels-idx1-ubyte") && msg_has("dataset-fashion-mnist"));

    /* labels stored as i32 */
    char p[320];
    make_set("set_type", 3, 3, 3, 0, true);
    tpath(dir, sizeof dir, "set_type");
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    uint8_t l32[12] = {0};
    uint32_t ld[1] = {3};
    write_idx(p, false, 0x0C, 1, ld, l32, sizeof l32);
    st = dt_imageset_load(dir, true, &s);
    test_cond("i32 labels rejected", st == DT_ERR_FORMAT && msg_has("labels must be u8"));

    /* a truncated image file gets the re-download hint */
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    uint32_t big[3] = {60000, 28, 28};
    uint8_t few[1000] = {0};
    write_idx(p, false, 0x08, 3, big, few, sizeof few);
    st = dt_imageset_load(dir, true, &s);
    test_cond("truncated image file rejected with hint",
              st == DT_ERR_FORMAT && msg_has("60000x28x28") && msg_has("47040000 bytes") &&
                  msg_has("re-download"));
    if (st != DT_ERR_FORMAT) fprintf(stderr, "  %s\n", dt_error_msg());

    tpath(dir, sizeof dir, "no-such-dir");
    st = dt_imageset_load(dir, true, &s);
    test_cond("missing directory rejected",
              st == DT_ERR_IO && msg_has("no such directory") && msg_has("train-images-idx3-ubyte") &&
                  msg_has("dataset-fashion-mnist"));
}

static void test_imageset_real(void) {
    struct stat sb;
    if (stat(DT_FMNIST_DEFAULT_DIR, &sb) != 0) {
        printf("skip: %s not installed\n", DT_FMNIST_DEFAULT_DIR);
        return;
    }
    dt_imageset s;
    dt_status st = dt_imageset_load(DT_FMNIST_DEFAULT_DIR, false, &s);
    test_cond("real Fashion-MNIST test set loads", st == DT_OK);
    if (st != DT_OK) { fprintf(stderr, "  %s\n", dt_error_msg()); return; }
    test_cond("real test set shape", s.n == 10000 && s.rows == 28 && s.cols == 28);
    int hist[10] = {0};
    for (int64_t i = 0; i < s.n; i++) hist[s.labels[i]]++;
    bool even = true;
    for (int c = 0; c < 10; c++) even &= hist[c] == 1000;
    test_cond("real test labels: 1000 per class", even);
    test_cond("first test sample is an ankle boot (9)", s.labels[0] == 9);
    float x[2 * 784];
    int32_t lab[2];
    int64_t idx[2] = {0, 9999};
    dt_imageset_gather(&s, idx, 2, x, lab);
    bool exact = true, nonzero = false;
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 784; j++) {
            float want = (float)s.pixels[idx[b] * 784 + j] / 255.0f;
            exact &= !memcmp(&x[b * 784 + j], &want, sizeof want);
            nonzero |= want > 0;
        }
    test_cond("real gather is pixel/255.0f", exact && nonzero);
    test_cond("real gather labels", lab[0] == s.labels[0] && lab[1] == s.labels[9999]);
    dt_imageset_free(&s);
}

/* ---- corpus ---------------------------------------------------------------- */

static bool window_ok(const uint8_t *src, const int32_t *tok, const int32_t *tgt, int T) {
    for (int t = 0; t < T; t++)
        if (tok[t] != src[t] || tgt[t] != src[t + 1]) return false;
    return true;
}

static void test_corpus(void) {
    char path[256];
    uint8_t text[1000];
    for (int i = 0; i < 1000; i++) text[i] = (uint8_t)(i * 31 + 7);
    tpath(path, sizeof path, "corpus.txt");
    write_file(path, text, sizeof text);

    dt_corpus c;
    const int T = 8;
    test_cond("corpus file loads", dt_corpus_load(path, 0.1, T, &c) == DT_OK);
    test_cond("corpus split", c.n == 1000 && c.n_train == 900 && !memcmp(c.bytes, text, 1000));
    test_cond("train windows", dt_corpus_train_windows(&c, T) == 112);
    test_cond("val windows", dt_corpus_val_windows(&c, T) == 12);

    int64_t idx[3] = {0, 111, 5};
    int32_t tok[3 * 8], tgt[3 * 8];
    for (int shift = 0; shift < T; shift++) {
        dt_corpus_gather(&c, idx, 3, T, shift, tok, tgt);
        bool ok = true;
        for (int b = 0; b < 3; b++) {
            size_t start = (size_t)idx[b] * T + (size_t)shift;
            if (start + T + 1 > c.n_train) start = c.n_train - T - 1;
            ok &= window_ok(text + start, tok + b * T, tgt + b * T, T);
        }
        test_cond("train gather: tokens and next-byte targets within train", ok);
    }
    dt_corpus_gather_val(&c, 10, 2, T, tok, tgt);
    test_cond("val gather", window_ok(text + 900 + 80, tok, tgt, T) &&
                                window_ok(text + 900 + 88, tok + T, tgt + T, T));
    dt_corpus_free(&c);
    test_cond("corpus free zeroes", c.bytes == NULL && c.n == 0);
    dt_corpus_free(NULL);

    test_cond("val_frac 0 allowed", dt_corpus_load(path, 0.0, T, &c) == DT_OK && c.n_train == 1000 &&
                                        dt_corpus_val_windows(&c, T) == 0);
    dt_corpus_free(&c);
    test_cond("val_frac 1 rejected", dt_corpus_load(path, 1.0, T, &c) == DT_ERR_INVALID);
    test_cond("T 0 rejected", dt_corpus_load(path, 0.1, 0, &c) == DT_ERR_INVALID);

    /* Exactly big enough: 9 bytes each side for T = 8. */
    tpath(path, sizeof path, "small.txt");
    write_file(path, text, 18);
    test_cond("minimal corpus loads", dt_corpus_load(path, 0.5, T, &c) == DT_OK &&
                                          dt_corpus_train_windows(&c, T) == 1 &&
                                          dt_corpus_val_windows(&c, T) == 1);
    if (c.bytes) {
        int64_t k = 0;
        dt_corpus_gather(&c, &k, 1, T, T - 1, tok, tgt);
        test_cond("minimal corpus: shifted window clamped", window_ok(text, tok, tgt, T));
    }
    dt_corpus_free(&c);
    write_file(path, text, 17);
    dt_status st = dt_corpus_load(path, 0.5, T, &c);
    test_cond("too small corpus rejected", st == DT_ERR_INVALID && msg_has("too small") &&
                                               msg_has(path) && c.bytes == NULL);
    write_file(path, text, 0);
    st = dt_corpus_load(path, 0.1, T, &c);
    test_cond("empty corpus rejected", st == DT_ERR_INVALID && msg_has("empty"));
    tpath(path, sizeof path, "no-such-corpus");
    st = dt_corpus_load(path, 0.1, T, &c);
    test_cond("missing corpus is an i/o error", st == DT_ERR_IO && msg_has(path));

    /* Directory mode: name order by strcmp ('Z' < 'a'), *.dat, symlinks and
     * subdirectories skipped. */
    char dir[256], p[320];
    tpath(dir, sizeof dir, "fortunes");
    mkdir(dir, 0700);
    snprintf(p, sizeof p, "%s/b", dir);
    write_file(p, "bbbbbbbbbb", 10);
    snprintf(p, sizeof p, "%s/a", dir);
    write_file(p, "aaaaaaaaaa", 10);
    snprintf(p, sizeof p, "%s/Z", dir);
    write_file(p, "ZZZZZ", 5);
    snprintf(p, sizeof p, "%s/a.dat", dir);
    write_file(p, "DDDDDDDDDDDDDDDDDDDD", 20);
    snprintf(p, sizeof p, "%s/a.u8", dir);
    if (symlink("a", p) != 0) perror("symlink");
    snprintf(p, sizeof p, "%s/sub", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/sub/x", dir);
    write_file(p, "XXXXXXXX", 8);
    st = dt_corpus_load(dir, 0.4, 4, &c);
    test_cond("corpus directory loads", st == DT_OK);
    test_cond("directory: regular files in name order, .dat/symlink/subdir skipped",
              c.n == 25 && !memcmp(c.bytes, "ZZZZZaaaaaaaaaabbbbbbbbbb", 25) && c.n_train == 15);
    dt_corpus_free(&c);

    char empty[256];
    tpath(empty, sizeof empty, "fortunes/sub2");
    mkdir(empty, 0700);
    snprintf(p, sizeof p, "%s/only.dat", empty);
    write_file(p, "xxxxxxxxxxxxxxxxxxxxxxxxx", 25);
    st = dt_corpus_load(empty, 0.1, 4, &c);
    test_cond("directory without text files rejected", st == DT_ERR_INVALID && msg_has("no regular files"));

    struct stat sb;
    if (stat(DT_CORPUS_DEFAULT_PATH, &sb) == 0) {
        st = dt_corpus_load(DT_CORPUS_DEFAULT_PATH, 0.1, 64, &c);
        test_cond("fortunes corpus loads", st == DT_OK && c.n > 100000 && c.n_train < c.n);
        dt_corpus_free(&c);
    }
}

/* ---- sampler --------------------------------------------------------------- */

/* One epoch's global batches for every rank of `world`, checking that each
 * index appears once and that the rank shards concatenate to the world=1 batch. */
static bool sampler_epoch_ok(int64_t n, int batch, int world, bool drop_last, uint64_t seed,
                             int64_t epoch) {
    dt_sampler ref, r[4];
    if (dt_sampler_init(&ref, n, seed, true, drop_last, 0, 1) != DT_OK) return false;
    dt_sampler_seek(&ref, epoch, 0);
    for (int k = 0; k < world; k++) {
        dt_sampler_init(&r[k], n, seed, true, drop_last, k, world);
        dt_sampler_seek(&r[k], epoch, 0);
    }
    int *seen = calloc((size_t)n, sizeof *seen);
    int64_t *want = malloc(sizeof(int64_t) * (size_t)batch);
    int64_t *got = malloc(sizeof(int64_t) * (size_t)batch);
    bool ok = true;
    int64_t total = 0;
    int64_t nbatches = drop_last ? n / batch : (n + batch - 1) / batch;
    for (int64_t bi = 0; bi < nbatches; bi++) {
        int ln, gn;
        dt_sampler_next(&ref, batch, want, &ln, &gn);
        int64_t expect = n - bi * batch < batch ? n - bi * batch : batch;
        ok &= ln == gn && gn == expect && ref.epoch == epoch;
        int pos = 0;
        for (int k = 0; k < world; k++) {
            int lk, gk;
            dt_sampler_next(&r[k], batch, got + pos, &lk, &gk);
            ok &= gk == gn && lk == (k + 1) * gn / world - k * gn / world && r[k].epoch == epoch;
            pos += lk;
        }
        ok &= pos == gn && !memcmp(got, want, sizeof(int64_t) * (size_t)gn);
        for (int i = 0; i < gn; i++) {
            if (want[i] < 0 || want[i] >= n) ok = false;
            else seen[want[i]]++;
        }
        total += gn;
    }
    for (int64_t i = 0; i < n; i++) ok &= drop_last ? seen[i] <= 1 : seen[i] == 1;
    ok &= total == (drop_last ? n / batch * batch : n);
    /* The next batch starts the next epoch. */
    int ln, gn;
    dt_sampler_next(&ref, batch, want, &ln, &gn);
    ok &= ref.epoch == epoch + 1 && ref.index == gn;
    free(seen);
    free(want);
    free(got);
    dt_sampler_free(&ref);
    for (int k = 0; k < world; k++) dt_sampler_free(&r[k]);
    return ok;
}

static void test_sampler(void) {
    const int64_t ns[] = {10, 7, 1, 13, 100};
    const int bs[] = {4, 3, 1, 16, 5};
    bool ok = true;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof bs / sizeof bs[0]; b++)
            for (int w = 1; w <= 4; w++)
                for (int e = 0; e < 3; e++) {
                    bool one = sampler_epoch_ok(ns[a], bs[b], w, false, 42, e);
                    if (!one) fprintf(stderr, "  n=%lld batch=%d world=%d epoch=%d\n",
                                      (long long)ns[a], bs[b], w, e);
                    ok &= one;
                    if (bs[b] <= ns[a]) ok &= sampler_epoch_ok(ns[a], bs[b], w, true, 7, e);
                }
    test_cond("each epoch a permutation; rank shards tile the global batch (W=1..4)", ok);

    /* n=10, batch 4, world 3: the short last batch of 2 leaves rank 0 empty. */
    dt_sampler s;
    dt_sampler_init(&s, 10, 1, true, false, 0, 3);
    int64_t idx[4];
    int ln, gn;
    dt_sampler_next(&s, 4, idx, &ln, &gn);
    ok = ln == 1 && gn == 4;
    dt_sampler_next(&s, 4, idx, &ln, &gn);
    dt_sampler_next(&s, 4, idx, &ln, &gn);
    ok &= ln == 0 && gn == 2 && s.epoch == 0 && s.index == 10;
    test_cond("short last batch: empty shard for rank 0 of 3", ok);
    dt_sampler_free(&s);

    /* Epochs differ, seeds reproduce, the order depends only on (seed, epoch). */
    dt_sampler a, b;
    dt_sampler_init(&a, 100, 5, true, false, 0, 1);
    dt_sampler_init(&b, 100, 5, true, false, 0, 1);
    int64_t p0[100];
    memcpy(p0, a.perm, sizeof p0);
    dt_sampler_seek(&a, 1, 0);
    test_cond("different epochs differ", memcmp(p0, a.perm, sizeof p0) != 0);
    test_cond("same seed same order", memcmp(p0, b.perm, sizeof p0) == 0);
    dt_sampler_free(&b);
    dt_sampler_init(&b, 100, 6, true, false, 0, 1);
    test_cond("different seed differs", memcmp(p0, b.perm, sizeof p0) != 0);
    dt_sampler_free(&b);
    bool identity = true;
    dt_sampler_init(&b, 100, 5, false, false, 0, 1);
    dt_sampler_seek(&b, 3, 0);
    for (int i = 0; i < 100; i++) identity &= b.perm[i] == i;
    test_cond("shuffle off is the identity", identity);
    dt_sampler_free(&b);
    dt_sampler_free(&a);

    /* seek reproduces the continuation exactly, across epoch ends. */
    for (int drop = 0; drop < 2; drop++)
        for (int world = 1; world <= 3; world++) {
            dt_sampler_init(&a, 23, 99, true, drop, world - 1, world);
            int64_t ref[40][7];
            int refn[40];
            int64_t pos_e = 0, pos_i = 0;
            for (int k = 0; k < 40; k++) {
                if (k == 13) { pos_e = a.epoch; pos_i = a.index; }
                dt_sampler_next(&a, 7, ref[k], &refn[k], &gn);
            }
            dt_sampler_init(&b, 23, 99, true, drop, world - 1, world);
            test_cond("seek ok", dt_sampler_seek(&b, pos_e, pos_i) == DT_OK);
            ok = true;
            for (int k = 13; k < 40; k++) {
                int64_t got[7];
                dt_sampler_next(&b, 7, got, &ln, &gn);
                ok &= ln == refn[k] && !memcmp(got, ref[k], sizeof(int64_t) * (size_t)ln);
            }
            ok &= a.epoch == b.epoch && a.index == b.index;
            test_cond("seek(epoch, index) reproduces the continuation", ok);
            dt_sampler_free(&a);
            dt_sampler_free(&b);
        }

    /* Seek to the end of an epoch: the next batch is the start of the next one. */
    dt_sampler_init(&a, 10, 3, true, false, 0, 1);
    dt_sampler_init(&b, 10, 3, true, false, 0, 1);
    dt_sampler_seek(&a, 4, 10);
    dt_sampler_seek(&b, 5, 0);
    int64_t x[4], y[4];
    dt_sampler_next(&a, 4, x, &ln, &gn);
    dt_sampler_next(&b, 4, y, &ln, &gn);
    test_cond("seek to (e, n) continues at (e+1, 0)", a.epoch == 5 && !memcmp(x, y, sizeof x));
    test_cond("seek past n rejected", dt_sampler_seek(&a, 0, 11) == DT_ERR_INVALID);
    test_cond("seek negative epoch rejected", dt_sampler_seek(&a, -1, 0) == DT_ERR_INVALID);
    dt_sampler_free(&a);
    dt_sampler_free(&b);

    /* drop_last: n=10, batch 4 gives two batches an epoch. */
    dt_sampler_init(&a, 10, 3, true, true, 0, 1);
    int64_t e_of[6];
    for (int k = 0; k < 6; k++) {
        dt_sampler_next(&a, 4, x, &ln, &gn);
        e_of[k] = gn == 4 ? a.epoch : -1;
    }
    test_cond("drop_last: two full batches per epoch",
              e_of[0] == 0 && e_of[1] == 0 && e_of[2] == 1 && e_of[3] == 1 && e_of[4] == 2);
    dt_sampler_free(&a);
    dt_sampler_init(&a, 3, 3, true, true, 0, 1);
    dt_sampler_next(&a, 4, x, &ln, &gn);
    test_cond("drop_last with batch > n: empty batch", gn == 0 && ln == 0 && a.epoch == 0);
    dt_sampler_free(&a);

    test_cond("n 0 rejected", dt_sampler_init(&a, 0, 1, true, false, 0, 1) == DT_ERR_INVALID);
    test_cond("rank >= world rejected", dt_sampler_init(&a, 5, 1, true, false, 2, 2) == DT_ERR_INVALID);
    test_cond("world 0 rejected", dt_sampler_init(&a, 5, 1, true, false, 0, 0) == DT_ERR_INVALID);
    dt_sampler_free(&a);
    dt_sampler_free(NULL);
}

/* ---- formats behind dt_dataset_open ------------------------------------------ */

/* A .npy image: header version major (1, 2, 3) for descr/shape, then data. */
static uint8_t *make_npy(int major, const char *descr, bool fortran, const char *shape, const void *data,
                         size_t dlen, size_t *n) {
    char dict[256];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
             fortran ? "True" : "False", shape);
    size_t pre = major == 1 ? 10 : 12, hl = strlen(dict) + 1;
    size_t total = pre + hl;
    size_t pad = (64 - total % 64) % 64;
    hl += pad;
    uint8_t *p = calloc(1, pre + hl + dlen + 1);
    memcpy(p, "\x93NUMPY", 6);
    p[6] = (uint8_t)major;
    p[7] = 0;
    if (major == 1) { p[8] = (uint8_t)hl; p[9] = (uint8_t)(hl >> 8); }
    else { p[8] = (uint8_t)hl; p[9] = (uint8_t)(hl >> 8); p[10] = (uint8_t)(hl >> 16); p[11] = (uint8_t)(hl >> 24); }
    memcpy(p + pre, dict, strlen(dict));
    memset(p + pre + strlen(dict), ' ', pad);
    p[pre + hl - 1] = '\n';
    if (dlen) memcpy(p + pre + hl, data, dlen);
    *n = pre + hl + dlen;
    return p;
}

static void write_npy(const char *path, int major, const char *descr, const char *shape, const void *data, size_t dlen) {
    size_t n;
    uint8_t *p = make_npy(major, descr, false, shape, data, dlen, &n);
    write_file(path, p, n);
    free(p);
}

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v); put16(p + 2, v >> 16); }

/* A zip of members (name, bytes), each stored or deflated (raw deflate, as
 * np.savez_compressed); zip64: local headers carry a zip64 extra field with
 * 0xFFFFFFFF sizes, as np.savez's force_zip64 writes them. */
typedef struct zmem { const char *name; const uint8_t *p; size_t n; bool deflate; } zmem;
static void write_zip(const char *path, const zmem *m, int k, bool zip64) {
    uint8_t *out = malloc(1 << 20), *cd = malloc(1 << 16);
    size_t o = 0, c = 0;
    for (int i = 0; i < k; i++) {
        uint8_t *comp = (uint8_t *)m[i].p;
        size_t clen = m[i].n;
        if (m[i].deflate) {
            comp = malloc(m[i].n + 1024);
            z_stream z;
            memset(&z, 0, sizeof z);
            deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
            z.next_in = (Bytef *)m[i].p;
            z.avail_in = (uInt)m[i].n;
            z.next_out = comp;
            z.avail_out = (uInt)(m[i].n + 1024);
            deflate(&z, Z_FINISH);
            clen = z.total_out;
            deflateEnd(&z);
        }
        uint32_t crc = (uint32_t)crc32(0, m[i].p, (uInt)m[i].n);
        size_t nl = strlen(m[i].name), off = o;
        uint8_t *h = out + o;
        memset(h, 0, 30);
        put32(h, 0x04034b50); put16(h + 4, zip64 ? 45 : 20); put16(h + 8, m[i].deflate ? 8 : 0);
        put32(h + 14, crc);
        put32(h + 18, zip64 ? 0xFFFFFFFFu : (uint32_t)clen); put32(h + 22, zip64 ? 0xFFFFFFFFu : (uint32_t)m[i].n);
        put16(h + 26, (uint32_t)nl); put16(h + 28, zip64 ? 20 : 0);
        memcpy(h + 30, m[i].name, nl);
        o += 30 + nl;
        if (zip64) {
            uint8_t *x = out + o;
            put16(x, 1); put16(x + 2, 16);
            put32(x + 4, (uint32_t)m[i].n); put32(x + 8, 0); put32(x + 12, (uint32_t)clen); put32(x + 16, 0);
            o += 20;
        }
        memcpy(out + o, comp, clen);
        o += clen;
        uint8_t *e = cd + c;
        memset(e, 0, 46);
        put32(e, 0x02014b50); put16(e + 4, 20); put16(e + 6, 20); put16(e + 10, m[i].deflate ? 8 : 0);
        put32(e + 16, crc); put32(e + 20, (uint32_t)clen); put32(e + 24, (uint32_t)m[i].n);
        put16(e + 28, (uint32_t)nl); put32(e + 42, (uint32_t)off);
        memcpy(e + 46, m[i].name, nl);
        c += 46 + nl;
        if (m[i].deflate) free(comp);
    }
    memcpy(out + o, cd, c);
    uint8_t *end = out + o + c;
    memset(end, 0, 22);
    put32(end, 0x06054b50); put16(end + 8, (uint32_t)k); put16(end + 10, (uint32_t)k);
    put32(end + 12, (uint32_t)c); put32(end + 16, (uint32_t)o);
    write_file(path, out, o + c + 22);
    free(out);
    free(cd);
}

static void mkdir_t(const char *name, char *out, size_t cap) {
    tpath(out, cap, name);
    mkdir(out, 0700);
}

static void join(char *out, size_t cap, const char *dir, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

static dt_status open_tensors(dt_dataset *d, const char *path, double val_frac, const char *target) {
    dt_data_opts o = {.path = path, .lm = false, .val_frac = val_frac, .need_train = true, .target = target};
    return dt_dataset_open(d, &o);
}

static void test_npy_parse(void) {
    /* every dtype, read back through dt_array_to_float */
    struct { const char *descr; size_t es; } ty[] = {{"<f4", 4}, {"<f8", 8}, {"|u1", 1}, {"<i4", 4}, {"<i8", 8},
                                                     {"|i1", 1}, {"<u2", 2}, {"<i2", 2}, {"<u4", 4}, {"<u8", 8}};
    bool ok = true;
    for (size_t t = 0; t < sizeof ty / sizeof ty[0]; t++) {
        uint8_t raw[6 * 8];
        float want[6] = {0, 1, 2, 3, 100, 7};
        for (int i = 0; i < 6; i++) {
            double v = want[i];
            if (!strcmp(ty[t].descr, "<f4")) { float f = (float)v; memcpy(raw + 4 * i, &f, 4); }
            else if (!strcmp(ty[t].descr, "<f8")) memcpy(raw + 8 * i, &v, 8);
            else { uint64_t u = (uint64_t)v; memcpy(raw + ty[t].es * (size_t)i, &u, ty[t].es); }
        }
        for (int major = 1; major <= 3; major++) {
            size_t n;
            uint8_t *p = make_npy(major, ty[t].descr, false, "(2, 3)", raw, 6 * ty[t].es, &n);
            dt_array a;
            float got[6] = {0};
            bool one = dt_npy_parse(p, n, "mem", &a) == DT_OK && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3 &&
                       a.count == 6 && dt_elem_size(a.type) == ty[t].es && !strcmp(dt_elem_name(a.type), ty[t].descr);
            if (one) dt_array_to_float(&a, 0, 6, got);
            if (!one || memcmp(got, want, sizeof want)) {
                ok = false;
                fprintf(stderr, "npy %s v%d: %s\n", ty[t].descr, major, dt_error_msg());
            }
            free(p);
        }
    }
    test_cond("npy: f4 f8 u1 i4 i8 i1 u2 i2 u4 u8 with 1.0/2.0/3.0 headers read back", ok);

    float one = 2.5f;
    size_t n;
    dt_array a;
    uint8_t *p = make_npy(1, "<f4", false, "()", &one, 4, &n);
    test_cond("npy: a scalar", dt_npy_parse(p, n, "mem", &a) == DT_OK && a.ndim == 0 && a.count == 1);
    free(p);

    /* the malformed */
    float six[6] = {0};
    p = make_npy(1, "<f4", false, "(2, 3)", six, sizeof six, &n);
    dt_status st = dt_npy_parse(p, n - 5, "cut.npy", &a);
    test_cond("npy: truncated data refused", st == DT_ERR_FORMAT && msg_has("cut.npy") && msg_has("truncated"));
    st = dt_npy_parse(p, 30, "cut.npy", &a);
    test_cond("npy: truncated header refused", st == DT_ERR_FORMAT && msg_has("truncated"));
    free(p);
    p = make_npy(1, "<f4", true, "(2, 3)", six, sizeof six, &n);
    st = dt_npy_parse(p, n, "f.npy", &a);
    test_cond("npy: fortran order refused", st == DT_ERR_FORMAT && msg_has("Fortran") && msg_has("ascontiguousarray"));
    free(p);
    p = make_npy(1, "<c8", false, "(3,)", six, 24, &n);
    st = dt_npy_parse(p, n, "c.npy", &a);
    test_cond("npy: complex dtype refused", st == DT_ERR_FORMAT && msg_has("unsupported dtype '<c8'"));
    free(p);
    p = make_npy(1, ">f4", false, "(3,)", six, 12, &n);
    st = dt_npy_parse(p, n, "be.npy", &a);
    test_cond("npy: big-endian refused", st == DT_ERR_FORMAT && msg_has("'>f4'"));
    free(p);
    p = make_npy(4, "<f4", false, "(3,)", six, 12, &n);
    st = dt_npy_parse(p, n, "v4.npy", &a);
    test_cond("npy: version 4 refused", st == DT_ERR_FORMAT && msg_has("version 4"));
    free(p);
    static const char junk[] = "\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}";
    st = dt_npy_parse(junk, sizeof junk - 1, "j.npy", &a);
    test_cond("npy: header without shape refused", st == DT_ERR_FORMAT && msg_has("malformed .npy header"));
}

static void test_npy_dir(void) {
    char dir[256], path[512];
    mkdir_t("npyset", dir, sizeof dir);
    /* x: (10, 2, 3) float32, y: int64 labels 0..4 */
    float x[60];
    int64_t y[10];
    for (int i = 0; i < 60; i++) x[i] = (float)i * 0.5f - 3.0f;
    for (int i = 0; i < 10; i++) y[i] = i % 5;
    join(path, sizeof path, dir, "x.npy");
    write_npy(path, 1, "<f4", "(10, 2, 3)", x, sizeof x);
    join(path, sizeof path, dir, "y.npy");
    write_npy(path, 2, "<i8", "(10,)", y, sizeof y);
    dt_dataset d;
    dt_status st = open_tensors(&d, dir, 0.2, NULL);
    test_cond("npy folder opens", st == DT_OK);
    if (st) fprintf(stderr, "%s\n", dt_error_msg());
    test_cond("npy folder: shape and split", st == DT_OK && !strcmp(d.format, "npy") && d.in_dim == 6 && d.in_ndim == 2 &&
                                                 d.in_shape[0] == 2 && d.in_shape[1] == 3 && d.n_classes == 5 &&
                                                 d.y_dim == 0 && d.n_train == 8 && dt_dataset_eval_size(&d, 0) == 2);
    float bx[2 * 6];
    int32_t lab[2];
    int64_t idx[2] = {7, 0};
    if (!st) {
        dt_dataset_gather(&d, idx, 2, 0, bx, NULL, lab, NULL);
        test_cond("npy gather: values exact", !memcmp(bx, x + 42, 24) && !memcmp(bx + 6, x, 24) && lab[0] == 2 && lab[1] == 0);
        dt_dataset_gather_eval(&d, 1, 1, idx, bx, NULL, lab, NULL);
        test_cond("npy eval: the held-out tail", !memcmp(bx, x + 54, 24) && lab[0] == 4);
    }
    dt_dataset_free(&d);
    /* x.npy named directly; its folder is read */
    st = open_tensors(&d, path[0] ? (join(path, sizeof path, dir, "x.npy"), path) : path, 0.2, NULL);
    test_cond("npy: a path to x.npy names its folder", st == DT_OK && d.n_train == 8);
    dt_dataset_free(&d);

    /* uint8 x is not scaled; float y targets of shape (n, 2); test arrays */
    uint8_t xu[10 * 4];
    double yf[20];
    for (int i = 0; i < 40; i++) xu[i] = (uint8_t)(i * 6);
    for (int i = 0; i < 20; i++) yf[i] = i * 0.25 - 1;
    join(path, sizeof path, dir, "x.npy");
    write_npy(path, 3, "|u1", "(10, 4)", xu, sizeof xu);
    join(path, sizeof path, dir, "y.npy");
    write_npy(path, 1, "<f8", "(10, 2)", yf, sizeof yf);
    join(path, sizeof path, dir, "x_test.npy");
    write_npy(path, 1, "|u1", "(3, 4)", xu, 12);
    join(path, sizeof path, dir, "y_test.npy");
    write_npy(path, 1, "<f8", "(3, 2)", yf, 48);
    st = open_tensors(&d, dir, 0.2, NULL);
    test_cond("npy: u8 x, f8 targets, test arrays", st == DT_OK && d.in_dim == 4 && d.in_ndim == 1 && d.y_dim == 2 &&
                                                      d.n_classes == 0 && d.n_train == 10 && dt_dataset_eval_size(&d, 0) == 3);
    if (!st) {
        float yy[2];
        int64_t k = 9;
        dt_dataset_gather(&d, &k, 1, 0, bx, NULL, NULL, yy);
        test_cond("npy: u8 read unscaled, targets converted",
                  bx[0] == 216.0f && bx[3] == 234.0f && yy[0] == (float)yf[18] && yy[1] == (float)yf[19]);
    }
    dt_dataset_free(&d);
    /* negative label, a lone x_test */
    int32_t yl[10] = {0, 1, 2, -1, 0, 0, 0, 0, 0, 0};
    join(path, sizeof path, dir, "y.npy");
    write_npy(path, 1, "<i4", "(10,)", yl, sizeof yl);
    join(path, sizeof path, dir, "y_test.npy");
    unlink(path);
    st = open_tensors(&d, dir, 0.2, NULL);
    test_cond("npy: x_test without y_test refused", st == DT_ERR_INVALID && msg_has("y_test.npy"));
    dt_dataset_free(&d);
    join(path, sizeof path, dir, "x_test.npy");
    unlink(path);
    st = open_tensors(&d, dir, 0.2, NULL);
    test_cond("npy: negative label refused", st == DT_ERR_FORMAT && msg_has("label -1 at sample 3 is negative"));
    dt_dataset_free(&d);
    join(path, sizeof path, dir, "y.npy");
    write_npy(path, 1, "<i4", "(9,)", yl, 36);
    st = open_tensors(&d, dir, 0.2, NULL);
    test_cond("npy: x and y counts differ refused", st == DT_ERR_SHAPE && msg_has("10 samples"));
    dt_dataset_free(&d);
    /* truncated x.npy through the dataset names the file */
    join(path, sizeof path, dir, "x.npy");
    size_t n;
    uint8_t *p = make_npy(1, "|u1", false, "(10, 4)", xu, sizeof xu, &n);
    write_file(path, p, n - 3);
    free(p);
    st = open_tensors(&d, dir, 0.2, NULL);
    test_cond("npy: truncated file names it", st == DT_ERR_FORMAT && msg_has(path) && msg_has("truncated"));
    dt_dataset_free(&d);
}

static void test_npz(void) {
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i - 5.5f;
    uint8_t y[6] = {3, 1, 4, 1, 5, 9};
    size_t nx, ny, nxt, nyt;
    uint8_t *px = make_npy(1, "<f4", false, "(6, 2)", x, sizeof x, &nx);
    uint8_t *py = make_npy(1, "|u1", false, "(6,)", y, sizeof y, &ny);
    uint8_t *pxt = make_npy(1, "<f4", false, "(2, 2)", x + 2, 16, &nxt);
    uint8_t *pyt = make_npy(1, "|u1", false, "(2,)", y + 4, 2, &nyt);
    char path[256];
    for (int mode = 0; mode < 3; mode++) { /* stored, deflated, stored with zip64 local headers */
        bool defl = mode == 1;
        zmem m[4] = {{"x.npy", px, nx, defl}, {"y.npy", py, ny, defl}, {"x_test.npy", pxt, nxt, defl}, {"y_test.npy", pyt, nyt, defl}};
        tpath(path, sizeof path, "set.npz");
        write_zip(path, m, 4, mode == 2);
        dt_dataset d;
        dt_status st = open_tensors(&d, path, 0.5, NULL);
        if (st) fprintf(stderr, "%s\n", dt_error_msg());
        test_cond(mode == 0 ? "npz stored opens" : mode == 1 ? "npz deflated opens" : "npz zip64 local headers open",
                  st == DT_OK && !strcmp(d.format, "npz") && d.n_train == 6 && dt_dataset_eval_size(&d, 0) == 2 &&
                      d.in_dim == 2 && d.n_classes == 10);
        if (!st) {
            float bx[4];
            int32_t lab[2];
            int64_t idx[2] = {5, 2};
            dt_dataset_gather(&d, idx, 2, 0, bx, NULL, lab, NULL);
            bool good = !memcmp(bx, x + 10, 8) && !memcmp(bx + 2, x + 4, 8) && lab[0] == 9 && lab[1] == 4;
            dt_dataset_gather_eval(&d, 0, 2, idx, bx, NULL, lab, NULL);
            good = good && !memcmp(bx, x + 2, 16) && lab[0] == 5 && lab[1] == 9;
            test_cond("npz: values read back exactly", good);
        }
        dt_dataset_free(&d);
    }
    /* no y */
    zmem only_x[1] = {{"x.npy", px, nx, true}};
    tpath(path, sizeof path, "noy.npz");
    write_zip(path, only_x, 1, false);
    dt_dataset d;
    dt_status st = open_tensors(&d, path, 0.5, NULL);
    test_cond("npz without y refused", st == DT_ERR_INVALID && msg_has("no member y.npy") && msg_has("members: x"));
    dt_dataset_free(&d);
    /* a bad zip: the signature, then garbage */
    tpath(path, sizeof path, "bad.npz");
    write_file(path, "PK\x03\x04garbage that is no zip at all", 33);
    st = open_tensors(&d, path, 0.5, NULL);
    test_cond("bad zip refused", st == DT_ERR_FORMAT && msg_has(path) && msg_has("zip"));
    dt_dataset_free(&d);
    /* a deflated member with a corrupt byte */
    zmem one[2] = {{"x.npy", px, nx, true}, {"y.npy", py, ny, true}};
    write_zip(path, one, 2, false);
    size_t zn;
    uint8_t *z = read_whole(path, &zn);
    z[45] ^= 0x55;
    write_file(path, z, zn);
    free(z);
    st = open_tensors(&d, path, 0.5, NULL);
    test_cond("corrupt deflate data refused", st == DT_ERR_FORMAT && msg_has("x.npy") &&
                                                   (msg_has("deflate") || msg_has("CRC") || msg_has("header")));
    dt_dataset_free(&d);
    free(px); free(py); free(pxt); free(pyt);
}

/* An llm.c shard of n tokens tok. */
static void write_shard(const char *path, const uint16_t *tok, int n, int32_t magic, int32_t version, int32_t claim) {
    uint8_t *p = calloc(1, 1024 + 2 * (size_t)n);
    int32_t h[3] = {magic, version, claim};
    memcpy(p, h, sizeof h);
    memcpy(p + 1024, tok, 2 * (size_t)n);
    write_file(path, p, 1024 + 2 * (size_t)n);
    free(p);
}

static void test_tokbin(void) {
    char dir[256], path[512];
    mkdir_t("shards", dir, sizeof dir);
    uint16_t tok[300];
    for (int i = 0; i < 300; i++) tok[i] = (uint16_t)(i * 7 % 1000);
    join(path, sizeof path, dir, "data_train_000.bin");
    write_shard(path, tok, 100, DT_TOKBIN_MAGIC, 1, 100);
    join(path, sizeof path, dir, "data_train_001.bin");
    write_shard(path, tok + 100, 150, DT_TOKBIN_MAGIC, 1, 150);
    join(path, sizeof path, dir, "data_val_000.bin");
    write_shard(path, tok + 250, 50, DT_TOKBIN_MAGIC, 1, 50);
    const int T = 8;
    dt_data_opts o = {.path = dir, .lm = true, .T = T, .val_frac = 0.1, .need_train = true};
    dt_dataset d;
    dt_status st = dt_dataset_open(&d, &o);
    if (st) fprintf(stderr, "%s\n", dt_error_msg());
    int vmax = 0;
    for (int i = 0; i < 300; i++) vmax = tok[i] > vmax ? tok[i] : vmax;
    test_cond("bin shards open: val shard by name, vocab = max id + 1",
              st == DT_OK && !strcmp(d.format, "bin") && d.n_train == (250 - 1) / T && d.vocab == vmax + 1 &&
                  dt_dataset_eval_size(&d, 0) == (50 - 1) / T);
    if (!st) {
        int32_t tk[2 * T], tg[2 * T];
        int64_t idx[2] = {12, 30}; /* window 12 crosses the shard boundary at token 100 */
        dt_dataset_gather(&d, idx, 2, 3, NULL, tk, tg, NULL);
        bool ok = true;
        for (int b = 0; b < 2; b++) {
            size_t s = (size_t)idx[b] * T + 3;
            if (s > (size_t)(250 - T - 1)) s = (size_t)(250 - T - 1);
            for (int t = 0; t < T; t++) ok = ok && tk[b * T + t] == tok[s + t] && tg[b * T + t] == tok[s + t + 1];
        }
        test_cond("bin gather: windows (one across two shards) and next-token targets", ok);
        dt_dataset_gather_eval(&d, 1, 1, idx, NULL, tk, tg, NULL);
        ok = true;
        for (int t = 0; t < T; t++) ok = ok && tk[t] == tok[250 + T + t] && tg[t] == tok[250 + T + t + 1];
        test_cond("bin eval: the val shard", ok);
    }
    dt_dataset_free(&d);
    /* one file: the tail held out */
    join(path, sizeof path, dir, "data_train_000.bin");
    o.path = path;
    o.val_frac = 0.2;
    st = dt_dataset_open(&d, &o);
    test_cond("bin single shard: last val_frac held out", st == DT_OK && d.n_train == (80 - 1) / T &&
                                                             dt_dataset_eval_size(&d, 0) == (20 - 1) / T);
    dt_dataset_free(&d);
    /* the malformed, each naming the file */
    join(path, sizeof path, dir, "bad.bin");
    write_shard(path, tok, 40, 20240521, 1, 40);
    st = dt_dataset_open(&d, &o);
    test_cond("bin bad magic refused", st == DT_ERR_FORMAT && msg_has(path) && msg_has("bad magic 20240521"));
    dt_dataset_free(&d);
    write_shard(path, tok, 40, DT_TOKBIN_MAGIC, 2, 40);
    st = dt_dataset_open(&d, &o);
    test_cond("bin version 2 refused", st == DT_ERR_FORMAT && msg_has(path) && msg_has("version 2"));
    dt_dataset_free(&d);
    write_shard(path, tok, 40, DT_TOKBIN_MAGIC, 1, 41);
    st = dt_dataset_open(&d, &o);
    test_cond("bin truncated refused", st == DT_ERR_FORMAT && msg_has(path) && msg_has("truncated"));
    dt_dataset_free(&d);
    write_file(path, "abc", 3);
    st = dt_dataset_open(&d, &o);
    test_cond("bin shorter than its header refused", st == DT_ERR_FORMAT && msg_has("truncated"));
    dt_dataset_free(&d);
    o.path = dir; /* the bad shard is in the folder now */
    st = dt_dataset_open(&d, &o);
    test_cond("bin folder with a bad shard names it", st == DT_ERR_FORMAT && msg_has("bad.bin"));
    dt_dataset_free(&d);
    o.lm = false;
    st = dt_dataset_open(&d, &o);
    test_cond("bin for a tensor model refused", st == DT_ERR_INVALID && msg_has("reads tensors"));
    dt_dataset_free(&d);
}

static void test_csv(void) {
    char path[256], test[256];
    tpath(path, sizeof path, "house_train.csv");
    const char *good = "\xEF\xBB\xBF\"rooms\", area ,price,\"a,b\"\r\n"
                       "3, 120.5, 250000, 1\r\n"
                       "\r\n"
                       "4,99,-1.5e3,\"2\"\r\n"
                       "1,30,0.25,3\n";
    write_file(path, good, strlen(good));
    dt_dataset d;
    dt_status st = open_tensors(&d, path, 0.34, "price");
    if (st) fprintf(stderr, "%s\n", dt_error_msg());
    test_cond("csv opens: target column, others inputs, tail held out",
              st == DT_OK && !strcmp(d.format, "csv") && d.in_dim == 3 && d.in_ndim == 1 && d.y_dim == 1 &&
                  d.n_classes == 0 && d.n_train == 2 && dt_dataset_eval_size(&d, 0) == 1);
    if (!st) {
        float x[6], y[2];
        int64_t idx[2] = {1, 0};
        dt_dataset_gather(&d, idx, 2, 0, x, NULL, NULL, y);
        test_cond("csv values exact", x[0] == 4 && x[1] == 99 && x[2] == 2 && y[0] == -1500.0f && x[3] == 3 &&
                                          x[4] == 120.5f && x[5] == 1 && y[1] == 250000.0f);
        dt_dataset_gather_eval(&d, 0, 1, idx, x, NULL, NULL, y);
        test_cond("csv eval: the last row", x[0] == 1 && x[1] == 30 && x[2] == 3 && y[0] == 0.25f);
    }
    dt_dataset_free(&d);
    /* a sibling test file: "train" -> "test" */
    tpath(test, sizeof test, "house_test.csv");
    const char *t = "rooms,area,price,\"a,b\"\n5,50,7,1\n6,60,8,2\n";
    write_file(test, t, strlen(t));
    st = open_tensors(&d, path, 0.34, "price");
    test_cond("csv: sibling test file is the test split", st == DT_OK && d.n_train == 3 && dt_dataset_eval_size(&d, 0) == 2);
    dt_dataset_free(&d);
    unlink(test);

    struct { const char *body, *target, *needle; dt_status want; } bad[] = {
        {"a,b,y\n1,2,3\n4,,6\n", "y", ":3: column 2 ('b'): missing value", DT_ERR_FORMAT},
        {"a,b,y\n1,2,3\n4,five,6\n", "y", ":3: column 2 ('b'): 'five' is not a number", DT_ERR_FORMAT},
        {"a,b,y\n1,2,nan\n", "y", ":2: column 3 ('y'): 'nan' is a missing value", DT_ERR_FORMAT},
        {"a,b,y\n1,2\n", "y", ":2: 2 cells but the header has 3 columns", DT_ERR_FORMAT},
        {"a,b,y\n1,2,3\n", "price", "no column named 'price' for --target (columns: 'a', 'b', 'y')", DT_ERR_INVALID},
        {"a,b,y\n1,2,3\n", NULL, "needs --target COLUMN", DT_ERR_INVALID},
        {"a,b,y\n", "y", "no data rows", DT_ERR_FORMAT},
        {"a,\"b,y\n1,2,3\n", "y", ":1: unterminated quote", DT_ERR_FORMAT},
    };
    tpath(path, sizeof path, "bad.csv");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i].body, strlen(bad[i].body));
        st = open_tensors(&d, path, 0.1, bad[i].target);
        bool ok = st == bad[i].want && msg_has(bad[i].needle) && msg_has(path) && !strchr(dt_error_msg(), '\n');
        if (!ok) fprintf(stderr, "csv case %zu: %s\n", i, dt_error_msg());
        test_cond("csv malformed refused with file, line and column", ok);
        dt_dataset_free(&d);
    }
}

static void test_idx_any_shape(void) {
    char dir[256], path[512];
    mkdir_t("idx35", dir, sizeof dir);
    /* f32 images (4, 3, 5), big-endian on disk; i32 labels */
    float img[60];
    uint8_t be[240];
    for (int i = 0; i < 60; i++) {
        img[i] = (float)i * 0.125f - 2;
        uint32_t u;
        memcpy(&u, &img[i], 4);
        put_be32(be + 4 * i, u);
    }
    uint8_t lbe[16];
    int32_t lab[4] = {0, 11, 2, 3};
    for (int i = 0; i < 4; i++) put_be32(lbe + 4 * i, (uint32_t)lab[i]);
    uint32_t dims[3] = {4, 3, 5}, ld[1] = {4};
    join(path, sizeof path, dir, "train-images-idx3-ubyte");
    write_idx(path, false, 0x0D, 3, dims, be, sizeof be);
    join(path, sizeof path, dir, "train-labels-idx1-ubyte.gz");
    write_idx(path, true, 0x0C, 1, ld, lbe, sizeof lbe);
    join(path, sizeof path, dir, "t10k-images-idx3-ubyte");
    write_idx(path, false, 0x0D, 3, dims, be, sizeof be);
    join(path, sizeof path, dir, "t10k-labels-idx1-ubyte");
    write_idx(path, false, 0x0C, 1, ld, lbe, sizeof lbe);
    dt_dataset d;
    dt_status st = open_tensors(&d, dir, 0.1, NULL);
    if (st) fprintf(stderr, "%s\n", dt_error_msg());
    test_cond("idx (n, 3, 5) f32 opens", st == DT_OK && !strcmp(d.format, "idx") && d.in_ndim == 2 && d.in_shape[0] == 3 &&
                                             d.in_shape[1] == 5 && d.in_dim == 15 && d.n_classes == 12 && d.n_train == 4 &&
                                             d.train.rows == 3 && d.train.cols == 5);
    if (!st) {
        float x[15];
        int32_t l;
        int64_t k = 2;
        dt_dataset_gather(&d, &k, 1, 0, x, NULL, &l, NULL);
        test_cond("idx f32 values exact, not scaled", !memcmp(x, img + 30, sizeof x) && l == 2);
    }
    dt_dataset_free(&d);
    /* u8 images are pixel/255 (as Fashion-MNIST always was) */
    uint8_t px[60];
    for (int i = 0; i < 60; i++) px[i] = (uint8_t)(i * 4);
    join(path, sizeof path, dir, "train-images-idx3-ubyte");
    write_idx(path, false, 0x08, 3, dims, px, sizeof px);
    join(path, sizeof path, dir, "t10k-images-idx3-ubyte");
    write_idx(path, false, 0x08, 3, dims, px, sizeof px);
    st = open_tensors(&d, dir, 0.1, NULL);
    if (!st) {
        float x[15];
        int32_t l;
        int64_t k = 3;
        dt_dataset_gather(&d, &k, 1, 0, x, NULL, &l, NULL);
        test_cond("idx u8 scaled by /255.0f", x[0] == (float)px[45] / 255.0f && x[14] == (float)px[59] / 255.0f && l == 3);
    }
    dt_dataset_free(&d);
    /* negative label */
    lab[1] = -4;
    for (int i = 0; i < 4; i++) put_be32(lbe + 4 * i, (uint32_t)lab[i]);
    join(path, sizeof path, dir, "t10k-labels-idx1-ubyte");
    write_idx(path, false, 0x0C, 1, ld, lbe, sizeof lbe);
    st = open_tensors(&d, dir, 0.1, NULL);
    test_cond("idx negative label refused", st == DT_ERR_FORMAT && msg_has("t10k-labels") && msg_has("negative"));
    dt_dataset_free(&d);
}

static void test_detect(void) {
    char path[256];
    tpath(path, sizeof path, "mystery.dat");
    write_file(path, "\x01\x02\x03\x04\x05\x06\x07\x08zzzz", 12);
    dt_dataset d;
    dt_status st = open_tensors(&d, path, 0.1, NULL);
    test_cond("unknown format refused listing the known ones",
              st == DT_ERR_INVALID && msg_has("cannot tell the data format") && msg_has("x.npy") && msg_has(".npz") &&
                  msg_has(".csv") && msg_has("IDX") && msg_has(".bin"));
    dt_dataset_free(&d);
    dt_data_opts o = {.path = path, .lm = true, .T = 4, .val_frac = 0.1, .need_train = true};
    st = dt_dataset_open(&d, &o);
    test_cond("any other file is a byte corpus for a language model", st == DT_ERR_INVALID && msg_has("too small"));
    dt_dataset_free(&d);
    tpath(path, sizeof path, "gone");
    st = open_tensors(&d, path, 0.1, NULL);
    test_cond("a missing path: the IDX folder's message", st == DT_ERR_IO && msg_has("no such directory"));
    dt_dataset_free(&d);
    tpath(path, sizeof path, "idx35");
    st = open_tensors(&d, path, 0.1, "price");
    test_cond("--target on non-CSV data refused", st == DT_ERR_INVALID && msg_has("--target price"));
    dt_dataset_free(&d);
    o.path = path;
    st = dt_dataset_open(&d, &o);
    test_cond("tensor data for a token model refused", st == DT_ERR_INVALID && msg_has("reads tokens"));
    dt_dataset_free(&d);
}

/* Two loaders over d, one prefetching; their batches must be bitwise equal
 * while the share, the weights and the position change between batches. */
static bool same_batches(const dt_dataset *d, int cap, int gb, int rounds) {
    dt_loader a, b;
    if (dt_loader_init(&a, d, cap, 42, 0, 1) || dt_loader_init(&b, d, cap, 42, 0, 1)) return false;
    if (dt_loader_set_prefetch(&b, true) != DT_OK || !b.pf) return false;
    bool ok = true;
    double w[3] = {1, 2, 0.5};
    size_t per = dt_loader_sample_len(&a);
    for (int k = 0; k < rounds && ok; k++) {
        if (k == 7) { dt_sampler_set_share(&a.sampler, 1, 2); dt_sampler_set_share(&b.sampler, 1, 2); }
        if (k == 15) { dt_sampler_set_share(&a.sampler, 2, 3); dt_sampler_set_share(&b.sampler, 2, 3); }
        if (k == 20) { dt_sampler_set_weights(&a.sampler, w); dt_sampler_set_weights(&b.sampler, w); }
        if (k == 24) w[2] = 3; /* changed in place, as the balancer does */
        if (k == 30) { dt_sampler_set_weights(&a.sampler, NULL); dt_sampler_set_weights(&b.sampler, NULL);
                       dt_sampler_set_share(&a.sampler, 0, 1); dt_sampler_set_share(&b.sampler, 0, 1); }
        if (k == 35) { dt_sampler_seek(&a.sampler, 5, 3); dt_sampler_seek(&b.sampler, 5, 3); }
        if (k == 40) { dt_loader_skip(&a, gb, 3); dt_loader_skip(&b, gb, 3); }
        if (k == 45) { dt_loader_eval(&a, 0, 2); dt_loader_eval(&b, 0, 2); }
        if (k == 50) { dt_loader_first(&a, 3); dt_loader_first(&b, 3); }
        int la, ga, lb, gbn;
        int g = k == 55 ? gb - 1 : gb; /* a different batch size once */
        dt_loader_next(&a, g, &la, &ga);
        usleep(3000); /* the step's compute, while b's thread gathers */
        dt_loader_next(&b, g, &lb, &gbn);
        ok = la == lb && ga == gbn && a.sampler.epoch == b.sampler.epoch && a.sampler.index == b.sampler.index;
        if (ok && d->lm)
            ok = !memcmp(a.tokens, b.tokens, sizeof(int32_t) * per * (size_t)la) &&
                 !memcmp(a.targets, b.targets, sizeof(int32_t) * per * (size_t)la);
        else if (ok)
            ok = !memcmp(a.x, b.x, sizeof(float) * per * (size_t)la) &&
                 (a.targets ? !memcmp(a.targets, b.targets, sizeof(int32_t) * (size_t)la)
                            : !memcmp(a.y, b.y, sizeof(float) * (size_t)d->y_dim * (size_t)la));
        if (!ok) fprintf(stderr, "prefetch: batch %d differs\n", k);
    }
    bool pf_was_on = b.pf != NULL && b.prefetched > 0;
    printf("prefetch: %lld of %d batches came from the thread\n", (long long)b.prefetched, rounds);
    dt_loader_set_prefetch(&b, false);
    ok = ok && pf_was_on && b.pf == NULL;
    dt_loader_free(&a);
    dt_loader_free(&b);
    return ok;
}

static void test_prefetch(void) {
    char dir[256], path[512];
    mkdir_t("pfset", dir, sizeof dir);
    float x[37 * 5];
    int16_t y[37];
    for (int i = 0; i < 37 * 5; i++) x[i] = (float)i / 7.0f;
    for (int i = 0; i < 37; i++) y[i] = (int16_t)(i % 9);
    join(path, sizeof path, dir, "x.npy");
    write_npy(path, 1, "<f4", "(37, 5)", x, sizeof x);
    join(path, sizeof path, dir, "y.npy");
    write_npy(path, 1, "<i2", "(37,)", y, sizeof y);
    dt_dataset d;
    dt_status st = open_tensors(&d, dir, 0.1, NULL);
    test_cond("prefetch set opens", st == DT_OK);
    if (!st) test_cond("prefetch on/off: same batches over epochs with share, weights, seek, skip changes",
                       same_batches(&d, 16, 7, 70));
    dt_dataset_free(&d);
    /* tokens: the window shift changes per epoch */
    tpath(path, sizeof path, "pf.bin");
    uint16_t tok[500];
    for (int i = 0; i < 500; i++) tok[i] = (uint16_t)(i * 13 % 512);
    write_shard(path, tok, 500, DT_TOKBIN_MAGIC, 1, 500);
    dt_data_opts o = {.path = path, .lm = true, .T = 6, .val_frac = 0.1, .need_train = true};
    st = dt_dataset_open(&d, &o);
    test_cond("prefetch token set opens", st == DT_OK);
    if (!st) test_cond("prefetch on/off: same token windows across epochs", same_batches(&d, 16, 9, 70));
    dt_dataset_free(&d);
    /* csv float targets */
    tpath(path, sizeof path, "pf.csv");
    char body[4096] = "a,b,t\n";
    for (int i = 0; i < 40; i++) {
        size_t k = strlen(body);
        snprintf(body + k, sizeof body - k, "%d,%g,%g\n", i, i * 0.5, i * -1.25);
    }
    write_file(path, body, strlen(body));
    st = open_tensors(&d, path, 0.1, "t");
    if (!st) test_cond("prefetch on/off: same float targets", same_batches(&d, 16, 5, 70));
    dt_dataset_free(&d);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/dtrain-test-data-XXXXXX");
    if (!mkdtemp(g_tmp)) { perror("mkdtemp"); return 2; }
    test_idx_good();
    test_idx_bad();
    test_imageset();
    test_imageset_real();
    test_corpus();
    test_sampler();
    test_npy_parse();
    test_npy_dir();
    test_npz();
    test_tokbin();
    test_csv();
    test_idx_any_shape();
    test_detect();
    test_prefetch();
    rm_rf(g_tmp);
    return test_report();
}
