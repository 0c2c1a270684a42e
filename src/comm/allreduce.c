/* All-reduce, in place: afterwards every rank's buf holds the reduction over
 * ranks of buf. This file is the dispatcher; each algorithm has its own file.
 *
 * p ranks, n bytes (alpha latency, beta per byte, gamma reduce per byte):
 *   rd     (allreduce_rd.c)    lg p.alpha + n.lg p.(beta + gamma)
 *   rhd    (allreduce_rhd.c)   2 lg p.alpha + 2n(p-1)/p.beta + n(p-1)/p.gamma
 *                              (+ 2n.beta + n.gamma when p is not a power of two)
 *   ring   (allreduce_ring.c)  2(p-1).alpha + 2n(p-1)/p.beta + n(p-1)/p.gamma
 *   shm, hier (hier.c)         shared memory inside a host, hierarchical across
 *                              hosts (costs there)
 *   native (native.c)          MPI_Allreduce, for comparison (no deadline)
 * AUTO picks by topology, size and p (auto.c). One rank or count 0: nothing moves.
 *
 * AVG is SUM followed by one multiplication by 1/size (rounded once to float),
 * applied by the algorithms to the reduced values before they are spread, so
 * every rank receives the same bits. This is not sum/size (a division) and not
 * an average accumulated in floating point as x_0/p + x_1/p + ...: the three
 * differ in the last bit; multiplying by 1/size is exact only for powers of two. */
#include "comm/comm_internal.h"

dt_status dt_allreduce(dt_comm *c, float *buf, size_t count, dt_reduce_op op, dt_algo algo) {
    dt_status st = dt_comm_usable(c, "allreduce");
    if (st) return st;
    if ((unsigned)algo >= DT_ALGO_COUNT) return dt_errorf(DT_ERR_INVALID, "allreduce: bad algorithm %d", (int)algo);
    if (count == 0 || c->size == 1) return DT_OK;
    if (algo == DT_ALGO_AUTO && (st = dt_auto_prepare(c))) return st;
    if (algo == DT_ALGO_AUTO) algo = dt_auto_allreduce(c, count * sizeof(float));
    switch (algo) {
    case DT_ALGO_RING: return dt_allreduce_ring(c, buf, count, op);
    case DT_ALGO_RHD: return dt_allreduce_rhd(c, buf, count, op);
    case DT_ALGO_RD: return dt_allreduce_rd(c, buf, count, op);
    case DT_ALGO_SHM: return dt_allreduce_shm(c, buf, count, op);
    case DT_ALGO_HIER: return dt_allreduce_hier(c, buf, count, op);
    case DT_ALGO_NATIVE: return dt_allreduce_native(c, buf, count, op);
    default: return dt_errorf(DT_ERR_INVALID, "allreduce: bad algorithm %d", (int)algo);
    }
}
