/* Dynamic loss scaling (torch.cuda.amp.GradScaler's rule; optim.h has the
 * contract): a state machine over one flag per step. O(1) per step; the
 * caller's overflow check is one pass over the gradient it already reads. */
#include "dtrain/optim.h"

void dt_scaler_init(dt_scaler *s, float scale, int64_t window) {
    *s = (dt_scaler){.scale = scale, .window = window};
}

dt_scaler_verdict dt_scaler_update(dt_scaler *s, bool found_inf) {
    if (!found_inf) {
        s->in_a_row = 0;
        if (s->window > 0 && ++s->clean >= s->window) {
            s->clean = 0;
            if (s->scale * 2.0f <= 3.4e38f) { /* stays finite: an inf scale would make every gradient inf */
                s->scale *= 2.0f;
                s->grown++;
            }
        }
        return DT_SCALER_APPLY;
    }
    s->skipped++;
    s->in_a_row++;
    s->clean = 0;
    if (s->window == 0) return s->in_a_row >= DT_SCALER_MAX_STATIC_SKIPS ? DT_SCALER_STUCK : DT_SCALER_SKIP;
    if (s->scale <= 1.0f) return DT_SCALER_STUCK;
    s->scale = s->scale * 0.5f < 1.0f ? 1.0f : s->scale * 0.5f;
    return DT_SCALER_SKIP;
}
