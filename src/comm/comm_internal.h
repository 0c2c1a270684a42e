/* Private to src/comm: the communicator struct, the MPI checking wrapper, the
 * reduction kernels and the per-algorithm entry points that the public
 * dispatchers (dt_allreduce, dt_reduce_scatter, ...) call. */
#ifndef DTRAIN_COMM_INTERNAL_H
#define DTRAIN_COMM_INTERNAL_H

#include "dtrain/comm.h"

#include <mpi.h>

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
};

/* The one checking wrapper for MPI calls: rc == MPI_SUCCESS -> DT_OK; otherwise
 * records "MPI_Xxx failed on rank R: <MPI_Error_string>" and returns DT_ERR_COMM.
 * Usage: DT_TRY(dt_mpi_check(c, MPI_Isend(...), "MPI_Isend")). c may be NULL. */
dt_status dt_mpi_check(const dt_comm *c, int rc, const char *call);

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

/* Algorithms (count > 0, size > 1 already checked by the dispatcher). */
dt_status dt_allreduce_ring(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allreduce_rhd(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allreduce_rd(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allreduce_native(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
/* Ring phases (allreduce_ring.c); the reduce-scatter leaves chunk r reduced on
 * rank r (not yet scaled), the all-gather spreads every rank's chunk. */
dt_status dt_ring_reduce_scatter(dt_comm *c, float *buf, size_t count, const char *what);
dt_status dt_ring_allgather(dt_comm *c, float *buf, size_t count, const char *what);
dt_status dt_reduce_scatter_native(dt_comm *c, float *buf, size_t count, dt_reduce_op op);
dt_status dt_allgather_native(dt_comm *c, float *buf, size_t count);
dt_status dt_bcast_native(dt_comm *c, void *buf, size_t bytes, int root);
dt_status dt_barrier_native(dt_comm *c);
/* What AUTO picks for an all-reduce of `bytes` on this comm (auto.c). */
dt_algo dt_auto_allreduce(const dt_comm *c, size_t bytes);
dt_algo dt_auto_reduce_scatter(const dt_comm *c, size_t bytes);

/* Tags: one per collective, so a stray message of one can never match another. */
enum {
    DT_TAG_RING_RS = 0x7d00,
    DT_TAG_RING_AG,
    DT_TAG_RHD,
    DT_TAG_RD,
    DT_TAG_BCAST,
    DT_TAG_BARRIER,
    DT_TAG_F64,
};

#define DT_TRY(expr)                                                           \
    do {                                                                       \
        st = (expr);                                                           \
        if (st != DT_OK) goto fn_exit;                                         \
    } while (0)

#endif
