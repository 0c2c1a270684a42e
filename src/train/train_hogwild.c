/* The Hogwild! driver of dt_train_run: --strategy hogwild. */
#include "internal.h"

#include "dtrain/ckpt.h"
#include "dtrain/trace.h"
#include "dtrain/weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "dtrain/hogwild.h"

/* ---- Hogwild! ------------------------------------------------------------------
 * Threads of this process share m's weights (src/parallel/hogwild.c); each draws
 * its shard (thread t of T) of every global batch from its own sampler. */
typedef struct hw_ctx {
    const run_data *d;
    const dt_model *m;
    int B;
    dt_sampler *samplers;
    batch_buf *bufs;
    uint64_t seed;
} hw_ctx;

static void hw_batch(void *vctx, int t, int64_t step, dt_batch *out) {
    hw_ctx *h = vctx;
    batch_buf *bb = &h->bufs[t];
    int ln, gn;
    dt_sampler_next(&h->samplers[t], h->B, bb->idx, &ln, &gn);
    memset(out, 0, sizeof *out);
    out->B = ln;
    out->targets = bb->targets;
    if (ln <= 0) return;
    out->loss_scale = 1.0f / ((float)ln * (float)h->m->loss_terms);
    if (h->d->lm) {
        dt_rng r;
        dt_rng_init(&r, h->seed, 0x5000 + (uint64_t)h->samplers[t].epoch);
        int shift = (int)dt_rng_below(&r, (uint64_t)h->d->T);
        dt_corpus_gather(&h->d->corpus, bb->idx, ln, h->d->T, shift, bb->tokens, bb->targets);
        out->tokens = bb->tokens;
    } else {
        dt_imageset_gather(&h->d->train, bb->idx, ln, bb->x, bb->targets);
        out->x = bb->x;
    }
}

dt_status tr_train_hogwild(const dt_train_cfg *c, const run_data *d, dt_model *m, dt_train_result *res) {
    int T = c->hogwild_threads, B = c->batch;
    int64_t total = c->steps > 0 ? c->steps : c->epochs * ((d->n_train + B - 1) / B);
    int maxB = (B + T - 1) / T;
    dt_sampler *sp = dt_calloc((size_t)T, sizeof *sp);
    batch_buf *bufs = dt_calloc((size_t)T + 1, sizeof *bufs);
    double *loss = dt_calloc((size_t)total, sizeof(double));
    dt_acts *eacts = NULL;
    dt_comm *self = NULL;
    FILE *metrics = NULL;
    dt_status st = DT_OK;
    if (!sp || !bufs || !loss) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int t = 0; t < T && !st; t++) {
        st = dt_sampler_init(&sp[t], d->n_train, c->seed, true, false, t, T);
        if (!st) st = tr_batch_buf_init(&bufs[t], m, maxB, d->T);
    }
    if (st) goto out;
    hw_ctx h = {d, m, B, sp, bufs, c->seed};
    dt_hogwild_cfg hc = {T, total, maxB, c->optim, {c->lr, c->min_lr, c->warmup, total, c->cosine}};
    if (!c->quiet)
        dt_log(DT_LOG_INFO, "hogwild: %d threads share one %s (%zu parameters) with no locks, %lld steps each",
               T, dt_model_kind_name(m->cfg.kind), m->n, (long long)total);
    double t0 = dt_now();
    if ((st = dt_hogwild_train(m, &hc, hw_batch, &h, loss))) goto out;
    res->seconds = dt_now() - t0;
    res->steps = total;
    res->items_per_s = (double)total * B * (d->lm ? d->T : 1) / (res->seconds > 1e-9 ? res->seconds : 1e-9);
    res->final_loss = (float)loss[total - 1];
    int eB = d->lm ? 16 : 256;
    if ((st = dt_acts_create(&eacts, m, 0, m->n_blocks - 1, eB))) goto out;
    if ((st = tr_batch_buf_init(&bufs[T], m, eB, d->T))) goto out;
    if ((st = dt_comm_self(&self))) goto out;
    if ((st = tr_evaluate(m, eacts, d, &bufs[T], eB, c->eval_max, self, NULL, 0, 1, true, &res->test_acc, &res->eval_loss)))
        goto out;
    if (c->out_dir) {
        char path[4096];
        if ((st = tr_make_dir(c->out_dir))) goto out;
        snprintf(path, sizeof path, "%s/metrics.jsonl", c->out_dir);
        metrics = fopen(path, "w");
        if (!metrics) {
            st = dt_errorf(DT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
            goto out;
        }
        for (int64_t s2 = 0; s2 < total; s2++)
            if ((s2 + 1) % c->log_every == 0 || s2 + 1 == total)
                fprintf(metrics, "{\"step\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"items_per_s\":%.1f,\"threads\":%d}\n",
                        (long long)s2 + 1, loss[s2], (double)dt_lr_at(&hc.sched, s2), res->items_per_s, T);
        if (d->lm) fprintf(metrics, "{\"step\":%lld,\"val_loss\":%.6f}\n", (long long)total, (double)res->eval_loss);
        else fprintf(metrics, "{\"step\":%lld,\"test_acc\":%.6f,\"test_loss\":%.6f}\n", (long long)total,
                     (double)res->test_acc, (double)res->eval_loss);
        snprintf(path, sizeof path, "%s/model.safetensors", c->out_dir);
        if ((st = dt_weights_save(m, path, 0, NULL))) goto out;
    }
out:
    if (metrics) fclose(metrics);
    for (int t = 0; sp && t < T; t++) dt_sampler_free(&sp[t]);
    for (int t = 0; bufs && t <= T; t++) tr_batch_buf_free(&bufs[t]);
    dt_free(sp);
    dt_free(bufs);
    dt_free(loss);
    dt_acts_destroy(eacts);
    dt_comm_destroy(self);
    return st;
}
