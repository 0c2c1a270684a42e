/* Parameter server: the server loop and the worker client. See include/dtrain/ps.h.
 *
 * Messages, all on the world communicator:
 *   worker -> server  TAG_REQ   header {type, clock, read_clock, 0}
 *                     (PUSH_PULL, under BSP and SSP:0: a push that also asks
 *                     for step clock+1's values, so the pull is registered the
 *                     moment the push lands and no other worker's later push
 *                     can slip in between; the first pull, for start_clock, is
 *                     registered for every worker when the server starts:
 *                     SSP:0 then reads exactly what BSP reads. Under ASP and
 *                     SSP:K>0 the pull is asked for when the worker is about
 *                     to compute, so it reads the freshest values there are.)
 *   worker -> server  TAG_DATA  the range's gradient (after a PUSH header)
 *   server -> worker  TAG_REP   header {global clock, 0, 0, 0} then TAG_VAL the range's values
 *   server -> worker  TAG_BYE   at the end: int64[W], the clock each dropped worker was lost at, -1 others
 *   server -> rank 0  TAG_HIST, TAG_FINAL  the staleness histogram and the final range
 *   rank 0 -> all     TAG_RELEASE  after a run that lost workers: the outputs are written
 * A worker has at most one request of each kind outstanding per server, and MPI
 * keeps the order of messages between two ranks with the same tag. */
#include "dtrain/ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_REQ = 0x5100, TAG_DATA, TAG_REP, TAG_VAL, TAG_FINAL, TAG_ACK, TAG_BYE, TAG_HIST, TAG_RELEASE };
enum { REQ_PULL = 1, REQ_PUSH = 2, REQ_DONE = 3, REQ_CKPT = 4, REQ_PUSH_PULL = 5 };

typedef struct hdr {
    int64_t type, clock, read_clock, pad;
} hdr;

dt_status dt_ps_cfg_parse(const char *s, dt_ps_cfg *out) {
    if (strcmp(s, "bsp") == 0) out->mode = DT_PS_BSP;
    else if (strcmp(s, "asp") == 0) out->mode = DT_PS_ASP;
    else if (strncmp(s, "ssp:", 4) == 0) {
        char *end;
        long k = strtol(s + 4, &end, 10);
        if (end == s + 4 || *end || k < 0 || k > 1000000)
            return dt_errorf(DT_ERR_INVALID, "--consistency %s: ssp:K needs a staleness bound K >= 0", s);
        out->mode = DT_PS_SSP;
        out->staleness = (int)k;
    } else {
        return dt_errorf(DT_ERR_INVALID, "--consistency must be bsp, asp or ssp:K, got '%s'", s);
    }
    return DT_OK;
}

/* Whether pulls ride on the pushes before them (see the top of the file): where
 * the consistency model fixes what a pull reads, BSP and SSP:0. */
static bool pull_with_push(const dt_ps_cfg *cfg) {
    return cfg->mode == DT_PS_BSP || (cfg->mode == DT_PS_SSP && cfg->staleness == 0);
}

static void range_of(size_t n, int S, int s, size_t *lo, size_t *len) {
    *lo = dt_chunk_off(n, S, s);
    *len = dt_chunk_len(n, S, s);
}

static void nap(uint64_t *ns) {
    struct timespec ts = {0, (long)*ns};
    nanosleep(&ts, NULL);
    *ns = *ns * 2 > 200000 ? 200000 : *ns * 2;
}

/* ---- server ---------------------------------------------------------------------- */

typedef struct server {
    dt_model *m;
    dt_comm *c;
    dt_ps_cfg cfg;
    int W, me, n_active;
    dt_req *in_req;             /* per worker: the posted header receive */
    hdr *in_hdr;
    double *last;               /* per worker: dt_now() of the last message either way */
    int64_t *lost;              /* per worker: clock when dropped, -1 */
    size_t lo, len;
    dt_optim *opt;
    const dt_lr_sched *sched;
    int64_t *clock;             /* per worker: steps pushed */
    bool *active;
    int64_t *pending;           /* per worker: clock of a pull waiting, -1 none */
    float **outbuf;             /* per worker: snapshot being sent */
    dt_req *out_req;            /* per worker: 2 sends (header, values) */
    bool *out_busy;
    hdr *out_hdr;
    float *gin;                 /* receive buffer for one push */
    dt_gc *gc;                  /* compressed pushes: decoder (no error feedback), or NULL */
    uint8_t *ein;               /* its receive buffer */
    size_t ein_cap;
    float *bsp;                 /* BSP: (W, len) gradients of the current step */
    int64_t bsp_clock;
    int bsp_have;
    bool *bsp_got;
    float *agg_scratch, *agg_out;
    uint64_t *hist;
    int64_t *ck_clock;          /* per worker: clock of a checkpoint request, -1 none */
} server;

static int64_t global_clock(const server *sv) {
    int64_t g = INT64_MAX;
    for (int w = 0; w < sv->W; w++)
        if (sv->active[w] && sv->clock[w] < g) g = sv->clock[w];
    if (g == INT64_MAX) { /* every worker done: the furthest clock */
        g = 0;
        for (int w = 0; w < sv->W; w++) g = sv->clock[w] > g ? sv->clock[w] : g;
    }
    return g;
}

/* Applies gradient g (scaled by `scale`) to the server's range. */
static void apply(server *sv, const float *g, float scale, int64_t clock) {
    const dt_model *m = sv->m;
    float lr = dt_lr_at(sv->sched, clock) * scale;
    dt_optim_begin_step(sv->opt);
    size_t hi = sv->lo + sv->len;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t a = p->offset > sv->lo ? p->offset : sv->lo;
        size_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= e) continue;
        dt_optim_update(sv->opt, m->w + a, g + (a - sv->lo), a - sv->lo, e - a, lr,
                        p->decay ? sv->opt->cfg.weight_decay : 0.0f);
    }
}

static bool pull_ready(const server *sv, int64_t c) {
    int64_t g = global_clock(sv);
    switch (sv->cfg.mode) {
    case DT_PS_BSP: return g >= c;
    case DT_PS_SSP: return g >= c - sv->cfg.staleness;
    default: return true;
    }
}

static dt_status reply(server *sv, int w) {
    dt_status st = DT_OK;
    if (sv->out_busy[w]) {
        st = dt_waitall(sv->c, &sv->out_req[2 * w], 2, "parameter server reply");
        sv->out_busy[w] = false;
        if (st) return st;
    }
    memcpy(sv->outbuf[w], sv->m->w + sv->lo, sv->len * sizeof(float));
    sv->out_hdr[w] = (hdr){0, global_clock(sv), 0, 0};
    st = dt_isend(sv->c, &sv->out_hdr[w], sizeof(hdr), w, TAG_REP, &sv->out_req[2 * w]);
    if (!st) st = dt_isend(sv->c, sv->outbuf[w], sv->len * sizeof(float), w, TAG_VAL, &sv->out_req[2 * w + 1]);
    if (!st) sv->out_busy[w] = true;
    sv->pending[w] = -1;
    sv->last[w] = dt_now(); /* released: its silence counts from now */
    return st;
}

static void count_staleness(server *sv, int64_t read_clock) {
    int64_t s = global_clock(sv) - read_clock;
    if (s < 0) s = 0;
    sv->hist[s < DT_PS_HIST - 1 ? s : DT_PS_HIST - 1]++;
}

/* BSP: once every worker that will push this step has (a worker that finished
 * never will), aggregate the step's gradients (mean or robust) and apply once. */
static void try_apply_bsp(server *sv) {
    int expected = 0, W = sv->W;
    for (int k = 0; k < W; k++) expected += sv->active[k] || sv->bsp_got[k];
    if (sv->bsp_have == 0 || sv->bsp_have < expected) return;
    dt_agg a = sv->cfg.agg.kind == DT_AGG_NONE ? (dt_agg){.kind = DT_AGG_MEAN} : sv->cfg.agg;
    if (sv->bsp_have == W) {
        if (sv->cfg.tamper) sv->cfg.tamper(sv->cfg.tamper_ctx, sv->bsp, W, sv->len);
        dt_agg_apply(&a, sv->agg_out, sv->bsp, W, sv->len, sv->agg_scratch);
    } else {
        memset(sv->agg_out, 0, sv->len * sizeof(float));
        for (int k = 0; k < W; k++)
            if (sv->bsp_got[k])
                for (size_t j = 0; j < sv->len; j++) sv->agg_out[j] += sv->bsp[(size_t)k * sv->len + j] / (float)sv->bsp_have;
    }
    apply(sv, sv->agg_out, 1.0f, sv->bsp_clock);
    sv->bsp_clock++;
    sv->bsp_have = 0;
    memset(sv->bsp_got, 0, (size_t)W * sizeof(bool));
}

/* A checkpoint when every running worker asked for the same clock (each asked
 * after its last push before it, so that cut is applied), then release them. */
static dt_status try_checkpoint(server *sv) {
    int64_t c = -1;
    for (int w = 0; w < sv->W; w++) {
        if (!sv->active[w]) continue;
        if (sv->ck_clock[w] < 0 || (c >= 0 && sv->ck_clock[w] != c)) return DT_OK;
        c = sv->ck_clock[w];
    }
    if (c < 0) return DT_OK;
    dt_status st = sv->cfg.ckpt ? sv->cfg.ckpt(sv->cfg.ckpt_ctx, c, sv->lo, sv->len, sv->opt) : DT_OK;
    hdr ack = {0, c, 0, 0};
    for (int w = 0; w < sv->W && !st; w++) {
        if (!sv->active[w]) continue;
        dt_req r;
        st = dt_isend(sv->c, &ack, sizeof ack, w, TAG_ACK, &r);
        if (!st) st = dt_waitall(sv->c, &r, 1, "parameter server checkpoint");
        sv->ck_clock[w] = -1;
    }
    /* Messages may have waited while the files were written: nobody's silence
     * counts from before. */
    double now = dt_now();
    for (int w = 0; w < sv->W; w++) sv->last[w] = now;
    return st;
}

/* Drops worker w (ASP/SSP): it leaves the clock, the checkpoint barrier and the
 * workers the server waits for. What it had outstanding is given up; its reply
 * buffer stays allocated (dt_cancel). Worker 0 cannot be dropped. */
static dt_status drop_worker(server *sv, int w, const char *why) {
    sv->lost[w] = sv->clock[w];
    if (w == 0)
        return dt_errorf(DT_ERR_TIMEOUT,
                         "parameter server: worker 0 (rank 0, which writes the metrics, weights and checkpoints) is gone "
                         "(%s) at clock %lld; the run cannot finish without it",
                         why, (long long)sv->clock[0]);
    dt_cancel(sv->c, &sv->in_req[w], 1);
    if (sv->out_busy[w]) {
        dt_cancel(sv->c, &sv->out_req[2 * w], 2);
        sv->out_busy[w] = false;
        sv->outbuf[w] = NULL; /* MPI may still hold it: never freed */
    }
    sv->active[w] = false;
    sv->pending[w] = -1;
    sv->ck_clock[w] = -1;
    sv->n_active--;
    int left = 0;
    for (int k = 0; k < sv->W; k++) left += sv->lost[k] < 0;
    if (sv->me == 0)
        dt_log(DT_LOG_WARN, "parameter server: worker rank %d is lost (%s); its last clock was %lld; going on with %d of %d workers",
               dt_comm_world_rank(sv->c, w), why, (long long)sv->clock[w], left, sv->W);
    return try_checkpoint(sv);
}

/* Receives the gradient that follows a PUSH header. With a liveness limit a
 * worker that dies between header and data is dropped (*gone) instead of
 * failing the server. */
static dt_status recv_push(server *sv, int w, const hdr *h, bool *gone) {
    dt_req r;
    *gone = false;
    dt_status st;
    if (sv->gc) {
        /* Compressed: the header's last field is the encoding's size. */
        if (h->pad < 0 || (size_t)h->pad > sv->ein_cap)
            return dt_errorf(DT_ERR_COMM, "parameter server: worker %d announced a %lld-byte compressed push (at most %zu)", w,
                             (long long)h->pad, sv->ein_cap);
        st = dt_irecv(sv->c, sv->ein, (size_t)h->pad, w, TAG_DATA, &r);
    } else {
        st = dt_irecv(sv->c, sv->gin, sv->len * sizeof(float), w, TAG_DATA, &r);
    }
    if (st) return st;
    if (sv->cfg.liveness <= 0) {
        st = dt_waitall(sv->c, &r, 1, "parameter server push");
        if (!st && sv->gc) st = dt_gc_decode(sv->gc, sv->ein, (size_t)h->pad, sv->gin, sv->lo, sv->lo + sv->len);
        return st;
    }
    double t0 = dt_now();
    uint64_t ns = 2000;
    for (;;) {
        int k;
        if ((st = dt_testany(sv->c, &r, 1, &k))) {
            char why[320];
            snprintf(why, sizeof why, "its push failed: %s", dt_error_msg());
            dt_cancel(sv->c, &r, 1);
            *gone = true;
            return drop_worker(sv, w, why);
        }
        if (k == 0) return sv->gc ? dt_gc_decode(sv->gc, sv->ein, (size_t)h->pad, sv->gin, sv->lo, sv->lo + sv->len) : DT_OK;
        if (dt_now() - t0 > sv->cfg.liveness) {
            char why[128];
            snprintf(why, sizeof why, "its push stopped halfway for %.1f s", dt_now() - t0);
            dt_cancel(sv->c, &r, 1);
            *gone = true;
            return drop_worker(sv, w, why);
        }
        nap(&ns);
    }
}

static dt_status on_push(server *sv, int w, const hdr *h) {
    bool gone;
    dt_status st = recv_push(sv, w, h, &gone);
    if (st || gone) return st;
    sv->last[w] = dt_now();
    if (sv->cfg.mode == DT_PS_BSP) {
        /* Workers cannot run ahead under BSP, so every push is for bsp_clock. */
        if (h->clock != sv->bsp_clock || sv->bsp_got[w])
            return dt_errorf(DT_ERR_COMM, "parameter server: worker %d pushed step %lld during step %lld", w,
                             (long long)h->clock, (long long)sv->bsp_clock);
        memcpy(sv->bsp + (size_t)w * sv->len, sv->gin, sv->len * sizeof(float));
        sv->bsp_got[w] = true;
        sv->bsp_have++;
        count_staleness(sv, h->read_clock);
        sv->clock[w] = h->clock + 1;
        try_apply_bsp(sv);
    } else {
        count_staleness(sv, h->read_clock);
        apply(sv, sv->gin, 1.0f / (float)sv->W, h->clock);
        sv->clock[w] = h->clock + 1;
    }
    return DT_OK;
}

/* ASP/SSP: drops the workers silent past the liveness limit while the server
 * holds nothing of theirs (a held worker is waiting for the server, not gone). */
static dt_status check_liveness(server *sv) {
    if (sv->cfg.liveness <= 0) return DT_OK;
    double now = dt_now();
    dt_status st = DT_OK;
    for (int w = 0; w < sv->W && !st; w++) {
        if (!sv->active[w] || sv->pending[w] >= 0 || sv->ck_clock[w] >= 0) continue;
        if (now - sv->last[w] <= sv->cfg.liveness) continue;
        char why[128];
        snprintf(why, sizeof why, "silent for %.1f s, past the liveness limit of %.1f s", now - sv->last[w],
                 sv->cfg.liveness);
        st = drop_worker(sv, w, why);
    }
    return st;
}

/* Tells every worker still there which were dropped (the lost ones are not
 * waiting for it). */
static dt_status say_goodbye(server *sv) {
    dt_req *r = dt_calloc((size_t)sv->W, sizeof(dt_req));
    if (!r) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    dt_status st = DT_OK;
    int n = 0;
    for (int w = 0; w < sv->W && !st; w++)
        if (sv->lost[w] < 0) st = dt_isend(sv->c, sv->lost, (size_t)sv->W * sizeof(int64_t), w, TAG_BYE, &r[n++]);
    if (!st) st = dt_waitall(sv->c, r, n, "parameter server farewell");
    dt_free(r);
    return st;
}

dt_status dt_ps_serve(dt_model *m, dt_comm *world, const dt_ps_cfg *cfg, const dt_optim_cfg *ocfg,
                      const dt_lr_sched *sched, uint64_t hist[DT_PS_HIST], int64_t *lost) {
    int N = dt_comm_size(world), S = cfg->servers, W = N - S, me = dt_comm_rank(world) - W;
    server sv = {.m = m, .c = world, .cfg = *cfg, .W = W, .me = me, .sched = sched, .hist = hist};
    if (cfg->mode == DT_PS_BSP) sv.cfg.liveness = 0;
    if (cfg->agg.kind == DT_AGG_CCLIP) /* the trainer refuses it first, with the whole story */
        return dt_errorf(DT_ERR_INVALID, "parameter server: --aggregate cclip needs its centre checkpointed, which the servers do not do");
    range_of(m->n, S, me, &sv.lo, &sv.len);
    memset(hist, 0, DT_PS_HIST * sizeof(uint64_t));
    sv.in_req = dt_calloc((size_t)W, sizeof(dt_req));
    sv.in_hdr = dt_calloc((size_t)W, sizeof(hdr));
    sv.last = dt_calloc((size_t)W, sizeof(double));
    sv.lost = dt_calloc((size_t)W, sizeof(int64_t));
    sv.clock = dt_calloc((size_t)W, sizeof(int64_t));
    sv.active = dt_calloc((size_t)W, sizeof(bool));
    sv.pending = dt_calloc((size_t)W, sizeof(int64_t));
    sv.outbuf = dt_calloc((size_t)W, sizeof(float *));
    sv.out_req = dt_calloc((size_t)W * 2, sizeof(dt_req));
    sv.out_busy = dt_calloc((size_t)W, sizeof(bool));
    sv.out_hdr = dt_calloc((size_t)W, sizeof(hdr));
    sv.gin = dt_alloc_floats(sv.len);
    sv.bsp_got = dt_calloc((size_t)W, sizeof(bool));
    sv.ck_clock = dt_calloc((size_t)W, sizeof(int64_t));
    dt_status st = DT_OK;
    if (cfg->comp.comp.kind != DT_COMP_NONE) {
        /* Compressed pushes: a decoder only (the residuals are the workers'). */
        dt_gc_cfg gcfg = cfg->comp;
        gcfg.error_feedback = 0;
        if ((st = dt_gc_create(&sv.gc, &gcfg, m, 0, 1, sv.len))) goto out;
        sv.ein_cap = dt_gc_max_bytes(sv.gc, sv.lo, sv.lo + sv.len);
        sv.ein = dt_malloc(sv.ein_cap ? sv.ein_cap : 1);
        if (!sv.ein) {
            st = dt_errorf(DT_ERR_NOMEM, "out of memory in the parameter server");
            goto out;
        }
    }
    if (!sv.in_req || !sv.in_hdr || !sv.last || !sv.lost || !sv.clock || !sv.active || !sv.pending || !sv.outbuf ||
        !sv.out_req || !sv.out_busy || !sv.out_hdr || !sv.gin || !sv.bsp_got || !sv.ck_clock) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory in the parameter server");
        goto out;
    }
    if (cfg->mode == DT_PS_BSP) {
        dt_agg a = cfg->agg.kind == DT_AGG_NONE ? (dt_agg){.kind = DT_AGG_MEAN} : cfg->agg;
        sv.bsp = dt_alloc_floats((size_t)W * sv.len);
        sv.agg_out = dt_alloc_floats(sv.len);
        sv.agg_scratch = dt_alloc_floats(dt_agg_scratch_floats(&a, W, sv.len) + 1);
        if (!sv.bsp || !sv.agg_out || !sv.agg_scratch) {
            st = dt_errorf(DT_ERR_NOMEM, "out of memory in the parameter server");
            goto out;
        }
    }
    if ((st = dt_optim_create(&sv.opt, ocfg, sv.len))) goto out;
    /* Resume: the workers' clocks and this range's optimizer state. */
    sv.bsp_clock = cfg->start_clock;
    if (cfg->M0 && sv.opt->m) memcpy(sv.opt->m, cfg->M0 + sv.lo, sv.len * sizeof(float));
    if (cfg->V0 && sv.opt->v) memcpy(sv.opt->v, cfg->V0 + sv.lo, sv.len * sizeof(float));
    if (cfg->start_clock > 0) sv.opt->t = cfg->t0;
    double now = dt_now();
    for (int w = 0; w < W && !st; w++) {
        sv.active[w] = true;
        sv.pending[w] = pull_with_push(cfg) ? cfg->start_clock : -1; /* every worker's first pull */
        sv.ck_clock[w] = -1;
        sv.lost[w] = -1;
        sv.last[w] = now;
        sv.clock[w] = cfg->start_clock;
        if (!(sv.outbuf[w] = dt_alloc_floats(sv.len))) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        if (!st) st = dt_irecv(world, &sv.in_hdr[w], sizeof(hdr), w, TAG_REQ, &sv.in_req[w]);
    }
    sv.n_active = W;
    uint64_t ns = 2000;
    while (!st && sv.n_active > 0) {
        int k;
        if ((st = dt_testany(world, sv.in_req, W, &k))) {
            /* A failed connection: under ASP/SSP that worker is lost. */
            if (sv.cfg.liveness <= 0 || k < 0) break;
            char why[320];
            snprintf(why, sizeof why, "its connection failed: %s", dt_error_msg());
            st = drop_worker(&sv, k, why);
        } else if (k < 0) {
            /* Nothing arrived: whoever is silent now is silent in fact. */
            if ((st = check_liveness(&sv))) break;
        } else {
            ns = 2000;
            hdr h = sv.in_hdr[k];
            sv.last[k] = dt_now();
            if (h.type == REQ_PUSH || h.type == REQ_PUSH_PULL) {
                st = on_push(&sv, k, &h);
                if (!st && h.type == REQ_PUSH_PULL && sv.active[k]) sv.pending[k] = h.clock + 1;
            }
            else if (h.type == REQ_PULL) sv.pending[k] = h.clock;
            else if (h.type == REQ_CKPT) {
                sv.ck_clock[k] = h.clock;
                st = try_checkpoint(&sv);
            } else if (h.type == REQ_DONE) {
                sv.active[k] = false;
                sv.n_active--;
                if (sv.cfg.mode == DT_PS_BSP) try_apply_bsp(&sv);
            } else st = dt_errorf(DT_ERR_COMM, "parameter server: bad request type %lld from rank %d", (long long)h.type, k);
            if (st) break;
            if (sv.active[k]) st = dt_irecv(world, &sv.in_hdr[k], sizeof(hdr), k, TAG_REQ, &sv.in_req[k]);
        }
        /* Answer every pull whose condition now holds. */
        for (int w = 0; w < W && !st; w++)
            if (sv.pending[w] >= 0 && pull_ready(&sv, sv.pending[w])) st = reply(&sv, w);
        if (k < 0 && !st) nap(&ns);
    }
    for (int w = 0; w < W && !st; w++)
        if (sv.out_busy[w]) {
            st = dt_waitall(world, &sv.out_req[2 * w], 2, "parameter server reply");
            sv.out_busy[w] = false;
        }
    if (!st) st = say_goodbye(&sv);
    if (!st && lost) memcpy(lost, sv.lost, (size_t)W * sizeof(int64_t));
out:
    dt_optim_destroy(sv.opt);
    for (int w = 0; sv.outbuf && w < W; w++) dt_free(sv.outbuf[w]);
    dt_free(sv.in_req);
    dt_free(sv.in_hdr);
    dt_free(sv.last);
    dt_free(sv.lost);
    dt_free(sv.clock);
    dt_free(sv.active);
    dt_free(sv.pending);
    dt_free(sv.outbuf);
    dt_free(sv.out_req);
    dt_free(sv.out_busy);
    dt_free(sv.out_hdr);
    dt_free(sv.gin);
    dt_gc_destroy(sv.gc);
    dt_free(sv.ein);
    dt_free(sv.bsp);
    dt_free(sv.bsp_got);
    dt_free(sv.ck_clock);
    dt_free(sv.agg_scratch);
    dt_free(sv.agg_out);
    return st;
}

/* ---- worker client ------------------------------------------------------------------ */

struct dt_ps_client {
    dt_model *m;
    dt_comm *c;
    int S, W;
    size_t *lo, *len;
    int64_t clock;
    int64_t *read_clock;        /* per server: global clock of the last pull */
    hdr *push_hdr, pull_hdr, *rep_hdr;
    dt_req *push_req;           /* per server: header + data */
    bool *pushed;
    int next;                   /* ranges are pushed from the last down: next to push */
    bool last;                  /* this step's pushes ask for no next pull (the final step) */
    bool pull_asked;            /* the last pushes asked for this pull already */
    bool with_push;             /* pulls ride on pushes (BSP, SSP:0) */
    dt_status err;
    double deadline;            /* of every wait for a server (seconds, <= 0 none) */
    int64_t *lost;              /* per worker, after dt_ps_finish: clock when dropped, -1 */
    dt_gc *gc;                  /* compressed pushes (with this worker's error feedback), or NULL */
    uint8_t **enc;              /* per server: the encoding in flight */
};

dt_status dt_ps_client_create(dt_ps_client **out, dt_model *m, dt_comm *world, const dt_ps_cfg *cfg) {
    *out = NULL;
    dt_ps_client *c = dt_calloc(1, sizeof *c);
    if (!c) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    c->m = m;
    c->c = world;
    c->S = cfg->servers;
    c->W = dt_comm_size(world) - cfg->servers;
    c->lo = dt_calloc((size_t)c->S, sizeof(size_t));
    c->len = dt_calloc((size_t)c->S, sizeof(size_t));
    c->read_clock = dt_calloc((size_t)c->S, sizeof(int64_t));
    c->push_hdr = dt_calloc((size_t)c->S, sizeof(hdr));
    c->rep_hdr = dt_calloc((size_t)c->S, sizeof(hdr));
    c->push_req = dt_calloc((size_t)c->S * 2, sizeof(dt_req));
    c->pushed = dt_calloc((size_t)c->S, sizeof(bool));
    c->lost = dt_calloc((size_t)c->W, sizeof(int64_t));
    /* A server may hold a worker while it waits out a lost one's liveness limit:
     * the deadline covers that on top of the usual one. */
    c->deadline = dt_comm_timeout(world);
    if (cfg->mode != DT_PS_BSP && cfg->liveness > 0 && c->deadline > 0) c->deadline += cfg->liveness;
    if (!c->lo || !c->len || !c->read_clock || !c->push_hdr || !c->rep_hdr || !c->push_req || !c->pushed || !c->lost) {
        dt_ps_client_destroy(c);
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    }
    for (int s = 0; s < c->S; s++) range_of(m->n, c->S, s, &c->lo[s], &c->len[s]);
    for (int w = 0; w < c->W; w++) c->lost[w] = -1;
    c->clock = cfg->start_clock - 1;
    c->with_push = pull_with_push(cfg);
    c->pull_asked = c->with_push; /* the servers register the first pull */
    if (cfg->comp.comp.kind != DT_COMP_NONE) {
        dt_status st = dt_gc_create(&c->gc, &cfg->comp, m, dt_comm_rank(world), c->W, c->len[0]);
        c->enc = st ? NULL : dt_calloc((size_t)c->S, sizeof(uint8_t *));
        for (int s = 0; !st && c->enc && s < c->S; s++)
            if (!(c->enc[s] = dt_malloc(dt_gc_max_bytes(c->gc, c->lo[s], c->lo[s] + c->len[s]) + 1))) st = DT_ERR_NOMEM;
        if (st || !c->enc) {
            dt_ps_client_destroy(c);
            return st == DT_ERR_NOMEM || !st ? dt_errorf(DT_ERR_NOMEM, "out of memory for compressed pushes") : st;
        }
    }
    *out = c;
    return DT_OK;
}

void dt_ps_client_destroy(dt_ps_client *c) {
    if (!c) return;
    dt_free(c->lo);
    dt_free(c->len);
    dt_free(c->read_clock);
    dt_free(c->push_hdr);
    dt_free(c->rep_hdr);
    dt_free(c->push_req);
    dt_free(c->pushed);
    dt_free(c->lost);
    for (int s = 0; c->enc && s < c->S; s++) dt_free(c->enc[s]);
    dt_free(c->enc);
    dt_gc_destroy(c->gc);
    dt_free(c);
}

dt_gc *dt_ps_client_gc(dt_ps_client *c) { return c->gc; }

/* Receives every range's values for `clock` into m->w, asking for them first
 * unless the previous pushes (or the server's start) already did. */
static dt_status recv_values(dt_ps_client *c, int64_t clock) {
    bool asked = c->pull_asked;
    if (asked && clock != c->clock + 1)
        return dt_errorf(DT_ERR_INVALID, "parameter server client: pull for step %lld, but step %lld was asked for",
                         (long long)clock, (long long)c->clock + 1);
    c->pull_asked = false;
    int S = c->S, W = c->W;
    dt_req *r = dt_calloc((size_t)S * 3, sizeof(dt_req));
    if (!r) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    c->pull_hdr = (hdr){REQ_PULL, clock, 0, 0};
    dt_status st = DT_OK;
    for (int s = 0; s < S && !st; s++) {
        st = dt_irecv(c->c, &c->rep_hdr[s], sizeof(hdr), W + s, TAG_REP, &r[3 * s]);
        if (!st) st = dt_irecv(c->c, c->m->w + c->lo[s], c->len[s] * sizeof(float), W + s, TAG_VAL, &r[3 * s + 1]);
        if (!st && !asked) st = dt_isend(c->c, &c->pull_hdr, sizeof(hdr), W + s, TAG_REQ, &r[3 * s + 2]);
        else r[3 * s + 2].done = true;
    }
    /* A pull may wait for slower workers (BSP/SSP): no deadline beyond the comm's. */
    if (!st) st = dt_waitall_for(c->c, r, 3 * S, c->deadline, "parameter server pull");
    for (int s = 0; s < S && !st; s++) c->read_clock[s] = c->rep_hdr[s].clock;
    dt_free(r);
    return st;
}

dt_status dt_ps_pull(dt_ps_client *c, int64_t clock, bool last) {
    dt_status st = recv_values(c, clock);
    c->clock = clock;
    c->last = last;
    c->next = c->S - 1;
    memset(c->pushed, 0, (size_t)c->S * sizeof(bool));
    c->err = DT_OK;
    return st;
}

static dt_status push_range(dt_ps_client *c, int s) {
    c->push_hdr[s] = (hdr){c->with_push && !c->last ? REQ_PUSH_PULL : REQ_PUSH, c->clock, c->read_clock[s], 0};
    size_t bytes = 0;
    if (c->gc) {
        bytes = dt_gc_encode(c->gc, c->m->g, c->lo[s], c->lo[s] + c->len[s], c->enc[s],
                             (uint64_t)c->clock * (uint64_t)c->S + (uint64_t)s);
        c->push_hdr[s].pad = (int64_t)bytes;
    }
    dt_status st = dt_isend(c->c, &c->push_hdr[s], sizeof(hdr), c->W + s, TAG_REQ, &c->push_req[2 * s]);
    if (!st && c->gc) st = dt_isend(c->c, c->enc[s], bytes, c->W + s, TAG_DATA, &c->push_req[2 * s + 1]);
    else if (!st) st = dt_isend(c->c, c->m->g + c->lo[s], c->len[s] * sizeof(float), c->W + s, TAG_DATA, &c->push_req[2 * s + 1]);
    c->pushed[s] = true;
    return st;
}

void dt_ps_block_done(void *client, int block) {
    dt_ps_client *c = client;
    if (c->err) return;
    /* Backward runs from the last block down: every parameter at or above this
     * block's range is final, so every range starting there can go. */
    size_t ready = c->m->blocks[block].param_lo;
    while (c->next >= 0 && c->lo[c->next] >= ready && !c->err) {
        c->err = push_range(c, c->next);
        c->next--;
    }
}

dt_status dt_ps_push_end(dt_ps_client *c) {
    dt_status st = c->err;
    for (int s = c->S - 1; s >= 0 && !st; s--)
        if (!c->pushed[s]) st = push_range(c, s);
    if (!st) st = dt_waitall_for(c->c, c->push_req, 2 * c->S, c->deadline, "parameter server push");
    c->pull_asked = !st && c->with_push && !c->last;
    memset(c->m->g, 0, c->m->n * sizeof(float));
    return st;
}

dt_status dt_ps_checkpoint(dt_ps_client *c, int64_t clock) {
    hdr q = {REQ_CKPT, clock, 0, 0};
    dt_status st = DT_OK;
    for (int s = 0; s < c->S && !st; s++) {
        dt_req r;
        st = dt_isend(c->c, &q, sizeof q, c->W + s, TAG_REQ, &r);
        if (!st) st = dt_waitall_for(c->c, &r, 1, c->deadline, "parameter server checkpoint");
    }
    for (int s = 0; s < c->S && !st; s++) {
        hdr ack;
        dt_req r;
        st = dt_irecv(c->c, &ack, sizeof ack, c->W + s, TAG_ACK, &r);
        if (!st) st = dt_waitall_for(c->c, &r, 1, c->deadline, "parameter server checkpoint");
    }
    return st;
}

dt_status dt_ps_finish(dt_ps_client *c) {
    int S = c->S, W = c->W;
    /* A run with no step left (resumed at its end) still has the first pull
     * the server registered: take it, so the server's reply completes. */
    dt_status st = c->pull_asked ? recv_values(c, c->clock + 1) : DT_OK;
    if (st) return st;
    c->pull_hdr = (hdr){REQ_DONE, c->clock, 0, 0};
    for (int s = 0; s < S && !st; s++) {
        dt_req r;
        st = dt_isend(c->c, &c->pull_hdr, sizeof(hdr), W + s, TAG_REQ, &r);
        if (!st) st = dt_waitall_for(c->c, &r, 1, c->deadline, "parameter server finish");
    }
    if (st) return st;
    /* The farewell comes when every worker has finished or been dropped. */
    int64_t *bye = dt_calloc((size_t)S * (size_t)W, sizeof(int64_t));
    dt_req *r = dt_calloc((size_t)S, sizeof(dt_req));
    if (!bye || !r) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int s = 0; s < S && !st; s++)
        st = dt_irecv(c->c, bye + (size_t)s * (size_t)W, (size_t)W * sizeof(int64_t), W + s, TAG_BYE, &r[s]);
    if (!st) st = dt_waitall_for(c->c, r, S, c->deadline, "parameter server farewell (waiting for the other workers to finish)");
    for (int s = 0; s < S && !st; s++)
        for (int w = 0; w < W; w++) {
            int64_t v = bye[(size_t)s * (size_t)W + (size_t)w];
            if (v > c->lost[w]) c->lost[w] = v;
        }
    dt_free(bye);
    dt_free(r);
    return st;
}

const int64_t *dt_ps_client_lost(const dt_ps_client *c) { return c->lost; }

dt_status dt_ps_gather_final(dt_model *m, dt_comm *world, const dt_ps_cfg *cfg, uint64_t hist[DT_PS_HIST]) {
    int N = dt_comm_size(world), S = cfg->servers, W = N - S, me = dt_comm_rank(world);
    dt_status st = DT_OK;
    uint64_t h[DT_PS_HIST];
    if (me == 0) memset(hist, 0, DT_PS_HIST * sizeof(uint64_t));
    for (int s = 0; s < S && !st; s++) {
        size_t lo, len;
        range_of(m->n, S, s, &lo, &len);
        dt_req r[2];
        if (me == W + s) {
            st = dt_isend(world, hist, DT_PS_HIST * sizeof(uint64_t), 0, TAG_HIST, &r[0]);
            if (!st) st = dt_isend(world, m->w + lo, len * sizeof(float), 0, TAG_FINAL, &r[1]);
            if (!st) st = dt_waitall(world, r, 2, "parameter server final gather");
        } else if (me == 0) {
            st = dt_irecv(world, h, sizeof h, W + s, TAG_HIST, &r[0]);
            if (!st) st = dt_irecv(world, m->w + lo, len * sizeof(float), W + s, TAG_FINAL, &r[1]);
            if (!st) st = dt_waitall(world, r, 2, "parameter server final gather");
            for (int i = 0; i < DT_PS_HIST && !st; i++) hist[i] += h[i];
        }
    }
    return st;
}

dt_status dt_ps_release(dt_comm *world, double deadline) {
    int N = dt_comm_size(world), me = dt_comm_rank(world);
    static const int64_t token = 1;
    if (me != 0) {
        int64_t got;
        dt_req r;
        dt_status st = dt_irecv(world, &got, sizeof got, 0, TAG_RELEASE, &r);
        if (!st) st = dt_waitall_for(world, &r, 1, deadline, "waiting for rank 0 to write the run's outputs");
        return st;
    }
    dt_req *r = dt_calloc((size_t)N, sizeof(dt_req));
    if (!r) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    r[0].done = true;
    for (int k = 1; k < N; k++)
        if (dt_isend(world, &token, sizeof token, k, TAG_RELEASE, &r[k])) r[k].done = true; /* a lost rank */
    /* Sends to lost ranks may never complete: give them a second, then go. */
    double t0 = dt_now();
    uint64_t ns = 2000;
    for (;;) {
        int k;
        dt_status st = dt_testany(world, r, N, &k);
        if (st && k >= 0) r[k].done = true;
        bool all = true;
        for (int i = 1; i < N; i++) all &= r[i].done;
        if (all || dt_now() - t0 > 1.0) break;
        if (k < 0) nap(&ns);
    }
    dt_cancel(world, r, N);
    dt_free(r);
    return DT_OK;
}
