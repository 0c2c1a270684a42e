/* The communicator: MPI (world and sub-groups) or a single-rank "self" one that
 * never calls MPI; non-blocking point-to-point with a deadline on every wait;
 * names and the partition convention (the collective dispatchers are in their
 * own files: allreduce.c, reduce_scatter.c, ...).
 *
 * Waiting: MPI progresses (for the shared-memory transport, copies data) only
 * inside MPI calls, so a wait polls MPI_Testall. To leave the core to the other
 * ranks (2-4 ranks share 2 cores here) it yields for the first few microseconds
 * and then sleeps with a growing nanosleep, never spinning. */
#include "comm/comm_internal.h"
#include "dtrain/testing.h"

#include <limits.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(void *), "MPI_Request must fit in dt_req.impl");

#define DT_DEFAULT_TIMEOUT 60.0
#define DT_DEFAULT_SEGMENT ((size_t)1 << 20)
/* Back-off of dt_waitall: yield for YIELD_NS, then sleep SLEEP_MIN_NS doubling
 * up to SLEEP_MAX_NS. A 1 MiB segment moves in ~200 us, so the cap keeps the
 * added latency within a segment time. */
#define YIELD_NS 1000000ull
#define SLEEP_MIN_NS 5000ull
#define SLEEP_MAX_NS 200000ull

static bool g_mpi_by_us = false; /* we called MPI_Init_thread */

/* ---- names, partition ------------------------------------------------------ */

static const char *const g_algo_names[DT_ALGO_COUNT] = {
    [DT_ALGO_AUTO] = "auto", [DT_ALGO_RING] = "ring", [DT_ALGO_RHD] = "rhd",
    [DT_ALGO_RD] = "rd",     [DT_ALGO_NATIVE] = "native",
};

const char *dt_algo_name(dt_algo a) {
    if ((unsigned)a >= DT_ALGO_COUNT) return "unknown";
    return g_algo_names[a];
}

dt_status dt_algo_parse(const char *s, dt_algo *out) {
    for (int a = 0; a < DT_ALGO_COUNT; a++) {
        if (s && strcmp(s, g_algo_names[a]) == 0) {
            *out = (dt_algo)a;
            return DT_OK;
        }
    }
    return dt_errorf(DT_ERR_INVALID, "unknown collective algorithm '%s' (ring, rhd, rd, native, auto)",
                     s ? s : "(null)");
}

size_t dt_chunk_off(size_t count, int size, int r) {
    DT_ASSERT(size > 0 && r >= 0 && r <= size);
    size_t q = count / (size_t)size, rem = count % (size_t)size, ur = (size_t)r;
    return ur * q + (ur < rem ? ur : rem);
}

size_t dt_chunk_len(size_t count, int size, int r) {
    DT_ASSERT(size > 0 && r >= 0 && r < size);
    return count / (size_t)size + ((size_t)r < count % (size_t)size ? 1 : 0);
}

/* ---- the checking wrapper ---------------------------------------------------- */

static int world_rank_or_zero(void) {
    int init = 0, fin = 0, r = 0;
    if (MPI_Initialized(&init) != MPI_SUCCESS || !init) return 0;
    if (MPI_Finalized(&fin) != MPI_SUCCESS || fin) return 0;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS) return 0;
    return r;
}

dt_status dt_mpi_check(const dt_comm *c, int rc, const char *call) {
    if (rc == MPI_SUCCESS) return DT_OK;
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = snprintf(msg, sizeof msg, "error %d", rc);
    msg[len < 0 ? 0 : (len > MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING : len)] = '\0';
    int wr = c && c->world ? c->world[c->rank] : world_rank_or_zero();
    return dt_errorf(DT_ERR_COMM, "%s failed on rank %d: %s", call, wr, msg);
}

dt_status dt_comm_usable(const dt_comm *c, const char *what) {
    if (!c) return dt_errorf(DT_ERR_INVALID, "%s: communicator is NULL", what);
    if (c->broken)
        return dt_errorf(DT_ERR_COMM,
                         "%s on rank %d: the communicator timed out earlier and may hold stray messages; "
                         "re-create it (or restart the job)",
                         what, c->world[c->rank]);
    return DT_OK;
}

/* ---- lifetime ---------------------------------------------------------------- */

static dt_comm *comm_alloc(int rank, int size) {
    dt_comm *c = dt_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->world = dt_calloc((size_t)size, sizeof(int));
    if (!c->world) {
        dt_free(c);
        return NULL;
    }
    c->mc = MPI_COMM_NULL;
    c->rank = rank;
    c->size = size;
    c->timeout = DT_DEFAULT_TIMEOUT;
    c->max_segment = DT_DEFAULT_SEGMENT;
    return c;
}

dt_status dt_comm_self(dt_comm **out) {
    dt_comm *c = comm_alloc(0, 1);
    if (!c) return dt_errorf(DT_ERR_NOMEM, "dt_comm_self: out of memory");
    c->world[0] = 0;
    *out = c;
    return DT_OK;
}

static const char *thread_level_name(int t) {
    switch (t) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "unknown";
    }
}

/* Wraps an MPI communicator we own (dup or split result): error handler,
 * rank/size, world-rank table. Takes ownership of mc (frees it on failure). */
static dt_status comm_wrap(MPI_Comm mc, dt_comm **out) {
    dt_status st = DT_OK;
    dt_comm *c = NULL;
    MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
    int *ids = NULL;
    int rank = 0, size = 0;
    DT_TRY(dt_mpi_check(NULL, MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
    DT_TRY(dt_mpi_check(NULL, MPI_Comm_rank(mc, &rank), "MPI_Comm_rank"));
    DT_TRY(dt_mpi_check(NULL, MPI_Comm_size(mc, &size), "MPI_Comm_size"));
    c = comm_alloc(rank, size);
    ids = dt_calloc((size_t)size, sizeof(int));
    if (!c || !ids) {
        st = dt_errorf(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", size);
        goto fn_exit;
    }
    for (int i = 0; i < size; i++) ids[i] = i;
    DT_TRY(dt_mpi_check(NULL, MPI_Comm_group(mc, &g), "MPI_Comm_group"));
    DT_TRY(dt_mpi_check(NULL, MPI_Comm_group(MPI_COMM_WORLD, &wg), "MPI_Comm_group"));
    DT_TRY(dt_mpi_check(NULL, MPI_Group_translate_ranks(g, size, ids, wg, c->world),
                        "MPI_Group_translate_ranks"));
    c->is_mpi = true;
    c->mc = mc;
    *out = c;
    c = NULL;
    mc = MPI_COMM_NULL;
fn_exit:
    if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
    if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
    if (mc != MPI_COMM_NULL) MPI_Comm_free(&mc);
    dt_free(ids);
    dt_comm_destroy(c);
    return st;
}

static dt_status world_init(bool mpi, dt_comm **out);

dt_status dt_comm_init(bool mpi, dt_comm **out) {
    dt_status st = world_init(mpi, out);
    if (st) return st;
    st = dt_topology_learn(*out);
    if (st) {
        dt_comm_destroy(*out);
        *out = NULL;
    }
    return st;
}

static dt_status world_init(bool mpi, dt_comm **out) {
    if (!mpi) return dt_comm_self(out);
    int init = 0, provided = MPI_THREAD_SINGLE;
    dt_status st = dt_mpi_check(NULL, MPI_Initialized(&init), "MPI_Initialized");
    if (st) return st;
    if (!init) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) return dt_mpi_check(NULL, rc, "MPI_Init_thread");
        g_mpi_by_us = true;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    } else {
        st = dt_mpi_check(NULL, MPI_Query_thread(&provided), "MPI_Query_thread");
        if (st) return st;
    }
    if (provided < MPI_THREAD_SERIALIZED)
        return dt_errorf(DT_ERR_UNSUPPORTED,
                         "MPI provides only %s; dtrain needs MPI_THREAD_SERIALIZED or better "
                         "(its communication thread overlaps backward). Rebuild MPI with thread support",
                         thread_level_name(provided));
    /* A private copy of the world, so our tags never meet the application's. */
    MPI_Comm mc = MPI_COMM_NULL;
    st = dt_mpi_check(NULL, MPI_Comm_dup(MPI_COMM_WORLD, &mc), "MPI_Comm_dup");
    if (st) return st;
    return comm_wrap(mc, out);
}

dt_status dt_comm_split(dt_comm *parent, int color, int key, dt_comm **out) {
    if (!parent) return dt_errorf(DT_ERR_INVALID, "dt_comm_split: parent is NULL");
    if (color < 0) return dt_errorf(DT_ERR_INVALID, "dt_comm_split: color %d must be >= 0", color);
    if (!parent->is_mpi) return dt_comm_self(out);
    MPI_Comm mc = MPI_COMM_NULL;
    dt_status st = dt_mpi_check(parent, MPI_Comm_split(parent->mc, color, key, &mc), "MPI_Comm_split");
    if (st) return st;
    return comm_wrap(mc, out);
}

void dt_comm_destroy(dt_comm *c) {
    if (!c) return;
    if (c->is_mpi && c->mc != MPI_COMM_NULL) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Comm_free(&c->mc);
    }
    while (c->mbox) {
        dt_self_msg *m = c->mbox;
        c->mbox = *(dt_self_msg **)m; /* next is the first field */
        dt_free(m);
    }
    while (c->posted) {
        dt_self_recv *p = c->posted;
        c->posted = *(dt_self_recv **)p;
        dt_free(p);
    }
    dt_free(c->scratch);
    dt_free(c->reqs);
    dt_free(c->world);
    dt_free(c);
}

void dt_comm_finalize(void) {
    int init = 0, fin = 0;
    dt_topology_forget();
    if (!g_mpi_by_us) return;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
}

void dt_comm_abort(dt_comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    if (!init || fin) return;
    /* mpirun forwards our stderr through a pipe it reads in its own time;
     * an abort that reaches it first loses the line that says why. */
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    MPI_Abort(c && c->is_mpi ? c->mc : MPI_COMM_WORLD, code);
}

int dt_comm_rank(const dt_comm *c) { return c->rank; }
int dt_comm_size(const dt_comm *c) { return c->size; }
int dt_comm_world_rank(const dt_comm *c, int r) {
    DT_ASSERT(r >= 0 && r < c->size);
    return c->world[r];
}
bool dt_comm_is_mpi(const dt_comm *c) { return c->is_mpi; }
void dt_comm_set_timeout(dt_comm *c, double seconds) { c->timeout = seconds; }
double dt_comm_timeout(const dt_comm *c) { return c->timeout; }
void dt_comm_set_step(dt_comm *c, int64_t step) { c->step = step; }
void dt_comm_set_max_segment(dt_comm *c, size_t bytes) { c->max_segment = bytes ? bytes : 1; }
uint64_t dt_comm_bytes_sent(const dt_comm *c) { return c->bytes_sent; }

dt_status dt_comm_scratch(dt_comm *c, size_t n, float **out) {
    if (c->scratch_floats < n) {
        float *p = dt_alloc_floats(n);
        if (!p) return dt_errorf(DT_ERR_NOMEM, "communication scratch of %zu floats: out of memory", n);
        dt_free(c->scratch);
        c->scratch = p;
        c->scratch_floats = n;
    }
    *out = c->scratch;
    return DT_OK;
}

dt_status dt_comm_reqs(dt_comm *c, size_t n, dt_req **out) {
    if (c->nreqs < n) {
        dt_req *p = dt_calloc(n, sizeof *p);
        if (!p) return dt_errorf(DT_ERR_NOMEM, "%zu communication requests: out of memory", n);
        dt_free(c->reqs);
        c->reqs = p;
        c->nreqs = n;
    }
    memset(c->reqs, 0, n * sizeof *c->reqs);
    *out = c->reqs;
    return DT_OK;
}

size_t dt_seg_elems(const dt_comm *c, size_t elem_size) {
    size_t n = c->max_segment / elem_size;
    return n ? n : 1;
}

/* ---- kernels -------------------------------------------------------------------- */

void dt_reduce_add_f32(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void dt_scale_f32(float *buf, size_t n, float s) {
    for (size_t i = 0; i < n; i++) buf[i] *= s;
}

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

dt_status dt_isend(dt_comm *c, const void *buf, size_t bytes, int peer, int tag, dt_req *r) {
    dt_status st = dt_comm_usable(c, "dt_isend");
    if (!st) st = check_peer(c, peer, "dt_isend");
    if (st) return st;
    if (!c->is_mpi) return self_isend(c, buf, bytes, tag, r);
    int n;
    MPI_Datatype t;
    bool owned;
    if ((st = bytes_type(c, bytes, &n, &t, &owned))) return st;
    *r = (dt_req){.impl = NULL, .peer = peer, .is_send = true, .done = false};
    st = dt_mpi_check(c, MPI_Isend(buf, n, t, peer, tag, c->mc, req_mpi(r)), "MPI_Isend");
    if (owned) MPI_Type_free(&t);
    if (!st) c->bytes_sent += bytes;
    return st;
}

dt_status dt_irecv(dt_comm *c, void *buf, size_t bytes, int peer, int tag, dt_req *r) {
    dt_status st = dt_comm_usable(c, "dt_irecv");
    if (!st) st = check_peer(c, peer, "dt_irecv");
    if (st) return st;
    if (!c->is_mpi) return self_irecv(c, buf, bytes, tag, r);
    int n;
    MPI_Datatype t;
    bool owned;
    if ((st = bytes_type(c, bytes, &n, &t, &owned))) return st;
    *r = (dt_req){.impl = NULL, .peer = peer, .is_send = false, .done = false};
    st = dt_mpi_check(c, MPI_Irecv(buf, n, t, peer, tag, c->mc, req_mpi(r)), "MPI_Irecv");
    if (owned) MPI_Type_free(&t);
    return st;
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
