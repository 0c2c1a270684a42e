/* The communication a layout's step exposes (plan_internal.h), on the links
 * of the cluster description:
 *   dp       the busiest stage's gradients reduced over its data-parallel
 *            group bucket by bucket (dtrain's buckets of whole blocks) as the last
 *            micro-batch's backward finishes them, on the communication
 *            thread: all-reduce (ZeRO 0) or reduce-scatter (ZeRO 1, 2), at the
 *            cross level when the group spans hosts;
 *   compress a codec's reduction: an all-reduce is a ring all-gather of the
 *            encodings then N decodes-and-sums, (N-1)(a + e n b) + n enc +
 *            N n dec; a reduce-scatter an all-to-all of chunks encoded for
 *            their owner, (N-1)(a + e n b / N) + n enc + n dec (gradcomp.h),
 *            e the codec's bytes per value;
 *   zero     ZeRO 1/2's parameter all-gather after the update, half a ring
 *            all-reduce of the parameters; ZeRO-3's gathers bucket by bucket
 *            before each micro-batch's forward and backward (the bucket
 *            backward starts with stays from forward), each prefetched on
 *            the gather thread while the bucket before it computes: what a
 *            pass waits for is the first bucket's gather and any gather
 *            longer than the compute it hides behind (all of it with no core
 *            to spare); a gather is half an all-reduce on the wire and three
 *            passes over its bytes at the reduction's memory rate gamma (the
 *            released pages zeroed as they fault in, the rank's chunk copied
 *            in, the result copied out of shared memory: W1's gathers took
 *            7-8 ms a step on their thread against 0.7 ms of wire);
 *   ps       the parameter server under BSP: each of S servers takes W pushes
 *            of P/S floats, sums them, applies the optimizer and answers W
 *            pulls, through its one link.
 * When the ranks already use every core, no reduction hides behind compute
 * (plan_dp_exposed). A message across hosts crosses at the rate measured for
 * its size when the description has the link's curve (dt_plan_cross_beta):
 * TCP and the shapers make a link's rate depend on the message; a pipeline's
 * boundary message across hosts passes its link's burst at the local rate:
 * the bucket is full at a step's first message and refilled by the sender's
 * compute between two (plan_p2p). Cost: O(blocks) per layout. */
#include "plan_internal.h"

#include "dtrain/parallel.h"

#include <math.h>

dt_link_cost plan_link(const dt_plan_cluster *c, bool cross, double msg) {
    return cross ? (dt_link_cost){c->links.cross.alpha, dt_plan_cross_beta(c, msg)} : c->links.local;
}

double plan_p2p(const dt_plan_cluster *c, bool cross, double bytes, int share, double gap, int n) {
    dt_link_cost lk = plan_link(c, cross, bytes);
    double total = bytes * share, burst = 0, b = c->cross_burst;
    if (cross && b > 0 && c->links.cross.beta > 0 && n > 0)
        burst = fmin(total, (b + (n - 1) * fmin(b, gap / c->links.cross.beta)) / n);
    return lk.alpha + (total - burst) * lk.beta + burst * c->links.local.beta;
}

double plan_ar(const dt_plan_cluster *c, int hosts, int per_host, int share, double bytes) {
    if (bytes <= 0) return 0;
    dt_cost_model m = c->links;
    /* a ring step across hosts carries bytes / (hosts x per_host): the flat
     * ring's chunk, or the hierarchical cross ring's share of a host's shard */
    if (hosts > 1) m.cross = plan_link(c, true, bytes / (hosts * per_host));
    m.cross.beta *= share;
    return dt_allreduce_predict(&m, DT_ALGO_AUTO, hosts, per_host, (size_t)bytes);
}

void plan_dp_span(const dt_plan_cluster *c, const dt_plan_layout *l, int *hosts, int *per, int *share) {
    int span = l->tp * l->dp; /* consecutive ranks of one stage */
    *hosts = span <= c->per_host ? 1 : span / c->per_host;
    *per = l->dp / *hosts > 0 ? l->dp / *hosts : 1;
    /* the stage's ranks on one host are tp groups' members: each dp group
     * (one per tp rank) reduces through the same host link at once */
    int on_host = span < c->per_host ? span : c->per_host;
    if (share) *share = on_host / *per > 1 ? on_host / *per : 1;
}

double plan_codec_bytes(const dt_comp_cfg *cc) {
    switch (cc->kind) {
    case DT_COMP_FP16:
    case DT_COMP_BF16: return 2;
    case DT_COMP_INT8: return 1 + 4.0 / (double)(cc->segment ? cc->segment : 256);
    case DT_COMP_SIGN: return 0.125 + 4.0 / (double)(cc->segment ? cc->segment : 256);
    case DT_COMP_TOPK: {
        /* a value and its index's varint delta (mean gap 1/ratio: 7 bits a byte) */
        double gap = 1.0 / (cc->ratio > 0 ? cc->ratio : 1), varint = ceil(log2(gap + 1) / 7);
        return cc->ratio * ((cc->fp16_values ? 2 : 4) + (varint < 1 ? 1 : varint));
    }
    default: return 4;
    }
}

/* One bucket of n floats reduced over N ranks on hosts x per. */
static double bucket(const dt_plan_cluster *c, const dt_plan_layout *l, int hosts, int per, int share, double n) {
    int N = hosts * per;
    bool scatter = l->zero > 0;
    if (l->comp.kind == DT_COMP_NONE) return (scatter ? 0.5 : 1.0) * plan_ar(c, hosts, per, share, 4 * n);
    double e = plan_codec_bytes(&l->comp), enc = c->codec_enc_s_per_float[l->comp.kind] * n;
    double dec = c->codec_dec_s_per_float[l->comp.kind] * n * (scatter ? 1 : N), msg = e * n / (scatter ? N : 1);
    dt_link_cost lk = plan_link(c, hosts > 1, msg);
    return (N - 1) * (lk.alpha + msg * lk.beta * (hosts > 1 ? share : 1)) + enc + dec;
}

int plan_buckets(const stage_cost *w, int *low, int *top, int cap) {
    dt_dp_cfg dc;
    dt_dp_cfg_default(&dc);
    return dt_dp_buckets(w->model, w->first, w->last, w->nr, dc.bucket_bytes / sizeof(float), low, top, cap);
}

/* The buckets are dtrain's (parallel.h): whole blocks from the last backwards,
 * each at least the default bucket_bytes of gradients unless it is the first
 * block's; one is ready when backward has run through its first block (the
 * stage's backward time shared by FLOPs). They queue on the communication
 * thread and what runs past the last backward is exposed. With no core to
 * spare nothing hides: the communication thread waits for a core while
 * backward holds them (measured: W2's all-reduce across two emulated hosts
 * was as exposed as ZeRO-1's reduce-scatter, which runs after backward), and
 * a reduction in shared memory or a codec is a core's work anyway. */
double plan_dp_exposed(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w, double last_bwd) {
    if (l->dp < 2 || l->servers) return 0;
    int hosts, per, share;
    plan_dp_span(c, l, &hosts, &per, &share);
    const dt_model *m = w->model;
    bool spare = !plan_oversubscribed(c);
    double done = 0, comm_end = 0, all = 0;
    int lows[4096], tops[4096], nb = plan_buckets(w, lows, tops, 4096);
    for (int k = 0; k < nb; k++) {
        int low = lows[k], top = tops[k];
        double floats = (double)(m->blocks[top].param_hi - m->blocks[low].param_lo);
        for (int b = low; b <= top; b++) done += (double)m->blocks[b].flops;
        if (floats <= 0) continue;
        double ready = spare && w->flops > 0 ? last_bwd * done / w->flops : 0, one = bucket(c, l, hosts, per, share, floats);
        comm_end = (comm_end > ready ? comm_end : ready) + one;
        all += one;
    }
    if (!spare) return all;
    return comm_end > last_bwd ? comm_end - last_bwd : 0;
}

/* The stage's buckets in forward order (the first blocks' first): floats and
 * FLOPs of each, at most cap; their count. */
static int z3_buckets(const stage_cost *w, double *floats, double *flops, int cap) {
    const dt_model *m = w->model;
    int lows[4096], tops[4096], n = plan_buckets(w, lows, tops, cap < 4096 ? cap : 4096);
    for (int k = 0; k < n; k++) {
        floats[k] = (double)(m->blocks[tops[k]].param_hi - m->blocks[lows[k]].param_lo);
        flops[k] = 0;
        for (int b = lows[k]; b <= tops[k]; b++) flops[k] += (double)m->blocks[b].flops;
    }
    for (int i = 0; i < n / 2; i++) { /* built from the last block: reverse */
        double f = floats[i], g = flops[i];
        floats[i] = floats[n - 1 - i], flops[i] = flops[n - 1 - i];
        floats[n - 1 - i] = f, flops[n - 1 - i] = g;
    }
    return n;
}

/* One pass of pass_s seconds over the buckets from..to (step +1 or -1), each
 * gathered while the one before computes: the seconds it waits. */
static double z3_pass(const double *gather, const double *flops, double total, int from, int to, double pass_s) {
    double clock = 0, comm = 0, busy = 0;
    int dir = to >= from ? 1 : -1;
    for (int k = from;; k += dir) {
        double ready = comm + gather[k], c = total > 0 ? pass_s * flops[k] / total : 0;
        comm = ready; /* the next gather leaves as soon as this one is in */
        clock = (clock > ready ? clock : ready) + c;
        busy += c;
        if (k == to) break;
    }
    return clock - busy;
}

/* ZeRO-3's gathers of one of the stage's chunks (range r) and their exposed
 * wait over a forward and a backward pass of fwd and bwd seconds (the
 * chunk's FLOP share of the stage's); *all gets the gathers' sum. The
 * topmost range's last bucket stays gathered from forward to backward. */
static double z3_chunk(const dt_plan_cluster *c, const stage_cost *w, int r, int hosts, int per, int share, double fwd,
                       double bwd, double *all, double *kept) {
    stage_cost one = *w;
    one.nr = 1;
    one.first[0] = w->first[r];
    one.last[0] = w->last[r];
    double floats[4096], flops[4096], gather[4096], total = 0;
    int n = z3_buckets(&one, floats, flops, 4096);
    for (int k = 0; k < n; k++) {
        gather[k] = 0.5 * plan_ar(c, hosts, per, share, floats[k] * 4) + 3 * floats[k] * 4 * c->links.gamma;
        total += flops[k];
        *all += gather[k];
    }
    if (n == 0) return 0;
    double part = w->flops > 0 ? total / w->flops : 1.0 / w->nr, f = z3_pass(gather, flops, total, 0, n - 1, fwd * part);
    *kept = r == w->nr - 1 ? gather[n - 1] : 0;
    if (r == w->nr - 1) gather[n - 1] = 0; /* backward starts with the bucket forward left gathered */
    return f + z3_pass(gather, flops, total, n - 1, 0, bwd * part);
}

/* A gather of a chunk's first bucket waits in full (the prefetch stays within
 * a chunk); each next one leaves while the bucket before computes. */
/* Pages handed back and written again each step: ZeRO-2's gradient arena
 * once; ZeRO-3's too, and its gathered parameters twice a micro-batch (the
 * bucket kept from forward to backward is a small part, not taken off). */
static double refaults(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w) {
    if (l->zero < 2) return 0;
    return c->staging_s_per_byte * 4 * w->params * (l->zero == 3 ? 1 + 2 * l->micro : 1);
}

double plan_zero_gather(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w, double fwd, double bwd) {
    if (!l->zero || l->dp < 2) return 0;
    int hosts, per, share;
    plan_dp_span(c, l, &hosts, &per, &share);
    double pages = refaults(c, l, w);
    if (l->zero < 3) return 0.5 * plan_ar(c, hosts, per, share, w->params * 4) + pages;
    double all = 0, kept = 0, wait = 0;
    for (int r = 0; r < w->nr; r++) wait += z3_chunk(c, w, r, hosts, per, share, fwd, bwd, &all, &kept);
    if (plan_oversubscribed(c)) return l->micro * (2 * all - kept) + pages;
    return l->micro * wait + pages;
}

double plan_ps_exposed(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w, double last_bwd) {
    int S = l->servers, W = l->dp;
    if (S < 1) return 0;
    bool cross = W + S > c->per_host;
    double range = 4 * w->params / S;                   /* bytes a server holds */
    dt_link_cost lk = plan_link(c, cross, range);
    double push = W * (lk.alpha + range * lk.beta);     /* into one server's link */
    double sum = W * range * c->links.gamma;
    double apply = w->params / S * c->optim_s_per_param;
    /* pushes leave as backward finishes each server's range: all but the last overlap */
    double exposed_push = push - last_bwd * (S - 1) / S > push / S ? push - last_bwd * (S - 1) / S : push / S;
    return exposed_push + sum + apply + push; /* the pulls carry as many bytes back */
}
