/* Private to src/optim: the per-algorithm update kernels behind dt_optim_update. */
#ifndef DTRAIN_OPTIM_INTERNAL_H
#define DTRAIN_OPTIM_INTERNAL_H

#include "dtrain/optim.h"

/* w (n), g (n), state slices already offset; see dt_optim_update. */
void dt_sgd_update(const dt_optim *o, float *w, const float *g, float *buf, size_t n,
                   float lr, float wd);
void dt_adamw_update(const dt_optim *o, float *w, const float *g, float *m, float *v,
                     size_t n, float lr, float wd);

#endif
