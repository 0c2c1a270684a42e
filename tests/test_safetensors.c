/* safetensors: writer/reader round trip, a file written by Python, F16/BF16
 * conversion, and a table of malformed files that must each be rejected with
 * DT_ERR_FORMAT and a one-line message (run under ASan/UBSan in CI). */
#include "dtrain/ckpt.h"
#include "dtrain/safetensors.h"
#include "testhelp.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];

static void cleanup_dir(void) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(g_dir);
}

static int dir_entries(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static int one_line(const char *s) { return s[0] && !strchr(s, '\n'); }

static void test_round_trip(void) {
    float f32[6] = {1.0f, -2.0f, 3.5f, 0.0f, 1e-30f, -7.25f};
    double f64[3] = {1e300, -0.5, 3.0};
    uint16_t f16[4] = {0x3C00, 0xC100, 0x7BFF, 0x0001};
    uint16_t bf16[2] = {0x3F80, 0xC020};
    int64_t i64[2] = {-5, 2147483647};
    int32_t i32 = -123456;
    int16_t i16[3] = {-32768, 0, 32767};
    int8_t i8[2] = {-128, 127};
    uint8_t u8[3] = {0, 128, 255};
    uint8_t bools[2] = {1, 0};
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s4[1] = {4}, s2[1] = {2}, s04[2] = {0, 4};
    int64_t s8d[8] = {1, 1, 1, 1, 1, 1, 3, 1};

    dt_st_writer *w = NULL;
    test_cond("writer create", dt_st_writer_create(&w) == DT_OK);
    test_cond("add f32", dt_st_writer_add(w, "layer.0.w", DT_F32, 2, s23, f32) == DT_OK);
    test_cond("add f64", dt_st_writer_add(w, "f64", DT_F64, 1, s3, f64) == DT_OK);
    test_cond("add f16", dt_st_writer_add(w, "f16", DT_F16, 1, s4, f16) == DT_OK);
    test_cond("add bf16", dt_st_writer_add(w, "bf16", DT_BF16, 1, s2, bf16) == DT_OK);
    test_cond("add i64", dt_st_writer_add(w, "i64", DT_I64, 1, s2, i64) == DT_OK);
    test_cond("add 0-d i32", dt_st_writer_add(w, "scalar", DT_I32, 0, NULL, &i32) == DT_OK);
    test_cond("add i16", dt_st_writer_add(w, "i16", DT_I16, 1, s3, i16) == DT_OK);
    test_cond("add empty", dt_st_writer_add(w, "empty", DT_F32, 2, s04, NULL) == DT_OK);
    test_cond("add i8", dt_st_writer_add(w, "i8", DT_I8, 1, s2, i8) == DT_OK);
    test_cond("add u8 8-d", dt_st_writer_add(w, "u8", DT_U8, 8, s8d, u8) == DT_OK);
    test_cond("add bool", dt_st_writer_add(w, "bool", DT_BOOL, 1, s2, bools) == DT_OK);
    test_cond("meta", dt_st_writer_meta(w, "step", "100") == DT_OK);
    test_cond("meta", dt_st_writer_meta(w, "config", "{\"lr\": 0.1}\nline2") == DT_OK);
    test_cond("meta replace", dt_st_writer_meta(w, "step", "101") == DT_OK);

    /* writer argument errors */
    test_cond("dup name", dt_st_writer_add(w, "f64", DT_F64, 1, s3, f64) == DT_ERR_INVALID);
    test_cond("empty name", dt_st_writer_add(w, "", DT_F64, 1, s3, f64) == DT_ERR_INVALID);
    test_cond("reserved name", dt_st_writer_add(w, "__metadata__", DT_F64, 1, s3, f64) == DT_ERR_INVALID);
    test_cond("bad utf8 name", dt_st_writer_add(w, "\xff\xfe", DT_F64, 1, s3, f64) == DT_ERR_INVALID);
    int64_t neg[1] = {-1};
    test_cond("negative dim", dt_st_writer_add(w, "neg", DT_F32, 1, neg, f32) == DT_ERR_INVALID);
    test_cond("9 dims", dt_st_writer_add(w, "nine", DT_F32, 9, s8d, f32) == DT_ERR_INVALID);
    printf("writer error message: %s\n", dt_error_msg());

    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", g_dir);
    dt_error_clear();
    test_cond("write", dt_st_writer_write(w, path) == DT_OK);
    if (dt_error_msg()[0]) printf("write: %s\n", dt_error_msg());
    test_cond("no temporary file left", dir_entries() == 1);
    /* Rewriting replaces atomically. */
    test_cond("rewrite", dt_st_writer_write(w, path) == DT_OK);
    test_cond("still one file", dir_entries() == 1);
    char bad[160];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.safetensors", g_dir);
    test_cond("write into a missing directory fails with IO", dt_st_writer_write(w, bad) == DT_ERR_IO);
    printf("write error message: %s\n", dt_error_msg());
    dt_st_writer_destroy(w);
    test_cond("nothing left behind by the failed write", dir_entries() == 1);

    FILE *fp = fopen(path, "rb");
    uint8_t head[8] = {0};
    test_cond("header readable", fp && fread(head, 1, 8, fp) == 8);
    if (fp) fclose(fp);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | head[i];
    test_cond("header length multiple of 8", hlen % 8 == 0);

    dt_st_file *f = NULL;
    dt_status st = dt_st_open(path, &f);
    test_cond("open", st == DT_OK);
    if (st != DT_OK) { printf("open: %s\n", dt_error_msg()); return; }
    test_cond("count", dt_st_count(f) == 11);
    const char *order[] = {"layer.0.w", "f64", "f16", "bf16", "i64", "scalar", "i16",
                           "empty", "i8", "u8", "bool"};
    for (int i = 0; i < 11 && i < dt_st_count(f); i++)
        test_cond("insertion order", strcmp(dt_st_get(f, i)->name, order[i]) == 0);
    test_cond("get out of range", dt_st_get(f, 11) == NULL && dt_st_get(f, -1) == NULL);

    const dt_st_tensor *t = dt_st_find(f, "layer.0.w");
    test_cond("f32 meta", t && t->dtype == DT_F32 && t->ndim == 2 && t->shape[0] == 2 &&
                              t->shape[1] == 3 && t->numel == 6);
    float back[6] = {0};
    test_cond("f32 read", t && dt_st_read_f32(f, t, back, 6) == DT_OK && memcmp(back, f32, sizeof f32) == 0);
    test_cond("f32 wrong n", t && dt_st_read_f32(f, t, back, 5) == DT_ERR_SHAPE);
    test_cond("f32 as int", t && dt_st_read_i32(f, t, (int32_t *)back, 6) == DT_ERR_FORMAT);

    t = dt_st_find(f, "f64");
    test_cond("f64 bytes", t && memcmp(dt_st_data(f, t), f64, sizeof f64) == 0);
    float d3[3];
    test_cond("f64 -> f32", t && dt_st_read_f32(f, t, d3, 3) == DT_OK && isinf(d3[0]) &&
                                d3[1] == -0.5f && d3[2] == 3.0f);

    t = dt_st_find(f, "f16");
    float h4[4];
    test_cond("f16 -> f32", t && dt_st_read_f32(f, t, h4, 4) == DT_OK && h4[0] == 1.0f &&
                                h4[1] == -2.5f && h4[2] == 65504.0f && h4[3] == ldexpf(1.0f, -24));
    t = dt_st_find(f, "bf16");
    float b2[2];
    test_cond("bf16 -> f32", t && dt_st_read_f32(f, t, b2, 2) == DT_OK && b2[0] == 1.0f && b2[1] == -2.5f);

    int32_t iv[3];
    t = dt_st_find(f, "i64");
    test_cond("i64 -> i32", t && dt_st_read_i32(f, t, iv, 2) == DT_OK && iv[0] == -5 && iv[1] == 2147483647);
    t = dt_st_find(f, "scalar");
    test_cond("0-d", t && t->ndim == 0 && t->numel == 1 && dt_st_read_i32(f, t, iv, 1) == DT_OK &&
                         iv[0] == -123456);
    t = dt_st_find(f, "i16");
    test_cond("i16", t && dt_st_read_i32(f, t, iv, 3) == DT_OK && iv[0] == -32768 && iv[2] == 32767);
    t = dt_st_find(f, "i8");
    test_cond("i8", t && dt_st_read_i32(f, t, iv, 2) == DT_OK && iv[0] == -128 && iv[1] == 127);
    t = dt_st_find(f, "u8");
    test_cond("u8 8-d", t && t->ndim == 8 && t->shape[6] == 3 && dt_st_read_i32(f, t, iv, 3) == DT_OK &&
                        iv[1] == 128 && iv[2] == 255);
    t = dt_st_find(f, "bool");
    test_cond("bool bytes", t && t->dtype == DT_BOOL && memcmp(dt_st_data(f, t), bools, 2) == 0);
    test_cond("bool not int", t && dt_st_read_i32(f, t, iv, 2) == DT_ERR_FORMAT);
    t = dt_st_find(f, "empty");
    test_cond("empty", t && t->numel == 0 && t->begin == t->end && t->shape[0] == 0 &&
                       dt_st_read_f32(f, t, NULL, 0) == DT_OK);
    test_cond("find absent", dt_st_find(f, "nope") == NULL);

    test_cond("meta count", dt_st_meta_count(f) == 2);
    test_cond("meta step (replaced)", dt_st_meta(f, "step") && strcmp(dt_st_meta(f, "step"), "101") == 0);
    test_cond("meta config", dt_st_meta(f, "config") &&
                                 strcmp(dt_st_meta(f, "config"), "{\"lr\": 0.1}\nline2") == 0);
    test_cond("meta absent", dt_st_meta(f, "nope") == NULL);
    const char *k, *v;
    dt_st_meta_at(f, 0, &k, &v);
    test_cond("meta_at", k && v);
    dt_st_close(f);
    dt_st_close(NULL);

    /* An empty writer makes a valid empty file. */
    test_cond("writer create", dt_st_writer_create(&w) == DT_OK);
    snprintf(path, sizeof path, "%s/empty.safetensors", g_dir);
    test_cond("write empty", dt_st_writer_write(w, path) == DT_OK);
    dt_st_writer_destroy(w);
    dt_st_writer_destroy(NULL);
    test_cond("open empty", dt_st_open(path, &f) == DT_OK && dt_st_count(f) == 0 && dt_st_meta_count(f) == 0);
    dt_st_close(f);

    /* I64 out of int32 range */
    int64_t big[1] = {(int64_t)1 << 40};
    snprintf(path, sizeof path, "%s/big.safetensors", g_dir);
    test_cond("writer create", dt_st_writer_create(&w) == DT_OK);
    test_cond("add big", dt_st_writer_add(w, "big", DT_I64, 0, NULL, big) == DT_OK);
    test_cond("write big", dt_st_writer_write(w, path) == DT_OK);
    dt_st_writer_destroy(w);
    int32_t b32;
    test_cond("open big", dt_st_open(path, &f) == DT_OK);
    test_cond("i64 out of int32 range", dt_st_read_i32(f, dt_st_get(f, 0), &b32, 1) == DT_ERR_FORMAT);
    printf("range error: %s\n", dt_error_msg());
    dt_st_close(f);
}

static void test_missing_file(void) {
    dt_st_file *f = (dt_st_file *)1;
    dt_status st = dt_st_open("fixtures/does-not-exist.safetensors", &f);
    printf("missing file: %s\n", dt_error_msg());
    test_cond("missing file is IO", st == DT_ERR_IO && f == NULL);
    test_cond("message has strerror", strstr(dt_error_msg(), "No such file") != NULL);
}

static void test_python_fixture(void) {
    dt_st_file *f = NULL;
    dt_status st = dt_st_open("fixtures/st_python.safetensors", &f);
    test_cond("open python fixture", st == DT_OK);
    if (st != DT_OK) { printf("%s\n", dt_error_msg()); return; }
    test_cond("python count", dt_st_count(f) == 6);
    const dt_st_tensor *t = dt_st_find(f, "weight");
    float wv[12];
    test_cond("weight", t && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4 &&
                            dt_st_read_f32(f, t, wv, 12) == DT_OK);
    int ok = 1;
    for (int i = 0; i < 12; i++) ok &= wv[i] == (float)i * 0.5f - 1.0f;
    test_cond("weight values", ok);
    t = dt_st_find(f, "bias");
    float bv[2];
    test_cond("bias f64", t && t->dtype == DT_F64 && dt_st_read_f32(f, t, bv, 2) == DT_OK &&
                              bv[0] == 1.5f && bv[1] == -2.25f);
    t = dt_st_find(f, "ids");
    int32_t iv[3];
    test_cond("ids i64", t && t->dtype == DT_I64 && t->ndim == 2 && dt_st_read_i32(f, t, iv, 3) == DT_OK &&
                             iv[0] == -3 && iv[1] == 7 && iv[2] == 2147483647);
    t = dt_st_find(f, "count");
    test_cond("count i32", t && dt_st_read_i32(f, t, iv, 1) == DT_OK && iv[0] == 42);
    t = dt_st_find(f, "empty");
    test_cond("empty", t && t->numel == 0 && t->ndim == 2 && t->shape[1] == 5);
    t = dt_st_find(f, "bytes");
    test_cond("u8", t && dt_st_read_i32(f, t, iv, 3) == DT_OK && iv[0] == 0 && iv[1] == 1 && iv[2] == 255);
    test_cond("python meta", dt_st_meta(f, "format") && strcmp(dt_st_meta(f, "format"), "pt") == 0 &&
                                 dt_st_meta(f, "note") && dt_st_meta_count(f) == 2);
    dt_st_close(f);
}

static uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Builds an in-memory file of one F16 or BF16 tensor from raw bits. */
static void check_half(dt_dtype dt, const uint16_t *bits, const float *want, int n, const char *what) {
    char hdr[128];
    int hl = snprintf(hdr, sizeof hdr, "{\"x\":{\"dtype\":\"%s\",\"shape\":[%d],\"data_offsets\":[0,%d]}}",
                      dt_dtype_name(dt), n, 2 * n);
    size_t len = 8 + (size_t)hl + 2 * (size_t)n;
    uint8_t *buf = calloc(1, len);
    buf[0] = (uint8_t)hl;
    memcpy(buf + 8, hdr, (size_t)hl);
    memcpy(buf + 8 + hl, bits, 2 * (size_t)n);
    dt_st_file *f = NULL;
    float got[16];
    int ok = dt_st_parse(buf, len, what, &f) == DT_OK &&
             dt_st_read_f32(f, dt_st_find(f, "x"), got, (size_t)n) == DT_OK;
    for (int i = 0; ok && i < n; i++) {
        int same = isnan(want[i]) ? isnan(got[i]) : f2u(got[i]) == f2u(want[i]);
        if (!same) printf("  %s[%d]: bits 0x%04x gave %g, want %g\n", what, i, bits[i], got[i], want[i]);
        ok &= same;
    }
    test_cond(what, ok);
    dt_st_close(f);
    free(buf);
}

static void test_half_conversion(void) {
    const uint16_t h[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x8000, 0x0000,
                          0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x3555, 0x8001};
    const float hw[] = {1.0f, -2.5f, 65504.0f, ldexpf(1, -24), ldexpf(1023, -24), ldexpf(1, -14),
                        -0.0f, 0.0f, INFINITY, -INFINITY, NAN, NAN, 0.333251953125f, -ldexpf(1, -24)};
    check_half(DT_F16, h, hw, (int)(sizeof h / sizeof h[0]), "f16 known values");
    const uint16_t b[] = {0x3F80, 0xC020, 0x4780, 0x477F, 0x0001, 0x0080, 0x8000,
                          0x7F80, 0xFF80, 0x7FC0, 0x3EAB};
    const float bw[] = {1.0f, -2.5f, 65536.0f, 65280.0f, ldexpf(1, -133), ldexpf(1, -126), -0.0f,
                        INFINITY, -INFINITY, NAN, 0.333984375f};
    check_half(DT_BF16, b, bw, (int)(sizeof b / sizeof b[0]), "bf16 known values");

    /* Every finite half converts to the value its bits define. */
    int ok = 1;
    for (uint32_t u = 0; u < 0x10000u && ok; u++) {
        uint16_t bits = (uint16_t)u;
        int e = (bits >> 10) & 31, m = bits & 1023;
        if (e == 31) continue;
        float want = e ? ldexpf((float)(1024 + m), e - 25) : ldexpf((float)m, -24);
        if (bits & 0x8000) want = -want;
        float got;
        char hdr[96];
        int hl = snprintf(hdr, sizeof hdr, "{\"x\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]}}");
        uint8_t buf[128] = {(uint8_t)hl};
        memcpy(buf + 8, hdr, (size_t)hl);
        memcpy(buf + 8 + hl, &bits, 2);
        dt_st_file *f = NULL;
        ok = dt_st_parse(buf, 8 + (size_t)hl + 2, "f16", &f) == DT_OK &&
             dt_st_read_f32(f, dt_st_get(f, 0), &got, 1) == DT_OK && f2u(got) == f2u(want);
        if (!ok) printf("  f16 0x%04x: got %g want %g\n", bits, got, want);
        dt_st_close(f);
    }
    test_cond("all finite f16 values exact", ok);
}

/* ---- malformed files -------------------------------------------------------- */

typedef struct bad_case {
    const char *what;
    const char *header;  /* NULL: raw bytes below */
    size_t data_len;     /* zero bytes appended after the header */
    int64_t hlen_override; /* >= 0: value written as the header length */
    size_t raw_len;      /* header == NULL: total file length (all zero) */
} bad_case;

#define T1(dtype, shape, offs) "{\"t\":{\"dtype\":" dtype ",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static const bad_case g_bad[] = {
    {"empty file", NULL, 0, -1, 0},
    {"7 bytes", NULL, 0, -1, 7},
    {"header length > file", "{}", 0, 100, 0},
    {"header length huge (>100MB)", "{}", 0, 200000000, 0},
    {"header length 2^64-1", "{}", 0, INT64_MAX, 0},
    {"not JSON", "hello world", 0, -1, 0},
    {"JSON array", "[1,2,3]", 0, -1, 0},
    {"JSON string", "\"abc\"", 0, -1, 0},
    {"truncated JSON", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]", 4, -1, 0},
    {"trailing garbage after JSON", "{} x", 0, -1, 0},
    {"entry not an object", "{\"t\":5}", 0, -1, 0},
    {"missing dtype", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1, 0},
    {"dtype not a string", T1("7", "[1]", "[0,4]"), 4, -1, 0},
    {"unknown dtype", T1("\"F8\"", "[1]", "[0,4]"), 4, -1, 0},
    {"lower-case dtype", T1("\"f32\"", "[1]", "[0,4]"), 4, -1, 0},
    {"missing shape", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, -1, 0},
    {"shape negative", T1("\"F32\"", "[-1]", "[0,4]"), 4, -1, 0},
    {"shape not array", T1("\"F32\"", "4", "[0,16]"), 16, -1, 0},
    {"shape float", T1("\"F32\"", "[1.5]", "[0,4]"), 4, -1, 0},
    {">8 dims", T1("\"F32\"", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, -1, 0},
    {"missing data_offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, -1, 0},
    {"offsets not a pair", T1("\"F32\"", "[1]", "[0,4,8]"), 4, -1, 0},
    {"offsets not integers", T1("\"F32\"", "[1]", "[0,\"4\"]"), 4, -1, 0},
    {"offsets negative", T1("\"F32\"", "[1]", "[-4,0]"), 4, -1, 0},
    {"offsets reversed", T1("\"F32\"", "[1]", "[4,0]"), 4, -1, 0},
    {"offsets past end", T1("\"F32\"", "[2]", "[0,8]"), 4, -1, 0},
    {"offsets huge", T1("\"F32\"", "[1]", "[0,9223372036854775807]"), 4, -1, 0},
    {"size mismatch", T1("\"F32\"", "[2]", "[0,4]"), 4, -1, 0},
    {"0-d size mismatch", T1("\"F64\"", "[]", "[0,4]"), 4, -1, 0},
    {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1, 0},
    {"empty tensor inside another", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                    "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, -1, 0},
    {"gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, -1, 0},
    {"gap at start", T1("\"F32\"", "[1]", "[4,8]"), 8, -1, 0},
    {"trailing bytes not covered", T1("\"F32\"", "[1]", "[0,4]"), 8, -1, 0},
    {"duplicate names", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1, 0},
    {"metadata value not a string", "{\"__metadata__\":{\"k\":1}}", 0, -1, 0},
    {"metadata not an object", "{\"__metadata__\":[\"k\"]}", 0, -1, 0},
    {"shape product overflow", T1("\"F32\"", "[4294967296,4294967296,16]", "[0,0]"), 0, -1, 0},
    {"shape x dtype overflow", T1("\"F64\"", "[2305843009213693952,4]", "[0,0]"), 0, -1, 0},
    {"shape too big for json int", T1("\"F32\"", "[99999999999999999999]", "[0,4]"), 4, -1, 0},
    {"name with newline in error", "{\"a\\nb\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1, 0},
    {"NUL inside JSON string", "{\"a\\u0000\":{}}", 0, -1, 0},
};

static uint8_t *build_case(const bad_case *c, size_t *len) {
    if (!c->header) {
        *len = c->raw_len;
        return calloc(1, c->raw_len ? c->raw_len : 1);
    }
    size_t hl = strlen(c->header);
    *len = 8 + hl + c->data_len;
    uint8_t *buf = calloc(1, *len);
    uint64_t v = c->hlen_override >= 0 ? (uint64_t)c->hlen_override : hl;
    if (c->hlen_override == INT64_MAX) v = UINT64_MAX;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(v >> (8 * i));
    memcpy(buf + 8, c->header, hl);
    return buf;
}

static void test_malformed(void) {
    int n = (int)(sizeof g_bad / sizeof g_bad[0]);
    for (int i = 0; i < n; i++) {
        size_t len;
        uint8_t *buf = build_case(&g_bad[i], &len);
        dt_st_file *f = (dt_st_file *)1;
        dt_error_clear();
        dt_status st = dt_st_parse(buf, len, "bad.safetensors", &f);
        const char *msg = dt_error_msg();
        int ok = st == DT_ERR_FORMAT && f == NULL && one_line(msg) &&
                 strncmp(msg, "bad.safetensors: ", 17) == 0;
        printf("%s %-30s -> %s\n", ok ? "ok  " : "FAIL", g_bad[i].what, msg);
        test_cond(g_bad[i].what, ok);
        if (st == DT_OK) dt_st_close(f);
        free(buf);
    }
}

/* Random byte corruption of a valid file: never a crash, only OK or FORMAT. */
static void test_corruption(void) {
    const char *hdr = "{\"__metadata__\":{\"k\":\"v\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                      "\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"
                      "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[22,30]}}";
    size_t hl = strlen(hdr), len = 8 + hl + 30;
    uint8_t *orig = calloc(1, len), *buf = malloc(len);
    orig[0] = (uint8_t)hl;
    orig[1] = (uint8_t)(hl >> 8);
    memcpy(orig + 8, hdr, hl);
    dt_st_file *f = NULL;
    test_cond("corruption base parses", dt_st_parse(orig, len, "base", &f) == DT_OK);
    dt_st_close(f);
    dt_rng r;
    dt_rng_init(&r, 7, 0);
    int bad = 0, accepted = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, orig, len);
        int flips = 1 + (int)dt_rng_below(&r, 3);
        for (int k = 0; k < flips; k++) {
            size_t at = dt_rng_below(&r, 8 + hl);
            buf[at] = (uint8_t)dt_rng_u32(&r);
        }
        size_t cut = dt_rng_below(&r, 8) == 0 ? dt_rng_below(&r, len + 1) : len;
        dt_status st = dt_st_parse(buf, cut, "fuzz", &f);
        if (st == DT_OK) {
            accepted++;
            float tmp[8];
            for (int i = 0; i < dt_st_count(f); i++) {
                const dt_st_tensor *t = dt_st_get(f, i);
                if (t->numel <= 8) (void)dt_st_read_f32(f, t, tmp, t->numel);
            }
            dt_st_close(f);
        } else if (st != DT_ERR_FORMAT || !one_line(dt_error_msg())) {
            bad++;
        }
    }
    printf("corruption: 20000 mutants, %d accepted, %d wrong status\n", accepted, bad);
    test_cond("corrupted files: only OK or FORMAT", bad == 0);
    free(orig);
    free(buf);
}

/* Writes text to path (a test's manifest). */
static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

/* dt_ckpt_model_cfg: the config through the manifest, and one clear line for a
 * missing or damaged manifest or one that names no parameter file. */
static void test_ckpt_model_cfg(void) {
    char root[128], ck[256], man[320], rf[320];
    snprintf(root, sizeof root, "%s/ck", g_dir);
    dt_model_cfg mc, got;
    dt_model_cfg_default(&mc, DT_MODEL_MLP);
    mc.in_dim = 12;
    mc.n_hidden = 1;
    mc.hidden[0] = 5;
    mc.n_classes = 3;
    dt_model *m = NULL;
    dt_optim *o = NULL;
    dt_ckpt_writer *w = NULL;
    dt_optim_cfg oc;
    dt_optim_cfg_default(&oc, DT_OPTIM_ADAMW);
    test_cond("ckpt: model", dt_model_create(&m, &mc) == DT_OK && dt_optim_create(&o, &oc, m->n) == DT_OK);
    if (!m || !o) return;
    size_t off = 0, len = m->n;
    bool mask[16];
    for (int i = 0; i < m->n_params && i < 16; i++) mask[i] = true;
    dt_ckpt_shard shard = {.n = 1, .arena_off = &off, .len = &len, .state_off = &off};
    dt_ckpt_state cs = {.step = 7, .world = 1, .zero = 0, .dp = 1, .pp = 1, .tp = 1, .batch = 4,
                        .optim = DT_OPTIM_ADAMW, .config = "{}"};
    test_cond("ckpt: save", dt_ckpt_writer_create(&w, root, 0, 1, NULL, 0, 0, 10) == DT_OK &&
                                dt_ckpt_save_async(w, m, o, &shard, mask, &cs) == DT_OK && dt_ckpt_flush(w) == DT_OK);
    dt_ckpt_writer_destroy(w);
    snprintf(ck, sizeof ck, "%s/ckpt-0000000007", root);
    snprintf(man, sizeof man, "%s/manifest.json", ck);
    snprintf(rf, sizeof rf, "%s/rank-00000.safetensors", ck);
    memset(&got, 0, sizeof got);
    test_cond("ckpt: model cfg", dt_ckpt_model_cfg(ck, &got) == DT_OK && got.kind == DT_MODEL_MLP &&
                                     got.in_dim == 12 && got.n_hidden == 1 && got.hidden[0] == 5 && got.n_classes == 3);
    test_cond("ckpt: the checkpoint verifies", dt_ckpt_verify(ck, NULL) == DT_OK);
    char none[300];
    snprintf(none, sizeof none, "%s/ckpt-0000000008", root);
    test_cond("ckpt: no checkpoint", dt_ckpt_model_cfg(none, &got) == DT_ERR_IO && one_line(dt_error_msg()));
    write_text(man, "{\"format\": \"dtrain-ckpt-1\", \"files\": [");
    test_cond("ckpt: damaged manifest", dt_ckpt_model_cfg(ck, &got) == DT_ERR_FORMAT && one_line(dt_error_msg()) &&
                                            strstr(dt_error_msg(), "not valid JSON"));
    write_text(man, "{\"format\": \"dtrain-ckpt-1\", \"files\": []}");
    test_cond("ckpt: no parameter file", dt_ckpt_model_cfg(ck, &got) == DT_ERR_FORMAT &&
                                             strstr(dt_error_msg(), "names no parameter file"));
    write_text(man, "{\"format\": \"dtrain-ckpt-1\", \"files\": [{\"name\": \"../x\"}]}");
    test_cond("ckpt: a path is no parameter file", dt_ckpt_model_cfg(ck, &got) == DT_ERR_FORMAT &&
                                                       strstr(dt_error_msg(), "names no parameter file"));
    unlink(man);
    test_cond("ckpt: no manifest", dt_ckpt_model_cfg(ck, &got) == DT_ERR_FORMAT &&
                                       strstr(dt_error_msg(), "no manifest.json"));
    unlink(rf);
    rmdir(ck);
    rmdir(root);
    dt_optim_destroy(o);
    dt_model_destroy(m);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dt_st_test.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_missing_file();
    test_python_fixture();
    test_half_conversion();
    test_malformed();
    test_corruption();
    test_ckpt_model_cfg();
    cleanup_dir();
    return test_report();
}
