/* SGD with momentum, Nesterov and L2 weight decay, operation for operation as
 * PyTorch 1.13's torch.optim.SGD (foreach=False, dampening 0):
 *
 *   d = g + wd*w                       (only when wd != 0; fused)
 *   first step:  buf = d               (the buffer starts as a copy, not 0)
 *   later:       buf = (buf*momentum) + d
 *   d = nesterov ? d + momentum*buf : buf   (when momentum != 0; fused)
 *   w = w + (-lr)*d                    (fused)
 *
 * Each float expression rounds exactly where PyTorch's kernels round (the
 * alpha-adds fused, see dt_muladd), so the results agree to the last bit. The
 * mode switches are compile-time constants of an always-inlined kernel: every
 * instantiated loop is branch-free and vectorisable. */
#include "muladd.h"
#include "optim_internal.h"

enum { SGD_PLAIN, SGD_FIRST, SGD_MOMENTUM };

__attribute__((always_inline)) static inline void
sgd_kernel(float *restrict w, const float *restrict g, float *restrict buf, size_t n,
           float neg_lr, float wd, float mom, const bool use_wd, const int mode,
           const bool nesterov, const bool fused) {
    for (size_t i = 0; i < n; i++) {
        float d = use_wd ? dt_muladd(wd, w[i], g[i], fused) : g[i];
        if (mode != SGD_PLAIN) {
            /* mul_ rounds before add_: not fused (C11 mode does not contract) */
            const float b = mode == SGD_FIRST ? d : buf[i] * mom + d;
            buf[i] = b;
            d = nesterov ? dt_muladd(mom, b, d, fused) : b;
        }
        w[i] = dt_muladd(neg_lr, d, w[i], fused);
    }
}

#define SGD_CASES(mode)                                                          \
    do {                                                                         \
        if (use_wd && nesterov) sgd_kernel(w, g, buf, n, -lr, wd, mom, true, mode, true, fused);        \
        else if (use_wd) sgd_kernel(w, g, buf, n, -lr, wd, mom, true, mode, false, fused);              \
        else if (nesterov) sgd_kernel(w, g, buf, n, -lr, wd, mom, false, mode, true, fused);            \
        else sgd_kernel(w, g, buf, n, -lr, wd, mom, false, mode, false, fused);                         \
    } while (0)

__attribute__((always_inline)) static inline void sgd_update(const dt_optim *o, float *w, const float *g, float *buf,
                                                             size_t n, float lr, float wd, const bool fused) {
    const float mom = o->cfg.momentum;
    const bool use_wd = wd != 0.0f;
    const bool nesterov = o->cfg.nesterov;
    if (mom == 0.0f || !buf) {
        if (use_wd) sgd_kernel(w, g, NULL, n, -lr, wd, 0.0f, true, SGD_PLAIN, false, fused);
        else sgd_kernel(w, g, NULL, n, -lr, wd, 0.0f, false, SGD_PLAIN, false, fused);
    } else if (o->t <= 1) {
        SGD_CASES(SGD_FIRST);
    } else {
        SGD_CASES(SGD_MOMENTUM);
    }
}

DT_FMA_TARGET static void sgd_fused(const dt_optim *o, float *w, const float *g, float *buf, size_t n, float lr, float wd) {
    sgd_update(o, w, g, buf, n, lr, wd, true);
}
static void sgd_unfused(const dt_optim *o, float *w, const float *g, float *buf, size_t n, float lr, float wd) {
    sgd_update(o, w, g, buf, n, lr, wd, false);
}

void dt_sgd_update(const dt_optim *o, float *w, const float *g, float *buf, size_t n, float lr, float wd) {
    (dt_cpu_fma() ? sgd_fused : sgd_unfused)(o, w, g, buf, n, lr, wd);
}

__attribute__((always_inline)) static inline void direction(const dt_optim_cfg *c, const float *restrict w, float *restrict g,
                                                            float *restrict buf, size_t n, float wd, const bool fused) {
    const float mom = c->momentum;
    const bool nesterov = c->nesterov;
    for (size_t i = 0; i < n; i++) {
        const float d = wd != 0.0f ? dt_muladd(wd, w[i], g[i], fused) : g[i];
        const float b = buf[i] * mom + d;
        buf[i] = b;
        g[i] = nesterov ? dt_muladd(mom, b, d, fused) : b;
    }
}

DT_FMA_TARGET static void direction_fused(const dt_optim_cfg *c, const float *w, float *g, float *buf, size_t n, float wd) {
    direction(c, w, g, buf, n, wd, true);
}
static void direction_unfused(const dt_optim_cfg *c, const float *w, float *g, float *buf, size_t n, float wd) {
    direction(c, w, g, buf, n, wd, false);
}

void dt_sgd_direction(const dt_optim_cfg *c, const float *restrict w, float *restrict g, float *restrict buf, size_t n,
                      float wd) {
    (dt_cpu_fma() ? direction_fused : direction_unfused)(c, w, g, buf, n, wd);
}
