/* dtrain models: an ordered list of blocks over one flat parameter arena.
 *
 * A model owns two arenas of identical layout: parameters `w` and gradients
 * `g` (n floats each). Tensors are named views into them, in the order and with
 * the names and shapes PyTorch gives them (nn.Linear weight is (out, in); the
 * GPT uses nanoGPT's names), so weights round-trip through safetensors.
 *
 * A block knows its parameters (offsets into the arena), its forward, its
 * backward and how many floats of activations it keeps. Activations live in a
 * separate dt_acts object sized for a block range and a maximum batch, so a
 * pipeline stage (a contiguous block range) or several micro-batches in flight
 * each get their own. The training loop never special-cases a model.
 */
#ifndef DTRAIN_MODEL_H
#define DTRAIN_MODEL_H

#include "dtrain/comm.h"
#include "dtrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The built-in models are the description files models/mlp.json, cnn.json and
 * gpt.json (compiled into the library); DT_MODEL_FILE is a description the
 * user gives (dt_model_cfg.file, docs/MODELS.md). */
typedef enum { DT_MODEL_MLP, DT_MODEL_CNN, DT_MODEL_GPT, DT_MODEL_FILE, DT_MODEL_COUNT } dt_model_kind;

#define DT_MLP_MAX_HIDDEN 8
/* --precision: what the GEMMs and convolutions multiply. fp32, or their two
 * operands rounded to bf16 with the products summed in fp32 (PyTorch's bf16
 * autocast for matmul and convolution); parameters, gradients, optimizer state
 * and everything else stay fp32 (docs/PRECISION.md). BF16 multiplies linears'
 * operands with AVX512-BF16 where the CPU has it; BF16_EMULATED never does (the
 * same products, summed in another order: what a CPU without it runs). FP16
 * rounds the operands to IEEE half instead (range 2^-24..65504, emulated on any
 * CPU), which needs the trainer's dynamic loss scaling (dt_scaler). */
typedef enum { DT_PRECISION_FP32, DT_PRECISION_BF16, DT_PRECISION_BF16_EMULATED, DT_PRECISION_FP16 } dt_precision;

typedef struct dt_model_cfg {
    dt_model_kind kind;
    /* mlp */
    int in_dim;                       /* 784 */
    int n_hidden;                     /* 2 */
    int hidden[DT_MLP_MAX_HIDDEN];    /* 1024, 1024 */
    int n_classes;                    /* 10 (mlp, cnn) */
    /* cnn: 1x28x28 input, architecture fixed by the issue */
    int img_c, img_h, img_w;
    /* gpt (nanoGPT names) */
    int n_layer, n_head, n_embd, block_size, vocab_size;
    /* tensor parallelism (Megatron): this rank's shard of tp_size (0 or 1: none) */
    int tp_size, tp_rank;
    /* --sequence-parallel (Korthikanti et al. 2022): with tp_size > 1, the blocks
     * with tensor-parallel layers run their layer norms, dropout and residuals on
     * this rank's 1/tp of the token rows (src/model/seq_parallel.c); ignored
     * without tp. Changes no tensor: not part of what a checkpoint must match. */
    bool seq_parallel;
    /* DT_MODEL_FILE: the description's path */
    char file[256];
    /* --set: the description's variables, "NAME=VALUE,..." (VALUE a number, or
     * integers joined by ':' for a list); "" none. */
    char set[256];
    /* dt_precision; not part of what a checkpoint must match (a bf16 run resumes in fp32) */
    int precision;
} dt_model_cfg;

const char *dt_model_kind_name(dt_model_kind k);         /* "mlp" */
dt_status dt_model_kind_parse(const char *s, dt_model_kind *out); /* mlp, cnn or gpt */
/* --model's value: a built-in kind, a shipped description's name (models/NAME.json,
 * compiled in) or a description file's path; sets kind and file. */
dt_status dt_model_select(dt_model_cfg *c, const char *s);
/* Checks the syntax of --set's value (the names are checked against the
 * description when the model is built). */
dt_status dt_model_set_check(const char *s);
/* "mlp", or the description file's path / shipped name. */
const char *dt_model_name(const dt_model_cfg *c);
void dt_model_cfg_default(dt_model_cfg *c, dt_model_kind kind);
dt_status dt_model_cfg_check(const dt_model_cfg *c);      /* ranges, divisibility */

/* One batch (or one rank's shard / one micro-batch of it). */
typedef struct dt_batch {
    int B;                   /* samples */
    const float *x;          /* (B, in_dim) images (mlp, cnn) */
    const int32_t *tokens;   /* (B, T) input bytes (gpt) */
    const int32_t *targets;  /* (B) labels, or (B, T) next bytes */
    const float *y;          /* (B, y_dim) float targets (mse), or NULL */
    float loss_scale;        /* dL/d(each loss term): 1 / terms in the GLOBAL batch */
    /* Dropout's masks are keyed by (seed, step, the sample's dataset index), so
     * every layout draws the same mask for a sample; ids NULL: no dropout. */
    const int64_t *ids;      /* (B) dataset index of each sample, or NULL */
    int64_t step;
    uint64_t seed;
    bool eval;               /* evaluation: no dropout, batch norm uses running statistics */
    bool recompute;          /* forward run again for recomputation: statistics not updated */
} dt_batch;

typedef struct dt_param {
    char name[64];           /* "fc1.weight", "transformer.h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[4];
    size_t offset, numel;    /* view into the arenas */
    bool decay;              /* weight decay applies (tensors with ndim >= 2) */
    bool buffer;             /* not trained: batch norm's running statistics (never a gradient) */
    int block;               /* index of the owning block */
    int init;                /* DT_INIT_* */
    float init_scale;        /* uniform bound, normal std, or constant */
    /* Tensor parallelism: the logical (unsharded) tensor and which part of it
     * this rank holds. The 2-D view of a tensor is [shape[0], rest] (a 1-D one
     * is [1, n]); DT_SPLIT_ROWS keeps row ranges, DT_SPLIT_COLS column ranges of
     * that view, nparts of them, concatenated in this order locally. */
    int64_t lshape[4];
    size_t lnumel;
    int split;
    int nparts;
    int64_t pstart[3], plen[3];
} dt_param;

enum { DT_INIT_UNIFORM, DT_INIT_NORMAL, DT_INIT_CONST };
enum { DT_INPUT_FEATURES, DT_INPUT_TOKENS };
enum { DT_LOSS_XENT, DT_LOSS_MSE };
enum { DT_SPLIT_NONE, DT_SPLIT_ROWS, DT_SPLIT_COLS };

typedef struct dt_block dt_block;
typedef struct dt_model dt_model;

typedef struct dt_block_ops {
    const char *kind;
    /* floats of activations kept from forward to backward, for B samples */
    size_t (*saved_floats)(const dt_block *b, int B);
    /* floats of temporary memory forward and backward need, for B samples */
    size_t (*scratch_floats)(const dt_block *b, int B);
    /* in: (B, in_dim) output of the previous block (NULL for the first block,
     * which reads the batch); out: (B, out_dim). P: the model's parameter arena. */
    void (*forward)(const dt_block *b, const float *P, const dt_batch *batch,
                    const float *in, float *out, float *saved, float *scratch);
    /* Adds parameter gradients into G (the gradient arena) and, unless din is
     * NULL, the input gradient into din. dout is NULL for the loss block. */
    void (*backward)(const dt_block *b, const float *P, float *G, const dt_batch *batch,
                     const float *in, const float *out, const float *dout, float *din,
                     const float *saved, float *scratch);
} dt_block_ops;

#define DT_BLOCK_MAX_TENSORS 64
struct dt_block {
    const dt_block_ops *ops;
    char name[48];
    size_t in_dim, out_dim;     /* floats per sample at the boundaries (in_dim 0: reads batch) */
    size_t param_lo, param_hi;  /* arena range of the parameters this block owns */
    int n_tensors;
    size_t off[DT_BLOCK_MAX_TENSORS]; /* arena offsets of the tensors it uses (may be tied) */
    int dims[8];                /* block-specific sizes */
    bool is_loss;               /* last block: out = per-term losses */
    dt_comm *tp;                /* tensor-parallel group (NULL: none) */
    dt_comm *dp;                /* data-parallel group for synchronised batch norm (NULL: none) */
    dt_status *tp_err;          /* where a failed tp or dp collective is recorded */
    const struct dt_layer *layers; /* the model's layers (private, src/model/layer.h) */
    int root;                   /* this block's tree in them */
    /* For a planner, per sample of a training step on this rank (its tp shard):
     * GEMM FLOPs, and bytes its tensor-parallel all-reduces carry. */
    int64_t flops, tp_bytes;
};

/* Where a block's parameters are about to be used or are done with, for an
 * owner that holds them only around their use (ZeRO-3). */
typedef enum {
    DT_PARAMS_FORWARD,      /* before the block's forward */
    DT_PARAMS_FORWARD_DONE, /* after it */
    DT_PARAMS_BACKWARD,     /* before its backward (and a recompute's forward) */
    DT_PARAMS_BACKWARD_DONE,/* after it */
} dt_params_use;
typedef struct dt_param_hooks {
    /* eval: a forward with no backward to follow (an evaluation). */
    void (*use)(void *ctx, int block, dt_params_use use, bool eval);
    /* A pass this rank has no samples for: the owner does what a pass that
     * ran would have done with the parameters (the same collectives). */
    void (*skip)(void *ctx, bool eval);
    void *ctx;
} dt_param_hooks;

struct dt_model {
    dt_model_cfg cfg;
    int n_blocks;
    dt_block *blocks;
    int n_params;
    dt_param *params;
    size_t n;                   /* floats in each arena */
    float *w;                   /* parameters (n) */
    float *g;                   /* gradients (n) */
    int loss_terms;             /* loss terms per sample (1, or T for the gpt) */
    int input;                  /* DT_INPUT_FEATURES (batch.x) or DT_INPUT_TOKENS (batch.tokens) */
    int in_floats;              /* features: floats of x per sample */
    int seq_len, vocab;         /* tokens: per sample, and ids < vocab */
    int loss_kind;              /* DT_LOSS_XENT (int targets, loss_terms per sample) or DT_LOSS_MSE */
    int n_classes;              /* cross-entropy: classes (or vocabulary) */
    int y_dim;                  /* mse: float targets per sample */
    bool has_batchnorm;         /* some layer keeps running statistics (dt_model_set_dp) */
    struct dt_layer *layers;    /* the layer trees of the blocks (private) */
    int n_layers;
    int64_t flops_per_sample;   /* GEMM FLOPs of one training step per sample */
    dt_status tp_err;           /* first failure of a tensor-parallel collective (sticky) */
    dt_param_hooks params_hook; /* ZeRO-3: parameters gathered before use (fn NULL: none) */
};

/* Builds the block list and allocates both arenas (zeroed). Owned by the
 * caller: dt_model_destroy. */
dt_status dt_model_create(dt_model **out, const dt_model_cfg *cfg);
/* The same without the arenas (w and g NULL): what the model takes and holds
 * (input, loss, sizes, tensors), for checks before a run. */
dt_status dt_model_probe(const dt_model_cfg *cfg, dt_model **out);
void dt_model_destroy(dt_model *m); /* NULL ok */
/* PyTorch's default initialisation (nn.Linear/Conv2d uniform, LayerNorm 1/0) for
 * mlp and cnn; GPT-2's (N(0, 0.02), residual projections scaled by
 * 1/sqrt(2*n_layer), biases 0) for the gpt. Each tensor draws from its own RNG
 * stream (seed, tensor index) so the result does not depend on the layout. */
void dt_model_init(dt_model *m, uint64_t seed);
const dt_param *dt_model_find(const dt_model *m, const char *name);
/* Tensor parallelism: the group the model's blocks all-reduce over (Megatron's
 * f and g). Its size must be cfg.tp_size. */
void dt_model_set_tp(dt_model *m, dt_comm *tp);
/* Batch norm: the data-parallel group its statistics are summed over (a
 * communicator of its own: collectives run inside forward and backward while
 * the gradient buckets' thread uses the replicas' communicator). NULL: none. */
void dt_model_set_dp(dt_model *m, dt_comm *dp);
/* Copies between the local (tp-sharded) arena of m and the logical arena of
 * `full`, a model of the same config with no tp. to_logical writes only the
 * parts m holds; with owned_only, replicated tensors only on tp rank 0 (so a
 * sum over the tp group counts each element once). params_mask (NULL: all)
 * selects parameter indices. */
void dt_model_local_to_logical(const dt_model *m, const float *local, const dt_model *full,
                               float *logical, bool owned_only, const bool *params_mask);
void dt_model_local_from_logical(const dt_model *m, float *local, const dt_model *full,
                                 const float *logical);
void dt_model_zero_grad(dt_model *m);

/* ---- activations --------------------------------------------------------- */
typedef struct dt_acts {
    int first, last;            /* block range [first, last] */
    int maxB;
    float **bound;              /* bound[i]: input of block first+i (i = 0 .. n); bound[n] output of last */
    float **saved;              /* per block */
    float *scratch;
    float *dbuf[2];             /* boundary gradients, ping-pong */
    float *mem;
    size_t n_floats;            /* total floats held */
    bool shared;                /* saved and scratch belong to another dt_acts */
} dt_acts;

dt_status dt_acts_create(dt_acts **out, const dt_model *m, int first, int last, int maxB);
/* Like dt_acts_create, but the saved activations and scratch are those of
 * `share` (same range and maxB): for activation recomputation, where only the
 * block inputs are kept per micro-batch. */
dt_status dt_acts_create_shared(dt_acts **out, const dt_model *m, const dt_acts *share);
void dt_acts_destroy(dt_acts *a); /* NULL ok */

/* Forward through the acts' block range. `in` is the input of the first block
 * (NULL when it is block 0). Returns the loss (sum of terms times loss_scale)
 * when the range ends with the loss block, else 0. */
float dt_model_forward(const dt_model *m, dt_acts *a, const dt_batch *b, const float *in);
/* Called after each block's backward: its gradients in m->g are final for this
 * micro-batch (buckets use it to start communication). */
typedef void (*dt_block_done_fn)(void *ctx, int block);
/* Backward through the range in reverse, adding into m->g. dout is the gradient
 * of the range's output (NULL when it ends with the loss block); din, when not
 * NULL, receives (adds) the gradient of the range's input. */
void dt_model_backward(dt_model *m, dt_acts *a, const dt_batch *b, const float *dout,
                       float *din, dt_block_done_fn done, void *ctx);
/* Backward with recomputation: before each block's backward, its forward is
 * run again from its kept input to rebuild the saved activations. */
void dt_model_backward_recompute(dt_model *m, dt_acts *a, const dt_batch *b, const float *dout,
                                 float *din, dt_block_done_fn done, void *ctx);
/* A forward (eval) or forward and backward pass this rank skips for want of
 * samples: the parameters' owner is told (dt_param_hooks.skip), so its
 * collectives still match the other ranks'. Nothing without hooks. */
void dt_model_params_skip(const dt_model *m, bool eval);
/* Classifiers, after a forward: how many of the batch's samples are argmax-correct. */
int dt_model_count_correct(const dt_model *m, const dt_acts *a, const dt_batch *b);

#ifdef __cplusplus
}
#endif
#endif
