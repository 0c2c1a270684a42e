/* dtrain training loop: builds a run from a config, drives steps, evaluates,
 * writes metrics and weights. Later layers (data parallelism, checkpoints)
 * hook into the same step structure. */
#ifndef DTRAIN_TRAIN_H
#define DTRAIN_TRAIN_H

#include "dtrain/model.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_train_cfg {
    dt_model_cfg model;
    const char *data;        /* dataset dir (mlp/cnn) or corpus path (gpt); NULL: default */
    int64_t epochs;          /* used when steps == 0 */
    int64_t steps;           /* total optimizer steps; 0: derive from epochs */
    int batch;               /* global batch (samples; for the gpt, sequences) */
    float lr, min_lr;
    int64_t warmup;
    bool cosine;
    dt_optim_cfg optim;
    float clip;              /* max global gradient norm; 0 disables */
    uint64_t seed;
    const char *out_dir;     /* NULL: write nothing */
    const char *init;        /* weights to start from, or NULL */
    int64_t eval_every;      /* steps; 0: only at the end */
    int64_t log_every;       /* steps between metric lines */
    double val_frac;         /* gpt: held-out tail of the corpus */
    int eval_max;            /* gpt: validation windows per evaluation (0: all) */
    bool progress;           /* live progress line (terminal) instead of log lines */
    bool quiet;
} dt_train_cfg;

typedef struct dt_train_result {
    int64_t steps;
    float final_loss;        /* mean training loss of the last logged window */
    float test_acc;          /* classifiers: last evaluation (-1 if none) */
    float eval_loss;         /* test loss (classifiers) or validation loss (gpt) */
    double items_per_s;      /* samples/s (classifiers) or tokens/s (gpt), whole run */
    double seconds;
} dt_train_result;

void dt_train_cfg_default(dt_train_cfg *c, dt_model_kind kind);
dt_status dt_train_cfg_check(const dt_train_cfg *c);
dt_status dt_train_run(const dt_train_cfg *c, dt_train_result *res);

/* Evaluation of given weights (no training): accuracy + loss on the test set
 * (classifiers) or loss on the validation tail (gpt). */
dt_status dt_eval_run(const dt_train_cfg *c, const char *weights, dt_train_result *res);

#ifdef __cplusplus
}
#endif
#endif
