/* Private: the layers a model description is compiled into.
 *
 * A block (the unit of pipeline partitions and activation memory) runs a tree
 * of layers: leaves are kernels with parameters (layers_*.c), containers are
 * `sequential` (each child feeds the next) and `residual` (out = in + seq(in)).
 * The tree lives in the model's layer array; a block names its root. seq.c runs
 * the tree forward and backward; desc.c builds it from a description. */
#ifndef DT_MODEL_LAYER_H
#define DT_MODEL_LAYER_H

#include "blocks.h"

/* Per-sample shape of an activation. Row-wise layers (linear, norms) act on the
 * last dimension over all leading ones. */
typedef struct dt_shape {
    int nd;
    int64_t d[4];
    bool tokens;   /* integer token ids (the model's input), not floats */
    bool split;    /* the last dimension is this rank's tensor-parallel shard */
    bool seq;      /* --sequence-parallel: d[0] (positions) is this rank's 1/tp of the token rows (seq_parallel.c) */
} dt_shape;

typedef struct dt_layer dt_layer;

/* What a leaf's kernels see besides their buffers. */
typedef struct dt_lctx {
    const dt_block *b;       /* the block (its tp group) */
    const float *P;          /* parameter arena */
    float *G;                /* gradient arena (backward) */
    const dt_batch *batch;
} dt_lctx;

typedef struct dt_layer_ops {
    const char *type;
    bool uses_out;           /* backward reads the layer's output */
    /* floats this layer keeps from forward to backward besides its output, and
     * the temporary floats forward or backward needs, for B samples */
    size_t (*saved)(const dt_layer *l, int B);
    size_t (*scratch)(const dt_layer *l, int B);
    void (*forward)(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                    float *scratch);
    /* Adds parameter gradients and, unless din is NULL, the input gradient. */
    void (*backward)(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                     const float *dout, float *din, const float *saved, float *scratch);
} dt_layer_ops;

enum { DT_LAYER_LEAF, DT_LAYER_SEQ, DT_LAYER_RESIDUAL };
/* Limits the compiler enforces, because seq.c walks the tree recursively with
 * a container's children on the stack. */
#define DT_LAYER_MAX_CHILDREN 256
#define DT_LAYER_MAX_DEPTH 32

struct dt_layer {
    const dt_layer_ops *ops;  /* leaves */
    int container;            /* DT_LAYER_* */
    int first, next;          /* containers: first child; every layer: next sibling (-1: none) */
    size_t in_dim, out_dim;   /* floats per sample, this rank's */
    int64_t rows;             /* rows per sample a row-wise layer sees (product of leading dims) */
    int d[8];                 /* the type's sizes */
    float f[2];               /* the type's real settings (eps, rate) */
    size_t off[4];            /* arena offsets of its tensors */
    int tp;                   /* DT_TP_NONE | COLUMN | ROW */
    /* --sequence-parallel (seq_parallel.c): the tp group size when the layer
     * touches the sequence split: a column-parallel linear (swiglu) gathers its
     * input, a row-parallel one scatters its output, a layer with replicated
     * parameters on the local rows sums their gradients, dropout keys its rows
     * by their place in the whole sequence; 0 otherwise. */
    int sp;
    bool reads_batch;         /* the first layer of the model: input is the batch */
    int lowp;                 /* --precision bf16|fp16: DT_LOWP_* (GEMM and convolution operands rounded) */
    int index;                /* position in the model's layer array, the layers --sequence-parallel inserts not
                                 counted (dropout's masks are keyed by it: the same in every layout) */
};

/* ---- --precision bf16 and fp16 ---------------------------------------------------
 * A layer with l->lowp multiplies its GEMM and convolution operands rounded to
 * bf16 or fp16: in bf16 where the CPU has AVX512-BF16 (BF16_NATIVE) linears,
 * convolutions and attention's products through dt_gemm_bf16 (the _bf16
 * kernels, which round while packing), everything else on copies rounded by
 * dt_round_bf16 or dt_round_fp16 in its scratch (BF16_EMULATED, FP16). dt_lowp_floats says how
 * many floats the copies of the given sizes need (0 in fp32); dt_lowp_operand
 * rounds n floats of x into *at, advances *at past them and returns the copy (x
 * itself in fp32). dt_lin_forward and dt_lin_backward are
 * dt_linear_forward/backward under the layer's precision, with dt_lin_floats
 * floats of scratch at `at`. */
enum { DT_LOWP_OFF, DT_LOWP_BF16_EMULATED, DT_LOWP_BF16_NATIVE, DT_LOWP_FP16 };
static inline size_t dt_lowp_floats(const dt_layer *l, size_t a, size_t b, size_t c) {
    return l->lowp ? a + b + c : 0;
}
const float *dt_lowp_operand(const dt_layer *l, float **at, const float *x, size_t n);
size_t dt_lin_floats(const dt_layer *l, int64_t N, int IC, int OC);
void dt_lin_forward(const dt_layer *l, float *out, const float *in, const float *w, const float *b, int N, int IC,
                    int OC, float *at);
void dt_lin_backward(const dt_layer *l, float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int N, int IC, int OC, float *at);

/* ---- building a leaf from its description (desc.c) ---------------------------
 * A leaf type's setup reads its attributes through these calls, declares its
 * tensors and says its output shape; any failure is one line naming the layer
 * (its place in the description, its name and type). */
typedef struct dt_lsetup dt_lsetup;
#define DT_LS_REQUIRED INT64_MIN
/* An integer attribute (a number or an expression) in [lo, hi]; def when absent
 * (DT_LS_REQUIRED: it must be given). */
dt_status dt_ls_int(dt_lsetup *s, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out);
dt_status dt_ls_float(dt_lsetup *s, const char *key, float def, float *out);
dt_status dt_ls_bool(dt_lsetup *s, const char *key, bool def, bool *out);
/* A word attribute, one of `choices` (a NULL-terminated list); its index. */
dt_status dt_ls_word(dt_lsetup *s, const char *key, const char *const *choices, int def, int *out);
/* Declares tensor NAME.suffix of the given logical shape; init/scale are the
 * layer type's default (PyTorch's), which the description's "init" (weight) or
 * "SUFFIX_init" overrides. A weight may be tied ("tie": another tensor's name)
 * when tieable. Tensor parallelism: split (DT_SPLIT_*) with nparts ranges of
 * this rank (pstart, plen), or DT_SPLIT_NONE. Returns the arena offset. */
size_t dt_ls_param(dt_lsetup *s, const char *suffix, int ndim, const int64_t *shape, int init, float scale,
                   bool tieable, int split, int nparts, const int64_t *pstart, const int64_t *plen);
dt_status dt_ls_fail(dt_lsetup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int dt_ls_tp_size(const dt_lsetup *s);
int dt_ls_tp_rank(const dt_lsetup *s);
/* The tp group size under --sequence-parallel (with --tp > 1), else 0. */
int dt_ls_seq_parallel(const dt_lsetup *s);
/* Marks the last n tensors declared as buffers: kept and checkpointed, never
 * given a gradient (batch norm's running statistics). */
void dt_ls_buffers(dt_lsetup *s, int n);
/* Adds FLOPs per sample of one training step (forward and backward). */
void dt_ls_flops(dt_lsetup *s, int64_t flops);
/* Adds the bytes per sample a step's tensor-parallel all-reduces carry (no-op without tp). */
void dt_ls_tp_bytes(dt_lsetup *s, int64_t bytes);
dt_status dt_ls_status(const dt_lsetup *s);

/* A leaf type: its ops, and setup, which reads the attributes, fills l->d/f,
 * declares tensors and writes the output shape (input shape `in`). */
typedef struct dt_layer_type {
    const char *name;
    const dt_layer_ops *ops;
    dt_status (*setup)(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out);
} dt_layer_type;

extern const dt_layer_type dt_layer_linear, dt_layer_layernorm, dt_layer_embedding, dt_layer_pos_embedding,
    dt_layer_attention, dt_layer_flatten, dt_layer_conv2d, dt_layer_maxpool2d, dt_layer_relu, dt_layer_gelu,
    dt_layer_silu, dt_layer_tanh, dt_layer_rmsnorm, dt_layer_avgpool2d, dt_layer_global_avgpool, dt_layer_swiglu,
    dt_layer_batchnorm1d, dt_layer_batchnorm2d, dt_layer_dropout;

/* Finds a leaf type by name (NULL: unknown); lists the known names into buf. */
const dt_layer_type *dt_layer_find(const char *type);
void dt_layer_names(char *buf, size_t n);

/* ---- sequence parallelism (seq_parallel.c) ---------------------------------------
 * Inside the region, the B x T token rows of a micro-batch (in order) are split
 * into tp contiguous parts, part r on tp rank r. A buffer of n floats of whole
 * rows holds the parts in rank order: this rank's part starts at dt_sp_off.
 * dt_sp_allgather: in place, every rank's part to every rank (this rank's must
 * be in place); dt_sp_reduce_scatter: in place, this rank's part becomes the
 * sum over the group; dt_sp_sum_into: all-reduces tmp (n) and adds it into dst.
 * Failures are recorded in the block's sticky tp status (no collective starts
 * after one); without a tp group the collectives are no-ops. */
size_t dt_sp_off(const dt_block *b, size_t n);
void dt_sp_allgather(const dt_block *b, float *buf, size_t n);
void dt_sp_reduce_scatter(const dt_block *b, float *buf, size_t n);
void dt_sp_sum_into(const dt_block *b, float *tmp, float *dst, size_t n);
/* Where desc.c places the region's ends, from a top-level block's description:
 * dt_sp_marked: j marks a tensor-parallel layer anywhere inside (the block
 * enters, or stays in, the region). dt_sp_leave_at: in a block that leaves it,
 * how many leading layers of its top container (a sequential or a repeat) work
 * on any rows (norms, activations, dropout) and stay inside; 0: the region
 * ends at the block's start. dt_sp_enter_check: the one-line refusal when the
 * block's input shape cannot be split (what: the description, name: the block).
 * dt_sp_layer_init: makes the new leaf l the layer that enters (whole rows ->
 * this rank's) or leaves (-> whole) for a tp group of sp, in block b (whose
 * planner bytes it counts); sh becomes its output shape. */
struct json_t;
bool dt_sp_marked(const struct json_t *j);
int dt_sp_leave_at(const struct json_t *block);
dt_status dt_sp_enter_check(const dt_shape *sh, int sp, const char *what, const char *name);
void dt_sp_layer_init(dt_layer *l, dt_block *b, bool enter, int sp, dt_shape *sh);

/* seq.c: the block whose layers are the tree rooted at root. */
extern const dt_block_ops dt_block_layers_ops;
size_t dt_layer_saved_floats(const dt_layer *L, int i, int B);
size_t dt_layer_scratch_floats(const dt_layer *L, int i, int B);

#endif
