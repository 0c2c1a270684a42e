/* A layout's memory per rank (plan_internal.h): for each pipeline stage, the
 * ZeRO accounting of its parameters (dt_plan_memory) plus the activations of
 * the micro-batches the schedule keeps in flight (all M under GPipe, P - s
 * under 1F1B; with recomputation only the stage inputs, plus one micro-batch's
 * saved tensors); the stage that needs the most is the layout's. Cost: O(pp). */
#include "plan_internal.h"

#include <math.h>

dt_status plan_layout_memory(const dt_plan_in *in, const dt_plan_layout *l, const stage_cost *sc, dt_plan_pred *p) {
    double Bl = ceil((double)in->batch / l->dp), mb = ceil(Bl / l->micro);
    dt_status st = DT_OK;
    p->mem.total = -1;
    for (int s = 0; s < l->pp && !st; s++) {
        int flight = l->sched == DT_PLAN_GPIPE ? l->micro : (l->pp - s < l->micro ? l->pp - s : l->micro);
        double acts = l->recompute ? (sc[s].bound * flight + (sc[s].acts - sc[s].bound)) * mb * 4
                                   : sc[s].acts * mb * 4 * flight;
        dt_plan_mem_in mi = {.params = sc[s].params, .dp = l->dp, .tp = 1, .pp = 1, .zero = l->zero, .param_bytes = 4,
                             .grad_bytes = 4, .optim_bytes = in->adam ? 8 : 4, .act_bytes = acts};
        dt_plan_mem m;
        st = dt_plan_memory(&mi, &m);
        if (!st && m.total > p->mem.total) p->mem = m;
    }
    p->fits = p->mem.total <= in->cluster->memory;
    return st;
}

