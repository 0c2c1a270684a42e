/* Finite-difference gradient check of whole models (mlp, cnn, gpt).
 *
 * For a sample of parameter coordinates, the analytic gradient g from
 * dt_model_backward is compared with a central difference of the loss,
 *   fd(h) = (L(w + h) - L(w - h)) / (step the float parameter actually took),
 * the loss summed in double from the per-term losses the forward leaves in the
 * last boundary, so only the float32 rounding inside the network is noise.
 *
 * Coordinates: in every tensor the two with the largest |g| (where a scaling
 * bug shows most) and one at random, so tied (wte), shared and last-block
 * tensors are all covered; plus 40 at random over the whole arena.
 *
 * Criterion: |fd - g| <= atol + rtol * |g|, rtol 1e-2, atol and h per model
 * (main). Noise in fd is about (float32 rounding of the loss, ~1e-7 relative,
 * a few ulp deep) / 2h, and truncation h^2/6 f'''; h is as large as the model
 * allows and atol sits at 2-10x the largest deviation seen. ReLU and max-pool
 * kinks break the smooth picture: when fd(h) and fd(h/2) disagree by more than
 * the criterion allows, a kink lies inside the step and the quotient means
 * nothing, so the coordinate is skipped (at most 10% may be). A bug changes g,
 * never fd, so skipping cannot hide one.
 *
 * The check must be able to fail: every model also runs the same criterion on
 * the analytic gradient scaled by 1.05 and requires that to be rejected (a 3%
 * scaling of the first tensor's gradient was also seen to fail every model). */
#include "dtrain/model.h"
#include "testhelp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_RANDOM 40
#define RTOL 1e-2
#define MAX_COORDS 512

/* Loss in double from the per-term losses (the last boundary holds them). */
static double loss_of(dt_model *m, dt_acts *a, const dt_batch *b) {
    dt_model_forward(m, a, b, NULL);
    const float *losses = a->bound[a->last - a->first + 1];
    size_t n = (size_t)b->B * m->blocks[a->last].out_dim;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += losses[i];
    return s * b->loss_scale;
}

/* Parameters that carry signal everywhere: LayerNorm gains around 1 and biases
 * away from 0, so every path through the model contributes to the gradient. */
static void fill_params(dt_model *m, uint64_t seed) {
    dt_model_init(m, seed);
    dt_rng r;
    dt_rng_init(&r, seed, 77);
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        float *w = m->w + p->offset;
        float s = p->init == DT_INIT_CONST ? 0.2f : p->init == DT_INIT_NORMAL ? 0.15f : 0.0f;
        for (size_t j = 0; j < p->numel; j++) w[j] += s * dt_rng_normal(&r);
    }
}

/* Central difference of the loss in parameter *w, over the step the float
 * parameter actually takes; *w is restored. */
static double central(dt_model *m, dt_acts *a, const dt_batch *b, float *w, double h) {
    float w0 = *w, wp = (float)(w0 + h), wm = (float)(w0 - h);
    *w = wp;
    double lp = loss_of(m, a, b);
    *w = wm;
    double lm = loss_of(m, a, b);
    *w = w0;
    return (lp - lm) / ((double)wp - (double)wm);
}

typedef struct coord {
    size_t at;   /* arena index */
    int param;
} coord;

static int pick_coords(const dt_model *m, dt_rng *r, coord *c) {
    int n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        const float *g = m->g + p->offset;
        size_t best[2] = {0, 0};
        for (size_t j = 0; j < p->numel; j++) {
            if (fabsf(g[j]) > fabsf(g[best[0]])) {
                best[1] = best[0];
                best[0] = j;
            } else if (j != best[0] && fabsf(g[j]) > fabsf(g[best[1]])) {
                best[1] = j;
            }
        }
        c[n++] = (coord){p->offset + best[0], i};
        if (p->numel > 1) c[n++] = (coord){p->offset + best[1], i};
        c[n++] = (coord){p->offset + dt_rng_below(r, p->numel), i};
    }
    size_t total = 0;
    for (int i = 0; i < m->n_params; i++) total += m->params[i].numel;
    for (int k = 0; k < N_RANDOM; k++) {
        size_t j = dt_rng_below(r, total);
        int i = 0;
        while (j >= m->params[i].numel) j -= m->params[i++].numel;
        c[n++] = (coord){m->params[i].offset + j, i};
    }
    DT_ASSERT(n <= MAX_COORDS);
    return n;
}

static void gradcheck(const char *tag, const dt_model_cfg *cfg, int B, double h, double atol,
                      uint64_t seed) {
    dt_model *m = NULL;
    dt_acts *a = NULL;
    float *x = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    coord *c = NULL;
    float *an = NULL, *fd = NULL;
    dt_status st = dt_model_create(&m, cfg);
    test_cond("dt_model_create", st == DT_OK);
    if (st) goto done;
    st = dt_acts_create(&a, m, 0, m->n_blocks - 1, B);
    test_cond("dt_acts_create", st == DT_OK);
    if (st) goto done;
    fill_params(m, seed);

    dt_rng r;
    dt_rng_init(&r, seed, 5);
    dt_batch b = {0};
    b.B = B;
    b.loss_scale = 1.0f / (float)(B * m->loss_terms);
    size_t nt = (size_t)B * m->loss_terms;
    tgt = calloc(nt, sizeof *tgt);
    if (cfg->kind == DT_MODEL_GPT) {
        tok = calloc(nt, sizeof *tok);
        for (size_t i = 0; i < nt; i++) {
            tok[i] = (int32_t)dt_rng_below(&r, 32); /* repeats: embedding rows accumulate */
            tgt[i] = (int32_t)dt_rng_below(&r, 32);
        }
        b.tokens = tok;
    } else {
        size_t in = m->blocks[0].in_dim * (size_t)B;
        x = calloc(in, sizeof *x);
        for (size_t i = 0; i < in; i++) x[i] = dt_rng_uniform(&r);
        for (size_t i = 0; i < nt; i++) tgt[i] = (int32_t)dt_rng_below(&r, (uint64_t)cfg->n_classes);
        b.x = x;
    }
    b.targets = tgt;
    c = calloc(MAX_COORDS, sizeof *c);
    an = calloc(MAX_COORDS, sizeof *an);
    fd = calloc(MAX_COORDS, sizeof *fd);
    if (!tgt || !c || !an || !fd || (cfg->kind == DT_MODEL_GPT ? !tok : !x)) {
        test_cond("allocation", 0);
        goto done;
    }

    dt_model_zero_grad(m);
    loss_of(m, a, &b);
    dt_model_backward(m, a, &b, NULL, NULL, NULL, NULL);
    int n = pick_coords(m, &r, c), kept = 0, skipped = 0;
    for (int k = 0; k < n; k++) {
        float *w = m->w + c[k].at;
        double g = m->g[c[k].at], tol = atol + RTOL * fabs(g);
        double d = central(m, a, &b, w, h), d2 = central(m, a, &b, w, h / 2);
        if (fabs(d - d2) > tol) { /* a kink inside the step: the quotient is meaningless */
            skipped++;
            continue;
        }
        an[kept] = (float)g;
        fd[kept] = (float)d;
        kept++;
    }
    char what[96];
    snprintf(what, sizeof what, "%s: %d coords vs finite differences (%d at kinks)", tag, kept,
             skipped);
    /* test_close's tolerance is relative to its second argument: the analytic one. */
    test_close(what, fd, an, (size_t)kept, atol, RTOL);
    test_cond("at most 10% of the coordinates sit on kinks", skipped * 10 <= n);

    /* The same criterion must reject a gradient that is 5% off. */
    int caught = 0;
    for (int k = 0; k < kept; k++)
        caught |= fabs(fd[k] - 1.05 * an[k]) > atol + RTOL * fabs(1.05 * an[k]);
    printf("%s %s: a 5%% gradient error %s caught\n", caught ? "ok  " : "FAIL", tag,
           caught ? "is" : "would NOT be");
    test_cond("the check rejects a 5% gradient error", caught);
done:
    free(x);
    free(tok);
    free(tgt);
    free(c);
    free(an);
    free(fd);
    dt_acts_destroy(a);
    dt_model_destroy(m);
}

int main(void) {
    dt_model_cfg cfg;
    dt_model_cfg_default(&cfg, DT_MODEL_MLP);
    cfg.in_dim = 12;
    cfg.n_hidden = 2;
    cfg.hidden[0] = 10;
    cfg.hidden[1] = 8;
    cfg.n_classes = 5;
    /* smooth between rare kinks: fd deviates <= 6e-6 at h = 1e-2 */
    gradcheck("mlp", &cfg, 3, 1e-2, 5e-5, 1);

    /* thousands of ReLU/max-pool units: every conv bias or weight step of
     * 1e-2 crosses kinks, so a smaller step and a noisier fd (<= 4e-4 seen) */
    dt_model_cfg_default(&cfg, DT_MODEL_CNN);
    gradcheck("cnn", &cfg, 2, 3e-3, 3e-4, 2);

    dt_model_cfg_default(&cfg, DT_MODEL_GPT);
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    cfg.block_size = 8;
    /* smooth everywhere: fd deviates <= 3e-5 at h = 1e-2 */
    gradcheck("gpt", &cfg, 2, 1e-2, 1e-4, 3);
    return test_report();
}
