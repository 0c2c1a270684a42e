/* Private to src/optim's update kernels (sgd.c, adamw.c). */
#ifndef DTRAIN_OPTIM_MULADD_H
#define DTRAIN_OPTIM_MULADD_H

#include "core/cpu.h"

#include <math.h>

/* a*b + c. PyTorch's x86 kernels compute `x.add_(y, alpha=a)` and addcmul with
 * a fused multiply-add (vec::fmadd, one rounding) on CPUs with FMA; so do we:
 * every kernel is instantiated fused (compiled for AVX2 + FMA, where fmaf is
 * one instruction) and unfused (the product rounded), and the caller picks by
 * dt_cpu_fma(). `fused` is a compile-time constant in each instance. */
__attribute__((always_inline)) static inline float dt_muladd(float a, float b, float c, const bool fused) {
    return fused ? fmaf(a, b, c) : a * b + c;
}

#endif
