/* The compressed gradient collectives (src/parallel/gradcomp.c) on 1..4 ranks
 * (ctest runs it alone and under mpiexec): every rank ends with the same bits;
 * lossless settings give the exact sum; fp16 is within its rounding; the
 * reduce-scatter's chunk equals the all-reduce's; error feedback's books
 * balance across the collective; PowerSGD recovers a low-rank sum exactly;
 * a malformed encoding is refused in one line. */
#include "dtrain/gradcomp.h"

#include "testhelp.h"

#include <stdlib.h>
#include <string.h>

static dt_comm *W;
static int P, R;

/* max over ranks of x (0 when every rank has 0) */
static double max_all(double x) {
    double *v = dt_calloc((size_t)P, sizeof(double));
    v[R] = x;
    dt_allreduce_f64(W, v, (size_t)P);
    double m = 0;
    for (int i = 0; i < P; i++) m = v[i] > m ? v[i] : m;
    dt_free(v);
    return m;
}

/* 1 when every rank holds the same n floats at x (compared bytewise to rank 0's). */
static int same_everywhere(const float *x, size_t n) {
    float *all = dt_alloc_floats(n * (size_t)P);
    memset(all, 0, n * (size_t)P * sizeof(float));
    memcpy(all + (size_t)R * n, x, n * sizeof(float));
    dt_allgather(W, all, n * (size_t)P, DT_ALGO_RING);
    int ok = 1;
    for (int r = 1; r < P; r++) ok &= memcmp(all, all + (size_t)r * n, n * sizeof(float)) == 0;
    dt_free(all);
    return ok;
}

static const dt_model *M;

/* This rank's gradient: deterministic, different per rank, heavy-tailed; zero
 * in the arena's alignment padding, as every real gradient is. */
static void fill(float *g, size_t n, int rank, uint64_t seed) {
    dt_rng r;
    dt_rng_init(&r, seed, (uint64_t)rank);
    memset(g, 0, n * sizeof(float));
    for (int k = 0; k < M->n_params; k++)
        for (size_t i = M->params[k].offset; i < M->params[k].offset + M->params[k].numel; i++) {
            float z = dt_rng_normal(&r);
            g[i] = 1e-3f * z * (i % 97 == 0 ? 30.0f : 1.0f);
        }
}

/* The exact sum over ranks of fill(), in rank order. */
static void exact_sum(float *s, size_t n, uint64_t seed) {
    float *t = dt_alloc_floats(n);
    memset(s, 0, n * sizeof(float));
    for (int r = 0; r < P; r++) {
        fill(t, n, r, seed);
        for (size_t i = 0; i < n; i++) s[i] += t[i];
    }
    dt_free(t);
}

/* eps >= 0: the result must be within (P + 1) roundings of eps relative to the
 * largest value (each contribution rounded once, each sum once); -1: bits only. */
static void check_codec(dt_model *m, const char *spec, double eps, int ef) {
    dt_gc_cfg cfg = {.error_feedback = ef, .seed = 7};
    dt_comp_parse(spec, &cfg.comp);
    dt_gc *gc = NULL;
    size_t n = m->n;
    test_cond("gc create", dt_gc_create(&gc, &cfg, m, R, P, n) == DT_OK);
    float *g = dt_alloc_floats(n), *want = dt_alloc_floats(n), *g2 = dt_alloc_floats(n);
    char what[128];
    for (int step = 0; step < 3; step++) {
        fill(g, n, R, 100 + (uint64_t)step);
        exact_sum(want, n, 100 + (uint64_t)step);
        dt_status st = dt_gc_allreduce(gc, W, g, 0, n, (uint64_t)step, DT_ALGO_RING);
        test_cond("allreduce ok", st == DT_OK);
        snprintf(what, sizeof what, "%s step %d: same bits on every rank", spec, step);
        test_cond(what, same_everywhere(g, n));
        if (eps >= 0) {
            float big = 0;
            for (size_t i = 0; i < n; i++) big = fabsf(want[i]) > big ? fabsf(want[i]) : big;
            snprintf(what, sizeof what, "%s all-reduce vs exact sum, step %d", spec, step);
            test_close(what, g, want, n, eps * (P + 1) * big * P + 1e-12, 0);
        }
    }
    /* Reduce-scatter: this rank's chunk of the sum. Lossless codecs: exact. */
    if (eps >= 0) {
        fill(g2, n, R, 555);
        exact_sum(want, n, 555);
        test_cond("reduce-scatter ok", dt_gc_reduce_scatter(gc, W, g2, 0, n, 9, DT_ALGO_RING) == DT_OK);
        size_t co = dt_chunk_off(n, P, R), cl = dt_chunk_len(n, P, R);
        snprintf(what, sizeof what, "%s reduce-scatter chunk vs exact sum", spec);
        test_close(what, g2 + co, want + co, cl, eps * (P + 1) * 0.1 * P + 1e-12, 0);
    }
    dt_gc_destroy(gc);
    dt_free(g);
    dt_free(g2);
    dt_free(want);
}

/* Error feedback across the collective: over T steps, what the ranks received
 * (the sums) plus every rank's residual equals the sum of every gradient. */
static void check_ef_books(dt_model *m, const char *spec) {
    dt_gc_cfg cfg = {.error_feedback = 1, .seed = 3};
    dt_comp_parse(spec, &cfg.comp);
    dt_gc *gc = NULL;
    size_t n = m->n;
    dt_gc_create(&gc, &cfg, m, R, P, n);
    float *g = dt_alloc_floats(n), *got = dt_alloc_floats(n), *want = dt_alloc_floats(n), *t = dt_alloc_floats(n);
    memset(got, 0, n * sizeof(float));
    memset(want, 0, n * sizeof(float));
    for (int step = 0; step < 5; step++) {
        fill(g, n, R, 900 + (uint64_t)step);
        exact_sum(t, n, 900 + (uint64_t)step);
        for (size_t i = 0; i < n; i++) want[i] += t[i];
        dt_gc_allreduce(gc, W, g, 0, n, (uint64_t)step, DT_ALGO_RING);
        for (size_t i = 0; i < n; i++) got[i] += g[i];
    }
    /* + the residuals of every rank */
    memcpy(t, dt_gc_error(gc), n * sizeof(float));
    dt_allreduce(W, t, n, DT_OP_SUM, DT_ALGO_RING);
    for (size_t i = 0; i < n; i++) got[i] += t[i];
    char what[96];
    snprintf(what, sizeof what, "%s: received + residuals = sent gradients", spec);
    test_close(what, got, want, n, 2e-6, 1e-4);
    dt_gc_destroy(gc);
    dt_free(g);
    dt_free(got);
    dt_free(want);
    dt_free(t);
}

/* PowerSGD recovers a sum of rank-1 matrices sharing their column space, and
 * sends the vectors exactly. */
static void check_powersgd(dt_model *m) {
    dt_gc_cfg cfg = {.error_feedback = 1, .seed = 5};
    dt_comp_parse("powersgd:1", &cfg.comp);
    dt_gc *gc = NULL;
    size_t n = m->n;
    dt_gc_create(&gc, &cfg, m, R, P, n);
    float *g = dt_alloc_floats(n), *want = dt_alloc_floats(n);
    memset(want, 0, n * sizeof(float));
    for (int r = 0; r < P; r++)
        for (int i = 0; i < m->n_params; i++) {
            const dt_param *p = &m->params[i];
            size_t rows = p->ndim >= 2 ? (size_t)p->shape[0] : 1, cols = p->numel / rows;
            for (size_t a = 0; a < rows; a++)
                for (size_t b = 0; b < cols; b++)
                    want[p->offset + a * cols + b] += (float)(r + 1) * (float)(a % 5 + 1) * 0.01f * (float)(b % 7 + 1) * 0.1f;
        }
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t rows = p->ndim >= 2 ? (size_t)p->shape[0] : 1, cols = p->numel / rows;
        for (size_t a = 0; a < rows; a++)
            for (size_t b = 0; b < cols; b++)
                g[p->offset + a * cols + b] = (float)(R + 1) * (float)(a % 5 + 1) * 0.01f * (float)(b % 7 + 1) * 0.1f;
    }
    test_cond("powersgd allreduce", dt_gc_allreduce(gc, W, g, 0, n, 0, DT_ALGO_RING) == DT_OK);
    test_cond("powersgd: same bits on every rank", same_everywhere(g, n));
    test_close("powersgd rank 1 of a rank-1 sum", g, want, n, 1e-6, 1e-4);
    dt_gc_destroy(gc);
    dt_free(g);
    dt_free(want);
}

int main(void) {
    /* Under tests.cmake's mpiexec (Open MPI) or alone: the self communicator. */
    if (dt_comm_init(getenv("OMPI_COMM_WORLD_SIZE") != NULL, &W)) {
        fprintf(stderr, "test_gradcomp: %s\n", dt_error_msg());
        return 1;
    }
    P = dt_comm_size(W);
    R = dt_comm_rank(W);
    dt_comm_set_timeout(W, 30);
    if (R == 0) printf("test_gradcomp: %d rank(s)\n", P);
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_MLP);
    mc.in_dim = 40;
    mc.n_hidden = 1;
    mc.hidden[0] = 24;
    dt_model *m = NULL;
    if (dt_model_create(&m, &mc)) {
        fprintf(stderr, "test_gradcomp: %s\n", dt_error_msg());
        return 1;
    }
    M = m;
    check_codec(m, "topk:1", 0, 0);               /* everything kept: exact */
    check_codec(m, "fp16", 1.0 / 2048, 0);        /* roundings to 11 bits */
    check_codec(m, "bf16", 1.0 / 256, 0);         /* roundings to 8 bits */
    check_codec(m, "int8", -1, 1);                /* stochastic: bits only */
    check_codec(m, "sign", -1, 1);
    check_codec(m, "topk:0.05", -1, 1);
    check_ef_books(m, "topk:0.05");
    check_ef_books(m, "sign");
    check_ef_books(m, "int8");
    check_powersgd(m);

    /* A malformed encoding is refused, not decoded into garbage. */
    dt_gc_cfg cfg = {.error_feedback = 0};
    dt_comp_parse("topk:0.1", &cfg.comp);
    dt_gc *gc = NULL;
    dt_gc_create(&gc, &cfg, m, 0, 1, m->n);
    uint8_t junk[4] = {0xff, 0xff, 0xff, 0xff};
    float *out = dt_alloc_floats(m->n);
    dt_status st = dt_gc_decode(gc, junk, sizeof junk, out, 0, m->n);
    test_cond("truncated encoding refused", st == DT_ERR_FORMAT);
    if (R == 0) printf("refused: %s\n", dt_error_msg());
    dt_free(out);
    dt_gc_destroy(gc);

    dt_model_destroy(m);
    int rc = test_report();
    double worst = max_all(rc);
    dt_comm_destroy(W);
    dt_comm_finalize();
    return worst != 0 ? 1 : 0;
}
