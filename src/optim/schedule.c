/* Learning-rate schedule: linear warm-up, then cosine decay to min_lr (or a
 * constant lr). Computed in double, rounded once. */
#include "dtrain/optim.h"

#include <math.h>

float dt_lr_at(const dt_lr_sched *s, int64_t step) {
    const double lr = s->lr, min_lr = s->min_lr;
    if (step < 0) step = 0;
    if (s->warmup > 0 && step < s->warmup) return (float)((double)(step + 1) / (double)s->warmup * lr);
    if (!s->cosine) return (float)lr;
    if (s->total <= s->warmup) return (float)min_lr;
    double p = (double)(step - s->warmup) / (double)(s->total - s->warmup);
    if (p > 1.0) p = 1.0; /* past the end: stay at the floor */
    return (float)(min_lr + 0.5 * (1.0 + cos(M_PI * p)) * (lr - min_lr));
}
