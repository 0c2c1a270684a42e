/* dtrain loader: a run's data behind "next batch" and "evaluation batch", so a
 * training driver never branches on the kind of data (images or a byte corpus).
 *
 * A dt_dataset holds what was read from disk (the training and test images, or
 * the corpus with its validation tail); several loaders may share one (Hogwild!
 * threads). A dt_loader walks the dataset with its own sampler (this rank's
 * shard of every global batch) and owns the batch buffers, as llm.c's
 * dataloader does. For a corpus, the windows of an epoch start at a shift drawn
 * from (seed, epoch) so they move across epochs. */
#ifndef DTRAIN_LOADER_H
#define DTRAIN_LOADER_H

#include "dtrain/data.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_dataset {
    bool lm;                 /* a byte corpus (next-token targets) */
    int T;                   /* corpus: window length */
    dt_imageset train, test;
    dt_corpus corpus;
    int64_t n_train;         /* training images or windows (0 when not loaded) */
    int in_dim;              /* images: rows * cols; corpus: 0 */
} dt_dataset;

/* Reads a dataset: lm: the corpus at path (NULL: DT_CORPUS_DEFAULT_PATH) with
 * window T and its last val_frac held out; otherwise the image folder at path
 * (NULL: DT_FMNIST_DEFAULT_DIR), the training images only when need_train.
 * On error *d is left freeable. */
dt_status dt_dataset_load(dt_dataset *d, const char *path, bool lm, int T, double val_frac, bool need_train);
void dt_dataset_free(dt_dataset *d); /* NULL ok */
/* Evaluation items: test images, or validation windows capped at eval_max (> 0). */
int64_t dt_dataset_eval_size(const dt_dataset *d, int eval_max);

typedef struct dt_loader {
    const dt_dataset *d;     /* borrowed */
    dt_sampler sampler;      /* this rank's shard of every global batch */
    uint64_t seed;
    int cap;                 /* samples the buffers hold */
    int64_t *idx;            /* (cap) */
    float *x;                /* (cap, in_dim) images, or NULL */
    int32_t *tokens;         /* (cap, T) corpus, or NULL */
    int32_t *targets;        /* (cap) labels, or (cap, T) next bytes */
} dt_loader;

/* A loader over d for rank `rank` of `world` data-parallel shards, buffers for
 * cap samples (at least the largest shard or evaluation batch it will load). */
dt_status dt_loader_init(dt_loader *l, const dt_dataset *d, int cap, uint64_t seed, int rank, int world);
void dt_loader_free(dt_loader *l); /* NULL ok */
/* The next global batch of global_batch samples: this rank's shard into the
 * buffers (*local_n samples of the *global_n of the global batch). */
void dt_loader_next(dt_loader *l, int global_batch, int *local_n, int *global_n);
/* Passes over n global batches without loading them (the sampler moves on). */
void dt_loader_skip(dt_loader *l, int global_batch, int64_t n);
/* Samples 0..n-1 of the training set (wrapping), unshifted: a fixed batch for
 * profiling. n <= cap. */
void dt_loader_first(dt_loader *l, int n);
/* Evaluation items [first, first + n) into the buffers. n <= cap. */
void dt_loader_eval(dt_loader *l, int64_t first, int n);
/* Floats of one sample's input: in_dim, or T tokens. */
size_t dt_loader_sample_len(const dt_loader *l);

#ifdef __cplusplus
}
#endif
#endif
