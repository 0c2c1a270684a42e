/* The planner tests' cluster (test_plan_layouts.c, test_plan_memory.c,
 * test_plan_links.c): hosts x per ranks, `cores` per host, 10 GFLOP/s and
 * 1 TB a rank, 1 ms fixed per micro-batch, 1 ns per parameter's update, links
 * of 1 us + 0.1 ns/B inside a host and 50 us + 8 ns/B across, equal speeds.
 * One static cluster: each call resets and returns it. */
#ifndef DT_PLAN_TESTHELP_H
#define DT_PLAN_TESTHELP_H

#include "dtrain/plan.h"

#include <string.h>

static inline dt_plan_cluster *cluster(int hosts, int per, int cores) {
    static dt_plan_cluster c;
    memset(&c, 0, sizeof c);
    c.hosts = hosts;
    c.per_host = per;
    c.cores = cores;
    c.flops = 1e10;
    c.memory = 1e12;
    c.micro_overhead_s = 1e-3;
    c.optim_s_per_param = 1e-9;
    c.links.local = (dt_link_cost){1e-6, 1e-10};
    c.links.cross = (dt_link_cost){5e-5, 8e-9};
    for (int h = 0; h < hosts; h++) c.speed[h] = 1;
    return &c;
}

#endif
