/* Every layout of a cluster's world predicted and ranked (plan.h): dp x tp x
 * pp with tp inside a host; ZeRO 0-3; for pipelines 1-64 micro-batches (powers
 * of 2 the batch allows), GPipe, 1F1B and interleaved 1F1B at V = 2 and 4
 * (where the runtime takes it: micro-batches a multiple of pp,
 * pp x V blocks at least), recomputation or not; with tp > 1 sequence
 * parallelism or not (where the model takes it); for plain data parallelism the codecs
 * (fp16, int8, topk:0.01, sign) and the parameter server with 1 or 2 servers
 * (BSP); on hosts of unequal speed, plain data parallelism split by speed.
 * Fitting layouts first, then by predicted step. Cost: one dt_plan_predict per
 * layout, a few hundred for a small world. */
#include "dtrain/plan.h"

#include <stdlib.h>
#include <string.h>

typedef struct list {
    dt_plan_pred *v;
    int n, cap;
} list;

/* Predicts l and keeps it when it is valid; DT_ERR_NOMEM is the only failure. */
static dt_status add(list *x, const dt_plan_in *in, const dt_plan_layout *l) {
    dt_plan_pred p;
    if (dt_plan_predict(in, l, &p)) return DT_OK; /* not valid here */
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        dt_plan_pred *nv = dt_realloc_array(x->v, (size_t)cap, sizeof *nv);
        if (!nv) return dt_errorf(DT_ERR_NOMEM, "out of memory");
        x->v = nv;
        x->cap = cap;
    }
    x->v[x->n++] = p;
    return DT_OK;
}

static bool unequal_speeds(const dt_plan_cluster *c) {
    for (int h = 1; h < c->hosts; h++)
        if (c->speed[h] != c->speed[0]) return true;
    return false;
}

/* The plain data-parallel variants of a world of W ranks. */
static dt_status plain_dp(list *x, const dt_plan_in *in, int W) {
    static const char *codecs[] = {"fp16", "int8", "topk:0.01", "sign"};
    dt_status st = DT_OK;
    for (int k = 0; k < 4 && !st && W > 1; k++) {
        dt_plan_layout l = {.dp = W, .tp = 1, .pp = 1, .micro = 1};
        if ((st = dt_comp_parse(codecs[k], &l.comp))) return st;
        for (l.zero = 0; l.zero <= 3 && !st; l.zero++) st = add(x, in, &l);
    }
    for (int S = 1; S <= 2 && !st && W - S >= 1; S++) {
        dt_plan_layout l = {.dp = W - S, .tp = 1, .pp = 1, .micro = 1, .servers = S};
        st = add(x, in, &l);
    }
    if (!st && unequal_speeds(in->cluster)) {
        dt_plan_layout l = {.dp = W, .tp = 1, .pp = 1, .micro = 1, .balance = true};
        st = add(x, in, &l);
    }
    return st;
}

/* A pipeline's schedules: 1F1B, GPipe, interleaved at 2 and 4 chunks a stage
 * (dt_plan_predict refuses those the runtime would). */
static const struct {
    dt_plan_sched sched;
    int virt;
} schedules[] = {{DT_PLAN_1F1B, 1}, {DT_PLAN_GPIPE, 1}, {DT_PLAN_INTERLEAVED, 2}, {DT_PLAN_INTERLEAVED, 4}};

/* Whether the model compiles with --sequence-parallel at tensor degree tp. */
static bool seqpar_ok(const dt_plan_in *in, int tp) {
    dt_model_cfg mc = *in->model;
    mc.tp_size = tp;
    mc.tp_rank = 0;
    mc.seq_parallel = true;
    dt_model *m = NULL;
    bool ok = tp > 1 && dt_model_probe(&mc, &m) == DT_OK;
    dt_model_destroy(m);
    return ok;
}

static dt_status degrees(list *x, const dt_plan_in *in, int W, int tp, int pp) {
    int dp = W / (tp * pp), n_sched = pp > 1 ? (int)(sizeof schedules / sizeof *schedules) : 1;
    int n_sp = seqpar_ok(in, tp) ? 2 : 1;
    dt_status st = DT_OK;
    for (int zero = 0; zero <= (dp > 1 ? 3 : 0) && !st; zero++)
        for (int M = 1; M <= (pp > 1 ? 64 : 1) && M * dp <= in->batch && !st; M *= 2)
            for (int sch = 0; sch < n_sched && !st; sch++) {
                bool il = schedules[sch].sched == DT_PLAN_INTERLEAVED;
                if (il && M % pp) continue; /* refused: spare the prediction */
                for (int rc = 0; rc <= (pp > 1) && !st; rc++)
                    for (int sp = 0; sp < n_sp && !st; sp++) {
                        dt_plan_layout l = {.dp = dp, .tp = tp, .pp = pp, .zero = zero, .micro = M, .recompute = rc,
                                            .sched = schedules[sch].sched, .virt = schedules[sch].virt, .seqpar = sp};
                        st = add(x, in, &l);
                    }
            }
    return st;
}

/* Ties are broken toward 1F1B (its activations are freed soonest), then the
 * interleaved schedule (fewer activations alive than GPipe), then GPipe. */
static int sched_rank(dt_plan_sched s) { return s == DT_PLAN_1F1B ? 0 : s == DT_PLAN_INTERLEAVED ? 1 : 2; }

static int by_prediction(const void *a, const void *b) {
    const dt_plan_pred *x = a, *y = b;
    if (x->fits != y->fits) return x->fits ? -1 : 1;
    if (x->step_s != y->step_s) return x->step_s < y->step_s ? -1 : 1;
    if (x->mem.total != y->mem.total) return x->mem.total < y->mem.total ? -1 : 1; /* a tie: the smaller */
    /* still tied (qsort is not stable): by schedule (sched_rank), then fewer
     * micro-batches and chunks (fewer messages, whose latency the links' fit
     * knows least), then the lower degrees and options, so the order never
     * depends on the enumeration's */
    const dt_plan_layout *la = &x->l, *lc = &y->l;
    if (la->sched != lc->sched) return sched_rank(la->sched) < sched_rank(lc->sched) ? -1 : 1;
    const int ka[] = {la->micro, la->virt, la->pp, la->tp, la->zero, la->recompute, la->seqpar, la->servers,
                      la->balance, (int)la->comp.kind};
    const int kc[] = {lc->micro, lc->virt, lc->pp, lc->tp, lc->zero, lc->recompute, lc->seqpar, lc->servers,
                      lc->balance, (int)lc->comp.kind};
    for (size_t k = 0; k < sizeof ka / sizeof ka[0]; k++)
        if (ka[k] != kc[k]) return ka[k] < kc[k] ? -1 : 1;
    return 0;
}

dt_status dt_plan_layouts(const dt_plan_in *in, dt_plan_pred **out, int *n) {
    const dt_plan_cluster *c = in->cluster;
    int W = c->hosts * c->per_host;
    list x = {0};
    dt_status st = DT_OK;
    for (int tp = 1; tp <= c->per_host && !st; tp++)
        for (int pp = 1; pp <= W / tp && !st; pp++)
            if (W % (tp * pp) == 0) st = degrees(&x, in, W, tp, pp);
    if (!st) st = plain_dp(&x, in, W);
    if (!st && x.n == 0)
        st = dt_errorf(DT_ERR_INVALID, "plan: no layout of %d ranks can run this model with batch %d", W, in->batch);
    if (st) {
        dt_free(x.v);
        return st;
    }
    qsort(x.v, (size_t)x.n, sizeof *x.v, by_prediction);
    *out = x.v;
    *n = x.n;
    return DT_OK;
}
