/* Reference tests against PyTorch: every layer kernel and every model.
 *
 * The fixtures (tests/fixtures/ref_*.safetensors) come from
 * tools/gen_fixtures.py: float32 inputs and parameters, outputs and gradients
 * computed by torch in float64 and rounded to float32. So every difference
 * printed here is our float32 arithmetic against an (almost) exact answer.
 *
 * Layers: forward writes into a buffer pre-filled with garbage (it must write,
 * not add); backward runs into zeroed buffers and is compared, then runs a
 * second time into the same buffers, which must now hold twice the reference
 * (backward adds). Kernels with an optional input gradient also run with NULL.
 * RoPE works in place, so its backward (the inverse rotation of a copy of dout)
 * is compared once. Batch norm runs as a caller composes train mode (sums ->
 * statistics -> forward -> backward sums -> backward) and also checks the
 * running statistics a caller derives, against nn.BatchNorm after one step.
 *
 * Models: the fixture's weights are copied into the arena by name (every
 * dt_param must be there with its PyTorch shape, and nothing else may be),
 * then one forward (loss) and one backward (every parameter gradient).
 *
 * Tolerances (|ours - ref| <= atol + rtol*|ref|, float32 epsilon is 6e-8):
 *   layers, forward and backward: atol 1e-5, rtol 1e-4. The values are O(1)
 *     and the longest reduction is 3*5*5 = 75 terms (conv2d), whose float32
 *     rounding error is at most ~75 * 6e-8 * O(1) ~ 5e-6 in the worst case and
 *     ~1e-6 typically. GELU's vectorised tanh has ~1e-7 absolute error.
 *   models: atol 2e-6, rtol 2e-4 on the loss and on gradients whose
 *     largest entries are 0.02 .. 1 (median 1e-3 .. 0.2). The chains are deep
 *     (GPT: 2 blocks of LayerNorm, attention, GELU MLP; CNN: reductions of 800
 *     and 3136 terms, then sums over the batch), and float32 errors compound
 *     relative to the largest terms rather than to each (possibly tiny)
 *     result. Observed: at most 3e-7 on any gradient (1.4e-6 on fc1 row sums
 *     of size ~10), so the bounds leave a 5-10x margin for other BLAS kernels
 *     and -march settings, while a wrong formula is off by O(1) relative. */
#include "dtrain/model.h"
#include "dtrain/nn.h"
#include "dtrain/safetensors.h"
#include "fixturehelp.h"
#include "testhelp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYER_ATOL 1e-5
#define LAYER_RTOL 1e-4
#define MODEL_ATOL 2e-6
#define MODEL_RTOL 2e-4
#define GARBAGE 12345.0f

/* Compares `got` with fixture tensor `name` (n elements). */
static int fx_check(fx *x, const char *what, const float *got, const char *name, size_t n,
                    double atol, double rtol) {
    const float *ref = fx_f32(x, name, n);
    return test_close(what, got, ref, n, atol, rtol);
}

/* After a second backward into the same buffers: got must be 2 * reference. */
static int fx_check_twice(fx *x, const char *what, const float *got, const char *name, size_t n) {
    float *ref = fx_f32(x, name, n);
    for (size_t i = 0; i < n; i++) ref[i] *= 2.0f;
    return test_close(what, got, ref, n, 2 * LAYER_ATOL, LAYER_RTOL);
}

/* ---- layers ------------------------------------------------------------------ */

static void test_linear(const char *path, const char *tag, int has_bias) {
    fx x;
    if (!fx_open(&x, path)) return;
    int N = fx_meta_int(&x, "N"), IC = fx_meta_int(&x, "IC"), OC = fx_meta_int(&x, "OC");
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    const float *inp = fx_f32(&x, "inp", ni), *w = fx_f32(&x, "w", nw);
    const float *b = has_bias ? fx_f32(&x, "b", OC) : NULL;
    const float *dout = fx_f32(&x, "dout", no);
    char what[64];

    float *out = fx_fill(&x, no, GARBAGE);
    dt_linear_forward(out, inp, w, b, N, IC, OC);
    snprintf(what, sizeof what, "%s out", tag);
    fx_check(&x, what, out, "out", no, LAYER_ATOL, LAYER_RTOL);

    float *dinp = fx_zeros(&x, ni), *dw = fx_zeros(&x, nw);
    float *db = has_bias ? fx_zeros(&x, OC) : NULL;
    for (int pass = 1; pass <= 2; pass++) {
        dt_linear_backward(dinp, dw, db, dout, inp, w, N, IC, OC);
        int (*chk)(fx *, const char *, const float *, const char *, size_t) =
            pass == 1 ? NULL : fx_check_twice;
        const char *sfx = pass == 1 ? "" : " (added twice)";
        snprintf(what, sizeof what, "%s dinp%s", tag, sfx);
        if (chk) chk(&x, what, dinp, "dinp", ni);
        else fx_check(&x, what, dinp, "dinp", ni, LAYER_ATOL, LAYER_RTOL);
        snprintf(what, sizeof what, "%s dw%s", tag, sfx);
        if (chk) chk(&x, what, dw, "dw", nw);
        else fx_check(&x, what, dw, "dw", nw, LAYER_ATOL, LAYER_RTOL);
        if (has_bias) {
            snprintf(what, sizeof what, "%s db%s", tag, sfx);
            if (chk) chk(&x, what, db, "db", OC);
            else fx_check(&x, what, db, "db", OC, LAYER_ATOL, LAYER_RTOL);
        }
    }
    /* NULL dinp: the parameter gradients must not depend on it. */
    float *dw2 = fx_zeros(&x, nw);
    dt_linear_backward(NULL, dw2, has_bias ? fx_zeros(&x, OC) : NULL, dout, inp, w, N, IC, OC);
    snprintf(what, sizeof what, "%s dw (dinp NULL)", tag);
    fx_check(&x, what, dw2, "dw", nw, LAYER_ATOL, LAYER_RTOL);
    fx_close(&x);
}

static void test_relu(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_relu.safetensors")) return;
    size_t n = (size_t)fx_meta_int(&x, "n");
    const float *inp = fx_f32(&x, "inp", n), *dout = fx_f32(&x, "dout", n);
    float *out = fx_fill(&x, n, GARBAGE);
    dt_relu_forward(out, inp, n);
    fx_check(&x, "relu out", out, "out", n, LAYER_ATOL, LAYER_RTOL);
    float *inplace = fx_zeros(&x, n);
    memcpy(inplace, inp, n * sizeof(float));
    dt_relu_forward(inplace, inplace, n);
    fx_check(&x, "relu out (in place)", inplace, "out", n, LAYER_ATOL, LAYER_RTOL);
    float *dinp = fx_zeros(&x, n);
    dt_relu_backward(dinp, dout, out, n);
    fx_check(&x, "relu dinp", dinp, "dinp", n, LAYER_ATOL, LAYER_RTOL);
    dt_relu_backward(dinp, dout, out, n);
    fx_check_twice(&x, "relu dinp (added twice)", dinp, "dinp", n);
    fx_close(&x);
}

static void test_gelu(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_gelu.safetensors")) return;
    size_t n = (size_t)fx_meta_int(&x, "n");
    const float *inp = fx_f32(&x, "inp", n), *dout = fx_f32(&x, "dout", n);
    float *out = fx_fill(&x, n, GARBAGE);
    dt_gelu_forward(out, inp, n);
    fx_check(&x, "gelu out", out, "out", n, LAYER_ATOL, LAYER_RTOL);
    float *dinp = fx_zeros(&x, n);
    dt_gelu_backward(dinp, dout, inp, n);
    fx_check(&x, "gelu dinp", dinp, "dinp", n, LAYER_ATOL, LAYER_RTOL);
    dt_gelu_backward(dinp, dout, inp, n);
    fx_check_twice(&x, "gelu dinp (added twice)", dinp, "dinp", n);
    fx_close(&x);
}

static void test_layernorm(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_layernorm.safetensors")) return;
    int N = fx_meta_int(&x, "N"), C = fx_meta_int(&x, "C");
    size_t nc = (size_t)N * C;
    const float *inp = fx_f32(&x, "inp", nc), *w = fx_f32(&x, "w", C), *b = fx_f32(&x, "b", C);
    const float *dout = fx_f32(&x, "dout", nc);
    float *out = fx_fill(&x, nc, GARBAGE), *mean = fx_fill(&x, N, GARBAGE);
    float *rstd = fx_fill(&x, N, GARBAGE);
    dt_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    fx_check(&x, "layernorm out", out, "out", nc, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "layernorm mean", mean, "mean", N, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "layernorm rstd", rstd, "rstd", N, LAYER_ATOL, LAYER_RTOL);
    float *dinp = fx_zeros(&x, nc), *dw = fx_zeros(&x, C), *db = fx_zeros(&x, C);
    dt_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    fx_check(&x, "layernorm dinp", dinp, "dinp", nc, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "layernorm dw", dw, "dw", C, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "layernorm db", db, "db", C, LAYER_ATOL, LAYER_RTOL);
    dt_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    fx_check_twice(&x, "layernorm dinp (added twice)", dinp, "dinp", nc);
    fx_check_twice(&x, "layernorm dw (added twice)", dw, "dw", C);
    fx_check_twice(&x, "layernorm db (added twice)", db, "db", C);
    fx_close(&x);
}

static void test_embedding(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_embedding.safetensors")) return;
    int N = fx_meta_int(&x, "N"), V = fx_meta_int(&x, "V"), C = fx_meta_int(&x, "C");
    const int32_t *ids = fx_i32(&x, "ids", N);
    const float *table = fx_f32(&x, "table", (size_t)V * C);
    const float *dout = fx_f32(&x, "dout", (size_t)N * C);
    float *out = fx_fill(&x, (size_t)N * C, GARBAGE);
    dt_embedding_forward(out, ids, table, N, C);
    fx_check(&x, "embedding out", out, "out", (size_t)N * C, LAYER_ATOL, LAYER_RTOL);
    float *dtable = fx_zeros(&x, (size_t)V * C);
    dt_embedding_backward(dtable, dout, ids, N, C);
    fx_check(&x, "embedding dtable", dtable, "dtable", (size_t)V * C, LAYER_ATOL, LAYER_RTOL);
    dt_embedding_backward(dtable, dout, ids, N, C);
    fx_check_twice(&x, "embedding dtable (added twice)", dtable, "dtable", (size_t)V * C);
    fx_close(&x);
}

static void test_attention(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_attention.safetensors")) return;
    int B = fx_meta_int(&x, "B"), T = fx_meta_int(&x, "T"), C = fx_meta_int(&x, "C");
    int NH = fx_meta_int(&x, "NH");
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    const float *qkv = fx_f32(&x, "qkv", nq), *dout = fx_f32(&x, "dout", no);
    float *out = fx_fill(&x, no, GARBAGE), *att = fx_fill(&x, na, GARBAGE);
    dt_attention_forward(out, att, qkv, B, T, C, NH);
    fx_check(&x, "attention out", out, "out", no, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "attention att (probabilities)", att, "att", na, LAYER_ATOL, LAYER_RTOL);
    float *scratch = fx_fill(&x, dt_attention_scratch_floats(B, T, C, NH), GARBAGE);
    float *dqkv = fx_zeros(&x, nq);
    dt_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    fx_check(&x, "attention dqkv", dqkv, "dqkv", nq, LAYER_ATOL, LAYER_RTOL);
    dt_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    fx_check_twice(&x, "attention dqkv (added twice)", dqkv, "dqkv", nq);
    fx_close(&x);
}

static void test_crossentropy(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_crossentropy.safetensors")) return;
    int N = fx_meta_int(&x, "N"), V = fx_meta_int(&x, "V");
    float scale = (float)atof(dt_st_meta(x.f, "scale"));
    size_t nv = (size_t)N * V;
    const float *logits = fx_f32(&x, "logits", nv);
    const int32_t *targets = fx_i32(&x, "targets", N);
    float *losses = fx_fill(&x, N, GARBAGE), *probs = fx_fill(&x, nv, GARBAGE);
    dt_crossentropy_forward(losses, probs, logits, targets, N, V);
    fx_check(&x, "crossentropy losses", losses, "losses", N, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "crossentropy probs", probs, "probs", nv, LAYER_ATOL, LAYER_RTOL);
    float *dlogits = fx_zeros(&x, nv);
    dt_crossentropy_backward(dlogits, probs, targets, scale, N, V);
    fx_check(&x, "crossentropy dlogits", dlogits, "dlogits", nv, LAYER_ATOL, LAYER_RTOL);
    dt_crossentropy_backward(dlogits, probs, targets, scale, N, V);
    fx_check_twice(&x, "crossentropy dlogits (added twice)", dlogits, "dlogits", nv);
    fx_close(&x);
}

static void test_conv2d(const char *path, const char *tag) {
    fx x;
    if (!fx_open(&x, path)) return;
    int K = fx_meta_int(&x, "K");
    dt_conv2d_dims d = {fx_meta_int(&x, "B"), fx_meta_int(&x, "IC"), fx_meta_int(&x, "H"),
                        fx_meta_int(&x, "W"), fx_meta_int(&x, "OC"), K, K,
                        fx_meta_int(&x, "stride"), fx_meta_int(&x, "pad")};
    int OH = dt_conv2d_out_h(&d), OW = dt_conv2d_out_w(&d);
    const dt_st_tensor *tout = fx_tensor(&x, "out", 0);
    char what[64];
    snprintf(what, sizeof what, "%s output shape", tag);
    test_cond(what, tout->ndim == 4 && tout->shape[2] == OH && tout->shape[3] == OW);
    size_t ni = (size_t)d.B * d.IC * d.H * d.W, nw = (size_t)d.OC * d.IC * K * K;
    size_t no = (size_t)d.B * d.OC * OH * OW;
    const float *inp = fx_f32(&x, "inp", ni), *w = fx_f32(&x, "w", nw), *b = fx_f32(&x, "b", d.OC);
    const float *dout = fx_f32(&x, "dout", no);
    float *scratch = fx_fill(&x, dt_conv2d_scratch_floats(&d), GARBAGE);

    float *out = fx_fill(&x, no, GARBAGE);
    dt_conv2d_forward(out, scratch, inp, w, b, &d);
    snprintf(what, sizeof what, "%s out", tag);
    fx_check(&x, what, out, "out", no, LAYER_ATOL, LAYER_RTOL);

    float *dinp = fx_zeros(&x, ni), *dw = fx_zeros(&x, nw), *db = fx_zeros(&x, d.OC);
    dt_conv2d_backward(dinp, dw, db, scratch, dout, inp, w, &d);
    snprintf(what, sizeof what, "%s dinp", tag);
    fx_check(&x, what, dinp, "dinp", ni, LAYER_ATOL, LAYER_RTOL);
    snprintf(what, sizeof what, "%s dw", tag);
    fx_check(&x, what, dw, "dw", nw, LAYER_ATOL, LAYER_RTOL);
    snprintf(what, sizeof what, "%s db", tag);
    fx_check(&x, what, db, "db", d.OC, LAYER_ATOL, LAYER_RTOL);

    dt_conv2d_backward(dinp, dw, db, scratch, dout, inp, w, &d);
    snprintf(what, sizeof what, "%s dinp (added twice)", tag);
    fx_check_twice(&x, what, dinp, "dinp", ni);
    snprintf(what, sizeof what, "%s dw (added twice)", tag);
    fx_check_twice(&x, what, dw, "dw", nw);
    snprintf(what, sizeof what, "%s db (added twice)", tag);
    fx_check_twice(&x, what, db, "db", d.OC);

    float *dw2 = fx_zeros(&x, nw);
    dt_conv2d_backward(NULL, dw2, fx_zeros(&x, d.OC), scratch, dout, inp, w, &d);
    snprintf(what, sizeof what, "%s dw (dinp NULL)", tag);
    fx_check(&x, what, dw2, "dw", nw, LAYER_ATOL, LAYER_RTOL);
    fx_close(&x);
}

static void test_maxpool(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_maxpool.safetensors")) return;
    int B = fx_meta_int(&x, "B"), C = fx_meta_int(&x, "C"), H = fx_meta_int(&x, "H");
    int W = fx_meta_int(&x, "W");
    size_t ni = (size_t)B * C * H * W, no = ni / 4;
    const float *inp = fx_f32(&x, "inp", ni), *dout = fx_f32(&x, "dout", no);
    const int32_t *ref_arg = fx_i32(&x, "argmax", no);
    float *out = fx_fill(&x, no, GARBAGE);
    int32_t *argmax = fx_track(&x, calloc(no, sizeof(int32_t)));
    dt_maxpool2x2_forward(out, argmax, inp, B, C, H, W);
    fx_check(&x, "maxpool out", out, "out", no, LAYER_ATOL, LAYER_RTOL);
    size_t bad = 0;
    for (size_t i = 0; i < no; i++) bad += argmax[i] != ref_arg[i];
    printf("%s %-40s n=%zu mismatches=%zu\n", bad ? "FAIL" : "ok  ", "maxpool argmax (ties first)",
           no, bad);
    test_cond("maxpool argmax equals PyTorch's indices", bad == 0);
    float *dinp = fx_zeros(&x, ni);
    dt_maxpool2x2_backward(dinp, dout, argmax, B, C, H, W);
    fx_check(&x, "maxpool dinp", dinp, "dinp", ni, LAYER_ATOL, LAYER_RTOL);
    dt_maxpool2x2_backward(dinp, dout, argmax, B, C, H, W);
    fx_check_twice(&x, "maxpool dinp (added twice)", dinp, "dinp", ni);
    fx_close(&x);
}

/* ---- layers for CNNs beyond LeNet and LLaMA-style transformers --------------- */

/* Train mode as a caller composes it (count = N*S, no sync): the statistics
 * from dt_batchnorm_sum / _sqdev, the forward, and the running statistics a
 * caller keeps (PyTorch: momentum, unbiased variance), from running_mean = 0
 * and running_var = 1, against nn.BatchNorm{1,2}d after one train step. */
static void test_batchnorm(const char *path, const char *tag) {
    fx x;
    if (!fx_open(&x, path)) return;
    int N = fx_meta_int(&x, "N"), C = fx_meta_int(&x, "C"), S = fx_meta_int(&x, "S");
    const float momentum = (float)atof(dt_st_meta(x.f, "momentum"));
    size_t n = (size_t)N * C * S;
    const double count = (double)N * S;
    const float *inp = fx_f32(&x, "inp", n), *dout = fx_f32(&x, "dout", n);
    const float *gamma = fx_f32(&x, "gamma", C), *beta = fx_f32(&x, "beta", C);
    float *mean = fx_fill(&x, C, GARBAGE), *sq = fx_fill(&x, C, GARBAGE);
    float *rstd = fx_zeros(&x, C), *rmean = fx_zeros(&x, C), *rvar = fx_zeros(&x, C);
    dt_batchnorm_sum(mean, inp, N, C, S);
    for (int c = 0; c < C; c++) mean[c] = (float)(mean[c] / count);
    dt_batchnorm_sqdev(sq, inp, mean, N, C, S);
    for (int c = 0; c < C; c++) {
        rstd[c] = (float)(1.0 / sqrt(sq[c] / count + DT_BATCHNORM_EPS));
        rmean[c] = (1.0f - momentum) * 0.0f + momentum * mean[c];
        rvar[c] = (1.0f - momentum) * 1.0f + momentum * (float)(sq[c] / (count - 1));
    }
    char what[80];
    snprintf(what, sizeof what, "%s mean", tag);
    fx_check(&x, what, mean, "mean", C, LAYER_ATOL, LAYER_RTOL);
    snprintf(what, sizeof what, "%s rstd", tag);
    fx_check(&x, what, rstd, "rstd", C, LAYER_ATOL, LAYER_RTOL);
    snprintf(what, sizeof what, "%s running_mean", tag);
    fx_check(&x, what, rmean, "running_mean", C, LAYER_ATOL, LAYER_RTOL);
    snprintf(what, sizeof what, "%s running_var", tag);
    fx_check(&x, what, rvar, "running_var", C, LAYER_ATOL, LAYER_RTOL);
    float *out = fx_fill(&x, n, GARBAGE);
    dt_batchnorm_forward(out, inp, mean, rstd, gamma, beta, N, C, S);
    snprintf(what, sizeof what, "%s out", tag);
    fx_check(&x, what, out, "out", n, LAYER_ATOL, LAYER_RTOL);

    float *sums = fx_fill(&x, 2 * (size_t)C, GARBAGE);
    float *dinp = fx_zeros(&x, n), *dg = fx_zeros(&x, C), *db = fx_zeros(&x, C);
    dt_batchnorm_bwd_sums(sums, dout, inp, mean, rstd, N, C, S);
    for (int pass = 1; pass <= 2; pass++) {
        dt_batchnorm_backward(dinp, dg, db, dout, inp, mean, rstd, gamma, sums, count, N, C, S);
        if (pass == 1) {
            snprintf(what, sizeof what, "%s dinp", tag);
            fx_check(&x, what, dinp, "dinp", n, LAYER_ATOL, LAYER_RTOL);
            snprintf(what, sizeof what, "%s dgamma", tag);
            fx_check(&x, what, dg, "dgamma", C, LAYER_ATOL, LAYER_RTOL);
            snprintf(what, sizeof what, "%s dbeta", tag);
            fx_check(&x, what, db, "dbeta", C, LAYER_ATOL, LAYER_RTOL);
        } else {
            snprintf(what, sizeof what, "%s dinp (added twice)", tag);
            fx_check_twice(&x, what, dinp, "dinp", n);
            snprintf(what, sizeof what, "%s dgamma (added twice)", tag);
            fx_check_twice(&x, what, dg, "dgamma", C);
            snprintf(what, sizeof what, "%s dbeta (added twice)", tag);
            fx_check_twice(&x, what, db, "dbeta", C);
        }
    }
    float *dg2 = fx_zeros(&x, C);
    dt_batchnorm_backward(NULL, dg2, fx_zeros(&x, C), dout, inp, mean, rstd, gamma, sums, count,
                          N, C, S);
    snprintf(what, sizeof what, "%s dgamma (dinp NULL)", tag);
    fx_check(&x, what, dg2, "dgamma", C, LAYER_ATOL, LAYER_RTOL);
    fx_close(&x);
}

static void test_avgpool(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_avgpool.safetensors")) return;
    int B = fx_meta_int(&x, "B"), C = fx_meta_int(&x, "C"), H = fx_meta_int(&x, "H");
    int W = fx_meta_int(&x, "W"), K = fx_meta_int(&x, "K"), stride = fx_meta_int(&x, "stride");
    int pad = fx_meta_int(&x, "pad");
    const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
    const dt_st_tensor *tout = fx_tensor(&x, "out", 0);
    test_cond("avgpool output shape", tout->ndim == 4 && tout->shape[2] == OH && tout->shape[3] == OW);
    size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * OH * OW;
    const float *inp = fx_f32(&x, "inp", ni), *dout = fx_f32(&x, "dout", no);
    float *out = fx_fill(&x, no, GARBAGE);
    dt_avgpool2d_forward(out, inp, B, C, H, W, K, stride, pad);
    fx_check(&x, "avgpool k3 s2 p1 out", out, "out", no, LAYER_ATOL, LAYER_RTOL);
    float *dinp = fx_zeros(&x, ni);
    dt_avgpool2d_backward(dinp, dout, B, C, H, W, K, stride, pad);
    fx_check(&x, "avgpool dinp", dinp, "dinp", ni, LAYER_ATOL, LAYER_RTOL);
    dt_avgpool2d_backward(dinp, dout, B, C, H, W, K, stride, pad);
    fx_check_twice(&x, "avgpool dinp (added twice)", dinp, "dinp", ni);
    fx_close(&x);
}

static void test_global_avgpool(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_global_avgpool.safetensors")) return;
    int B = fx_meta_int(&x, "B"), C = fx_meta_int(&x, "C"), S = fx_meta_int(&x, "S");
    size_t ni = (size_t)B * C * S, no = (size_t)B * C;
    const float *inp = fx_f32(&x, "inp", ni), *dout = fx_f32(&x, "dout", no);
    float *out = fx_fill(&x, no, GARBAGE);
    dt_global_avgpool_forward(out, inp, B, C, S);
    fx_check(&x, "global_avgpool out", out, "out", no, LAYER_ATOL, LAYER_RTOL);
    float *dinp = fx_zeros(&x, ni);
    dt_global_avgpool_backward(dinp, dout, B, C, S);
    fx_check(&x, "global_avgpool dinp", dinp, "dinp", ni, LAYER_ATOL, LAYER_RTOL);
    dt_global_avgpool_backward(dinp, dout, B, C, S);
    fx_check_twice(&x, "global_avgpool dinp (added twice)", dinp, "dinp", ni);
    fx_close(&x);
}

static void test_silu(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_silu.safetensors")) return;
    size_t n = (size_t)fx_meta_int(&x, "n");
    const float *inp = fx_f32(&x, "inp", n), *dout = fx_f32(&x, "dout", n);
    float *out = fx_fill(&x, n, GARBAGE);
    dt_silu_forward(out, inp, n);
    fx_check(&x, "silu out", out, "out", n, LAYER_ATOL, LAYER_RTOL);
    float *dinp = fx_zeros(&x, n);
    dt_silu_backward(dinp, dout, inp, n);
    fx_check(&x, "silu dinp", dinp, "dinp", n, LAYER_ATOL, LAYER_RTOL);
    dt_silu_backward(dinp, dout, inp, n);
    fx_check_twice(&x, "silu dinp (added twice)", dinp, "dinp", n);
    fx_close(&x);
}

static void test_tanh(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_tanh.safetensors")) return;
    size_t n = (size_t)fx_meta_int(&x, "n");
    const float *inp = fx_f32(&x, "inp", n), *dout = fx_f32(&x, "dout", n);
    float *out = fx_fill(&x, n, GARBAGE);
    dt_tanh_forward(out, inp, n);
    fx_check(&x, "tanh out", out, "out", n, LAYER_ATOL, LAYER_RTOL);
    float *inplace = fx_zeros(&x, n);
    memcpy(inplace, inp, n * sizeof(float));
    dt_tanh_forward(inplace, inplace, n);
    fx_check(&x, "tanh out (in place)", inplace, "out", n, LAYER_ATOL, LAYER_RTOL);
    float *dinp = fx_zeros(&x, n);
    dt_tanh_backward(dinp, dout, out, n);
    fx_check(&x, "tanh dinp (from the output)", dinp, "dinp", n, LAYER_ATOL, LAYER_RTOL);
    dt_tanh_backward(dinp, dout, out, n);
    fx_check_twice(&x, "tanh dinp (added twice)", dinp, "dinp", n);
    fx_close(&x);
}

static void test_rmsnorm(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_rmsnorm.safetensors")) return;
    int N = fx_meta_int(&x, "N"), C = fx_meta_int(&x, "C");
    const float eps = (float)atof(dt_st_meta(x.f, "eps"));
    size_t nc = (size_t)N * C;
    const float *inp = fx_f32(&x, "inp", nc), *w = fx_f32(&x, "w", C);
    const float *dout = fx_f32(&x, "dout", nc);
    float *out = fx_fill(&x, nc, GARBAGE), *rstd = fx_fill(&x, N, GARBAGE);
    dt_rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    fx_check(&x, "rmsnorm out", out, "out", nc, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "rmsnorm rstd", rstd, "rstd", N, LAYER_ATOL, LAYER_RTOL);
    float *dinp = fx_zeros(&x, nc), *dw = fx_zeros(&x, C);
    dt_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
    fx_check(&x, "rmsnorm dinp", dinp, "dinp", nc, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "rmsnorm dw", dw, "dw", C, LAYER_ATOL, LAYER_RTOL);
    dt_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
    fx_check_twice(&x, "rmsnorm dinp (added twice)", dinp, "dinp", nc);
    fx_check_twice(&x, "rmsnorm dw (added twice)", dw, "dw", C);
    float *dw2 = fx_zeros(&x, C);
    dt_rmsnorm_backward(NULL, dw2, dout, inp, w, rstd, N, C);
    fx_check(&x, "rmsnorm dw (dinp NULL)", dw2, "dw", C, LAYER_ATOL, LAYER_RTOL);
    fx_close(&x);
}

static void test_swiglu(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_swiglu.safetensors")) return;
    size_t n = (size_t)fx_meta_int(&x, "n");
    const float *gate = fx_f32(&x, "gate", n), *up = fx_f32(&x, "up", n);
    const float *dout = fx_f32(&x, "dout", n);
    float *out = fx_fill(&x, n, GARBAGE);
    dt_swiglu_forward(out, gate, up, n);
    fx_check(&x, "swiglu out", out, "out", n, LAYER_ATOL, LAYER_RTOL);
    float *dgate = fx_zeros(&x, n), *dup = fx_zeros(&x, n);
    dt_swiglu_backward(dgate, dup, dout, gate, up, n);
    fx_check(&x, "swiglu dgate", dgate, "dgate", n, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "swiglu dup", dup, "dup", n, LAYER_ATOL, LAYER_RTOL);
    dt_swiglu_backward(dgate, dup, dout, gate, up, n);
    fx_check_twice(&x, "swiglu dgate (added twice)", dgate, "dgate", n);
    fx_check_twice(&x, "swiglu dup (added twice)", dup, "dup", n);
    fx_close(&x);
}

/* q and k rotated inside a fused GQA qkv buffer, as a LLaMA block does: two
 * calls with the row stride of the whole buffer; v must pass through. The
 * backward is the inverse rotation of dout, in place (it does not add). */
static void test_rope(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_rope.safetensors")) return;
    int B = fx_meta_int(&x, "B"), T = fx_meta_int(&x, "T"), NH = fx_meta_int(&x, "NH");
    int NKV = fx_meta_int(&x, "NKV"), HS = fx_meta_int(&x, "HS");
    const float theta = (float)atof(dt_st_meta(x.f, "theta"));
    const size_t C3 = (size_t)(NH + 2 * NKV) * HS, n = (size_t)B * T * C3;
    float *out = fx_f32(&x, "qkv", n); /* a private copy, rotated in place */
    dt_rope_apply(out, B, T, NH, HS, C3, theta, 1);
    dt_rope_apply(out + (size_t)NH * HS, B, T, NKV, HS, C3, theta, 1);
    fx_check(&x, "rope out (q, k rotated; v as it was)", out, "out", n, LAYER_ATOL, LAYER_RTOL);
    float *d = fx_f32(&x, "dout", n);
    dt_rope_apply(d, B, T, NH, HS, C3, theta, -1);
    dt_rope_apply(d + (size_t)NH * HS, B, T, NKV, HS, C3, theta, -1);
    fx_check(&x, "rope dinp (inverse rotation of dout)", d, "dqkv", n, LAYER_ATOL, LAYER_RTOL);
    fx_close(&x);
}

static void test_attention_gqa(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_attention_gqa.safetensors")) return;
    int B = fx_meta_int(&x, "B"), T = fx_meta_int(&x, "T"), NH = fx_meta_int(&x, "NH");
    int NKV = fx_meta_int(&x, "NKV"), HS = fx_meta_int(&x, "HS");
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS;
    size_t na = (size_t)B * NH * T * T;
    const float *qkv = fx_f32(&x, "qkv", nq), *dout = fx_f32(&x, "dout", no);
    float *out = fx_fill(&x, no, GARBAGE), *att = fx_fill(&x, na, GARBAGE);
    dt_attention_gqa_forward(out, att, qkv, B, T, NH, NKV, HS);
    fx_check(&x, "gqa attention out", out, "out", no, LAYER_ATOL, LAYER_RTOL);
    fx_check(&x, "gqa attention att (probabilities)", att, "att", na, LAYER_ATOL, LAYER_RTOL);
    float *scratch = fx_fill(&x, dt_attention_gqa_scratch_floats(B, T, NH, NKV, HS), GARBAGE);
    float *dqkv = fx_zeros(&x, nq);
    dt_attention_gqa_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, HS);
    fx_check(&x, "gqa attention dqkv (dk, dv summed over groups)", dqkv, "dqkv", nq, LAYER_ATOL,
             LAYER_RTOL);
    dt_attention_gqa_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, HS);
    fx_check_twice(&x, "gqa attention dqkv (added twice)", dqkv, "dqkv", nq);
    fx_close(&x);
}

static void test_mse(void) {
    fx x;
    if (!fx_open(&x, "fixtures/ref_mse.safetensors")) return;
    int N = fx_meta_int(&x, "N"), D = fx_meta_int(&x, "D");
    size_t n = (size_t)N * D;
    const float *pred = fx_f32(&x, "pred", n), *target = fx_f32(&x, "target", n);
    float *losses = fx_fill(&x, N, GARBAGE);
    dt_mse_forward(losses, pred, target, N, D);
    fx_check(&x, "mse losses (per row)", losses, "losses", N, LAYER_ATOL, LAYER_RTOL);
    double s = 0;
    for (int i = 0; i < N; i++) s += losses[i];
    float loss = (float)(s / N);
    fx_check(&x, "mse mean of losses == MSELoss()", &loss, "loss", 1, LAYER_ATOL, LAYER_RTOL);
    float *dpred = fx_zeros(&x, n);
    dt_mse_backward(dpred, pred, target, 1.0f / (float)N, N, D);
    fx_check(&x, "mse dpred (scale 1/N)", dpred, "dpred", n, LAYER_ATOL, LAYER_RTOL);
    dt_mse_backward(dpred, pred, target, 1.0f / (float)N, N, D);
    fx_check_twice(&x, "mse dpred (added twice)", dpred, "dpred", n);
    fx_close(&x);
}

/* ---- models ------------------------------------------------------------------- */

/* lowbias32 of (i + seed * 0x9E3779B9): the CNN's fc1.weight, k * 2^-exp with
 * k in [-127, 127], exactly as hash_weights() in tools/gen_fixtures.py. */
static float hash_weight(uint32_t i, uint32_t seed, int exp) {
    uint32_t h = i + seed * 0x9E3779B9u;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    int k = (int)((h >> 8) % 255u) - 127;
    return ldexpf((float)k, -exp);
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? "x%lld" : "%lld", (long long)shape[i]);
}

static int is_batch_name(const char *s) {
    return !strcmp(s, "x") || !strcmp(s, "tokens") || !strcmp(s, "targets") || !strcmp(s, "loss");
}

/* Copies every parameter from the fixture into m->w. Fails (returns 0) on a
 * missing tensor, a wrong shape or an unexpected name in the fixture. */
static int load_weights(fx *x, dt_model *m, const char *tag) {
    int ok = 1;
    char key[96];
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        float *dst = m->w + p->offset;
        snprintf(key, sizeof key, "gen.%s", p->name);
        const char *gen = dt_st_meta(x->f, key);
        const dt_st_tensor *t = dt_st_find(x->f, p->name);
        if (!t && gen) {
            unsigned seed = 0;
            int exp = 0;
            if (sscanf(gen, "%u %d", &seed, &exp) != 2) {
                fprintf(stderr, "%s: bad %s '%s'\n", x->path, key, gen);
                ok = 0;
                continue;
            }
            for (size_t j = 0; j < p->numel; j++) dst[j] = hash_weight((uint32_t)j, seed, exp);
            continue;
        }
        if (!t) {
            fprintf(stderr, "%s: %s: parameter %s missing from the fixture\n", tag, x->path, p->name);
            ok = 0;
            continue;
        }
        int same = t->ndim == p->ndim;
        for (int k = 0; same && k < p->ndim; k++) same = t->shape[k] == p->shape[k];
        if (!same) {
            char ours[64], theirs[64];
            shape_str(ours, sizeof ours, p->ndim, p->shape);
            shape_str(theirs, sizeof theirs, t->ndim, t->shape);
            fprintf(stderr, "%s: %s is %s here but %s in PyTorch\n", tag, p->name, ours, theirs);
            ok = 0;
            continue;
        }
        if (dt_st_read_f32(x->f, t, dst, p->numel) != DT_OK) {
            fprintf(stderr, "%s: %s\n", tag, dt_error_msg());
            ok = 0;
        }
    }
    /* Nothing in the fixture may go unused: a PyTorch tensor the model lacks is
     * a missing layer. nanoGPT's state_dict also lists the tied lm_head.weight. */
    for (int i = 0; i < dt_st_count(x->f); i++) {
        const char *name = dt_st_get(x->f, i)->name;
        if (!strncmp(name, "grad.", 5) || is_batch_name(name) || dt_model_find(m, name)) continue;
        if (!strcmp(name, "lm_head.weight")) {
            const dt_param *wte = dt_model_find(m, "transformer.wte.weight");
            float *lm = fx_f32(x, name, wte ? wte->numel : 0);
            test_cond("lm_head.weight is tied to transformer.wte.weight",
                      wte && !memcmp(lm, m->w + wte->offset, wte->numel * sizeof(float)));
            continue;
        }
        fprintf(stderr, "%s: fixture tensor %s has no dt_param\n", tag, name);
        ok = 0;
    }
    test_cond("fixture weights match the model's parameters one to one", ok);
    return ok;
}

/* fc1.weight of the CNN is too large to store: its gradient is checked through
 * row sums, column sums and a fixed sample of coordinates. */
static void check_fc1_summary(fx *x, const dt_param *p, const float *g, const char *tag) {
    size_t R = (size_t)p->shape[0], Cc = (size_t)p->shape[1];
    float *rs = fx_zeros(x, R), *cs = fx_zeros(x, Cc);
    double *acc = fx_track(x, calloc(Cc, sizeof(double)));
    for (size_t r = 0; r < R; r++) {
        double s = 0;
        for (size_t c = 0; c < Cc; c++) {
            s += g[r * Cc + c];
            acc[c] += g[r * Cc + c];
        }
        rs[r] = (float)s;
    }
    for (size_t c = 0; c < Cc; c++) cs[c] = (float)acc[c];
    char what[96];
    snprintf(what, sizeof what, "%s grad.%s row sums", tag, p->name);
    fx_check(x, what, rs, "grad.fc1.weight.rowsum", R, MODEL_ATOL, MODEL_RTOL);
    snprintf(what, sizeof what, "%s grad.%s column sums", tag, p->name);
    fx_check(x, what, cs, "grad.fc1.weight.colsum", Cc, MODEL_ATOL, MODEL_RTOL);
    const dt_st_tensor *ti = fx_tensor(x, "grad.fc1.weight.idx", 0);
    const int32_t *idx = fx_i32(x, "grad.fc1.weight.idx", ti->numel);
    float *sample = fx_zeros(x, ti->numel);
    for (size_t i = 0; i < ti->numel; i++) {
        DT_ASSERT(idx[i] >= 0 && (size_t)idx[i] < p->numel);
        sample[i] = g[idx[i]];
    }
    snprintf(what, sizeof what, "%s grad.%s (%zu sampled)", tag, p->name, ti->numel);
    fx_check(x, what, sample, "grad.fc1.weight.val", ti->numel, MODEL_ATOL, MODEL_RTOL);
}

static void test_model(const char *path, const char *tag, const dt_model_cfg *cfg) {
    fx x;
    if (!fx_open(&x, path)) return;
    dt_model *m = NULL;
    dt_acts *a = NULL;
    int B = fx_meta_int(&x, "B");
    dt_status st = dt_model_create(&m, cfg);
    test_cond("dt_model_create", st == DT_OK);
    if (st) {
        fprintf(stderr, "%s: %s\n", tag, dt_error_msg());
        goto done;
    }
    if (!load_weights(&x, m, tag)) goto done;

    dt_batch batch = {0};
    batch.B = B;
    if (cfg->kind == DT_MODEL_GPT) {
        size_t nt = (size_t)B * cfg->block_size;
        batch.tokens = fx_i32(&x, "tokens", nt);
        batch.targets = fx_i32(&x, "targets", nt);
    } else {
        size_t in = cfg->kind == DT_MODEL_MLP ? (size_t)cfg->in_dim
                                              : (size_t)cfg->img_c * cfg->img_h * cfg->img_w;
        batch.x = fx_f32(&x, "x", (size_t)B * in);
        batch.targets = fx_i32(&x, "targets", B);
    }
    batch.loss_scale = 1.0f / (float)(B * m->loss_terms);

    st = dt_acts_create(&a, m, 0, m->n_blocks - 1, B);
    test_cond("dt_acts_create", st == DT_OK);
    if (st) goto done;
    dt_model_zero_grad(m);
    float loss = dt_model_forward(m, a, &batch, NULL);
    char what[128];
    snprintf(what, sizeof what, "%s loss", tag);
    fx_check(&x, what, &loss, "loss", 1, MODEL_ATOL, MODEL_RTOL);
    dt_model_backward(m, a, &batch, NULL, NULL, NULL, NULL);

    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        const float *g = m->g + p->offset;
        char key[96];
        snprintf(key, sizeof key, "grad.%s", p->name);
        if (!dt_st_find(x.f, key) && !strcmp(p->name, "fc1.weight") &&
            dt_st_find(x.f, "grad.fc1.weight.rowsum")) {
            check_fc1_summary(&x, p, g, tag);
            continue;
        }
        snprintf(what, sizeof what, "%s %s", tag, key);
        fx_check(&x, what, g, key, p->numel, MODEL_ATOL, MODEL_RTOL);
    }
done:
    dt_acts_destroy(a);
    dt_model_destroy(m);
    fx_close(&x);
}

int main(void) {
    test_linear("fixtures/ref_linear.safetensors", "linear", 1);
    test_linear("fixtures/ref_linear_nobias.safetensors", "linear (no bias)", 0);
    test_relu();
    test_gelu();
    test_layernorm();
    test_embedding();
    test_attention();
    test_crossentropy();
    test_conv2d("fixtures/ref_conv2d_pad2.safetensors", "conv2d pad 2");
    test_conv2d("fixtures/ref_conv2d_stride2.safetensors", "conv2d stride 2");
    test_conv2d("fixtures/ref_conv2d_1x1.safetensors", "conv2d 1x1 batch 1");
    test_conv2d("fixtures/ref_conv2d_3x3_pad1.safetensors", "conv2d 3x3 pad 1 odd channels");
    test_conv2d("fixtures/ref_conv2d_3x3_pad0.safetensors", "conv2d 3x3 pad 0");
    test_conv2d("fixtures/ref_conv2d_3x3_stride2_pad1.safetensors", "conv2d 3x3 stride 2 pad 1");
    test_conv2d("fixtures/ref_conv2d_w3_layer2.safetensors", "conv2d W3 layer 2");
    test_maxpool();
    test_batchnorm("fixtures/ref_batchnorm2d.safetensors", "batchnorm2d");
    test_batchnorm("fixtures/ref_batchnorm1d.safetensors", "batchnorm1d");
    test_avgpool();
    test_global_avgpool();
    test_silu();
    test_tanh();
    test_rmsnorm();
    test_swiglu();
    test_rope();
    test_attention_gqa();
    test_mse();

    dt_model_cfg cfg;
    dt_model_cfg_default(&cfg, DT_MODEL_MLP);
    cfg.in_dim = 20;
    cfg.n_hidden = 2;
    cfg.hidden[0] = 16;
    cfg.hidden[1] = 12;
    cfg.n_classes = 10;
    test_model("fixtures/ref_mlp.safetensors", "mlp", &cfg);

    dt_model_cfg_default(&cfg, DT_MODEL_CNN);
    test_model("fixtures/ref_cnn.safetensors", "cnn", &cfg);

    dt_model_cfg_default(&cfg, DT_MODEL_GPT);
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    cfg.block_size = 8;
    cfg.vocab_size = 256;
    test_model("fixtures/ref_gpt.safetensors", "gpt", &cfg);
    return test_report();
}
