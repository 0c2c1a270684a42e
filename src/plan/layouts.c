/* A layout's step time and memory, predicted (plan.h). The model is compiled
 * (not allocated) at the layout's tp, so each block's FLOPs, tensor-parallel
 * bytes, parameters and activations are this rank's. Per step, with Bl =
 * batch/dp samples in M micro-batches of mb:
 *   compute   chunk c, a micro-batch: t0 x (its share of the FLOPs) + its
 *             FLOPs x mb / (rank FLOP/s x host speed), t0 and FLOP/s profiled
 *             (dt_plan_profile, all the host's ranks computing at once); a
 *             third forward, two thirds backward (+ a forward to recompute);
 *             a stage's, the sum over its chunks;
 *   partition blocks cut into C = pp x V chunks (V = 1 but for the
 *             interleaved schedule) by minimum bottleneck of FLOPs over the
 *             speed of the chunk's stage, chunk c on stage c % pp, as the
 *             runtime deals them (what --pp-partition is then given);
 *   tp        each block's all-reduce bytes through the local link (ring cost);
 *   schedule  dt_plan_pipeline over the chunks in the runtime's order,
 *             boundary transfers between chunks (C - 1 a micro-batch each
 *             way; across hosts, the stage's ranks on a host share its link,
 *             whose burst passes some at once, plan_p2p); with more ranks
 *             than cores GPipe is no faster than 1F1B; the span no shorter
 *             than the busiest link's messages;
 *   dp, ZeRO, compression, parameter server: plan_comm.c;
 *   optimizer the rank's share of parameters x the cluster's time per parameter.
 * Heterogeneous hosts: a stage runs at its slowest host's speed, except plain
 * data parallelism with `balance`, whose batch is split by speed (the mean).
 * Ranks are numbered as src/train/setup.c does: tp innermost, then replicas,
 * then stages; parameter servers last. Cost: one model compile per layout and
 * O(pp x C x M) for the schedule. */
#include "plan_internal.h"

#include "dtrain/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double host_speed(const dt_plan_cluster *c, int rank) {
    int h = rank / c->per_host;
    return c->speed[h < c->hosts ? h : c->hosts - 1];
}

/* Stage s's speed factor: its slowest rank's host, or the mean when the batch
 * is split by speed. */
static double stage_speed(const dt_plan_cluster *c, const dt_plan_layout *l, int s) {
    int n = l->tp * l->dp, r0 = s * n;
    double lo = 1e300, sum = 0;
    for (int r = r0; r < r0 + n; r++) {
        double v = host_speed(c, r);
        lo = v < lo ? v : lo;
        sum += v;
    }
    return l->balance ? sum / n : lo;
}

/* Adds blocks first..last to sc as its next range. */
static void add_range(const dt_model *m, int first, int last, stage_cost *sc) {
    if (sc->nr == 0) sc->bound = (double)m->blocks[first].in_dim; /* what crosses from the stage before */
    sc->first[sc->nr] = first;
    sc->last[sc->nr++] = last;
    for (int b = first; b <= last; b++) {
        const dt_block *k = &m->blocks[b];
        sc->flops += (double)k->flops;
        sc->tp_bytes += (double)k->tp_bytes;
        sc->params += (double)(k->param_hi - k->param_lo);
        sc->acts += (double)k->ops->saved_floats(k, 1) + (double)k->in_dim;
        sc->blocks++;
    }
}

/* Stage s's costs, the sums over its chunks s, s + P, ... (P = part->stages). */
static void stage_costs(const dt_model *m, const dt_partition *part, stage_cost *sc) {
    int P = part->stages, V = dt_partition_virt(part);
    for (int s = 0; s < P; s++) {
        memset(&sc[s], 0, sizeof sc[s]);
        sc[s].model = m; /* for layout_memory.c, while dt_plan_predict runs */
        for (int j = 0; j < V; j++) add_range(m, part->first[s + j * P], part->first[s + j * P + 1] - 1, &sc[s]);
    }
}

/* What src/train/config.c refuses of the interleaved schedule. */
static dt_status check_interleaved(const dt_plan_layout *l) {
    if (l->sched != DT_PLAN_INTERLEAVED) {
        if (l->virt > 1)
            return dt_errorf(DT_ERR_INVALID, "plan: --virtual-stages %d is for the interleaved schedule", l->virt);
        return DT_OK;
    }
    if (l->pp < 2) return dt_errorf(DT_ERR_INVALID, "plan: the interleaved schedule is for a pipeline (pp >= 2)");
    if (l->virt < 2 || l->virt > DT_PIPE_MAX_VIRTUAL)
        return dt_errorf(DT_ERR_INVALID, "plan: the interleaved schedule takes 2 to %d chunks a stage, not %d",
                         DT_PIPE_MAX_VIRTUAL, l->virt);
    if (l->micro % l->pp)
        return dt_errorf(DT_ERR_INVALID, "plan: the interleaved schedule runs micro-batches in groups of pp %d: %d is "
                                         "not a multiple", l->pp, l->micro);
    return DT_OK;
}

static dt_status check(const dt_plan_in *in, const dt_plan_layout *l, int world) {
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->micro < 1 || l->servers < 0 ||
        l->dp * l->tp * l->pp + l->servers != world)
        return dt_errorf(DT_ERR_INVALID, "plan: %d x %d x %d (dp x tp x pp)%s is not the world of %d ranks", l->dp, l->tp,
                         l->pp, l->servers ? " + servers" : "", world);
    if (l->tp > in->cluster->per_host)
        return dt_errorf(DT_ERR_INVALID, "plan: --tp %d spans hosts (%d ranks per host)", l->tp, in->cluster->per_host);
    if (in->batch < l->dp * l->micro)
        return dt_errorf(DT_ERR_INVALID, "plan: batch %d is smaller than dp %d x micro-batches %d", in->batch, l->dp, l->micro);
    if (l->zero < 0 || l->zero > 3) return dt_errorf(DT_ERR_INVALID, "plan: ZeRO %d is not built (0 to 3)", l->zero);
    if ((l->comp.kind != DT_COMP_NONE || l->servers || l->balance) && (l->tp > 1 || l->pp > 1))
        return dt_errorf(DT_ERR_INVALID, "plan: compression, the parameter server and a split by speed are for plain "
                                         "data parallelism (tp = pp = 1)");
    if (l->comp.kind == DT_COMP_POWERSGD)
        return dt_errorf(DT_ERR_INVALID, "plan: powersgd's cost is not modelled (its bytes depend on the shapes)");
    if (l->servers && (l->zero || l->comp.kind != DT_COMP_NONE || l->balance))
        return dt_errorf(DT_ERR_INVALID, "plan: the parameter server is planned plain (no --zero, --compress, --balance)");
    return check_interleaved(l);
}

/* One micro-batch of mb rows and `flops` (a chunk's, per sample) through the
 * rank of stage s: the whole unsharded model's time at mb rows (`total` FLOPs
 * per sample; the profile's measured sizes, or its fixed part and rate:
 * dt_plan_micro_time) by the chunk's share of those FLOPs. The share covers
 * the fixed part too, what a micro-batch costs whatever its rows: mostly the
 * GEMMs streaming their weights, of which a tensor-parallel rank holds 1/tp
 * (W1 1 x 2 x 2 on the emulated hosts, M 4, was predicted +82% while each tp
 * rank paid its stage's whole fixed part). */
static double chunk_time(const dt_plan_cluster *c, const dt_plan_layout *l, double flops, int s, double total,
                         double mb) {
    double whole = total > 0 ? dt_plan_micro_time(c, total, mb) * flops / total : flops * mb / c->flops;
    return whole / stage_speed(c, l, s);
}

/* A transfer of `bytes` from each rank of stage a to its peer of stage b:
 * stage s holds ranks s.span .. (s+1).span - 1 and rank a.span + r sends to
 * b.span + r; the pairs on different hosts cross, those leaving one host at
 * once sharing its link, quiet for `gap` between two such messages (a step
 * has one a micro-batch and chunk of a stage). */
static double transfer(const dt_plan_cluster *c, const dt_plan_layout *l, int a, int b, double bytes, double gap) {
    int span_r = l->tp * l->dp, per = c->per_host, crossing = 0;
    for (int r = 0; r < span_r; r++) crossing += (a * span_r + r) / per != (b * span_r + r) / per;
    int from_hosts = (a * span_r + span_r - 1) / per - (a * span_r) / per + 1;
    int share = crossing ? (crossing + from_hosts - 1) / from_hosts : 1;
    return plan_p2p(c, crossing > 0, bytes, share, gap, l->micro * (l->virt > 1 ? l->virt : 1));
}

/* Per chunk c of the partition (C = P V, chunk c on stage c % P): a
 * micro-batch's forward and backward, its tensor-parallel all-reduces, and
 * the transfer of its input from chunk c - 1. */
static void chunk_times(const dt_plan_in *in, const dt_plan_layout *l, const dt_model *m, double total,
                        const dt_partition *part, double mb, double *fwd, double *bwd, double *tps, double *p2p) {
    const dt_plan_cluster *c = in->cluster;
    int P = l->pp, C = dt_partition_chunks(part);
    double in_bytes[256];
    for (int k = 0; k < C; k++) {
        double flops = 0, tp_bytes = 0;
        for (int b = part->first[k]; b < part->first[k + 1]; b++) {
            flops += (double)m->blocks[b].flops;
            tp_bytes += (double)m->blocks[b].tp_bytes;
        }
        double f = chunk_time(c, l, flops, k % P, total, mb);
        tps[k] = l->tp > 1 ? plan_ar(c, 1, l->tp, 1, tp_bytes * mb) : 0;
        fwd[k] = f / 3 + tps[k] / 2;
        bwd[k] = 2 * f / 3 + tps[k] / 2 + (l->recompute ? f / 3 + tps[k] / 2 : 0);
        in_bytes[k] = (double)m->blocks[part->first[k]].in_dim * 4 * mb;
    }
    /* a boundary's message each way a micro-batch; between two on one link
     * its sender runs a forward and a backward (1F1B), or (GPipe) only
     * forwards, then only backwards */
    for (int k = 1; k < C; k++) {
        double gap = l->sched == DT_PLAN_GPIPE ? fmin(fwd[k - 1], bwd[k])
                                               : fmin(fwd[k - 1] + bwd[k - 1], fwd[k] + bwd[k]);
        p2p[k] = transfer(c, l, (k - 1) % P, k % P, in_bytes[k], gap);
    }
    p2p[0] = 0;
}

/* Ranks taking turns on one host's cores: a rank waiting in the pipeline's
 * bubble lends its share of the cores to the others, so the step is the
 * longer of the schedule's span at a core's full speed and every stage's
 * compute spread over the cores (the mean stage's busy time, which the
 * profile measured time-sliced), when that is shorter than the time-sliced
 * span. Measured at 4 ranks on 2 cores: W1 2x1x2 and W2 1x2x2 and 2x1x2
 * interleaved ran 24-39% under that span, near the mean. Not for hosts
 * emulated on one machine (shared_cores): their transfers' TCP burns the same
 * cores, and their pipelines measured at or above the span. *busy is capped
 * at the step. */
static double lent_cores(const dt_plan_cluster *c, const dt_plan_layout *l, int V, int M, const double *fwd,
                         const double *bwd, const double *p2p, const double *sf, const double *sb, double span,
                         double *busy) {
    int cores, R = dt_plan_ranks_sharing(c, &cores), P = l->pp;
    if (c->shared_cores > 0 || R <= cores) return span;
    double k = (double)cores / R, fk[256], bk[256], mean = 0;
    for (int i = 0; i < P * V; i++) fk[i] = fwd[i] * k, bk[i] = bwd[i] * k;
    double full = dt_plan_pipeline(l->sched, P, V, M, fk, bk, p2p, NULL);
    if (full < 0) return span;
    for (int s = 0; s < P; s++) mean += M * (sf[s] + sb[s]) / P;
    double lent = full > mean ? full : mean;
    if (!(lent < span)) return span;
    if (*busy > lent) *busy = lent;
    return lent;
}

/* The busiest link's time a step: boundary k's M messages forward (stage
 * (k-1) % P to k % P) and M back, those between the same two hosts in one
 * direction queued on one link (p2p[k] already counts the pairs that share
 * it). A stage's host is its first rank's. */
static double link_bound(const dt_plan_cluster *c, const dt_plan_layout *l, int C, const double *p2p) {
    int span_r = l->tp * l->dp, P = l->pp, n = 0, from[512], to[512];
    double t[512], most = 0;
    for (int k = 1; k < C; k++) {
        int ha = (k - 1) % P * span_r / c->per_host, hb = k % P * span_r / c->per_host;
        for (int dir = 0; dir < 2 && ha != hb; dir++) {
            int x = dir ? hb : ha, y = dir ? ha : hb, i = 0;
            while (i < n && !(from[i] == x && to[i] == y)) i++;
            if (i == n) from[n] = x, to[n] = y, t[n++] = 0;
            t[i] += l->micro * p2p[k];
            most = fmax(most, t[i]);
        }
    }
    return most;
}

/* The schedule and the busiest stage's parts. */
static void timeline(const dt_plan_in *in, const dt_plan_layout *l, double total, const dt_partition *part,
                     const stage_cost *sc, dt_plan_pred *p) {
    const dt_plan_cluster *c = in->cluster;
    int P = l->pp, M = l->micro, V = dt_partition_virt(part);
    double Bl = ceil((double)in->batch / l->dp), mb = ceil(Bl / M);
    double fwd[256], bwd[256], tps[256], p2p[256], sf[256] = {0}, sb[256] = {0}, st[256] = {0};
    chunk_times(in, l, sc[0].model, total, part, mb, fwd, bwd, tps, p2p);
    for (int k = 0; k < P * V; k++) sf[k % P] += fwd[k], sb[k % P] += bwd[k], st[k % P] += tps[k];
    double busy;
    double span = dt_plan_pipeline(l->sched, P, V, M, fwd, bwd, p2p, &busy);
    /* Ranks taking turns on the cores: GPipe's one edge over 1F1B here, its
     * boundary transfers overlapping the next forwards, did not show; it
     * measured 1.0-1.6x 1F1B's step at the same micro-batches (docs/
     * BENCHMARKS.md). Taken as no faster than 1F1B. */
    if (l->sched == DT_PLAN_GPIPE && plan_time_sliced(c)) {
        double s1 = dt_plan_pipeline(DT_PLAN_1F1B, P, 1, M, fwd, bwd, p2p, NULL);
        if (s1 > span) span = s1;
    }
    if (P > 1) span = lent_cores(c, l, V, M, fwd, bwd, p2p, sf, sb, span, &busy);
    /* no shorter than its busiest link is busy (the schedule lets two
     * boundaries' messages cross one link at once) */
    span = fmax(span, link_bound(c, l, P * V, p2p));
    int worst = 0;
    for (int s = 1; s < P; s++)
        if (sf[s] + sb[s] > sf[worst] + sb[worst]) worst = s;
    p->tp_s = M * st[worst] * (l->recompute ? 1.5 : 1);
    p->compute_s = busy - p->tp_s;
    p->bubble_s = span - busy;
    double dp = plan_dp_exposed(c, l, &sc[worst], sb[worst]);
    double codec = l->comp.kind != DT_COMP_NONE ? dp : 0;
    p->dp_s = dp - codec;
    p->codec_s = codec;
    p->ps_s = plan_ps_exposed(c, l, &sc[worst], sb[worst]);
    p->zero_s = plan_zero_gather(c, l, &sc[worst], sf[worst], sb[worst]);
    p->optim_s = l->servers ? 0 : sc[worst].params / (l->zero ? l->dp : 1) * c->optim_s_per_param;
    p->step_s = span + p->dp_s + p->codec_s + p->ps_s + p->zero_s + p->optim_s;
}

/* "2,3,1": blocks per chunk (per stage when V = 1), for --pp-partition. */
static void partition_text(const dt_partition *part, char *buf, size_t n) {
    size_t w = 0;
    buf[0] = 0;
    for (int k = 0; k < dt_partition_chunks(part) && w < n; k++)
        w += (size_t)snprintf(buf + w, n - w, "%s%d", k ? "," : "", part->first[k + 1] - part->first[k]);
}

/* Whether cost[0..n) fits P contiguous stages, stage s taking at most T x v[s]
 * (greedy: each stage takes blocks while they fit, which is optimal for a
 * contiguous split); the cut into *part when it does. */
static bool fits_in(const double *cost, int n, int P, const double *v, double T, dt_partition *part) {
    int b = 0;
    for (int s = 0; s < P; s++) {
        part->first[s] = b;
        double sum = 0;
        while (b < n && sum + cost[b] <= T * v[s] && n - b > P - s - 1) sum += cost[b++];
        if (b == part->first[s]) return false; /* every stage holds a block */
    }
    part->first[P] = b;
    part->stages = P;
    return b == n;
}

/* The contiguous split of cost[] over P stages of speeds v[] minimising the
 * slowest stage's cost / speed, by bisection on that time (60 halvings). */
static void partition_speeds(const double *cost, int n, int P, const double *v, dt_partition *part) {
    double lo = 0, hi = 0, vmin = 1e300;
    for (int b = 0; b < n; b++) hi += cost[b];
    for (int s = 0; s < P; s++) vmin = v[s] < vmin ? v[s] : vmin;
    hi /= vmin;
    dt_partition_uniform(n, P, part);
    for (int k = 0; k < 60; k++) {
        double mid = (lo + hi) / 2;
        dt_partition t;
        if (fits_in(cost, n, P, v, mid, &t)) {
            hi = mid;
            *part = t;
        } else {
            lo = mid;
        }
    }
}

double dt_plan_model_flops(const dt_model_cfg *mc) {
    dt_model_cfg whole = *mc;
    whole.tp_size = 1;
    whole.tp_rank = 0;
    whole.seq_parallel = false;
    dt_model *m = NULL;
    if (dt_model_probe(&whole, &m)) return 0;
    double w = 0;
    for (int b = 0; b < m->n_blocks; b++) w += (double)m->blocks[b].flops;
    dt_model_destroy(m);
    return w;
}

/* The FLOPs of the whole model, unsharded: m's own when it is (tp 1), else
 * the model probed again at tp 1 (m's total times tp if that fails). */
static double full_flops(const dt_plan_in *in, const dt_model *m) {
    double t = 0;
    for (int b = 0; b < m->n_blocks; b++) t += (double)m->blocks[b].flops;
    if (m->cfg.tp_size <= 1) return t;
    double w = dt_plan_model_flops(in->model);
    return w > 0 ? w : t * m->cfg.tp_size;
}

dt_status dt_plan_predict(const dt_plan_in *in, const dt_plan_layout *l, dt_plan_pred *out) {
    const dt_plan_cluster *c = in->cluster;
    memset(out, 0, sizeof *out);
    out->l = *l;
    dt_status st = check(in, l, c->hosts * c->per_host);
    if (st) return st;
    dt_model_cfg mc = *in->model;
    mc.tp_size = l->tp;
    mc.tp_rank = 0;
    mc.seq_parallel = l->seqpar;
    if (l->seqpar && l->tp < 2) return dt_errorf(DT_ERR_INVALID, "plan: --sequence-parallel needs tp > 1");
    dt_model *m = NULL;
    if ((st = dt_model_probe(&mc, &m))) return st;
    int V = plan_virt(l), C = l->pp * V;
    if (C > m->n_blocks || C > 256 || m->n_blocks > 4096) {
        st = V > 1 ? dt_errorf(DT_ERR_INVALID, "plan: --pp %d x %d virtual stages: %d chunks, the model has %d blocks",
                               l->pp, V, C, m->n_blocks)
                   : dt_errorf(DT_ERR_INVALID, "plan: --pp %d: the model has %d blocks", l->pp, m->n_blocks);
    } else {
        /* cut as the runtime cuts: C chunks by cost (chunk c on stage c % pp,
         * at that stage's speed), then dealt to the stages */
        double cost[4096], v[256];
        for (int b = 0; b < m->n_blocks; b++) cost[b] = (double)m->blocks[b].flops + 1.0;
        for (int k = 0; k < C; k++) v[k] = stage_speed(c, l, k % l->pp);
        dt_partition part;
        partition_speeds(cost, m->n_blocks, C, v, &part);
        dt_partition_interleave(&part, l->pp);
        stage_cost sc[256];
        stage_costs(m, &part, sc);
        partition_text(&part, out->partition, sizeof out->partition);
        timeline(in, l, full_flops(in, m), &part, sc, out);
        st = plan_layout_memory(in, l, sc, out);
    }
    dt_model_destroy(m);
    return st;
}
