/* Rabenseifner all-reduce: recursive-halving reduce-scatter followed by a
 * recursive-doubling all-gather (Thakur, Rabenseifner & Gropp 2005; MPICH
 * allreduce_intra_reduce_scatter_allgather.c).
 *
 * p ranks, p' = 2^floor(lg p), n bytes:
 *   Cost (p = p') = 2.lg p.alpha + 2n.(p-1)/p.beta + n.(p-1)/p.gamma
 *   otherwise add 2.alpha + 2n.beta + n.gamma for the fold-in and hand-back.
 * The ring's bandwidth with lg p instead of p-1 latency terms: medium messages.
 *
 * Non-power-of-two: the first 2*rem ranks (rem = p - p') pair up (2i, 2i+1); the
 * even one adds its vector into the odd one and sits out, the odd one takes part
 * as new rank i; ranks >= 2*rem are new rank r - rem. At the end each odd one
 * hands the result back to its even partner.
 *
 * Halving: the vector is cut into p' blocks (the partition convention over p');
 * at distance d = p'/2, ..., 1 a rank keeps the half of its window of blocks
 * chosen by bit d of its new rank, sends the other half to new rank ^ d and adds
 * what it gets. It ends owning block (new rank). Each transfer is segmented by
 * max_segment: the receive of segment j+1 is posted before segment j is added.
 * Doubling: at d = 1, 2, ..., p'/2 partners swap their windows, received in place.
 *
 * Determinism: each element of block b is reduced by one rank only, in an order
 * fixed by p, and the all-gather copies those bits, so every rank (and every run
 * with this layout) ends with identical bits. */
#include "comm/comm_internal.h"

static const char *const WHAT = "allreduce(rhd)";

/* Sends ns floats from sbuf to peer while receiving nr floats from peer and
 * adding them into dst (sbuf and dst must not overlap). Both sides cut their
 * messages into max_segment pieces the same way, so piece j meets piece j. */
static dt_status exchange_reduce(dt_comm *c, int peer, const float *sbuf, size_t ns, float *dst, size_t nr) {
    dt_status st = DT_OK;
    const size_t seg = dt_seg_elems(c, sizeof(float));
    const size_t nsend = (ns + seg - 1) / seg, nrecv = (nr + seg - 1) / seg;
    dt_req *sreq = NULL, rreq[2];
    float *tmp = NULL;
    DT_TRY(dt_comm_reqs(c, nsend ? nsend : 1, &sreq));
    DT_TRY(dt_comm_scratch(c, 2 * seg, &tmp));

    /* Phase 1: post the first receive, then every send (the data is final). */
    if (nrecv) DT_TRY(dt_irecv(c, tmp, (nr < seg ? nr : seg) * sizeof(float), peer, DT_TAG_RHD, &rreq[0]));
    for (size_t j = 0; j < nsend; j++) {
        size_t n = ns - j * seg < seg ? ns - j * seg : seg;
        DT_TRY(dt_isend(c, sbuf + j * seg, n * sizeof(float), peer, DT_TAG_RHD, &sreq[j]));
    }

    /* Phase 2: receive piece j, post piece j+1 into the other buffer, add piece j. */
    for (size_t j = 0; j < nrecv; j++) {
        size_t n = nr - j * seg < seg ? nr - j * seg : seg;
        DT_TRY(dt_waitall(c, &rreq[j % 2], 1, WHAT));
        if (j + 1 < nrecv) {
            size_t n1 = nr - (j + 1) * seg < seg ? nr - (j + 1) * seg : seg;
            DT_TRY(dt_irecv(c, tmp + ((j + 1) % 2) * seg, n1 * sizeof(float), peer, DT_TAG_RHD,
                            &rreq[(j + 1) % 2]));
        }
        dt_reduce_add_f32(dst + j * seg, tmp + (j % 2) * seg, n);
    }

    /* Phase 3: the sends. */
    DT_TRY(dt_waitall(c, sreq, (int)nsend, WHAT));
fn_exit:
    return st;
}

/* Swaps windows with peer: ns floats out of sbuf, nr floats into rbuf. */
static dt_status exchange_copy(dt_comm *c, int peer, const float *sbuf, size_t ns, float *rbuf, size_t nr) {
    dt_req q[2] = {{.done = true}, {.done = true}};
    dt_status st = DT_OK;
    if (nr) DT_TRY(dt_irecv(c, rbuf, nr * sizeof(float), peer, DT_TAG_RHD, &q[0]));
    if (ns) DT_TRY(dt_isend(c, sbuf, ns * sizeof(float), peer, DT_TAG_RHD, &q[1]));
    DT_TRY(dt_waitall(c, q, 2, WHAT));
fn_exit:
    return st;
}

dt_status dt_allreduce_rhd(dt_comm *c, float *buf, size_t count, dt_reduce_op op) {
    dt_status st = DT_OK;
    const int p = c->size, r = c->rank;
    int pof2 = 1;
    while (pof2 * 2 <= p) pof2 *= 2;
    const int rem = p - pof2;
    int newrank;
#define REAL(nr_) ((nr_) < rem ? 2 * (nr_) + 1 : (nr_) + rem)
#define OFF(b_) dt_chunk_off(count, pof2, (b_))

    /* Phase 1: fold the first 2*rem ranks pairwise. */
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            DT_TRY(exchange_reduce(c, r + 1, buf, count, NULL, 0));
            newrank = -1;
        } else {
            DT_TRY(exchange_reduce(c, r - 1, NULL, 0, buf, count));
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }

    if (newrank >= 0) {
        /* Phase 2: recursive halving; the window of blocks [lo, lo + 2d) halves each step. */
        int lo = 0;
        for (int d = pof2 / 2; d >= 1; d /= 2) {
            int peer = REAL(newrank ^ d);
            int keep = (newrank & d) ? lo + d : lo, give = (newrank & d) ? lo : lo + d;
            DT_TRY(exchange_reduce(c, peer, buf + OFF(give), OFF(give + d) - OFF(give), buf + OFF(keep),
                                   OFF(keep + d) - OFF(keep)));
            lo = keep;
        }
        DT_ASSERT(lo == newrank);

        /* Phase 3: AVG scales the owned block once, before it is copied. */
        if (op == DT_OP_AVG)
            dt_scale_f32(buf + OFF(newrank), OFF(newrank + 1) - OFF(newrank), 1.0f / (float)p);

        /* Phase 4: recursive doubling all-gather; windows of d blocks, aligned. */
        for (int d = 1; d < pof2; d *= 2) {
            int partner = newrank ^ d;
            int mine = newrank & ~(d - 1), theirs = partner & ~(d - 1);
            DT_TRY(exchange_copy(c, REAL(partner), buf + OFF(mine), OFF(mine + d) - OFF(mine), buf + OFF(theirs),
                                 OFF(theirs + d) - OFF(theirs)));
        }
    }

    /* Phase 5: hand the result back to the ranks that sat out. */
    if (r < 2 * rem) {
        if (r % 2 == 0) DT_TRY(exchange_copy(c, r + 1, NULL, 0, buf, count));
        else DT_TRY(exchange_copy(c, r - 1, buf, count, NULL, 0));
    }
#undef REAL
#undef OFF
fn_exit:
    return st;
}
