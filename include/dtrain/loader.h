/* dtrain loader: a run's data behind "next batch" and "evaluation batch", so a
 * training driver never branches on the format of the data.
 *
 * A dt_dataset holds what was read or mapped from disk (the training and test
 * tensors, or the token stream with its validation part); several loaders may share one (Hogwild!
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

/* What --data can name (dt_dataset_open picks the reader by what the path is,
 * then by its first bytes, then by its extension):
 *   idx    a folder with train-images-idx3-ubyte, train-labels-idx1-ubyte,
 *          t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (each maybe .gz):
 *          images (n, ...) of any IDX type and per-sample shape; u8 images are
 *          scaled to pixel/255.0f as torchvision's ToTensor() does (the only
 *          format that scales); labels any integer type, or floats as targets.
 *   npy    a folder with x.npy and y.npy [and x_test.npy, y_test.npy] (a path
 *          to such an x.npy names its folder), memory-mapped.
 *   npz    a .npz (np.savez or np.savez_compressed) with members x and y [and
 *          x_test, y_test].
 *   csv    a .csv with a header row; --target COLUMN names the target (a float:
 *          regression, y_dim 1), every other column is an input feature.
 *   bin    llm.c token shards (a .bin file, or a folder of them): tokens.
 *   bytes  any other file, or a folder of text files, as next-byte tokens.
 * The first four hold tensors (lm false), the last two tokens (lm true).
 * Inputs x: any per-sample shape (at most 4 dimensions), any numeric dtype,
 * cast to float as batches are gathered; npy/npz/csv uint8 is NOT scaled.
 * Targets y: integer labels (any integer dtype, one per sample, all >= 0,
 * checked at open: n_classes = max + 1), or float targets of any per-sample
 * shape (flattened to y_dim floats). Splits: the file's own test arrays or
 * files when it has them (IDX t10k-*, x_test/y_test; for CSV a sibling
 * NAME_test.csv, or the name with "train" replaced by "test"), else the last
 * val_frac of the samples is the test split. */
typedef struct dt_tensorset {
    int64_t n;              /* samples */
    dt_array x;             /* (n, ...) inputs: a view whose data starts at this split's sample 0 */
    size_t in_dim;          /* floats per sample */
    bool div255;            /* u8 IDX images: x / 255.0f */
    const int32_t *labels;  /* (n) integer labels, or NULL */
    const float *y;         /* (n, y_dim) float targets, or NULL */
    int y_dim;
} dt_tensorset;

typedef struct dt_data_store dt_data_store; /* the files' maps and buffers (private) */

typedef struct dt_dataset {
    bool lm;                 /* tokens (next-token targets) */
    int T;                   /* tokens: window length */
    const char *format;      /* "idx", "npy", "npz", "csv", "bin", "bytes": for messages */
    int64_t n_train;         /* training samples or windows (0 when not loaded) */
    int in_dim;              /* tensors: floats per sample (product of in_shape); tokens: 0 */
    int in_ndim;             /* tensors: per-sample dimensions of x (0..4), as the file has
                              * them: IDX (n,28,28) -> 2 (28,28); CSV -> 1 (features); tokens: 0 */
    int64_t in_shape[4];
    int n_classes;           /* integer labels: max label + 1 (10 for Fashion-MNIST); 0 for float targets */
    int y_dim;               /* float targets per sample (regression); 0 for integer labels */
    int vocab;               /* tokens: every id is < vocab (256 for bytes; see dt_tokbin for bin) */
    dt_tensorset tr, te;     /* tensors: the training (n 0 when not loaded) and test splits */
    /* Shape metadata of the tensor splits in the layout of the first version
     * (n, rows x cols: in_shape when 2-D, else 1 x in_dim; n_classes); pixels and
     * labels are NULL. For callers written before in_shape; new code reads the
     * fields above. */
    dt_imageset train, test;
    dt_data_store *store;
} dt_dataset;

/* How to open a dataset: path (NULL: DT_CORPUS_DEFAULT_PATH when lm, else
 * DT_FMNIST_DEFAULT_DIR); lm: the model reads tokens (windows of T, the last
 * val_frac held out when the data has no validation split of its own), else
 * tensors (val_frac: the held-out test tail when the data has no test split);
 * need_train: false reads only what evaluation needs (IDX skips the training
 * files; other formats still open everything but report n_train 0); target:
 * the CSV target column (required for CSV, refused for other formats). */
typedef struct dt_data_opts {
    const char *path;
    bool lm;
    int T;
    double val_frac;
    bool need_train;
    const char *target;
} dt_data_opts;

/* Opens the dataset o describes (the formats above). On error (one line naming
 * the file and what to do; an unknown format lists the known ones) *d is left
 * freeable. d owns every map and buffer: dt_dataset_free. */
dt_status dt_dataset_open(dt_dataset *d, const dt_data_opts *o);
/* dt_dataset_open without a CSV target (the first version's call). */
dt_status dt_dataset_load(dt_dataset *d, const char *path, bool lm, int T, double val_frac, bool need_train);
void dt_dataset_free(dt_dataset *d); /* NULL ok */
/* Evaluation items: test samples, or validation windows capped at eval_max (> 0). */
int64_t dt_dataset_eval_size(const dt_dataset *d, int eval_max);
/* Training samples idx[0..n) (windows shifted by shift, tokens only) into x
 * (n, in_dim) and labels (n) or y (n, y_dim), or tokens and targets (n, T).
 * Pure and thread-safe (the prefetch thread calls it). Returns the number of
 * token ids >= vocab replaced by 0 (bin only; 0 otherwise). */
int64_t dt_dataset_gather(const dt_dataset *d, const int64_t *idx, int n, int shift, float *x,
                          int32_t *tokens, int32_t *targets, float *y);
/* Evaluation items [first, first + n) the same way (idx: n scratch entries). */
int64_t dt_dataset_gather_eval(const dt_dataset *d, int64_t first, int n, int64_t *idx, float *x,
                               int32_t *tokens, int32_t *targets, float *y);
/* Training samples idx[0..n) of a tensor split into x, labels and y as above. */
void dt_tensorset_gather(const dt_tensorset *s, const int64_t *idx, int n, float *x,
                         int32_t *labels, float *y);

typedef struct dt_loader_prefetch dt_loader_prefetch; /* the background gather (private) */

/* The batch buffers: dt_loader_next, _first and _eval fill them. With prefetch
 * on, next may swap them for the set the background thread filled, so the
 * pointers change from batch to batch: re-read l->x, l->tokens, l->targets
 * and l->y after every call, never keep them across one. */
typedef struct dt_loader {
    const dt_dataset *d;     /* borrowed */
    dt_sampler sampler;      /* this rank's shard of every global batch */
    uint64_t seed;
    int cap;                 /* samples the buffers hold */
    int64_t *idx;            /* (cap) */
    float *x;                /* (cap, in_dim) tensor inputs, or NULL */
    int32_t *tokens;         /* (cap, T) tokens, or NULL */
    int32_t *targets;        /* (cap) labels, or (cap, T) next tokens; NULL for float targets */
    float *y;                /* (cap, y_dim) float targets, or NULL */
    int64_t bad_tokens;      /* token ids >= vocab replaced by 0 so far (bin data only) */
    int64_t prefetched;      /* batches next took from the prefetch thread */
    dt_loader_prefetch *pf;  /* NULL: prefetch off */
} dt_loader;

/* A loader over d for rank `rank` of `world` data-parallel shards, buffers for
 * cap samples (at least the largest shard or evaluation batch it will load). */
dt_status dt_loader_init(dt_loader *l, const dt_dataset *d, int cap, uint64_t seed, int rank, int world);
void dt_loader_free(dt_loader *l); /* NULL ok; stops the prefetch thread */
/* Prefetch (double buffering): after each dt_loader_next, a background thread
 * gathers the batch the next call will most likely ask for (same global batch
 * size, the sampler as it is now) into a second set of buffers. The next call
 * computes its batch with the sampler as always and takes the prefetched one
 * only when its sample indices, sizes and window shift are the same, else it
 * loads synchronously: so the batches are bitwise those without prefetch,
 * whatever changed the sampler in between (set_weights, set_share, seek,
 * skip, a checkpoint's restore). next never waits for the thread: a job not
 * finished yet (busy cores) means a synchronous load, as without prefetch.
 * dt_loader_first and _eval load into the
 * current buffers and leave the prefetched set alone. on allocates the
 * second set and starts the thread (DT_ERR_NOMEM, or DT_ERR_IO when the thread
 * cannot start; the loader then stays without prefetch); off joins the thread
 * and frees the set. A loader without training data ignores it. */
dt_status dt_loader_set_prefetch(dt_loader *l, bool on);
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
