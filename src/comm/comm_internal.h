/* Private to src/comm: the communicator struct, the MPI checking wrapper, the
 * reduction kernels and the per-algorithm entry points that the public
 * dispatchers (dt_allreduce, dt_reduce_scatter, ...) call. */
#ifndef DTRAIN_COMM_INTERNAL_H
#define DTRAIN_COMM_INTERNAL_H

#include "dtrain/comm.h"

#include <mpi.h>

/* A host's shared-memory segment (shm.c) and a communicator's topology (topo.c). */
typedef struct dt_shm dt_shm;
typedef struct dt_topo dt_topo;

/* One message of the self communicator's mailbox (sent before it was received). */
typedef struct dt_self_msg dt_self_msg;
/* A receive posted on the self communicator before its send. */
typedef struct dt_self_recv dt_self_recv;

struct dt_comm {
    bool is_mpi;
    bool broken;          /* a wait timed out: messages may be left in flight */
    MPI_Comm mc;          /* MPI_COMM_NULL for the self communicator */
    int rank, size;
    int *world;           /* world rank of each rank of this comm (size entries) */
    double timeout;       /* seconds, <= 0: none */
    int64_t step;
    size_t max_segment;   /* bytes */
    uint64_t bytes_sent;
    float *scratch;       /* grown on demand, kept: no malloc in the step loop */
    size_t scratch_floats;
    dt_req *reqs;         /* request scratch, grown on demand, kept */
    size_t nreqs;
    dt_self_msg *mbox;    /* self comm: sent, not yet received (FIFO) */
    dt_self_recv *posted; /* self comm: posted, not yet matched (FIFO) */
    dt_topo *topo;        /* hosts, local and cross-host groups; made at first need */
};

/* Which ranks of a communicator share a host (topo.c). Hosts are numbered by
 * their first rank of c; local ranks by rank of c. */
struct dt_topo {
    int nhosts;           /* hosts holding ranks of c */
    int lsize, lrank;     /* ranks of c on this host, this rank among them */
    int lmax;             /* most ranks of c on one host */
    bool even;            /* every host holds lsize ranks */
    int *hostpos;         /* rank of c -> its host's number */
    int *lindex;          /* rank of c -> its local rank */
    int *at;              /* even: host h's local rank j -> rank of c (at[h * lsize + j]) */
    dt_comm *local;       /* the ranks of c on this host */
    dt_comm *cross;       /* even: local rank lrank of every host, in host order; uneven: every
                           * host's local rank 0 (NULL on the other ranks) */
    dt_shm *shm;          /* local's segment; NULL: one local rank, or no shared memory here */
    bool shm_ok;          /* every host with several ranks has its segment (the same on all ranks) */
    char no_shm[160];     /* why there is none, when lsize > 1 */
};

/* c's topology, made on first call: collective over c then (all ranks call it
 * at the same point, as they do a collective). Never NULL on DT_OK. */
dt_status dt_topo_get(dt_comm *c, dt_topo **out);
void dt_topo_free(dt_topo *t);

/* ---- shared memory (shm.c, shm_coll.c) ---------------------------------------
 * dt_shm_create: collective over the local communicator lc; *out NULL with the
 * reason in why when the host gives no shared memory (DT_OK: not an error).
 * dt_shm_sync: sync point; waits for every local rank until c's deadline, then
 * DT_ERR_TIMEOUT naming the ranks that did not arrive (c is marked broken). */
dt_status dt_shm_create(dt_comm *lc, size_t area_bytes, dt_shm **out, char *why, size_t nwhy);
void dt_shm_destroy(dt_shm *s);
int dt_shm_size(const dt_shm *s);
int dt_shm_rank(const dt_shm *s);
size_t dt_shm_area_floats(const dt_shm *s);
float *dt_shm_area(dt_shm *s, int q);   /* slot q (0..L-1), or the result area (L) */
dt_status dt_shm_sync(dt_shm *s, dt_comm *c, const char *what);

/* Local ranks one segment serves (shm_coll.c's per-round tables). */
#define DT_SHM_MAX_LOCAL 64

/* A range of a vector and the local rank that owns it (shm_coll.c). */
typedef struct {
    size_t off, len;
    int owner;
} dt_shm_range;
/* The partition convention's p chunks; chunk r owned by owner[r] (NULL: r). */
void dt_shm_chunks(dt_shm_range *rg, size_t count, int p, const int *owner);
/* Each owner's ranges summed over the local ranks (in local-rank order, times
 * scale) into the owner's buf; all: into every rank's buf. */
dt_status dt_shm_reduce(dt_shm *s, dt_comm *c, float *buf, const dt_shm_range *rg, int nrg, bool all, float scale,
                        const char *what);
/* Each owner's ranges copied from its buf into every rank's buf. */
dt_status dt_shm_allgather(dt_shm *s, dt_comm *c, float *buf, const dt_shm_range *rg, int nrg, const char *what);
dt_status dt_shm_bcast(dt_shm *s, dt_comm *c, void *buf, size_t bytes, int root, const char *what);

/* The one checking wrapper for MPI calls: rc == MPI_SUCCESS -> DT_OK; otherwise
 * records "MPI_Xxx failed on rank R: <MPI_Error_string>" and returns DT_ERR_COMM.
 * Usage: DT_TRY(dt_mpi_check(c, MPI_Isend(...), "MPI_Isend")). c may be NULL. */
dt_status dt_mpi_check(const dt_comm *c, int rc, const char *call);

/* Wraps an MPI communicator we own (dup or split result): error handler,
 * rank/size, world-rank table. Takes ownership of mc (frees it on failure). */
dt_status dt_comm_wrap(MPI_Comm mc, dt_comm **out);

/* The process's host table (topology.c): learnt from the world communicator
 * (collective over it), forgotten at dt_comm_finalize. */
dt_status dt_topology_learn(dt_comm *world);
void dt_topology_forget(void);

/* Scratch of at least n floats owned by c (valid until the next call). */
dt_status dt_comm_scratch(dt_comm *c, size_t n, float **out);
/* n zeroed requests owned by c (valid until the next call). */
dt_status dt_comm_reqs(dt_comm *c, size_t n, dt_req **out);
/* Refuses work on a communicator whose earlier wait timed out. */
dt_status dt_comm_usable(const dt_comm *c, const char *what);

/* Elements of one pipeline segment for this comm (>= 1). */
size_t dt_seg_elems(const dt_comm *c, size_t elem_size);

/* dst[i] += src[i]; the two must not overlap (vectorised). */
void dt_reduce_add_f32(float *restrict dst, const float *restrict src, size_t n);
void dt_scale_f32(float *buf, size_t n, float s);
/* out[i] = (src[0][i] + src[1][i] + ... + src[n_src-1][i]) * scale, summed in
 * that order (scale 1: no multiplication); also into out2 when not NULL. out
 * may be one of the sources; n_src >= 2. */
void dt_sum_sources_f32(float *out, float *out2, const float *const *src, int n_src, size_t n, float scale);

/* Algorithms (count > 0, size > 1 already checked by the dispatcher). */
dt_status dt_allreduce_ring(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allreduce_rhd(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allreduce_rd(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allreduce_native(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
/* Topology-aware (hier.c): shm needs one host; one_host asks the same of the
 * reduce-scatter and all-gather, which otherwise run hierarchically. */
dt_status dt_allreduce_shm(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allreduce_hier(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_reduce_scatter_topo(dt_comm *c, float *buf, size_t count, dt_reduce_op op, bool one_host);
dt_status dt_allgather_topo(dt_comm *c, float *buf, size_t count, bool one_host);
dt_status dt_bcast_shm(dt_comm *c, void *buf, size_t bytes, int root);
/* Ring phases (allreduce_ring.c); the reduce-scatter leaves chunk r reduced on
 * rank r (not yet scaled), the all-gather spreads every rank's chunk. */
dt_status dt_ring_reduce_scatter(dt_comm *c, float *buf, size_t count, const char *what);
dt_status dt_ring_allgather(dt_comm *c, float *buf, size_t count, const char *what);
dt_status dt_reduce_scatter_native(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allgather_native(dt_comm *c, float *buf, size_t count);
dt_status dt_bcast_native(dt_comm *c, void *buf, size_t bytes, int root);
dt_status dt_barrier_native(dt_comm *c);
/* What AUTO picks for an all-reduce of `bytes` on this comm (auto.c), after
 * dt_auto_prepare (collective: the topology, the first time). */
dt_status dt_auto_prepare(dt_comm *c);
dt_algo dt_auto_allreduce(const dt_comm *c, size_t bytes);
dt_algo dt_auto_reduce_scatter(const dt_comm *c, size_t bytes);
dt_algo dt_auto_allgather(const dt_comm *c, size_t bytes);

/* Tags: one per collective, so a stray message of one can never match another. */
enum {
    DT_TAG_RING_RS = 0x7d00,
    DT_TAG_RING_AG,
    DT_TAG_RHD,
    DT_TAG_RD,
    DT_TAG_BCAST,
    DT_TAG_BARRIER,
    DT_TAG_F64,
    DT_TAG_HIER,
};

#define DT_TRY(expr)                                                           \
    do {                                                                       \
        st = (expr);                                                           \
        if (st != DT_OK) goto fn_exit;                                         \
    } while (0)

#endif
