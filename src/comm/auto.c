/* AUTO: which of our algorithms serves an all-reduce of n bytes on p ranks.
 * Native MPI is never chosen: it has no deadline, and ours give bitwise
 * identical, reproducible results by construction.
 *
 * From the cost models (alpha latency, beta per byte, gamma reduce per byte):
 *   rd   lg p.alpha + n.lg p.(beta + gamma)            fewest messages
 *   rhd  2 lg p.alpha + 2n(p-1)/p.beta + n(p-1)/p.gamma (+2n.beta + n.gamma if p != 2^k)
 *   ring 2(p-1).alpha + 2n(p-1)/p.beta + n(p-1)/p.gamma
 * so rd for small n, rhd in the middle when p is a power of two (its fix-up
 * moves the whole vector twice otherwise), ring for large n.
 *
 * Measured here (`dtrain bench allreduce`, 2-core VM, mean us per call; the
 * machine was shared with other jobs at load 4-6 during the runs, so the
 * numbers are noisy and the thresholds are set where the ordering was stable):
 *   p=2   4K: ring 4.0 rhd 3.7 rd 3.6    8K: ring 6.7 rd 5.1
 *         at p = 2 rhd and ring are the same exchange; rd moves n (not n/2)
 *         each way and reduces all n: ring/rhd ahead from 16K-64K up.
 *   p=4   2K: ring 48 rhd 35 rd 18   8K: ring 232 rhd 37 rd 73
 *         16K-128K: rhd 94-167, rd 86-330, ring 87-323; 256K: rhd 473-510,
 *         rd 485-682, ring 601-634.
 *   p=3   4K-16K: rd 23-60, ring 33-65, rhd 49-129; 64K-512K: ring 321-1463,
 *         rhd 781-1720 (the fold-in costs), rd 616-1678; >= 1M ring ~ rhd.
 *   large (p=2, 64 MiB): ring 41-84 ms, rhd 40-82 ms, rd 51-89 ms.
 * Hence: rd up to 16 KiB; rhd up to 1 MiB when p is a power of two; else ring. */
#include "comm/comm_internal.h"

#define DT_AUTO_RD_MAX ((size_t)16 << 10)  /* <=: recursive doubling */
#define DT_AUTO_RHD_MAX ((size_t)1 << 20)  /* <=, p = 2^k: rhd; above: ring */

static bool pow2(int p) { return p > 0 && (p & (p - 1)) == 0; }

dt_status dt_auto_prepare(dt_comm *c) {
    dt_topo *t;
    return c->is_mpi && c->size > 1 ? dt_topo_get(c, &t) : DT_OK;
}

/* Shared memory when ranks share a host: shm on one host, hier across hosts. */
static dt_algo by_topology(const dt_comm *c) {
    const dt_topo *t = c->topo;
    if (!t || !t->shm_ok) return DT_ALGO_AUTO;
    return t->nhosts == 1 ? DT_ALGO_SHM : DT_ALGO_HIER;
}

dt_algo dt_auto_allreduce(const dt_comm *c, size_t bytes) {
    dt_algo a = by_topology(c);
    if (a != DT_ALGO_AUTO) return a;
    if (bytes <= DT_AUTO_RD_MAX) return DT_ALGO_RD;
    if (bytes <= DT_AUTO_RHD_MAX && pow2(c->size)) return DT_ALGO_RHD;
    return DT_ALGO_RING;
}

/* Reduce-scatter: rd (whole all-reduce, latency-bound) when small, else ring. */
dt_algo dt_auto_reduce_scatter(const dt_comm *c, size_t bytes) {
    dt_algo a = by_topology(c);
    if (a != DT_ALGO_AUTO && c->topo->even) return a;
    return bytes <= DT_AUTO_RD_MAX ? DT_ALGO_RD : DT_ALGO_RING;
}

dt_algo dt_auto_allgather(const dt_comm *c, size_t bytes) {
    (void)bytes;
    dt_algo a = by_topology(c);
    return a != DT_ALGO_AUTO && c->topo->even ? a : DT_ALGO_RING;
}
