/* Leaf layers on rows (the last dimension): linear (Megatron column/row
 * parallel), layer norm, token and position embeddings, causal attention.
 * Each forward/backward is the kernel call the GPT block made before the models
 * became descriptions, in the same order, so results are bitwise the same.
 * FLOPs per sample of a training step: linear 6*IC*OC per row (4 for the
 * model's first layer: no input gradient), attention 12*T*T*C. */
#include "layer.h"

#include "dtrain/nn.h"

#include <math.h>
#include <string.h>

static size_t none(const dt_layer *l, int B) { return 0; }
static int64_t N_of(const dt_layer *l, const dt_lctx *c) { return (int64_t)c->batch->B * l->rows; }

/* ---- linear: d = {IC, OC, bias, parts} (local sizes); off = {weight, bias} ---- */

/* Rows the GEMM multiplies: a column-parallel linear under --sequence-parallel
 * multiplies the gathered rows of every rank (seq_parallel.c). */
static int64_t lin_rows(const dt_layer *l, int B) {
    return (int64_t)B * l->rows * (l->sp && l->tp == DT_TP_COLUMN ? l->sp : 1);
}

/* --sequence-parallel's scratch: column, the gathered input and its gradient;
 * row, the whole partial output (forward) or output gradient (backward); a
 * linear without "tp" on this rank's rows, its parameter gradients' increment. */
static size_t lin_sp_floats(const dt_layer *l, int B) {
    const size_t N = (size_t)lin_rows(l, B), IC = (size_t)l->d[0], OC = (size_t)l->d[1];
    if (!l->sp) return 0;
    if (l->tp == DT_TP_COLUMN) return 2 * ((N * IC + 15) & ~(size_t)15);
    if (l->tp == DT_TP_ROW) return N * OC;
    return ((IC * OC + 15) & ~(size_t)15) + OC;
}

/* Scratch: the fused ReLU's masked gradient (N, OC), then dt_lin_floats (bf16/fp16),
 * then lin_sp_floats. */
static size_t lin_base(const dt_layer *l, int B) {
    const int64_t N = lin_rows(l, B);
    return (l->ops->uses_out ? (size_t)N * (size_t)l->d[1] : 0) + dt_lin_floats(l, N, l->d[0], l->d[1]);
}
static size_t lin_scratch(const dt_layer *l, int B) { return lin_base(l, B) + lin_sp_floats(l, B); }

static void lin_bias(float *out, const float *bias, int64_t N, int OC) {
    if (!bias) return;
    for (int64_t i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
}

static void lin_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                        float *scratch) {
    int B = c->batch->B, N = (int)lin_rows(l, B), IC = l->d[0], OC = l->d[1];
    const float *bias = l->d[2] ? c->P + l->off[1] : NULL;
    float *at = scratch + (l->ops->uses_out ? (size_t)N * OC : 0), *sp = scratch + lin_base(l, B);
    size_t n_out = (size_t)B * l->out_dim;
    if (l->sp && l->tp == DT_TP_COLUMN) { /* the whole sequence's rows from every rank */
        memcpy(sp + dt_sp_off(c->b, (size_t)N * IC), in, (size_t)B * l->in_dim * sizeof(float));
        dt_sp_allgather(c->b, sp, (size_t)N * IC);
        dt_lin_forward(l, out, sp, c->P + l->off[0], bias, N, IC, OC, at);
    } else if (l->sp && l->tp == DT_TP_ROW) { /* partial sums scattered: this rank's rows summed */
        dt_lin_forward(l, sp, in, c->P + l->off[0], NULL, N, IC, OC, at);
        dt_sp_reduce_scatter(c->b, sp, (size_t)N * OC);
        memcpy(out, sp + dt_sp_off(c->b, (size_t)N * OC), n_out * sizeof(float));
        lin_bias(out, bias, (int64_t)n_out / OC, OC);
    } else if (l->tp == DT_TP_ROW && c->b->tp) {
        /* g: partial products summed over the group, then the replicated bias once. */
        dt_lin_forward(l, out, in, c->P + l->off[0], NULL, N, IC, OC, at);
        dt_block_tp_allreduce(c->b, out, (size_t)N * OC);
        lin_bias(out, bias, N, OC);
    } else {
        dt_lin_forward(l, out, in, c->P + l->off[0], bias, N, IC, OC, at);
    }
    if (l->ops->uses_out) dt_relu_forward(out, out, n_out);
}

/* Backward under --sequence-parallel (l->sp). */
static void lin_sp_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                            const float *dout, float *din, float *scratch) {
    int B = c->batch->B, N = (int)lin_rows(l, B), IC = l->d[0], OC = l->d[1];
    float *at = scratch + (l->ops->uses_out ? (size_t)N * OC : 0), *sp = scratch + lin_base(l, B);
    float *dw = c->G + l->off[0], *db = l->d[2] ? c->G + l->off[1] : NULL;
    const float *w = c->P + l->off[0], *dpre = dout;
    if (l->ops->uses_out && l->tp != DT_TP_ROW) { /* fused ReLU; the row's is applied to its own rows below */
        dt_relu_mask(scratch, dout, out, (size_t)B * l->out_dim);
        dpre = scratch;
    }
    if (l->tp == DT_TP_COLUMN) { /* the input gathered again; its gradient reduce-scattered */
        size_t n = (size_t)N * IC, part = (size_t)B * l->in_dim;
        float *x = sp, *dx = sp + ((n + 15) & ~(size_t)15);
        memcpy(x + dt_sp_off(c->b, n), in, part * sizeof(float));
        dt_sp_allgather(c->b, x, n);
        if (din) memset(dx, 0, n * sizeof(float));
        dt_lin_backward(l, din ? dx : NULL, dw, db, dpre, x, w, N, IC, OC, at);
        if (!din) return;
        dt_sp_reduce_scatter(c->b, dx, n);
        const float *mine = dx + dt_sp_off(c->b, n);
        for (size_t k = 0; k < part; k++) din[k] += mine[k];
    } else if (l->tp == DT_TP_ROW) { /* the output gradient gathered: the rest is plain tp's */
        size_t n = (size_t)N * OC, part = (size_t)B * l->out_dim;
        float *dy = sp + dt_sp_off(c->b, n);
        if (l->ops->uses_out) dt_relu_mask(dy, dout, out, part);
        else memcpy(dy, dout, part * sizeof(float));
        dt_sp_allgather(c->b, sp, n);
        dt_lin_backward(l, din, dw, db, sp, in, w, N, IC, OC, at);
    } else { /* replicated parameters on this rank's rows: their gradients summed over the group */
        size_t nw = ((size_t)IC * OC + 15) & ~(size_t)15;
        memset(sp, 0, (nw + (size_t)OC) * sizeof(float));
        dt_lin_backward(l, din, sp, db ? sp + nw : NULL, dpre, in, w, N, IC, OC, at);
        dt_sp_sum_into(c->b, sp, dw, (size_t)IC * OC);
        if (db) dt_sp_sum_into(c->b, sp + nw, db, (size_t)OC);
    }
}

static void lin_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                         const float *dout, float *din, const float *saved, float *scratch) {
    if (l->sp) {
        lin_sp_backward(l, c, in, out, dout, din, scratch);
        return;
    }
    int N = (int)lin_rows(l, c->batch->B), IC = l->d[0], OC = l->d[1];
    const float *dpre = dout;
    if (l->ops->uses_out) { /* fused ReLU */
        size_t n = (size_t)N * OC;
        dt_relu_mask(scratch, dout, out, n);
        dpre = scratch;
    }
    float *at = scratch + (l->ops->uses_out ? (size_t)N * OC : 0);
    dt_lin_backward(l, din, c->G + l->off[0], l->d[2] ? c->G + l->off[1] : NULL, dpre, in, c->P + l->off[0], N, IC,
                    OC, at);
    /* f: the replicated input's gradient is the sum of every shard's part. */
    if (l->tp == DT_TP_COLUMN && din) dt_block_tp_allreduce(c->b, din, (size_t)N * IC);
}

static const dt_layer_ops lin_ops = {"linear", false, none, lin_scratch, lin_forward, lin_backward};
static const dt_layer_ops lin_relu_ops = {"linear", true, none, lin_scratch, lin_forward, lin_backward};

static dt_status lin_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    static const char *acts[] = {"none", "relu", NULL}, *modes[] = {"none", "column", "row", NULL};
    int64_t OC, parts;
    bool bias;
    int act, mode;
    int T = dt_ls_tp_size(s), r = dt_ls_tp_rank(s);
    dt_ls_int(s, "out", DT_LS_REQUIRED, 1, 1 << 24, &OC);
    dt_ls_bool(s, "bias", true, &bias);
    dt_ls_word(s, "activation", acts, 0, &act);
    dt_ls_word(s, "tp", modes, 0, &mode);
    dt_ls_int(s, "tp_parts", 1, 1, 3, &parts);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (in->tokens) return dt_ls_fail(s, "takes floats, but its input is token ids (start with an embedding)");
    int64_t ICl = in->d[in->nd - 1], IC = in->split ? ICl * T : ICl;
    if (T == 1) mode = DT_TP_NONE;
    if (in->split && mode != DT_TP_ROW)
        return dt_ls_fail(s, "its input is split across the tp group: it must be \"tp\": \"row\"");
    if (!in->split && mode == DT_TP_ROW)
        return dt_ls_fail(s, "\"tp\": \"row\" needs an input split by a column-parallel layer before it");
    if (mode == DT_TP_COLUMN && OC % (T * parts))
        return dt_ls_fail(s, "'out' %lld is not divisible by --tp %d x tp_parts %lld", (long long)OC, T, (long long)parts);
    int64_t OCl = mode == DT_TP_COLUMN ? OC / T : OC;
    int sp = dt_ls_seq_parallel(s);
    if (sp && mode == DT_TP_COLUMN && !in->seq)
        return dt_ls_fail(s, "under --sequence-parallel a column-parallel linear's input must be split along the "
                          "sequence (a (positions, width) input at its block's start or after a row-parallel linear)");
    l->ops = act ? &lin_relu_ops : &lin_ops;
    l->tp = mode;
    l->sp = sp && (mode == DT_TP_ROW || in->seq) ? sp : 0;
    l->d[0] = (int)ICl;
    l->d[1] = (int)OCl;
    l->d[2] = bias;
    float bound = 1.0f / sqrtf((float)IC); /* PyTorch's nn.Linear default */
    int64_t ws[2] = {OC, IC}, bs[1] = {OC}, ps[3], pl[3];
    for (int k = 0; k < parts; k++) { /* column: each of the parts keeps this rank's rows */
        ps[k] = k * (OC / parts) + r * (OCl / parts);
        pl[k] = OCl / parts;
    }
    int64_t rs = r * ICl, rl = ICl;
    if (mode == DT_TP_COLUMN) l->off[0] = dt_ls_param(s, "weight", 2, ws, DT_INIT_UNIFORM, bound, true, DT_SPLIT_ROWS, (int)parts, ps, pl);
    else if (mode == DT_TP_ROW) l->off[0] = dt_ls_param(s, "weight", 2, ws, DT_INIT_UNIFORM, bound, true, DT_SPLIT_COLS, 1, &rs, &rl);
    else l->off[0] = dt_ls_param(s, "weight", 2, ws, DT_INIT_UNIFORM, bound, true, DT_SPLIT_NONE, 0, NULL, NULL);
    if (bias) {
        if (mode == DT_TP_COLUMN) l->off[1] = dt_ls_param(s, "bias", 1, bs, DT_INIT_UNIFORM, bound, false, DT_SPLIT_COLS, (int)parts, ps, pl);
        else l->off[1] = dt_ls_param(s, "bias", 1, bs, DT_INIT_UNIFORM, bound, false, DT_SPLIT_NONE, 0, NULL, NULL);
    }
    int64_t rows = l->rows * (l->sp && mode == DT_TP_COLUMN ? sp : 1); /* the GEMM's */
    dt_ls_flops(s, (l->reads_batch ? 4 : 6) * rows * ICl * OCl);
    /* as all-reduces' bytes (an all-reduce = a reduce-scatter + an all-gather): plain tp's f (the input's
     * gradient) and g (the output); sequence-parallel, the column's gather, re-gather and reduce-scatter
     * (1.5 all-reduces) and the row's reduce-scatter and gather (one) */
    if (mode == DT_TP_COLUMN) dt_ls_tp_bytes(s, (l->sp ? 6 : 4) * rows * IC);
    if (mode == DT_TP_ROW) dt_ls_tp_bytes(s, 4 * rows * OC);
    out->d[out->nd - 1] = OCl;
    out->split = mode == DT_TP_COLUMN;
    if (l->sp && mode == DT_TP_COLUMN) { /* the whole sequence out, split by features */
        out->d[0] *= sp;
        out->seq = false;
    }
    if (l->sp && mode == DT_TP_ROW) {
        if (in->nd != 2 || in->d[0] % sp)
            return dt_ls_fail(s, "under --sequence-parallel needs a (positions, width) input with positions divisible by --tp %d", sp);
        out->d[0] /= sp;
        out->seq = true;
    }
    return dt_ls_status(s);
}

/* ---- layernorm (last dimension, eps 1e-5): off = {weight, bias}; saved mean, rstd */

static size_t ln_saved(const dt_layer *l, int B) {
    size_t N = (size_t)B * (size_t)l->rows;
    return 2 * ((N + 15) & ~(size_t)15);
}

static void ln_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                       float *scratch) {
    int N = (int)N_of(l, c);
    float *rstd = saved + ((size_t)(l->rows * c->batch->B + 15) & ~(size_t)15);
    dt_layernorm_forward(out, saved, rstd, in, c->P + l->off[0], c->P + l->off[1], N, l->d[0]);
}

/* Under --sequence-parallel the weight and bias gradients of this rank's rows
 * go to scratch (C floats each, 16-aligned) and are summed over the tp group. */
static size_t ln_scratch(const dt_layer *l, int B) { return l->sp ? 2 * (((size_t)l->d[0] + 15) & ~(size_t)15) : 0; }

static void ln_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                        const float *dout, float *din, const float *saved, float *scratch) {
    int N = (int)N_of(l, c), C = l->d[0];
    const float *rstd = saved + ((size_t)(l->rows * c->batch->B + 15) & ~(size_t)15);
    float *dw = c->G + l->off[0], *db = c->G + l->off[1];
    if (l->sp) {
        memset(scratch, 0, ln_scratch(l, c->batch->B) * sizeof(float));
        dw = scratch;
        db = scratch + ln_scratch(l, c->batch->B) / 2;
    }
    dt_layernorm_backward(din, dw, db, dout, in, c->P + l->off[0], saved, rstd, N, C);
    if (!l->sp) return;
    dt_sp_sum_into(c->b, dw, c->G + l->off[0], (size_t)C);
    dt_sp_sum_into(c->b, db, c->G + l->off[1], (size_t)C);
}

static const dt_layer_ops ln_ops = {"layernorm", false, ln_saved, ln_scratch, ln_forward, ln_backward};

static dt_status ln_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    float eps;
    dt_ls_float(s, "eps", DT_LAYERNORM_EPS, &eps);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (eps != DT_LAYERNORM_EPS) return dt_ls_fail(s, "'eps' must be 1e-5 (PyTorch's default, the kernel's)");
    if (in->tokens || in->split) return dt_ls_fail(s, "needs a whole float input (not tokens, not a tp shard)");
    int64_t C = in->d[in->nd - 1];
    l->d[0] = (int)C;
    l->sp = in->seq ? dt_ls_seq_parallel(s) : 0;
    l->off[0] = dt_ls_param(s, "weight", 1, &C, DT_INIT_CONST, 1.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    l->off[1] = dt_ls_param(s, "bias", 1, &C, DT_INIT_CONST, 0.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    return dt_ls_status(s);
}

/* ---- embedding: tokens (T) -> (T, C); off = {weight (V, C)} ------------------------ */

static void emb_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                        float *scratch) {
    dt_embedding_forward(out, c->batch->tokens, c->P + l->off[0], c->batch->B * l->d[0], l->d[1]);
}

static void emb_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                         const float *dout, float *din, const float *saved, float *scratch) {
    dt_embedding_backward(c->G + l->off[0], dout, c->batch->tokens, c->batch->B * l->d[0], l->d[1]);
}

static const dt_layer_ops emb_ops = {"embedding", false, none, none, emb_forward, emb_backward};

static dt_status emb_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    int64_t V, C;
    dt_ls_int(s, "num", DT_LS_REQUIRED, 1, 1 << 24, &V);
    dt_ls_int(s, "dim", DT_LS_REQUIRED, 1, 1 << 20, &C);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (!in->tokens || !l->reads_batch) return dt_ls_fail(s, "must be the model's first layer, on a token input");
    l->d[0] = (int)in->d[0];
    l->d[1] = (int)C;
    int64_t sh[2] = {V, C};
    l->off[0] = dt_ls_param(s, "weight", 2, sh, DT_INIT_NORMAL, 1.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    *out = (dt_shape){.nd = 2, .d = {in->d[0], C}};
    return dt_ls_status(s);
}

/* ---- learned position embedding: out = in + weight[t]; off = {weight (T, C)} ------- */

static void pos_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                        float *scratch) {
    int T = l->d[0], C = l->d[1];
    const float *wpe = c->P + l->off[0];
    for (int i = 0; i < c->batch->B; i++)
        for (int t = 0; t < T; t++) {
            size_t o = ((size_t)i * T + t) * C;
            const float *pe = wpe + (size_t)t * C;
            for (int k = 0; k < C; k++) out[o + k] = in[o + k] + pe[k];
        }
}

static void pos_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                         const float *dout, float *din, const float *saved, float *scratch) {
    int T = l->d[0], C = l->d[1];
    float *dwpe = c->G + l->off[0];
    for (int i = 0; i < c->batch->B; i++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)i * T + t) * C;
            float *g = dwpe + (size_t)t * C;
            for (int k = 0; k < C; k++) g[k] += d[k];
        }
    if (din)
        for (size_t k = 0; k < (size_t)c->batch->B * T * C; k++) din[k] += dout[k];
}

static const dt_layer_ops pos_ops = {"pos_embedding", false, none, none, pos_forward, pos_backward};

static dt_status pos_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    if (in->tokens || in->split || in->seq || in->nd != 2) return dt_ls_fail(s, "needs a (positions, width) float input (all positions)");
    l->d[0] = (int)in->d[0];
    l->d[1] = (int)in->d[1];
    int64_t sh[2] = {in->d[0], in->d[1]};
    l->off[0] = dt_ls_param(s, "weight", 2, sh, DT_INIT_NORMAL, 1.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    return dt_ls_status(s);
}

/* ---- causal attention: (T, 3*Ca) -> (T, Ca); d = {T, Ca, local heads} -------------
 * With kv_heads < heads (grouped-query) or rope, the input is (T, (NH + 2*NKV)*HS)
 * and d = {T, Ca, NH, NKV, HS, rope}, f = {theta}: the GQA kernels, q and k
 * rotated (in a saved copy) before attention and the rotation undone on their
 * gradients. */
static bool att_gqa(const dt_layer *l) { return l->d[3] > 0; }
static size_t att_qkv(const dt_layer *l, int B) { return (size_t)B * l->d[0] * (size_t)(l->d[2] + 2 * l->d[3]) * l->d[4]; }

static size_t att_saved(const dt_layer *l, int B) {
    size_t att = (size_t)B * l->d[2] * l->d[0] * l->d[0];
    return att_gqa(l) && l->d[5] ? ((att + 15) & ~(size_t)15) + att_qkv(l, B) : att;
}
/* The kernels' scratch (bf16 native: with dt_gemm_bf16's packing), then under
 * bf16-emulated/fp16 the rounded copies of q, k, v (the input, after rotation)
 * and of the output gradient. With rope, the rotated gradient lies past the
 * kernels' own scratch. */
static bool att_native(const dt_layer *l) { return l->lowp == DT_LOWP_BF16_NATIVE; }
static size_t att_kern(const dt_layer *l, int B) {
    if (att_native(l))
        return att_gqa(l) ? dt_attention_gqa_bf16_scratch_floats(B, l->d[0], l->d[2], l->d[3], l->d[4])
                          : dt_attention_gqa_bf16_scratch_floats(B, l->d[0], l->d[2], l->d[2], l->d[1] / l->d[2]);
    if (att_gqa(l)) return dt_attention_gqa_scratch_floats(B, l->d[0], l->d[2], l->d[3], l->d[4]);
    return dt_attention_scratch_floats(B, l->d[0], l->d[1], l->d[2]);
}
static size_t att_kernel_scratch(const dt_layer *l, int B) {
    return att_kern(l, B) + (att_gqa(l) && l->d[5] ? att_qkv(l, B) : 0);
}
static size_t att_scratch(const dt_layer *l, int B) {
    if (att_native(l)) return att_kernel_scratch(l, B);
    return att_kernel_scratch(l, B) + dt_lowp_floats(l, (size_t)B * l->in_dim, (size_t)B * l->out_dim, 0);
}

/* The GQA kernels under the layer's precision: the bf16 ones natively, the
 * fp32 ones (on rounded copies) otherwise. */
static void gqa_fwd(const dt_layer *l, float *out, float *att, float *scratch, const float *qkv, int B, int T, int NH,
                    int NKV, int HS) {
    if (att_native(l)) dt_attention_gqa_forward_bf16(out, att, scratch, qkv, B, T, NH, NKV, HS);
    else dt_attention_gqa_forward(out, att, qkv, B, T, NH, NKV, HS);
}
static void gqa_bwd(const dt_layer *l, float *dqkv, float *scratch, const float *dout, const float *qkv,
                    const float *att, int B, int T, int NH, int NKV, int HS) {
    if (att_native(l)) dt_attention_gqa_backward_bf16(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, HS);
    else dt_attention_gqa_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, HS);
}

static void gqa_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                        float *scratch) {
    int B = c->batch->B, T = l->d[0], NH = l->d[2], NKV = l->d[3], HS = l->d[4];
    float *at = scratch + att_kernel_scratch(l, B);
    const float *qkv = in;
    if (l->d[5]) {
        float *rot = saved + ((att_saved(l, B) - att_qkv(l, B)));
        memcpy(rot, in, att_qkv(l, B) * sizeof(float));
        dt_rope_apply(rot, B, T, NH + NKV, HS, (size_t)(NH + 2 * NKV) * HS, l->f[0], +1);
        qkv = rot;
    }
    if (!att_native(l)) qkv = dt_lowp_operand(l, &at, qkv, att_qkv(l, B));
    gqa_fwd(l, out, saved, scratch, qkv, B, T, NH, NKV, HS);
}

static void gqa_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *dout, float *din,
                         const float *saved, float *scratch) {
    int B = c->batch->B, T = l->d[0], NH = l->d[2], NKV = l->d[3], HS = l->d[4];
    const float *qkv = l->d[5] ? saved + (att_saved(l, B) - att_qkv(l, B)) : in;
    float *at = scratch + att_kernel_scratch(l, B);
    if (!att_native(l)) {
        qkv = dt_lowp_operand(l, &at, qkv, att_qkv(l, B));
        dout = dt_lowp_operand(l, &at, dout, (size_t)B * l->out_dim);
    }
    if (!l->d[5]) {
        gqa_bwd(l, din, scratch, dout, qkv, saved, B, T, NH, NKV, HS);
        return;
    }
    /* din may hold other contributions: rotate back only this layer's part. */
    size_t n = att_qkv(l, B);
    float *d = scratch + att_kern(l, B);
    memset(d, 0, n * sizeof(float));
    gqa_bwd(l, d, scratch, dout, qkv, saved, B, T, NH, NKV, HS);
    dt_rope_apply(d, B, T, NH + NKV, HS, (size_t)(NH + 2 * NKV) * HS, l->f[0], -1);
    for (size_t k = 0; k < n; k++) din[k] += d[k];
}

static void att_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                        float *scratch) {
    int B = c->batch->B, T = l->d[0], C = l->d[1], NH = l->d[2];
    if (att_gqa(l)) {
        gqa_forward(l, c, in, out, saved, scratch);
        return;
    }
    if (att_native(l)) {
        dt_attention_gqa_forward_bf16(out, saved, scratch, in, B, T, NH, NH, C / NH);
        return;
    }
    float *at = scratch + att_kernel_scratch(l, B);
    in = dt_lowp_operand(l, &at, in, (size_t)B * l->in_dim);
    dt_attention_forward(out, saved, in, B, T, C, NH);
}

static void att_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                         const float *dout, float *din, const float *saved, float *scratch) {
    if (!din) return;
    if (att_gqa(l)) {
        gqa_backward(l, c, in, dout, din, saved, scratch);
        return;
    }
    int B = c->batch->B, T = l->d[0], C = l->d[1], NH = l->d[2];
    if (att_native(l)) {
        dt_attention_gqa_backward_bf16(din, scratch, dout, in, saved, B, T, NH, NH, C / NH);
        return;
    }
    float *at = scratch + att_kernel_scratch(l, B);
    in = dt_lowp_operand(l, &at, in, (size_t)B * l->in_dim);
    dout = dt_lowp_operand(l, &at, dout, (size_t)B * l->out_dim);
    dt_attention_backward(din, scratch, dout, in, saved, B, T, C, NH);
}

static const dt_layer_ops att_ops = {"attention", false, att_saved, att_scratch, att_forward, att_backward};

static dt_status gqa_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out, int64_t NH, int64_t NKV,
                           bool rope) {
    int T = in->split ? dt_ls_tp_size(s) : 1;
    if (in->tokens || in->nd != 2) return dt_ls_fail(s, "needs a (positions, (heads + 2 kv_heads) x head size) input");
    if (NH % NKV) return dt_ls_fail(s, "'kv_heads' %lld must divide 'heads' %lld", (long long)NKV, (long long)NH);
    if (T > 1 && NKV != NH) return dt_ls_fail(s, "grouped-query attention under --tp is not built: use kv_heads = heads");
    if (NH % T) return dt_ls_fail(s, "--tp %d must divide its %lld heads", T, (long long)NH);
    int64_t NHl = NH / T, NKVl = NKV / T, W = in->d[1];
    if (W % (NHl + 2 * NKVl) || (W / (NHl + 2 * NKVl)) % 2)
        return dt_ls_fail(s, "input width %lld is not (heads + 2 kv_heads) x an even head size", (long long)(W * T));
    int64_t HS = W / (NHl + 2 * NKVl);
    int v[6] = {(int)in->d[0], (int)(NHl * HS), (int)NHl, (int)NKVl, (int)HS, rope};
    memcpy(l->d, v, sizeof v);
    dt_ls_flops(s, 12LL * in->d[0] * in->d[0] * NHl * HS);
    out->d[1] = NHl * HS;
    return dt_ls_status(s);
}

static dt_status att_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    int64_t NH, NKV;
    bool causal, rope;
    int T = in->split ? dt_ls_tp_size(s) : 1;
    dt_ls_int(s, "heads", DT_LS_REQUIRED, 1, 4096, &NH);
    dt_ls_int(s, "kv_heads", NH, 1, 4096, &NKV);
    dt_ls_bool(s, "causal", true, &causal);
    dt_ls_bool(s, "rope", false, &rope);
    dt_ls_float(s, "rope_theta", 10000.0f, &l->f[0]);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (in->seq)
        return dt_ls_fail(s, "needs every position: under --sequence-parallel put it between a column-parallel and a "
                          "row-parallel linear");
    if (!causal) return dt_ls_fail(s, "only causal attention is built");
    if (rope && !(l->f[0] > 1)) return dt_ls_fail(s, "'rope_theta' must be above 1");
    if (rope || NKV != NH) return gqa_setup(l, s, in, out, NH, NKV, rope);
    if (in->tokens || in->nd != 2 || in->d[1] % 3)
        return dt_ls_fail(s, "needs a (positions, 3 x width) input: q, k and v from one linear");
    if (NH % T) return dt_ls_fail(s, "--tp %d must divide its %lld heads", T, (long long)NH);
    int64_t Ca = in->d[1] / 3, NHl = NH / T;
    if (Ca % NHl) return dt_ls_fail(s, "width %lld is not divisible by %lld heads", (long long)(Ca * T), (long long)NH);
    l->d[0] = (int)in->d[0];
    l->d[1] = (int)Ca;
    l->d[2] = (int)NHl;
    dt_ls_flops(s, 12LL * in->d[0] * in->d[0] * Ca);
    out->d[1] = Ca;
    return dt_ls_status(s);
}

/* ---- flatten: any shape -> one dimension (memory is already contiguous) ------------ */

static void flat_forward(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved,
                         float *scratch) {
    memcpy(out, in, (size_t)c->batch->B * l->in_dim * sizeof(float));
}

static void flat_backward(const dt_layer *l, const dt_lctx *c, const float *in, const float *out,
                          const float *dout, float *din, const float *saved, float *scratch) {
    if (din)
        for (size_t k = 0; k < (size_t)c->batch->B * l->in_dim; k++) din[k] += dout[k];
}

static const dt_layer_ops flat_ops = {"flatten", false, none, none, flat_forward, flat_backward};

static dt_status flat_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    if (in->tokens || in->split || in->seq) return dt_ls_fail(s, "needs a whole float input (all positions, all features)");
    *out = (dt_shape){.nd = 1, .d = {(int64_t)l->in_dim}};
    return DT_OK;
}

const dt_layer_type dt_layer_linear = {"linear", &lin_ops, lin_setup};
const dt_layer_type dt_layer_layernorm = {"layernorm", &ln_ops, ln_setup};
const dt_layer_type dt_layer_embedding = {"embedding", &emb_ops, emb_setup};
const dt_layer_type dt_layer_pos_embedding = {"pos_embedding", &pos_ops, pos_setup};
const dt_layer_type dt_layer_attention = {"attention", &att_ops, att_setup};
const dt_layer_type dt_layer_flatten = {"flatten", &flat_ops, flat_setup};
