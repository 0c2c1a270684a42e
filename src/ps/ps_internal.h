/* Private to src/ps: the wire format the server (server.c) and the worker
 * client (client.c) share, and the partition into key ranges.
 *
 * Messages, all on the world communicator:
 *   worker -> server  TAG_REQ   header {type | stop << 8 | leave << 16, clock, read_clock, pad,
 *                     members, samples}
 *                     (stop: the code of a stop this worker asks for or heard
 *                     of, 0 none; leave: this worker asks to leave the job;
 *                     REQ_DONE's read_clock: the clock the run stopped at, -1
 *                     when it ran to its end; pad: a compressed push's bytes;
 *                     members, samples: a push's share of the global batch,
 *                     its samples out of the batch split over `members`)
 *                     (PUSH_PULL, under BSP and SSP:0: a push that also asks
 *                     for step clock+1's values, so the pull is registered the
 *                     moment the push lands and no other worker's later push
 *                     can slip in between; the first pull, for start_clock, is
 *                     registered for every worker when the server starts:
 *                     SSP:0 then reads exactly what BSP reads. Under ASP and
 *                     SSP:K>0 the pull is asked for when the worker is about
 *                     to compute, so it reads the freshest values there are.)
 *   worker -> server  TAG_DATA  the range's gradient (after a PUSH header)
 *   server -> worker  TAG_REP   rep {stop, global clock, stop_at, index, members, leave_at}
 *                     then TAG_VAL the range's values
 *                     (stop: a stop code this server knows of, 0 none;
 *                     stop_at: server 0 only, the clock every worker stops
 *                     at once one was asked for, -1 none; index, members:
 *                     server 0 only, this worker's share of the pulled
 *                     clock's global batch; leave_at: server 0 only, the
 *                     clock this worker leaves at, -1 none; see elastic.c)
 *   server -> worker  TAG_BYE   at the end: int64[W], the clock each dropped worker was lost at, -1 others
 *   server -> rank 0  TAG_HIST, TAG_FINAL  the staleness histogram and the final range
 *   rank 0 -> all     TAG_RELEASE  after a run that lost workers: the outputs are written
 *   server -> server 0, worker 0  TAG_PORT  (elastic) the server's join port
 * Joined workers (elastic.c) talk to each server over a 2-rank communicator
 * of their own (the server rank 0), with the same messages. 
 * A worker has at most one request of each kind outstanding per server, and MPI
 * keeps the order of messages between two ranks with the same tag. */
#ifndef DTRAIN_PS_INTERNAL_H
#define DTRAIN_PS_INTERNAL_H

#include "dtrain/ps.h"

#include <stdint.h>
#include <time.h>

enum { TAG_REQ = 0x5100, TAG_DATA, TAG_REP, TAG_VAL, TAG_FINAL, TAG_ACK, TAG_BYE, TAG_HIST, TAG_RELEASE, TAG_PORT, TAG_JOIN };
enum { REQ_PULL = 1, REQ_PUSH = 2, REQ_DONE = 3, REQ_CKPT = 4, REQ_PUSH_PULL = 5 };

typedef struct hdr {
    int64_t type, clock, read_clock, pad, members, samples;
} hdr;

typedef struct rep {
    int64_t stop, clock, stop_at, index, members, leave_at;
    int64_t lead;            /* the furthest clock of a running worker (the global clock is the least) */
} rep;

#define DT_PS_LEAVE ((int64_t)1 << 16) /* hdr.type: this worker asks to leave */

/* A request header's kind and the stop code riding on it. */
static inline int64_t dt_ps_req_type(int64_t t) { return t & 0xff; }
static inline int dt_ps_req_stop(int64_t t) { return (int)((t >> 8) & 0xff); }
static inline bool dt_ps_req_leave(int64_t t) { return (t & DT_PS_LEAVE) != 0; }

/* Whether pulls ride on the pushes before them (see the top of the file): where
 * the consistency model fixes what a pull reads, BSP and SSP:0. */
static inline bool dt_ps_pull_with_push(const dt_ps_cfg *cfg) {
    return cfg->mode == DT_PS_BSP || (cfg->mode == DT_PS_SSP && cfg->staleness == 0);
}

/* Server s's key range of an n-float arena split over S servers. */
static inline void dt_ps_range_of(size_t n, int S, int s, size_t *lo, size_t *len) {
    *lo = dt_chunk_off(n, S, s);
    *len = dt_chunk_len(n, S, s);
}

/* Sleeps *ns nanoseconds while polling, doubling it up to 0.2 ms. */
static inline void dt_ps_nap(uint64_t *ns) {
    struct timespec ts = {0, (long)*ns};
    nanosleep(&ts, NULL);
    *ns = *ns * 2 > 200000 ? 200000 : *ns * 2;
}

/* ---- the server's state (server.c), joins and leaves (elastic.c) ---------- */

#define DT_PS_PORT_MAX 256     /* bytes of a join port's name */
#define DT_PS_SECRET_MAX 72    /* bytes of the job's secret (64 hex digits and a NUL) */
#define DT_PS_AUTH_MAX 8       /* connections being authenticated at once */

enum { JOIN_NEW = 1, JOIN_ATTACH = 2 };

/* joiner -> server, the first message on a new connection (TAG_JOIN) */
typedef struct join_req {
    char secret[DT_PS_SECRET_MAX];
    int64_t kind, slot, clock;
} join_req;

/* server -> joiner (TAG_JOIN); after a JOIN_NEW welcome, server 0 sends the
 * other servers' ports ((S-1) x DT_PS_PORT_MAX bytes) */
typedef struct join_rep {
    int64_t ok, slot, clock, cap, servers, pad;
    char why[192];
} join_rep;

/* A connection whose first message has not come yet. */
typedef struct ps_auth {
    dt_comm *c;
    join_req req;
    dt_req r;
    double t0;
} ps_auth;

typedef struct server {
    dt_model *m;
    dt_comm *c;
    dt_ps_cfg cfg;
    int W, me, n_active;        /* W: the workers of the world; slots [W, n_slots) joined */
    int cap, n_slots;           /* slots allocated, slots used */
    dt_comm **lc;               /* per slot: its own communicator (joined), NULL: the world */
    dt_req *in_req;             /* per worker: the posted header receive */
    hdr *in_hdr;
    double *last;               /* per worker: dt_now() of the last message either way */
    int64_t *lost;              /* per worker: clock when dropped, -1 */
    size_t lo, len;
    dt_optim *opt;
    const dt_lr_sched *sched;
    int64_t *clock;             /* per worker: steps pushed */
    bool *active;
    bool *left;                 /* per worker: left on request */
    int64_t *join_at;           /* per worker: the first clock it pulls (start clock, or its join) */
    int64_t *leave_at;          /* per worker, server 0: the clock it leaves at, INT64_MAX none */
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
    int64_t samples;            /* server 0: samples in the gradients applied */
    int64_t horizon;            /* server 0: 1 + the furthest clock any pull was answered for */
    /* elastic (cfg.max_workers > 0) */
    dt_listener *lis;
    char (*ports)[DT_PS_PORT_MAX]; /* server 0: every server's port */
    ps_auth auth[DT_PS_AUTH_MAX];
    int joined, departed;       /* server 0: workers that joined, left */
} server;

/* Slot w's communicator and its rank there. */
static inline dt_comm *dt_ps_link(const server *sv, int w) { return sv->lc[w] ? sv->lc[w] : sv->c; }
static inline int dt_ps_link_rank(const server *sv, int w) { return sv->lc[w] ? 1 : w; }

/* elastic.c, for server.c */
/* Slot w starts pulling at `clock` (allocates its reply buffer, posts its
 * first receive). */
dt_status dt_ps_slot_start(server *sv, int w, dt_comm *lc, int64_t clock);
/* The clock worker w next meets the server at: its checkpoint barrier, its
 * pull waiting, or the pull after the last one answered. */
int64_t dt_ps_next_meet(const server *sv, int w);
/* The furthest next meeting of the running workers (-1: none running). */
int64_t dt_ps_furthest_meet(const server *sv);
/* Server 0: the first clock a change of members can take effect at: no worker
 * has been told a split for it or any later clock, nor will be before it
 * hears of the change (the furthest next meeting, the horizon). */
int64_t dt_ps_change_clock(const server *sv);
/* Server 0: worker w's share of clock c's global batch (index -1: not a member). */
void dt_ps_share(const server *sv, int w, int64_t c, int64_t *index, int64_t *members);
/* Elastic: opens the join port and swaps the servers' ports (collective over the servers and worker 0). */
dt_status dt_ps_elastic_open(server *sv);
/* Elastic: admits joining workers and authenticates connections (one poll). */
dt_status dt_ps_elastic_poll(server *sv);
/* Server 0: worker w asked to leave: fixes its leave clock. */
void dt_ps_elastic_leave(server *sv, int w);
/* A worker that left: its farewell now, and its communicator goes. */
dt_status dt_ps_elastic_farewell(server *sv, int w);
/* At the end: refuses what still waits and closes the port (after worker 0's knock). */
void dt_ps_elastic_close(server *sv);

#endif
