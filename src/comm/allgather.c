/* All-gather, in place, partition convention of comm.h: chunk r of buf on rank r
 * is copied to chunk r of buf on every rank.
 *
 * ring (the ring all-reduce's second half, allreduce_ring.c, segmented):
 *   Cost = (p-1).alpha + n.(p-1)/p.beta   (n bytes in all, p ranks)
 * shm, hier: shared memory inside a host after a direct exchange across hosts
 * (hier.c). native: MPI_Allgatherv in place. rhd and rd map to the ring: recursive
 * doubling needs power-of-two aligned blocks, which the convention's chunks
 * are not for every p, and at these sizes the ring's bandwidth term is the one
 * that matters. Copies are bit-exact, so every rank ends with identical bits. */
#include "comm/comm_internal.h"

dt_status dt_allgather(dt_comm *c, float *buf, size_t count, dt_algo algo) {
    dt_status st = dt_comm_usable(c, "allgather");
    if (st || count == 0 || c->size == 1) return st;
    if ((unsigned)algo >= DT_ALGO_COUNT) return dt_errorf(DT_ERR_INVALID, "allgather: bad algorithm %d", (int)algo);
    if (algo == DT_ALGO_AUTO && (st = dt_auto_prepare(c))) return st;
    if (algo == DT_ALGO_AUTO) algo = dt_auto_allgather(c, count * sizeof(float));
    if (algo == DT_ALGO_NATIVE) return dt_allgather_native(c, buf, count);
    if (algo == DT_ALGO_SHM || algo == DT_ALGO_HIER) return dt_allgather_topo(c, buf, count, algo == DT_ALGO_SHM);
    return dt_ring_allgather(c, buf, count, "allgather(ring)");
}
