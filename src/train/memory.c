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

#include <math.h>
#include <stdio.h>

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

/* ---- --max-memory ------------------------------------------------------------ */
static const char *const KIND[DT_MEM_RSS] = {"parameters", "gradients", "staging", "optimizer", "activations",
                                             "buffers", "copies"};

static double own_total(const double *row) {
    double t = 0;
    for (int k = 0; k < DT_MEM_RSS; k++) t += row[k];
    return t;
}

/* An upper bound on the largest rank's count in another layout of `world`
 * ranks, from dtrain's arenas: every rank keeps the parameter and gradient
 * arenas of its tensor-parallel share of every stage (ZeRO-2: a 1/dp shard of
 * its stage's gradients), optimizer state for its stage's share (ZeRO-1/2:
 * 1/dp of it), under tp or pp the unsharded model's two arenas; activations
 * and buffers as this layout has them (they shrink under tp and pp: the bound
 * does not count on it). Exact for another ZeRO stage. */
static double predict(const tr_run *r, const double *row, int world, int tp, int pp, int zero) {
    const dt_train_cfg *c = r->c;
    double k = c->optim.kind == DT_OPTIM_ADAMW ? 2 : c->optim.momentum > 0 ? 1 : 0;
    double psi = (double)(r->full ? r->full->n : r->m->n), dp = (double)(world / (tp * pp));
    double share = 4.0 * psi / tp, stage = share / pp;
    double grads = zero >= 2 ? stage / dp : share, optim = k * stage / (zero >= 1 ? dp : 1.0);
    double copy = tp * pp > 1 ? 8.0 * psi : 0;
    /* ZeRO-3: the shard and the gathered buckets (this layout's: asked only for its own tp and pp) */
    double params = zero == 3 ? stage / dp + (double)dt_dp_gather_bound(r->dp, c->dp.zero3_keep) : share;
    return params + grads + optim + row[DT_MEM_ACTS] + row[DT_MEM_BUFFERS] + copy;
}

/* "; would fit on N ranks: --zero 2 (X MiB), --tp 2 (at most Y MiB)" or why nothing does. */
static void suggest(const tr_run *r, const double *row, double limit, char *buf, size_t n) {
    const dt_train_cfg *c = r->c;
    size_t at = (size_t)snprintf(buf, n, "; would fit on %d rank%s:", r->n, r->n == 1 ? "" : "s");
    int found = 0;
    for (int z = c->dp.zero + 1; z <= 3 && r->D > 1; z++) {
        double t = predict(r, row, r->n, r->TP, r->P, z);
        if (t <= limit && at < n) at += (size_t)snprintf(buf + at, n - at, "%s --zero %d (%.1f MiB)", found++ ? "," : "",
                                                         z, t / 1048576.0);
    }
    for (int d = 2; d <= r->n && at < n; d *= 2) {
        if (r->n % (r->TP * d * r->P) == 0) {
            double t = predict(r, row, r->n, r->TP * d, r->P, c->dp.zero);
            if (t <= limit) at += (size_t)snprintf(buf + at, n - at, "%s --tp %d (at most %.1f MiB)", found++ ? "," : "",
                                                   r->TP * d, t / 1048576.0);
            t = predict(r, row, r->n, r->TP, r->P * d, c->dp.zero);
            if (t <= limit && at < n) at += (size_t)snprintf(buf + at, n - at, "%s --pp %d (at most %.1f MiB)", found++ ? "," : "",
                                                             r->P * d, t / 1048576.0);
        }
    }
    if (found) return;
    double wider = predict(r, row, 2 * r->n, r->TP, r->P, 3);
    if (wider <= limit)
        snprintf(buf, n, "; no ZeRO stage, --tp or --pp on %d rank%s fits it: give more ranks "
                 "(-n %d --zero 3: %.1f MiB) or more memory", r->n, r->n == 1 ? "" : "s", 2 * r->n, wider / 1048576.0);
    else
        snprintf(buf, n, "; no ZeRO stage, --tp or --pp on %d or %d ranks fits it: its activations alone are %.1f MiB "
                 "(lower --batch, or --pp with more --micro-batches and --recompute) or give more memory", r->n, 2 * r->n,
                 row[DT_MEM_ACTS] / 1048576.0);
}

dt_status tr_mem_check(tr_run *r) {
    const dt_train_cfg *c = r->c;
    if (c->max_memory <= 0) return DT_OK;
    double *b = NULL;
    dt_status st = tr_mem_gather(r, &b);
    if (st) {
        dt_free(b);
        return st;
    }
    int q = 0;
    for (int i = 1; i < r->n; i++)
        if (own_total(b + (size_t)i * DT_MEM_COUNT) > own_total(b + (size_t)q * DT_MEM_COUNT)) q = i;
    const double *row = b + (size_t)q * DT_MEM_COUNT;
    char kinds[512], why[640];
    size_t at = 0;
    for (int k = 0; k < DT_MEM_RSS && at < sizeof kinds; k++)
        if (k != DT_MEM_STAGING)
            at += (size_t)snprintf(kinds + at, sizeof kinds - at, "%s%s %.1f", at ? ", " : "", KIND[k], row[k] / 1048576.0);
    double total = own_total(row), limit = c->max_memory;
    if (r->lead && !r->quiet)
        dt_log(DT_LOG_INFO, "memory per rank, dtrain's own count at setup (the largest: rank %d): %s MiB; total %.1f MiB of "
               "--max-memory %.1f MiB", q, kinds, total / 1048576.0, limit / 1048576.0);
    if (total > limit) {
        suggest(r, row, limit, why, sizeof why);
        st = dt_errorf(DT_ERR_INVALID, "--max-memory %.1f MiB: rank %d would hold %.1f MiB (%s MiB) with ZeRO-%d%s", limit / 1048576.0,
                       q, total / 1048576.0, kinds, c->dp.zero, why);
    }
    dt_free(b);
    return st;
}
