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
