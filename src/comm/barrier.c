/* Barrier by dissemination (Hensgen, Finkel & Manber 1988): in round k = 0, 1, ...
 * rank r sends an empty message to r + 2^k and waits for one from r - 2^k.
 * After ceil(lg p) rounds every rank has heard, directly or not, from all.
 *
 * p ranks:  Cost = ceil(lg p).alpha
 * Works for any p (no power-of-two fix-up) and every wait has the deadline. */
#include "comm/comm_internal.h"

dt_status dt_barrier(dt_comm *c) {
    dt_status st = dt_comm_usable(c, "barrier");
    if (st || c->size == 1) return st;
    const int p = c->size, r = c->rank;
    for (int k = 1; k < p; k <<= 1) {
        dt_req q[2];
        DT_TRY(dt_irecv(c, NULL, 0, (r - k + p) % p, DT_TAG_BARRIER, &q[0]));
        DT_TRY(dt_isend(c, NULL, 0, (r + k) % p, DT_TAG_BARRIER, &q[1]));
        DT_TRY(dt_waitall(c, q, 2, "barrier(dissemination)"));
    }
fn_exit:
    return st;
}
