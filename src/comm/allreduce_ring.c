/* Ring all-reduce = ring reduce-scatter + ring all-gather (Patarasuk & Yuan 2009),
 * with every chunk cut into segments so one segment is in flight while the
 * previous one is reduced (gloo's allreduce_ring_chunked).
 *
 * p ranks, n bytes, alpha latency, beta time per byte, gamma reduce time per byte:
 *   Cost = 2(p-1).alpha + 2n.(p-1)/p.beta + n.(p-1)/p.gamma
 * bandwidth-optimal; the 2(p-1) latency term (times the segments per chunk) makes
 * it the choice for large vectors only.
 *
 * Chunks follow the partition convention of comm.h (chunk k = dt_chunk_off/len of
 * count over p), so rank r must end the reduce-scatter owning chunk r:
 *   reduce-scatter step s = 0..p-2: send chunk (r-1-s) mod p to r+1, receive
 *   chunk (r-2-s) mod p from r-1 and add it in. Step s sends what step s-1
 *   reduced, and the last step (s = p-2) receives chunk (r-p) mod p = r.
 *   all-gather step s = 0..p-2: send chunk (r-s) mod p (first our own), receive
 *   chunk (r-1-s) mod p straight into place; what arrives at step s leaves at s+1.
 * Each chunk k is cut into nseg segments (segment j = dt_chunk_off/len of the
 * chunk's length over nseg, the same nseg for every chunk, chosen so the longest
 * chunk's segments fit max_segment). Unit u = s*nseg + j is "segment j of step s";
 * the send of unit u (s >= 1) depends on unit u - nseg only, so sends are posted
 * as soon as that unit is reduced (or received), keeping the pipe full across steps.
 *
 * Determinism: chunk r is summed in the fixed ring order r+1, r+2, ..., r, and
 * the all-gather copies the owner's bits, so every rank ends with identical bits
 * and two runs with the same layout agree bitwise. */
#include "comm/comm_internal.h"

typedef struct {
    float *buf;
    size_t count, nseg;
    int p, r;
} ring_layout;

static int mod(int a, int p) { return ((a % p) + p) % p; }

static size_t seg_off(const ring_layout *L, int chunk, size_t j) {
    size_t len = dt_chunk_len(L->count, L->p, chunk);
    return dt_chunk_off(L->count, L->p, chunk) + dt_chunk_off(len, (int)L->nseg, (int)j);
}

static size_t seg_len(const ring_layout *L, int chunk, size_t j) {
    return dt_chunk_len(dt_chunk_len(L->count, L->p, chunk), (int)L->nseg, (int)j);
}

static dt_status ring_layout_init(const dt_comm *c, float *buf, size_t count, ring_layout *L) {
    L->buf = buf;
    L->count = count;
    L->p = c->size;
    L->r = c->rank;
    size_t longest = dt_chunk_len(count, c->size, 0), seg = dt_seg_elems(c, sizeof(float));
    L->nseg = longest ? (longest + seg - 1) / seg : 1;
    if (L->nseg > (size_t)INT32_MAX)
        return dt_errorf(DT_ERR_INVALID, "ring: %zu segments per chunk; raise the max segment", L->nseg);
    return DT_OK;
}

/* Posts the send of one segment (empty segments are skipped on both sides). */
static dt_status post_send(dt_comm *c, const ring_layout *L, int chunk, size_t j, int tag, dt_req *rq) {
    size_t n = seg_len(L, chunk, j);
    if (n == 0) {
        *rq = (dt_req){.done = true};
        return DT_OK;
    }
    return dt_isend(c, L->buf + seg_off(L, chunk, j), n * sizeof(float), (L->r + 1) % L->p, tag, rq);
}

static dt_status post_recv(dt_comm *c, const ring_layout *L, int chunk, size_t j, float *into, int tag,
                           dt_req *rq) {
    size_t n = seg_len(L, chunk, j);
    if (n == 0) {
        *rq = (dt_req){.done = true};
        return DT_OK;
    }
    return dt_irecv(c, into, n * sizeof(float), mod(L->r - 1, L->p), tag, rq);
}

dt_status dt_ring_reduce_scatter(dt_comm *c, float *buf, size_t count, const char *what) {
    dt_status st = DT_OK;
    ring_layout L;
    dt_req *sreq = NULL, rreq[2];
    float *tmp = NULL;
    size_t units = 0;
    if ((st = ring_layout_init(c, buf, count, &L))) return st;
    const int p = L.p, r = L.r;
    const size_t nseg = L.nseg, seg = dt_seg_elems(c, sizeof(float));
    units = (size_t)(p - 1) * nseg;
    DT_TRY(dt_comm_reqs(c, units, &sreq));
    DT_TRY(dt_comm_scratch(c, 2 * seg, &tmp));

    /* Phase 1: step 0's sends need nothing reduced; post them all. */
    for (size_t j = 0; j < nseg; j++) DT_TRY(post_send(c, &L, mod(r - 1, p), j, DT_TAG_RING_RS, &sreq[j]));
    DT_TRY(post_recv(c, &L, mod(r - 2, p), 0, tmp, DT_TAG_RING_RS, &rreq[0]));

    /* Phase 2: receive unit u, post unit u+1's receive into the other buffer,
     * reduce u, then send what u completed (unit u + nseg). */
    for (size_t u = 0; u < units; u++) {
        int s = (int)(u / nseg), chunk = mod(r - 2 - s, p);
        size_t j = u % nseg;
        float *in = tmp + (u % 2) * seg;
        DT_TRY(dt_waitall(c, &rreq[u % 2], 1, what));
        if (u + 1 < units) {
            int s1 = (int)((u + 1) / nseg);
            DT_TRY(post_recv(c, &L, mod(r - 2 - s1, p), (u + 1) % nseg, tmp + ((u + 1) % 2) * seg,
                             DT_TAG_RING_RS, &rreq[(u + 1) % 2]));
        }
        dt_reduce_add_f32(buf + seg_off(&L, chunk, j), in, seg_len(&L, chunk, j));
        if (u + nseg < units) DT_TRY(post_send(c, &L, chunk, j, DT_TAG_RING_RS, &sreq[u + nseg]));
    }

    /* Phase 3: the last sends. */
    DT_TRY(dt_waitall(c, sreq, (int)units, what));
fn_exit:
    /* On error the wait has cancelled what it could; requests not yet waited
     * for are left to MPI (the communicator is unusable after a timeout). */
    return st;
}

dt_status dt_ring_allgather(dt_comm *c, float *buf, size_t count, const char *what) {
    dt_status st = DT_OK;
    ring_layout L;
    dt_req *req = NULL;
    if ((st = ring_layout_init(c, buf, count, &L))) return st;
    const int p = L.p, r = L.r;
    const size_t nseg = L.nseg, units = (size_t)(p - 1) * nseg;
    DT_TRY(dt_comm_reqs(c, 2 * units, &req)); /* receives, then sends */
    dt_req *rreq = req, *sreq = req + units;

    /* Phase 1: every receive lands in place, so post them all; then our own chunk. */
    for (size_t u = 0; u < units; u++) {
        int chunk = mod(r - 1 - (int)(u / nseg), p);
        DT_TRY(post_recv(c, &L, chunk, u % nseg, buf + seg_off(&L, chunk, u % nseg), DT_TAG_RING_AG, &rreq[u]));
    }
    for (size_t j = 0; j < nseg; j++) DT_TRY(post_send(c, &L, r, j, DT_TAG_RING_AG, &sreq[j]));

    /* Phase 2: forward each segment as it arrives (unit u leaves as unit u + nseg). */
    for (size_t u = 0; u < units; u++) {
        DT_TRY(dt_waitall(c, &rreq[u], 1, what));
        if (u + nseg < units)
            DT_TRY(post_send(c, &L, mod(r - 1 - (int)(u / nseg), p), u % nseg, DT_TAG_RING_AG, &sreq[u + nseg]));
    }

    /* Phase 3: the last sends. */
    DT_TRY(dt_waitall(c, sreq, (int)units, what));
fn_exit:
    return st;
}

dt_status dt_allreduce_ring(dt_comm *c, float *buf, size_t count, dt_reduce_op op) {
    dt_status st = DT_OK;
    /* Phase 1: reduce-scatter, rank r owns chunk r. */
    DT_TRY(dt_ring_reduce_scatter(c, buf, count, "allreduce(ring)"));
    /* Phase 2: AVG scales the owned chunk once, before it is copied everywhere. */
    if (op == DT_OP_AVG)
        dt_scale_f32(buf + dt_chunk_off(count, c->size, c->rank), dt_chunk_len(count, c->size, c->rank),
                     1.0f / (float)c->size);
    /* Phase 3: all-gather. */
    DT_TRY(dt_ring_allgather(c, buf, count, "allreduce(ring)"));
fn_exit:
    return st;
}
