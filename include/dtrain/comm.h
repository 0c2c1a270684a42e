/* dtrain communication layer: a communicator over MPI (world, sub-groups) or a
 * single-rank "self" one, non-blocking point-to-point with tags and a deadline
 * on every wait, and our own collective algorithms written on that
 * point-to-point layer (one file each under src/comm/, cost model in the
 * opening comment). MPI's own collectives stay available as DT_ALGO_NATIVE.
 *
 * Threading: a communicator may be used by one thread at a time (the data-
 * parallel communication thread during backward, the main thread otherwise).
 *
 * Partition convention (reduce-scatter, all-gather, ZeRO shards): a vector of
 * `count` elements is split into `size` contiguous chunks; chunk r starts at
 * dt_chunk_off(count, size, r) and holds dt_chunk_len(count, size, r) elements
 * (the first count % size chunks hold one more). Rank r owns chunk r. */
#ifndef DTRAIN_COMM_H
#define DTRAIN_COMM_H

#include "dtrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_comm dt_comm;

typedef enum { DT_OP_SUM, DT_OP_AVG } dt_reduce_op;

typedef enum {
    DT_ALGO_AUTO,     /* chosen by topology, size and rank count (auto.c) */
    DT_ALGO_RING,     /* segmented ring: reduce-scatter + all-gather */
    DT_ALGO_RHD,      /* recursive halving-doubling (Rabenseifner), any rank count */
    DT_ALGO_RD,       /* recursive doubling: small messages */
    DT_ALGO_SHM,      /* through a shared-memory segment: every rank on one host */
    DT_ALGO_HIER,     /* hierarchical: shared memory inside each host, then across hosts */
    DT_ALGO_NATIVE,   /* MPI's own collective */
    DT_ALGO_COUNT
} dt_algo;

const char *dt_algo_name(dt_algo a);                   /* "ring" */
dt_status dt_algo_parse(const char *s, dt_algo *out);  /* ring|rhd|rd|shm|hier|native|auto */

size_t dt_chunk_off(size_t count, int size, int r);
size_t dt_chunk_len(size_t count, int size, int r);

/* ---- lifetime ---------------------------------------------------------------
 * dt_comm_init: mpi true (the program was started by mpirun/srun; the program
 * decides, e.g. from its environment): calls MPI_Init_thread (unless MPI is
 * initialised already; before it, sets OMPI_MCA_btl_tcp_eager_limit to 4 MiB in
 * the environment unless it is set: comm.c says why) and returns a private copy
 * of MPI_COMM_WORLD. mpi false:
 * returns a self communicator and never touches MPI, so a one-process run
 * needs no launcher and nothing of MPI's start-up (name resolution, daemons,
 * its messages) can delay it or print. The caller owns *out (dt_comm_destroy). */
dt_status dt_comm_init(bool mpi, dt_comm **out);
dt_status dt_comm_self(dt_comm **out);
/* MPI_Comm_split semantics: ranks with the same color form a group, ordered by key. */
dt_status dt_comm_split(dt_comm *parent, int color, int key, dt_comm **out);
void dt_comm_destroy(dt_comm *c);      /* NULL ok; the world comm last */
void dt_comm_finalize(void);           /* MPI_Finalize if MPI was initialised */
/* After a fatal error, ends every rank of the job through MPI_Abort when MPI is
 * running. Returns when it is not (a one-process run) or if MPI_Abort returns:
 * the caller then ends its process itself, without dt_comm_finalize (the other
 * ranks may never reach MPI_Finalize). The library never exits. */
void dt_comm_abort(dt_comm *c, int code);

/* May two threads call MPI at once, each on its own communicator (MPI provides
 * MPI_THREAD_MULTIPLE; always true without MPI)? */
bool dt_comm_concurrent(void);

int dt_comm_rank(const dt_comm *c);
int dt_comm_size(const dt_comm *c);
int dt_comm_world_rank(const dt_comm *c, int r); /* rank r of c as a world rank */
bool dt_comm_is_mpi(const dt_comm *c);

/* Hosts. The host of each rank is learnt once, when dt_comm_init makes the
 * world (one all-gather of host names); hosts are numbered world-wide in order
 * of their first rank. dt_comm_host: rank r's host name ("?" when not known:
 * a communicator made without dt_comm_init). dt_comm_host_index: its number,
 * -1 when not known. dt_comm_nhosts: hosts holding ranks of c (>= 1).
 * dt_comm_hosts_desc: "node1 (ranks 0-1), node2 (ranks 2-3)" into buf. */
const char *dt_comm_host(const dt_comm *c, int r);
int dt_comm_host_index(const dt_comm *c, int r);
int dt_comm_nhosts(const dt_comm *c);
void dt_comm_hosts_desc(const dt_comm *c, char *buf, size_t n);

/* Testing: makes the world's ranks look as if they sat on k hosts (blocks of
 * consecutive ranks, host names NAME/0 ... NAME/k-1) though they run on one
 * machine, so that the hierarchical algorithms run here. Call on every rank
 * right after dt_comm_init, before any collective. */
dt_status dt_comm_pretend_hosts(dt_comm *world, int k);
/* What the topology-aware algorithms see of c: hosts, ranks per host (the
 * most on one host; even: every host holds that many), and whether the ranks of
 * a host share a memory segment. Collective over c the first time it (or a
 * collective that needs the topology) runs on c. */
typedef struct dt_comm_topo_info {
    int hosts, per_host;
    bool even, shm;
} dt_comm_topo_info;
dt_status dt_comm_topology(dt_comm *c, dt_comm_topo_info *out);
/* The same as "2 hosts x 2 ranks, shared memory inside a host" into buf. */
void dt_comm_topology_desc(dt_comm *c, char *buf, size_t n);

/* ---- cost model ----------------------------------------------------------------
 * alpha (s per message) and beta (s per byte) of each link level: inside a host
 * (shared memory) and across hosts (a host's link), and gamma (s per byte
 * summed). `dtrain bench allreduce --fit` measures them; the planner predicts
 * with them. */
/* Bytes per slot of a host's shared segment: the shared-memory algorithms work
 * in rounds of this (topo.c makes the segments, cost.c and the fit count the rounds). */
#define DT_SHM_ROUND_BYTES ((size_t)1 << 20)
typedef struct dt_link_cost {
    double alpha, beta;
} dt_link_cost;
typedef struct dt_cost_model {
    dt_link_cost local, cross;
    double gamma;
} dt_cost_model;
/* Predicted seconds of one all-reduce of `bytes` by algo (AUTO: what AUTO
 * would pick there) on hosts x per_host ranks, ranks numbered host by host.
 * The formulas are those in the algorithms' opening comments (cost.c). */
double dt_allreduce_predict(const dt_cost_model *m, dt_algo algo, int hosts, int per_host, size_t bytes);

/* Deadline of every wait, seconds (default 60; <= 0: wait forever). */
void dt_comm_set_timeout(dt_comm *c, double seconds);
double dt_comm_timeout(const dt_comm *c);
/* Training step, reported in timeout messages. */
void dt_comm_set_step(dt_comm *c, int64_t step);
/* Bytes this rank has sent through this communicator since creation. */
uint64_t dt_comm_bytes_sent(const dt_comm *c);

/* After a DT_ERR_TIMEOUT on c: every rank that timed out exchanges "I am here"
 * with every other rank for up to `grace` seconds, and writes to buf which
 * ranks reached the stalled operation and which did not (the late ones; on
 * several hosts, with their hosts). Returns true on the lowest rank of those
 * that arrived: the one to print the report (no clocks compared, so hosts whose
 * clocks disagree still elect one reporter). The others should wait `grace`
 * and a moment more before they end the job: the reporter's grace period ends
 * at most `grace` after theirs. */
bool dt_comm_diagnose(dt_comm *c, double grace, char *buf, size_t n);
/* The grace a job gives dt_comm_diagnose: its deadline, at most this. */
#define DT_DIAGNOSE_GRACE_MAX 5.0

/* ---- joining a running job (dynamic.c) -----------------------------------------
 * A listener accepts connections from processes outside the job (MPI's
 * dynamic processes; under Open MPI both jobs need the same ompi-server). Each
 * connection is a 2-rank communicator: the listener's side rank 0, the
 * connecting side rank 1. Authenticating the peer is the caller's work. */
typedef struct dt_listener dt_listener;
/* Opens a port and starts accepting on a thread of its own. */
dt_status dt_listener_open(dt_listener **out);
/* The port's name, for the processes that will connect. */
const char *dt_listener_port(const dt_listener *l);
/* The next connection accepted (*out NULL: none yet); never blocks. */
dt_status dt_listener_poll(dt_listener *l, dt_comm **out);
/* Marks the listener closing: from now on it picks up nothing, and the
 * connection that shows `knock` (n <= 128 bytes; dt_knock from another
 * process: a process cannot connect to itself) ends its thread. */
void dt_listener_shut(dt_listener *l, const void *knock, size_t n);
/* After dt_listener_shut: waits up to `seconds` for the knock, frees it (NULL ok). */
void dt_listener_close(dt_listener *l, double seconds);
/* Connects to a listener's port: the 2-rank communicator, this side rank 1.
 * DT_ERR_TIMEOUT if no connection within `seconds` (<= 0: no limit; the job has ended or its
 * name server is unreachable); the attempt then stays on a thread of its own. */
dt_status dt_connect(const char *port, double seconds, dt_comm **out);
/* Connects, shows knock, lets go: ends a shut listener's thread. */
dt_status dt_knock(const char *port, const void *knock, size_t n);

/* ---- point-to-point ------------------------------------------------------------ */
typedef struct dt_req {
    void *impl;       /* MPI_Request storage (opaque) */
    int peer;         /* rank in the communicator */
    bool is_send, done;
} dt_req;

dt_status dt_isend(dt_comm *c, const void *buf, size_t bytes, int peer, int tag, dt_req *r);
dt_status dt_irecv(dt_comm *c, void *buf, size_t bytes, int peer, int tag, dt_req *r);
/* Waits for all n requests until the communicator's deadline, polling with
 * back-off (it does not spin a core). On timeout returns DT_ERR_TIMEOUT with one
 * line naming `what` (the operation), the step and the peer ranks (world
 * numbering) whose messages had not completed, and cancels what it can. */
dt_status dt_waitall(dt_comm *c, dt_req *reqs, int n, const char *what);
/* dt_waitall with its own deadline instead of the communicator's (<= 0: none). */
dt_status dt_waitall_for(dt_comm *c, dt_req *reqs, int n, double seconds, const char *what);
/* Non-blocking: *index = the first of reqs[0..n) (not already done) that has
 * completed, marked done; -1 when none has. On an MPI error *index is the
 * request whose test failed (so the caller knows the peer). MPI only. */
dt_status dt_testany(dt_comm *c, dt_req *reqs, int n, int *index);
/* Gives up the requests not done, for a peer that is gone: cancels receives,
 * frees sends, marks them done. MPI may still read a freed send's buffer if the
 * peer turns out to be alive and takes the message, so the caller keeps that
 * buffer allocated. The communicator stays usable as long as nothing more is
 * received from that peer. */
void dt_cancel(dt_comm *c, dt_req *reqs, int n);
dt_status dt_sendrecv(dt_comm *c, const void *sbuf, size_t sbytes, int dst, void *rbuf,
                      size_t rbytes, int src, int tag, const char *what);

/* ---- collectives on float vectors ---------------------------------------------
 * All ranks call with the same count, op and algo. count 0 is a no-op. */
dt_status dt_allreduce(dt_comm *c, float *buf, size_t count, dt_reduce_op op, dt_algo algo);
/* In place: afterwards chunk r of buf (see the partition convention) holds the
 * reduction over ranks of chunk r; the rest of buf is unspecified. */
dt_status dt_reduce_scatter(dt_comm *c, float *buf, size_t count, dt_reduce_op op, dt_algo algo);
/* In place: chunk r of buf on rank r is copied to chunk r of buf on every rank. */
dt_status dt_allgather(dt_comm *c, float *buf, size_t count, dt_algo algo);
/* Binomial tree from root (bytes, any type). */
dt_status dt_bcast(dt_comm *c, void *buf, size_t bytes, int root, dt_algo algo);
dt_status dt_barrier(dt_comm *c);
/* Small doubles (norms, counters, metrics): sum over ranks by recursive doubling. */
dt_status dt_allreduce_f64(dt_comm *c, double *buf, size_t count);

#ifdef __cplusplus
}
#endif
#endif
