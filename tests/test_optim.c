/* Optimizers against PyTorch: SGD (plain, momentum, Nesterov + weight decay),
 * AdamW (defaults, strong decay, scheduled lr), the lr schedule and
 * clip_grad_norm_ factors, all from tests/fixtures/optim.safetensors
 * (tools/gen_fixture_optim.py). Also: updating in slices equals one update,
 * and configuration errors name the flag. */
#include "dtrain/optim.h"
#include "dtrain/safetensors.h"
#include "testhelp.h"

#include <string.h>

#define ATOL 1e-6
#define RTOL 1e-5

static dt_st_file *g_fx;

/* Reads fixture tensor `name` (numel must be n) into a new buffer. */
static float *fx(const char *name, size_t n) {
    const dt_st_tensor *t = dt_st_find(g_fx, name);
    if (!t || t->numel != n) {
        fprintf(stderr, "fixture tensor %s missing or wrong size\n", name);
        exit(1);
    }
    float *p = dt_alloc_floats(n);
    if (!p || dt_st_read_f32(g_fx, t, p, n) != DT_OK) {
        fprintf(stderr, "fixture tensor %s: %s\n", name, dt_error_msg());
        exit(1);
    }
    return p;
}

static size_t g_n, g_steps;
static float *g_p0, *g_grads;

/* Runs `steps` steps from p0 with lr[k] (or a constant lr) and compares the
 * parameters after every step with the PyTorch trajectory `ref`. */
static void check_trajectory(const char *ref_name, const dt_optim_cfg *cfg, float lr,
                             const float *lrs) {
    float *ref = fx(ref_name, g_steps * g_n);
    float *w = dt_alloc_floats(g_n);
    memcpy(w, g_p0, g_n * sizeof *w);
    dt_optim *o = NULL;
    test_cond("create", dt_optim_create(&o, cfg, g_n) == DT_OK);
    for (size_t k = 0; k < g_steps; k++) {
        dt_optim_begin_step(o);
        dt_optim_update(o, w, g_grads + k * g_n, 0, g_n, lrs ? lrs[k] : lr, cfg->weight_decay);
        char what[80];
        snprintf(what, sizeof what, "%s step %zu", ref_name, k + 1);
        test_close(what, w, ref + k * g_n, g_n, ATOL, RTOL);
    }
    dt_optim_destroy(o);
    dt_free(w);
    dt_free(ref);
}

static void test_against_pytorch(void) {
    dt_optim_cfg c;
    dt_optim_cfg_default(&c, DT_OPTIM_SGD);
    check_trajectory("sgd_plain", &c, 0.1f, NULL);
    c.momentum = 0.9f;
    check_trajectory("sgd_momentum", &c, 0.05f, NULL);
    c.nesterov = true;
    c.weight_decay = 0.01f;
    check_trajectory("sgd_nesterov_wd", &c, 0.05f, NULL);

    dt_optim_cfg_default(&c, DT_OPTIM_ADAMW);
    test_cond("adamw defaults", c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f &&
                                    c.weight_decay == 0.01f);
    check_trajectory("adamw_default", &c, 1e-3f, NULL);
    c.weight_decay = 0.1f;
    check_trajectory("adamw_wd", &c, 1e-3f, NULL);

    /* AdamW driven by warm-up + cosine: our schedule must give PyTorch's lrs. */
    float *ref_lrs = fx("adamw_sched_lr", g_steps);
    dt_lr_sched s = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 2, .total = 5, .cosine = true};
    float lrs[16];
    for (size_t k = 0; k < g_steps; k++) lrs[k] = dt_lr_at(&s, (int64_t)k);
    test_close("adamw_sched lrs", lrs, ref_lrs, g_steps, 0, 1e-7);
    c.weight_decay = 0.01f;
    check_trajectory("adamw_sched", &c, 0, lrs);
    dt_free(ref_lrs);
}

static void test_schedule(void) {
    const dt_st_tensor *t = dt_st_find(g_fx, "sched_lr");
    size_t n = t ? t->numel : 0;
    float *ref = fx("sched_lr", n);
    float got[64];
    dt_lr_sched s = {.lr = 0.1f, .min_lr = 0.01f, .warmup = 5, .total = 25, .cosine = true};
    for (size_t k = 0; k < n && k < 64; k++) got[k] = dt_lr_at(&s, (int64_t)k);
    test_close("schedule warm-up + cosine (30 steps)", got, ref, n, 1e-9, 1e-6);
    test_cond("first warm-up step is lr/warmup", fabsf(dt_lr_at(&s, 0) - 0.02f) < 1e-8f);
    test_cond("peak after warm-up", dt_lr_at(&s, 5) == 0.1f);
    test_cond("floor at total", fabsf(dt_lr_at(&s, 25) - 0.01f) < 1e-8f);
    test_cond("floor past total", fabsf(dt_lr_at(&s, 1000) - 0.01f) < 1e-8f);
    s.cosine = false;
    test_cond("constant after warm-up", dt_lr_at(&s, 7) == 0.1f && dt_lr_at(&s, 1000) == 0.1f);
    s.warmup = 0;
    test_cond("no warm-up", dt_lr_at(&s, 0) == 0.1f);
    dt_free(ref);
}

static void test_clip(void) {
    float *maxn = fx("clip_max_norm", 3);
    float *norms = fx("clip_norm", g_steps * 3);
    float *factors = fx("clip_factor", g_steps * 3);
    float *clipped = fx("clip_grads", g_steps * 3 * g_n);
    float my_norm[64], my_fac[64];
    float *g = dt_alloc_floats(g_n);
    for (size_t k = 0; k < g_steps; k++) {
        for (size_t j = 0; j < 3; j++) {
            size_t idx = k * 3 + j;
            memcpy(g, g_grads + k * g_n, g_n * sizeof *g);
            /* Sum of squares of two shards, as ZeRO ranks would add them. */
            double ss = dt_sumsq(g, 333) + dt_sumsq(g + 333, g_n - 333);
            double norm = sqrt(ss);
            my_norm[idx] = (float)norm;
            my_fac[idx] = dt_clip_factor(norm, maxn[j]);
            dt_scale(g, g_n, my_fac[idx]);
            char what[64];
            snprintf(what, sizeof what, "clipped grads %zu (max_norm %g)", k, (double)maxn[j]);
            test_close(what, g, clipped + idx * g_n, g_n, ATOL, RTOL);
        }
    }
    test_close("clip norms", my_norm, norms, g_steps * 3, 0, 1e-6);
    test_close("clip factors", my_fac, factors, g_steps * 3, 0, 1e-6);
    test_cond("max_norm <= 0 disables", dt_clip_factor(1e9, 0.0f) == 1.0f);
    test_cond("NaN norm stays NaN", isnan(dt_clip_factor(NAN, 1.0f)));
    float one = 3.0f;
    test_cond("sumsq small", dt_sumsq(&one, 1) == 9.0 && dt_sumsq(&one, 0) == 0.0);
    dt_free(g);
    dt_free(maxn);
    dt_free(norms);
    dt_free(factors);
    dt_free(clipped);
}

/* Two slices [0, a) and [a, n) with state_off must equal one update. */
static void test_slices(dt_optim_kind kind, float momentum, bool nesterov, const char *what) {
    dt_optim_cfg c;
    dt_optim_cfg_default(&c, kind);
    c.momentum = momentum;
    c.nesterov = nesterov;
    c.weight_decay = 0.05f;
    dt_optim *whole = NULL, *parts = NULL;
    test_cond("create", dt_optim_create(&whole, &c, g_n) == DT_OK);
    test_cond("create", dt_optim_create(&parts, &c, g_n) == DT_OK);
    float *w1 = dt_alloc_floats(g_n), *w2 = dt_alloc_floats(g_n);
    memcpy(w1, g_p0, g_n * sizeof *w1);
    memcpy(w2, g_p0, g_n * sizeof *w2);
    const size_t a = 377;
    for (size_t k = 0; k < g_steps; k++) {
        const float *g = g_grads + k * g_n;
        dt_optim_begin_step(whole);
        dt_optim_update(whole, w1, g, 0, g_n, 0.01f, c.weight_decay);
        dt_optim_begin_step(parts);
        dt_optim_update(parts, w2 + a, g + a, a, g_n - a, 0.01f, c.weight_decay);
        dt_optim_update(parts, w2, g, 0, a, 0.01f, c.weight_decay);
    }
    int same = memcmp(w1, w2, g_n * sizeof *w1) == 0;
    if (whole->m) same &= memcmp(whole->m, parts->m, g_n * sizeof(float)) == 0;
    if (whole->v) same &= memcmp(whole->v, parts->v, g_n * sizeof(float)) == 0;
    printf("%s slices == whole (bitwise): %s\n", what, same ? "yes" : "NO");
    test_cond(what, same);
    size_t want = kind == DT_OPTIM_ADAMW ? 8 * g_n : momentum > 0 ? 4 * g_n : 0;
    test_cond("state bytes", dt_optim_state_bytes(whole) == want);
    dt_free(w1);
    dt_free(w2);
    dt_optim_destroy(whole);
    dt_optim_destroy(parts);
}

/* A decayed and an undecayed slice (wd passed per call). */
static void test_per_slice_wd(void) {
    dt_optim_cfg c;
    dt_optim_cfg_default(&c, DT_OPTIM_ADAMW);
    c.weight_decay = 0.5f;
    dt_optim *o = NULL;
    test_cond("create", dt_optim_create(&o, &c, 4) == DT_OK);
    float w[4] = {1, 1, 1, 1}, g[4] = {0, 0, 0, 0};
    dt_optim_begin_step(o);
    dt_optim_update(o, w, g, 0, 2, 0.1f, c.weight_decay);
    dt_optim_update(o, w + 2, g + 2, 2, 2, 0.1f, 0.0f);
    test_cond("decayed slice shrinks by lr*wd", fabsf(w[0] - 0.95f) < 1e-7f && w[1] == w[0]);
    test_cond("undecayed slice unchanged", w[2] == 1.0f && w[3] == 1.0f);
    dt_optim_destroy(o);
    dt_optim_destroy(NULL);
}

static void expect_bad(const dt_optim_cfg *c, const char *flag) {
    dt_status st = dt_optim_cfg_check(c);
    int ok = st == DT_ERR_INVALID && strstr(dt_error_msg(), flag) != NULL;
    printf("%s cfg error names %-15s: %s\n", ok ? "ok  " : "FAIL", flag, dt_error_msg());
    test_cond(flag, ok);
    dt_optim *o = (dt_optim *)1;
    test_cond("create refuses a bad cfg", dt_optim_create(&o, c, 10) == DT_ERR_INVALID && o == NULL);
}

static void test_cfg_check(void) {
    dt_optim_cfg c, base;
    dt_optim_cfg_default(&base, DT_OPTIM_SGD);
    test_cond("sgd default ok", dt_optim_cfg_check(&base) == DT_OK);
    c = base; c.momentum = -0.1f; expect_bad(&c, "--momentum");
    c = base; c.momentum = 1.0f; expect_bad(&c, "--momentum");
    c = base; c.momentum = NAN; expect_bad(&c, "--momentum");
    c = base; c.nesterov = true; expect_bad(&c, "--nesterov");
    c = base; c.nesterov = true; c.momentum = 0.9f;
    test_cond("nesterov with momentum ok", dt_optim_cfg_check(&c) == DT_OK);
    c = base; c.weight_decay = -1e-4f; expect_bad(&c, "--weight-decay");
    dt_optim_cfg_default(&base, DT_OPTIM_ADAMW);
    test_cond("adamw default ok", dt_optim_cfg_check(&base) == DT_OK);
    c = base; c.beta1 = 1.0f; expect_bad(&c, "--beta1");
    c = base; c.beta1 = -0.5f; expect_bad(&c, "--beta1");
    c = base; c.beta2 = 1.5f; expect_bad(&c, "--beta2");
    c = base; c.eps = 0.0f; expect_bad(&c, "--eps");
    c = base; c.eps = -1e-8f; expect_bad(&c, "--eps");
    c = base; c.weight_decay = -0.01f; expect_bad(&c, "--weight-decay");
    c = base; c.weight_decay = INFINITY; expect_bad(&c, "--weight-decay");
}

/* The loss scaler's rule (torch.cuda.amp.GradScaler: backoff 0.5, growth 2
 * after `window` clean steps in a row, the count reset by an overflow), its
 * floor at 1, the static scale and the growth that would overflow. */
static void test_scaler(void) {
    dt_scaler s;
    dt_scaler_init(&s, 8.0f, 3);
    const int inf[] = {0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    const float want[] = {8, 8, 16, 8, 8, 8, 4, 4, 4, 8, 8, 8, 16};
    int ok = 1, applied = 0;
    for (int i = 0; i < 13; i++) {
        dt_scaler_verdict v = dt_scaler_update(&s, inf[i]);
        ok &= s.scale == want[i] && (v == DT_SCALER_APPLY) == !inf[i];
        applied += v == DT_SCALER_APPLY;
    }
    test_cond("scaler: halves on an overflow, doubles after 3 clean steps in a row (the count restarts at an overflow)",
              ok && applied == 11 && s.skipped == 2 && s.grown == 3);
    dt_scaler_init(&s, 2.0f, 5);
    dt_scaler_verdict v1 = dt_scaler_update(&s, true), v2 = dt_scaler_update(&s, true);
    test_cond("scaler: not below 1; an overflow at 1 is STUCK", v1 == DT_SCALER_SKIP && s.scale == 1.0f && v2 == DT_SCALER_STUCK);
    dt_scaler_init(&s, 1024.0f, 0);
    int skips = 0;
    dt_scaler_verdict v = DT_SCALER_APPLY;
    for (int i = 0; i < 10; i++) dt_scaler_update(&s, false);
    dt_scaler_update(&s, true);
    dt_scaler_update(&s, false); /* a clean step restarts the count */
    while ((v = dt_scaler_update(&s, true)) == DT_SCALER_SKIP) skips++;
    test_cond("scaler: a static scale never changes; 64 overflows in a row are STUCK",
              s.scale == 1024.0f && s.grown == 0 && v == DT_SCALER_STUCK && skips == DT_SCALER_MAX_STATIC_SKIPS - 1);
    dt_scaler_init(&s, 0x1p127f, 1);
    dt_scaler_update(&s, false);
    test_cond("scaler: growth stops short of inf", s.scale == 0x1p127f && s.grown == 0);
}

int main(void) {
    dt_status st = dt_st_open("fixtures/optim.safetensors", &g_fx);
    if (st != DT_OK) {
        fprintf(stderr, "%s\nHINT: run from tests/; regenerate with /usr/bin/python3 tools/gen_fixture_optim.py\n",
                dt_error_msg());
        return 1;
    }
    const dt_st_tensor *p0 = dt_st_find(g_fx, "p0"), *gr = dt_st_find(g_fx, "grads");
    if (!p0 || !gr || gr->ndim != 2 || gr->shape[1] != (int64_t)p0->numel) {
        fprintf(stderr, "fixtures/optim.safetensors: p0/grads missing\n");
        return 1;
    }
    g_n = p0->numel;
    g_steps = (size_t)gr->shape[0];
    g_p0 = fx("p0", g_n);
    g_grads = fx("grads", g_steps * g_n);

    test_against_pytorch();
    test_schedule();
    test_clip();
    test_slices(DT_OPTIM_SGD, 0.0f, false, "sgd plain");
    test_slices(DT_OPTIM_SGD, 0.9f, false, "sgd momentum");
    test_slices(DT_OPTIM_SGD, 0.9f, true, "sgd nesterov");
    test_slices(DT_OPTIM_ADAMW, 0.0f, false, "adamw");
    test_per_slice_wd();
    test_cfg_check();
    test_scaler();

    dt_free(g_p0);
    dt_free(g_grads);
    dt_st_close(g_fx);
    return test_report();
}
