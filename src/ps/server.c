/* Parameter server, the server side: one loop polls every worker's request
 * header, applies pushes (BSP: once per step, the W gradients aggregated; ASP
 * and SSP: each as it lands, scaled by 1/W), answers the pulls whose clock
 * condition holds, runs the checkpoint barrier and drops lost workers. Memory:
 * W reply buffers of the range (and W gradients under BSP); per push O(range)
 * optimizer work. See include/dtrain/ps.h and the wire format in ps_internal.h. */
#include "ps_internal.h"

#include <stdio.h>
#include <string.h>

/* The furthest clock of a running worker (of any, once every one is done). */
static int64_t lead_clock(const server *sv) {
    int64_t g = -1, all = 0;
    for (int w = 0; w < sv->n_slots; w++) {
        if (sv->active[w] && sv->clock[w] > g) g = sv->clock[w];
        if (sv->clock[w] > all) all = sv->clock[w];
    }
    return g >= 0 ? g : all;
}

static int64_t global_clock(const server *sv) {
    int64_t g = INT64_MAX;
    for (int w = 0; w < sv->n_slots; w++)
        if (sv->active[w] && sv->clock[w] < g) g = sv->clock[w];
    if (g == INT64_MAX) { /* every worker done: the furthest clock */
        g = 0;
        for (int w = 0; w < sv->n_slots; w++) g = sv->clock[w] > g ? sv->clock[w] : g;
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
    dt_comm *lc = dt_ps_link(sv, w);
    int to = dt_ps_link_rank(sv, w);
    if (sv->out_busy[w]) {
        st = dt_waitall(lc, &sv->out_req[2 * w], 2, "parameter server reply");
        sv->out_busy[w] = false;
        if (st) return st;
    }
    memcpy(sv->outbuf[w], sv->m->w + sv->lo, sv->len * sizeof(float));
    int64_t index = 0, members = 0;
    if (sv->me == 0) dt_ps_share(sv, w, sv->pending[w], &index, &members);
    if (sv->pending[w] + 1 > sv->horizon) sv->horizon = sv->pending[w] + 1;
    int64_t leave = sv->me == 0 && sv->leave_at[w] != INT64_MAX ? sv->leave_at[w] : -1;
    sv->out_hdr[w] = (rep){sv->stop_code, global_clock(sv), sv->stop_at, index, members, leave, lead_clock(sv)};
    st = dt_isend(lc, &sv->out_hdr[w], sizeof(rep), to, TAG_REP, &sv->out_req[2 * w]);
    if (!st) st = dt_isend(lc, sv->outbuf[w], sv->len * sizeof(float), to, TAG_VAL, &sv->out_req[2 * w + 1]);
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
    for (int w = 0; w < sv->n_slots; w++) {
        if (!sv->active[w] || sv->ck_clock[w] < 0) continue;
        if (c >= 0 && sv->ck_clock[w] != c) return DT_OK;
        c = sv->ck_clock[w];
    }
    if (c < 0) return DT_OK;
    /* Everyone running takes part, except a worker that joined at c or later
     * (it starts from that cut, so it has nothing before it to push). */
    for (int w = 0; w < sv->n_slots; w++)
        if (sv->active[w] && sv->ck_clock[w] < 0 && sv->join_at[w] < c) return DT_OK;
    dt_status st = sv->cfg.ckpt ? sv->cfg.ckpt(sv->cfg.ckpt_ctx, c, sv->lo, sv->len, sv->opt) : DT_OK;
    hdr ack = {0, c, 0, 0, 0, 0};
    for (int w = 0; w < sv->n_slots && !st; w++) {
        if (!sv->active[w] || sv->ck_clock[w] != c) continue;
        dt_req r;
        st = dt_isend(dt_ps_link(sv, w), &ack, sizeof ack, dt_ps_link_rank(sv, w), TAG_ACK, &r);
        if (!st) st = dt_waitall(dt_ps_link(sv, w), &r, 1, "parameter server checkpoint");
        sv->ck_clock[w] = -1;
    }
    /* Messages may have waited while the files were written: nobody's silence
     * counts from before. */
    double now = dt_now();
    for (int w = 0; w < sv->n_slots; w++) sv->last[w] = now;
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
    dt_cancel(dt_ps_link(sv, w), &sv->in_req[w], 1);
    if (sv->out_busy[w]) {
        dt_cancel(dt_ps_link(sv, w), &sv->out_req[2 * w], 2);
        sv->out_busy[w] = false;
        sv->outbuf[w] = NULL; /* MPI may still hold it: never freed */
    }
    sv->active[w] = false;
    sv->pending[w] = -1;
    sv->ck_clock[w] = -1;
    sv->n_active--;
    /* Elastic: its share of the batch goes to the others from the next clock
     * nobody has passed. */
    if (sv->me == 0 && sv->cfg.max_workers > 0 && sv->leave_at[w] == INT64_MAX) {
        int64_t k = dt_ps_change_clock(sv);
        sv->leave_at[w] = k > sv->clock[w] ? k : sv->clock[w];
    }
    if (sv->me == 0) {
        char who[32];
        int here = 0, all = 0; /* the workers not lost, of those that took part (not counting ones that left) */
        for (int k = 0; k < sv->n_slots; k++) {
            all += !sv->left[k];
            here += !sv->left[k] && sv->lost[k] < 0;
        }
        if (w < sv->W) snprintf(who, sizeof who, "rank %d", dt_comm_world_rank(sv->c, w));
        else snprintf(who, sizeof who, "%d (joined)", w);
        dt_log(DT_LOG_WARN, "parameter server: worker %s is lost (%s); its last clock was %lld; going on with %d of %d workers",
               who, why, (long long)sv->clock[w], here, all);
    }
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
        st = dt_irecv(dt_ps_link(sv, w), sv->ein, (size_t)h->pad, dt_ps_link_rank(sv, w), TAG_DATA, &r);
    } else {
        st = dt_irecv(dt_ps_link(sv, w), sv->gin, sv->len * sizeof(float), dt_ps_link_rank(sv, w), TAG_DATA, &r);
    }
    if (st) return st;
    if (sv->cfg.liveness <= 0) {
        st = dt_waitall(dt_ps_link(sv, w), &r, 1, "parameter server push");
        if (!st && sv->gc) st = dt_gc_decode(sv->gc, sv->ein, (size_t)h->pad, sv->gin, sv->lo, sv->lo + sv->len);
        return st;
    }
    double t0 = dt_now();
    uint64_t ns = 2000;
    for (;;) {
        int k;
        if ((st = dt_testany(dt_ps_link(sv, w), &r, 1, &k))) {
            char why[320];
            snprintf(why, sizeof why, "its push failed: %s", dt_error_msg());
            dt_cancel(dt_ps_link(sv, w), &r, 1);
            *gone = true;
            return drop_worker(sv, w, why);
        }
        if (k == 0) return sv->gc ? dt_gc_decode(sv->gc, sv->ein, (size_t)h->pad, sv->gin, sv->lo, sv->lo + sv->len) : DT_OK;
        if (dt_now() - t0 > sv->cfg.liveness) {
            char why[128];
            snprintf(why, sizeof why, "its push stopped halfway for %.1f s", dt_now() - t0);
            dt_cancel(dt_ps_link(sv, w), &r, 1);
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
    if (sv->me == 0) sv->samples += h->samples;
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
        /* A full round of pushes is one step of the global batch: each push
         * counts for 1 / (the workers its share was split over). */
        int members = h->members > 0 ? (int)h->members : sv->W;
        float scale = 1.0f / (float)members;
        if (sv->cfg.staleness_lr) scale *= dt_ps_staleness_scale(sv->pushes - sv->read_pushes[w], members);
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
    for (int w = 0; w < sv->n_slots && !st; w++) {
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
    dt_req *r = dt_calloc((size_t)sv->cap, sizeof(dt_req));
    if (!r) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    dt_status st = DT_OK;
    for (int w = 0; w < sv->n_slots && !st; w++) {
        r[w].done = true;
        if (sv->lost[w] < 0 && !sv->left[w])
            st = dt_isend(dt_ps_link(sv, w), sv->lost, (size_t)sv->cap * sizeof(int64_t), dt_ps_link_rank(sv, w), TAG_BYE, &r[w]);
    }
    /* Each on its own communicator: wait one by one. */
    for (int w = 0; w < sv->n_slots && !st; w++)
        if (!r[w].done) st = dt_waitall(dt_ps_link(sv, w), &r[w], 1, "parameter server farewell");
    dt_free(r);
    return st;
}

/* The per-worker arrays, the compressed-push decoder, the BSP step buffers and
 * the range's optimizer. */
static dt_status server_alloc(server *sv, const dt_optim_cfg *ocfg) {
    size_t W = (size_t)sv->cap;
    sv->lc = dt_calloc(W, sizeof(dt_comm *));
    sv->in_req = dt_calloc(W, sizeof(dt_req));
    sv->in_hdr = dt_calloc(W, sizeof(hdr));
    sv->last = dt_calloc(W, sizeof(double));
    sv->lost = dt_calloc(W, sizeof(int64_t));
    sv->clock = dt_calloc(W, sizeof(int64_t));
    sv->active = dt_calloc(W, sizeof(bool));
    sv->left = dt_calloc(W, sizeof(bool));
    sv->join_at = dt_calloc(W, sizeof(int64_t));
    sv->leave_at = dt_calloc(W, sizeof(int64_t));
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
    for (size_t w = 0; sv->lost && sv->left && sv->in_req && w < W; w++) {
        sv->lost[w] = -1; /* unused slots too: the farewell sends them all */
        sv->left[w] = w >= (size_t)sv->W; /* a slot not yet joined counts as gone */
        sv->in_req[w].done = true;
    }
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
    if (!sv->lc || !sv->left || !sv->join_at || !sv->leave_at)
        return dt_errorf(DT_ERR_NOMEM, "out of memory in the parameter server");
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
    for (int w = 0; sv->outbuf && w < sv->n_slots; w++) dt_free(sv->outbuf[w]);
    for (int w = 0; sv->lc && w < sv->n_slots; w++) dt_comm_destroy(sv->lc[w]);
    dt_free(sv->lc);
    dt_free(sv->left);
    dt_free(sv->join_at);
    dt_free(sv->leave_at);
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
    dt_status st = DT_OK;
    sv->stop_at = sv->stopped_at = -1;
    for (int w = 0; w < sv->W && !st; w++) {
        st = dt_ps_slot_start(sv, w, NULL, cfg->start_clock);
        if (dt_ps_pull_with_push(cfg)) sv->pending[w] = cfg->start_clock;
    }
    return st;
}

/* Worker k's request header has arrived: act on it, then listen for its next. */
static dt_status on_request(server *sv, int k) {
    hdr h = sv->in_hdr[k];
    sv->last[k] = dt_now();
    if (!sv->stop_code) sv->stop_code = dt_ps_req_stop(h.type);
    bool leave = dt_ps_req_leave(h.type) && sv->cfg.max_workers > 0;
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
        if (h.read_clock >= 0 && !leave) sv->stopped_at = h.read_clock;
        sv->active[k] = false;
        sv->n_active--;
        if (sv->cfg.mode == DT_PS_BSP) try_apply_bsp(sv);
        if (leave) st = dt_ps_elastic_farewell(sv, k);
        if (!st) st = try_checkpoint(sv); /* it may have been the one the barrier waited for */
        return st;
    } else {
        st = dt_errorf(DT_ERR_COMM, "parameter server: bad request type %lld from rank %d", (long long)h.type, k);
    }
    if (!st && leave && sv->me == 0) dt_ps_elastic_leave(sv, k);
    if (!st && sv->active[k])
        st = dt_irecv(dt_ps_link(sv, k), &sv->in_hdr[k], sizeof(hdr), dt_ps_link_rank(sv, k), TAG_REQ, &sv->in_req[k]);
    return st;
}

/* Server 0, once a stop was asked for: the stop clock K. A running worker
 * next meets the server at its checkpoint barrier, its pull waiting, or the
 * pull after the last one answered; K is the furthest of those, so every
 * worker reaches K going forward and hears of it there (the replies carry K
 * from now on). A worker that has finished its last step (ASP, SSP) leaves no
 * earlier cut: the run goes on to its end. */
static void decide_stop(server *sv) {
    for (int w = 0; w < sv->n_slots; w++) {
        if (!sv->active[w]) {
            if (sv->lost[w] < 0 && !sv->left[w]) {
                dt_log(DT_LOG_WARN, "parameter server: a stop was asked for, but worker rank %d has finished its last step "
                       "already; the others run to the end", dt_comm_world_rank(sv->c, w));
                sv->stop_at = INT64_MAX;
                return;
            }
        }
    }
    sv->stop_at = dt_ps_furthest_meet(sv);
}

/* One poll: at most one request handled (or one lost worker dropped, or the
 * silent ones checked), then every pull whose condition now holds answered;
 * when nothing arrived, a nap of *ns (reset once something does). */
static dt_status serve_once(server *sv, uint64_t *ns) {
    int k;
    dt_status st = dt_testany(sv->c, sv->in_req, sv->n_slots, &k);
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
    if (!st && sv->lis) st = dt_ps_elastic_poll(sv);
    for (int w = 0; w < sv->n_slots && !st; w++)
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
    for (int w = 0; w < sv->n_slots && !st; w++)
        if (sv->out_busy[w]) {
            st = dt_waitall(dt_ps_link(sv, w), &sv->out_req[2 * w], 2, "parameter server reply");
            sv->out_busy[w] = false;
        }
    return st;
}

dt_status dt_ps_serve(dt_model *m, dt_comm *world, const dt_ps_cfg *cfg, const dt_optim_cfg *ocfg,
                      const dt_lr_sched *sched, uint64_t hist[DT_PS_HIST], int64_t *lost, dt_ps_outcome *out) {
    int N = dt_comm_size(world), S = cfg->servers, W = N - S, me = dt_comm_rank(world) - W;
    server sv = {.m = m, .c = world, .cfg = *cfg, .W = W, .me = me, .sched = sched, .hist = hist};
    sv.cap = dt_ps_slots(cfg, W);
    if (cfg->mode == DT_PS_BSP) sv.cfg.liveness = 0;
    if (cfg->agg.kind == DT_AGG_CCLIP) /* the trainer refuses it first, with the whole story */
        return dt_errorf(DT_ERR_INVALID, "parameter server: --aggregate cclip needs its centre checkpointed, which the servers do not do");
    dt_ps_range_of(m->n, S, me, &sv.lo, &sv.len);
    memset(hist, 0, DT_PS_HIST * sizeof(uint64_t));
    dt_status st = server_alloc(&sv, ocfg);
    if (!st) st = server_start(&sv);
    if (!st && cfg->max_workers > 0) st = dt_ps_elastic_open(&sv);
    if (!st) st = serve_loop(&sv);
    if (!st) st = drain_replies(&sv);
    /* Closing the join port takes worker 0's knock, which follows the farewell. */
    if (sv.lis) dt_listener_shut(sv.lis, sv.cfg.secret, strlen(sv.cfg.secret));
    if (!st) st = say_goodbye(&sv);
    dt_ps_elastic_close(&sv);
    if (!st && lost) memcpy(lost, sv.lost, (size_t)sv.cap * sizeof(int64_t));
    if (out)
        *out = (dt_ps_outcome){.stop_at = sv.stopped_at, .stop_code = sv.stopped_at >= 0 ? sv.stop_code : 0,
                               .samples = sv.samples, .joined = sv.joined, .departed = sv.departed};
    server_free(&sv);
    return st;
}
