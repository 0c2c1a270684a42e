/* dtrain bench allreduce: an nccl-tests style bandwidth table of our all-reduce
 * algorithms next to MPI's own, from --min-bytes to --max-bytes doubling.
 *
 *   time  = max over ranks of the mean time of one all-reduce (after warm-up)
 *   algbw = bytes / time;  busbw = algbw * 2(p-1)/p  (comparable with a link's
 *           or memory's bandwidth, whatever the rank count)
 *
 * Run under a launcher: `dtrain bench allreduce -n 2` (the launcher in main.c)
 * or `mpirun -n 2 dtrain bench allreduce`. Rank 0 prints. */
#include "cli.h"
#include "launch.h"
#include "dtrain/comm.h"
#include "dtrain/testing.h" /* dt_comm_set_max_segment */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *bench_help =
    "usage: dtrain bench allreduce [-n N] [--algo ring|rhd|rd|shm|hier|native|auto|all] [--min-bytes 4K]\n"
    "                              [--max-bytes 64M] [--iters N] [--segment BYTES] [--check] [--fit] [--alone]\n"
    "                              [--hostfile FILE] [--pretend-hosts K]\n"
    "\n"
    "  --algo       algorithm to time next to MPI's native one (default all: the flat\n"
    "               ones, shm on one host or hier across hosts, auto and native)\n"
    "  --min-bytes  smallest message (K, M, G suffixes; default 4K)\n"
    "  --max-bytes  largest message (default 64M)\n"
    "  --iters      timed iterations per size (default: 1 GiB of traffic, 5..200)\n"
    "  --segment    max segment of the pipelined algorithms (default 1M)\n"
    "  --check      verify sums and bitwise agreement across ranks at every size\n"
    "  --alone      time --algo only, without MPI's native one beside it\n"
    "  --fit        instead of the table: measure alpha and beta of each link level\n"
    "               (inside a host, across hosts) and gamma, for the cost model\n"
    "  --pretend-hosts K  testing: the ranks of this machine as K hosts\n"
    "Times are the max over ranks of the mean; busbw = algbw * 2(p-1)/p.\n";

static int parse_bytes(const char *flag, const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) goto bad;
    switch (toupper((unsigned char)*end)) {
    case 'K': v <<= 10; end++; break;
    case 'M': v <<= 20; end++; break;
    case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end || v == 0) goto bad;
    *out = (size_t)v;
    return 0;
bad:
    fprintf(stderr, "dtrain bench allreduce: %s expects a size like 4096, 4K, 64M; got '%s'\n", flag, s);
    return 2;
}

typedef struct {
    dt_algo algos[DT_ALGO_COUNT];
    int nalgo;
    size_t min_bytes, max_bytes, segment;
    int iters, pretend;
    bool check, fit, all, alone;
} bench_opts;

static int parse_opts(int argc, char **argv, bench_opts *o, bool *help) {
    const char *algo = "all";
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            *help = true;
            return 0;
        }
        if (strcmp(f, "--check") == 0 || strcmp(f, "--fit") == 0 || strcmp(f, "--alone") == 0) {
            *(strcmp(f, "--fit") == 0 ? &o->fit : strcmp(f, "--alone") == 0 ? &o->alone : &o->check) = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "dtrain bench allreduce: %s needs a value (see --help)\n", f);
            return 2;
        }
        i++;
        int rc = 0;
        if (strcmp(f, "--algo") == 0) algo = v;
        else if (strcmp(f, "--min-bytes") == 0) rc = parse_bytes(f, v, &o->min_bytes);
        else if (strcmp(f, "--max-bytes") == 0) rc = parse_bytes(f, v, &o->max_bytes);
        else if (strcmp(f, "--segment") == 0) rc = parse_bytes(f, v, &o->segment);
        else if (strcmp(f, "--iters") == 0) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1000000) {
                fprintf(stderr, "dtrain bench allreduce: --iters expects [1, 1000000], got '%s'\n", v);
                return 2;
            }
            o->iters = (int)n;
        } else if (strcmp(f, "--pretend-hosts") == 0) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 4096) {
                fprintf(stderr, "dtrain bench allreduce: --pretend-hosts expects [1, 4096], got '%s'\n", v);
                return 2;
            }
            o->pretend = (int)n;
        }
        /* The launcher's flags (it passes them through). */
        else if (strcmp(f, "-n") == 0 || strcmp(f, "--nproc") == 0 || strcmp(f, "--hostfile") == 0 ||
                 strcmp(f, "--threads") == 0) continue;
        else {
            fprintf(stderr, "dtrain bench allreduce: unknown flag '%s' (see --help)\n", f);
            return 2;
        }
        if (rc) return rc;
    }
    if (o->min_bytes > o->max_bytes) {
        fprintf(stderr, "dtrain bench allreduce: --min-bytes is larger than --max-bytes\n");
        return 2;
    }
    if (strcmp(algo, "all") == 0) {
        /* shm or hier joins once the topology is known (run) */
        const dt_algo all[] = {DT_ALGO_RING, DT_ALGO_RHD, DT_ALGO_RD, DT_ALGO_AUTO, DT_ALGO_NATIVE};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) o->algos[o->nalgo++] = all[k];
        o->all = true;
        return 0;
    }
    dt_algo a;
    if (dt_algo_parse(algo, &a)) {
        fprintf(stderr, "dtrain bench allreduce: %s\n", dt_error_msg());
        return 2;
    }
    o->algos[o->nalgo++] = a;
    if (a != DT_ALGO_NATIVE && !o->alone) o->algos[o->nalgo++] = DT_ALGO_NATIVE;
    return 0;
}

/* Max over ranks of v (through the f64 sum: one slot per rank). */
static dt_status max_over_ranks(dt_comm *c, double v, double *slots, double *out) {
    int p = dt_comm_size(c);
    memset(slots, 0, (size_t)p * sizeof *slots);
    slots[dt_comm_rank(c)] = v;
    dt_status st = dt_allreduce_f64(c, slots, (size_t)p);
    if (st) return st;
    *out = slots[0];
    for (int i = 1; i < p; i++) *out = slots[i] > *out ? slots[i] : *out;
    return DT_OK;
}

/* Rank r contributes (r+1) + i mod 7: sums are small integers, exact in float,
 * so every algorithm must give exactly p(p+1)/2 + p.(i mod 7) on every rank. */
static dt_status check_one(dt_comm *c, float *buf, size_t count, dt_algo a, double *slots, bool *ok) {
    int p = dt_comm_size(c), r = dt_comm_rank(c);
    for (size_t i = 0; i < count; i++) buf[i] = (float)(r + 1) + (float)(i % 7);
    dt_status st = dt_allreduce(c, buf, count, DT_OP_SUM, a);
    if (st) return st;
    double bad = 0, sum = 0;
    for (size_t i = 0; i < count; i++) {
        float want = (float)(p * (p + 1) / 2) + (float)p * (float)(i % 7);
        if (buf[i] != want) bad++;
        sum += (double)buf[i] * (double)(i % 13 + 1);
    }
    double worst_bad, hi, lo;
    if ((st = max_over_ranks(c, bad, slots, &worst_bad))) return st;
    if ((st = max_over_ranks(c, sum, slots, &hi))) return st;
    if ((st = max_over_ranks(c, -sum, slots, &lo))) return st;
    *ok = worst_bad == 0 && hi == -lo;
    return DT_OK;
}

/* One core's memcpy bandwidth at this size (rank 0 copies, the others wait):
 * the yardstick of the shared-memory algorithms. */
static dt_status time_memcpy(dt_comm *c, const float *src, float *dst, size_t bytes, int iters, double *gbs) {
    dt_status st = dt_barrier(c);
    if (!st && dt_comm_rank(c) == 0) {
        memcpy(dst, src, bytes); /* the pages mapped */
        double t0 = dt_now();
        for (int i = 0; i < iters; i++) memcpy(dst, src, bytes);
        *gbs = (double)bytes * iters / (dt_now() - t0) * 1e-9;
    }
    return st ? st : dt_barrier(c);
}

static int run(dt_comm *c, const bench_opts *o) {
    int rc = 1, p = dt_comm_size(c), r = dt_comm_rank(c);
    size_t maxcount = o->max_bytes / sizeof(float);
    float *buf = dt_alloc_floats(maxcount ? maxcount : 1), *cpy = r == 0 ? dt_alloc_floats(maxcount ? maxcount : 1) : NULL;
    double *slots = dt_calloc((size_t)p, sizeof(double));
    dt_status st = DT_OK;
    if (!buf || !slots || (r == 0 && !cpy)) {
        fprintf(stderr, "dtrain bench allreduce: out of memory for %zu bytes\n", o->max_bytes);
        goto fn_exit;
    }
    if (o->segment) dt_comm_set_max_segment(c, o->segment);
    double busf = p > 1 ? 2.0 * (p - 1) / p : 1.0;
    char topo[256];
    dt_comm_topology_desc(c, topo, sizeof topo);
    if (r == 0) {
        printf("# dtrain bench allreduce: %d ranks (%s), float sum, segment %zu B, in place; time = max over ranks of "
               "the mean, us; bw GB/s; busbw = algbw*%.3f\n",
               p, topo, o->segment ? o->segment : (size_t)1 << 20, busf);
        printf("%12s %11s", "bytes", "count");
        for (int k = 0; k < o->nalgo; k++) printf(" | %8s %17s", dt_algo_name(o->algos[k]), "algbw   busbw");
        printf(" | memcpy GB/s");
        if (o->check) printf("  check");
        printf("\n");
    }
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 2) {
        size_t count = bytes / sizeof(float);
        int iters = o->iters;
        double probe = 0;
        if (!iters) {
            /* About half a second per size and algorithm (5 to 200 calls), from
             * one timed call of the first algorithm, agreed over the ranks (a slow
             * or shaped network must not make the sweep take hours). */
            memset(buf, 0, count * sizeof(float));
            st = dt_allreduce(c, buf, count, DT_OP_SUM, o->algos[0]);
            double t0 = dt_now();
            if (!st) st = dt_allreduce(c, buf, count, DT_OP_SUM, o->algos[0]);
            if (!st) st = max_over_ranks(c, dt_now() - t0, slots, &probe);
            if (st) {
                fprintf(stderr, "dtrain bench allreduce: %s\n", dt_error_msg());
                goto fn_exit;
            }
            double n = 0.5 / (probe > 1e-9 ? probe : 1e-9);
            iters = n < 5 ? 5 : n > 200 ? 200 : (int)n;
        }
        int warm = iters / 5 < 2 ? 2 : iters / 5;
        double times[DT_ALGO_COUNT + 1];
        bool ok = true;
        for (int k = 0; k < o->nalgo; k++) {
            dt_algo a = o->algos[k];
            memset(buf, 0, count * sizeof(float));
            for (int w = 0; w < warm && !st; w++) st = dt_allreduce(c, buf, count, DT_OP_SUM, a);
            if (!st) st = dt_barrier(c);
            double t0 = dt_now();
            for (int it = 0; it < iters && !st; it++) st = dt_allreduce(c, buf, count, DT_OP_SUM, a);
            double mean = (dt_now() - t0) / iters;
            if (!st) st = max_over_ranks(c, mean, slots, &times[k]);
            if (!st && o->check) {
                bool one = false;
                st = check_one(c, buf, count, a, slots, &one);
                ok = ok && one;
            }
            if (st) {
                fprintf(stderr, "dtrain bench allreduce: %s\n", dt_error_msg());
                goto fn_exit;
            }
        }
        double copy_bw = 0;
        if ((st = time_memcpy(c, buf, cpy, bytes, iters, &copy_bw))) {
            fprintf(stderr, "dtrain bench allreduce: %s\n", dt_error_msg());
            goto fn_exit;
        }
        if (r == 0) {
            printf("%12zu %11zu", bytes, count);
            for (int k = 0; k < o->nalgo; k++) {
                double algbw = (double)bytes / times[k] * 1e-9;
                /* Four decimals: a shaped network's MB/s still shows. */
                printf(" | %8.1f %7.4f %7.4f", times[k] * 1e6, algbw, algbw * busf);
            }
            printf(" | %11.4f", copy_bw);
            if (o->check) printf("  %s", ok ? "ok" : "WRONG");
            printf("\n");
            fflush(stdout);
        }
        if (!ok) goto fn_exit;
        if (bytes > o->max_bytes / 2) break;
    }
    rc = 0;
fn_exit:
    dt_free(buf);
    dt_free(cpy);
    dt_free(slots);
    return rc;
}

/* "all": the topology-aware algorithm that fits, when the hosts share memory. */
static int topo_algos(dt_comm *c, bench_opts *o) {
    dt_comm_topo_info ti;
    if (dt_comm_topology(c, &ti)) {
        fprintf(stderr, "dtrain bench allreduce: %s\n", dt_error_msg());
        return 1;
    }
    if (!o->all || !ti.shm) return 0;
    /* before auto: ring rhd rd TOPO auto native */
    for (int k = o->nalgo; k > 3; k--) o->algos[k] = o->algos[k - 1];
    o->algos[3] = ti.hosts == 1 ? DT_ALGO_SHM : DT_ALGO_HIER;
    o->nalgo++;
    return 0;
}

int dt_cli_bench_allreduce(int argc, char **argv) {
    bench_opts o = {.min_bytes = (size_t)4 << 10, .max_bytes = (size_t)64 << 20};
    bool help = false;
    int rc = parse_opts(argc, argv, &o, &help);
    if (rc) return rc;
    if (help) {
        fputs(bench_help, stdout);
        return 0;
    }
    dt_comm *c = NULL;
    if (dt_comm_init(dt_under_mpi_launcher(), &c)) {
        fprintf(stderr, "dtrain bench allreduce: %s\n", dt_error_msg());
        return 1;
    }
    if (dt_comm_rank(c) == 0) dt_launch_report_up();
    dt_comm_set_timeout(c, 120);
    rc = o.pretend > 1 && dt_comm_pretend_hosts(c, o.pretend) ? 1 : 0;
    if (rc) fprintf(stderr, "dtrain bench allreduce: %s\n", dt_error_msg());
    if (!rc) rc = topo_algos(c, &o);
    if (!rc) rc = o.fit ? dt_bench_fit(c) : run(c, &o);
    if (rc && dt_comm_size(c) > 1) {
        dt_comm_abort(c, rc); /* a failed rank would leave the others waiting */
        _exit(rc);            /* MPI_Abort returned: no MPI_Finalize, the others may never reach it */
    }
    dt_comm_destroy(c);
    dt_comm_finalize();
    return rc;
}
