/* Topology-aware collectives: shared memory inside a host (shm), and
 * hierarchical across hosts (hier), after NCCL's and Horovod's hierarchical
 * all-reduce and MPI HAN. topo.c says which ranks share a host; shm_coll.c
 * moves the data inside one.
 *
 * H hosts of L ranks each, n bytes, alpha/beta per link level (l: inside a
 * host, x: across hosts):
 *   shm (H = 1)   all-reduce   2 syncs per round + 2(L-1)/L.n.beta_l
 *   hier          all-reduce   local reduce-scatter, then each local rank
 *                 all-reduces its n/L with its peers on the other hosts (all L
 *                 of them use the links at once), then local all-gather:
 *                 2(L-1)/L.n.beta_l + allreduce_x(n/L over H ranks)
 *                 = ... + 2(H-1)/H.(n/L).beta_x per rank with a ring across hosts
 *                 (a flat ring sends 2(p-1)/p.n per rank over the slow links)
 *   hier          reduce-scatter (the partition convention's chunk r ends on
 *                 rank r): local reduce-scatter of every chunk to the local
 *                 rank with the owner's local index, then a direct exchange of
 *                 the H-1 partial chunks with the peers on the other hosts
 *                 (H-1 messages of n/p each way) and their sum in host order;
 *                 all-gather the same backwards.
 * Hosts with unequal rank counts: the all-reduce goes through each host's first
 * rank (local sum, all-reduce among those ranks, local broadcast); the
 * reduce-scatter and all-gather fall back to the flat ring.
 * Every sum runs in a fixed order (local ranks, then hosts), so every rank
 * receives the same bits; the order differs from a flat algorithm's, so the
 * results may differ from those in the last bits. */
#include "comm/comm_internal.h"

#include <stdio.h>

/* The sub-communicators report with c's deadline and step and pipeline with
 * its segments, and a timeout in them breaks c as well. */
static void follow(dt_comm *sub, const dt_comm *c) {
    if (!sub) return;
    sub->timeout = c->timeout;
    sub->step = c->step;
    sub->max_segment = c->max_segment;
}

static dt_status broke(dt_comm *c, dt_status st) {
    if (st == DT_ERR_TIMEOUT) c->broken = true;
    return st;
}

/* c's topology, checked for an algorithm that needs shared memory. */
static dt_status need_shm(dt_comm *c, const char *what, bool one_host, dt_topo **t) {
    dt_status st = dt_topo_get(c, t);
    if (st) return st;
    if (one_host && (*t)->nhosts > 1)
        return dt_errorf(DT_ERR_INVALID, "%s needs every rank on one host; these %d ranks are on %d hosts (use hier)", what,
                         c->size, (*t)->nhosts);
    if ((*t)->lmax > 1 && !(*t)->shm_ok)
        return dt_errorf(DT_ERR_UNSUPPORTED, "%s: no shared memory between the ranks of this host (%s); use ring", what,
                         (*t)->no_shm);
    follow((*t)->local, c);
    follow((*t)->cross, c);
    return DT_OK;
}

/* The partition's ranges (chunk r owned by owner[r], NULL: r) in c's scratch,
 * which is kept (no allocation per call once it is large enough); the
 * sub-communicators have their own. */
static dt_status chunk_ranges(dt_comm *c, size_t count, int parts, const int *owner, dt_shm_range **out) {
    float *mem;
    size_t floats = ((size_t)parts * sizeof(dt_shm_range) + sizeof(float) - 1) / sizeof(float);
    dt_status st = dt_comm_scratch(c, floats, &mem);
    if (st) return st;
    *out = (dt_shm_range *)(void *)mem;
    dt_shm_chunks(*out, count, parts, owner);
    return DT_OK;
}

dt_status dt_allreduce_shm(dt_comm *c, float *buf, size_t count, dt_reduce_op op) {
    dt_topo *t;
    dt_shm_range *rg;
    dt_status st = need_shm(c, "allreduce(shm)", true, &t);
    if (!st) st = chunk_ranges(c, count, t->lsize, NULL, &rg);
    if (st) return st;
    float scale = op == DT_OP_AVG ? 1.0f / (float)c->size : 1.0f;
    return dt_shm_reduce(t->shm, c, buf, rg, t->lsize, true, scale, "allreduce(shm)");
}

static dt_status allreduce_uneven(dt_comm *c, dt_topo *t, float *buf, size_t count, dt_reduce_op op) {
    dt_shm_range *rg;
    dt_status st = t->lsize > 1 ? chunk_ranges(c, count, t->lsize, NULL, &rg) : DT_OK;
    if (!st && t->lsize > 1) st = dt_shm_reduce(t->shm, c, buf, rg, t->lsize, true, 1.0f, "allreduce(hier)");
    if (!st && t->cross) st = broke(c, dt_allreduce(t->cross, buf, count, DT_OP_SUM, DT_ALGO_AUTO));
    if (!st && t->cross && op == DT_OP_AVG) dt_scale_f32(buf, count, 1.0f / (float)c->size);
    if (!st && t->lsize > 1) st = dt_shm_bcast(t->shm, c, buf, count * sizeof(float), 0, "allreduce(hier)");
    return st;
}

dt_status dt_allreduce_hier(dt_comm *c, float *buf, size_t count, dt_reduce_op op) {
    dt_topo *t;
    dt_status st = need_shm(c, "allreduce(hier)", false, &t);
    if (st) return st;
    if (t->lmax == 1) return dt_allreduce(c, buf, count, op, dt_auto_allreduce(c, count * sizeof(float)));
    if (!t->even) return allreduce_uneven(c, t, buf, count, op);
    dt_shm_range *rg;
    if ((st = chunk_ranges(c, count, t->lsize, NULL, &rg))) return st;
    float *mine = buf + dt_chunk_off(count, t->lsize, t->lrank);
    size_t len = dt_chunk_len(count, t->lsize, t->lrank);
    if ((st = dt_shm_reduce(t->shm, c, buf, rg, t->lsize, false, 1.0f, "allreduce(hier)"))) return st;
    if (t->nhosts > 1 && len > 0 && (st = broke(c, dt_allreduce(t->cross, mine, len, DT_OP_SUM, DT_ALGO_AUTO)))) return st;
    if (op == DT_OP_AVG) dt_scale_f32(mine, len, 1.0f / (float)c->size);
    return dt_shm_allgather(t->shm, c, buf, rg, t->lsize, "allreduce(hier)");
}

/* Reduce-scatter, cross-host half: my chunk's partial sums from the peers with
 * my local index on the other hosts, summed in host order with mine. */
static dt_status exchange_sum(dt_comm *c, dt_topo *t, float *buf, size_t count, float scale) {
    int H = t->nhosts, me_h = t->hostpos[c->rank], p = c->size;
    size_t len = dt_chunk_len(count, p, c->rank);
    float *in, *mine = buf + dt_chunk_off(count, p, c->rank);
    dt_req *q;
    dt_status st = dt_comm_scratch(t->cross, (size_t)H * (len ? len : 1), &in);
    if (!st) st = dt_comm_reqs(t->cross, (size_t)(2 * H), &q);
    if (st) return st;
    const float *src[64];
    int nq = 0;
    for (int h = 0; h < H; h++) {
        src[h] = h == me_h ? mine : in + (size_t)h * len;
        if (h == me_h) continue;
        int r = t->at[h * t->lsize + t->lrank];
        DT_TRY(dt_irecv(t->cross, in + (size_t)h * len, len * sizeof(float), h, DT_TAG_HIER, &q[nq++]));
        DT_TRY(dt_isend(t->cross, buf + dt_chunk_off(count, p, r), dt_chunk_len(count, p, r) * sizeof(float), h,
                        DT_TAG_HIER, &q[nq++]));
    }
    DT_TRY(broke(c, dt_waitall(t->cross, q, nq, "reduce_scatter(hier)")));
    if (len > 0) dt_sum_sources_f32(mine, NULL, src, H, len, scale);
fn_exit:
    return st;
}

dt_status dt_reduce_scatter_topo(dt_comm *c, float *buf, size_t count, dt_reduce_op op, bool one_host) {
    dt_topo *t;
    const char *what = one_host ? "reduce_scatter(shm)" : "reduce_scatter(hier)";
    dt_status st = need_shm(c, what, one_host, &t);
    if (st) return st;
    if (!t->even || t->lmax == 1 || t->nhosts > 64) {
        DT_TRY(dt_ring_reduce_scatter(c, buf, count, "reduce_scatter(ring)"));
        if (op == DT_OP_AVG)
            dt_scale_f32(buf + dt_chunk_off(count, c->size, c->rank), dt_chunk_len(count, c->size, c->rank), 1.0f / (float)c->size);
        return DT_OK;
    }
    float scale = op == DT_OP_AVG ? 1.0f / (float)c->size : 1.0f;
    dt_shm_range *rg;
    DT_TRY(chunk_ranges(c, count, c->size, t->lindex, &rg));
    DT_TRY(dt_shm_reduce(t->shm, c, buf, rg, c->size, false, t->nhosts == 1 ? scale : 1.0f, what));
    if (t->nhosts > 1) st = exchange_sum(c, t, buf, count, scale);
fn_exit:
    return st;
}

dt_status dt_allgather_topo(dt_comm *c, float *buf, size_t count, bool one_host) {
    dt_topo *t;
    const char *what = one_host ? "allgather(shm)" : "allgather(hier)";
    dt_status st = need_shm(c, what, one_host, &t);
    if (st) return st;
    if (!t->even || t->lmax == 1) return dt_ring_allgather(c, buf, count, "allgather(ring)");
    int H = t->nhosts, me_h = t->hostpos[c->rank], p = c->size;
    if (H > 1) {
        dt_req *q;
        int nq = 0;
        DT_TRY(dt_comm_reqs(t->cross, (size_t)(2 * H), &q));
        for (int h = 0; h < H; h++) {
            if (h == me_h) continue;
            int r = t->at[h * t->lsize + t->lrank];
            DT_TRY(dt_irecv(t->cross, buf + dt_chunk_off(count, p, r), dt_chunk_len(count, p, r) * sizeof(float), h,
                            DT_TAG_HIER, &q[nq++]));
            DT_TRY(dt_isend(t->cross, buf + dt_chunk_off(count, p, c->rank), dt_chunk_len(count, p, c->rank) * sizeof(float),
                            h, DT_TAG_HIER, &q[nq++]));
        }
        DT_TRY(broke(c, dt_waitall(t->cross, q, nq, "allgather(hier)")));
    }
    dt_shm_range *rg;
    DT_TRY(chunk_ranges(c, count, p, t->lindex, &rg));
    st = dt_shm_allgather(t->shm, c, buf, rg, p, what);
fn_exit:
    return st;
}

dt_status dt_bcast_shm(dt_comm *c, void *buf, size_t bytes, int root) {
    dt_topo *t;
    dt_status st = need_shm(c, "bcast(shm)", true, &t);
    return st ? st : dt_shm_bcast(t->shm, c, buf, bytes, root, "bcast(shm)");
}
