/* Private to src/ps: the wire format the server (server.c) and the worker
 * client (client.c) share, and the partition into key ranges.
 *
 * Messages, all on the world communicator:
 *   worker -> server  TAG_REQ   header {type | stop << 8, clock, read_clock, 0}
 *                     (stop: the code of a stop this worker asks for or heard
 *                     of, 0 none; REQ_DONE's read_clock: the clock the run
 *                     stopped at, -1 when it ran to its end)
 *                     (PUSH_PULL, under BSP and SSP:0: a push that also asks
 *                     for step clock+1's values, so the pull is registered the
 *                     moment the push lands and no other worker's later push
 *                     can slip in between; the first pull, for start_clock, is
 *                     registered for every worker when the server starts:
 *                     SSP:0 then reads exactly what BSP reads. Under ASP and
 *                     SSP:K>0 the pull is asked for when the worker is about
 *                     to compute, so it reads the freshest values there are.)
 *   worker -> server  TAG_DATA  the range's gradient (after a PUSH header)
 *   server -> worker  TAG_REP   rep {stop, global clock, stop_at, 0} then TAG_VAL the range's values
 *                     (stop: a stop code this server knows of, 0 none;
 *                     stop_at: server 0 only, the clock every worker stops
 *                     at once one was asked for, -1 none; see server.c)
 *   server -> worker  TAG_BYE   at the end: int64[W], the clock each dropped worker was lost at, -1 others
 *   server -> rank 0  TAG_HIST, TAG_FINAL  the staleness histogram and the final range
 *   rank 0 -> all     TAG_RELEASE  after a run that lost workers: the outputs are written
 * A worker has at most one request of each kind outstanding per server, and MPI
 * keeps the order of messages between two ranks with the same tag. */
#ifndef DTRAIN_PS_INTERNAL_H
#define DTRAIN_PS_INTERNAL_H

#include "dtrain/ps.h"

#include <time.h>

enum { TAG_REQ = 0x5100, TAG_DATA, TAG_REP, TAG_VAL, TAG_FINAL, TAG_ACK, TAG_BYE, TAG_HIST, TAG_RELEASE };
enum { REQ_PULL = 1, REQ_PUSH = 2, REQ_DONE = 3, REQ_CKPT = 4, REQ_PUSH_PULL = 5 };

typedef struct hdr {
    int64_t type, clock, read_clock, pad;
} hdr;

typedef struct rep {
    int64_t stop, clock, stop_at, pad;
} rep;

/* A request header's kind and the stop code riding on it. */
static inline int64_t dt_ps_req_type(int64_t t) { return t & 0xff; }
static inline int dt_ps_req_stop(int64_t t) { return (int)((t >> 8) & 0xff); }

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

#endif
