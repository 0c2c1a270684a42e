/* Collectives through a host's shared-memory segment (shm.c): reduce-scatter,
 * all-reduce and all-gather over any assignment of the vector's ranges to
 * local ranks, and broadcast.
 *
 * The vector is a list of ranges, each owned by a local rank; an owner's
 * elements, its ranges in order, form its sequence. Work goes in rounds; round
 * k covers window k (w elements) of every owner's sequence, so each rank's
 * slot holds one window per owner (w = area / L; all-gather, which moves only
 * the owner's window, uses the whole area). In a round:
 *   A. each rank copies its elements of the other owners' windows into its
 *      own slot (reduce) or its own window (all-gather);          sync
 *   B. reduce: each rank sums its own window over the L slots in local-rank
 *      order, its own contribution read in place, into its buffer (and, for
 *      the all-reduce, into its part of the result area); all-gather: each
 *      rank copies the other owners' windows out of their slots;  sync
 *   C. all-reduce: each rank copies the other owners' sums out of the result
 *      area.
 * A rank writes its slot only in A and the result area only in B, and reads
 * slots only in B and the result area only in C, so the two sync points per
 * round are all the ordering needed, across rounds and calls.
 *
 * L local ranks, n bytes, ~area bytes per round: all-reduce moves (L-1)/L.n in
 * and (L-1)/L.n out per rank (plus the sum's n reads), 2 sync points per round,
 * no system call while the ranks keep pace; reduce-scatter and all-gather each
 * half of that. Sums run in local-rank order, so every rank gets the same bits.
 * What a rank writes for its peers to read counts as sent (dt_comm_bytes_sent). */
#include "comm/comm_internal.h"

#include <string.h>


typedef struct {
    dt_shm *s;
    dt_comm *c;           /* deadline, step and the broken flag for reports */
    float *buf;
    const dt_shm_range *rg;
    int nrg, L, me;
    size_t T[DT_SHM_MAX_LOCAL];  /* each owner's sequence length */
    size_t w;             /* window elements per owner */
} eng;

static size_t clampw(const eng *e, int owner, size_t v0) {
    size_t t = e->T[owner];
    return v0 >= t ? 0 : (t - v0 < e->w ? t - v0 : e->w);
}

/* Copies elements [v0, v0 + n) of owner's sequence between buf and area. */
static void seq_copy(const eng *e, int owner, size_t v0, size_t n, float *area, bool to_area) {
    size_t pos = 0; /* sequence position of the current range's start */
    for (int i = 0; i < e->nrg && n > 0; i++) {
        const dt_shm_range *r = &e->rg[i];
        if (r->owner != owner) continue;
        if (v0 < pos + r->len) {
            size_t a = v0 - pos, m = r->len - a < n ? r->len - a : n;
            float *b = e->buf + r->off + a;
            if (to_area) memcpy(area, b, m * sizeof(float));
            else memcpy(b, area, m * sizeof(float));
            if (to_area) e->c->bytes_sent += m * sizeof(float); /* what the peers read: the "wire" of a host */
            area += m;
            v0 += m;
            n -= m;
        }
        pos += r->len;
    }
}

/* Phase B of a reduction: this rank's window summed over the slots. */
static void reduce_own(eng *e, size_t v0, size_t n, float *res, float scale) {
    const float *src[DT_SHM_MAX_LOCAL];
    size_t pos = 0, woff = 0;
    for (int i = 0; i < e->nrg && n > 0; i++) {
        const dt_shm_range *r = &e->rg[i];
        if (r->owner != e->me) continue;
        if (v0 < pos + r->len) {
            size_t a = v0 - pos, m = r->len - a < n ? r->len - a : n;
            float *b = e->buf + r->off + a;
            for (int q = 0; q < e->L; q++)
                src[q] = q == e->me ? b : dt_shm_area(e->s, q) + (size_t)e->me * e->w + woff;
            dt_sum_sources_f32(b, res ? res + woff : NULL, src, e->L, m, scale);
            if (res) e->c->bytes_sent += m * sizeof(float);
            woff += m;
            v0 += m;
            n -= m;
        }
        pos += r->len;
    }
}

static dt_status eng_init(eng *e, dt_shm *s, dt_comm *c, float *buf, const dt_shm_range *rg, int nrg) {
    *e = (eng){.s = s, .c = c, .buf = buf, .rg = rg, .nrg = nrg, .L = dt_shm_size(s), .me = dt_shm_rank(s)};
    if (e->L > DT_SHM_MAX_LOCAL) return dt_errorf(DT_ERR_UNSUPPORTED, "shared memory: %d ranks on one host (at most %d)", e->L, DT_SHM_MAX_LOCAL);
    for (int i = 0; i < nrg; i++) e->T[rg[i].owner] += rg[i].len;
    return DT_OK;
}

static size_t rounds_of(const eng *e) {
    size_t most = 0;
    for (int q = 0; q < e->L; q++) most = e->T[q] > most ? e->T[q] : most;
    return (most + e->w - 1) / e->w;
}

dt_status dt_shm_reduce(dt_shm *s, dt_comm *c, float *buf, const dt_shm_range *rg, int nrg, bool all, float scale,
                        const char *what) {
    eng e;
    dt_status st = eng_init(&e, s, c, buf, rg, nrg);
    if (st) return st;
    e.w = dt_shm_area_floats(s) / (size_t)e.L / 16 * 16;
    float *mine = dt_shm_area(s, e.me), *res = dt_shm_area(s, e.L);
    for (size_t k = 0, R = rounds_of(&e); k < R; k++) {
        size_t v0 = k * e.w;
        for (int q = 0; q < e.L; q++)
            if (q != e.me) seq_copy(&e, q, v0, clampw(&e, q, v0), mine + (size_t)q * e.w, true);
        if ((st = dt_shm_sync(s, c, what))) return st;
        reduce_own(&e, v0, clampw(&e, e.me, v0), all ? res + (size_t)e.me * e.w : NULL, scale);
        if ((st = dt_shm_sync(s, c, what))) return st;
        for (int q = 0; all && q < e.L; q++)
            if (q != e.me) seq_copy(&e, q, v0, clampw(&e, q, v0), res + (size_t)q * e.w, false);
    }
    return DT_OK;
}

dt_status dt_shm_allgather(dt_shm *s, dt_comm *c, float *buf, const dt_shm_range *rg, int nrg, const char *what) {
    eng e;
    dt_status st = eng_init(&e, s, c, buf, rg, nrg);
    if (st) return st;
    e.w = dt_shm_area_floats(s);
    for (size_t k = 0, R = rounds_of(&e); k < R; k++) {
        size_t v0 = k * e.w;
        seq_copy(&e, e.me, v0, clampw(&e, e.me, v0), dt_shm_area(s, e.me), true);
        if ((st = dt_shm_sync(s, c, what))) return st;
        for (int q = 0; q < e.L; q++)
            if (q != e.me) seq_copy(&e, q, v0, clampw(&e, q, v0), dt_shm_area(s, q), false);
        if ((st = dt_shm_sync(s, c, what))) return st;
    }
    return DT_OK;
}

dt_status dt_shm_bcast(dt_shm *s, dt_comm *c, void *buf, size_t bytes, int root, const char *what) {
    size_t step = dt_shm_area_floats(s) * sizeof(float);
    unsigned char *b = buf, *slot = (unsigned char *)dt_shm_area(s, root);
    dt_status st = DT_OK;
    for (size_t off = 0; off < bytes && !st; off += step) {
        size_t m = bytes - off < step ? bytes - off : step;
        if (dt_shm_rank(s) == root) {
            memcpy(slot, b + off, m);
            c->bytes_sent += m;
        }
        if ((st = dt_shm_sync(s, c, what))) return st;
        if (dt_shm_rank(s) != root) memcpy(b + off, slot, m);
        st = dt_shm_sync(s, c, what);
    }
    return st;
}

/* The partition convention's chunks, chunk r owned by owner[r] (NULL: r). */
void dt_shm_chunks(dt_shm_range *rg, size_t count, int p, const int *owner) {
    for (int r = 0; r < p; r++)
        rg[r] = (dt_shm_range){.off = dt_chunk_off(count, p, r), .len = dt_chunk_len(count, p, r), .owner = owner ? owner[r] : r};
}
