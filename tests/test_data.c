/* Data layer: IDX reading (plain, gzipped, big-endian payloads, a table of
 * malformed files), the Fashion-MNIST loader (tiny synthetic sets, and the real
 * test set when Debian's package is installed), the byte corpus, and the
 * sharded sampler (permutation, sharding across world sizes, resume by seek). */
#include "dtrain/data.h"
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

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/dtrain-test-data-XXXXXX");
    if (!mkdtemp(g_tmp)) { perror("mkdtemp"); return 2; }
    test_idx_good();
    test_idx_bad();
    test_imageset();
    test_imageset_real();
    test_corpus();
    test_sampler();
    rm_rf(g_tmp);
    return test_report();
}
