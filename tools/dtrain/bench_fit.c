/* dtrain bench allreduce --fit: the cost model's parameters (dt_cost_model,
 * include/dtrain/comm.h) measured on this job's ranks.
 *   gamma: one rank sums two 16 MiB float vectors (s per byte summed);
 *   local: the shared-memory all-reduce among each host's ranks at 4 KiB ..
 *          16 MiB, fitted to 2.rounds.alpha + 2n(L-1)/L.beta (after the sums'
 *          gamma) by least squares weighted by 1/t^2 (every size counts alike);
 *   cross: the ring all-reduce among the hosts' first ranks (one per host,
 *          the others wait), fitted to 2(H-1).alpha + 2n(H-1)/H.beta; and,
 *          since a link's rate depends on the message (TCP's window, a
 *          shaper's bucket), the beta each size measured, (t - 2(H-1).alpha)
 *          / (2n(H-1)/H), keyed by one ring step's message n/H
 *          ("measured_beta": [bytes, s/byte] pairs; no lower than half the
 *          line's beta, where alpha is most of a small size's time);
 *   burst: what the link passes at once after idling (a shaper's token
 *          bucket): the first two hosts' first ranks time a message of 16 KiB
 *          .. 4 MiB (by 2x) and its 4-byte reply back to back and after the
 *          sender spun 50 ms (both spin: a core woken from idle costs more
 *          than a small message), median of 5 each; a size whose own time
 *          (less a 4-byte message's, busy or idle) is 1 ms or more and which
 *          did not pass whole idle saved 1 - own idle / own busy of its
 *          bytes, and the burst is the median over the first three such sizes
 *          (the largest size when every one passed whole). Cost: about 10 s
 *          at 100 Mbit/s, 1 s at 1 Gbit/s.
 * Then it checks the model: AUTO's measured time against its prediction at a
 * few sizes. Rank 0 prints; the last line is the model as JSON. */
#include "cli.h"
#include "dtrain/comm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NSIZES 7 /* 4 KiB .. 16 MiB by 4x */

/* Mean seconds of one all-reduce of count floats by a on c, max over c's ranks.
 * Large messages on slow links (a 16 MiB all-reduce takes 2.4 s at 100 Mbit/s)
 * get one warm-up and about a second of timed work, at least two iterations;
 * rank 0's warm-up decides, so that every rank runs the same count. (Small
 * messages keep three warm-ups: the first may pay for opening connections.) */
static dt_status time_one(dt_comm *c, dt_algo a, float *buf, size_t count, double *out) {
    int iters = count < (1u << 18) ? 50 : 8, warm = 3;
    double t0 = dt_now();
    dt_status st = dt_allreduce(c, buf, count, DT_OP_SUM, a);
    double first = dt_now() - t0;
    if (!st) st = dt_bcast(c, &first, sizeof first, 0, DT_ALGO_RING);
    if (count >= (1u << 18) && first > 0.1) {
        warm = 1;
        iters = first * iters > 1.0 ? (int)(1.0 / first) : iters;
        iters = iters < 2 ? 2 : iters;
    }
    for (int w = 1; w < warm && !st; w++) st = dt_allreduce(c, buf, count, DT_OP_SUM, a);
    if (!st) st = dt_barrier(c);
    t0 = dt_now();
    for (int i = 0; i < iters && !st; i++) st = dt_allreduce(c, buf, count, DT_OP_SUM, a);
    double v[64] = {0};
    int p = dt_comm_size(c) < 64 ? dt_comm_size(c) : 64;
    if (dt_comm_rank(c) < 64) v[dt_comm_rank(c)] = (dt_now() - t0) / iters;
    if (!st) st = dt_allreduce_f64(c, v, (size_t)p);
    *out = 0;
    for (int i = 0; i < p; i++) *out = v[i] > *out ? v[i] : *out;
    return st;
}

/* Least squares y = a.x1 + b.x2, weights 1/y^2; a, b >= 0. */
static void fit2(const double *x1, const double *x2, const double *y, int n, double *a, double *b) {
    double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0;
    for (int i = 0; i < n; i++) {
        double w = y[i] > 0 ? 1.0 / (y[i] * y[i]) : 0;
        s11 += w * x1[i] * x1[i];
        s12 += w * x1[i] * x2[i];
        s22 += w * x2[i] * x2[i];
        s1y += w * x1[i] * y[i];
        s2y += w * x2[i] * y[i];
    }
    double det = s11 * s22 - s12 * s12;
    *a = det != 0 ? (s1y * s22 - s2y * s12) / det : 0;
    *b = det != 0 ? (s2y * s11 - s1y * s12) / det : 0;
    if (*a < 0) *a = 0;
    if (*b < 0) *b = s22 > 0 ? s2y / s22 : 0;
}

static double measure_gamma(void) {
    size_t n = (size_t)4 << 20;
    float *a = dt_alloc_floats(n), *b = dt_alloc_floats(n);
    if (!a || !b) {
        dt_free(a);
        dt_free(b);
        return 0;
    }
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (float)(i % 7);
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = dt_now();
        for (size_t i = 0; i < n; i++) a[i] += b[i];
        double t = dt_now() - t0;
        best = t < best ? t : best;
    }
    volatile float sink = a[n / 3];
    (void)sink;
    dt_free(a);
    dt_free(b);
    return best / (double)(n * sizeof(float));
}

/* Fits one level: algo a on sub-communicator s (size q), whose formula has
 * messages(n) alphas and bytes(n) betas. Returns DT_OK with *l filled on s's
 * ranks, and (msg, beta not NULL) each size's step message and own beta. */
static dt_status fit_level(dt_comm *s, dt_algo a, bool shm, double gamma, float *buf, dt_link_cost *l, double *msg,
                           double *beta) {
    int q = dt_comm_size(s);
    double x1[NSIZES], x2[NSIZES], y[NSIZES], f = (double)(q - 1) / q;
    dt_status st = DT_OK;
    for (int k = 0; k < NSIZES && !st; k++) {
        size_t bytes = (size_t)4096 << (2 * k), count = bytes / sizeof(float);
        double t = 0, n = (double)bytes;
        st = time_one(s, a, buf, count, &t);
        x1[k] = shm ? 2.0 * ceil(n / (double)DT_SHM_ROUND_BYTES) : 2.0 * (q - 1);
        x2[k] = 2.0 * n * f;
        y[k] = t - n * f * gamma;
        if (y[k] < t * 0.05) y[k] = t * 0.05;
    }
    if (!st) fit2(x1, x2, y, NSIZES, &l->alpha, &l->beta);
    for (int k = 0; k < NSIZES && !st && msg; k++) {
        double b = (y[k] - x1[k] * l->alpha) / x2[k];
        msg[k] = (double)((size_t)4096 << (2 * k)) / q;
        beta[k] = b > l->beta * 0.5 ? b : l->beta * 0.5;
    }
    return st;
}

#define NBURST 9 /* 16 KiB .. 4 MiB by 2x */

/* The median of v[0..n), n >= 1 (v sorted in place). */
static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

/* Waits for reqs[0..n) spinning (dt_waitall's sleeps, and a core woken from
 * idle, would add more than a small message takes); 30 s at most. */
static dt_status spin(dt_comm *x, dt_req *reqs, int n) {
    double t0 = dt_now();
    for (int left = n, i = 0; left > 0;) {
        dt_status st = dt_testany(x, reqs, n, &i);
        if (st) return st;
        if (i >= 0) left--;
        else if (dt_now() - t0 > 30) {
            dt_cancel(x, reqs, n); /* buf stays allocated until the process ends */
            return dt_errorf(DT_ERR_TIMEOUT, "the burst ping waited 30 s for its peer");
        }
    }
    return DT_OK;
}

/* A message of `bytes` from rank 0 of x to rank 1 and a 4-byte reply, timed
 * on rank 0: the median of 5, rank 0 spinning `pause` seconds before each
 * (the link idles), or (0) back to back after two warm-ups. */
static dt_status ping(dt_comm *x, char *buf, size_t bytes, double pause, double *out) {
    int me = dt_comm_rank(x);
    double t[5] = {0};
    dt_status st = DT_OK;
    for (int i = pause > 0 ? 0 : -2; i < 5 && !st; i++) {
        dt_req q[2];
        double t0 = dt_now();
        while (me == 0 && dt_now() - t0 < pause) {
        }
        t0 = dt_now();
        if (me == 0 && !(st = dt_irecv(x, buf + bytes, 4, 1, 77, &q[0])) && !(st = dt_isend(x, buf, bytes, 1, 77, &q[1])))
            st = spin(x, q, 2);
        if (me == 1 && !(st = dt_irecv(x, buf, bytes, 0, 77, &q[0])) && !(st = spin(x, q, 1)) &&
            !(st = dt_isend(x, buf, 4, 0, 77, &q[0])))
            st = spin(x, q, 1);
        if (i >= 0) t[i] = dt_now() - t0;
    }
    *out = st ? 0 : median(t, 5);
    return st;
}

/* The link's burst in bytes (see the top), on rank 0 of x (others: 0). */
static dt_status measure_burst(dt_comm *x, char *buf, double *burst) {
    double busy0 = 0, idle0 = 0, est[NBURST];
    int n = 0;
    *burst = 0;
    dt_status st = ping(x, buf, 4, 0, &busy0);
    if (!st) st = ping(x, buf, 4, 0.05, &idle0);
    /* every size on both ranks: rank 1's own times would decide otherwise */
    for (int k = 0; k < NBURST && !st; k++) {
        size_t bytes = (size_t)16384 << k;
        double busy = 0, idle = 0;
        if (!(st = ping(x, buf, bytes, 0, &busy))) st = ping(x, buf, bytes, 0.05, &idle);
        /* the bytes' own time, busy and idle, and what idling saved of it;
         * only sizes whose own time is well above the waits' noise (1 ms) */
        if (busy - busy0 < 1e-3) continue;
        double saved = (double)bytes * (1 - (idle - idle0) / (busy - busy0));
        saved = saved < 0 ? 0 : saved;
        if (saved < 0.8 * (double)bytes) {
            if (n < 3) est[n++] = saved;
        } else if (!n) {
            *burst = (double)bytes; /* passed whole: at least this */
        }
    }
    if (n) *burst = median(est, n);
    return st;
}

static void print_level(const char *name, const dt_link_cost *l, const char *how) {
    printf("%-6s alpha %8.2f us   beta %8.4f ns/B (%8.3f GB/s)   %s\n", name, l->alpha * 1e6, l->beta * 1e9,
           l->beta > 0 ? 1e-9 / l->beta : 0.0, how);
}

/* AUTO measured against the model's prediction. */
static dt_status check_model(dt_comm *c, const dt_cost_model *m, const dt_comm_topo_info *ti, float *buf) {
    dt_status st = DT_OK;
    if (dt_comm_rank(c) == 0) printf("check: auto measured vs predicted\n");
    for (size_t bytes = (size_t)64 << 10; bytes <= ((size_t)16 << 20) && !st; bytes *= 16) {
        double t = 0;
        st = time_one(c, DT_ALGO_AUTO, buf, bytes / sizeof(float), &t);
        double pr = dt_allreduce_predict(m, DT_ALGO_AUTO, ti->hosts, ti->per_host, bytes);
        if (!st && dt_comm_rank(c) == 0)
            printf("  %9zu B: measured %10.1f us, predicted %10.1f us (%.2fx)\n", bytes, t * 1e6, pr * 1e6, t > 0 ? pr / t : 0);
    }
    return st;
}

int dt_bench_fit(dt_comm *c) {
    int r = dt_comm_rank(c);
    dt_comm_topo_info ti;
    dt_cost_model m = {0};
    dt_comm *local = NULL, *cross = NULL;
    float *buf = dt_alloc_floats((size_t)4 << 20);
    dt_status st = buf ? dt_comm_topology(c, &ti) : dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (!st) st = dt_comm_split(c, dt_comm_host_index(c, r) < 0 ? 0 : dt_comm_host_index(c, r), r, &local);
    if (!st) st = dt_comm_split(c, dt_comm_rank(local) == 0 ? 0 : 1, r, &cross);
    double g = measure_gamma(), slot = g;
    if (!st) st = dt_allreduce_f64(c, &slot, 1); /* the mean over ranks */
    m.gamma = slot / dt_comm_size(c);
    double msg[NSIZES] = {0}, beta[NSIZES] = {0};
    if (!st && ti.shm && ti.even) st = fit_level(local, DT_ALGO_SHM, true, m.gamma, buf, &m.local, NULL, NULL);
    double burst = 0;
    if (!st && ti.hosts > 1 && dt_comm_rank(local) == 0)
        st = fit_level(cross, DT_ALGO_RING, false, m.gamma, buf, &m.cross, msg, beta);
    if (!st && ti.hosts > 1 && dt_comm_rank(local) == 0 && dt_comm_rank(cross) < 2)
        st = measure_burst(cross, (char *)buf, &burst);
    /* rank 0 (a first rank of its host) has both levels: tell everyone */
    double v[4] = {m.local.alpha, m.local.beta, m.cross.alpha, m.cross.beta};
    if (!st) st = dt_bcast(c, v, sizeof v, 0, DT_ALGO_RING);
    m.local = (dt_link_cost){v[0], v[1]};
    m.cross = (dt_link_cost){v[2], v[3]};
    if (!st && r == 0) {
        char topo[256];
        dt_comm_topology_desc(c, topo, sizeof topo);
        printf("# dtrain bench allreduce --fit: %d ranks (%s)\n", dt_comm_size(c), topo);
        printf("gamma  %8.4f ns per byte summed (%.2f GB/s)\n", m.gamma * 1e9, m.gamma > 0 ? 1e-9 / m.gamma : 0.0);
        if (ti.shm && ti.even) print_level("local", &m.local, "shared memory inside a host (shm all-reduce, fitted 4K-16M)");
        else printf("local  not measured: %s\n", ti.shm ? "hosts hold unequal rank counts" : "no shared memory or one rank per host");
        if (ti.hosts > 1) print_level("cross", &m.cross, "a host's link (ring among one rank per host, fitted 4K-16M)");
        else printf("cross  not measured: one host\n");
        if (ti.hosts > 1) printf("burst  %8.1f KB passed at once after the link idled 50 ms\n", burst / 1e3);
    }
    if (!st) st = check_model(c, &m, &ti, buf);
    if (!st && r == 0) {
        printf("{\"local\": {\"alpha\": %.4g, \"beta\": %.4g}, \"cross\": {\"alpha\": %.4g, \"beta\": %.4g", m.local.alpha,
               m.local.beta, m.cross.alpha, m.cross.beta);
        for (int k = 0; k < NSIZES && ti.hosts > 1; k++)
            printf("%s[%.0f, %.4g]", k ? ", " : ", \"measured_beta\": [", msg[k], beta[k]);
        if (ti.hosts > 1) printf("], \"burst_bytes\": %.0f", burst);
        printf("}, \"gamma\": %.4g}\n", m.gamma);
    }
    if (st) fprintf(stderr, "dtrain bench allreduce --fit: %s\n", dt_error_msg());
    dt_comm_destroy(cross);
    dt_comm_destroy(local);
    if (!st) dt_free(buf); /* after a failed ping MPI may still touch it (dt_cancel) */
    return st ? 1 : 0;
}
