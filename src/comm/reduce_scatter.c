/* Reduce-scatter, in place, partition convention of comm.h: afterwards chunk r
 * of buf on rank r holds the reduction over ranks of chunk r.
 *
 * ring (the ring all-reduce's first half, allreduce_ring.c):
 *   Cost = (p-1).alpha + n.(p-1)/p.beta + n.(p-1)/p.gamma   (n bytes, p ranks)
 * shm, hier: through shared memory inside a host, then a direct exchange
 *   across hosts (hier.c).
 * native: MPI_Reduce_scatter with per-rank counts.
 * rhd and rd have no reduce-scatter of their own with this block layout for
 * every p: rhd runs the ring, rd (small vectors, latency-bound) runs the whole
 * recursive-doubling all-reduce, lg p.alpha + n.lg p.(beta + gamma), and keeps
 * its chunk.
 *
 * AVG scales the owned chunk by 1/p after the sum (see dt_allreduce). */
#include "comm/comm_internal.h"

dt_status dt_reduce_scatter(dt_comm *c, float *buf, size_t count, dt_reduce_op op, dt_algo algo) {
    dt_status st = dt_comm_usable(c, "reduce_scatter");
    if (st || count == 0 || c->size == 1) return st;
    if ((unsigned)algo >= DT_ALGO_COUNT) return dt_errorf(DT_ERR_INVALID, "reduce_scatter: bad algorithm %d", (int)algo);
    if (algo == DT_ALGO_AUTO && (st = dt_auto_prepare(c))) return st;
    if (algo == DT_ALGO_AUTO) algo = dt_auto_reduce_scatter(c, count * sizeof(float));

    /* Phase 1: the reduction. */
    switch (algo) {
    case DT_ALGO_NATIVE: return dt_reduce_scatter_native(c, buf, count, op);
    case DT_ALGO_RD: return dt_allreduce_rd(c, buf, count, op);
    case DT_ALGO_SHM: return dt_reduce_scatter_topo(c, buf, count, op, true);
    case DT_ALGO_HIER: return dt_reduce_scatter_topo(c, buf, count, op, false);
    default: DT_TRY(dt_ring_reduce_scatter(c, buf, count, "reduce_scatter(ring)")); break;
    }

    /* Phase 2: AVG. */
    if (op == DT_OP_AVG)
        dt_scale_f32(buf + dt_chunk_off(count, c->size, c->rank), dt_chunk_len(count, c->size, c->rank),
                     1.0f / (float)c->size);
fn_exit:
    return st;
}
