/* The communicator: MPI (world and sub-groups) or a single-rank "self" one that
 * never calls MPI: its lifetime, the checking wrapper, scratch buffers;
 * names and the partition convention (point-to-point and the waits are in
 * p2p.c, the collective dispatchers in their own files: allreduce.c, ...). */
#include "core/cpu.h"
#include "comm/comm_internal.h"
#include "dtrain/testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(void *), "MPI_Request must fit in dt_req.impl");

#define DT_DEFAULT_TIMEOUT 60.0
#define DT_DEFAULT_SEGMENT ((size_t)1 << 20)
/* Open MPI's TCP transport sends a message above its eager limit (64 KiB by
 * default) by rendezvous, which on a link with a queue (any shaped or busy
 * Ethernet) keeps too little in flight: on 2 emulated hosts at 100 Mbit/s a
 * 16 MiB all-reduce took 2.71 s (0.5 of the link) and 1.46-1.54 s (0.87) with
 * the limit at 4 MiB; a W2 data-parallel step 2.4 s and 1.4 s, a GPipe step
 * across the hosts 1.2 s and 0.62 s; 1 MiB was not enough (a segment and its
 * header exceed it). 4 MiB covers a segment, a gradient bucket and a pipeline
 * message; resident memory grew 3.6 MB. A value the user sets wins. */
#define DT_TCP_EAGER_LIMIT "4194304"

static bool g_mpi_by_us = false; /* we called MPI_Init_thread */

/* ---- names, partition ------------------------------------------------------ */

static const char *const g_algo_names[DT_ALGO_COUNT] = {
    [DT_ALGO_AUTO] = "auto", [DT_ALGO_RING] = "ring", [DT_ALGO_RHD] = "rhd",
    [DT_ALGO_RD] = "rd",     [DT_ALGO_SHM] = "shm",   [DT_ALGO_HIER] = "hier",
    [DT_ALGO_NATIVE] = "native",
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
    return dt_errorf(DT_ERR_INVALID, "unknown collective algorithm '%s' (ring, rhd, rd, shm, hier, native, auto)",
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
dt_status dt_comm_wrap(MPI_Comm mc, dt_comm **out) {
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
        setenv("OMPI_MCA_btl_tcp_eager_limit", DT_TCP_EAGER_LIMIT, 0);
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
    return dt_comm_wrap(mc, out);
}

dt_status dt_comm_split(dt_comm *parent, int color, int key, dt_comm **out) {
    if (!parent) return dt_errorf(DT_ERR_INVALID, "dt_comm_split: parent is NULL");
    if (color < 0) return dt_errorf(DT_ERR_INVALID, "dt_comm_split: color %d must be >= 0", color);
    if (!parent->is_mpi) return dt_comm_self(out);
    MPI_Comm mc = MPI_COMM_NULL;
    dt_status st = dt_mpi_check(parent, MPI_Comm_split(parent->mc, color, key, &mc), "MPI_Comm_split");
    if (st) return st;
    return dt_comm_wrap(mc, out);
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
    dt_topo_free(c->topo);
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

bool dt_comm_concurrent(void) {
    int init = 0, fin = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    if (!init || fin) return true;
    return MPI_Query_thread(&provided) == MPI_SUCCESS && provided == MPI_THREAD_MULTIPLE;
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

DT_HOT void dt_reduce_add_f32(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

DT_HOT void dt_scale_f32(float *buf, size_t n, float s) {
    for (size_t i = 0; i < n; i++) buf[i] *= s;
}


DT_HOT void dt_sum_sources_f32(float *out, float *out2, const float *const *src, int n_src, size_t n, float scale) {
    enum { B = 512 };
    float tmp[B];
    for (size_t i0 = 0; i0 < n; i0 += B) {
        size_t m = n - i0 < B ? n - i0 : B;
        const float *a = src[0] + i0, *b = src[1] + i0;
        for (size_t i = 0; i < m; i++) tmp[i] = a[i] + b[i];
        for (int q = 2; q < n_src; q++) {
            const float *x = src[q] + i0;
            for (size_t i = 0; i < m; i++) tmp[i] += x[i];
        }
        if (scale != 1.0f)
            for (size_t i = 0; i < m; i++) tmp[i] *= scale;
        memcpy(out + i0, tmp, m * sizeof(float));
        if (out2) memcpy(out2 + i0, tmp, m * sizeof(float));
    }
}
