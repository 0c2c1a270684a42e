/* Parameter server, the worker side: pull every range, push each range as soon
 * as backward has finished the blocks that write it (overlapping the rest of
 * backward), checkpoint barrier, finish. Per step: one header and n floats
 * (or their encoding) each way, split over the S servers. See include/dtrain/ps.h
 * and the wire format in ps_internal.h. */
#include "ps_internal.h"

#include <string.h>

struct dt_ps_client {
    dt_model *m;
    dt_comm *c;
    int S, W;
    size_t *lo, *len;
    int64_t clock;
    int64_t *read_clock;        /* per server: global clock of the last pull */
    hdr *push_hdr, pull_hdr;
    rep *rep_hdr;
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
    int stop;                   /* the stop code asked for or heard of, 0 none */
    int stop_code;              /* server 0's decision: its code and clock */
    int64_t stop_at;
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
    c->rep_hdr = dt_calloc((size_t)c->S, sizeof(rep));
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
    for (int s = 0; s < c->S; s++) dt_ps_range_of(m->n, c->S, s, &c->lo[s], &c->len[s]);
    for (int w = 0; w < c->W; w++) c->lost[w] = -1;
    c->clock = cfg->start_clock - 1;
    c->stop_at = -1;
    c->with_push = dt_ps_pull_with_push(cfg);
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
    c->pull_hdr = (hdr){REQ_PULL | (int64_t)c->stop << 8, clock, 0, 0};
    dt_status st = DT_OK;
    for (int s = 0; s < S && !st; s++) {
        st = dt_irecv(c->c, &c->rep_hdr[s], sizeof(rep), W + s, TAG_REP, &r[3 * s]);
        if (!st) st = dt_irecv(c->c, c->m->w + c->lo[s], c->len[s] * sizeof(float), W + s, TAG_VAL, &r[3 * s + 1]);
        if (!st && !asked) st = dt_isend(c->c, &c->pull_hdr, sizeof(hdr), W + s, TAG_REQ, &r[3 * s + 2]);
        else r[3 * s + 2].done = true;
    }
    /* A pull may wait for slower workers (BSP/SSP): no deadline beyond the comm's. */
    if (!st) st = dt_waitall_for(c->c, r, 3 * S, c->deadline, "parameter server pull");
    for (int s = 0; s < S && !st; s++) {
        c->read_clock[s] = c->rep_hdr[s].clock;
        /* A stop one server heard of goes on to the others in the pushes. */
        if (!c->stop && c->rep_hdr[s].stop > 0 && c->rep_hdr[s].stop < 256) c->stop = (int)c->rep_hdr[s].stop;
    }
    if (!st && c->stop_at < 0 && c->rep_hdr[0].stop_at >= 0) {
        c->stop_at = c->rep_hdr[0].stop_at;
        c->stop_code = (int)c->rep_hdr[0].stop;
    }
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
    int64_t type = (c->with_push && !c->last ? REQ_PUSH_PULL : REQ_PUSH) | (int64_t)c->stop << 8;
    c->push_hdr[s] = (hdr){type, c->clock, c->read_clock[s], 0};
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

void dt_ps_client_request_stop(dt_ps_client *c, int code) {
    if (!c->stop && code > 0 && code < 256) c->stop = code;
}

int64_t dt_ps_client_stop_at(const dt_ps_client *c, int *code) {
    if (code) *code = c->stop_at >= 0 ? c->stop_code : 0;
    return c->stop_at;
}

dt_status dt_ps_checkpoint(dt_ps_client *c, int64_t clock) {
    hdr q = {REQ_CKPT | (int64_t)c->stop << 8, clock, 0, 0};
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
    /* Stopped: the servers learn where (those that did not decide it). */
    bool stopped = c->stop_at >= 0 && c->clock == c->stop_at;
    c->pull_hdr = (hdr){REQ_DONE, c->clock, stopped ? c->stop_at : -1, 0};
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
    /* The farewell waits for a lost worker to be dropped (liveness after its
     * last message) and, when that ends the run (worker 0), for the server's
     * report (its grace and the 2 s after it, src/train/end.c): this worker's
     * own timeout must not race the server's better report. */
    double bye_deadline = c->deadline > 0 && c->deadline > dt_comm_timeout(c->c) ? c->deadline + DT_DIAGNOSE_GRACE_MAX + 2.0
                                                                               : c->deadline;
    if (!st) st = dt_waitall_for(c->c, r, S, bye_deadline, "parameter server farewell (waiting for the other workers to finish)");
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
