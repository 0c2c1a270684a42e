/* What src/plan's files share: a pipeline stage's costs per sample, summed over
 * its blocks (layouts.c fills them), and the memory of a layout from them. */
#ifndef DTRAIN_PLAN_INTERNAL_H
#define DTRAIN_PLAN_INTERNAL_H

#include "dtrain/plan.h"

typedef struct stage_cost {
    double flops, tp_bytes, params, acts, bound; /* per sample, floats for the last three */
    int blocks;
} stage_cost;

/* The memory of layout l with stage costs sc[0..l->pp) into p->mem (the stage
 * that needs the most) and p->fits against the cluster's memory per rank. */
dt_status plan_layout_memory(const dt_plan_in *in, const dt_plan_layout *l, const stage_cost *sc, dt_plan_pred *p);

#endif
