/* A communicator's topology: which of its ranks share a host, a local and a
 * cross-host sub-communicator, and the host's shared-memory segment. Made the
 * first time a collective needs it (collective over c then), kept with c.
 *
 * Local groups: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (ranks that can
 * share memory), cross-checked by host name (topology.c's table): the local
 * group is their intersection, so a host name shared by two machines, or the
 * testing option that pretends one machine is several hosts, still gives
 * groups that share memory and agree with the names. Hosts are numbered by
 * their first rank of c. Cost, once per communicator: a barrier, 2-3 splits,
 * one all-reduce of p doubles, and the segment's set-up (shm.c). */
#include "comm/comm_internal.h"

#include <stdio.h>
#include <string.h>

/* Slots of DT_SHM_ROUND_BYTES (L + 1 of them per host): a round's work fits in
 * the caches, and the segment stays small (9 MiB at 8 ranks). */

void dt_topo_free(dt_topo *t) {
    if (!t) return;
    dt_shm_destroy(t->shm);
    dt_comm_destroy(t->local);
    dt_comm_destroy(t->cross);
    dt_free(t->hostpos);
    dt_free(t->lindex);
    dt_free(t->at);
    dt_free(t);
}

/* The local communicator: shared memory and the same host index. */
static dt_status split_local(dt_comm *c, MPI_Comm *out) {
    MPI_Comm shared = MPI_COMM_NULL;
    dt_status st = dt_mpi_check(c, MPI_Comm_split_type(c->mc, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shared),
                                "MPI_Comm_split_type");
    if (st) return st;
    int h = dt_comm_host_index(c, c->rank);
    st = dt_mpi_check(c, MPI_Comm_split(shared, h < 0 ? 0 : h, c->rank, out), "MPI_Comm_split (host)");
    MPI_Comm_free(&shared);
    return st;
}

/* From every rank's local leader (its host's first rank): host numbers, local
 * ranks, and whether the hosts hold equal numbers of ranks. */
static dt_status number_hosts(dt_topo *t, const double *leader, int p, int me) {
    int *count = dt_calloc((size_t)p, sizeof(int));
    if (!count) return dt_errorf(DT_ERR_NOMEM, "topology: out of memory");
    for (int r = 0; r < p; r++) {
        int l = (int)leader[r];
        if (l == r) t->hostpos[r] = t->nhosts++;
        else t->hostpos[r] = t->hostpos[l];
        t->lindex[r] = count[l]++;
    }
    t->lsize = count[(int)leader[me]];
    t->lrank = t->lindex[me];
    t->even = true;
    for (int r = 0; r < p; r++) {
        if (count[r] == 0) continue;
        t->lmax = count[r] > t->lmax ? count[r] : t->lmax;
        t->even &= count[r] == t->lsize;
    }
    dt_free(count);
    if (!t->even) return DT_OK;
    if (!(t->at = dt_calloc((size_t)p, sizeof(int)))) return dt_errorf(DT_ERR_NOMEM, "topology: out of memory");
    for (int r = 0; r < p; r++) t->at[t->hostpos[r] * t->lsize + t->lindex[r]] = r;
    return DT_OK;
}

/* The segment, on every host or on none (so that every rank chooses alike). */
static dt_status make_shm(dt_comm *c, dt_topo *t) {
    double none = 0;
    dt_status st = DT_OK;
    if (t->lsize > DT_SHM_MAX_LOCAL) {
        snprintf(t->no_shm, sizeof t->no_shm, "%d ranks on one host, more than the %d a segment serves", t->lsize, DT_SHM_MAX_LOCAL);
        none = 1;
    } else if (t->lsize > 1) {
        dt_comm_set_timeout(t->local, c->timeout);
        st = dt_shm_create(t->local, DT_SHM_ROUND_BYTES, &t->shm, t->no_shm, sizeof t->no_shm);
        if (st) return st;
        none = t->shm ? 0 : 1;
    }
    if ((st = dt_allreduce_f64(c, &none, 1))) return st;
    if (none > 0 && (t->shm || !t->no_shm[0])) {
        dt_shm_destroy(t->shm);
        t->shm = NULL;
        snprintf(t->no_shm, sizeof t->no_shm, "another host of this communicator has no shared memory");
    }
    t->shm_ok = none == 0 && t->lmax > 1;
    return DT_OK;
}

/* The rank of c whose world rank is w (-1: none). */
static int rank_of_world(const dt_comm *c, int w) {
    for (int r = 0; r < c->size; r++)
        if (c->world[r] == w) return r;
    return -1;
}

static dt_status build(dt_comm *c, dt_topo *t) {
    int p = c->size;
    if (!(t->hostpos = dt_calloc((size_t)p, sizeof(int))) || !(t->lindex = dt_calloc((size_t)p, sizeof(int))))
        return dt_errorf(DT_ERR_NOMEM, "topology: out of memory");
    /* Every rank is here (with the deadline) before MPI's splits, which have none. */
    dt_status st = dt_barrier(c);
    MPI_Comm lm = MPI_COMM_NULL, xm = MPI_COMM_NULL;
    if (!st) st = split_local(c, &lm);
    if (!st) st = dt_comm_wrap(lm, &t->local);
    if (st) return st;
    double *leader = dt_calloc((size_t)p, sizeof(double));
    if (!leader) return dt_errorf(DT_ERR_NOMEM, "topology: out of memory");
    leader[c->rank] = (double)rank_of_world(c, t->local->world[0]);
    st = dt_allreduce_f64(c, leader, (size_t)p);
    if (!st) st = number_hosts(t, leader, p, c->rank);
    dt_free(leader);
    if (st) return st;
    int color = t->even ? t->lrank : (t->lrank == 0 ? 0 : MPI_UNDEFINED);
    st = dt_mpi_check(c, MPI_Comm_split(c->mc, color, t->hostpos[c->rank], &xm), "MPI_Comm_split (cross-host)");
    if (!st && xm != MPI_COMM_NULL) st = dt_comm_wrap(xm, &t->cross);
    return st ? st : make_shm(c, t);
}

dt_status dt_topo_get(dt_comm *c, dt_topo **out) {
    if (c->topo) {
        *out = c->topo;
        return DT_OK;
    }
    dt_topo *t = dt_calloc(1, sizeof *t);
    if (!t) return dt_errorf(DT_ERR_NOMEM, "topology: out of memory");
    dt_status st = DT_OK;
    if (!c->is_mpi || c->size == 1) {
        t->nhosts = t->lsize = t->lmax = 1;
        t->even = true;
        snprintf(t->no_shm, sizeof t->no_shm, "one rank");
    } else {
        st = build(c, t);
    }
    if (st) {
        dt_topo_free(t);
        return st;
    }
    c->topo = t;
    *out = t;
    return DT_OK;
}

dt_status dt_comm_topology(dt_comm *c, dt_comm_topo_info *out) {
    dt_topo *t = NULL;
    dt_status st = dt_topo_get(c, &t);
    if (st) return st;
    *out = (dt_comm_topo_info){.hosts = t->nhosts, .per_host = t->lmax, .even = t->even, .shm = t->shm_ok};
    return DT_OK;
}

void dt_comm_topology_desc(dt_comm *c, char *buf, size_t n) {
    dt_topo *t = NULL;
    if (dt_topo_get(c, &t)) {
        snprintf(buf, n, "topology unknown: %s", dt_error_msg());
        return;
    }
    if (t->even) snprintf(buf, n, "%d host%s x %d rank%s", t->nhosts, t->nhosts == 1 ? "" : "s", t->lsize, t->lsize == 1 ? "" : "s");
    else snprintf(buf, n, "%d hosts, up to %d ranks each", t->nhosts, t->lmax);
    size_t len = strlen(buf);
    if (len < n && t->lmax > 1)
        snprintf(buf + len, n - len, t->shm_ok ? ", shared memory inside a host" : " (no shared memory: %s)", t->no_shm);
}
