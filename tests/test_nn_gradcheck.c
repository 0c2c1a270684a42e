/* Gradient checks for every layer kernel in src/nn.
 *
 * For each kernel: the float forward is compared with a small double-precision
 * re-implementation written here, and every gradient the float backward
 * produces (inputs and parameters) is compared with central finite differences
 * of that double reference under the projection loss L = sum(out * R), R
 * random. Finite differences in double (h = 1e-6) are accurate to ~1e-9, so the
 * tolerance (atol 1e-4, rtol 1e-3) only has to absorb float rounding in the
 * kernels, yet a wrong term, sign or scale shows up as O(0.1).
 * Also checked: backward ADDS into pre-filled gradients; a NULL input gradient
 * is skipped and leaves parameter gradients unchanged; forward overwrites
 * (outputs are pre-filled with NaN); tiny and odd sizes; attention causality;
 * conv2d chunking (batched GEMM) against sample-by-sample calls; maxpool ties. */
#include "dtrain/nn.h"
#include "testhelp.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define FD_H 1e-6
#define G_ATOL 1e-4
#define G_RTOL 1e-3
#define F_ATOL 1e-5
#define F_RTOL 1e-4

static double g_worst_grad = 0; /* largest |analytic - numeric| over all checks */

/* ---- helpers -------------------------------------------------------------- */

static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* [0, 1) */
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return (double)(rng_s >> 11) / 9007199254740992.0;
}
static float frand(void) { return (float)(2.0 * urand() - 1.0); }

static float *fnew(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static float *frandn(size_t n) {
    float *x = fnew(n);
    for (size_t i = 0; i < n; i++) x[i] = frand();
    return x;
}
static float *fnan(size_t n) {
    float *x = fnew(n);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}
static float *fcopy(const float *a, size_t n) {
    float *x = fnew(n);
    memcpy(x, a, n * sizeof(float));
    return x;
}
static double *dcopy(const float *a, size_t n) {
    double *x = calloc(n ? n : 1, sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = a[i];
    return x;
}
static float *tofloat(const double *a, size_t n) {
    float *x = fnew(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)a[i];
    return x;
}

typedef double (*loss_fn)(void *ctx);

/* Central differences of f with respect to each x[i]; compares with analytic. */
static void gradcheck(const char *what, loss_fn f, void *ctx, double *x, size_t n,
                      const float *analytic) {
    float *num = fnew(n);
    for (size_t i = 0; i < n; i++) {
        double s = x[i];
        x[i] = s + FD_H;
        double lp = f(ctx);
        x[i] = s - FD_H;
        double lm = f(ctx);
        x[i] = s;
        num[i] = (float)((lp - lm) / (2 * FD_H));
        double d = fabs((double)analytic[i] - num[i]);
        if (d > g_worst_grad) g_worst_grad = d;
    }
    char name[96];
    snprintf(name, sizeof name, "grad %s", what);
    test_close(name, analytic, num, n, G_ATOL, G_RTOL);
    free(num);
}

/* after == g0 + fresh (backward added into a pre-filled buffer). */
static void check_adds(const char *what, const float *after, const float *g0,
                       const float *fresh, size_t n) {
    float *want = fnew(n);
    for (size_t i = 0; i < n; i++) want[i] = g0[i] + fresh[i];
    char name[96];
    snprintf(name, sizeof name, "adds %s", what);
    test_close(name, after, want, n, 1e-5, 1e-5);
    free(want);
}

static double dot_r(const double *y, const double *R, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += y[i] * R[i];
    return s;
}

/* ---- linear --------------------------------------------------------------- */

typedef struct {
    double *x, *w, *b, *R, *y;
    int N, IC, OC;
} lin_ctx;

static void lin_ref(lin_ctx *c) {
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->b ? c->b[o] : 0;
            for (int i = 0; i < c->IC; i++) s += c->x[n * c->IC + i] * c->w[o * c->IC + i];
            c->y[n * c->OC + o] = s;
        }
}
static double lin_loss(void *p) {
    lin_ctx *c = p;
    lin_ref(c);
    return dot_r(c->y, c->R, (size_t)c->N * c->OC);
}

static void test_linear(int N, int IC, int OC, int bias) {
    char tag[64];
    snprintf(tag, sizeof tag, "linear N=%d IC=%d OC=%d%s", N, IC, OC, bias ? "" : " nobias");
    size_t nx = (size_t)N * IC, nw = (size_t)OC * IC, ny = (size_t)N * OC;
    float *x = frandn(nx), *w = frandn(nw), *b = bias ? frandn(OC) : NULL, *R = frandn(ny);
    float *y = fnan(ny);
    dt_linear_forward(y, x, w, b, N, IC, OC);
    lin_ctx c = {dcopy(x, nx), dcopy(w, nw), b ? dcopy(b, OC) : NULL, dcopy(R, ny),
                 calloc(ny, sizeof(double)), N, IC, OC};
    lin_ref(&c);
    float *yr = tofloat(c.y, ny);
    char nm[128];
    snprintf(nm, sizeof nm, "fwd %s", tag);
    test_close(nm, y, yr, ny, F_ATOL, F_RTOL);

    float *dx = fnew(nx), *dw = fnew(nw), *db = fnew(OC);
    dt_linear_backward(dx, dw, bias ? db : NULL, R, x, w, N, IC, OC);
    snprintf(nm, sizeof nm, "%s dinp", tag);
    gradcheck(nm, lin_loss, &c, c.x, nx, dx);
    snprintf(nm, sizeof nm, "%s dw", tag);
    gradcheck(nm, lin_loss, &c, c.w, nw, dw);
    if (bias) {
        snprintf(nm, sizeof nm, "%s db", tag);
        gradcheck(nm, lin_loss, &c, c.b, OC, db);
    }
    /* backward adds */
    float *gx = frandn(nx), *gw = frandn(nw), *gb = frandn(OC);
    float *ax = fcopy(gx, nx), *aw = fcopy(gw, nw), *ab = fcopy(gb, OC);
    dt_linear_backward(ax, aw, bias ? ab : NULL, R, x, w, N, IC, OC);
    snprintf(nm, sizeof nm, "%s dinp", tag);
    check_adds(nm, ax, gx, dx, nx);
    snprintf(nm, sizeof nm, "%s dw", tag);
    check_adds(nm, aw, gw, dw, nw);
    if (bias) {
        snprintf(nm, sizeof nm, "%s db", tag);
        check_adds(nm, ab, gb, db, OC);
    }
    /* NULL dinp: parameter gradients as before */
    float *nw2 = fnew(nw), *nb2 = fnew(OC);
    dt_linear_backward(NULL, nw2, bias ? nb2 : NULL, R, x, w, N, IC, OC);
    snprintf(nm, sizeof nm, "nulldinp %s dw", tag);
    test_close(nm, nw2, dw, nw, 1e-6, 1e-6);
    if (bias) test_close("nulldinp linear db", nb2, db, OC, 1e-6, 1e-6);

    free(x); free(w); free(b); free(R); free(y); free(yr); free(dx); free(dw); free(db);
    free(gx); free(gw); free(gb); free(ax); free(aw); free(ab); free(nw2); free(nb2);
    free(c.x); free(c.w); free(c.b); free(c.R); free(c.y);
}

/* ---- relu / gelu ---------------------------------------------------------- */

typedef struct {
    double *x, *R;
    size_t n;
    int gelu;
} act_ctx;

static double gelu_d(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double act_loss(void *p) {
    act_ctx *c = p;
    double s = 0;
    for (size_t i = 0; i < c->n; i++) {
        double x = c->x[i];
        s += (c->gelu ? gelu_d(x) : (x > 0 ? x : 0)) * c->R[i];
    }
    return s;
}

static void test_act(int gelu, size_t n, double range) {
    char tag[64], nm[128];
    snprintf(tag, sizeof tag, "%s n=%zu", gelu ? "gelu" : "relu", n);
    float *x = fnew(n), *R = frandn(n), *y = fnan(n), *yr = fnew(n);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(range * frand());
        if (!gelu && fabsf(x[i]) < 0.01f) x[i] = 0.5f; /* keep FD off the kink */
    }
    if (gelu) dt_gelu_forward(y, x, n);
    else dt_relu_forward(y, x, n);
    for (size_t i = 0; i < n; i++) yr[i] = (float)(gelu ? gelu_d(x[i]) : (x[i] > 0 ? x[i] : 0));
    snprintf(nm, sizeof nm, "fwd %s", tag);
    test_close(nm, y, yr, n, F_ATOL, F_RTOL);

    float *dx = fnew(n);
    if (gelu) dt_gelu_backward(dx, R, x, n);
    else dt_relu_backward(dx, R, y, n);
    act_ctx c = {dcopy(x, n), dcopy(R, n), n, gelu};
    snprintf(nm, sizeof nm, "%s dinp", tag);
    gradcheck(nm, act_loss, &c, c.x, n, dx);

    float *g0 = frandn(n), *a = fcopy(g0, n);
    if (gelu) dt_gelu_backward(a, R, x, n);
    else dt_relu_backward(a, R, y, n);
    check_adds(nm, a, g0, dx, n);
    if (gelu) dt_gelu_backward(NULL, R, x, n);
    else dt_relu_backward(NULL, R, y, n);

    if (!gelu) { /* in place */
        float *z = fcopy(x, n);
        dt_relu_forward(z, z, n);
        snprintf(nm, sizeof nm, "relu in place n=%zu", n);
        test_close(nm, z, y, n, 0, 0);
        free(z);
    }
    free(x); free(R); free(y); free(yr); free(dx); free(g0); free(a); free(c.x); free(c.R);
}

/* ---- layernorm ------------------------------------------------------------ */

typedef struct {
    double *x, *w, *b, *R, *y, *mean, *rstd;
    int N, C;
} ln_ctx;

static void ln_ref(ln_ctx *c) {
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (size_t)n * c->C;
        double m = 0, v = 0;
        for (int i = 0; i < c->C; i++) m += x[i];
        m /= c->C;
        for (int i = 0; i < c->C; i++) v += (x[i] - m) * (x[i] - m);
        v /= c->C;
        double r = 1 / sqrt(v + 1e-5);
        for (int i = 0; i < c->C; i++) c->y[n * c->C + i] = (x[i] - m) * r * c->w[i] + c->b[i];
        c->mean[n] = m;
        c->rstd[n] = r;
    }
}
static double ln_loss(void *p) {
    ln_ctx *c = p;
    ln_ref(c);
    return dot_r(c->y, c->R, (size_t)c->N * c->C);
}

static void test_layernorm(int N, int C) {
    char tag[64], nm[128];
    snprintf(tag, sizeof tag, "layernorm N=%d C=%d", N, C);
    size_t n = (size_t)N * C;
    float *x = frandn(n), *w = frandn(C), *b = frandn(C), *R = frandn(n);
    for (size_t i = 0; i < n; i++) x[i] = 3.0f * x[i] + 2.0f; /* nonzero mean */
    float *y = fnan(n), *mean = fnan(N), *rstd = fnan(N);
    dt_layernorm_forward(y, mean, rstd, x, w, b, N, C);
    ln_ctx c = {dcopy(x, n), dcopy(w, C), dcopy(b, C), dcopy(R, n), calloc(n, sizeof(double)),
                calloc(N, sizeof(double)), calloc(N, sizeof(double)), N, C};
    ln_ref(&c);
    float *yr = tofloat(c.y, n), *mr = tofloat(c.mean, N), *rr = tofloat(c.rstd, N);
    snprintf(nm, sizeof nm, "fwd %s", tag);
    test_close(nm, y, yr, n, F_ATOL, F_RTOL);
    test_close("fwd layernorm mean", mean, mr, N, F_ATOL, F_RTOL);
    test_close("fwd layernorm rstd", rstd, rr, N, F_ATOL, F_RTOL);

    float *dx = fnew(n), *dw = fnew(C), *db = fnew(C);
    dt_layernorm_backward(dx, dw, db, R, x, w, mean, rstd, N, C);
    snprintf(nm, sizeof nm, "%s dinp", tag);
    gradcheck(nm, ln_loss, &c, c.x, n, dx);
    snprintf(nm, sizeof nm, "%s dw", tag);
    gradcheck(nm, ln_loss, &c, c.w, C, dw);
    snprintf(nm, sizeof nm, "%s db", tag);
    gradcheck(nm, ln_loss, &c, c.b, C, db);

    float *gx = frandn(n), *gw = frandn(C), *gb = frandn(C);
    float *ax = fcopy(gx, n), *aw = fcopy(gw, C), *ab = fcopy(gb, C);
    dt_layernorm_backward(ax, aw, ab, R, x, w, mean, rstd, N, C);
    check_adds("layernorm dinp", ax, gx, dx, n);
    check_adds("layernorm dw", aw, gw, dw, C);
    check_adds("layernorm db", ab, gb, db, C);
    float *nw = fnew(C), *nb = fnew(C);
    dt_layernorm_backward(NULL, nw, nb, R, x, w, mean, rstd, N, C);
    test_close("nulldinp layernorm dw", nw, dw, C, 0, 0);
    test_close("nulldinp layernorm db", nb, db, C, 0, 0);

    free(x); free(w); free(b); free(R); free(y); free(mean); free(rstd); free(yr); free(mr);
    free(rr); free(dx); free(dw); free(db); free(gx); free(gw); free(gb); free(ax); free(aw);
    free(ab); free(nw); free(nb);
    free(c.x); free(c.w); free(c.b); free(c.R); free(c.y); free(c.mean); free(c.rstd);
}

/* ---- embedding ------------------------------------------------------------ */

typedef struct {
    double *t, *R;
    const int32_t *ids;
    int N, C;
} emb_ctx;

static double emb_loss(void *p) {
    emb_ctx *c = p;
    double s = 0;
    for (int n = 0; n < c->N; n++)
        for (int i = 0; i < c->C; i++) s += c->t[c->ids[n] * c->C + i] * c->R[n * c->C + i];
    return s;
}

static void test_embedding(int N, int V, int C) {
    char nm[128];
    int32_t *ids = calloc(N, sizeof(int32_t));
    for (int n = 0; n < N; n++) ids[n] = (int32_t)(urand() * V);
    if (N > 2) ids[N - 1] = ids[0]; /* a repeated id must accumulate */
    size_t nt = (size_t)V * C, ny = (size_t)N * C;
    float *t = frandn(nt), *R = frandn(ny), *y = fnan(ny), *yr = fnew(ny);
    dt_embedding_forward(y, ids, t, N, C);
    for (int n = 0; n < N; n++) memcpy(yr + n * C, t + ids[n] * C, C * sizeof(float));
    snprintf(nm, sizeof nm, "fwd embedding N=%d V=%d C=%d", N, V, C);
    test_close(nm, y, yr, ny, 0, 0);
    float *dt = fnew(nt);
    dt_embedding_backward(dt, R, ids, N, C);
    emb_ctx c = {dcopy(t, nt), dcopy(R, ny), ids, N, C};
    snprintf(nm, sizeof nm, "embedding N=%d V=%d C=%d dtable", N, V, C);
    gradcheck(nm, emb_loss, &c, c.t, nt, dt);
    float *g0 = frandn(nt), *a = fcopy(g0, nt);
    dt_embedding_backward(a, R, ids, N, C);
    check_adds(nm, a, g0, dt, nt);
    free(ids); free(t); free(R); free(y); free(yr); free(dt); free(g0); free(a); free(c.t);
    free(c.R);
}

/* ---- attention ------------------------------------------------------------ */

typedef struct {
    double *qkv, *R, *y, *att;
    int B, T, C, NH;
} att_ctx;

static void att_ref(att_ctx *c) {
    const int T = c->T, C = c->C, NH = c->NH, HS = C / NH;
    const double scale = 1 / sqrt((double)HS);
    double *s = calloc(T, sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = c->qkv + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double d = 0;
                    for (int i = 0; i < HS; i++) d += q[i] * k[i];
                    s[j] = d * scale;
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
                double *a = c->att + (((size_t)b * NH + h) * T + t) * T;
                for (int j = 0; j < T; j++) a[j] = j <= t ? s[j] / sum : 0;
                double *y = c->y + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) {
                    double acc = 0;
                    for (int j = 0; j <= t; j++)
                        acc += a[j] * c->qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * HS + i];
                    y[i] = acc;
                }
            }
    free(s);
}
static double att_loss(void *p) {
    att_ctx *c = p;
    att_ref(c);
    return dot_r(c->y, c->R, (size_t)c->B * c->T * c->C);
}

static void test_attention(int B, int T, int C, int NH) {
    char tag[64], nm[128];
    snprintf(tag, sizeof tag, "attention B=%d T=%d C=%d NH=%d", B, T, C, NH);
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = frandn(nq), *R = frandn(ny), *y = fnan(ny), *att = fnan(na);
    for (size_t i = 0; i < nq; i++) qkv[i] *= 2.0f; /* non-uniform softmax */
    dt_attention_forward(y, att, qkv, B, T, C, NH);
    att_ctx c = {dcopy(qkv, nq), dcopy(R, ny), calloc(ny, sizeof(double)),
                 calloc(na, sizeof(double)), B, T, C, NH};
    att_ref(&c);
    float *yr = tofloat(c.y, ny), *ar = tofloat(c.att, na);
    snprintf(nm, sizeof nm, "fwd %s", tag);
    test_close(nm, y, yr, ny, F_ATOL, F_RTOL);
    test_close("fwd attention att (zeros above diagonal)", att, ar, na, F_ATOL, F_RTOL);

    size_t ns = dt_attention_scratch_floats(B, T, C, NH);
    float *scratch = fnan(ns), *dq = fnew(nq);
    dt_attention_backward(dq, scratch, R, qkv, att, B, T, C, NH);
    snprintf(nm, sizeof nm, "%s dqkv", tag);
    gradcheck(nm, att_loss, &c, c.qkv, nq, dq);
    float *g0 = frandn(nq), *a = fcopy(g0, nq);
    dt_attention_backward(a, scratch, R, qkv, att, B, T, C, NH);
    check_adds(nm, a, g0, dq, nq);
    dt_attention_backward(NULL, scratch, R, qkv, att, B, T, C, NH);

    /* Causality: perturbing token t0 (q, k and v) leaves outputs before t0
     * bitwise unchanged. */
    if (T > 1) {
        int t0 = T / 2;
        float *q2 = fcopy(qkv, nq), *y2 = fnew(ny), *att2 = fnew(na);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < 3 * C; i++) q2[((size_t)b * T + t0) * 3 * C + i] += 5.0f * frand();
        dt_attention_forward(y2, att2, q2, B, T, C, NH);
        int same_before = 1, changed_at = 0;
        for (int b = 0; b < B; b++) {
            const size_t o = (size_t)b * T * C;
            if (memcmp(y + o, y2 + o, (size_t)t0 * C * sizeof(float))) same_before = 0;
            if (memcmp(y + o + (size_t)t0 * C, y2 + o + (size_t)t0 * C, C * sizeof(float)))
                changed_at = 1;
        }
        snprintf(nm, sizeof nm, "%s causal: out[t<%d] independent of token %d", tag, t0, t0);
        test_cond(nm, same_before);
        test_cond("attention: perturbation does reach out[t0]", changed_at);
        free(q2); free(y2); free(att2);
    }
    free(qkv); free(R); free(y); free(att); free(yr); free(ar); free(scratch); free(dq);
    free(g0); free(a); free(c.qkv); free(c.R); free(c.y); free(c.att);
}

/* ---- cross-entropy -------------------------------------------------------- */

typedef struct {
    double *z;
    const int32_t *tg;
    double scale;
    int N, V;
} ce_ctx;

static double ce_row(const double *z, int t, int V, double *probs) {
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) s += exp(z[v] - mx);
    if (probs)
        for (int v = 0; v < V; v++) probs[v] = exp(z[v] - mx) / s;
    return log(s) - (z[t] - mx);
}
static double ce_loss(void *p) {
    ce_ctx *c = p;
    double s = 0;
    for (int n = 0; n < c->N; n++) s += ce_row(c->z + (size_t)n * c->V, c->tg[n], c->V, NULL);
    return c->scale * s;
}

static void test_crossentropy(int N, int V, float zscale) {
    char tag[64], nm[128];
    snprintf(tag, sizeof tag, "crossentropy N=%d V=%d |z|<=%g", N, V, zscale);
    size_t nz = (size_t)N * V;
    float *z = frandn(nz), *loss = fnan(N), *probs = fnan(nz);
    for (size_t i = 0; i < nz; i++) z[i] *= zscale;
    int32_t *tg = calloc(N, sizeof(int32_t));
    for (int n = 0; n < N; n++) tg[n] = (int32_t)(urand() * V);
    dt_crossentropy_forward(loss, probs, z, tg, N, V);
    double *dz = dcopy(z, nz), *pr = calloc(nz, sizeof(double)), *lr = calloc(N, sizeof(double));
    for (int n = 0; n < N; n++) lr[n] = ce_row(dz + (size_t)n * V, tg[n], V, pr + (size_t)n * V);
    float *lrf = tofloat(lr, N), *prf = tofloat(pr, nz);
    snprintf(nm, sizeof nm, "fwd %s losses", tag);
    test_close(nm, loss, lrf, N, F_ATOL, F_RTOL);
    test_close("fwd crossentropy probs", probs, prf, nz, F_ATOL, F_RTOL);

    float scale = 1.0f / (float)N;
    float *dl = fnew(nz);
    dt_crossentropy_backward(dl, probs, tg, scale, N, V);
    if (zscale <= 10) { /* finite differences are meaningless for huge logits */
        ce_ctx c = {dz, tg, scale, N, V};
        snprintf(nm, sizeof nm, "%s dlogits", tag);
        gradcheck(nm, ce_loss, &c, dz, nz, dl);
    }
    float *g0 = frandn(nz), *a = fcopy(g0, nz);
    dt_crossentropy_backward(a, probs, tg, scale, N, V);
    check_adds("crossentropy dlogits", a, g0, dl, nz);
    dt_crossentropy_backward(NULL, probs, tg, scale, N, V);
    free(z); free(loss); free(probs); free(tg); free(dz); free(pr); free(lr); free(lrf);
    free(prf); free(dl); free(g0); free(a);
}

/* ---- conv2d --------------------------------------------------------------- */

typedef struct {
    double *x, *w, *b, *R, *y;
    dt_conv2d_dims d;
    int OH, OW;
} conv_ctx;

static void conv_ref(conv_ctx *c) {
    const dt_conv2d_dims *d = &c->d;
    for (int n = 0; n < d->B; n++)
        for (int o = 0; o < d->OC; o++)
            for (int oh = 0; oh < c->OH; oh++)
                for (int ow = 0; ow < c->OW; ow++) {
                    double s = c->b ? c->b[o] : 0;
                    for (int i = 0; i < d->IC; i++)
                        for (int kh = 0; kh < d->KH; kh++)
                            for (int kw = 0; kw < d->KW; kw++) {
                                int ih = oh * d->stride - d->pad + kh;
                                int iw = ow * d->stride - d->pad + kw;
                                if (ih < 0 || ih >= d->H || iw < 0 || iw >= d->W) continue;
                                s += c->x[(((size_t)n * d->IC + i) * d->H + ih) * d->W + iw] *
                                     c->w[(((size_t)o * d->IC + i) * d->KH + kh) * d->KW + kw];
                            }
                    c->y[(((size_t)n * d->OC + o) * c->OH + oh) * c->OW + ow] = s;
                }
}
static double conv_loss(void *p) {
    conv_ctx *c = p;
    conv_ref(c);
    return dot_r(c->y, c->R, (size_t)c->d.B * c->d.OC * c->OH * c->OW);
}

static void test_conv2d(dt_conv2d_dims d, int bias) {
    char tag[96], nm[160];
    snprintf(tag, sizeof tag, "conv2d B%d IC%d %dx%d OC%d k%dx%d s%d p%d%s", d.B, d.IC, d.H, d.W,
             d.OC, d.KH, d.KW, d.stride, d.pad, bias ? "" : " nobias");
    const int OH = dt_conv2d_out_h(&d), OW = dt_conv2d_out_w(&d);
    size_t nx = (size_t)d.B * d.IC * d.H * d.W, nw = (size_t)d.OC * d.IC * d.KH * d.KW;
    size_t ny = (size_t)d.B * d.OC * OH * OW, ns = dt_conv2d_scratch_floats(&d);
    float *x = frandn(nx), *w = frandn(nw), *b = bias ? frandn(d.OC) : NULL, *R = frandn(ny);
    float *y = fnan(ny), *scratch = fnan(ns);
    dt_conv2d_forward(y, scratch, x, w, b, &d);
    conv_ctx c = {dcopy(x, nx), dcopy(w, nw), b ? dcopy(b, d.OC) : NULL, dcopy(R, ny),
                  calloc(ny, sizeof(double)), d, OH, OW};
    conv_ref(&c);
    float *yr = tofloat(c.y, ny);
    snprintf(nm, sizeof nm, "fwd %s", tag);
    test_close(nm, y, yr, ny, F_ATOL, F_RTOL);

    float *dx = fnew(nx), *dw = fnew(nw), *db = fnew(d.OC);
    dt_conv2d_backward(dx, dw, bias ? db : NULL, scratch, R, x, w, &d);
    snprintf(nm, sizeof nm, "%s dinp", tag);
    gradcheck(nm, conv_loss, &c, c.x, nx, dx);
    snprintf(nm, sizeof nm, "%s dw", tag);
    gradcheck(nm, conv_loss, &c, c.w, nw, dw);
    if (bias) {
        snprintf(nm, sizeof nm, "%s db", tag);
        gradcheck(nm, conv_loss, &c, c.b, d.OC, db);
    }
    float *gx = frandn(nx), *gw = frandn(nw), *gb = frandn(d.OC);
    float *ax = fcopy(gx, nx), *aw = fcopy(gw, nw), *ab = fcopy(gb, d.OC);
    dt_conv2d_backward(ax, aw, bias ? ab : NULL, scratch, R, x, w, &d);
    check_adds("conv2d dinp", ax, gx, dx, nx);
    check_adds("conv2d dw", aw, gw, dw, nw);
    if (bias) check_adds("conv2d db", ab, gb, db, d.OC);
    float *nw2 = fnew(nw), *nb2 = fnew(d.OC);
    dt_conv2d_backward(NULL, nw2, bias ? nb2 : NULL, scratch, R, x, w, &d);
    test_close("nulldinp conv2d dw", nw2, dw, nw, 1e-6, 1e-6);
    if (bias) test_close("nulldinp conv2d db", nb2, db, d.OC, 1e-6, 1e-6);

    free(x); free(w); free(b); free(R); free(y); free(scratch); free(yr); free(dx); free(dw);
    free(db); free(gx); free(gw); free(gb); free(ax); free(aw); free(ab); free(nw2); free(nb2);
    free(c.x); free(c.w); free(c.b); free(c.R); free(c.y);
}

/* A batch spanning several GEMM chunks (plus a remainder) must give what one
 * sample at a time gives; the B = 1 path is the one gradchecked above. */
static void test_conv2d_chunks(dt_conv2d_dims d) {
    char tag[96], nm[160];
    snprintf(tag, sizeof tag, "conv2d chunks B%d IC%d %dx%d OC%d k%d s%d p%d", d.B, d.IC, d.H,
             d.W, d.OC, d.KH, d.stride, d.pad);
    const int OH = dt_conv2d_out_h(&d), OW = dt_conv2d_out_w(&d);
    size_t sx = (size_t)d.IC * d.H * d.W, nw = (size_t)d.OC * d.IC * d.KH * d.KW;
    size_t sy = (size_t)d.OC * OH * OW;
    dt_conv2d_dims d1 = d;
    d1.B = 1;
    size_t ns = dt_conv2d_scratch_floats(&d), ns1 = dt_conv2d_scratch_floats(&d1);
    float *x = frandn(sx * d.B), *w = frandn(nw), *b = frandn(d.OC), *R = frandn(sy * d.B);
    float *y = fnan(sy * d.B), *y1 = fnan(sy * d.B), *s = fnan(ns), *s1 = fnan(ns1);
    float *dx = fnew(sx * d.B), *dx1 = fnew(sx * d.B), *dw = fnew(nw), *dw1 = fnew(nw);
    float *db = fnew(d.OC), *db1 = fnew(d.OC);
    dt_conv2d_forward(y, s, x, w, b, &d);
    dt_conv2d_backward(dx, dw, db, s, R, x, w, &d);
    for (int n = 0; n < d.B; n++) {
        dt_conv2d_forward(y1 + n * sy, s1, x + n * sx, w, b, &d1);
        dt_conv2d_backward(dx1 + n * sx, dw1, db1, s1, R + n * sy, x + n * sx, w, &d1);
    }
    snprintf(nm, sizeof nm, "%s out", tag);
    test_close(nm, y, y1, sy * d.B, 1e-5, 1e-5);
    test_close("conv2d chunks dinp", dx, dx1, sx * d.B, 1e-5, 1e-5);
    test_close("conv2d chunks dw", dw, dw1, nw, 1e-3, 1e-4);
    test_close("conv2d chunks db", db, db1, d.OC, 1e-3, 1e-4);
    free(x); free(w); free(b); free(R); free(y); free(y1); free(s); free(s1); free(dx);
    free(dx1); free(dw); free(dw1); free(db); free(db1);
}

/* ---- maxpool -------------------------------------------------------------- */

typedef struct {
    double *x, *R;
    int B, C, H, W;
} mp_ctx;

static double mp_loss(void *p) {
    mp_ctx *c = p;
    double s = 0;
    const int OH = c->H / 2, OW = c->W / 2;
    for (int pl = 0; pl < c->B * c->C; pl++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const double *x = c->x + (size_t)pl * c->H * c->W;
                double m = -INFINITY;
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 2; j++) {
                        double v = x[(2 * oh + i) * c->W + 2 * ow + j];
                        if (v > m) m = v;
                    }
                s += m * c->R[((size_t)pl * OH + oh) * OW + ow];
            }
    return s;
}

static void test_maxpool(int B, int C, int H, int W) {
    char tag[64], nm[128];
    snprintf(tag, sizeof tag, "maxpool B=%d C=%d %dx%d", B, C, H, W);
    size_t nx = (size_t)B * C * H * W, ny = nx / 4;
    float *x = frandn(nx), *R = frandn(ny), *y = fnan(ny), *dx = fnew(nx);
    int32_t *am = calloc(ny, sizeof(int32_t));
    dt_maxpool2x2_forward(y, am, x, B, C, H, W);
    mp_ctx c = {dcopy(x, nx), dcopy(R, ny), B, C, H, W};
    int fwd_ok = 1;
    for (size_t i = 0; i < ny; i++) {
        size_t pl = i / (ny / (B * C));
        if (y[i] != x[pl * H * W + am[i]]) fwd_ok = 0;
    }
    snprintf(nm, sizeof nm, "fwd %s: out == inp[argmax]", tag);
    test_cond(nm, fwd_ok);
    dt_maxpool2x2_backward(dx, R, am, B, C, H, W);
    snprintf(nm, sizeof nm, "%s dinp", tag);
    gradcheck(nm, mp_loss, &c, c.x, nx, dx);
    float *g0 = frandn(nx), *a = fcopy(g0, nx);
    dt_maxpool2x2_backward(a, R, am, B, C, H, W);
    check_adds(nm, a, g0, dx, nx);
    dt_maxpool2x2_backward(NULL, R, am, B, C, H, W);
    free(x); free(R); free(y); free(dx); free(am); free(c.x); free(c.R); free(g0); free(a);
}

static void test_maxpool_ties(void) {
    /* One 2x4 plane: window 0 all equal, window 1 tie between the last two. */
    const float x[8] = {1, 1, 0, 0, 1, 1, 3, 3};
    float y[2], dx[8] = {0}, g[2] = {1, 2};
    int32_t am[2];
    dt_maxpool2x2_forward(y, am, x, 1, 1, 2, 4);
    test_cond("maxpool tie -> first in row-major order", am[0] == 0 && am[1] == 6);
    dt_maxpool2x2_backward(dx, g, am, 1, 1, 2, 4);
    test_cond("maxpool tie gradient goes to the first", dx[0] == 1 && dx[6] == 2 && dx[7] == 0);
}

int main(void) {
    test_linear(1, 5, 3, 1);
    test_linear(7, 13, 9, 1);
    test_linear(4, 17, 6, 0);
    test_act(0, 1, 1.0);
    test_act(0, 37, 1.0);
    test_act(1, 1, 1.0);
    test_act(1, 53, 4.0);
    test_act(1, 200, 12.0); /* saturated tails */
    test_layernorm(1, 5);
    test_layernorm(4, 19);
    test_embedding(1, 3, 2);
    test_embedding(9, 7, 5);
    test_attention(2, 5, 12, 3);
    test_attention(1, 1, 6, 2);
    test_attention(1, 7, 6, 1);
    test_crossentropy(1, 1, 1.0f);
    test_crossentropy(5, 11, 3.0f);
    test_crossentropy(3, 7, 1000.0f); /* stability: huge logits stay finite */
    test_conv2d((dt_conv2d_dims){2, 3, 7, 6, 4, 3, 3, 1, 1}, 1);
    test_conv2d((dt_conv2d_dims){1, 2, 7, 7, 3, 3, 3, 2, 0}, 1);
    test_conv2d((dt_conv2d_dims){2, 2, 6, 5, 3, 5, 5, 1, 2}, 0);
    test_conv2d((dt_conv2d_dims){1, 1, 8, 9, 5, 3, 2, 2, 2}, 1);
    test_conv2d((dt_conv2d_dims){3, 2, 5, 5, 2, 1, 1, 1, 0}, 1);
    test_conv2d_chunks((dt_conv2d_dims){45, 2, 10, 10, 3, 3, 3, 1, 1});
    test_conv2d_chunks((dt_conv2d_dims){13, 3, 9, 11, 4, 3, 3, 2, 1});
    test_conv2d_chunks((dt_conv2d_dims){2, 1, 46, 46, 2, 3, 3, 1, 1});
    test_maxpool(2, 3, 4, 6);
    test_maxpool(1, 1, 2, 2);
    test_maxpool_ties();
    printf("largest |analytic - numeric| gradient difference: %.3g\n", g_worst_grad);
    return test_report();
}
