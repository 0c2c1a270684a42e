/* Parameter server, the server side: one loop polls every worker's request
 * header, applies pushes (BSP: once per step, the W gradients aggregated; ASP
 * and SSP: each as it lands, scaled by 1/W), answers the pulls whose clock
 * condition holds, runs the checkpoint barrier and drops lost workers. Memory:
 * W reply buffers of the range (and W gradients under BSP); per push O(range)
 * optimizer work. See include/dtrain/ps.h and the wire format in ps_internal.h. */
#include "ps_internal.h"

#include <stdio.h>
#include <string.h>

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
    rep *out_hdr;
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
    int64_t pushes;             /* ASP/SSP: pushes applied */
    int64_t *read_pushes;       /* per worker: pushes applied when it last read */
    int64_t *served;            /* per worker: clock of the last pull answered */
    int stop_code;              /* a stop asked for (polled or heard of), 0 none */
    int64_t stop_at;            /* server 0: the clock the workers stop at, -1 none */
    int64_t stopped_at;         /* from the workers' farewells: where they stopped */
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
    sv->out_hdr[w] = (rep){sv->stop_code, global_clock(sv), sv->stop_at, 0};
    st = dt_isend(sv->c, &sv->out_hdr[w], sizeof(rep), w, TAG_REP, &sv->out_req[2 * w]);
    if (!st) st = dt_isend(sv->c, sv->outbuf[w], sv->len * sizeof(float), w, TAG_VAL, &sv->out_req[2 * w + 1]);
    if (!st) sv->out_busy[w] = true;
    sv->served[w] = sv->pending[w];
    sv->pending[w] = -1;
    sv->read_pushes[w] = sv->pushes;
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
    dt_status st = DT_OK;
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
        dt_ps_nap(&ns);
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
        float scale = 1.0f / (float)sv->W;
        if (sv->cfg.staleness_lr) scale *= dt_ps_staleness_scale(sv->pushes - sv->read_pushes[w], sv->W);
        /* outbuf[w]: the values this worker read at its last pull */
        if (sv->cfg.dc_lambda > 0 && sv->outbuf[w])
            dt_ps_delay_compensate(sv->gin, sv->m->w + sv->lo, sv->outbuf[w], sv->len, sv->cfg.dc_lambda);
        apply(sv, sv->gin, scale, h->clock);
        sv->pushes++;
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

/* The per-worker arrays, the compressed-push decoder, the BSP step buffers and
 * the range's optimizer. */
static dt_status server_alloc(server *sv, const dt_optim_cfg *ocfg) {
    size_t W = (size_t)sv->W;
    sv->in_req = dt_calloc(W, sizeof(dt_req));
    sv->in_hdr = dt_calloc(W, sizeof(hdr));
    sv->last = dt_calloc(W, sizeof(double));
    sv->lost = dt_calloc(W, sizeof(int64_t));
    sv->clock = dt_calloc(W, sizeof(int64_t));
    sv->active = dt_calloc(W, sizeof(bool));
    sv->pending = dt_calloc(W, sizeof(int64_t));
    sv->outbuf = dt_calloc(W, sizeof(float *));
    sv->out_req = dt_calloc(W * 2, sizeof(dt_req));
    sv->out_busy = dt_calloc(W, sizeof(bool));
    sv->out_hdr = dt_calloc(W, sizeof(rep));
    sv->gin = dt_alloc_floats(sv->len);
    sv->bsp_got = dt_calloc(W, sizeof(bool));
    sv->ck_clock = dt_calloc(W, sizeof(int64_t));
    sv->read_pushes = dt_calloc(W, sizeof(int64_t));
    sv->served = dt_calloc(W, sizeof(int64_t));
    dt_status st = DT_OK;
    if (sv->cfg.comp.comp.kind != DT_COMP_NONE) {
        /* Compressed pushes: a decoder only (the residuals are the workers'). */
        dt_gc_cfg gcfg = sv->cfg.comp;
        gcfg.error_feedback = 0;
        if ((st = dt_gc_create(&sv->gc, &gcfg, sv->m, 0, 1, sv->len))) return st;
        sv->ein_cap = dt_gc_max_bytes(sv->gc, sv->lo, sv->lo + sv->len);
        sv->ein = dt_malloc(sv->ein_cap ? sv->ein_cap : 1);
        if (!sv->ein) return dt_errorf(DT_ERR_NOMEM, "out of memory in the parameter server");
    }
    if (!sv->in_req || !sv->in_hdr || !sv->last || !sv->lost || !sv->clock || !sv->active || !sv->pending || !sv->outbuf ||
        !sv->out_req || !sv->out_busy || !sv->out_hdr || !sv->gin || !sv->bsp_got || !sv->ck_clock || !sv->read_pushes || !sv->served)
        return dt_errorf(DT_ERR_NOMEM, "out of memory in the parameter server");
    if (sv->cfg.mode == DT_PS_BSP) {
        dt_agg a = sv->cfg.agg.kind == DT_AGG_NONE ? (dt_agg){.kind = DT_AGG_MEAN} : sv->cfg.agg;
        sv->bsp = dt_alloc_floats(W * sv->len);
        sv->agg_out = dt_alloc_floats(sv->len);
        sv->agg_scratch = dt_alloc_floats(dt_agg_scratch_floats(&a, sv->W, sv->len) + 1);
        if (!sv->bsp || !sv->agg_out || !sv->agg_scratch)
            return dt_errorf(DT_ERR_NOMEM, "out of memory in the parameter server");
    }
    return dt_optim_create(&sv->opt, ocfg, sv->len);
}

static void server_free(server *sv) {
    dt_optim_destroy(sv->opt);
    for (int w = 0; sv->outbuf && w < sv->W; w++) dt_free(sv->outbuf[w]);
    dt_free(sv->in_req);
    dt_free(sv->in_hdr);
    dt_free(sv->last);
    dt_free(sv->lost);
    dt_free(sv->clock);
    dt_free(sv->active);
    dt_free(sv->pending);
    dt_free(sv->outbuf);
    dt_free(sv->out_req);
    dt_free(sv->out_busy);
    dt_free(sv->out_hdr);
    dt_free(sv->gin);
    dt_gc_destroy(sv->gc);
    dt_free(sv->ein);
    dt_free(sv->bsp);
    dt_free(sv->bsp_got);
    dt_free(sv->ck_clock);
    dt_free(sv->read_pushes);
    dt_free(sv->served);
    dt_free(sv->agg_scratch);
    dt_free(sv->agg_out);
}

/* Resume (the workers' clocks and this range's optimizer state), every
 * worker's first pull where pulls ride on pushes, and the first receives. */
static dt_status server_start(server *sv) {
    const dt_ps_cfg *cfg = &sv->cfg;
    sv->bsp_clock = cfg->start_clock;
    if (cfg->M0 && sv->opt->m) memcpy(sv->opt->m, cfg->M0 + sv->lo, sv->len * sizeof(float));
    if (cfg->V0 && sv->opt->v) memcpy(sv->opt->v, cfg->V0 + sv->lo, sv->len * sizeof(float));
    if (cfg->start_clock > 0) sv->opt->t = cfg->t0;
    double now = dt_now();
    dt_status st = DT_OK;
    for (int w = 0; w < sv->W && !st; w++) {
        sv->active[w] = true;
        sv->pending[w] = dt_ps_pull_with_push(cfg) ? cfg->start_clock : -1;
        sv->ck_clock[w] = -1;
        sv->lost[w] = -1;
        sv->last[w] = now;
        sv->clock[w] = cfg->start_clock;
        sv->served[w] = cfg->start_clock - 1;
        if (!(sv->outbuf[w] = dt_alloc_floats(sv->len))) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        if (!st) st = dt_irecv(sv->c, &sv->in_hdr[w], sizeof(hdr), w, TAG_REQ, &sv->in_req[w]);
    }
    sv->n_active = sv->W;
    sv->stop_at = sv->stopped_at = -1;
    return st;
}

/* Worker k's request header has arrived: act on it, then listen for its next. */
static dt_status on_request(server *sv, int k) {
    hdr h = sv->in_hdr[k];
    sv->last[k] = dt_now();
    if (!sv->stop_code) sv->stop_code = dt_ps_req_stop(h.type);
    h.type = dt_ps_req_type(h.type);
    dt_status st = DT_OK;
    if (h.type == REQ_PUSH || h.type == REQ_PUSH_PULL) {
        st = on_push(sv, k, &h);
        if (!st && h.type == REQ_PUSH_PULL && sv->active[k]) sv->pending[k] = h.clock + 1;
    } else if (h.type == REQ_PULL) {
        sv->pending[k] = h.clock;
    } else if (h.type == REQ_CKPT) {
        sv->ck_clock[k] = h.clock;
        st = try_checkpoint(sv);
    } else if (h.type == REQ_DONE) {
        if (h.read_clock >= 0) sv->stopped_at = h.read_clock;
        sv->active[k] = false;
        sv->n_active--;
        if (sv->cfg.mode == DT_PS_BSP) try_apply_bsp(sv);
    } else {
        st = dt_errorf(DT_ERR_COMM, "parameter server: bad request type %lld from rank %d", (long long)h.type, k);
    }
    if (!st && sv->active[k]) st = dt_irecv(sv->c, &sv->in_hdr[k], sizeof(hdr), k, TAG_REQ, &sv->in_req[k]);
    return st;
}

/* Server 0, once a stop was asked for: the stop clock K. A running worker
 * next meets the server at its checkpoint barrier, its pull waiting, or the
 * pull after the last one answered; K is the furthest of those, so every
 * worker reaches K going forward and hears of it there (the replies carry K
 * from now on). A worker that has finished its last step (ASP, SSP) leaves no
 * earlier cut: the run goes on to its end. */
static void decide_stop(server *sv) {
    int64_t k = -1;
    for (int w = 0; w < sv->W; w++) {
        if (!sv->active[w]) {
            if (sv->lost[w] < 0) {
                dt_log(DT_LOG_WARN, "parameter server: a stop was asked for, but worker rank %d has finished its last step "
                       "already; the others run to the end", dt_comm_world_rank(sv->c, w));
                sv->stop_at = INT64_MAX;
                return;
            }
            continue;
        }
        int64_t next = sv->ck_clock[w] >= 0 ? sv->ck_clock[w] : sv->pending[w] >= 0 ? sv->pending[w] : sv->served[w] + 1;
        if (next > k) k = next;
    }
    sv->stop_at = k;
}

/* One poll: at most one request handled (or one lost worker dropped, or the
 * silent ones checked), then every pull whose condition now holds answered;
 * when nothing arrived, a nap of *ns (reset once something does). */
static dt_status serve_once(server *sv, uint64_t *ns) {
    int k;
    dt_status st = dt_testany(sv->c, sv->in_req, sv->W, &k);
    if (st) {
        /* A failed connection: under ASP/SSP that worker is lost. */
        if (sv->cfg.liveness <= 0 || k < 0) return st;
        char why[320];
        snprintf(why, sizeof why, "its connection failed: %s", dt_error_msg());
        st = drop_worker(sv, k, why);
    } else if (k < 0) {
        /* Nothing arrived: whoever is silent now is silent in fact. */
        if ((st = check_liveness(sv))) return st;
    } else {
        *ns = 2000;
        if ((st = on_request(sv, k))) return st;
    }
    if (!sv->stop_code && sv->cfg.stop_poll) sv->stop_code = sv->cfg.stop_poll(sv->cfg.stop_ctx);
    if (sv->stop_code && sv->me == 0 && sv->stop_at < 0) decide_stop(sv);
    for (int w = 0; w < sv->W && !st; w++)
        if (sv->pending[w] >= 0 && pull_ready(sv, sv->pending[w])) st = reply(sv, w);
    if (k < 0 && !st) dt_ps_nap(ns);
    return st;
}

/* Polls until every worker has finished or been dropped. */
static dt_status serve_loop(server *sv) {
    uint64_t ns = 2000;
    dt_status st = DT_OK;
    while (!st && sv->n_active > 0) st = serve_once(sv, &ns);
    return st;
}

/* The last replies' sends complete before their buffers go. */
static dt_status drain_replies(server *sv) {
    dt_status st = DT_OK;
    for (int w = 0; w < sv->W && !st; w++)
        if (sv->out_busy[w]) {
            st = dt_waitall(sv->c, &sv->out_req[2 * w], 2, "parameter server reply");
            sv->out_busy[w] = false;
        }
    return st;
}

dt_status dt_ps_serve(dt_model *m, dt_comm *world, const dt_ps_cfg *cfg, const dt_optim_cfg *ocfg,
                      const dt_lr_sched *sched, uint64_t hist[DT_PS_HIST], int64_t *lost, dt_ps_stop *stop) {
    int N = dt_comm_size(world), S = cfg->servers, W = N - S, me = dt_comm_rank(world) - W;
    server sv = {.m = m, .c = world, .cfg = *cfg, .W = W, .me = me, .sched = sched, .hist = hist};
    if (cfg->mode == DT_PS_BSP) sv.cfg.liveness = 0;
    if (cfg->agg.kind == DT_AGG_CCLIP) /* the trainer refuses it first, with the whole story */
        return dt_errorf(DT_ERR_INVALID, "parameter server: --aggregate cclip needs its centre checkpointed, which the servers do not do");
    dt_ps_range_of(m->n, S, me, &sv.lo, &sv.len);
    memset(hist, 0, DT_PS_HIST * sizeof(uint64_t));
    dt_status st = server_alloc(&sv, ocfg);
    if (!st) st = server_start(&sv);
    if (!st) st = serve_loop(&sv);
    if (!st) st = drain_replies(&sv);
    if (!st) st = say_goodbye(&sv);
    if (!st && lost) memcpy(lost, sv.lost, (size_t)W * sizeof(int64_t));
    if (stop) *stop = (dt_ps_stop){sv.stopped_at, sv.stopped_at >= 0 ? sv.stop_code : 0};
    server_free(&sv);
    return st;
}
