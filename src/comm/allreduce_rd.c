/* Recursive-doubling all-reduce: at distance d = 1, 2, ..., p'/2 every rank swaps
 * its whole vector with rank ^ d and adds (MPICH allreduce_intra_recursive_doubling.c).
 * Also dt_allreduce_f64 (small double vectors: norms, counters, metrics).
 *
 * p ranks, p' = 2^floor(lg p), n bytes:
 *   Cost (p = p') = lg p.alpha + n.lg p.beta + n.lg p.gamma
 *   otherwise add 2.alpha + 2n.beta + n.gamma for the fold-in and hand-back.
 * Fewest latency terms, so it wins for small messages; the n.lg p terms lose to
 * ring and rhd once n is large.
 *
 * Non-power-of-two: as in allreduce_rhd.c, the first 2*rem ranks pair up, the
 * even one folds into the odd one and sits out, and gets the result at the end.
 *
 * Determinism: at every step both partners compute a + b of the same two
 * vectors, and IEEE addition is commutative, so they hold identical bits after
 * every step and every rank ends with the same bits (the folded ranks get a
 * copy); the order is fixed by p, so runs with one layout agree bitwise. */
#include "comm/comm_internal.h"

#include <string.h>

typedef void (*add_fn)(void *dst, const void *src, size_t n);

static void add_f32(void *dst, const void *src, size_t n) { dt_reduce_add_f32(dst, src, n); }

static void add_f64(void *restrict dst, const void *restrict src, size_t n) {
    double *d = dst;
    const double *s = src;
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}

/* Sends ns bytes and receives nr bytes into rbuf from peer, waiting for both. */
static dt_status swap(dt_comm *c, int peer, const void *sbuf, size_t ns, void *rbuf, size_t nr, int tag,
                      const char *what) {
    dt_req q[2] = {{.done = true}, {.done = true}};
    dt_status st = DT_OK;
    if (nr) DT_TRY(dt_irecv(c, rbuf, nr, peer, tag, &q[0]));
    if (ns) DT_TRY(dt_isend(c, sbuf, ns, peer, tag, &q[1]));
    DT_TRY(dt_waitall(c, q, 2, what));
fn_exit:
    return st;
}

/* The algorithm on count elements of esize bytes; tmp holds count elements. */
static dt_status rd_allreduce(dt_comm *c, void *buf, void *tmp, size_t count, size_t esize, add_fn add, int tag,
                              const char *what) {
    dt_status st = DT_OK;
    const int p = c->size, r = c->rank;
    const size_t bytes = count * esize;
    int pof2 = 1;
    while (pof2 * 2 <= p) pof2 *= 2;
    const int rem = p - pof2;
    int newrank;

    /* Phase 1: fold the first 2*rem ranks pairwise. */
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            DT_TRY(swap(c, r + 1, buf, bytes, NULL, 0, tag, what));
            newrank = -1;
        } else {
            DT_TRY(swap(c, r - 1, NULL, 0, tmp, bytes, tag, what));
            add(buf, tmp, count);
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }

    /* Phase 2: recursive doubling among the p' ranks left. */
    if (newrank >= 0) {
        for (int d = 1; d < pof2; d *= 2) {
            int partner = newrank ^ d;
            int peer = partner < rem ? 2 * partner + 1 : partner + rem;
            DT_TRY(swap(c, peer, buf, bytes, tmp, bytes, tag, what));
            add(buf, tmp, count);
        }
    }

    /* Phase 3: hand the result back to the ranks that sat out. */
    if (r < 2 * rem) {
        if (r % 2 == 0) DT_TRY(swap(c, r + 1, NULL, 0, buf, bytes, tag, what));
        else DT_TRY(swap(c, r - 1, buf, bytes, NULL, 0, tag, what));
    }
fn_exit:
    return st;
}

dt_status dt_allreduce_rd(dt_comm *c, float *buf, size_t count, dt_reduce_op op) {
    float *tmp;
    dt_status st = dt_comm_scratch(c, count, &tmp);
    if (!st) st = rd_allreduce(c, buf, tmp, count, sizeof(float), add_f32, DT_TAG_RD, "allreduce(rd)");
    /* AVG: every rank holds the same sum bits, so scaling locally stays identical. */
    if (!st && op == DT_OP_AVG) dt_scale_f32(buf, count, 1.0f / (float)c->size);
    return st;
}

dt_status dt_allreduce_f64(dt_comm *c, double *buf, size_t count) {
    dt_status st = dt_comm_usable(c, "allreduce_f64");
    if (st || count == 0 || c->size == 1) return st;
    size_t floats;
    if (!dt_size_mul(count, 2, &floats)) return dt_errorf(DT_ERR_NOMEM, "allreduce_f64: %zu doubles", count);
    float *tmp;
    if ((st = dt_comm_scratch(c, floats, &tmp))) return st;
    return rd_allreduce(c, buf, tmp, count, sizeof(double), add_f64, DT_TAG_F64, "allreduce_f64(rd)");
}
