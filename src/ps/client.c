/* Parameter server, the worker side: pull every range, push each range as soon
 * as backward has finished the blocks that write it (overlapping the rest of
 * backward), checkpoint barrier, finish. Per step: one header and n floats
 * (or their encoding) each way, split over the S servers. See include/dtrain/ps.h
 * and the wire format in ps_internal.h. */
#include "ps_internal.h"

#include <stdio.h>
#include <string.h>

struct dt_ps_client {
    dt_model *m;
    dt_comm *c;                 /* the world, or a joined worker's link to server 0 */
    int S, W, cap;              /* W: the world's workers; cap: worker slots */
    dt_comm **sc;               /* per server: its communicator (the world, or a joined link) */
    int *sr;                    /* per server: its rank there */
    bool joined;                /* sc are this worker's own links */
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
    int index, members;         /* this worker's share of the clock it pulled */
    int64_t slowest, fastest;   /* server 0's running workers' least and furthest clocks at the last pull */
    int64_t samples;            /* in this step's pushes */
    bool leave;                 /* asked to leave */
    int64_t leave_at;           /* server 0's answer, -1 none */
    char (*ports)[DT_PS_PORT_MAX]; /* worker 0, elastic: the servers' join ports (knocked at the end) */
    char secret[DT_PS_SECRET_MAX];
};

/* The fields both ways of making a client share; NULL when out of memory. */
static dt_ps_client *client_alloc(dt_model *m, const dt_ps_cfg *cfg, int W) {
    dt_ps_client *c = dt_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->m = m;
    c->S = cfg->servers;
    c->W = W;
    c->cap = dt_ps_slots(cfg, W);
    c->lo = dt_calloc((size_t)c->S, sizeof(size_t));
    c->len = dt_calloc((size_t)c->S, sizeof(size_t));
    c->read_clock = dt_calloc((size_t)c->S, sizeof(int64_t));
    c->push_hdr = dt_calloc((size_t)c->S, sizeof(hdr));
    c->rep_hdr = dt_calloc((size_t)c->S, sizeof(rep));
    c->push_req = dt_calloc((size_t)c->S * 2, sizeof(dt_req));
    c->pushed = dt_calloc((size_t)c->S, sizeof(bool));
    c->lost = dt_calloc((size_t)c->cap, sizeof(int64_t));
    c->sc = dt_calloc((size_t)c->S, sizeof(dt_comm *));
    c->sr = dt_calloc((size_t)c->S, sizeof(int));
    if (!c->lo || !c->len || !c->read_clock || !c->push_hdr || !c->rep_hdr || !c->push_req || !c->pushed || !c->lost ||
        !c->sc || !c->sr) {
        dt_ps_client_destroy(c);
        return NULL;
    }
    for (int s = 0; s < c->S; s++) dt_ps_range_of(m->n, c->S, s, &c->lo[s], &c->len[s]);
    for (int w = 0; w < c->cap; w++) c->lost[w] = -1;
    c->stop_at = c->leave_at = -1;
    c->with_push = dt_ps_pull_with_push(cfg);
    snprintf(c->secret, sizeof c->secret, "%s", cfg->secret ? cfg->secret : "");
    return c;
}

/* The compressed pushes' encoder (this worker's error feedback) and buffers. */
static dt_status client_gc(dt_ps_client *c, const dt_ps_cfg *cfg, int rank) {
    if (cfg->comp.comp.kind == DT_COMP_NONE) return DT_OK;
    dt_status st = dt_gc_create(&c->gc, &cfg->comp, c->m, rank, c->cap, c->len[0]);
    c->enc = st ? NULL : dt_calloc((size_t)c->S, sizeof(uint8_t *));
    for (int s = 0; !st && c->enc && s < c->S; s++)
        if (!(c->enc[s] = dt_malloc(dt_gc_max_bytes(c->gc, c->lo[s], c->lo[s] + c->len[s]) + 1))) st = DT_ERR_NOMEM;
    if (st || !c->enc) return st == DT_ERR_NOMEM || !st ? dt_errorf(DT_ERR_NOMEM, "out of memory for compressed pushes") : st;
    return DT_OK;
}

/* Worker 0 of an elastic job: the servers' join ports, to knock at the end. */
static dt_status recv_ports(dt_ps_client *c) {
    if (!(c->ports = dt_calloc((size_t)c->S, DT_PS_PORT_MAX))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    dt_status st = DT_OK;
    for (int s = 0; s < c->S && !st; s++) {
        dt_req r;
        st = dt_irecv(c->c, c->ports[s], DT_PS_PORT_MAX, c->W + s, TAG_PORT, &r);
        if (!st) st = dt_waitall(c->c, &r, 1, "parameter server: the servers' join ports");
        c->ports[s][DT_PS_PORT_MAX - 1] = '\0';
    }
    return st;
}

dt_status dt_ps_client_create(dt_ps_client **out, dt_model *m, dt_comm *world, const dt_ps_cfg *cfg) {
    *out = NULL;
    int W = dt_comm_size(world) - cfg->servers;
    dt_ps_client *c = client_alloc(m, cfg, W);
    if (!c) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    c->c = world;
    for (int s = 0; s < c->S; s++) {
        c->sc[s] = world;
        c->sr[s] = W + s;
    }
    c->index = dt_comm_rank(world);
    c->members = W;
    /* A server may hold a worker while it waits out a lost one's liveness limit:
     * the deadline covers that on top of the usual one. */
    c->deadline = dt_comm_timeout(world);
    if (cfg->mode != DT_PS_BSP && cfg->liveness > 0 && c->deadline > 0) c->deadline += cfg->liveness;
    c->clock = cfg->start_clock - 1;
    c->pull_asked = c->with_push; /* the servers register the first pull */
    dt_status st = client_gc(c, cfg, dt_comm_rank(world));
    if (!st && cfg->max_workers > 0 && dt_comm_rank(world) == 0) st = recv_ports(c);
    if (st) {
        dt_ps_client_destroy(c);
        return st;
    }
    *out = c;
    return DT_OK;
}

void dt_ps_client_destroy(dt_ps_client *c) {
    if (!c) return;
    for (int s = 0; c->joined && c->sc && s < c->S; s++) dt_comm_destroy(c->sc[s]);
    dt_free(c->sc);
    dt_free(c->sr);
    dt_free(c->ports);
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
    int S = c->S;
    dt_req *r = dt_calloc((size_t)S * 3, sizeof(dt_req));
    if (!r) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    c->pull_hdr = (hdr){REQ_PULL | (int64_t)c->stop << 8 | (c->leave ? DT_PS_LEAVE : 0), clock, 0, 0, 0, 0};
    dt_status st = DT_OK;
    for (int s = 0; s < S && !st; s++) {
        st = dt_irecv(c->sc[s], &c->rep_hdr[s], sizeof(rep), c->sr[s], TAG_REP, &r[3 * s]);
        if (!st) st = dt_irecv(c->sc[s], c->m->w + c->lo[s], c->len[s] * sizeof(float), c->sr[s], TAG_VAL, &r[3 * s + 1]);
        if (!st && !asked) st = dt_isend(c->sc[s], &c->pull_hdr, sizeof(hdr), c->sr[s], TAG_REQ, &r[3 * s + 2]);
        else r[3 * s + 2].done = true;
    }
    /* A pull may wait for slower workers (BSP/SSP): no deadline beyond the comm's.
     * A joined worker's requests are on several communicators: wait per server. */
    for (int s = 0; s < S && !st; s++)
        st = dt_waitall_for(c->sc[s], r + 3 * s, 3, c->deadline, "parameter server pull");
    for (int s = 0; s < S && !st; s++) {
        c->read_clock[s] = c->rep_hdr[s].clock;
        /* A stop one server heard of goes on to the others in the pushes. */
        if (!c->stop && c->rep_hdr[s].stop > 0 && c->rep_hdr[s].stop < 256) c->stop = (int)c->rep_hdr[s].stop;
    }
    if (!st) {
        c->slowest = c->rep_hdr[0].clock;
        c->fastest = c->rep_hdr[0].lead;
    }
    if (!st && c->rep_hdr[0].members > 0) {
        c->index = (int)c->rep_hdr[0].index;
        c->members = (int)c->rep_hdr[0].members;
    }
    if (!st && c->leave_at < 0 && c->rep_hdr[0].leave_at >= 0) c->leave_at = c->rep_hdr[0].leave_at;
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
    int64_t type = (c->with_push && !c->last ? REQ_PUSH_PULL : REQ_PUSH) | (int64_t)c->stop << 8 | (c->leave ? DT_PS_LEAVE : 0);
    c->push_hdr[s] = (hdr){type, c->clock, c->read_clock[s], 0, c->members, c->samples};
    size_t bytes = 0;
    if (c->gc) {
        bytes = dt_gc_encode(c->gc, c->m->g, c->lo[s], c->lo[s] + c->len[s], c->enc[s],
                             (uint64_t)c->clock * (uint64_t)c->S + (uint64_t)s);
        c->push_hdr[s].pad = (int64_t)bytes;
    }
    dt_status st = dt_isend(c->sc[s], &c->push_hdr[s], sizeof(hdr), c->sr[s], TAG_REQ, &c->push_req[2 * s]);
    if (!st && c->gc) st = dt_isend(c->sc[s], c->enc[s], bytes, c->sr[s], TAG_DATA, &c->push_req[2 * s + 1]);
    else if (!st)
        st = dt_isend(c->sc[s], c->m->g + c->lo[s], c->len[s] * sizeof(float), c->sr[s], TAG_DATA, &c->push_req[2 * s + 1]);
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
    for (int s = 0; s < c->S && !st; s++) st = dt_waitall_for(c->sc[s], c->push_req + 2 * s, 2, c->deadline, "parameter server push");
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
    hdr q = {REQ_CKPT | (int64_t)c->stop << 8 | (c->leave ? DT_PS_LEAVE : 0), clock, 0, 0, 0, 0};
    dt_status st = DT_OK;
    for (int s = 0; s < c->S && !st; s++) {
        dt_req r;
        st = dt_isend(c->sc[s], &q, sizeof q, c->sr[s], TAG_REQ, &r);
        if (!st) st = dt_waitall_for(c->sc[s], &r, 1, c->deadline, "parameter server checkpoint");
    }
    for (int s = 0; s < c->S && !st; s++) {
        hdr ack;
        dt_req r;
        st = dt_irecv(c->sc[s], &ack, sizeof ack, c->sr[s], TAG_ACK, &r);
        if (!st) st = dt_waitall_for(c->sc[s], &r, 1, c->deadline, "parameter server checkpoint");
    }
    return st;
}

dt_status dt_ps_finish(dt_ps_client *c) {
    int S = c->S, cap = c->cap;
    /* A run with no step left (resumed at its end) still has the first pull
     * the server registered: take it, so the server's reply completes. */
    dt_status st = c->pull_asked ? recv_values(c, c->clock + 1) : DT_OK;
    if (st) return st;
    /* Stopped: the servers learn where (those that did not decide it). Leaving:
     * the servers say farewell at once. */
    bool stopped = c->stop_at >= 0 && c->clock == c->stop_at;
    bool leaving = c->leave_at >= 0 && c->clock == c->leave_at;
    c->pull_hdr = (hdr){REQ_DONE | (leaving ? DT_PS_LEAVE : 0), c->clock, stopped ? c->stop_at : -1, 0, 0, 0};
    for (int s = 0; s < S && !st; s++) {
        dt_req r;
        st = dt_isend(c->sc[s], &c->pull_hdr, sizeof(hdr), c->sr[s], TAG_REQ, &r);
        if (!st) st = dt_waitall_for(c->sc[s], &r, 1, c->deadline, "parameter server finish");
    }
    if (st) return st;
    /* The farewell comes when every worker has finished or been dropped. */
    int64_t *bye = dt_calloc((size_t)S * (size_t)cap, sizeof(int64_t));
    dt_req *r = dt_calloc((size_t)S, sizeof(dt_req));
    if (!bye || !r) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int s = 0; s < S && !st; s++)
        st = dt_irecv(c->sc[s], bye + (size_t)s * (size_t)cap, (size_t)cap * sizeof(int64_t), c->sr[s], TAG_BYE, &r[s]);
    /* The farewell waits for a lost worker to be dropped (liveness after its
     * last message) and, when that ends the run (worker 0), for the server's
     * report (its grace and the 2 s after it, src/train/end.c): this worker's
     * own timeout must not race the server's better report. */
    double bye_deadline = c->deadline > 0 && c->deadline > dt_comm_timeout(c->c) ? c->deadline + DT_DIAGNOSE_GRACE_MAX + 2.0
                                                                               : c->deadline;
    for (int s = 0; s < S && !st; s++)
        st = dt_waitall_for(c->sc[s], r + s, 1, bye_deadline, "parameter server farewell (waiting for the other workers to finish)");
    for (int s = 0; s < S && !st; s++)
        for (int w = 0; w < cap; w++) {
            int64_t v = bye[(size_t)s * (size_t)cap + (size_t)w];
            if (v > c->lost[w]) c->lost[w] = v;
        }
    dt_free(bye);
    dt_free(r);
    /* Worker 0 of an elastic job: the servers' join ports close on its knock. */
    for (int s = 0; s < S && !st && c->ports; s++)
        if ((st = dt_knock(c->ports[s], c->secret, strlen(c->secret))))
            dt_log(DT_LOG_WARN, "cannot close server %d's join port: %s", s, dt_error_msg());
    return c->ports ? DT_OK : st;
}

dt_status dt_ps_client_join(dt_ps_client **out, dt_model *m, const char *port, const dt_ps_cfg *cfg, double timeout,
                            int *slot, int64_t *clock) {
    *out = NULL;
    if (cfg->mode == DT_PS_BSP || cfg->max_workers <= 0)
        return dt_errorf(DT_ERR_INVALID, "workers can join only an elastic ASP or SSP job (--elastic MAX)");
    dt_ps_client *c = client_alloc(m, cfg, 0);
    if (!c) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    c->joined = true;
    c->deadline = timeout + (cfg->liveness > 0 ? cfg->liveness : 0);
    char (*ports)[DT_PS_PORT_MAX] = dt_calloc((size_t)c->S, DT_PS_PORT_MAX);
    dt_status st = ports ? DT_OK : dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (ports) snprintf(ports[0], DT_PS_PORT_MAX, "%s", port);
    join_req q = {.kind = JOIN_NEW, .slot = -1, .clock = -1};
    snprintf(q.secret, sizeof q.secret, "%s", c->secret);
    join_rep a = {0};
    for (int s = 0; s < c->S && !st; s++) {
        if ((st = dt_connect(ports[s], timeout, &c->sc[s]))) break;
        dt_comm_set_timeout(c->sc[s], timeout);
        c->sr[s] = 0;
        dt_req r[3];
        r[2].done = true;
        st = dt_isend(c->sc[s], &q, sizeof q, 0, TAG_JOIN, &r[0]);
        if (!st) st = dt_irecv(c->sc[s], &a, sizeof a, 0, TAG_JOIN, &r[1]);
        if (!st) st = dt_waitall_for(c->sc[s], r, 2, timeout, "joining the job (waiting for the server's answer)");
        if (!st && !a.ok) {
            a.why[sizeof a.why - 1] = '\0';
            st = dt_errorf(DT_ERR_INVALID, "server %d refused this worker: %s", s, a.why);
        }
        if (!st && s == 0 && (a.servers != c->S || a.cap != c->cap))
            st = dt_errorf(DT_ERR_INVALID, "the job has %lld servers and %lld worker slots, this worker was told %d and %d",
                           (long long)a.servers, (long long)a.cap, c->S, c->cap);
        if (!st && s == 0 && c->S > 1) { /* the other servers' ports */
            st = dt_irecv(c->sc[0], ports[1], (size_t)(c->S - 1) * DT_PS_PORT_MAX, 0, TAG_JOIN, &r[2]);
            if (!st) st = dt_waitall_for(c->sc[0], &r[2], 1, timeout, "joining the job (the servers' ports)");
            for (int k = 1; k < c->S; k++) ports[k][DT_PS_PORT_MAX - 1] = '\0';
        }
        if (!st && s == 0) q = (join_req){.kind = JOIN_ATTACH, .slot = a.slot, .clock = a.clock};
        if (!st && s == 0) snprintf(q.secret, sizeof q.secret, "%s", c->secret);
    }
    dt_free(ports);
    if (!st) {
        c->c = c->sc[0];
        c->index = -1;
        c->members = 0;
        c->clock = a.clock - 1;
        st = client_gc(c, cfg, (int)a.slot);
    }
    if (st) {
        dt_ps_client_destroy(c);
        return st;
    }
    *slot = (int)a.slot;
    *clock = a.clock;
    *out = c;
    return DT_OK;
}

void dt_ps_client_share(const dt_ps_client *c, int *index, int *members) {
    *index = c->index;
    *members = c->members;
}

void dt_ps_client_count(dt_ps_client *c, int samples) { c->samples = samples; }

void dt_ps_client_clocks(const dt_ps_client *c, int64_t *slowest, int64_t *fastest) {
    *slowest = c->slowest;
    *fastest = c->fastest;
}

void dt_ps_client_request_leave(dt_ps_client *c) { c->leave = true; }

int64_t dt_ps_client_leave_at(const dt_ps_client *c) { return c->leave_at; }

const int64_t *dt_ps_client_lost(const dt_ps_client *c) { return c->lost; }
