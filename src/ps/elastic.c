/* Parameter server, elastic membership (ASP and SSP): worker slots, the
 * split of each clock's global batch over the workers that are members at
 * that clock, workers joining through server 0's port and leaving on request.
 *
 * A join: the joiner connects to server 0 (src/comm/dynamic.c) and shows the
 * job's secret; server 0 gives it the next free slot and its first clock J,
 * the furthest clock a running worker will next meet the server at (its
 * checkpoint barrier, its waiting pull, or the pull after its last answered
 * one) or past the furthest clock any pull was answered for, whichever is
 * later, so no worker has computed a clock >= J with the old split. Then the
 * joiner attaches to the other servers with its slot and J. A leave: server 0
 * fixes the leaver's last clock L the same way; the leaver finishes when its
 * pull for L returns, and every pull for a clock >= L is split without it.
 * So every clock's global batch is trained once, by the members of that
 * clock, whatever the order of joins, leaves and pushes.
 *
 * Cost: per reply O(slots) to count the members; per join S connections and
 * one reply buffer of the range; nothing on a step without one. Slots are not
 * reused: max_workers bounds the workers over the whole run. */
#include "ps_internal.h"

#include <stdio.h>
#include <string.h>

#define AUTH_WAIT 5.0 /* seconds a new connection has to show the secret */

dt_status dt_ps_slot_start(server *sv, int w, dt_comm *lc, int64_t clock) {
    if (!(sv->outbuf[w] = dt_alloc_floats(sv->len))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    sv->lc[w] = lc;
    sv->active[w] = true;
    sv->left[w] = false;
    sv->pending[w] = -1;
    sv->ck_clock[w] = -1;
    sv->lost[w] = -1;
    sv->last[w] = dt_now();
    sv->clock[w] = clock;
    sv->served[w] = clock - 1;
    sv->join_at[w] = clock;
    sv->leave_at[w] = INT64_MAX;
    sv->read_pushes[w] = sv->pushes;
    sv->n_active++;
    if (w >= sv->n_slots) sv->n_slots = w + 1;
    return dt_irecv(dt_ps_link(sv, w), &sv->in_hdr[w], sizeof(hdr), dt_ps_link_rank(sv, w), TAG_REQ, &sv->in_req[w]);
}

int64_t dt_ps_next_meet(const server *sv, int w) {
    return sv->ck_clock[w] >= 0 ? sv->ck_clock[w] : sv->pending[w] >= 0 ? sv->pending[w] : sv->served[w] + 1;
}

int64_t dt_ps_furthest_meet(const server *sv) {
    int64_t k = -1;
    for (int w = 0; w < sv->n_slots; w++)
        if (sv->active[w] && dt_ps_next_meet(sv, w) > k) k = dt_ps_next_meet(sv, w);
    return k;
}

int64_t dt_ps_change_clock(const server *sv) {
    int64_t k = dt_ps_furthest_meet(sv);
    return k > sv->horizon ? k : sv->horizon;
}

void dt_ps_share(const server *sv, int w, int64_t c, int64_t *index, int64_t *members) {
    int64_t n = 0, at = -1;
    for (int v = 0; v < sv->n_slots; v++) {
        if (sv->join_at[v] > c || c >= sv->leave_at[v]) continue;
        if (v == w) at = n;
        n++;
    }
    *index = at;
    *members = n;
}

dt_status dt_ps_elastic_open(server *sv) {
    int S = sv->cfg.servers;
    if (!sv->cfg.secret || !*sv->cfg.secret)
        return dt_errorf(DT_ERR_INVALID, "parameter server: workers may join only a job with a secret (the run directory's token)");
    dt_status st = dt_listener_open(&sv->lis);
    if (st) return st;
    char mine[DT_PS_PORT_MAX] = {0};
    snprintf(mine, sizeof mine, "%s", dt_listener_port(sv->lis));
    if (strlen(dt_listener_port(sv->lis)) >= sizeof mine)
        return dt_errorf(DT_ERR_COMM, "parameter server: MPI's port name is longer than %d bytes", DT_PS_PORT_MAX - 1);
    /* Worker 0 knocks at every port at the end; server 0 hands out the others. */
    dt_req r[2];
    st = dt_isend(sv->c, mine, sizeof mine, 0, TAG_PORT, &r[0]);
    r[1].done = true;
    if (!st && sv->me > 0) st = dt_isend(sv->c, mine, sizeof mine, sv->W, TAG_PORT, &r[1]);
    if (!st && sv->me == 0) {
        if (!(sv->ports = dt_calloc((size_t)S, DT_PS_PORT_MAX))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
        memcpy(sv->ports[0], mine, sizeof mine);
        for (int s = 1; s < S && !st; s++) {
            dt_req q;
            st = dt_irecv(sv->c, sv->ports[s], DT_PS_PORT_MAX, sv->W + s, TAG_PORT, &q);
            if (!st) st = dt_waitall(sv->c, &q, 1, "parameter server: the servers' join ports");
        }
    }
    if (!st) st = dt_waitall(sv->c, r, 2, "parameter server: the servers' join ports");
    if (!st && sv->me == 0 && sv->cfg.publish) sv->cfg.publish(sv->cfg.publish_ctx, mine);
    return st;
}

/* The same length and bytes, in time that does not depend on where they differ. */
static bool same_secret(const char *a, const char *b) {
    size_t na = strnlen(a, DT_PS_SECRET_MAX), nb = strnlen(b, DT_PS_SECRET_MAX);
    unsigned diff = na != nb;
    for (size_t i = 0; i < DT_PS_SECRET_MAX; i++) diff |= (unsigned)(i < na ? a[i] : 0) ^ (unsigned)(i < nb ? b[i] : 0);
    return diff == 0;
}

/* Answers a connection (refusing with `why` when ok is 0) and, for a welcome
 * from server 0, sends the other servers' ports. */
static dt_status answer(server *sv, dt_comm *c, join_rep *a, bool ports) {
    dt_req r[2];
    r[1].done = true;
    dt_status st = dt_isend(c, a, sizeof *a, 1, TAG_JOIN, &r[0]);
    if (!st && ports && sv->cfg.servers > 1)
        st = dt_isend(c, sv->ports[1], (size_t)(sv->cfg.servers - 1) * DT_PS_PORT_MAX, 1, TAG_JOIN, &r[1]);
    return st ? st : dt_waitall_for(c, r, 2, AUTH_WAIT, "answering a joining worker");
}

static dt_status refuse(server *sv, dt_comm *c, const char *why) {
    join_rep a = {.ok = 0};
    snprintf(a.why, sizeof a.why, "%s", why);
    dt_status st = answer(sv, c, &a, false);
    dt_comm_destroy(c);
    if (st) dt_log(DT_LOG_WARN, "parameter server %d: a refused worker did not take the answer: %s", sv->me, dt_error_msg());
    return DT_OK; /* a joiner's failure is never the job's */
}

/* A connection that showed the secret: server 0 gives a joiner its slot and
 * first clock; the other servers take the slot server 0 gave it. */
static dt_status admit(server *sv, dt_comm *c, const join_req *q) {
    int64_t slot, clock;
    if (q->kind == JOIN_NEW && sv->me == 0) {
        if (sv->n_slots >= sv->cap) {
            char why[160];
            snprintf(why, sizeof why, "the job is full: all %d worker slots of --elastic %d were used (slots are not reused)",
                     sv->cap, sv->cap);
            return refuse(sv, c, why);
        }
        if (sv->stop_at >= 0 || sv->stop_code || dt_ps_furthest_meet(sv) < 0) return refuse(sv, c, "the job is stopping or ending");
        clock = dt_ps_change_clock(sv);
        slot = sv->n_slots;
    } else if (q->kind == JOIN_ATTACH && sv->me > 0 && q->slot >= sv->W && q->slot < sv->cap && q->clock >= 0 &&
               (q->slot >= sv->n_slots || (sv->left[q->slot] && !sv->active[q->slot] && sv->outbuf[q->slot] == NULL))) {
        slot = q->slot;
        clock = q->clock;
    } else {
        return refuse(sv, c, "a request this server does not take (a join goes to server 0 first)");
    }
    dt_comm_set_timeout(c, dt_comm_timeout(sv->c));
    dt_status st = dt_ps_slot_start(sv, (int)slot, c, clock);
    if (st) return st;
    join_rep a = {.ok = 1, .slot = slot, .clock = clock, .cap = sv->cap, .servers = sv->cfg.servers};
    if ((st = answer(sv, c, &a, sv->me == 0))) {
        /* It went away before its welcome: it never worked; drop the slot. */
        dt_log(DT_LOG_WARN, "parameter server %d: worker %lld went away while joining: %s", sv->me, (long long)slot, dt_error_msg());
        dt_cancel(c, &sv->in_req[slot], 1);
        sv->active[slot] = false;
        sv->left[slot] = true;
        sv->leave_at[slot] = clock; /* never a member */
        sv->n_active--;
        return DT_OK;
    }
    if (sv->me == 0) {
        sv->joined++;
        dt_log(DT_LOG_INFO, "parameter server: worker %lld joined; it starts at clock %lld; %d workers now", (long long)slot,
               (long long)clock, sv->n_active);
    }
    return DT_OK;
}

/* The first message of connection i came (or did not in time). */
static dt_status settle(server *sv, int i, bool came) {
    ps_auth *a = &sv->auth[i];
    dt_comm *c = a->c;
    join_req q = a->req;
    a->c = NULL;
    if (!came) {
        dt_cancel(c, &a->r, 1);
        dt_comm_destroy(c);
        dt_log(DT_LOG_WARN, "parameter server %d: a connection showed nothing within %.0f s; closed it", sv->me, AUTH_WAIT);
        return DT_OK;
    }
    q.secret[DT_PS_SECRET_MAX - 1] = '\0';
    if (!same_secret(q.secret, sv->cfg.secret)) {
        dt_log(DT_LOG_WARN, "parameter server %d: refused a process that tried to join without the job's secret "
               "(its gradients are not taken)", sv->me);
        return refuse(sv, c, "wrong secret: show the token of the job's run directory (join.token)");
    }
    return admit(sv, c, &q);
}

dt_status dt_ps_elastic_poll(server *sv) {
    dt_comm *c = NULL;
    dt_status st = dt_listener_poll(sv->lis, &c);
    if (st) {
        dt_log(DT_LOG_WARN, "parameter server %d: a joining connection failed: %s", sv->me, dt_error_msg());
        st = DT_OK;
    }
    if (c) {
        int i = 0;
        while (i < DT_PS_AUTH_MAX && sv->auth[i].c) i++;
        if (i == DT_PS_AUTH_MAX) {
            dt_comm_destroy(c); /* too many at once: it times out and may try again */
        } else {
            ps_auth *a = &sv->auth[i];
            *a = (ps_auth){.c = c, .t0 = dt_now()};
            if (dt_irecv(c, &a->req, sizeof a->req, 1, TAG_JOIN, &a->r)) {
                dt_comm_destroy(c);
                a->c = NULL;
            }
        }
    }
    for (int i = 0; i < DT_PS_AUTH_MAX && !st; i++) {
        ps_auth *a = &sv->auth[i];
        if (!a->c) continue;
        int k;
        dt_status ts = dt_testany(a->c, &a->r, 1, &k);
        if (ts || k == 0 || dt_now() - a->t0 > AUTH_WAIT) st = settle(sv, i, !ts && k == 0);
    }
    return st;
}

void dt_ps_elastic_leave(server *sv, int w) {
    if (sv->leave_at[w] != INT64_MAX) return;
    if (w == 0) {
        sv->leave_at[0] = INT64_MAX - 1; /* said once */
        dt_log(DT_LOG_WARN, "parameter server: worker 0 (rank 0) writes the run's outputs and cannot leave; it stays");
        return;
    }
    int64_t k = dt_ps_change_clock(sv), own = dt_ps_next_meet(sv, w);
    sv->leave_at[w] = k > own ? k : own;
    dt_log(DT_LOG_INFO, "parameter server: worker %d asked to leave; it leaves at clock %lld", w, (long long)sv->leave_at[w]);
}

dt_status dt_ps_elastic_farewell(server *sv, int w) {
    dt_comm *lc = dt_ps_link(sv, w);
    int to = dt_ps_link_rank(sv, w);
    dt_status st = DT_OK;
    if (sv->out_busy[w]) {
        st = dt_waitall(lc, &sv->out_req[2 * w], 2, "parameter server reply");
        sv->out_busy[w] = false;
    }
    sv->left[w] = true;
    dt_req r;
    if (!st) st = dt_isend(lc, sv->lost, (size_t)sv->cap * sizeof(int64_t), to, TAG_BYE, &r);
    if (!st) st = dt_waitall(lc, &r, 1, "parameter server farewell to a leaving worker");
    if (sv->me == 0) {
        sv->departed++;
        dt_log(DT_LOG_INFO, "parameter server: worker %d left at clock %lld; %d workers now", w, (long long)sv->clock[w],
               sv->n_active);
    }
    if (st) { /* it went before its farewell: that is its own loss */
        dt_log(DT_LOG_WARN, "parameter server %d: the farewell to worker %d failed: %s", sv->me, w, dt_error_msg());
        st = DT_OK;
    }
    if (sv->lc[w]) {
        dt_comm_destroy(sv->lc[w]);
        sv->lc[w] = NULL;
    }
    return st;
}

void dt_ps_elastic_close(server *sv) {
    if (!sv->lis) return;
    dt_listener_shut(sv->lis, sv->cfg.secret, strlen(sv->cfg.secret));
    for (int i = 0; i < DT_PS_AUTH_MAX; i++)
        if (sv->auth[i].c) {
            dt_cancel(sv->auth[i].c, &sv->auth[i].r, 1);
            dt_comm_destroy(sv->auth[i].c);
            sv->auth[i].c = NULL;
        }
    dt_listener_close(sv->lis, 30.0);
    sv->lis = NULL;
    dt_free(sv->ports);
    sv->ports = NULL;
}
