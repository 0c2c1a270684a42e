/* A rank's memory at the end of a synchronous run (report.h, dt_mem_summary):
 * dtrain's own byte counts by kind, read from what the allocation code holds,
 * and the process's peak resident set, gathered over the world so rank 0
 * reports every rank's. The planner predicts the same kinds
 * (src/plan/layout_memory.c); bench/plan_memory.sh sets the two side by side.
 * Counted as allocated: dt_alloc_floats zeroes what it returns, so every
 * float counted is resident; ZeRO-2's staging arena is the exception, and
 * counts its measured resident peak. */
#include "run.h"

#include "dtrain/gradcomp.h"

#include <sys/resource.h>

/* The process's peak resident set so far, in bytes (Linux: ru_maxrss in KiB). */
static double rss_peak(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0.0;
}

/* This rank's row: its bytes by kind. */
static void own_row(const tr_run *r, double *row) {
    dt_dp_mem mem;
    dt_dp_memory(r->dp, &mem);
    row[DT_MEM_PARAMS] = (double)mem.param_bytes;
    row[DT_MEM_GRADS] = (double)mem.grad_bytes;
    row[DT_MEM_STAGING] = (double)mem.grad_staging_peak;
    row[DT_MEM_OPTIM] = (double)mem.optim_bytes + (double)dt_robust_state_bytes(r->rob);
    double acts = 0, bufs = 0;
    if (r->acts) acts += (double)r->acts->n_floats;
    if (r->eacts) acts += (double)r->eacts->n_floats;
    if (r->pipe) {
        dt_pipe_stats s;
        dt_pipe_take_stats(r->pipe, &s); /* after the summary took the times: the sizes stay */
        acts += (double)s.act_floats;
        bufs += (double)s.buf_floats;
    }
    row[DT_MEM_ACTS] = 4 * acts;
    row[DT_MEM_BUFFERS] = 4 * bufs + (dt_dp_gc(r->dp) ? (double)dt_gc_bytes(dt_dp_gc(r->dp)) : 0);
    double copy = r->full ? 2.0 * (double)r->full->n : 0; /* its parameter and gradient arenas */
    for (int k = 0; k < 4; k++)
        if (r->ck.gbuf[k]) copy += (double)(k < 2 ? r->m->n : r->full->n);
    row[DT_MEM_COPY] = 4 * copy;
    row[DT_MEM_RSS] = rss_peak();
}

dt_status tr_mem_gather(tr_run *r, double **bytes) {
    *bytes = dt_calloc((size_t)r->n * DT_MEM_COUNT, sizeof(double));
    if (!*bytes) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    own_row(r, *bytes + (size_t)r->rank * DT_MEM_COUNT);
    return dt_allreduce_f64(r->world, *bytes, (size_t)r->n * DT_MEM_COUNT);
}
