/* AdamW (decoupled weight decay), operation for operation as PyTorch 1.13's
 * torch.optim.AdamW (foreach=False, amsgrad=False). Scalars are formed in
 * double as Python does, then rounded to float where PyTorch passes them to a
 * float kernel:
 *
 *   w = w * (float)(1 - lr*wd)
 *   m = (m*beta1) + (float)(1-beta1) * g            (fused, see dt_muladd)
 *   v = (v*beta2) + ((float)(1-beta2) * g) * g      (fused)
 *   denom = sqrt(v) / (float)sqrt(1 - beta2^t) + eps
 *   w = w + ((float)(-lr / (1 - beta1^t)) * m) / denom
 *
 * The loop is branch-free over restrict pointers; with -fno-math-errno the
 * compiler vectorises the sqrt. */
#include "muladd.h"
#include "optim_internal.h"

__attribute__((always_inline)) static inline void
adamw_kernel(float *restrict w, const float *restrict g, float *restrict m, float *restrict v, size_t n,
             float decay, float b1, float c1, float b2, float c2, float bc2_sqrt, float eps, float neg_step,
             const bool fused) {
    for (size_t i = 0; i < n; i++) {
        const float wi = w[i] * decay;
        const float mi = dt_muladd(c1, g[i], m[i] * b1, fused);
        const float vi = dt_muladd(c2 * g[i], g[i], v[i] * b2, fused);
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi + neg_step * mi / denom;
    }
}

#define ADAMW_ARGS float *restrict w, const float *restrict g, float *restrict m, float *restrict v, size_t n, \
    float decay, float b1, float c1, float b2, float c2, float bc2_sqrt, float eps, float neg_step
DT_FMA_TARGET static void adamw_fused(ADAMW_ARGS) {
    adamw_kernel(w, g, m, v, n, decay, b1, c1, b2, c2, bc2_sqrt, eps, neg_step, true);
}
static void adamw_unfused(ADAMW_ARGS) { adamw_kernel(w, g, m, v, n, decay, b1, c1, b2, c2, bc2_sqrt, eps, neg_step, false); }

void dt_adamw_update(const dt_optim *o, float *w, const float *g, float *m, float *v,
                     size_t n, float lr, float wd) {
    const double beta1 = o->cfg.beta1, beta2 = o->cfg.beta2;
    const double t = (double)(o->t > 0 ? o->t : 1);
    const double bc1 = 1.0 - pow(beta1, t);
    const double bc2 = 1.0 - pow(beta2, t);
    const double step_size = (double)lr / bc1;
    (dt_cpu_fma() ? adamw_fused : adamw_unfused)(w, g, m, v, n, (float)(1.0 - (double)lr * (double)wd), (float)beta1,
                 (float)(1.0 - beta1), (float)beta2, (float)(1.0 - beta2), (float)sqrt(bc2),
                 o->cfg.eps, (float)-step_size);
}
