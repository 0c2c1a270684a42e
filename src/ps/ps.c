/* Parameter server: the run's ends shared by servers and workers: the
 * consistency flag, the final gather of every range to rank 0 (n floats and
 * the staleness histograms) and rank 0's release of the others once the
 * outputs are written. */
#include "ps_internal.h"

#include <stdlib.h>
#include <string.h>

dt_status dt_ps_cfg_parse(const char *s, dt_ps_cfg *out) {
    if (strcmp(s, "bsp") == 0) out->mode = DT_PS_BSP;
    else if (strcmp(s, "asp") == 0) out->mode = DT_PS_ASP;
    else if (strncmp(s, "ssp:", 4) == 0) {
        char *end;
        long k = strtol(s + 4, &end, 10);
        if (end == s + 4 || *end || k < 0 || k > 1000000)
            return dt_errorf(DT_ERR_INVALID, "--consistency %s: ssp:K needs a staleness bound K >= 0", s);
        out->mode = DT_PS_SSP;
        out->staleness = (int)k;
    } else {
        return dt_errorf(DT_ERR_INVALID, "--consistency must be bsp, asp or ssp:K, got '%s'", s);
    }
    return DT_OK;
}

dt_status dt_ps_gather_final(dt_model *m, dt_comm *world, const dt_ps_cfg *cfg, uint64_t hist[DT_PS_HIST], dt_ps_outcome *out) {
    int N = dt_comm_size(world), S = cfg->servers, W = N - S, me = dt_comm_rank(world);
    dt_status st = DT_OK;
    uint64_t h[DT_PS_HIST + 3], mine[DT_PS_HIST + 3];
    if (me >= W) {
        memcpy(mine, hist, DT_PS_HIST * sizeof(uint64_t));
        mine[DT_PS_HIST] = (uint64_t)out->samples;
        mine[DT_PS_HIST + 1] = (uint64_t)out->joined;
        mine[DT_PS_HIST + 2] = (uint64_t)out->departed;
    }
    if (me == 0) {
        memset(hist, 0, DT_PS_HIST * sizeof(uint64_t));
        out->samples = 0;
        out->joined = out->departed = 0;
    }
    for (int s = 0; s < S && !st; s++) {
        size_t lo, len;
        dt_ps_range_of(m->n, S, s, &lo, &len);
        dt_req r[2];
        if (me == W + s) {
            st = dt_isend(world, mine, sizeof mine, 0, TAG_HIST, &r[0]);
            if (!st) st = dt_isend(world, m->w + lo, len * sizeof(float), 0, TAG_FINAL, &r[1]);
            if (!st) st = dt_waitall(world, r, 2, "parameter server final gather");
        } else if (me == 0) {
            st = dt_irecv(world, h, sizeof h, W + s, TAG_HIST, &r[0]);
            if (!st) st = dt_irecv(world, m->w + lo, len * sizeof(float), W + s, TAG_FINAL, &r[1]);
            if (!st) st = dt_waitall(world, r, 2, "parameter server final gather");
            for (int i = 0; i < DT_PS_HIST && !st; i++) hist[i] += h[i];
            if (!st) {
                out->samples += (int64_t)h[DT_PS_HIST];
                out->joined += (int)h[DT_PS_HIST + 1];
                out->departed += (int)h[DT_PS_HIST + 2];
            }
        }
    }
    return st;
}

dt_status dt_ps_release(dt_comm *world, double deadline) {
    int N = dt_comm_size(world), me = dt_comm_rank(world);
    static const int64_t token = 1;
    if (me != 0) {
        int64_t got;
        dt_req r;
        dt_status st = dt_irecv(world, &got, sizeof got, 0, TAG_RELEASE, &r);
        if (!st) st = dt_waitall_for(world, &r, 1, deadline, "waiting for rank 0 to write the run's outputs");
        return st;
    }
    dt_req *r = dt_calloc((size_t)N, sizeof(dt_req));
    if (!r) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    r[0].done = true;
    for (int k = 1; k < N; k++)
        if (dt_isend(world, &token, sizeof token, k, TAG_RELEASE, &r[k])) r[k].done = true; /* a lost rank */
    /* Sends to lost ranks may never complete: give them a second, then go. */
    double t0 = dt_now();
    uint64_t ns = 2000;
    for (;;) {
        int k;
        dt_status st = dt_testany(world, r, N, &k);
        if (st && k >= 0) r[k].done = true;
        bool all = true;
        for (int i = 1; i < N; i++) all &= r[i].done;
        if (all || dt_now() - t0 > 1.0) break;
        if (k < 0) dt_ps_nap(&ns);
    }
    dt_cancel(world, r, N);
    dt_free(r);
    return DT_OK;
}
