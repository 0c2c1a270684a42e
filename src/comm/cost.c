/* The all-reduce cost model: each algorithm's time from alpha (per message or
 * sync point), beta (per byte) of the link level it uses and gamma (per byte
 * summed), the formulas of the algorithms' opening comments. H hosts x L ranks,
 * p = H.L, n bytes:
 *   rd    ceil(lg p).alpha + n.ceil(lg p).(beta + gamma)
 *   rhd   2 ceil(lg p).alpha + 2n(p-1)/p.beta + n(p-1)/p.gamma
 *         (+ 2n.beta + n.gamma when p is not a power of two)
 *   ring  2(p-1).alpha + 2n(p-1)/p.beta + n(p-1)/p.gamma
 *   flat algorithms across hosts run at the cross level (their slowest hop);
 *   one host: at the local level;
 *   shm   2 sync points per round of DT_SHM_ROUND_BYTES at the local alpha,
 *         + 2n(L-1)/L.beta_local + n(L-1)/L.gamma
 *   hier  a local reduce-scatter and all-gather (2 sync points per round each,
 *         the same bytes and sums as shm)
 *         + an all-reduce of n/L bytes among H ranks whose L transfers share
 *         each host's link (cross beta x L), by what AUTO picks for it.
 * native is modelled as ring (MPI's choice is not known here). */
#include "comm/comm_internal.h"

#include <math.h>


static int ceil_lg(int p) {
    int k = 0;
    while ((1 << k) < p) k++;
    return k;
}

static double flat(dt_algo a, int p, double n, dt_link_cost l, double gamma) {
    if (p <= 1 || n <= 0) return 0;
    double f = (double)(p - 1) / p, lg = ceil_lg(p);
    bool pow2 = (p & (p - 1)) == 0;
    switch (a) {
    case DT_ALGO_RD: return lg * l.alpha + n * lg * (l.beta + gamma);
    case DT_ALGO_RHD: return 2 * lg * l.alpha + 2 * n * f * l.beta + n * f * gamma + (pow2 ? 0 : 2 * n * l.beta + n * gamma);
    default: return 2 * (p - 1) * l.alpha + 2 * n * f * l.beta + n * f * gamma;
    }
}

/* What dt_auto_allreduce picks among the flat algorithms (auto.c). */
static dt_algo flat_auto(int p, double n) {
    if (n <= 16 << 10) return DT_ALGO_RD;
    if (n <= 1 << 20 && (p & (p - 1)) == 0) return DT_ALGO_RHD;
    return DT_ALGO_RING;
}

/* Through the segment: the fused all-reduce (syncs = 2 per round) or a
 * reduce-scatter then an all-gather (4). */
static double local_part(const dt_cost_model *m, int L, double n, int syncs) {
    if (L <= 1) return 0;
    double f = (double)(L - 1) / L, rounds = ceil(n / (double)DT_SHM_ROUND_BYTES);
    return syncs * rounds * m->local.alpha + 2 * n * f * m->local.beta + n * f * m->gamma;
}

double dt_allreduce_predict(const dt_cost_model *m, dt_algo a, int hosts, int per_host, size_t bytes) {
    int H = hosts < 1 ? 1 : hosts, L = per_host < 1 ? 1 : per_host, p = H * L;
    double n = (double)bytes;
    if (a == DT_ALGO_AUTO) a = L > 1 ? (H == 1 ? DT_ALGO_SHM : DT_ALGO_HIER) : flat_auto(p, n);
    dt_link_cost hop = H > 1 ? m->cross : m->local;
    switch (a) {
    case DT_ALGO_SHM:
    case DT_ALGO_HIER: {
        double t = local_part(m, L, n, a == DT_ALGO_SHM ? 2 : 4), chunk = n / L;
        dt_link_cost shared = {m->cross.alpha, m->cross.beta * L};
        return t + (H > 1 ? flat(flat_auto(H, chunk), H, chunk, shared, m->gamma) : 0);
    }
    case DT_ALGO_RD:
    case DT_ALGO_RHD:
    case DT_ALGO_RING: return flat(a, p, n, hop, m->gamma);
    default: return flat(DT_ALGO_RING, p, n, hop, m->gamma);
    }
}
