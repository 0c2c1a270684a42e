/* The GPT: byte-level decoder-only transformer as nanoGPT builds it —
 * token + learned position embeddings, pre-LayerNorm blocks with causal
 * self-attention and a 4x GELU MLP (biases everywhere), final LayerNorm and an
 * LM head tied to the token embedding. Names are nanoGPT's state_dict keys. */
#include "blocks.h"

#include "dtrain/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- embedding: dims = {T, C}; off = {wte, wpe}; out (B, T, C) ------------- */
static size_t zero_floats(const dt_block *b, int B) { return 0; }

static void embed_forward(const dt_block *b, const float *P, const dt_batch *batch,
                          const float *in, float *out, float *saved, float *scratch) {
    int T = b->dims[0], C = b->dims[1];
    const float *wpe = P + b->off[1];
    dt_embedding_forward(out, batch->tokens, P + b->off[0], batch->B * T, C);
    for (int i = 0; i < batch->B; i++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)i * T + t) * C;
            const float *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] += pe[c];
        }
}

static void embed_backward(const dt_block *b, const float *P, float *G, const dt_batch *batch,
                           const float *in, const float *out, const float *dout, float *din,
                           const float *saved, float *scratch) {
    int T = b->dims[0], C = b->dims[1];
    float *dwpe = G + b->off[1];
    dt_embedding_backward(G + b->off[0], dout, batch->tokens, batch->B * T, C);
    for (int i = 0; i < batch->B; i++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)i * T + t) * C;
            float *g = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) g[c] += d[c];
        }
}

static const dt_block_ops embed_ops = {"embedding", zero_floats, zero_floats, embed_forward,
                                       embed_backward};

/* ---- transformer block: dims = {T, C, NH, Ca, F} --------------------------
 * C is the residual width; with tensor parallelism this rank holds NH local
 * heads (attention width Ca = NH * head size) and F of the 4C MLP features;
 * without, NH is all heads, Ca = C and F = 4C.
 * off: 0 ln_1.w 1 ln_1.b 2 c_attn.w 3 c_attn.b 4 attn.c_proj.w 5 attn.c_proj.b
 *      6 ln_2.w 7 ln_2.b 8 c_fc.w 9 c_fc.b 10 mlp.c_proj.w 11 mlp.c_proj.b
 * Megatron's f (identity forward, all-reduce backward) sits at the entry of
 * each branch (the LayerNorm outputs feeding the column-parallel c_attn and
 * c_fc), g (all-reduce forward) after the row-parallel c_projs, before their
 * replicated biases: two all-reduces forward and two backward per block. */
typedef struct tb_saved {
    float *ln1, *mean1, *rstd1, *qkv, *att, *atty, *x2, *ln2, *mean2, *rstd2, *h, *gl;
} tb_saved;

static size_t tb_layout(const dt_block *b, int B, float *base, tb_saved *s) {
    size_t T = (size_t)b->dims[0], C = (size_t)b->dims[1], NH = (size_t)b->dims[2];
    size_t Ca = (size_t)b->dims[3], F = (size_t)b->dims[4];
    size_t N = (size_t)B * T;
    size_t sizes[12] = {N * C, N, N, N * 3 * Ca, (size_t)B * NH * T * T, N * Ca,
                        N * C, N * C, N, N, N * F, N * F};
    float **ptrs[12] = {&s->ln1, &s->mean1, &s->rstd1, &s->qkv, &s->att, &s->atty,
                        &s->x2, &s->ln2, &s->mean2, &s->rstd2, &s->h, &s->gl};
    size_t off = 0;
    for (int i = 0; i < 12; i++) {
        if (base) *ptrs[i] = base + off;
        off += (sizes[i] + 15) & ~(size_t)15;
    }
    return off;
}

static size_t tb_saved_floats(const dt_block *b, int B) {
    tb_saved s;
    return tb_layout(b, B, NULL, &s);
}

static size_t tb_scratch_floats(const dt_block *b, int B) {
    size_t T = (size_t)b->dims[0], C = (size_t)b->dims[1], Ca = (size_t)b->dims[3], F = (size_t)b->dims[4];
    size_t N = (size_t)B * T;
    /* dx2 (N,C), dgl (N,F), dh (N,F), dln (N,C), datty (N,Ca), dqkv (N,3Ca) + attention */
    return N * (3 * C + 2 * F + 4 * Ca) + 6 * 16 +
           dt_attention_scratch_floats(B, (int)T, (int)Ca, b->dims[2]);
}

/* out = x @ W^T + bias, where W is row-parallel under tp: partial products are
 * summed over the group (g) before the replicated bias is added once. */
static void row_linear(const dt_block *b, float *out, const float *x, const float *W, const float *bias,
                       int N, int IC, int OC) {
    if (!b->tp) {
        dt_linear_forward(out, x, W, bias, N, IC, OC);
        return;
    }
    dt_linear_forward(out, x, W, NULL, N, IC, OC);
    dt_block_tp_allreduce(b, out, (size_t)N * OC);
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
}

static void tb_forward(const dt_block *b, const float *P, const dt_batch *batch,
                       const float *in, float *out, float *saved, float *scratch) {
    int T = b->dims[0], C = b->dims[1], NH = b->dims[2], Ca = b->dims[3], F = b->dims[4], B = batch->B;
    int N = B * T;
    const size_t *o = b->off;
    tb_saved s;
    tb_layout(b, B, saved, &s);
    dt_layernorm_forward(s.ln1, s.mean1, s.rstd1, in, P + o[0], P + o[1], N, C);
    dt_linear_forward(s.qkv, s.ln1, P + o[2], P + o[3], N, C, 3 * Ca);
    dt_attention_forward(s.atty, s.att, s.qkv, B, T, Ca, NH);
    row_linear(b, s.x2, s.atty, P + o[4], P + o[5], N, Ca, C);
    size_t nc = (size_t)N * C;
    for (size_t i = 0; i < nc; i++) s.x2[i] += in[i];
    dt_layernorm_forward(s.ln2, s.mean2, s.rstd2, s.x2, P + o[6], P + o[7], N, C);
    dt_linear_forward(s.h, s.ln2, P + o[8], P + o[9], N, C, F);
    dt_gelu_forward(s.gl, s.h, (size_t)N * F);
    row_linear(b, out, s.gl, P + o[10], P + o[11], N, F, C);
    for (size_t i = 0; i < nc; i++) out[i] += s.x2[i];
}

static void tb_backward(const dt_block *b, const float *P, float *G, const dt_batch *batch,
                        const float *in, const float *out, const float *dout, float *din,
                        const float *saved, float *scratch) {
    int T = b->dims[0], C = b->dims[1], NH = b->dims[2], Ca = b->dims[3], F = b->dims[4], B = batch->B;
    int N = B * T;
    size_t nc = (size_t)N * C, na = (size_t)N * Ca, nf = (size_t)N * F;
    const size_t *o = b->off;
    tb_saved s;
    tb_layout(b, B, (float *)saved, &s);
    float *dx2 = scratch;
    float *dgl = dx2 + nc;
    float *dh = dgl + nf;
    float *dln = dh + nf;
    float *datty = dln + nc;
    float *dqkv = datty + na;
    float *ascratch = dqkv + 3 * na;

    /* MLP branch: y = x2 + c_proj(gelu(c_fc(ln_2(x2)))) */
    memcpy(dx2, dout, nc * sizeof(float));
    memset(dgl, 0, nf * sizeof(float));
    dt_linear_backward(dgl, G + o[10], G + o[11], dout, s.gl, P + o[10], N, F, C);
    memset(dh, 0, nf * sizeof(float));
    dt_gelu_backward(dh, dgl, s.h, nf);
    memset(dln, 0, nc * sizeof(float));
    dt_linear_backward(dln, G + o[8], G + o[9], dh, s.ln2, P + o[8], N, C, F);
    dt_block_tp_allreduce(b, dln, nc); /* f */
    dt_layernorm_backward(dx2, G + o[6], G + o[7], dln, s.x2, P + o[6], s.mean2, s.rstd2, N, C);

    /* attention branch: x2 = x + c_proj(attn(c_attn(ln_1(x)))) */
    if (din)
        for (size_t i = 0; i < nc; i++) din[i] += dx2[i];
    memset(datty, 0, na * sizeof(float));
    dt_linear_backward(datty, G + o[4], G + o[5], dx2, s.atty, P + o[4], N, Ca, C);
    memset(dqkv, 0, 3 * na * sizeof(float));
    dt_attention_backward(dqkv, ascratch, datty, s.qkv, s.att, B, T, Ca, NH);
    memset(dln, 0, nc * sizeof(float));
    dt_linear_backward(dln, G + o[2], G + o[3], dqkv, s.ln1, P + o[2], N, C, 3 * Ca);
    dt_block_tp_allreduce(b, dln, nc); /* f */
    dt_layernorm_backward(din, G + o[0], G + o[1], dln, in, P + o[0], s.mean1, s.rstd1, N, C);
}

static const dt_block_ops tb_ops = {"transformer_block", tb_saved_floats, tb_scratch_floats,
                                    tb_forward, tb_backward};

/* ---- head: ln_f, then logits = ln_f(x) @ wte^T (tied); dims = {T, C, V} -----
 * off: 0 ln_f.w 1 ln_f.b 2 wte (owned by the embedding block) */
static size_t head_saved(const dt_block *b, int B) {
    size_t N = (size_t)B * b->dims[0];
    return N * (size_t)b->dims[1] + 2 * ((N + 15) & ~(size_t)15) + 16;
}

static size_t head_scratch(const dt_block *b, int B) {
    return (size_t)B * b->dims[0] * b->dims[1];
}

static void head_ptrs(const dt_block *b, int B, const float *saved, const float **lnf,
                      const float **mean, const float **rstd) {
    size_t N = (size_t)B * b->dims[0];
    size_t Np = (N + 15) & ~(size_t)15;
    *lnf = saved;
    *mean = saved + N * (size_t)b->dims[1];
    *rstd = *mean + Np;
}

static void head_forward(const dt_block *b, const float *P, const dt_batch *batch,
                         const float *in, float *out, float *saved, float *scratch) {
    int T = b->dims[0], C = b->dims[1], V = b->dims[2];
    int N = batch->B * T;
    const float *lnf, *mean, *rstd;
    head_ptrs(b, batch->B, saved, &lnf, &mean, &rstd);
    dt_layernorm_forward((float *)lnf, (float *)mean, (float *)rstd, in, P + b->off[0],
                         P + b->off[1], N, C);
    dt_linear_forward(out, lnf, P + b->off[2], NULL, N, C, V);
}

static void head_backward(const dt_block *b, const float *P, float *G, const dt_batch *batch,
                          const float *in, const float *out, const float *dout, float *din,
                          const float *saved, float *scratch) {
    int T = b->dims[0], C = b->dims[1], V = b->dims[2];
    int N = batch->B * T;
    const float *lnf, *mean, *rstd;
    head_ptrs(b, batch->B, saved, &lnf, &mean, &rstd);
    float *dlnf = scratch;
    memset(dlnf, 0, (size_t)N * C * sizeof(float));
    dt_linear_backward(dlnf, G + b->off[2], NULL, dout, lnf, P + b->off[2], N, C, V);
    dt_layernorm_backward(din, G + b->off[0], G + b->off[1], dlnf, in, P + b->off[0], mean,
                          rstd, N, C);
}

static const dt_block_ops head_ops = {"lm_head", head_saved, head_scratch, head_forward,
                                      head_backward};

dt_status dt_build_gpt(dt_builder *bd) {
    const dt_model_cfg *c = &bd->m->cfg;
    int T = c->block_size, C = c->n_embd, V = c->vocab_size, L = c->n_layer;
    size_t TC = (size_t)T * C;
    int64_t fl = 0;
    bd->m->loss_terms = T;

    dt_block *b = dt_builder_block(bd, &embed_ops, "embedding", 0, TC);
    if (!b) return bd->st;
    b->dims[0] = T;
    b->dims[1] = C;
    size_t wte = dt_builder_param(bd, "transformer.wte.weight", 2, (int64_t[]){V, C}, DT_INIT_NORMAL, 0.02f);
    dt_builder_param(bd, "transformer.wpe.weight", 2, (int64_t[]){T, C}, DT_INIT_NORMAL, 0.02f);

    float proj_std = 0.02f / sqrtf(2.0f * (float)L);
    int TP = c->tp_size > 1 ? c->tp_size : 1, r = c->tp_size > 1 ? c->tp_rank : 0;
    int NHl = c->n_head / TP, HS = C / c->n_head, Ca = NHl * HS, F = 4 * C / TP;
    for (int l = 0; l < L; l++) {
        char nm[48], pn[96];
        snprintf(nm, sizeof nm, "transformer.h.%d", l);
        b = dt_builder_block(bd, &tb_ops, nm, TC, TC);
        if (!b) return bd->st;
        b->dims[0] = T;
        b->dims[1] = C;
        b->dims[2] = NHl;
        b->dims[3] = Ca;
        b->dims[4] = F;
        /* Shards: c_attn keeps this rank's heads of q, k and v (three row ranges),
         * c_fc its F output features; the c_projs the matching input columns. */
        int64_t qkv_s[3] = {(int64_t)r * Ca, (int64_t)C + r * Ca, 2 * (int64_t)C + r * Ca};
        int64_t qkv_l[3] = {Ca, Ca, Ca};
        int64_t a_s = (int64_t)r * Ca, a_l = Ca, f_s = (int64_t)r * F, f_l = F;
        struct { const char *n; int nd; int64_t s0, s1; int init; float sc; int split, np; const int64_t *ps, *pl; } t[12] = {
            {"ln_1.weight", 1, C, 0, DT_INIT_CONST, 1.0f, 0, 0, NULL, NULL},
            {"ln_1.bias", 1, C, 0, DT_INIT_CONST, 0.0f, 0, 0, NULL, NULL},
            {"attn.c_attn.weight", 2, 3 * C, C, DT_INIT_NORMAL, 0.02f, DT_SPLIT_ROWS, 3, qkv_s, qkv_l},
            {"attn.c_attn.bias", 1, 3 * C, 0, DT_INIT_CONST, 0.0f, DT_SPLIT_COLS, 3, qkv_s, qkv_l},
            {"attn.c_proj.weight", 2, C, C, DT_INIT_NORMAL, proj_std, DT_SPLIT_COLS, 1, &a_s, &a_l},
            {"attn.c_proj.bias", 1, C, 0, DT_INIT_CONST, 0.0f, 0, 0, NULL, NULL},
            {"ln_2.weight", 1, C, 0, DT_INIT_CONST, 1.0f, 0, 0, NULL, NULL},
            {"ln_2.bias", 1, C, 0, DT_INIT_CONST, 0.0f, 0, 0, NULL, NULL},
            {"mlp.c_fc.weight", 2, 4 * C, C, DT_INIT_NORMAL, 0.02f, DT_SPLIT_ROWS, 1, &f_s, &f_l},
            {"mlp.c_fc.bias", 1, 4 * C, 0, DT_INIT_CONST, 0.0f, DT_SPLIT_COLS, 1, &f_s, &f_l},
            {"mlp.c_proj.weight", 2, C, 4 * C, DT_INIT_NORMAL, proj_std, DT_SPLIT_COLS, 1, &f_s, &f_l},
            {"mlp.c_proj.bias", 1, C, 0, DT_INIT_CONST, 0.0f, 0, 0, NULL, NULL},
        };
        for (int i = 0; i < 12; i++) {
            snprintf(pn, sizeof pn, "%s.%s", nm, t[i].n);
            int64_t shape[2] = {t[i].s0, t[i].s1};
            if (TP > 1 && t[i].split)
                dt_builder_param_tp(bd, pn, t[i].nd, shape, t[i].init, t[i].sc, t[i].split, t[i].np, t[i].ps, t[i].pl);
            else
                dt_builder_param(bd, pn, t[i].nd, shape, t[i].init, t[i].sc);
        }
        fl += 6LL * (3 * (int64_t)Ca * C + (int64_t)Ca * C + 2 * (int64_t)F * C) * T + 12LL * T * T * Ca;
    }

    b = dt_builder_block(bd, &head_ops, "lm_head", TC, (size_t)T * V);
    if (!b) return bd->st;
    b->dims[0] = T;
    b->dims[1] = C;
    b->dims[2] = V;
    dt_builder_param(bd, "transformer.ln_f.weight", 1, (int64_t[]){C}, DT_INIT_CONST, 1.0f);
    dt_builder_param(bd, "transformer.ln_f.bias", 1, (int64_t[]){C}, DT_INIT_CONST, 0.0f);
    dt_builder_use(bd, wte);
    fl += 6LL * C * V * T;
    dt_add_xent(bd, V, T);
    bd->m->flops_per_sample = fl;
    return bd->st;
}
