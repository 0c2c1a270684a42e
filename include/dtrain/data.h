/* dtrain data: IDX files (Fashion-MNIST), byte corpora, and a deterministic
 * sharded sampler whose position can be saved and restored. */
#ifndef DTRAIN_DATA_H
#define DTRAIN_DATA_H

#include "dtrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- IDX --------------------------------------------------------------------
 * Reads a whole IDX file, gzipped or plain (detected by the gzip magic, not the
 * name). Validates the two zero bytes, the type byte, the dimension count
 * (1..8), that no dimension is 0-overflowing, and that the payload length is
 * exactly the product of dimensions times the element size (a truncated or
 * over-long file is an error). Every error names the file and what is wrong. */
typedef struct dt_idx {
    uint8_t type;       /* 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64 */
    int ndim;
    uint32_t dims[8];
    size_t count;       /* product of dims */
    size_t elem_size;
    void *data;         /* count * elem_size bytes, converted to host byte order */
} dt_idx;

dt_status dt_idx_read(const char *path, dt_idx *out); /* out owned by caller: dt_idx_free */
void dt_idx_free(dt_idx *idx);                          /* NULL ok */

/* ---- image classification sets (Fashion-MNIST layout) ----------------------
 * dir holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
 * t10k-labels-idx1-ubyte, each optionally with ".gz" (both are looked for).
 * Images must be u8 (n, rows, cols), labels u8 (n) with the same n and values
 * < n_classes (10). */
#define DT_FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
typedef struct dt_imageset {
    int64_t n;          /* images */
    int rows, cols;     /* 28, 28 */
    int n_classes;      /* 10 */
    uint8_t *pixels;    /* (n, rows*cols) */
    uint8_t *labels;    /* (n) */
} dt_imageset;

dt_status dt_imageset_load(const char *dir, bool train, dt_imageset *out);
void dt_imageset_free(dt_imageset *s); /* NULL ok */
/* Gathers samples idx[0..B) into x (B, rows*cols) as pixel/255.0f (nothing else,
 * so weights work on torchvision ToTensor() inputs) and labels (B). */
void dt_imageset_gather(const dt_imageset *s, const int64_t *idx, int B,
                        float *x, int32_t *labels);

/* ---- byte corpus for the GPT --------------------------------------------------
 * path is a file, or a directory whose regular files (not symlinks, not *.dat)
 * are concatenated in name order (Debian's fortunes directory by default).
 * The last val_frac of the bytes is held out for validation. Errors if the
 * corpus is too small to give at least one (T+1)-byte window on each side. */
#define DT_CORPUS_DEFAULT_PATH "/usr/share/games/fortunes"
typedef struct dt_corpus {
    uint8_t *bytes;
    size_t n;           /* total bytes */
    size_t n_train;     /* bytes [0, n_train) train, [n_train, n) validation */
} dt_corpus;

dt_status dt_corpus_load(const char *path, double val_frac, int T, dt_corpus *out);
void dt_corpus_free(dt_corpus *c); /* NULL ok */
/* Number of training windows of length T (window k starts at byte k*T). */
int64_t dt_corpus_train_windows(const dt_corpus *c, int T);
/* Window starts are idx[i]*T + shift, shift in [0, T) (chosen per epoch by the
 * caller so windows move across epochs). Fills tokens and next-byte targets,
 * both (B, T). */
void dt_corpus_gather(const dt_corpus *c, const int64_t *idx, int B, int T, int shift,
                      int32_t *tokens, int32_t *targets);
/* Validation: the held-out tail cut into consecutive T-windows; window k. */
int64_t dt_corpus_val_windows(const dt_corpus *c, int T);
void dt_corpus_gather_val(const dt_corpus *c, int64_t first, int B, int T,
                          int32_t *tokens, int32_t *targets);

/* ---- arrays of the file formats ---------------------------------------------
 * Element types of NumPy, IDX and token files, and a borrowed view of an n-d
 * array in C order. Data is little-endian (the host's order: dtrain builds
 * for little-endian hosts only) and may be unaligned (a member of a stored
 * .npz starts anywhere): read elements with memcpy, or through
 * dt_array_to_float. */
typedef enum dt_elem {
    DT_EL_U8, DT_EL_I8, DT_EL_U16, DT_EL_I16, DT_EL_U32, DT_EL_I32, DT_EL_U64, DT_EL_I64,
    DT_EL_F32, DT_EL_F64, DT_EL_COUNT
} dt_elem;
size_t dt_elem_size(dt_elem t);       /* bytes per element */
const char *dt_elem_name(dt_elem t);  /* NumPy's spelling: "<f4", "|u1" */
bool dt_elem_is_int(dt_elem t);

typedef struct dt_array {
    dt_elem type;
    int ndim;           /* 0 (a scalar) .. 8 */
    int64_t shape[8];
    size_t count;       /* product of shape (1 for a scalar) */
    const void *data;   /* count * dt_elem_size(type) bytes, borrowed */
} dt_array;

/* Elements [first, first + n) of a as floats into out (n). Integers and
 * doubles are cast (uint8 is NOT scaled to [0, 1]). */
void dt_array_to_float(const dt_array *a, size_t first, size_t n, float *out);

/* ---- NumPy .npy / .npz ----------------------------------------------------------
 * .npy: format versions 1.0, 2.0 and 3.0; C order only (fortran_order True is
 * refused: save np.ascontiguousarray(a)); dtypes '<f4' '<f8' '|u1' '|i1' '|b1'
 * (read as u8) '<u2' '<i2' '<u4' '<i4' '<u8' '<i8' (a '<' may also be '='; a
 * '|' on one-byte types may be '<'). Big-endian, structured, object, complex
 * and float16 arrays are refused naming the dtype. The data must be exactly
 * the header's shape times the element size. */
/* Parses the .npy image buf[0, len); out->data points into buf. name is the
 * file (or "archive.npz:member") for messages. */
dt_status dt_npy_parse(const void *buf, size_t len, const char *name, dt_array *out);

/* A memory-mapped .npy: pages are read as samples are gathered. */
typedef struct dt_npy {
    dt_array a;         /* points into the map */
    void *map;
    size_t map_len;
} dt_npy;
dt_status dt_npy_open(const char *path, dt_npy *out); /* out owned by caller: dt_npy_close */
void dt_npy_close(dt_npy *f);                           /* NULL ok */

/* .npz (np.savez, np.savez_compressed): a zip whose *.npy members are parsed.
 * Stored members stay in the map (no copy); deflated ones are inflated into
 * memory at open (zlib raw inflate, CRC-32 checked). Zip64 sizes and offsets
 * are read; encrypted members, other compression methods and multi-disk
 * archives are refused. Members not ending in ".npy" are ignored. */
typedef struct dt_npz_member {
    char *name;         /* without ".npy": "x", "y_test" */
    dt_array a;
    void *inflated;     /* deflated member's bytes (a points into them), or NULL */
} dt_npz_member;
typedef struct dt_npz {
    int n;
    dt_npz_member *m;
    void *map;
    size_t map_len;
} dt_npz;
dt_status dt_npz_open(const char *path, dt_npz *out); /* out owned by caller: dt_npz_close */
void dt_npz_close(dt_npz *z);                           /* NULL ok */
const dt_array *dt_npz_get(const dt_npz *z, const char *name); /* "x": member x.npy, or NULL */

/* ---- CSV (tabular data) -----------------------------------------------------------
 * A header row of column names, then one row per sample of numbers (strtod's
 * syntax, surrounding blanks and double quotes allowed), separated by commas;
 * "\r\n" line ends and blank lines are fine. The `target` column (by name) is
 * the regression target; every other column is an input feature. An empty
 * cell, NaN/inf, text, or a row with another number of cells is refused with
 * one line naming the file, the line and the column. */
typedef struct dt_csv {
    int64_t rows;
    int cols;           /* input features (every column but the target) */
    float *x;           /* (rows, cols) */
    float *y;           /* (rows) the target column */
} dt_csv;
dt_status dt_csv_read(const char *path, const char *target, dt_csv *out); /* dt_csv_free */
void dt_csv_free(dt_csv *c);                                             /* NULL ok */

/* ---- llm.c token shards (.bin) ------------------------------------------------------
 * A shard is a header of 256 little-endian int32 (magic 20240520, version 1,
 * token count) and then that many uint16 tokens; the file must be exactly
 * that long. path is one shard or a directory of *.bin shards, read in name
 * order and treated as one stream (a window may cross two shards). Shards
 * whose name contains "val" form the validation stream (llm.c's fineweb and
 * tinyshakespeare naming); without one the last val_frac of the tokens is
 * held out. Files are memory-mapped, never read whole: a rank's pages are
 * those of the windows it gathers.
 * Vocabulary: when all shards hold at most DT_TOKBIN_SCAN_ALL tokens, every
 * token is read at open and vocab = max id + 1 (every id is then known to be
 * < vocab); larger corpora scan the first DT_TOKBIN_SCAN_FIRST tokens of the
 * first training shard and take vocab = 50257 (GPT-2's tokenizer, what llm.c
 * writes) when they are all below it, else 65536. The gathers check every id
 * against vocab as they convert it: an id >= vocab becomes 0 and is counted
 * in the return value, so a bad id never reaches an embedding. */
#define DT_TOKBIN_MAGIC 20240520
#define DT_TOKBIN_SCAN_ALL ((size_t)1 << 26)
#define DT_TOKBIN_SCAN_FIRST ((size_t)1 << 24)
typedef struct dt_tokbin_seg {
    const uint16_t *tok;
    size_t n;
    size_t start;       /* offset of tok[0] in its stream */
    int file;           /* index into files */
} dt_tokbin_seg;
typedef struct dt_tokbin {
    int nfiles;
    char **files;       /* (nfiles) paths */
    void **maps;        /* (nfiles) */
    size_t *map_lens;   /* (nfiles) */
    int ntrain, nval;
    dt_tokbin_seg *train, *val; /* the two streams' segments */
    size_t n_train, n_val;      /* tokens of each stream */
    int vocab;
} dt_tokbin;
dt_status dt_tokbin_open(const char *path, double val_frac, int T, dt_tokbin *out); /* dt_tokbin_close */
void dt_tokbin_close(dt_tokbin *t);                                                  /* NULL ok */
/* Windows and gathers with the meaning of the dt_corpus ones above (train
 * window k starts at k*T + shift, pulled back to fit; validation windows are
 * consecutive). The gathers return how many ids >= vocab they replaced by 0. */
int64_t dt_tokbin_train_windows(const dt_tokbin *t, int T);
int64_t dt_tokbin_val_windows(const dt_tokbin *t, int T);
int64_t dt_tokbin_gather(const dt_tokbin *t, const int64_t *idx, int B, int T, int shift,
                         int32_t *tokens, int32_t *targets);
int64_t dt_tokbin_gather_val(const dt_tokbin *t, int64_t first, int B, int T, int32_t *tokens,
                             int32_t *targets);

/* ---- sampler -----------------------------------------------------------------
 * Epoch e visits a permutation of [0, n) derived only from (seed, e) (or the
 * identity when shuffle is off). The sampler walks it in GLOBAL batches of
 * `global_batch`; rank r of W takes the contiguous shard
 * [r*b/W, (r+1)*b/W) of each global batch of size b, so every layout sees the same
 * global batches. The last batch of an epoch is short (b = remaining) unless
 * drop_last. Position is (epoch, index); save/restore it to resume exactly. */
typedef struct dt_sampler {
    int64_t n;
    uint64_t seed;
    bool shuffle, drop_last;
    int rank, world;
    int64_t epoch;      /* current epoch */
    int64_t index;      /* next position in this epoch's permutation */
    int64_t *perm;      /* (n) permutation of the current epoch */
    const double *weights; /* (world) relative shard sizes, NULL: equal (see below) */
} dt_sampler;

dt_status dt_sampler_init(dt_sampler *s, int64_t n, uint64_t seed, bool shuffle,
                          bool drop_last, int rank, int world);
void dt_sampler_free(dt_sampler *s); /* NULL ok */
/* Next global batch of at most global_batch samples. Writes this rank's shard
 * indices into idx (capacity >= global_batch) and returns the shard size in
 * *local_n, and the global batch size in *global_n (both may be 0 for a rank
 * whose shard is empty). Advances into the next epoch when one ends: a batch
 * never spans two epochs. */
void dt_sampler_next(dt_sampler *s, int global_batch, int64_t *idx, int *local_n,
                     int *global_n);
/* Uneven shards (heterogeneity-aware balancing): rank r's share of each global
 * batch is proportional to weights[r] (borrowed; world entries, all >= 0, not all
 * 0); NULL restores equal shards. Every rank must pass the same weights. The
 * shards stay contiguous and in rank order, so the global batches do not change. */
void dt_sampler_set_weights(dt_sampler *s, const double *weights);
/* Moves to (epoch, index), regenerating the permutation; index in [0, n]. */
dt_status dt_sampler_seek(dt_sampler *s, int64_t epoch, int64_t index);
/* From the next batch on, this sampler takes shard `rank` of `world` (elastic
 * membership: the split may change between batches, the batches do not). */
void dt_sampler_set_share(dt_sampler *s, int rank, int world);
/* Moves to where a fresh sampler is after k global batches of global_batch. */
dt_status dt_sampler_skip(dt_sampler *s, int global_batch, int64_t k);

#ifdef __cplusplus
}
#endif
#endif
