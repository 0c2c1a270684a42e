/* dtrain checkpoints: atomic, checksummed, sharded, logical.
 *
 * A checkpoint is a directory DIR/ckpt-<step> holding one safetensors file per
 * rank that owns data (rank-00000.safetensors, ...) and a manifest.json written
 * last; a checkpoint counts only once its manifest is in place.
 *   - rank 0's file holds every parameter under its PyTorch name, full shape
 *     (so PyTorch loads the weights as they are);
 *   - every file holds that rank's slices of the optimizer state, named
 *     optim.<state>.<param> (state: exp_avg, exp_avg_sq, momentum_buffer), each a
 *     1-D slice with its offset into the flattened logical tensor and the
 *     tensor's global shape in the metadata ("slices");
 *   - every tensor's CRC32C is in the file's metadata ("crc32c");
 *   - the manifest holds the step, the sampler position, the seed, the optimizer
 *     step count, the layout it was written from, the run config and the files
 *     with their sizes.
 * Because tensors are logical (never a rank's private layout), any layout can
 * resume any checkpoint. Files are written to a temporary name, fsynced, renamed
 * and the directory fsynced. */
#ifndef DTRAIN_CKPT_H
#define DTRAIN_CKPT_H

#include "dtrain/model.h"
#include "dtrain/optim.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_CKPT_FORMAT "dtrain-ckpt-1"

/* Training state that is not tensors. */
typedef struct dt_ckpt_state {
    int64_t step;            /* optimizer steps completed */
    int64_t epoch, index;    /* sampler position (global batches) */
    uint64_t seed;
    int64_t optim_t;         /* optimizer steps taken (bias correction) */
    int world, zero;         /* layout written from */
    int dp, pp, tp;          /* the mesh written from (informational) */
    int batch;               /* global batch */
    dt_optim_kind optim;
    int n_states;            /* optimizer state tensors per parameter: 0, 1 or 2 */
    float loss_scale;        /* --precision fp16: the next step's loss scale (0: none written) */
    int64_t scale_clean;     /* --precision fp16: clean steps towards its next doubling */
    char config[2048];       /* the run's flags as JSON text (informational) */
} dt_ckpt_state;

/* One rank's share of the optimizer state: `n` runs of the arena, run i covers
 * arena floats [arena_off[i], arena_off[i] + len[i]) and sits at state_off[i]
 * in the rank's state arrays (dt_optim m/v). */
typedef struct dt_ckpt_shard {
    int n;
    const size_t *arena_off, *len, *state_off;
    bool params_too;         /* also write the parameters of these runs, as slices
                              * named <param>@<offset> (parameter-server key ranges) */
    /* Extra 1-D f32 tensors this rank writes under the given names (rank-private
     * training state such as gradient compression's error-feedback residual);
     * not part of the logical model, read back with dt_ckpt_read_extra. */
    int n_extra;
    const char *const *extra_name;
    const float *const *extra_data;
    const size_t *extra_len;
} dt_ckpt_shard;

/* ---- writing ---------------------------------------------------------------- */
/* DIR/ckpt-<step, ten digits> into buf: the directory of one checkpoint. */
void dt_ckpt_dir_name(char *buf, size_t n, const char *dir, int64_t step);
/* Creates dir and its missing parents, like mkdir -p. */
dt_status dt_ckpt_mkdir_p(const char *dir);

typedef struct dt_ckpt_writer dt_ckpt_writer;

/* dir: --ckpt-dir (created if missing). keep: how many complete checkpoints to
 * keep (0 = all). timeout: how long rank 0 waits for the other ranks' files.
 * writers: the world ranks that write a file (those that own data), n_writers
 * of them, rank 0 among them; NULL: every rank. */
dt_status dt_ckpt_writer_create(dt_ckpt_writer **out, const char *dir, int rank, int world,
                                const int *writers, int n_writers, int keep, double timeout);
/* Waits for a persist in flight, then stops the thread. NULL ok. */
void dt_ckpt_writer_destroy(dt_ckpt_writer *w);
/* Takes an in-memory snapshot (parameters on rank 0; this rank's optimizer
 * shard everywhere) and returns; a background thread writes it. If the previous
 * persist is still running, waits for it first. Returns the error of the
 * previous persist, if it failed. */
dt_status dt_ckpt_save_async(dt_ckpt_writer *w, const dt_model *m, const dt_optim *o,
                             const dt_ckpt_shard *shard, const bool *param_mask,
                             const dt_ckpt_state *state);
/* Waits until nothing is in flight; returns the last persist's status. */
dt_status dt_ckpt_flush(dt_ckpt_writer *w);
/* Seconds the step loop spent taking snapshots (and waiting on back-pressure). */
double dt_ckpt_blocking_seconds(const dt_ckpt_writer *w);
/* Seconds the background thread took to persist the last checkpoint (0: none yet). */
double dt_ckpt_persist_seconds(const dt_ckpt_writer *w);

/* When the ranks do not share the checkpoint directory (each host writes to its
 * own local disk), the writers meet through this hook instead of the file
 * system; the trainer implements it over a communicator (src/train/ckpt_net.c).
 * Every rank persists every checkpoint (a rank that writes no file too), on the
 * writer thread, in this order:
 *   exchange: path/bytes of this rank's file (NULL, -1: none); afterwards
 *     sizes[q] is world rank q's file size (-1: none) on every rank, and each
 *     file has also been written to the replica hosts' cdir;
 *   manifest: rank 0 has written cdir/manifest.json at mpath; every host's
 *     lead rank writes the same manifest into its own cdir.
 * host_lead: this rank prunes old checkpoints of its host's directory. */
typedef struct dt_ckpt_net {
    void *ctx;
    bool host_lead;
    dt_status (*exchange)(void *ctx, const char *cdir, const char *path, int64_t bytes, int64_t *sizes);
    dt_status (*manifest)(void *ctx, const char *cdir, const char *mpath);
} dt_ckpt_net;
/* Installs net (copied; NULL: a shared directory, the default) before the
 * first save. */
void dt_ckpt_writer_set_net(dt_ckpt_writer *w, const dt_ckpt_net *net);

/* ---- reading ---------------------------------------------------------------- */
/* Checks a checkpoint directory completely: manifest, every file, every
 * tensor's checksum. Fills state when not NULL. */
dt_status dt_ckpt_verify(const char *path, dt_ckpt_state *state);
/* Newest valid checkpoint under dir into path (capacity n). Invalid ones are
 * reported with one warning line each and skipped. DT_ERR_IO when none. */
dt_status dt_ckpt_find_latest(const char *dir, char *path, size_t n);
/* The same among the checkpoints of steps <= max_step. */
dt_status dt_ckpt_find_latest_upto(const char *dir, int64_t max_step, char *path, size_t n);
/* Loads parameters into m->w and the full logical optimizer state into M and V
 * (arena-indexed, m->n floats each; either may be NULL when not wanted). Shapes
 * must match m. */
dt_status dt_ckpt_load(const char *path, dt_model *m, float *M, float *V, dt_ckpt_state *state);
/* Extra tensors (see dt_ckpt_shard): the one named `name` into out (n floats;
 * its length must be n) -> *found = true; absent -> *found = false, DT_OK. */
dt_status dt_ckpt_read_extra(const char *path, const char *name, float *out, size_t n, bool *found);
/* The sum of every extra tensor whose name starts with prefix (each n floats)
 * into out; *count gets how many there were. */
dt_status dt_ckpt_sum_extra(const char *path, const char *prefix, float *out, size_t n, int *count);
/* The model config of the checkpoint at ckpt_dir, read from the metadata of
 * the parameters' file that its manifest.json lists (rank 0's); only that
 * file is read, no checksum is verified (dt_ckpt_verify does that). Errors
 * (DT_ERR_FORMAT, DT_ERR_IO) name the missing or damaged manifest, a manifest
 * that names no parameter file, or a file that does not say its model. */
dt_status dt_ckpt_model_cfg(const char *ckpt_dir, dt_model_cfg *out);
/* Prints what a checkpoint holds and verifies every checksum (dtrain inspect). */
dt_status dt_ckpt_inspect(const char *path, FILE *out);

/* ---- parts: state a component owns and checkpoints itself --------------------
 * A component with training state (the optimizer shard, gradient compression's
 * residuals, robust aggregation's momenta, the sampler) offers a part; the
 * trainer's checkpoint phase asks every part for its tensors, and its resume
 * phase lets every part load itself into the layout it runs on now. */
#define DT_CKPT_MAX_EXTRA 8
typedef struct dt_ckpt_extras {
    int n;
    char names[DT_CKPT_MAX_EXTRA][64];
    const char *name[DT_CKPT_MAX_EXTRA];
    const float *data[DT_CKPT_MAX_EXTRA];
    size_t len[DT_CKPT_MAX_EXTRA];
} dt_ckpt_extras;
/* Adds one 1-D tensor (name copied, data borrowed until the save call returns). */
dt_status dt_ckpt_extras_add(dt_ckpt_extras *x, const char *name, const float *data, size_t len);
/* Points shard's extra tensors at x's (x must outlive the save call). */
void dt_ckpt_extras_attach(const dt_ckpt_extras *x, dt_ckpt_shard *shard);

/* Where this rank sits in the layout being written or resumed into. */
typedef struct dt_ckpt_place {
    int replica, replicas;   /* data-parallel replica (parameter server: worker) and count */
    bool lead;               /* the rank that logs */
} dt_ckpt_place;

/* What one rank writes into a checkpoint, filled by the parts. */
typedef struct dt_ckpt_snapshot {
    dt_ckpt_state *state;    /* scalar state (step, sampler position, optimizer count) */
    dt_ckpt_extras *extras;  /* rank-private tensors */
    dt_ckpt_shard *shard;    /* the optimizer-state runs this rank writes (n = 0: none) */
    const dt_optim *optim;   /* whose state the runs index */
} dt_ckpt_snapshot;

typedef struct dt_ckpt_part {
    void *ctx;
    /* This rank's share of a checkpoint being written, into snap. */
    dt_status (*save)(void *ctx, const dt_ckpt_place *at, dt_ckpt_snapshot *snap);
    /* Restores from the checkpoint at path (its state s) into this layout. */
    dt_status (*load)(void *ctx, const char *path, const dt_ckpt_state *s, const dt_ckpt_place *at);
} dt_ckpt_part;

/* The sampler's part: its position (epoch, index) in the checkpoint's state. */
struct dt_sampler;
void dt_ckpt_part_sampler(struct dt_sampler *s, dt_ckpt_part *part);

#ifdef __cplusplus
}
#endif
#endif
