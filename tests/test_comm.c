/* The communication layer under any rank count: 1 (the self communicator, no
 * launcher) or N under mpiexec (ctest runs 1..5). Closed-form expected values:
 * rank r contributes x_i = (r+1) + (i mod 7), so every sum is a small integer,
 * exact in float, and every algorithm must match it bit for bit; each result is
 * also checked to be bitwise identical on every rank. */
#include "dtrain/comm.h"
#include "dtrain/testing.h"
#include "testhelp.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static dt_comm *W;
static int P, R;

static void check_ok(const char *what, dt_status st) {
    if (st) fprintf(stderr, "rank %d: %s: %s: %s\n", R, what, dt_status_str(st), dt_error_msg());
    test_cond(what, st == DT_OK);
}

/* Max over ranks of v, through the f64 sum (one slot per rank). */
static double max_all(dt_comm *c, double v) {
    int p = dt_comm_size(c);
    double slots[64] = {0};
    DT_ASSERT(p <= 64);
    slots[dt_comm_rank(c)] = v;
    check_ok("allreduce_f64(max)", dt_allreduce_f64(c, slots, (size_t)p));
    double m = slots[0];
    for (int i = 1; i < p; i++) m = slots[i] > m ? slots[i] : m;
    return m;
}

static uint32_t hash_bits(const void *p, size_t bytes) {
    const unsigned char *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* True when every rank of c holds the same bytes. */
static bool same_everywhere(dt_comm *c, const void *p, size_t bytes) {
    double h = (double)hash_bits(p, bytes);
    return max_all(c, h) == h && max_all(c, -h) == -h;
}

static float contrib(int r, size_t i) { return (float)(r + 1) + (float)(i % 7); }
static float sum_of(int p, size_t i) { return (float)(p * (p + 1) / 2) + (float)p * (float)(i % 7); }
static float expect(int p, size_t i, dt_reduce_op op) {
    return op == DT_OP_AVG ? sum_of(p, i) * (1.0f / (float)p) : sum_of(p, i);
}

static const dt_algo ALGOS[] = {DT_ALGO_RING, DT_ALGO_RHD, DT_ALGO_RD, DT_ALGO_SHM, DT_ALGO_HIER, DT_ALGO_NATIVE, DT_ALGO_AUTO};
#define NALGO (sizeof ALGOS / sizeof ALGOS[0])
static int HOSTS = 1;       /* --pretend-hosts K */
static bool SHM = true;     /* the host gives the ranks a shared segment */

/* shm on ranks that (pretend to) sit on several hosts, or shm and hier where
 * the host has no shared memory: refused, with why. */
static bool refused_shm(dt_algo a, float *buf, size_t count) {
    if ((a != DT_ALGO_SHM && a != DT_ALGO_HIER) || P == 1 || count == 0) return false;
    if (a == DT_ALGO_SHM && HOSTS > 1) {
        dt_status st = dt_allreduce(W, buf, count, DT_OP_SUM, a);
        test_cond("shm across hosts refused", st == DT_ERR_INVALID && strstr(dt_error_msg(), "needs every rank on one host"));
        return true;
    }
    if (SHM) return false;
    dt_status st = dt_allreduce(W, buf, count, DT_OP_SUM, a);
    test_cond("no shared memory: refused", st == DT_ERR_UNSUPPORTED && strstr(dt_error_msg(), "no shared memory"));
    return true;
}

/* All-reduce, reduce-scatter and all-gather of one count, one algorithm, one op. */
static void test_one(dt_algo a, dt_reduce_op op, size_t count, size_t seg, float *buf) {
    char what[160];
    const char *opn = op == DT_OP_SUM ? "sum" : "avg";
    size_t bad = 0;
    if (refused_shm(a, buf, count)) return;

    /* all-reduce */
    for (size_t i = 0; i < count; i++) buf[i] = contrib(R, i);
    snprintf(what, sizeof what, "allreduce %s %s count %zu seg %zu", dt_algo_name(a), opn, count, seg);
    check_ok(what, dt_allreduce(W, buf, count, op, a));
    for (size_t i = 0; i < count; i++) bad += buf[i] != expect(P, i, op);
    if (max_all(W, (double)bad) != 0) {
        fprintf(stderr, "rank %d: FAIL %s: %zu wrong (buf[0]=%g want %g)\n", R, what, bad, count ? buf[0] : 0.0,
                count ? expect(P, 0, op) : 0.0);
        test_cond(what, false);
    } else {
        t_passed++;
    }
    snprintf(what, sizeof what, "allreduce %s %s count %zu seg %zu identical on all ranks", dt_algo_name(a), opn,
             count, seg);
    test_cond(what, same_everywhere(W, buf, count * sizeof(float)));

    /* reduce-scatter: chunk R is ours */
    for (size_t i = 0; i < count; i++) buf[i] = contrib(R, i);
    snprintf(what, sizeof what, "reduce_scatter %s %s count %zu seg %zu", dt_algo_name(a), opn, count, seg);
    check_ok(what, dt_reduce_scatter(W, buf, count, op, a));
    size_t off = dt_chunk_off(count, P, R), len = dt_chunk_len(count, P, R);
    bad = 0;
    for (size_t i = off; i < off + len; i++) bad += buf[i] != expect(P, i, op);
    test_cond(what, max_all(W, (double)bad) == 0);

    /* all-gather: element i of chunk k is k*1000 + (i mod 1000) */
    for (size_t i = 0; i < count; i++) buf[i] = -1.0f;
    for (size_t i = off; i < off + len; i++) buf[i] = (float)(R * 1000) + (float)(i % 1000);
    snprintf(what, sizeof what, "allgather %s count %zu seg %zu", dt_algo_name(a), count, seg);
    check_ok(what, dt_allgather(W, buf, count, a));
    bad = 0;
    for (int k = 0; k < P; k++) {
        size_t o = dt_chunk_off(count, P, k);
        for (size_t i = o; i < o + dt_chunk_len(count, P, k); i++) bad += buf[i] != (float)(k * 1000) + (float)(i % 1000);
    }
    test_cond(what, max_all(W, (double)bad) == 0);
}

/* Inexact sums (rounding depends on the order): each algorithm must still give
 * bitwise identical results on every rank, and the same bits when repeated. */
static void test_determinism(void) {
    const size_t n = 100003;
    float *a = dt_alloc_floats(n), *b = dt_alloc_floats(n);
    for (size_t k = 0; k < NALGO; k++) {
        for (int op = 0; op < 2; op++) {
            dt_comm_set_max_segment(W, k % 2 ? 4096 : (size_t)1 << 20);
            for (size_t i = 0; i < n; i++) a[i] = b[i] = 0.1f * (float)(R + 1) + 1e-3f * (float)(i % 1013) + 1e-7f;
            char what[96];
            if (refused_shm(ALGOS[k], a, n)) continue;
            snprintf(what, sizeof what, "determinism %s %s", dt_algo_name(ALGOS[k]), op ? "avg" : "sum");
            check_ok(what, dt_allreduce(W, a, n, (dt_reduce_op)op, ALGOS[k]));
            check_ok(what, dt_allreduce(W, b, n, (dt_reduce_op)op, ALGOS[k]));
            test_cond(what, memcmp(a, b, n * sizeof(float)) == 0 && same_everywhere(W, a, n * sizeof(float)));
        }
    }
    dt_comm_set_max_segment(W, (size_t)1 << 20);
    dt_free(a);
    dt_free(b);
}

static void test_bcast(size_t bytes, dt_algo a) {
    unsigned char *b = dt_malloc(bytes + 1);
    for (int root = 0; root < P; root++) {
        for (size_t i = 0; i < bytes; i++) b[i] = R == root ? (unsigned char)(i * 31 + (size_t)root) : 0;
        char what[96];
        snprintf(what, sizeof what, "bcast %s %zu bytes from %d", dt_algo_name(a), bytes, root);
        check_ok(what, dt_bcast(W, b, bytes, root, a));
        size_t bad = 0;
        for (size_t i = 0; i < bytes; i++) bad += b[i] != (unsigned char)(i * 31 + (size_t)root);
        test_cond(what, max_all(W, (double)bad) == 0);
    }
    dt_free(b);
}

static void test_f64(void) {
    const size_t counts[] = {0, 1, 5, 1000};
    double buf[1000];
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t n = counts[k], bad = 0;
        for (size_t i = 0; i < n; i++) buf[i] = R + 0.5 + (double)i;
        check_ok("allreduce_f64", dt_allreduce_f64(W, buf, n));
        for (size_t i = 0; i < n; i++) bad += buf[i] != P * (P - 1) / 2.0 + P * (0.5 + (double)i);
        test_cond("allreduce_f64 values", max_all(W, (double)bad) == 0);
    }
}

/* Odd and even world ranks form two groups; each all-reduces inside itself. */
static void test_split(void) {
    dt_comm *g = NULL;
    check_ok("split", dt_comm_split(W, R % 2, R, &g));
    if (!g) return;
    int gp = dt_comm_size(g), gr = dt_comm_rank(g);
    test_cond("split size", gp == (P + 1 - R % 2) / 2);
    test_cond("split rank", gr == R / 2);
    test_cond("split world rank", dt_comm_world_rank(g, gr) == R);
    float buf[1000];
    const dt_algo as[] = {DT_ALGO_RING, DT_ALGO_RHD, DT_ALGO_RD, DT_ALGO_NATIVE, SHM ? DT_ALGO_HIER : DT_ALGO_AUTO, DT_ALGO_AUTO};
    for (size_t k = 0; k < sizeof as / sizeof as[0]; k++) {
        for (size_t i = 0; i < 1000; i++) buf[i] = contrib(R, i);
        check_ok("split allreduce", dt_allreduce(g, buf, 1000, DT_OP_SUM, as[k]));
        size_t bad = 0;
        for (size_t i = 0; i < 1000; i++) {
            float want = 0;
            for (int q = R % 2; q < P; q += 2) want += contrib(q, i);
            bad += buf[i] != want;
        }
        char what[64];
        snprintf(what, sizeof what, "split allreduce %s", dt_algo_name(as[k]));
        test_cond(what, bad == 0);
    }
    dt_comm_destroy(g);
}

/* Point-to-point, including to self (the self comm's mailbox). */
static void test_p2p(void) {
    int v = 100 + R, got = -1;
    check_ok("sendrecv", dt_sendrecv(W, &v, sizeof v, (R + 1) % P, &got, sizeof got, (R - 1 + P) % P, 7, "p2p"));
    test_cond("sendrecv value", got == 100 + (R - 1 + P) % P);
    uint64_t before = dt_comm_bytes_sent(W);
    dt_req q[2];
    got = -1;
    check_ok("isend self", dt_isend(W, &v, sizeof v, R, 8, &q[0]));
    check_ok("irecv self", dt_irecv(W, &got, sizeof got, R, 8, &q[1]));
    check_ok("waitall self", dt_waitall(W, q, 2, "p2p self"));
    test_cond("send to self", got == v);
    test_cond("bytes sent counted", dt_comm_bytes_sent(W) == before + sizeof v);
}

/* Rank 0 joins late: only once every other rank has told it (over the world
 * communicator) that its all-reduce timed out; they must time out after ~1 s,
 * the message naming the rank they waited for (rank 0 for its ring neighbour).
 * The timed-out communicator is dropped after a deadline-free world barrier. */
static void test_timeout(dt_algo a) {
    if (P < 2) return;
    dt_comm *t = NULL;
    check_ok("split for timeout", dt_comm_split(W, 0, R, &t));
    if (!t) return;
    float buf[64];
    /* shared memory: the topology and the segment are made while all are here */
    if (a == DT_ALGO_SHM) check_ok("shm all-reduce before the timeout", dt_allreduce(t, buf, 64, DT_OP_SUM, a));
    dt_comm_set_timeout(t, 1.0);
    dt_comm_set_step(t, 12);
    for (int i = 0; i < 64; i++) buf[i] = 1;
    enum { TAG_TIMED_OUT = 9 };
    if (R == 0) {
        /* Waiting for the others' notes, not for a fixed time. */
        for (int r = 1; r < P; r++) {
            dt_req q;
            check_ok("irecv note", dt_irecv(W, NULL, 0, r, TAG_TIMED_OUT, &q));
            check_ok("note of a timed-out rank", dt_waitall(W, &q, 1, "note"));
        }
    }
    /* The others have given up: rank 0 only shows that joining late is harmless. */
    if (R == 0) dt_comm_set_timeout(t, 0.1);
    double t0 = dt_now();
    dt_status st = dt_allreduce(t, buf, 64, DT_OP_SUM, a);
    double took = dt_now() - t0;
    if (R != 0) {
        printf("rank %d: %.2f s: %s\n", R, took, dt_error_msg());
        test_cond("late rank 0 -> DT_ERR_TIMEOUT", st == DT_ERR_TIMEOUT);
        test_cond("timeout within 1 s + margin", took > 0.9 && took < 2.5);
        char op[64];
        snprintf(op, sizeof op, "allreduce(%s) timed out", dt_algo_name(a));
        test_cond("message names the operation and step", strstr(dt_error_msg(), op) && strstr(dt_error_msg(), "at step 12"));
        if (R == 1 && a == DT_ALGO_RING) test_cond("ring neighbour names rank 0", strstr(dt_error_msg(), "waiting for rank 0 (recv)"));
        if (a == DT_ALGO_SHM) test_cond("names rank 0 (shared memory)", strstr(dt_error_msg(), "waiting for rank 0 (shared memory)"));
        /* A timed-out communicator refuses further work. */
        test_cond("broken comm refuses work", dt_allreduce(t, buf, 64, DT_OP_SUM, a) == DT_ERR_COMM);
        dt_req q;
        check_ok("isend note", dt_isend(W, NULL, 0, 0, TAG_TIMED_OUT, &q));
        check_ok("note sent", dt_waitall(W, &q, 1, "note"));
    } else {
        test_cond("late rank: ok or timeout", st == DT_OK || st == DT_ERR_TIMEOUT);
    }
    /* Re-synchronise without a deadline, then drop the communicator. */
    dt_comm_set_timeout(W, 0);
    check_ok("barrier after timeout", dt_barrier(W));
    dt_comm_set_timeout(W, 60);
    dt_comm_destroy(t);
}

/* Large counts (several rounds of the shared segment) for the topology-aware
 * algorithms, and their agreement with the flat ring within float rounding. */
static void test_topology_large(float *buf) {
    const size_t n = 1000003;
    const dt_algo as[] = {SHM ? DT_ALGO_SHM : DT_ALGO_AUTO, SHM ? DT_ALGO_HIER : DT_ALGO_AUTO, DT_ALGO_AUTO};
    for (size_t k = 0; k < sizeof as / sizeof as[0]; k++)
        for (int op = 0; op < 2; op++) test_one(as[k], (dt_reduce_op)op, n, (size_t)1 << 20, buf);
    char desc[160];
    dt_comm_topology_desc(W, desc, sizeof desc);
    if (R == 0) printf("test_comm: topology %s\n", desc);
}

int main(int argc, char **argv) {
    /* Under tests.cmake's mpiexec (Open MPI) or alone: the self communicator. */
    if (dt_comm_init(getenv("OMPI_COMM_WORLD_SIZE") != NULL, &W)) {
        fprintf(stderr, "test_comm: %s\n", dt_error_msg());
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "--pretend-hosts") == 0) HOSTS = atoi(argv[2]);
    if (HOSTS > 1 && dt_comm_pretend_hosts(W, HOSTS)) {
        fprintf(stderr, "test_comm: %s\n", dt_error_msg());
        return 1;
    }
    P = dt_comm_size(W);
    R = dt_comm_rank(W);
    dt_comm_set_timeout(W, 30);
    dt_comm_topo_info ti;
    check_ok("topology", dt_comm_topology(W, &ti));
    SHM = ti.shm || ti.per_host == 1;
    if (!SHM && R == 0) printf("test_comm: this host gives no shared memory: shm and hier are checked to refuse\n");
    if (R == 0) printf("test_comm: %d rank(s), %s, %d host(s)\n", P, dt_comm_is_mpi(W) ? "MPI" : "self", dt_comm_nhosts(W));

    /* Partition convention and names. */
    test_cond("chunk off", dt_chunk_off(10, 3, 0) == 0 && dt_chunk_off(10, 3, 1) == 4 && dt_chunk_off(10, 3, 3) == 10);
    test_cond("chunk len", dt_chunk_len(10, 3, 0) == 4 && dt_chunk_len(10, 3, 2) == 3 && dt_chunk_len(2, 3, 2) == 0);
    for (int a = 0; a < DT_ALGO_COUNT; a++) {
        dt_algo back;
        test_cond("algo name round trip", dt_algo_parse(dt_algo_name((dt_algo)a), &back) == DT_OK && back == (dt_algo)a);
    }
    dt_algo dummy;
    test_cond("algo parse rejects", dt_algo_parse("tree", &dummy) == DT_ERR_INVALID);

    size_t counts[] = {0, 1, (size_t)P - 1, (size_t)P, 7, 1000, 100003};
    const size_t ncounts = sizeof counts / sizeof counts[0];
    float *buf = dt_alloc_floats(1000003);
    for (size_t k = 0; k < NALGO; k++) {
        for (int op = 0; op < 2; op++) {
            for (size_t n = 0; n < ncounts; n++) {
                /* 64-byte segments reach the multi-segment paths; 100003 floats
                 * take 4 KiB ones there to keep the suite quick. */
                size_t small = counts[n] > 10000 ? 4096 : 64;
                dt_comm_set_max_segment(W, small);
                test_one(ALGOS[k], (dt_reduce_op)op, counts[n], small, buf);
                dt_comm_set_max_segment(W, (size_t)1 << 20);
                test_one(ALGOS[k], (dt_reduce_op)op, counts[n], (size_t)1 << 20, buf);
            }
        }
    }
    test_topology_large(buf);
    dt_free(buf);
    test_determinism();
    const size_t bsizes[] = {0, 1, 3, 1000, 400003};
    for (size_t k = 0; k < sizeof bsizes / sizeof bsizes[0]; k++) {
        test_bcast(bsizes[k], DT_ALGO_AUTO);
        test_bcast(bsizes[k], DT_ALGO_NATIVE);
        if (HOSTS == 1 && SHM && P > 1) test_bcast(bsizes[k], DT_ALGO_SHM);
    }
    for (int i = 0; i < 5; i++) check_ok("barrier", dt_barrier(W));
    test_f64();
    test_split();
    test_p2p();
    test_timeout(DT_ALGO_RING);
    if (HOSTS == 1 && SHM) test_timeout(DT_ALGO_SHM);

    int rc = test_report();
    double worst = max_all(W, rc);
    dt_comm_destroy(W);
    dt_comm_finalize();
    return worst != 0 ? 1 : 0;
}
