/* Private to src/optim: the per-algorithm update kernels behind dt_optim_update. */
#ifndef DTRAIN_OPTIM_INTERNAL_H
#define DTRAIN_OPTIM_INTERNAL_H

#include "dtrain/optim.h"

#include <math.h>

/* a*b + c. PyTorch's x86 kernels compute `x.add_(y, alpha=a)` and addcmul with
 * a fused multiply-add (vec::fmadd, one rounding); doing the same where the
 * build targets FMA hardware makes the updates agree with PyTorch bit for bit.
 * Elsewhere fmaf would be a slow library call, so the product is rounded. */
static inline float dt_muladd(float a, float b, float c) {
#if defined(__FMA__) || defined(__aarch64__)
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

/* w (n), g (n), state slices already offset; see dt_optim_update. */
void dt_sgd_update(const dt_optim *o, float *w, const float *g, float *buf, size_t n,
                   float lr, float wd);
void dt_adamw_update(const dt_optim *o, float *w, const float *g, float *m, float *v,
                     size_t n, float lr, float wd);

#endif
