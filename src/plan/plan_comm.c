/* The communication a layout's step exposes (plan_internal.h), on the links
 * of the cluster description:
 *   dp       the busiest stage's gradients reduced over its data-parallel
 *            group bucket by bucket (a block a bucket) as the last
 *            micro-batch's backward finishes them, on the communication
 *            thread: all-reduce (ZeRO 0) or reduce-scatter (ZeRO 1, 2), at the
 *            cross level when the group spans hosts;
 *   compress a codec's reduction: an all-reduce is a ring all-gather of the
 *            encodings then N decodes-and-sums, (N-1)(a + e n b) + n enc +
 *            N n dec; a reduce-scatter an all-to-all of chunks encoded for
 *            their owner, (N-1)(a + e n b / N) + n enc + n dec (gradcomp.h),
 *            e the codec's bytes per value;
 *   zero     ZeRO 1/2's parameter all-gather after the update, half a ring
 *            all-reduce of the parameters;
 *   ps       the parameter server under BSP: each of S servers takes W pushes
 *            of P/S floats, sums them, applies the optimizer and answers W
 *            pulls, through its one link.
 * When the host's ranks already use every core, a reduction inside the host
 * (shared memory: copies and sums on a core) cannot hide behind compute and
 * all of it is exposed. Cost: O(blocks) per layout. */
#include "plan_internal.h"

#include <math.h>

double plan_ar(const dt_plan_cluster *c, int hosts, int per_host, double bytes) {
    return bytes > 0 ? dt_allreduce_predict(&c->links, DT_ALGO_AUTO, hosts, per_host, (size_t)bytes) : 0;
}

void plan_dp_span(const dt_plan_cluster *c, const dt_plan_layout *l, int *hosts, int *per) {
    int span = l->tp * l->dp; /* consecutive ranks of one stage */
    *hosts = span <= c->per_host ? 1 : span / c->per_host;
    *per = l->dp / *hosts > 0 ? l->dp / *hosts : 1;
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
static double bucket(const dt_plan_cluster *c, const dt_plan_layout *l, int hosts, int per, double n) {
    int N = hosts * per;
    bool scatter = l->zero > 0;
    if (l->comp.kind == DT_COMP_NONE) return (scatter ? 0.5 : 1.0) * plan_ar(c, hosts, per, 4 * n);
    const dt_link_cost *lk = hosts > 1 ? &c->links.cross : &c->links.local;
    double e = plan_codec_bytes(&l->comp), enc = c->codec_enc_s_per_float[l->comp.kind] * n;
    double dec = c->codec_dec_s_per_float[l->comp.kind] * n * (scatter ? 1 : N);
    return (N - 1) * (lk->alpha + e * n * lk->beta / (scatter ? N : 1)) + enc + dec;
}

double plan_dp_exposed(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w, double last_bwd) {
    if (l->dp < 2 || l->servers) return 0;
    int hosts, per;
    plan_dp_span(c, l, &hosts, &per);
    double n = w->params, comm_end = 0, t = 0;
    if (hosts == 1 && c->per_host >= c->cores) return bucket(c, l, 1, per, n);
    for (int b = 0; b < w->blocks; b++) {
        t += last_bwd / w->blocks; /* this bucket's gradients are final */
        double st = comm_end > t ? comm_end : t;
        comm_end = st + bucket(c, l, hosts, per, n / w->blocks);
    }
    return comm_end > last_bwd ? comm_end - last_bwd : 0;
}

double plan_zero_gather(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w) {
    if (!l->zero || l->dp < 2) return 0;
    int hosts, per;
    plan_dp_span(c, l, &hosts, &per);
    return 0.5 * plan_ar(c, hosts, per, w->params * 4);
}

double plan_ps_exposed(const dt_plan_cluster *c, const dt_plan_layout *l, const stage_cost *w, double last_bwd) {
    int S = l->servers, W = l->dp;
    if (S < 1) return 0;
    bool cross = W + S > c->per_host;
    const dt_link_cost *lk = cross ? &c->links.cross : &c->links.local;
    double range = 4 * w->params / S;                   /* bytes a server holds */
    double push = W * (lk->alpha + range * lk->beta);   /* into one server's link */
    double sum = W * range * c->links.gamma;
    double apply = w->params / S * c->optim_s_per_param;
    /* pushes leave as backward finishes each server's range: all but the last overlap */
    double exposed_push = push - last_bwd * (S - 1) / S > push / S ? push - last_bwd * (S - 1) / S : push / S;
    return exposed_push + sum + apply + push; /* the pulls carry as many bytes back */
}
