/* Broadcast of bytes from root along a binomial tree (MPICH bcast_intra_binomial.c).
 *
 * p ranks, n bytes:  Cost = ceil(lg p).(alpha + n.beta)
 * Relative rank v = (r - root) mod p receives from v - 2^k, where 2^k is v's
 * lowest set bit, then sends to v + 2^j for each j < k (largest first, so the
 * deepest subtree starts first). Large messages could use scatter + all-gather
 * (lg p.alpha + 2n.(p-1)/p.beta); at the rank counts of one machine the tree is
 * within a factor lg p of that and is what we use. Copies only, so every rank
 * ends with the root's bits. */
#include "comm/comm_internal.h"

dt_status dt_bcast(dt_comm *c, void *buf, size_t bytes, int root, dt_algo algo) {
    dt_status st = dt_comm_usable(c, "bcast");
    if (st) return st;
    if (root < 0 || root >= c->size)
        return dt_errorf(DT_ERR_INVALID, "bcast: root %d out of range [0, %d)", root, c->size);
    if ((unsigned)algo >= DT_ALGO_COUNT) return dt_errorf(DT_ERR_INVALID, "bcast: bad algorithm %d", (int)algo);
    if (bytes == 0 || c->size == 1) return DT_OK;
    if (algo == DT_ALGO_NATIVE) return dt_bcast_native(c, buf, bytes, root);
    /* AUTO: through shared memory when the topology is known already and
     * every rank is on one host (a broadcast never makes the topology: the
     * set-up of the shared segment itself broadcasts). */
    if ((algo == DT_ALGO_AUTO && c->topo && c->topo->shm_ok && c->topo->nhosts == 1) || algo == DT_ALGO_SHM)
        return dt_bcast_shm(c, buf, bytes, root);

    const int p = c->size, v = (c->rank - root + p) % p;
    int mask = 1;
    dt_req q;
    /* Phase 1: receive from the parent (the root has none). */
    while (mask < p) {
        if (v & mask) {
            int parent = (v - mask + root) % p;
            DT_TRY(dt_irecv(c, buf, bytes, parent, DT_TAG_BCAST, &q));
            DT_TRY(dt_waitall(c, &q, 1, "bcast(binomial)"));
            break;
        }
        mask <<= 1;
    }
    /* Phase 2: send to the children, all at once. */
    dt_req kids[32];
    int nkids = 0;
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (v + mask < p) DT_TRY(dt_isend(c, buf, bytes, (v + mask + root) % p, DT_TAG_BCAST, &kids[nkids++]));
    }
    DT_TRY(dt_waitall(c, kids, nkids, "bcast(binomial)"));
fn_exit:
    return st;
}
