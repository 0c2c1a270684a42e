/* bench_train: training-step throughput of the three reference workloads on
 * one process and one BLAS thread, through the public API only.
 *
 *   W1  mlp 784-1024-1024-10 ReLU, batch 128, SGD momentum 0.9     samples/s
 *   W2  gpt defaults (4x4x256, T 128, V 256), batch 16, AdamW      tokens/s
 *   W3  cnn (conv5x5 32, pool, conv5x5 64, pool, fc 1024, fc 10),
 *       batch 64, SGD momentum 0.9                                  samples/s
 *
 * A step is what dtrain's training loop does: forward, backward, one
 * dt_optim_update per parameter tensor (weight decay only on p->decay
 * tensors) and zeroing that tensor's gradient. Data are synthetic and fixed
 * (pixels uniform in [0,1], uniform labels/tokens): loading is not measured.
 *
 * The sgemm peak (1024^3, one thread, best of several) is measured in the same
 * process, through dtrain's own dt_sgemm (the library it trains with) and
 * through OpenBLAS's cblas_sgemm, and "% of peak" divides by the larger, so it
 * compares like with like on a shared, noisy machine. DTRAIN_SGEMM chooses
 * dt_sgemm's library as for `dtrain train`. GFLOP/s counts only GEMM-shaped work: m->flops_per_sample
 * (see docs/BENCHMARKS.md for what that includes).
 *
 * Machine-readable lines start with "RESULT"; --profile adds per-block
 * forward/backward and optimizer times ("PROFILE" lines).
 *
 *   bench_train [--only W1,W2,W3,peak,gemm] [--seconds S] [--warmup N] [--profile] [--precision fp32|bf16|bf16-emulated]
 *
 * --precision bf16 runs the workloads as `dtrain train --precision bf16` does
 * (its RESULT lines say precision=bf16); % of peak stays relative to fp32 sgemm.
 */
#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "dtrain/nn.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct workload {
    const char *id;       /* "W1" */
    dt_model_kind kind;
    int B;
    dt_optim_kind optim;
    const char *what;
} workload;

static const workload WORKLOADS[] = {
    {"W1", DT_MODEL_MLP, 128, DT_OPTIM_SGD, "mlp 784-1024-1024-10, batch 128, SGD momentum 0.9"},
    {"W2", DT_MODEL_GPT, 16, DT_OPTIM_ADAMW, "gpt 4L 4H 256C T128 V256, batch 16x128, AdamW"},
    {"W3", DT_MODEL_CNN, 64, DT_OPTIM_SGD, "cnn conv32-conv64-fc1024-fc10, batch 64, SGD momentum 0.9"},
};
#define N_WORKLOADS ((int)(sizeof WORKLOADS / sizeof WORKLOADS[0]))

typedef struct options {
    bool run[N_WORKLOADS];
    bool peak;
    bool gemm; /* the training shapes on each library (not in the default run) */
    double seconds;   /* timed seconds per workload (steps are chosen to fit) */
    int warmup;
    bool profile;
    int precision;    /* dt_precision */
} options;

/* ---- sgemm peak ------------------------------------------------------------ */

/* Best GFLOP/s of `reps` 1024^3 sgemms (C = A B, row-major, no transposes),
 * through dt_sgemm or, with `openblas`, cblas_sgemm. */
static double sgemm_peak(int reps, bool openblas) {
    const int n = 1024;
    size_t nn = (size_t)n * n;
    float *a = dt_alloc_floats(nn), *b = dt_alloc_floats(nn), *c = dt_alloc_floats(nn);
    DT_ASSERT(a && b && c);
    dt_rng r;
    dt_rng_init(&r, 7, 0);
    for (size_t i = 0; i < nn; i++) {
        a[i] = dt_rng_uniform(&r) - 0.5f;
        b[i] = dt_rng_uniform(&r) - 0.5f;
    }
    double best = 1e30;
    for (int i = 0; i < reps + 1; i++) { /* the first is a warm-up */
        double t0 = dt_now();
        if (openblas)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        else
            dt_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = dt_now() - t0;
        if (i > 0 && t < best) best = t;
    }
    dt_free(a);
    dt_free(b);
    dt_free(c);
    return 2.0 * n * n * (double)n / best / 1e9;
}

/* ---- the training shapes, library by library (--only gemm) -------------------- */

typedef struct gshape {
    const char *name;
    int M, N, K;
    bool ta, tb;
} gshape;

static const gshape GSHAPES[] = {
    {"square 1024", 1024, 1024, 1024, false, false},  {"W1 fc1 forward", 128, 1024, 784, false, true},
    {"W1 fc2 forward", 128, 1024, 1024, false, true}, {"W1 input grad", 128, 1024, 1024, false, false},
    {"W1 weight grad", 1024, 784, 128, true, false},  {"W1 output layer", 128, 10, 1024, false, true},
    {"W2 qkv", 2048, 768, 256, false, true},          {"W2 mlp down", 2048, 256, 1024, false, true},
    {"W2 weight grad", 256, 768, 2048, true, false},  {"W2 input grad", 2048, 256, 768, false, false},
    {"attention", 128, 128, 64, false, true},
};

/* GFLOP/s of one shape through dt_sgemm on its current library: the best of 5
 * rounds of ~0.2 s. */
static double shape_gflops(const gshape *g) {
    size_t na = (size_t)g->M * g->K, nb = (size_t)g->K * g->N, nc = (size_t)g->M * g->N;
    float *a = dt_alloc_floats(na), *b = dt_alloc_floats(nb), *c = dt_alloc_floats(nc);
    DT_ASSERT(a && b && c);
    for (size_t i = 0; i < na; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < nb; i++) b[i] = (float)(i % 5) * 0.1f;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        int it = 0;
        double t0 = dt_now(), t;
        do {
            dt_sgemm(g->ta, g->tb, g->M, g->N, g->K, 1.0f, a, g->ta ? g->M : g->K, b, g->tb ? g->K : g->N, 0.0f, c,
                     g->N);
            it++;
        } while ((t = dt_now() - t0) < 0.2);
        double gf = 2.0 * g->M * g->N * (double)g->K * it / t / 1e9;
        if (gf > best) best = gf;
    }
    dt_free(a);
    dt_free(b);
    dt_free(c);
    return best;
}

/* Each shape on OpenBLAS (whose kernels OPENBLAS_CORETYPE chooses) and on
 * oneDNN where the build has it, one thread. */
static void gemm_shapes(void) {
    bool onednn = dt_sgemm_use("onednn") == DT_OK;
    printf("GEMM shapes, 1 thread, GFLOP/s (best of 5 x 0.2 s); OpenBLAS: %s\n", openblas_get_config());
    for (size_t i = 0; i < sizeof GSHAPES / sizeof GSHAPES[0]; i++) {
        const gshape *g = &GSHAPES[i];
        dt_sgemm_use("openblas");
        double ob = shape_gflops(g), dn = -1;
        if (onednn && dt_sgemm_use("onednn") == DT_OK) dn = shape_gflops(g);
        printf("  %-16s %4d x %4d, K %4d, %c%c: openblas %6.1f  onednn %6.1f\n", g->name, g->M, g->N, g->K,
               g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', ob, dn);
        printf("RESULT gemm shape=\"%s\" M=%d N=%d K=%d op=%c%c openblas=%.2f onednn=%.2f\n", g->name, g->M, g->N,
               g->K, g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', ob, dn);
    }
    dt_sgemm_use(getenv("DTRAIN_SGEMM"));
    fflush(stdout);
}

/* ---- one workload ------------------------------------------------------------ */

typedef struct run_state {
    dt_model *m;
    dt_acts *acts;
    dt_optim *opt;
    dt_batch batch;
    float *x;
    int32_t *tokens, *targets;
    float lr;
} run_state;

static void run_state_free(run_state *s) {
    dt_free(s->x);
    dt_free(s->tokens);
    dt_free(s->targets);
    dt_optim_destroy(s->opt);
    dt_acts_destroy(s->acts);
    dt_model_destroy(s->m);
}

static dt_status run_state_init(run_state *s, const workload *w, int precision) {
    memset(s, 0, sizeof *s);
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, w->kind);
    mc.precision = precision;
    dt_status st = dt_model_create(&s->m, &mc);
    if (st) return st;
    dt_model_init(s->m, 1);
    if ((st = dt_acts_create(&s->acts, s->m, 0, s->m->n_blocks - 1, w->B))) return st;

    dt_optim_cfg oc;
    dt_optim_cfg_default(&oc, w->optim);
    if (w->optim == DT_OPTIM_SGD) {
        oc.momentum = 0.9f;
        s->lr = 0.01f;
    } else {
        oc.weight_decay = 0.1f; /* dtrain's (and nanoGPT's) gpt defaults */
        oc.beta2 = 0.99f;
        s->lr = 1e-3f;
    }
    if ((st = dt_optim_create(&s->opt, &oc, s->m->n))) return st;

    /* Synthetic, fixed batch. */
    dt_rng r;
    dt_rng_init(&r, 42, 1);
    int B = w->B;
    dt_batch *b = &s->batch;
    b->B = B;
    if (w->kind == DT_MODEL_GPT) {
        int T = mc.block_size, V = mc.vocab_size;
        size_t n = (size_t)B * T;
        s->tokens = dt_calloc(n, sizeof(int32_t));
        s->targets = dt_calloc(n, sizeof(int32_t));
        if (!s->tokens || !s->targets) return dt_errorf(DT_ERR_NOMEM, "batch buffers");
        for (size_t i = 0; i < n; i++) {
            s->tokens[i] = (int32_t)dt_rng_below(&r, (uint64_t)V);
            s->targets[i] = (int32_t)dt_rng_below(&r, (uint64_t)V);
        }
        b->tokens = s->tokens;
    } else {
        size_t n = (size_t)B * mc.in_dim;
        s->x = dt_alloc_floats(n);
        s->targets = dt_calloc((size_t)B, sizeof(int32_t));
        if (!s->x || !s->targets) return dt_errorf(DT_ERR_NOMEM, "batch buffers");
        for (size_t i = 0; i < n; i++) s->x[i] = dt_rng_uniform(&r);
        for (int i = 0; i < B; i++) s->targets[i] = (int32_t)dt_rng_below(&r, (uint64_t)mc.n_classes);
        b->x = s->x;
    }
    b->targets = s->targets;
    b->loss_scale = 1.0f / ((float)B * (float)s->m->loss_terms);
    return DT_OK;
}

/* The optimizer half of a step, exactly as src/train/train.c does it. */
static void optim_step(run_state *s) {
    dt_model *m = s->m;
    float wd = s->opt->cfg.weight_decay;
    dt_optim_begin_step(s->opt);
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        dt_optim_update_zero(s->opt, m->w + p->offset, m->g + p->offset, p->offset, p->numel, s->lr,
                             p->decay ? wd : 0.0f);
    }
}

static float train_step(run_state *s) {
    float loss = dt_model_forward(s->m, s->acts, &s->batch, NULL);
    dt_model_backward(s->m, s->acts, &s->batch, NULL, NULL, NULL, NULL);
    optim_step(s);
    return loss;
}

/* ---- profile: per-block times ------------------------------------------------ */

typedef struct prof {
    int nb;
    double *fwd, *bwd; /* seconds summed over steps, per block */
    double t_last, opt;
} prof;

static void prof_block_done(void *ctx, int block) {
    prof *p = ctx;
    double now = dt_now();
    p->bwd[block] += now - p->t_last;
    p->t_last = now;
}

/* One step with timestamps around every block; the forward loop is
 * dt_model_forward's, unrolled here so each block can be timed. */
static void profiled_step(run_state *s, prof *p) {
    dt_model *m = s->m;
    dt_acts *a = s->acts;
    for (int i = 0; i < m->n_blocks; i++) {
        const dt_block *blk = &m->blocks[i];
        double t0 = dt_now();
        blk->ops->forward(blk, m->w, &s->batch, i == 0 ? NULL : a->bound[i], a->bound[i + 1],
                          a->saved[i], a->scratch);
        p->fwd[i] += dt_now() - t0;
    }
    p->t_last = dt_now();
    dt_model_backward(m, a, &s->batch, NULL, NULL, prof_block_done, p);
    double t0 = dt_now();
    optim_step(s);
    p->opt += dt_now() - t0;
}

static void profile_workload(run_state *s, const workload *w, int steps) {
    dt_model *m = s->m;
    prof p = {.nb = m->n_blocks};
    p.fwd = dt_calloc((size_t)m->n_blocks, sizeof(double));
    p.bwd = dt_calloc((size_t)m->n_blocks, sizeof(double));
    DT_ASSERT(p.fwd && p.bwd);
    double t0 = dt_now();
    for (int i = 0; i < steps; i++) profiled_step(s, &p);
    double total = (dt_now() - t0) / steps;
    printf("  profile of %s over %d steps: %.2f ms/step\n", w->id, steps, 1e3 * total);
    printf("  %-28s %10s %10s %7s\n", "block", "fwd ms", "bwd ms", "share");
    for (int i = 0; i < m->n_blocks; i++) {
        double f = p.fwd[i] / steps, b = p.bwd[i] / steps;
        printf("  %-28s %10.3f %10.3f %6.1f%%\n", m->blocks[i].name, 1e3 * f, 1e3 * b,
               100.0 * (f + b) / total);
        printf("PROFILE %s block=%s kind=%s fwd_ms=%.4f bwd_ms=%.4f share=%.4f\n", w->id,
               m->blocks[i].name, m->blocks[i].ops->kind, 1e3 * f, 1e3 * b, (f + b) / total);
    }
    double o = p.opt / steps;
    printf("  %-28s %10.3f %10s %6.1f%%\n", "optimizer+zero_grad", 1e3 * o, "", 100.0 * o / total);
    printf("PROFILE %s block=optimizer fwd_ms=%.4f bwd_ms=0 share=%.4f\n", w->id, 1e3 * o, o / total);
    dt_free(p.fwd);
    dt_free(p.bwd);
}

static int run_workload(const workload *w, const options *o, double peak) {
    run_state s;
    dt_status st = run_state_init(&s, w, o->precision);
    if (st) {
        fprintf(stderr, "bench_train: %s: %s: %s\n", w->id, dt_status_str(st), dt_error_msg());
        run_state_free(&s);
        return 1;
    }
    int T = w->kind == DT_MODEL_GPT ? s.m->cfg.block_size : 1;
    const char *unit = w->kind == DT_MODEL_GPT ? "tokens" : "samples";

    /* Warm-up, which also sizes the timed run. */
    double t0 = dt_now();
    float loss0 = 0;
    for (int i = 0; i < o->warmup; i++) {
        float l = train_step(&s);
        if (i == 0) loss0 = l;
    }
    double per = (dt_now() - t0) / (o->warmup > 0 ? o->warmup : 1);
    int steps = (int)(o->seconds / (per > 1e-6 ? per : 1e-6));
    if (steps < 5) steps = 5;
    if (steps > 100000) steps = 100000;

    t0 = dt_now();
    float loss = 0;
    for (int i = 0; i < steps; i++) loss = train_step(&s);
    double secs = dt_now() - t0;

    double step_s = secs / steps;
    double items = (double)w->B * T / step_s;
    double gflops = (double)s.m->flops_per_sample * w->B / step_s / 1e9;
    double pct = peak > 0 ? 100.0 * gflops / peak : 0;
    printf("%s  %s\n", w->id, w->what);
    printf("  %zu parameters, %.3f GFLOP per step (GEMM FLOPs), loss %.4f -> %.4f\n", s.m->n,
           (double)s.m->flops_per_sample * w->B / 1e9, (double)loss0, (double)loss);
    printf("  %d steps in %.2f s: %.2f ms/step, %.0f %s/s, %.1f GFLOP/s = %.1f%% of sgemm peak\n",
           steps, secs, 1e3 * step_s, items, unit, gflops, pct);
    printf("RESULT %s dtrain %s_per_s=%.1f ms_per_step=%.4f gflops=%.2f pct_peak=%.2f peak_gflops=%.2f steps=%d "
           "precision=%s\n", w->id, unit, items, 1e3 * step_s, gflops, pct, peak, steps,
           o->precision == DT_PRECISION_BF16 ? "bf16" : o->precision ? "bf16-emulated" : "fp32");
    if (o->profile) profile_workload(&s, w, steps / 2 > 3 ? steps / 2 : 3);
    fflush(stdout);
    run_state_free(&s);
    return 0;
}

/* ---- main ----------------------------------------------------------------------- */

static int parse_only(const char *s, options *o) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        bool found = false;
        for (int i = 0; i < N_WORKLOADS; i++)
            if (strcmp(tok, WORKLOADS[i].id) == 0) o->run[i] = found = true;
        if (strcmp(tok, "peak") == 0) o->peak = found = true;
        if (strcmp(tok, "gemm") == 0) o->gemm = found = true;
        if (!found) {
            fprintf(stderr, "bench_train: --only takes W1,W2,W3,peak,gemm; got '%s'\n", tok);
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    options o = {.seconds = 3.0, .warmup = 5};
    bool any = false;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--only") == 0 && i + 1 < argc) {
            if (parse_only(argv[++i], &o)) return 2;
            any = true;
        } else if (strcmp(f, "--seconds") == 0 && i + 1 < argc) {
            o.seconds = atof(argv[++i]);
        } else if (strcmp(f, "--warmup") == 0 && i + 1 < argc) {
            o.warmup = atoi(argv[++i]);
        } else if (strcmp(f, "--profile") == 0) {
            o.profile = true;
        } else if (strcmp(f, "--precision") == 0 && i + 1 < argc) {
            const char *p = argv[++i];
            if (strcmp(p, "fp32") && strcmp(p, "bf16") && strcmp(p, "bf16-emulated")) {
                fprintf(stderr, "bench_train: --precision takes fp32, bf16 or bf16-emulated; got '%s'\n", p);
                return 2;
            }
            o.precision = strcmp(p, "bf16") == 0 ? DT_PRECISION_BF16
                          : strcmp(p, "fp32") ? DT_PRECISION_BF16_EMULATED : DT_PRECISION_FP32;
        } else {
            fprintf(stderr, "usage: bench_train [--only W1,W2,W3,peak,gemm] [--seconds S] [--warmup N] [--profile] "
                            "[--precision fp32|bf16|bf16-emulated]\n");
            return strcmp(f, "--help") == 0 ? 0 : 2;
        }
    }
    if (!any) {
        for (int i = 0; i < N_WORKLOADS; i++) o.run[i] = true;
        o.peak = true;
    }
    if (!(o.seconds > 0) || o.warmup < 1) {
        fprintf(stderr, "bench_train: --seconds must be > 0 and --warmup >= 1\n");
        return 2;
    }

    openblas_set_num_threads(1);
    if (dt_sgemm_use(getenv("DTRAIN_SGEMM"))) {
        fprintf(stderr, "bench_train: %s\n", dt_error_msg());
        return 2;
    }
    /* Measured every run: % of peak is relative to this process's own sgemm. */
    double own = sgemm_peak(40, false), blas = sgemm_peak(40, true), peak = own > blas ? own : blas;
    printf("sgemm 1024^3, 1 thread: dt_sgemm (%s) %.1f GFLOP/s, OpenBLAS (%s) %.1f GFLOP/s (best of 40)\n",
           dt_sgemm_library(), own, openblas_get_config(), blas);
    printf("RESULT peak dtrain sgemm_gflops=%.2f dt_sgemm_gflops=%.2f openblas_gflops=%.2f library=%s\n", peak, own,
           blas, dt_sgemm_library());
    fflush(stdout);
    if (o.gemm) gemm_shapes();

    int rc = 0;
    for (int i = 0; i < N_WORKLOADS; i++)
        if (o.run[i]) rc |= run_workload(&WORKLOADS[i], &o, peak);
    return rc;
}
