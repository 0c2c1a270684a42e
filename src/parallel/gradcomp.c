/* Compressed gradient collectives with error feedback. See
 * include/dtrain/gradcomp.h for the semantics. */
#include "dtrain/gradcomp.h"
#include "dtrain/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Tags of our own: never matched by another collective's messages. */
enum { TAG_GATHER = 0x7e10, TAG_A2A = 0x7e11, TAG_CHUNKS = 0x7e12 };

struct dt_gc {
    dt_gc_cfg cfg;
    bool ef_on;
    const dt_model *m;
    int rank, size;
    size_t max_floats;
    float *ef;               /* m->n floats, or NULL */
    float *tmp;              /* max_floats: decoded encodings, EF scratch */
    float *sum;              /* max_floats: the running sum */
    uint8_t *enc;            /* this rank's encodings (size of them for the all-to-all) */
    size_t enc_cap;
    uint8_t *recv;           /* everyone's encodings */
    size_t recv_cap;
    size_t *sizes;           /* size x size byte counts */
    size_t *offs;            /* 2 x (size + 1) offsets */
    double *sizes_f;
    dt_req *reqs;
    /* PowerSGD */
    float *q;                /* the Q matrices, concatenated */
    size_t nq;
    size_t *q_off;           /* per parameter: offset in q, or SIZE_MAX (sent exactly) */
    float *pq;               /* P's (or Q's) + exact floats of one range */
    size_t pq_cap;
    dt_gc_stats stats;
};

bool dt_gc_ef_default(dt_comp_kind k) {
    return k == DT_COMP_INT8 || k == DT_COMP_TOPK || k == DT_COMP_SIGN || k == DT_COMP_POWERSGD;
}

bool dt_gc_cfg_uses_ef(const dt_gc_cfg *c) {
    return c->comp.kind != DT_COMP_NONE && (c->error_feedback < 0 ? dt_gc_ef_default(c->comp.kind) : c->error_feedback != 0);
}

static int psgd_rank(const dt_gc *gc, const dt_param *p, size_t *rows, size_t *cols) {
    if (p->ndim < 2) return 0;
    size_t m = (size_t)p->shape[0], n = p->numel / m;
    size_t r = (size_t)gc->cfg.comp.rank;
    if (r > m) r = m;
    if (r > n) r = n;
    if (r * (m + n) >= m * n) return 0; /* no gain: sent exactly */
    *rows = m;
    *cols = n;
    return (int)r;
}

dt_status dt_gc_create(dt_gc **out, const dt_gc_cfg *cfg, const dt_model *m, int rank, int size,
                       size_t max_floats) {
    *out = NULL;
    dt_gc *gc = dt_calloc(1, sizeof *gc);
    if (!gc) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    gc->cfg = *cfg;
    gc->ef_on = dt_gc_cfg_uses_ef(cfg);
    gc->m = m;
    gc->rank = rank;
    gc->size = size;
    gc->max_floats = max_floats ? max_floats : 1;
    bool ok = true;
    if (gc->ef_on) ok &= (gc->ef = dt_alloc_floats(m->n ? m->n : 1)) != NULL;
    if (ok && gc->ef) memset(gc->ef, 0, m->n * sizeof(float));
    ok &= (gc->tmp = dt_alloc_floats(gc->max_floats)) != NULL;
    ok &= (gc->sum = dt_alloc_floats(gc->max_floats)) != NULL;
    ok &= (gc->sizes = dt_calloc((size_t)size * (size_t)size, sizeof(size_t))) != NULL;
    ok &= (gc->offs = dt_calloc(2 * (size_t)size + 2, sizeof(size_t))) != NULL;
    ok &= (gc->sizes_f = dt_calloc((size_t)size * (size_t)size, sizeof(double))) != NULL;
    ok &= (gc->reqs = dt_calloc(2 * (size_t)size + 2, sizeof(dt_req))) != NULL;
    if (ok && cfg->comp.kind == DT_COMP_POWERSGD) {
        ok &= (gc->q_off = dt_calloc((size_t)m->n_params + 1, sizeof(size_t))) != NULL;
        for (int i = 0; ok && i < m->n_params; i++) {
            size_t rows, cols;
            int r = psgd_rank(gc, &m->params[i], &rows, &cols);
            gc->q_off[i] = r ? gc->nq : SIZE_MAX;
            gc->nq += r ? cols * (size_t)r : 0;
        }
        ok &= (gc->q = dt_alloc_floats(gc->nq ? gc->nq : 1)) != NULL;
        /* The first Q: standard normal, the same on every rank (seeded per tensor). */
        for (int i = 0; ok && i < m->n_params; i++) {
            if (gc->q_off[i] == SIZE_MAX) continue;
            size_t rows, cols;
            int r = psgd_rank(gc, &m->params[i], &rows, &cols);
            dt_rng rng;
            dt_rng_init(&rng, cfg->seed ^ 0x9057d5eedull, (uint64_t)i);
            for (size_t j = 0; j < cols * (size_t)r; j++) gc->q[gc->q_off[i] + j] = dt_rng_normal(&rng);
        }
    }
    if (!ok) {
        dt_gc_destroy(gc);
        return dt_errorf(DT_ERR_NOMEM, "out of memory for gradient compression buffers");
    }
    *out = gc;
    return DT_OK;
}

void dt_gc_destroy(dt_gc *gc) {
    if (!gc) return;
    dt_free(gc->ef);
    dt_free(gc->tmp);
    dt_free(gc->sum);
    dt_free(gc->enc);
    dt_free(gc->recv);
    dt_free(gc->sizes);
    dt_free(gc->sizes_f);
    dt_free(gc->offs);
    dt_free(gc->reqs);
    dt_free(gc->q);
    dt_free(gc->q_off);
    dt_free(gc->pq);
    dt_free(gc);
}

bool dt_gc_uses_ef(const dt_gc *gc) { return gc->ef_on; }
float *dt_gc_error(dt_gc *gc) { return gc->ef; }
size_t dt_gc_params(const dt_gc *gc) { return gc->m->n; }
size_t dt_gc_bytes(const dt_gc *gc) {
    size_t floats = (gc->ef ? gc->m->n : 0) + 2 * gc->max_floats + (gc->q ? gc->nq : 0);
    return floats * sizeof(float) + gc->enc_cap + gc->recv_cap + gc->pq_cap;
}
float *dt_gc_powersgd_q(dt_gc *gc, size_t *n) {
    *n = gc->nq;
    return gc->q;
}

void dt_gc_take_stats(dt_gc *gc, dt_gc_stats *s) {
    *s = gc->stats;
    memset(&gc->stats, 0, sizeof gc->stats);
}

static bool grow(void **p, size_t *cap, size_t want) {
    if (*cap >= want) return true;
    dt_free(*p);
    *p = dt_malloc(want ? want : 1);
    *cap = *p ? want : 0;
    return *p != NULL;
}

/* Encodes x[0..n) (with error feedback on ef[0..n) when on) into out. */
static size_t encode(dt_gc *gc, const float *x, float *ef, size_t n, uint8_t *out, uint64_t stream) {
    dt_rng rng;
    dt_rng_init(&rng, gc->cfg.seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(gc->rank + 1)), stream);
    size_t b = ef ? dt_comp_encode_ef(&gc->cfg.comp, x, ef, n, out, gc->tmp, &rng)
                  : dt_comp_encode(&gc->cfg.comp, x, n, out, &rng);
    return b;
}

/* The codecs with a scale per segment (int8, sign) are applied tensor by
 * tensor, so no segment mixes two tensors, and only to tensors of two or more
 * dimensions: vectors (biases, LayerNorm) are sent exactly (they are a tiny
 * share of the bytes) and the arena's alignment padding not at all. Scaled
 * sign + error feedback diverged without this: flat directions (padding, the
 * softmax bias's common mode) kept residuals that inflated the shared scale,
 * and the bias beside them was kicked by it every step. */
static bool per_tensor(const dt_gc *gc) { return gc->cfg.comp.kind == DT_COMP_INT8 || gc->cfg.comp.kind == DT_COMP_SIGN; }

typedef enum { PIECE_GAP, PIECE_RAW, PIECE_CODEC } piece_kind;

/* The piece of [a, hi) that starts at a: its end and kind. */
static size_t piece_at(const dt_gc *gc, size_t a, size_t hi, piece_kind *kind) {
    const dt_model *m = gc->m;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        if (p->offset + p->numel <= a) continue;
        if (p->offset > a) { /* padding before the next tensor */
            *kind = PIECE_GAP;
            return p->offset < hi ? p->offset : hi;
        }
        *kind = p->ndim >= 2 ? PIECE_CODEC : PIECE_RAW;
        return p->offset + p->numel < hi ? p->offset + p->numel : hi;
    }
    *kind = PIECE_GAP;
    return hi;
}

static size_t piece_bytes(const dt_gc *gc, piece_kind k, size_t n) {
    return k == PIECE_GAP ? 0 : k == PIECE_RAW ? 4 * n : dt_comp_max_bytes(&gc->cfg.comp, n);
}

static size_t range_max_bytes(const dt_gc *gc, size_t lo, size_t hi) {
    if (!per_tensor(gc)) return dt_comp_max_bytes(&gc->cfg.comp, hi - lo);
    size_t b = 0;
    for (size_t a = lo; a < hi;) {
        piece_kind k;
        size_t e = piece_at(gc, a, hi, &k);
        b += piece_bytes(gc, k, e - a);
        a = e;
    }
    return b;
}

static size_t encode_range(dt_gc *gc, const float *g, size_t lo, size_t hi, uint8_t *out, uint64_t stream) {
    size_t w = 0;
    if (!per_tensor(gc)) {
        w = encode(gc, g + lo, gc->ef ? gc->ef + lo : NULL, hi - lo, out, stream);
    } else {
        uint64_t piece = 0;
        for (size_t a = lo; a < hi; piece++) {
            piece_kind k;
            size_t e = piece_at(gc, a, hi, &k);
            if (k == PIECE_RAW) memcpy(out + w, g + a, 4 * (e - a));
            if (k == PIECE_CODEC) w += encode(gc, g + a, gc->ef ? gc->ef + a : NULL, e - a, out + w, stream * 4096 + piece);
            else w += piece_bytes(gc, k, e - a);
            a = e;
        }
    }
    gc->stats.raw_bytes += 4 * (hi - lo);
    gc->stats.payload_bytes += w;
    return w;
}

/* sum[0..hi-lo) += decode(in), in holding the encoding of arena range [lo, hi). */
static dt_status decode_add(dt_gc *gc, const uint8_t *in, size_t bytes, float *sum, size_t lo, size_t hi, int from) {
    dt_status st = DT_OK;
    if (!per_tensor(gc)) {
        st = dt_comp_decode(&gc->cfg.comp, in, bytes, gc->tmp, hi - lo);
    } else {
        size_t r = 0;
        for (size_t a = lo; a < hi && !st;) {
            piece_kind k;
            size_t e = piece_at(gc, a, hi, &k), b = piece_bytes(gc, k, e - a);
            if (r + b > bytes) st = dt_errorf(DT_ERR_FORMAT, "%zu bytes is short", bytes);
            else if (k == PIECE_GAP) memset(gc->tmp + (a - lo), 0, 4 * (e - a));
            else if (k == PIECE_RAW) memcpy(gc->tmp + (a - lo), in + r, b);
            else st = dt_comp_decode(&gc->cfg.comp, in + r, b, gc->tmp + (a - lo), e - a);
            r += b;
            a = e;
        }
        if (!st && r != bytes) st = dt_errorf(DT_ERR_FORMAT, "%zu bytes where %zu were expected", bytes, r);
    }
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", dt_error_msg()); /* dt_errorf writes the buffer it would read */
        return from < 0 ? dt_errorf(st, "compressed gradient: %s", why)
                        : dt_errorf(st, "compressed gradient from rank %d: %s", from, why);
    }
    for (size_t i = 0; i < hi - lo; i++) sum[i] += gc->tmp[i];
    return DT_OK;
}

/* Everyone learns every rank's byte counts: sizes[r * size + j] = what rank r
 * sends to rank j (a sum of one-hot rows; counts are exact in doubles). Only
 * top-k's encodings vary in size; the others' follow from the ranges, which
 * spares a round trip per bucket: fill(r, j) gives them. */
static dt_status exchange_sizes(dt_gc *gc, dt_comm *c, size_t (*fill)(const dt_gc *, int, int, size_t, size_t),
                                size_t lo, size_t hi) {
    int p = gc->size;
    size_t np = (size_t)p * (size_t)p;
    if (gc->cfg.comp.kind != DT_COMP_TOPK) {
        for (int r = 0; r < p; r++)
            for (int j = 0; j < p; j++) gc->sizes[(size_t)r * (size_t)p + (size_t)j] = fill(gc, r, j, lo, hi);
        return DT_OK;
    }
    dt_status st = dt_allreduce_f64(c, gc->sizes_f, np);
    if (st) return st;
    for (size_t i = 0; i < np; i++) gc->sizes[i] = (size_t)gc->sizes_f[i];
    return DT_OK;
}

/* Fixed sizes: rank r's whole-range encoding (row 0), or its chunk j. */
static size_t whole_size(const dt_gc *gc, int r, int j, size_t lo, size_t hi) {
    (void)r;
    return j == 0 ? range_max_bytes(gc, lo, hi) : 0;
}
static size_t chunk_size(const dt_gc *gc, int r, int j, size_t lo, size_t hi) {
    (void)r;
    size_t co = lo + dt_chunk_off(hi - lo, gc->size, j);
    return range_max_bytes(gc, co, co + dt_chunk_len(hi - lo, gc->size, j));
}

/* ---- elementwise codecs ------------------------------------------------------ */

static dt_status gather_allreduce(dt_gc *gc, dt_comm *c, float *g, size_t lo, size_t hi, uint64_t stream) {
    int p = gc->size, me = gc->rank;
    size_t n = hi - lo, cap = range_max_bytes(gc, lo, hi);
    if (!grow((void **)&gc->enc, &gc->enc_cap, cap)) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    double t0 = dt_now();
    size_t mine = encode_range(gc, g, lo, hi, gc->enc, stream);
    double t1 = dt_now();
    gc->stats.encode_s += t1 - t0;
    memset(gc->sizes_f, 0, (size_t)p * (size_t)p * sizeof(double));
    gc->sizes_f[(size_t)me * (size_t)p] = (double)mine; /* column 0: rank r's encoding */
    dt_status st = exchange_sizes(gc, c, whole_size, lo, hi);
    if (st) return st;
    size_t total = 0, *off = gc->offs, *sz = gc->offs + p + 1;
    for (int r = 0; r < p; r++) {
        sz[r] = gc->sizes[(size_t)r * (size_t)p];
        off[r] = total;
        total += sz[r];
    }
    if (!grow((void **)&gc->recv, &gc->recv_cap, total)) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    memcpy(gc->recv + off[me], gc->enc, mine);
    /* Ring all-gather of variable-size blocks: at step s pass on block me - s. */
    int right = (me + 1) % p, left = (me + p - 1) % p;
    for (int s = 0; s < p - 1; s++) {
        int sb = (me - s + p) % p, rb = (me - s - 1 + 2 * p) % p;
        if ((st = dt_irecv(c, gc->recv + off[rb], sz[rb], left, TAG_GATHER, &gc->reqs[0]))) return st;
        if ((st = dt_isend(c, gc->recv + off[sb], sz[sb], right, TAG_GATHER, &gc->reqs[1]))) return st;
        if ((st = dt_waitall(c, gc->reqs, 2, "compressed all-gather"))) return st;
    }
    double t2 = dt_now();
    memset(gc->sum, 0, n * sizeof(float));
    for (int r = 0; r < p && !st; r++) st = decode_add(gc, gc->recv + off[r], sz[r], gc->sum, lo, hi, r);
    if (!st) memcpy(g + lo, gc->sum, n * sizeof(float));
    gc->stats.decode_s += dt_now() - t2;
    return st;
}

static dt_status a2a_reduce_scatter(dt_gc *gc, dt_comm *c, float *g, size_t lo, size_t hi, uint64_t stream) {
    int p = gc->size, me = gc->rank;
    size_t n = hi - lo, cap = 0;
    for (int j = 0; j < p; j++) {
        size_t co = lo + dt_chunk_off(n, p, j);
        cap += range_max_bytes(gc, co, co + dt_chunk_len(n, p, j));
    }
    if (!grow((void **)&gc->enc, &gc->enc_cap, cap)) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    double t0 = dt_now();
    size_t *eoff = gc->offs, *roff = gc->offs + p + 1;
    memset(gc->sizes_f, 0, (size_t)p * (size_t)p * sizeof(double));
    eoff[0] = 0;
    for (int j = 0; j < p; j++) {
        size_t co = lo + dt_chunk_off(n, p, j), cl = dt_chunk_len(n, p, j);
        size_t b = encode_range(gc, g, co, co + cl, gc->enc + eoff[j], stream * 1024 + (uint64_t)j);
        gc->sizes_f[(size_t)me * (size_t)p + (size_t)j] = (double)b;
        eoff[j + 1] = eoff[j] + b;
    }
    gc->stats.encode_s += dt_now() - t0;
    dt_status st = exchange_sizes(gc, c, chunk_size, lo, hi);
    if (st) return st;
    size_t total = 0;
    for (int r = 0; r < p; r++) {
        roff[r] = total;
        total += gc->sizes[(size_t)r * (size_t)p + (size_t)me];
    }
    if (!grow((void **)&gc->recv, &gc->recv_cap, total)) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    memcpy(gc->recv + roff[me], gc->enc + eoff[me], eoff[me + 1] - eoff[me]);
    int nr = 0;
    for (int r = 0; r < p && !st; r++) {
        if (r == me) continue;
        st = dt_irecv(c, gc->recv + roff[r], gc->sizes[(size_t)r * (size_t)p + (size_t)me], r, TAG_A2A, &gc->reqs[nr++]);
    }
    for (int j = 0; j < p && !st; j++) {
        if (j == me) continue;
        st = dt_isend(c, gc->enc + eoff[j], eoff[j + 1] - eoff[j], j, TAG_A2A, &gc->reqs[nr++]);
    }
    if (!st) st = dt_waitall(c, gc->reqs, nr, "compressed reduce-scatter");
    if (st) return st;
    double t1 = dt_now();
    size_t co = lo + dt_chunk_off(n, p, me), cl = dt_chunk_len(n, p, me);
    memset(gc->sum, 0, cl * sizeof(float));
    for (int r = 0; r < p && !st; r++)
        st = decode_add(gc, gc->recv + roff[r], gc->sizes[(size_t)r * (size_t)p + (size_t)me], gc->sum, co, co + cl, r);
    if (!st) memcpy(g + co, gc->sum, cl * sizeof(float));
    gc->stats.decode_s += dt_now() - t1;
    return st;
}

/* fp16/bf16 all-reduce: the all-to-all reduce-scatter above, then a ring
 * all-gather of every rank's summed chunk cast again (2 bytes per value): the
 * traffic of a ring all-reduce, 2(p-1)/p of the 16-bit size, each
 * contribution rounded once and each sum once; every rank takes the chunks
 * (its own too) from the same 16-bit words, so all hold the same bits. */
static dt_status half_allreduce(dt_gc *gc, dt_comm *c, float *g, size_t lo, size_t hi, uint64_t stream) {
    dt_status st = a2a_reduce_scatter(gc, c, g, lo, hi, stream);
    if (st) return st;
    int p = gc->size, me = gc->rank;
    size_t n = hi - lo;
    /* 2 bytes per value: chunk r's words at 2 * chunk offset. */
    if (!grow((void **)&gc->recv, &gc->recv_cap, 2 * n)) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    double t0 = dt_now();
    size_t co = dt_chunk_off(n, p, me), cl = dt_chunk_len(n, p, me);
    gc->stats.payload_bytes += dt_comp_encode(&gc->cfg.comp, g + lo + co, cl, gc->recv + 2 * co, NULL);
    gc->stats.raw_bytes += 4 * cl; /* the all-gather phase, as an fp32 ring would send it */
    gc->stats.encode_s += dt_now() - t0;
    int right = (me + 1) % p, left = (me + p - 1) % p;
    for (int s = 0; s < p - 1 && !st; s++) {
        int sb = (me - s + p) % p, rb = (me - s - 1 + 2 * p) % p;
        if ((st = dt_irecv(c, gc->recv + 2 * dt_chunk_off(n, p, rb), 2 * dt_chunk_len(n, p, rb), left, TAG_CHUNKS, &gc->reqs[0])))
            break;
        if ((st = dt_isend(c, gc->recv + 2 * dt_chunk_off(n, p, sb), 2 * dt_chunk_len(n, p, sb), right, TAG_CHUNKS, &gc->reqs[1])))
            break;
        st = dt_waitall(c, gc->reqs, 2, "compressed all-gather");
    }
    if (st) return st;
    double t1 = dt_now();
    st = dt_comp_decode(&gc->cfg.comp, gc->recv, 2 * n, g + lo, n);
    gc->stats.decode_s += dt_now() - t1;
    return st;
}

/* ---- PowerSGD ------------------------------------------------------------------ */

/* Modified Gram-Schmidt on the r columns of the row-major (rows x r) matrix P. */
static void orthonormalize(float *P, size_t rows, int r) {
    for (int j = 0; j < r; j++) {
        for (int k = 0; k < j; k++) {
            double d = 0;
            for (size_t i = 0; i < rows; i++) d += (double)P[i * (size_t)r + (size_t)k] * P[i * (size_t)r + (size_t)j];
            for (size_t i = 0; i < rows; i++) P[i * (size_t)r + (size_t)j] -= (float)d * P[i * (size_t)r + (size_t)k];
        }
        double nn = 0;
        for (size_t i = 0; i < rows; i++) nn += (double)P[i * (size_t)r + (size_t)j] * P[i * (size_t)r + (size_t)j];
        /* A zero column (a zero gradient) stays zero rather than becoming NaN. */
        float inv = nn > 1e-30 ? (float)(1.0 / sqrt(nn)) : 0.0f;
        for (size_t i = 0; i < rows; i++) P[i * (size_t)r + (size_t)j] *= inv;
    }
}

/* Parameter i in [lo, hi)? -1 if not; else its PowerSGD rank (0: sent exactly). */
static int range_matrix(const dt_gc *gc, int i, size_t lo, size_t hi, size_t *rows, size_t *cols) {
    const dt_param *p = &gc->m->params[i];
    if (p->offset < lo || p->offset + p->numel > hi) return -1;
    return gc->q_off[i] == SIZE_MAX ? 0 : psgd_rank(gc, p, rows, cols);
}

static dt_status powersgd_allreduce(dt_gc *gc, dt_comm *c, float *g, size_t lo, size_t hi, dt_algo algo) {
    const dt_model *m = gc->m;
    /* Layout of the first all-reduce: every matrix's P, then the exact floats. */
    size_t np = 0, nexact = 0, nqr = 0;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t rows, cols;
        int r = range_matrix(gc, i, lo, hi, &rows, &cols);
        if (r < 0) continue;
        if (r) {
            np += rows * (size_t)r;
            nqr += cols * (size_t)r;
        } else {
            nexact += p->numel;
        }
    }
    size_t want = (np + nexact > nqr ? np + nexact : nqr) * sizeof(float);
    if (!grow((void **)&gc->pq, &gc->pq_cap, want)) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    float *buf = gc->pq;
    /* M = g + e (in the residual, which then holds M until the end), P = M Q. */
    double t0 = dt_now();
    size_t po = 0, xo = np;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t rows, cols;
        int r = range_matrix(gc, i, lo, hi, &rows, &cols);
        if (r < 0) continue;
        if (!r) {
            memcpy(buf + xo, g + p->offset, p->numel * sizeof(float));
            xo += p->numel;
            continue;
        }
        float *M = g + p->offset;
        if (gc->ef) {
            float *e = gc->ef + p->offset;
            for (size_t j = 0; j < p->numel; j++) e[j] += M[j];
            M = e;
        }
        dt_sgemm(false, false, (int)rows, r, (int)cols, 1.0f, M, (int)cols, gc->q + gc->q_off[i], r, 0.0f, buf + po,
                 r);
        po += rows * (size_t)r;
    }
    gc->stats.raw_bytes += 4 * (hi - lo);
    gc->stats.payload_bytes += 4 * (np + nexact + nqr);
    double t1 = dt_now();
    gc->stats.encode_s += t1 - t0;
    dt_status st = dt_allreduce(c, buf, np + nexact, DT_OP_SUM, algo);
    if (st) return st;
    double t2 = dt_now();
    /* Exact floats back; P's orthonormalised; Q = M^T P into the warm-start Q. */
    po = 0;
    xo = np;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t rows, cols;
        int r = range_matrix(gc, i, lo, hi, &rows, &cols);
        if (r < 0) continue;
        if (!r) {
            memcpy(g + p->offset, buf + xo, p->numel * sizeof(float));
            xo += p->numel;
            continue;
        }
        orthonormalize(buf + po, rows, r);
        const float *M = gc->ef ? gc->ef + p->offset : g + p->offset;
        dt_sgemm(true, false, (int)cols, r, (int)rows, 1.0f, M, (int)cols, buf + po, r, 0.0f, gc->q + gc->q_off[i],
                 r);
        po += rows * (size_t)r;
    }
    /* The Q's of this range are contiguous in q (parameters in arena order). */
    size_t q_lo = SIZE_MAX;
    for (int i = 0; i < m->n_params && q_lo == SIZE_MAX; i++) {
        const dt_param *p = &m->params[i];
        if (p->offset >= lo && p->offset + p->numel <= hi && gc->q_off[i] != SIZE_MAX) q_lo = gc->q_off[i];
    }
    double t3 = dt_now();
    gc->stats.encode_s += t3 - t2;
    if (q_lo != SIZE_MAX && (st = dt_allreduce(c, gc->q + q_lo, nqr, DT_OP_SUM, algo))) return st;
    /* The result P Q^T; the residual keeps M - (P Q^T) / N. P's are still in buf. */
    double t4 = dt_now();
    po = 0;
    float inv_n = 1.0f / (float)gc->size;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t rows, cols;
        int r = range_matrix(gc, i, lo, hi, &rows, &cols);
        if (r < 0) continue;
        if (!r) continue;
        dt_sgemm(false, true, (int)rows, (int)cols, r, 1.0f, buf + po, r, gc->q + gc->q_off[i], r, 0.0f,
                 g + p->offset, (int)cols);
        if (gc->ef) {
            float *e = gc->ef + p->offset;
            const float *a = g + p->offset;
            for (size_t j = 0; j < p->numel; j++) e[j] -= a[j] * inv_n;
        }
        po += rows * (size_t)r;
    }
    gc->stats.decode_s += dt_now() - t4;
    return DT_OK;
}

/* ---- entry points ------------------------------------------------------------- */

size_t dt_gc_max_bytes(const dt_gc *gc, size_t lo, size_t hi) { return range_max_bytes(gc, lo, hi); }

size_t dt_gc_encode(dt_gc *gc, const float *g, size_t lo, size_t hi, uint8_t *out, uint64_t stream) {
    DT_ASSERT(hi - lo <= gc->max_floats && gc->cfg.comp.kind != DT_COMP_POWERSGD);
    double t0 = dt_now();
    size_t b = encode_range(gc, g, lo, hi, out, stream);
    gc->stats.encode_s += dt_now() - t0;
    return b;
}

dt_status dt_gc_decode(dt_gc *gc, const uint8_t *in, size_t bytes, float *out, size_t lo, size_t hi) {
    if (hi - lo > gc->max_floats) return dt_errorf(DT_ERR_INVALID, "compressed range of %zu floats over %zu", hi - lo, gc->max_floats);
    double t0 = dt_now();
    memset(out, 0, (hi - lo) * sizeof(float));
    dt_status st = decode_add(gc, in, bytes, out, lo, hi, -1);
    gc->stats.decode_s += dt_now() - t0;
    return st;
}

dt_status dt_gc_allreduce(dt_gc *gc, dt_comm *c, float *g, size_t lo, size_t hi, uint64_t stream, dt_algo algo) {
    if (hi - lo > gc->max_floats) return dt_errorf(DT_ERR_INVALID, "compressed collective of %zu floats over its %zu", hi - lo, gc->max_floats);
    if (gc->cfg.comp.kind == DT_COMP_POWERSGD) return powersgd_allreduce(gc, c, g, lo, hi, algo);
    if (gc->cfg.comp.kind == DT_COMP_FP16 || gc->cfg.comp.kind == DT_COMP_BF16)
        return half_allreduce(gc, c, g, lo, hi, stream);
    return gather_allreduce(gc, c, g, lo, hi, stream);
}

dt_status dt_gc_reduce_scatter(dt_gc *gc, dt_comm *c, float *g, size_t lo, size_t hi, uint64_t stream,
                               dt_algo algo) {
    if (hi - lo > gc->max_floats) return dt_errorf(DT_ERR_INVALID, "compressed collective of %zu floats over its %zu", hi - lo, gc->max_floats);
    if (gc->cfg.comp.kind == DT_COMP_POWERSGD) return powersgd_allreduce(gc, c, g, lo, hi, algo);
    return a2a_reduce_scatter(gc, c, g, lo, hi, stream);
}
