/* Point-to-point: non-blocking sends and receives with tags, over MPI or the
 * self communicator's in-process mailbox, and the waits with a deadline.
 *
 * Waiting: MPI progresses (for the shared-memory transport, copies data) only
 * inside MPI calls, so a wait polls MPI_Testall. To leave the core to the other
 * ranks (2-4 ranks share 2 cores here) it yields for the first YIELD_NS and then
 * sleeps with a growing nanosleep, never spinning. The cap on the sleep bounds
 * how long a ready message waits for its receiver to look: a ready peer's
 * message is taken within SLEEP_MAX_NS. Cost of a wait: one MPI_Testall per
 * poll. (Collectives among the ranks of a host do not come here: they wait on
 * their shared segment, which wakes them when the peer arrives, shm.c.) */
#include "comm/comm_internal.h"

#include <limits.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Back-off of dt_waitall: yield for YIELD_NS, then sleep SLEEP_MIN_NS growing
 * by half up to SLEEP_MAX_NS. 50 us is a 64 KiB message at memory speed: a
 * pipeline's activations or a small collective lose at most that much to a
 * sleep, while a rank that waits for seconds wakes 20000 times a second, which
 * costs its core ~1%. */
#define YIELD_NS 1000000ull
#define SLEEP_MIN_NS 2000ull
#define SLEEP_MAX_NS 50000ull

/* ---- self communicator: an in-process mailbox ------------------------------------ */

struct dt_self_msg {
    dt_self_msg *next; /* first field (see dt_comm_destroy) */
    int tag;
    size_t bytes;
    unsigned char data[];
};

struct dt_self_recv {
    dt_self_recv *next; /* first field */
    int tag;
    size_t bytes;
    void *buf;
    dt_req *req;
};

static dt_status self_isend(dt_comm *c, const void *buf, size_t bytes, int tag, dt_req *r) {
    *r = (dt_req){.impl = NULL, .peer = 0, .is_send = true, .done = true};
    c->bytes_sent += bytes;
    for (dt_self_recv **pp = &c->posted; *pp; pp = &(*pp)->next) {
        dt_self_recv *p = *pp;
        if (p->tag != tag) continue;
        if (p->bytes != bytes)
            return dt_errorf(DT_ERR_COMM, "self send of %zu bytes (tag %d) meets a receive of %zu bytes",
                             bytes, tag, p->bytes);
        if (bytes) memcpy(p->buf, buf, bytes);
        p->req->done = true;
        p->req->impl = NULL;
        *pp = p->next;
        dt_free(p);
        return DT_OK;
    }
    dt_self_msg *m = dt_malloc(sizeof *m + bytes);
    if (!m) return dt_errorf(DT_ERR_NOMEM, "self send of %zu bytes: out of memory", bytes);
    m->next = NULL;
    m->tag = tag;
    m->bytes = bytes;
    if (bytes) memcpy(m->data, buf, bytes);
    dt_self_msg **tail = &c->mbox;
    while (*tail) tail = &(*tail)->next;
    *tail = m;
    return DT_OK;
}

static dt_status self_irecv(dt_comm *c, void *buf, size_t bytes, int tag, dt_req *r) {
    *r = (dt_req){.impl = NULL, .peer = 0, .is_send = false, .done = false};
    for (dt_self_msg **mp = &c->mbox; *mp; mp = &(*mp)->next) {
        dt_self_msg *m = *mp;
        if (m->tag != tag) continue;
        if (m->bytes != bytes)
            return dt_errorf(DT_ERR_COMM, "self receive of %zu bytes (tag %d) meets a send of %zu bytes",
                             bytes, tag, m->bytes);
        if (bytes) memcpy(buf, m->data, bytes);
        *mp = m->next;
        dt_free(m);
        r->done = true;
        return DT_OK;
    }
    dt_self_recv *p = dt_malloc(sizeof *p);
    if (!p) return dt_errorf(DT_ERR_NOMEM, "self receive: out of memory");
    *p = (dt_self_recv){.next = NULL, .tag = tag, .bytes = bytes, .buf = buf, .req = r};
    r->impl = p;
    dt_self_recv **tail = &c->posted;
    while (*tail) tail = &(*tail)->next;
    *tail = p;
    return DT_OK;
}

/* ---- point-to-point over MPI ------------------------------------------------------- */

static MPI_Request *req_mpi(dt_req *r) { return (MPI_Request *)(void *)&r->impl; }

/* A byte count MPI can take in one call: MPI_BYTE when it fits in an int,
 * otherwise a struct of 1 MiB blocks plus the remainder (one request either
 * way). *owned tells the caller to free the type once the call is posted. */
static dt_status bytes_type(const dt_comm *c, size_t bytes, int *count, MPI_Datatype *type, bool *owned) {
    *owned = false;
    if (bytes <= (size_t)INT_MAX) {
        *count = (int)bytes;
        *type = MPI_BYTE;
        return DT_OK;
    }
    const size_t blk = (size_t)1 << 20;
    size_t q = bytes / blk, rem = bytes % blk;
    if (q > (size_t)INT_MAX) return dt_errorf(DT_ERR_UNSUPPORTED, "message of %zu bytes is too large", bytes);
    MPI_Datatype mib = MPI_DATATYPE_NULL;
    dt_status st = dt_mpi_check(c, MPI_Type_contiguous((int)blk, MPI_BYTE, &mib), "MPI_Type_contiguous");
    if (st) return st;
    int lens[2] = {(int)q, (int)rem};
    MPI_Aint disp[2] = {0, (MPI_Aint)(q * blk)};
    MPI_Datatype types[2] = {mib, MPI_BYTE};
    st = dt_mpi_check(c, MPI_Type_create_struct(rem ? 2 : 1, lens, disp, types, type), "MPI_Type_create_struct");
    MPI_Type_free(&mib);
    if (st) return st;
    st = dt_mpi_check(c, MPI_Type_commit(type), "MPI_Type_commit");
    if (st) {
        MPI_Type_free(type);
        return st;
    }
    *count = 1;
    *owned = true;
    return DT_OK;
}

static dt_status check_peer(const dt_comm *c, int peer, const char *what) {
    if (peer < 0 || peer >= c->size)
        return dt_errorf(DT_ERR_INVALID, "%s: peer %d out of range [0, %d)", what, peer, c->size);
    return DT_OK;
}

/* Posts a send (buf read) or a receive (buf written) of bytes with peer. */
static dt_status post(dt_comm *c, void *buf, size_t bytes, int peer, int tag, dt_req *r, bool send) {
    const char *what = send ? "dt_isend" : "dt_irecv";
    dt_status st = dt_comm_usable(c, what);
    if (!st) st = check_peer(c, peer, what);
    if (st) return st;
    if (!c->is_mpi) return send ? self_isend(c, buf, bytes, tag, r) : self_irecv(c, buf, bytes, tag, r);
    int n = 0;
    MPI_Datatype t = MPI_BYTE;
    bool owned = false;
    if ((st = bytes_type(c, bytes, &n, &t, &owned))) return st;
    *r = (dt_req){.impl = NULL, .peer = peer, .is_send = send, .done = false};
    st = send ? dt_mpi_check(c, MPI_Isend(buf, n, t, peer, tag, c->mc, req_mpi(r)), "MPI_Isend")
              : dt_mpi_check(c, MPI_Irecv(buf, n, t, peer, tag, c->mc, req_mpi(r)), "MPI_Irecv");
    if (owned) MPI_Type_free(&t);
    if (!st && send) c->bytes_sent += bytes;
    return st;
}

dt_status dt_isend(dt_comm *c, const void *buf, size_t bytes, int peer, int tag, dt_req *r) {
    return post(c, (void *)buf, bytes, peer, tag, r, true);
}

dt_status dt_irecv(dt_comm *c, void *buf, size_t bytes, int peer, int tag, dt_req *r) {
    return post(c, buf, bytes, peer, tag, r, false);
}

/* Writes "rank A was waiting for rank B (recv), rank C (send)" for the requests
 * not done, and cancels/frees them. Sends are only freed (cancelling sends is
 * deprecated and Open MPI does not do it); MPI may still read their buffers if
 * the peer turns up later, which is why the communicator is marked broken. */
static dt_status timeout_fail(dt_comm *c, dt_req *reqs, int n, const char *what, double waited) {
    char peers[512];
    size_t len = 0;
    int listed = 0, more = 0;
    peers[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (reqs[i].done) continue;
        MPI_Request *mr = req_mpi(&reqs[i]);
        if (!reqs[i].is_send) MPI_Cancel(mr);
        if (*mr != MPI_REQUEST_NULL) MPI_Request_free(mr);
        reqs[i].done = true;
        /* One mention per (peer, direction). */
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = reqs[j].peer == reqs[i].peer && reqs[j].is_send == reqs[i].is_send &&
                   reqs[j].impl == (void *)1;
        reqs[i].impl = (void *)1; /* marks "timed out" for the dedup above */
        if (seen) continue;
        if (listed == 4) {
            more++;
            continue;
        }
        int w = snprintf(peers + len, sizeof peers - len, "%srank %d (%s)", listed ? ", " : "",
                         c->world[reqs[i].peer], reqs[i].is_send ? "send" : "recv");
        if (w > 0 && (size_t)w < sizeof peers - len) len += (size_t)w;
        listed++;
    }
    if (more && len < sizeof peers) snprintf(peers + len, sizeof peers - len, " and %d more", more);
    c->broken = true;
    return dt_errorf(DT_ERR_TIMEOUT, "%s timed out after %.1f s at step %lld: rank %d was waiting for %s", what,
                     waited, (long long)c->step, c->world[c->rank], peers);
}

static void backoff(uint64_t waited_ns, uint64_t *sleep_ns) {
    /* Linux rounds a sleep up by the thread's timer slack (50 us by default),
     * which would make the first sleeps 10x longer than asked. */
    static _Thread_local bool slack_set = false;
    if (waited_ns < YIELD_NS) {
        sched_yield();
        return;
    }
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
        slack_set = true;
    }
    struct timespec ts = {0, (long)*sleep_ns};
    nanosleep(&ts, NULL);
    *sleep_ns += *sleep_ns / 2;
    if (*sleep_ns > SLEEP_MAX_NS) *sleep_ns = SLEEP_MAX_NS;
}

dt_status dt_waitall(dt_comm *c, dt_req *reqs, int n, const char *what) {
    return dt_waitall_for(c, reqs, n, c->timeout, what);
}

dt_status dt_waitall_for(dt_comm *c, dt_req *reqs, int n, double seconds, const char *what) {
    if (n <= 0) return DT_OK;
    if (!c->is_mpi) {
        for (int i = 0; i < n; i++) {
            if (!reqs[i].done)
                return dt_errorf(DT_ERR_COMM, "%s: waiting for a message to self that was never sent (tag %d)",
                                 what, reqs[i].impl ? ((dt_self_recv *)reqs[i].impl)->tag : -1);
        }
        return DT_OK;
    }
    enum { STACK = 64 };
    MPI_Request stack_reqs[STACK], *mr = stack_reqs;
    int stack_idx[STACK], *idx = stack_idx;
    dt_status st = DT_OK;
    if (n > STACK) {
        mr = dt_malloc((size_t)n * sizeof *mr);
        idx = dt_malloc((size_t)n * sizeof *idx);
        if (!mr || !idx) {
            st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory waiting for %d requests", what, n);
            goto fn_exit;
        }
    }
    int m = 0; /* requests still pending: mr[k] belongs to reqs[idx[k]] */
    for (int i = 0; i < n; i++) {
        if (reqs[i].done) continue;
        mr[m] = *req_mpi(&reqs[i]);
        idx[m++] = i;
    }
    uint64_t t0 = dt_now_ns(), sleep_ns = SLEEP_MIN_NS;
    uint64_t limit_ns = seconds > 0 ? (uint64_t)(seconds * 1e9) : UINT64_MAX;
    while (m > 0) {
        int flag = 0;
        int rc = MPI_Testall(m, mr, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            st = dt_mpi_check(c, rc, "MPI_Testall");
            goto fn_exit;
        }
        if (flag) {
            for (int k = 0; k < m; k++) {
                reqs[idx[k]].done = true;
                *req_mpi(&reqs[idx[k]]) = MPI_REQUEST_NULL;
            }
            break;
        }
        uint64_t waited = dt_now_ns() - t0;
        if (waited >= limit_ns) {
            /* Testall leaves completed requests as they were: find them first. */
            for (int k = 0; k < m; k++) {
                int done = 0;
                MPI_Test(&mr[k], &done, MPI_STATUS_IGNORE);
                *req_mpi(&reqs[idx[k]]) = mr[k];
                if (done) reqs[idx[k]].done = true;
            }
            st = timeout_fail(c, reqs, n, what, (double)waited * 1e-9);
            goto fn_exit;
        }
        backoff(waited, &sleep_ns);
    }
fn_exit:
    if (mr != stack_reqs) dt_free(mr);
    if (idx != stack_idx) dt_free(idx);
    return st;
}

dt_status dt_testany(dt_comm *c, dt_req *reqs, int n, int *index) {
    *index = -1;
    if (!c->is_mpi) return dt_errorf(DT_ERR_UNSUPPORTED, "dt_testany needs an MPI communicator");
    for (int i = 0; i < n; i++) {
        if (reqs[i].done) continue;
        int flag = 0;
        dt_status st = dt_mpi_check(c, MPI_Test(req_mpi(&reqs[i]), &flag, MPI_STATUS_IGNORE), "MPI_Test");
        if (st) {
            *index = i;
            return st;
        }
        if (flag) {
            reqs[i].done = true;
            *index = i;
            return DT_OK;
        }
    }
    return DT_OK;
}

void dt_cancel(dt_comm *c, dt_req *reqs, int n) {
    for (int i = 0; i < n; i++) {
        if (reqs[i].done) continue;
        if (c->is_mpi) {
            MPI_Request *mr = req_mpi(&reqs[i]);
            if (!reqs[i].is_send) MPI_Cancel(mr);
            if (*mr != MPI_REQUEST_NULL) MPI_Request_free(mr);
        } else if (reqs[i].impl) {
            /* A posted self receive: unlink it from the mailbox's list. */
            for (dt_self_recv **pp = &c->posted; *pp; pp = &(*pp)->next)
                if (*pp == reqs[i].impl) {
                    dt_self_recv *p = *pp;
                    *pp = p->next;
                    dt_free(p);
                    break;
                }
        }
        reqs[i].impl = NULL;
        reqs[i].done = true;
    }
}

dt_status dt_sendrecv(dt_comm *c, const void *sbuf, size_t sbytes, int dst, void *rbuf, size_t rbytes, int src,
                      int tag, const char *what) {
    dt_req r[2];
    dt_status st = dt_irecv(c, rbuf, rbytes, src, tag, &r[0]);
    if (st) return st;
    st = dt_isend(c, sbuf, sbytes, dst, tag, &r[1]);
    if (st) {
        /* The receive is posted: wait for it so it does not outlive the call. */
        dt_status st2 = dt_waitall(c, r, 1, what);
        (void)st2;
        return st;
    }
    return dt_waitall(c, r, 2, what);
}
