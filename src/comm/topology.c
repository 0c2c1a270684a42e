/* Which host each rank runs on. Learnt once, when the world communicator is
 * made (dt_comm_init): every rank contributes its host name (MPI's processor
 * name, which Open MPI and MPICH take from the UTS host name) to one
 * all-gather of DT_HOST_NAME bytes per rank; hosts are numbered in order of
 * their first rank. Cost: one all-gather of 64 B x p at start-up, then table
 * look-ups. Sub-communicators answer through their world-rank table, so the
 * table is the process's, like MPI_COMM_WORLD itself. A self communicator's
 * one rank is on this machine (gethostname). */
#include "comm/comm_internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DT_HOST_NAME 64

static struct {
    int nranks, nhosts;
    int *host_of;                  /* world rank -> host index */
    char (*name)[DT_HOST_NAME];    /* host index -> name */
} g_topo;

static void topo_free(void) {
    dt_free(g_topo.host_of);
    dt_free(g_topo.name);
    memset(&g_topo, 0, sizeof g_topo);
}

/* names: nranks names of DT_HOST_NAME bytes (NUL-terminated), by world rank. */
static dt_status topo_build(const char (*names)[DT_HOST_NAME], int nranks) {
    topo_free();
    g_topo.host_of = dt_calloc((size_t)nranks, sizeof(int));
    g_topo.name = dt_calloc((size_t)nranks, DT_HOST_NAME);
    if (!g_topo.host_of || !g_topo.name) {
        topo_free();
        return dt_errorf(DT_ERR_NOMEM, "host table of %d ranks: out of memory", nranks);
    }
    g_topo.nranks = nranks;
    for (int r = 0; r < nranks; r++) {
        int h = 0;
        while (h < g_topo.nhosts && strcmp(g_topo.name[h], names[r]) != 0) h++;
        if (h == g_topo.nhosts) memcpy(g_topo.name[g_topo.nhosts++], names[r], DT_HOST_NAME);
        g_topo.host_of[r] = h;
    }
    return DT_OK;
}

static void own_name(char out[DT_HOST_NAME]) {
    memset(out, 0, DT_HOST_NAME);
    if (gethostname(out, DT_HOST_NAME - 1) != 0 || !out[0]) snprintf(out, DT_HOST_NAME, "localhost");
}

dt_status dt_topology_learn(dt_comm *world) {
    if (!world->is_mpi) {
        char name[1][DT_HOST_NAME];
        own_name(name[0]);
        return topo_build((const char(*)[DT_HOST_NAME])name, 1);
    }
    char mine[DT_HOST_NAME] = {0};
    int len = 0;
    char buf[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    if (MPI_Get_processor_name(buf, &len) == MPI_SUCCESS && len > 0)
        memcpy(mine, buf, (size_t)(len < DT_HOST_NAME - 1 ? len : DT_HOST_NAME - 1));
    else own_name(mine);
    char(*all)[DT_HOST_NAME] = dt_calloc((size_t)world->size, DT_HOST_NAME);
    if (!all) return dt_errorf(DT_ERR_NOMEM, "host table of %d ranks: out of memory", world->size);
    dt_status st = dt_mpi_check(world, MPI_Allgather(mine, DT_HOST_NAME, MPI_CHAR, all, DT_HOST_NAME, MPI_CHAR, world->mc),
                                "MPI_Allgather (host names)");
    if (!st) st = topo_build((const char(*)[DT_HOST_NAME])all, world->size);
    dt_free(all);
    return st;
}

void dt_topology_forget(void) { topo_free(); }

dt_status dt_comm_pretend_hosts(dt_comm *world, int k) {
    int p = world->size;
    if (k < 1 || k > p) return dt_errorf(DT_ERR_INVALID, "pretending %d hosts: give 1 to %d (the ranks)", k, p);
    if (g_topo.nhosts != 1 || g_topo.nranks != p)
        return dt_errorf(DT_ERR_INVALID, "pretending %d hosts is for ranks on one machine; these are on %d", k, g_topo.nhosts);
    char(*names)[DT_HOST_NAME] = dt_calloc((size_t)p, DT_HOST_NAME);
    if (!names) return dt_errorf(DT_ERR_NOMEM, "host table of %d ranks: out of memory", p);
    for (int r = 0; r < p; r++)
        snprintf(names[r], DT_HOST_NAME, "%.50s/%d", g_topo.name[0], (int)((long long)r * k / p));
    dt_status st = topo_build((const char(*)[DT_HOST_NAME])names, p);
    dt_free(names);
    return st;
}

/* The world rank of rank r of c, or -1 when the table does not know it. */
static int known_world(const dt_comm *c, int r) {
    if (r < 0 || r >= c->size) return -1;
    int w = c->is_mpi ? c->world[r] : 0;
    return w >= 0 && w < g_topo.nranks ? w : -1;
}

int dt_comm_host_index(const dt_comm *c, int r) {
    int w = known_world(c, r);
    return w < 0 ? -1 : g_topo.host_of[w];
}

const char *dt_comm_host(const dt_comm *c, int r) {
    int h = dt_comm_host_index(c, r);
    return h < 0 ? "?" : g_topo.name[h];
}

int dt_comm_nhosts(const dt_comm *c) {
    int n = 0;
    for (int h = 0; h < g_topo.nhosts; h++)
        for (int r = 0; r < c->size; r++)
            if (dt_comm_host_index(c, r) == h) {
                n++;
                break;
            }
    return n ? n : 1;
}

/* Appends to buf (len so far in *len); truncates silently at n. */
static void put(char *buf, size_t n, size_t *len, const char *fmt, int a, int b) {
    if (*len >= n) return;
    int w = snprintf(buf + *len, n - *len, fmt, a, b);
    if (w > 0) *len += (size_t)w < n - *len ? (size_t)w : n - *len - 1;
}

void dt_comm_hosts_desc(const dt_comm *c, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    bool first = true;
    for (int h = 0; h < g_topo.nhosts; h++) {
        int count = 0;
        for (int r = 0; r < c->size; r++) count += dt_comm_host_index(c, r) == h;
        if (!count) continue;
        len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s (rank%s ", first ? "" : ", ",
                                g_topo.name[h], count > 1 ? "s" : "");
        if (len >= n) break;
        first = false;
        /* runs of consecutive ranks: 0-1, 4 */
        bool comma = false;
        for (int r = 0; r < c->size; r++) {
            if (dt_comm_host_index(c, r) != h) continue;
            int e = r;
            while (e + 1 < c->size && dt_comm_host_index(c, e + 1) == h) e++;
            put(buf, n, &len, comma ? ", %d" : "%d", r, 0);
            if (e > r) put(buf, n, &len, "-%d", e, 0);
            comma = true;
            r = e;
        }
        put(buf, n, &len, ")", 0, 0);
    }
}
