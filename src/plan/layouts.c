/* A layout's step time and memory, predicted (plan.h), and every layout of a
 * world ranked. The model is compiled (not allocated) at the layout's tp, so
 * each block's FLOPs, tensor-parallel bytes, parameters and activations are
 * this rank's. Per step, with Bl = batch/dp samples in M micro-batches:
 *   compute   stage s: its blocks' FLOPs x Bl / (rank FLOP/s x host speed),
 *             a third forward, two thirds backward (+ a forward to recompute);
 *   tp        each block's all-reduce bytes through the local link (ring cost);
 *   schedule  dt_plan_pipeline over the stages, boundary transfers between;
 *   dp        the stage's gradients all-reduced over the dp group (hosts it
 *             spans at the cross level), overlapped with the last micro-batch's
 *             backward bucket by bucket (a block a bucket); ZeRO-2 reduce-scatters
 *             (half the bytes), ZeRO-1/2 all-gather parameters after the update;
 *   optimizer the rank's share of parameters x the cluster's time per parameter.
 * Ranks are numbered as src/train/setup.c does: tp innermost, then replicas,
 * then stages. Cost: one model compile per tp degree and O(pp (M pp)^2) per
 * layout for the schedule. */
#include "plan_internal.h"

#include "dtrain/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double ar(const dt_plan_cluster *c, int hosts, int per_host, double bytes) {
    return bytes > 0 ? dt_allreduce_predict(&c->links, DT_ALGO_AUTO, hosts, per_host, (size_t)bytes) : 0;
}

/* Hosts the dp group of ranks spaced tp apart spans, and its ranks per host. */
static void dp_span(const dt_plan_cluster *c, const dt_plan_layout *l, int *hosts, int *per) {
    int span = l->tp * l->dp; /* consecutive ranks of one stage */
    *hosts = span <= c->per_host ? 1 : span / c->per_host;
    *per = l->dp / *hosts > 0 ? l->dp / *hosts : 1;
}

static void stage_costs(const dt_model *m, const dt_partition *part, int pp, stage_cost *sc) {
    for (int s = 0; s < pp; s++) {
        memset(&sc[s], 0, sizeof sc[s]);
        for (int b = part->first[s]; b < part->first[s + 1]; b++) {
            const dt_block *k = &m->blocks[b];
            sc[s].flops += (double)k->flops;
            sc[s].tp_bytes += (double)k->tp_bytes;
            sc[s].params += (double)(k->param_hi - k->param_lo);
            sc[s].acts += (double)k->ops->saved_floats(k, 1) + (double)k->in_dim;
            sc[s].bound += (double)k->in_dim;
            sc[s].blocks++;
        }
    }
}

static dt_status check(const dt_plan_in *in, const dt_plan_layout *l, int world) {
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->micro < 1 || l->dp * l->tp * l->pp != world)
        return dt_errorf(DT_ERR_INVALID, "plan: %d x %d x %d (dp x tp x pp) is not the world of %d ranks", l->dp, l->tp,
                         l->pp, world);
    if (l->tp > in->cluster->per_host)
        return dt_errorf(DT_ERR_INVALID, "plan: --tp %d spans hosts (%d ranks per host)", l->tp, in->cluster->per_host);
    if (in->batch < l->dp * l->micro)
        return dt_errorf(DT_ERR_INVALID, "plan: batch %d is smaller than dp %d x micro-batches %d", in->batch, l->dp, l->micro);
    if (l->zero < 0 || l->zero > 2) return dt_errorf(DT_ERR_INVALID, "plan: ZeRO %d is not built (0, 1, 2)", l->zero);
    return DT_OK;
}

/* The schedule and the busiest stage's parts. */
static void timeline(const dt_plan_in *in, const dt_plan_layout *l, const stage_cost *sc, dt_plan_pred *p) {
    const dt_plan_cluster *c = in->cluster;
    int P = l->pp, M = l->micro;
    double Bl = ceil((double)in->batch / l->dp), mb = ceil(Bl / M);
    double fwd[256], bwd[256], tps[256];
    for (int s = 0; s < P; s++) {
        int host = (s * l->tp * l->dp) / c->per_host;
        double share = c->cores < c->per_host ? (double)c->cores / c->per_host : 1.0; /* oversubscribed */
        double rate = c->flops * share * c->speed[host < c->hosts ? host : c->hosts - 1];
        double f = sc[s].flops * mb / rate;
        tps[s] = l->tp > 1 ? ar(c, 1, l->tp, sc[s].tp_bytes * mb) : 0;
        fwd[s] = f / 3 + tps[s] / 2;
        bwd[s] = 2 * f / 3 + tps[s] / 2 + (l->recompute ? f / 3 + tps[s] / 2 : 0);
    }
    bool cross = P > 1 && l->tp * l->dp >= c->per_host;
    const dt_link_cost *lk = cross ? &c->links.cross : &c->links.local;
    double p2p = 0;
    for (int s = 1; s < P; s++) {
        double t = lk->alpha + sc[s].bound * 4 * mb * lk->beta;
        if (t > p2p) p2p = t;
    }
    double busy;
    double span = dt_plan_pipeline(l->sched, P, M, fwd, bwd, p2p, &busy);
    int worst = 0;
    for (int s = 1; s < P; s++)
        if (M * (fwd[s] + bwd[s]) > M * (fwd[worst] + bwd[worst])) worst = s;
    p->tp_s = M * tps[worst] * (l->recompute ? 1.5 : 1);
    p->compute_s = busy - p->tp_s;
    p->bubble_s = span - busy;
    /* dp: the busiest stage's gradients, bucket (block) by bucket after the last micro-batch */
    int hosts, per;
    dp_span(c, l, &hosts, &per);
    double comm_end = 0, t = 0, last_bwd = bwd[worst], bytes = sc[worst].params * 4;
    double share = l->zero == 2 ? 0.5 : 1.0;
    if (l->dp > 1) {
        for (int b = 0; b < sc[worst].blocks; b++) {
            t += last_bwd / sc[worst].blocks; /* this bucket's gradients are final */
            double nb = bytes / sc[worst].blocks;
            double st = comm_end > t ? comm_end : t;
            comm_end = st + share * ar(c, hosts, per, nb);
        }
    }
    p->dp_s = comm_end > last_bwd ? comm_end - last_bwd : 0;
    p->zero_s = l->zero && l->dp > 1 ? 0.5 * ar(c, hosts, per, bytes) : 0;
    p->optim_s = sc[worst].params / (l->zero ? l->dp : 1) * c->optim_s_per_param;
    p->step_s = span + p->dp_s + p->zero_s + p->optim_s;
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
    dt_model *m = NULL;
    if ((st = dt_model_probe(&mc, &m))) return st;
    if (l->pp > m->n_blocks || l->pp > 256) {
        st = dt_errorf(DT_ERR_INVALID, "plan: --pp %d: the model has %d blocks", l->pp, m->n_blocks);
    } else {
        double cost[4096];
        dt_partition part;
        int nb = m->n_blocks < 4096 ? m->n_blocks : 4096;
        for (int b = 0; b < nb; b++) cost[b] = (double)m->blocks[b].flops + 1.0;
        dt_partition_best(cost, nb, l->pp, &part);
        stage_cost sc[256];
        stage_costs(m, &part, l->pp, sc);
        timeline(in, l, sc, out);
        st = plan_layout_memory(in, l, sc, out);
    }
    dt_model_destroy(m);
    return st;
}

static int by_prediction(const void *a, const void *b) {
    const dt_plan_pred *x = a, *y = b;
    if (x->fits != y->fits) return x->fits ? -1 : 1;
    return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}

dt_status dt_plan_layouts(const dt_plan_in *in, dt_plan_pred **out, int *n) {
    const dt_plan_cluster *c = in->cluster;
    int W = c->hosts * c->per_host, cap = 64, k = 0;
    dt_plan_pred *v = dt_calloc((size_t)cap, sizeof *v);
    if (!v) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int tp = 1; tp <= c->per_host; tp++) {
        if (W % tp) continue;
        for (int pp = 1; pp <= W / tp; pp++) {
            if ((W / tp) % pp) continue;
            int dp = W / (tp * pp);
            for (int zero = 0; zero <= (dp > 1 ? 2 : 0); zero++)
                for (int M = 1; M <= (pp > 1 ? 16 : 1); M *= 2)
                    for (int sch = 0; sch <= (pp > 1); sch++)
                        for (int rc = 0; rc <= (pp > 1); rc++) {
                            dt_plan_layout l = {dp, tp, pp, zero, M, sch ? DT_PLAN_GPIPE : DT_PLAN_1F1B, rc};
                            dt_plan_pred p;
                            if (dt_plan_predict(in, &l, &p)) continue; /* not valid here */
                            if (k == cap) {
                                dt_plan_pred *nv = dt_realloc_array(v, (size_t)cap * 2, sizeof *v);
                                if (!nv) {
                                    dt_free(v);
                                    return dt_errorf(DT_ERR_NOMEM, "out of memory");
                                }
                                v = nv;
                                cap *= 2;
                            }
                            v[k++] = p;
                        }
        }
    }
    if (k == 0) {
        dt_free(v);
        return dt_errorf(DT_ERR_INVALID, "plan: no layout of %d ranks can run this model with batch %d", W, in->batch);
    }
    qsort(v, (size_t)k, sizeof *v, by_prediction);
    *out = v;
    *n = k;
    return DT_OK;
}
