/* Hang diagnosis. When a wait times out, the rank that saw it only knows the
 * peer it was waiting for, which may itself be waiting for someone else. So
 * every rank that timed out says "I am here" to every other rank and listens
 * for a grace period: the ranks that answer have reached the stalled operation
 * (or are stuck further along); those that stay silent are the late ones.
 * Messages are 16 bytes (eager), on their own tag, so a silent peer never
 * blocks the sender; unanswered requests are cancelled and freed.
 *
 * One rank prints the report: the lowest rank of those that reached the
 * stalled operation. Every rank that hears from it knows that without
 * comparing clocks, which on a cluster need not agree (a host whose clock is
 * skewed by minutes must not change who reports). On several hosts the report
 * names the hosts of the late ranks: a dead or unreachable host shows as all
 * of its ranks missing. */
#include "comm/comm_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* " on node2" / " on node2, node3": the hosts of the ranks marked `want`
 * (nothing on one host), appended to buf. */
static void list_hosts(char *buf, size_t n, const dt_comm *c, const unsigned char *mask, unsigned char want) {
    if (dt_comm_nhosts(c) < 2) return;
    size_t len = strlen(buf);
    int shown = 0;
    for (int r = 0; r < c->size && len < n; r++) {
        if (mask[r] != want) continue;
        int h = dt_comm_host_index(c, r), seen = 0;
        for (int q = 0; q < r; q++) seen |= mask[q] == want && dt_comm_host_index(c, q) == h;
        if (seen) continue;
        int w = snprintf(buf + len, n - len, "%s%s", shown++ ? ", " : " on ", dt_comm_host(c, r));
        if (w > 0) len += (size_t)w;
    }
}

#define DT_TAG_DIAG 0x7e00

static int list_ranks(char *buf, size_t n, const dt_comm *c, const unsigned char *mask, unsigned char want) {
    size_t len = 0;
    int count = 0;
    buf[0] = '\0';
    for (int r = 0; r < c->size; r++) {
        if (mask[r] != want) continue;
        if (count < 16) {
            int w = snprintf(buf + len, n - len, "%s%d", count ? ", " : "", c->world[r]);
            if (w > 0 && (size_t)w < n - len) len += (size_t)w;
        } else if (count == 16) {
            int w = snprintf(buf + len, n - len, ", ...");
            if (w > 0 && (size_t)w < n - len) len += (size_t)w;
        }
        count++;
    }
    return count;
}

bool dt_comm_diagnose(dt_comm *c, double grace, char *buf, size_t n) {
    if (!c->is_mpi || c->size < 2) {
        snprintf(buf, n, "no other rank to ask");
        return true;
    }
    int p = c->size;
    MPI_Request *rr = dt_calloc((size_t)p, sizeof *rr), *sr = dt_calloc((size_t)p, sizeof *sr);
    int64_t(*in)[2] = dt_calloc((size_t)p, sizeof *in);
    unsigned char *here = dt_calloc((size_t)p, 1);
    int64_t out[2] = {c->step, c->world[c->rank]};
    bool reporter = true;
    if (!rr || !sr || !in || !here) {
        snprintf(buf, n, "out of memory diagnosing the hang");
        goto out;
    }
    for (int r = 0; r < p; r++) rr[r] = sr[r] = MPI_REQUEST_NULL;
    here[c->rank] = 1;
    for (int r = 0; r < p; r++) {
        if (r == c->rank) continue;
        MPI_Irecv(in[r], 2, MPI_INT64_T, r, DT_TAG_DIAG, c->mc, &rr[r]);
        MPI_Isend(out, 2, MPI_INT64_T, r, DT_TAG_DIAG, c->mc, &sr[r]);
    }
    double t0 = dt_now();
    int answered = 0;
    while (answered < p - 1 && dt_now() - t0 < grace) {
        for (int r = 0; r < p; r++) {
            if (r == c->rank || here[r]) continue;
            int flag = 0;
            if (MPI_Test(&rr[r], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
                here[r] = 1;
                answered++;
            }
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int r = 0; r < p; r++) {
        if (rr[r] != MPI_REQUEST_NULL) {
            MPI_Cancel(&rr[r]);
            MPI_Request_free(&rr[r]);
        }
        if (sr[r] != MPI_REQUEST_NULL) MPI_Request_free(&sr[r]);
    }
    for (int r = 0; r < c->rank; r++)
        if (here[r]) reporter = false; /* a lower rank that reached it reports */
    char a[256], l[512];
    int na = list_ranks(a, sizeof a, c, here, 1);
    int nl = list_ranks(l, sizeof l, c, here, 0);
    list_hosts(l, sizeof l, c, here, 0);
    if (nl == 0)
        snprintf(buf, n, "all %d ranks reached it (a message was lost, or the deadline is too short for this step)", na);
    else
        snprintf(buf, n, "rank%s %s reached it; rank%s %s did not (the late rank%s, last seen before step %lld)",
                 na == 1 ? "" : "s", a, nl == 1 ? "" : "s", l, nl == 1 ? "" : "s", (long long)c->step);
out:
    dt_free(rr);
    dt_free(sr);
    dt_free(in);
    dt_free(here);
    return reporter;
}
