/* More leaf layers: silu, tanh, RMSNorm, average pooling (windowed and global)
 * and LLaMA's SwiGLU MLP (down(silu(gate(x)) * up(x)), three bias-free
 * linears, gate/up column-parallel and down row-parallel under --tp).
 * FLOPs per sample of a training step: SwiGLU 6 * 3 * C * F per row. */
#include "layer.h"

#include "dtrain/nn.h"

#include <math.h>
#include <string.h>

static size_t none(const dt_layer *l, int B) { return 0; }
static size_t n_of(const dt_layer *l, const dt_lctx *c) { return (size_t)c->batch->B * l->in_dim; }
static size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

static dt_status floats_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    if (in->tokens) return dt_ls_fail(s, "takes floats, but its input is token ids");
    return DT_OK;
}

/* ---- silu (backward on its input), tanh (on its output) ---------------------------- */

static void silu_fwd(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved, float *scratch) {
    dt_silu_forward(out, in, n_of(l, c));
}
static void silu_bwd(const dt_layer *l, const dt_lctx *c, const float *in, const float *out, const float *dout,
                     float *din, const float *saved, float *scratch) {
    dt_silu_backward(din, dout, in, n_of(l, c));
}
static void tanh_fwd(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved, float *scratch) {
    dt_tanh_forward(out, in, n_of(l, c));
}
static void tanh_bwd(const dt_layer *l, const dt_lctx *c, const float *in, const float *out, const float *dout,
                     float *din, const float *saved, float *scratch) {
    dt_tanh_backward(din, dout, out, n_of(l, c));
}
static const dt_layer_ops silu_ops = {"silu", false, none, none, silu_fwd, silu_bwd};
static const dt_layer_ops tanh_ops = {"tanh", true, none, none, tanh_fwd, tanh_bwd};

/* ---- rmsnorm (last dimension): d = {C}, f = {eps}; off = {weight}; saved rstd ------ */

static size_t rms_saved(const dt_layer *l, int B) { return (size_t)B * (size_t)l->rows; }

static void rms_fwd(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved, float *scratch) {
    dt_rmsnorm_forward(out, saved, in, c->P + l->off[0], (int)(c->batch->B * l->rows), l->d[0], l->f[0]);
}
/* Under --sequence-parallel the weight's gradient of this rank's rows goes to
 * scratch and is summed over the tp group. */
static size_t rms_scratch(const dt_layer *l, int B) { return l->sp ? (size_t)l->d[0] : 0; }
static void rms_bwd(const dt_layer *l, const dt_lctx *c, const float *in, const float *out, const float *dout,
                    float *din, const float *saved, float *scratch) {
    float *dw = c->G + l->off[0];
    if (l->sp) {
        memset(scratch, 0, (size_t)l->d[0] * sizeof(float));
        dw = scratch;
    }
    dt_rmsnorm_backward(din, dw, dout, in, c->P + l->off[0], saved, (int)(c->batch->B * l->rows), l->d[0]);
    if (l->sp) dt_sp_sum_into(c->b, scratch, c->G + l->off[0], (size_t)l->d[0]);
}
static const dt_layer_ops rms_ops = {"rmsnorm", false, rms_saved, rms_scratch, rms_fwd, rms_bwd};

static dt_status rms_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    dt_ls_float(s, "eps", 1e-6f, &l->f[0]);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (in->tokens || in->split) return dt_ls_fail(s, "needs a whole float input (not tokens, not a tp shard)");
    if (!(l->f[0] > 0)) return dt_ls_fail(s, "'eps' must be positive");
    int64_t C = in->d[in->nd - 1];
    l->d[0] = (int)C;
    l->sp = in->seq ? dt_ls_seq_parallel(s) : 0;
    l->off[0] = dt_ls_param(s, "weight", 1, &C, DT_INIT_CONST, 1.0f, false, DT_SPLIT_NONE, 0, NULL, NULL);
    return dt_ls_status(s);
}

/* ---- avgpool2d: d = {C, H, W, K, stride, pad}; global_avgpool: (C, H, W) -> (C) ----- */

static void avg_fwd(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved, float *scratch) {
    dt_avgpool2d_forward(out, in, c->batch->B, l->d[0], l->d[1], l->d[2], l->d[3], l->d[4], l->d[5]);
}
static void avg_bwd(const dt_layer *l, const dt_lctx *c, const float *in, const float *out, const float *dout,
                    float *din, const float *saved, float *scratch) {
    dt_avgpool2d_backward(din, dout, c->batch->B, l->d[0], l->d[1], l->d[2], l->d[3], l->d[4], l->d[5]);
}
static const dt_layer_ops avg_ops = {"avgpool2d", false, none, none, avg_fwd, avg_bwd};

static dt_status avg_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    int64_t K, stride, pad;
    dt_ls_int(s, "kernel", DT_LS_REQUIRED, 1, 64, &K);
    dt_ls_int(s, "stride", K, 1, 64, &stride);
    dt_ls_int(s, "pad", 0, 0, 32, &pad);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (in->tokens || in->split || in->nd != 3) return dt_ls_fail(s, "needs a (channels, height, width) input");
    if (2 * pad > K) return dt_ls_fail(s, "'pad' must be at most half of 'kernel' (as PyTorch requires)");
    if (in->d[1] + 2 * pad < K || in->d[2] + 2 * pad < K) return dt_ls_fail(s, "'kernel' is larger than its padded input");
    int v[6] = {(int)in->d[0], (int)in->d[1], (int)in->d[2], (int)K, (int)stride, (int)pad};
    memcpy(l->d, v, sizeof v);
    *out = (dt_shape){.nd = 3, .d = {in->d[0], (in->d[1] + 2 * pad - K) / stride + 1, (in->d[2] + 2 * pad - K) / stride + 1}};
    return DT_OK;
}

static void gap_fwd(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved, float *scratch) {
    dt_global_avgpool_forward(out, in, c->batch->B, l->d[0], l->d[1]);
}
static void gap_bwd(const dt_layer *l, const dt_lctx *c, const float *in, const float *out, const float *dout,
                    float *din, const float *saved, float *scratch) {
    dt_global_avgpool_backward(din, dout, c->batch->B, l->d[0], l->d[1]);
}
static const dt_layer_ops gap_ops = {"global_avgpool", false, none, none, gap_fwd, gap_bwd};

static dt_status gap_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    if (in->tokens || in->split || in->nd != 3) return dt_ls_fail(s, "needs a (channels, height, width) input");
    l->d[0] = (int)in->d[0];
    l->d[1] = (int)(in->d[1] * in->d[2]);
    *out = (dt_shape){.nd = 1, .d = {in->d[0]}};
    return DT_OK;
}

/* ---- swiglu MLP: d = {C, F (local)}; off = {gate, up, down}; saved gate, up, h ------
 * Under --sequence-parallel (l->sp) its input is this rank's rows: forward
 * gathers them (the rows of the whole sequence go through the three GEMMs) and
 * reduce-scatters down's partial output; backward gathers the output gradient
 * and the input again and reduce-scatters the input gradient (seq_parallel.c). */

static int64_t swi_rows(const dt_layer *l, int B) { return (int64_t)B * l->rows * (l->sp ? l->sp : 1); }
static size_t swi_saved(const dt_layer *l, int B) { return 3 * r16((size_t)swi_rows(l, B) * l->d[1]); }
/* Scratch: dh, dg, du (backward), then dt_lin_floats for the larger GEMM (bf16/fp16),
 * then under --sequence-parallel three whole-row buffers (N, C). */
static size_t swi_base(const dt_layer *l, int B) {
    const int64_t N = swi_rows(l, B);
    size_t a = dt_lin_floats(l, N, l->d[0], l->d[1]), b = dt_lin_floats(l, N, l->d[1], l->d[0]);
    return 3 * r16((size_t)N * l->d[1]) + (a > b ? a : b);
}
static size_t swi_scratch(const dt_layer *l, int B) {
    return swi_base(l, B) + (l->sp ? 3 * r16((size_t)swi_rows(l, B) * l->d[0]) : 0);
}

static void swi_fwd(const dt_layer *l, const dt_lctx *c, const float *in, float *out, float *saved, float *scratch) {
    int B = c->batch->B, N = (int)swi_rows(l, B), C = l->d[0], F = l->d[1];
    size_t nf = r16((size_t)N * F), n = (size_t)N * C;
    float *g = saved, *u = saved + nf, *h = saved + 2 * nf, *at = scratch + 3 * nf;
    float *x = scratch + swi_base(l, B), *y = out;
    if (l->sp) { /* the whole sequence's rows; down's output into x's place, then scattered */
        memcpy(x + dt_sp_off(c->b, n), in, (size_t)B * l->in_dim * sizeof(float));
        dt_sp_allgather(c->b, x, n);
        in = x;
        y = x;
    }
    dt_lin_forward(l, g, in, c->P + l->off[0], NULL, N, C, F, at);
    dt_lin_forward(l, u, in, c->P + l->off[1], NULL, N, C, F, at);
    dt_swiglu_forward(h, g, u, (size_t)N * F);
    dt_lin_forward(l, y, h, c->P + l->off[2], NULL, N, F, C, at);
    if (!l->sp) {
        dt_block_tp_allreduce(c->b, out, n); /* g: the row-parallel down's partial sums */
        return;
    }
    dt_sp_reduce_scatter(c->b, y, n);
    memcpy(out, y + dt_sp_off(c->b, n), (size_t)B * l->out_dim * sizeof(float));
}

static void swi_bwd(const dt_layer *l, const dt_lctx *c, const float *in, const float *out, const float *dout,
                    float *din, const float *saved, float *scratch) {
    int B = c->batch->B, N = (int)swi_rows(l, B), C = l->d[0], F = l->d[1];
    size_t nf = r16((size_t)N * F), n = (size_t)N * C;
    const float *g = saved, *u = saved + nf, *h = saved + 2 * nf;
    float *dh = scratch, *dg = scratch + nf, *du = scratch + 2 * nf, *at = scratch + 3 * nf;
    float *dy = scratch + swi_base(l, B), *x = dy + r16(n), *dx = x + r16(n), *dinw = din;
    memset(scratch, 0, 3 * nf * sizeof(float));
    if (l->sp) {
        memcpy(dy + dt_sp_off(c->b, n), dout, (size_t)B * l->out_dim * sizeof(float));
        dt_sp_allgather(c->b, dy, n);
        memcpy(x + dt_sp_off(c->b, n), in, (size_t)B * l->in_dim * sizeof(float));
        dt_sp_allgather(c->b, x, n);
        dout = dy;
        in = x;
        if (din) memset(dx, 0, n * sizeof(float));
        dinw = din ? dx : NULL;
    }
    dt_lin_backward(l, dh, c->G + l->off[2], NULL, dout, h, c->P + l->off[2], N, F, C, at);
    dt_swiglu_backward(dg, du, dh, g, u, (size_t)N * F);
    dt_lin_backward(l, dinw, c->G + l->off[0], NULL, dg, in, c->P + l->off[0], N, C, F, at);
    dt_lin_backward(l, dinw, c->G + l->off[1], NULL, du, in, c->P + l->off[1], N, C, F, at);
    if (!din) return;
    if (!l->sp) {
        dt_block_tp_allreduce(c->b, din, n); /* f */
        return;
    }
    dt_sp_reduce_scatter(c->b, dx, n);
    const float *mine = dx + dt_sp_off(c->b, n);
    for (size_t k = 0; k < (size_t)B * l->in_dim; k++) din[k] += mine[k];
}

static const dt_layer_ops swi_ops = {"swiglu", false, swi_saved, swi_scratch, swi_fwd, swi_bwd};

static dt_status swi_setup(dt_layer *l, dt_lsetup *s, const dt_shape *in, dt_shape *out) {
    static const char *modes[] = {"none", "pair", NULL};
    int64_t F;
    int mode;
    int T = dt_ls_tp_size(s), r = dt_ls_tp_rank(s);
    dt_ls_int(s, "hidden", DT_LS_REQUIRED, 1, 1 << 24, &F);
    dt_ls_word(s, "tp", modes, 0, &mode);
    if (dt_ls_status(s)) return dt_ls_status(s);
    if (in->tokens || in->split) return dt_ls_fail(s, "needs a whole float input (not tokens, not a tp shard)");
    if (!mode) T = 1, r = 0;
    if (in->seq && !mode)
        return dt_ls_fail(s, "under --sequence-parallel its input is this rank's part of the sequence: mark it \"tp\": \"pair\"");
    if (F % T) return dt_ls_fail(s, "'hidden' %lld is not divisible by --tp %d", (long long)F, T);
    int64_t C = in->d[in->nd - 1], Fl = F / T, ps = r * Fl;
    l->d[0] = (int)C;
    l->d[1] = (int)Fl;
    l->tp = T > 1 ? DT_TP_COLUMN : DT_TP_NONE;
    float bi = 1.0f / sqrtf((float)C), bo = 1.0f / sqrtf((float)F);
    int64_t up[2] = {F, C}, down[2] = {C, F};
    int split_in = T > 1 ? DT_SPLIT_ROWS : DT_SPLIT_NONE, split_out = T > 1 ? DT_SPLIT_COLS : DT_SPLIT_NONE;
    int np = T > 1 ? 1 : 0;
    l->off[0] = dt_ls_param(s, "gate_proj.weight", 2, up, DT_INIT_UNIFORM, bi, false, split_in, np, &ps, &Fl);
    l->off[1] = dt_ls_param(s, "up_proj.weight", 2, up, DT_INIT_UNIFORM, bi, false, split_in, np, &ps, &Fl);
    l->off[2] = dt_ls_param(s, "down_proj.weight", 2, down, DT_INIT_UNIFORM, bo, false, split_out, np, &ps, &Fl);
    l->sp = in->seq ? dt_ls_seq_parallel(s) : 0;
    int64_t rows = l->rows * (l->sp ? l->sp : 1);
    dt_ls_flops(s, 18 * rows * C * Fl);
    /* as all-reduces' bytes: g forward, f backward; sequence-parallel, its gathers and reduce-scatters (2.5) */
    if (T > 1) dt_ls_tp_bytes(s, (l->sp ? 10 : 8) * rows * C);
    return dt_ls_status(s);
}

const dt_layer_type dt_layer_silu = {"silu", &silu_ops, floats_setup};
const dt_layer_type dt_layer_tanh = {"tanh", &tanh_ops, floats_setup};
const dt_layer_type dt_layer_rmsnorm = {"rmsnorm", &rms_ops, rms_setup};
const dt_layer_type dt_layer_avgpool2d = {"avgpool2d", &avg_ops, avg_setup};
const dt_layer_type dt_layer_global_avgpool = {"global_avgpool", &gap_ops, gap_setup};
const dt_layer_type dt_layer_swiglu = {"swiglu", &swi_ops, swi_setup};
