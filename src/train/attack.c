/* --inject as the library sees it: which workers are Byzantine and how they
 * attack (through the robust reducer's hooks), checks that every injection
 * acts, and the program's step hook (crashes, hangs and slowness are the
 * program's: tools/dtrain injects them through cfg->step_hook). */
#include "run.h"

#include <math.h>
#include <string.h>

bool tr_any_byzantine(const dt_train_cfg *c) {
    for (int i = 0; i < c->n_inject; i++)
        if (c->inject[i].kind == DT_INJECT_BYZANTINE) return true;
    return false;
}

dt_optim_cfg tr_applied_optim(const dt_train_cfg *c) {
    dt_optim_cfg o = c->optim;
    if (dt_train_worker_momentum(c)) {
        o.momentum = 0.0f;
        o.nesterov = false;
        o.weight_decay = 0.0f;
    }
    return o;
}

void tr_step_hook(const dt_train_cfg *c, int rank, int64_t step, dt_step_point at, double prev) {
    if (c->step_hook) c->step_hook(c->step_hook_ctx, rank, step, at, prev);
}

/* This worker's own attacks, in the order given (two on one rank compose). */
void tr_attack_corrupt(void *ctx, float *g, size_t n, int64_t step) {
    const tr_attack *a = ctx;
    const dt_train_cfg *c = a->c;
    for (int i = 0; i < c->n_inject; i++) {
        const dt_inject *in = &c->inject[i];
        if (in->kind == DT_INJECT_BYZANTINE && in->rank == a->rank) dt_byz_corrupt(in->mode, in->factor, c->seed, g, n, step);
    }
}

void tr_attack_tamper(void *ctx, float *vecs, int n, size_t len) {
    const tr_attack *a = ctx;
    dt_agg_alie(vecs, n, len, a->bad, a->z);
}

static void alie_log(float z) {
    if (z > 0)
        dt_log(DT_LOG_WARN, "--inject byzantine:mode=alie: the attackers send mean - %.3g x std of the honest gradients", (double)z);
    else /* a restart on fewer workers (the first attempt refuses this) */
        dt_log(DT_LOG_WARN, "--inject byzantine:mode=alie: on this many workers the paper's shift is 0: the attackers send the honest mean");
}

dt_status tr_attacks(const dt_train_cfg *c, int rank, int n, tr_attack *a, dt_robust_cfg *rc, bool log) {
    memset(a, 0, sizeof *a);
    a->c = c;
    a->rank = rank;
    int who[8], k = 0;
    float z = NAN;
    bool me = false;
    for (int i = 0; i < c->n_inject; i++) {
        const dt_inject *in = &c->inject[i];
        if (in->kind != DT_INJECT_BYZANTINE) continue;
        me |= in->rank == rank && in->mode != DT_BYZ_ALIE;
        if (in->mode != DT_BYZ_ALIE || in->rank >= n) continue;
        who[k++] = in->rank;
        if (!isnan(in->factor)) z = in->factor;
    }
    dt_status st = dt_alie_mask(who, k, z, n, &a->bad, &a->z);
    if (st) return st;
    if (a->bad && log) alie_log(a->z);
    if (!rc) return DT_OK;
    if (me) {
        rc->corrupt = tr_attack_corrupt;
        rc->corrupt_ctx = a;
    }
    if (a->bad) {
        rc->tamper = tr_attack_tamper;
        rc->tamper_ctx = a;
    }
    return DT_OK;
}

/* Every --inject names a rank that exists and acts on it: a worker under the
 * parameter server (servers run no steps to crash, slow or corrupt). Under
 * ALIE the shift must move something. Checked in the first attempt only: a
 * supervisor's restart on fewer ranks (elastic) keeps the flags, and crash,
 * hang and slow fire in the first attempt only anyway. */
dt_status tr_inject_check(const dt_train_cfg *c, int world) {
    if (c->n_inject > 0 && c->strategy == DT_STRATEGY_HOGWILD)
        return dt_errorf(DT_ERR_INVALID, "--inject does not apply to --strategy hogwild (its threads share one process)");
    int workers = c->strategy == DT_STRATEGY_PS ? world - c->ps.servers : world;
    if (workers < 1 || c->attempt > 0) return DT_OK; /* no worker: refused with its own message */
    int f = 0;
    float z = NAN;
    for (int i = 0; i < c->n_inject; i++) {
        const dt_inject *in = &c->inject[i];
        if (in->rank >= world)
            return dt_errorf(DT_ERR_INVALID, "--inject: rank %d does not exist in a run of %d rank%s (0..%d)", in->rank, world,
                             world == 1 ? "" : "s", world - 1);
        if (in->rank >= workers)
            return dt_errorf(DT_ERR_INVALID, "--inject: rank %d is a parameter server (ranks %d..%d); injections target the workers, ranks 0..%d",
                             in->rank, workers, world - 1, workers - 1);
        if (in->kind != DT_INJECT_BYZANTINE || in->mode != DT_BYZ_ALIE) continue;
        f++;
        if (!isnan(in->factor) && !isnan(z) && in->factor != z)
            return dt_errorf(DT_ERR_INVALID, "--inject byzantine:mode=alie: the attackers collude on one shift; give every alie injection the same Z");
        if (!isnan(in->factor)) z = in->factor;
    }
    if (f == 0) return DT_OK;
    if (2 * f >= workers)
        return dt_errorf(DT_ERR_INVALID, "--inject byzantine:mode=alie: %d of %d workers attack; it hides among an honest majority, so at most %d may",
                         f, workers, (workers - 1) / 2);
    if (isnan(z) && !(dt_agg_alie_z(workers, f) > 0))
        return dt_errorf(DT_ERR_INVALID, "--inject byzantine:mode=alie: with %d workers and %d attacker%s the paper's shift z is 0 (they would send the honest mean); give one, e.g. mode=alie:1",
                         workers, f, f == 1 ? "" : "s");
    return DT_OK;
}
