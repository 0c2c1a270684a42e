/* Private to src/optim's update kernels (sgd.c, adamw.c). */
#ifndef DTRAIN_OPTIM_MULADD_H
#define DTRAIN_OPTIM_MULADD_H

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

#endif
