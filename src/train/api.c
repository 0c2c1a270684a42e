/* `dtrain train FLAGS` in the caller's process, on one rank: the entry point
 * of embedders (the Python package, python/dtrain, calls it through ctypes).
 * It does what the command line does for a one-process run and nothing the
 * command line adds around it (launching ranks, supervising, signals, the
 * progress line): the same flags give the same run, bit for bit. Cost: the run. */
#include "dtrain/config.h"
#include "dtrain/report.h"
#include "dtrain/train.h"

#include <cblas.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct api_hooks {
    dt_train_step_fn fn;
    void *ctx;
    const dt_train_cfg *cfg;
    const char *weights_dir;
} api_hooks;

static dt_status api_step(void *ctx, const dt_step_info *s) {
    const api_hooks *h = ctx;
    char *line = dt_report_step_json(s);
    if (!line) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    int rc = h->fn(h->ctx, line);
    free(line);
    return rc ? dt_errorf(DT_ERR_INVALID, "the step callback stopped the run at step %lld (it returned %d)",
                          (long long)s->step, rc)
              : DT_OK;
}

/* OUT/config.json as the command line writes it: every saved flag's value. */
static dt_status api_config(void *ctx, const dt_run_info *info) {
    const api_hooks *h = ctx;
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/config.json", info->out_dir);
    return dt_config_write_json(h->cfg, path);
}

static void summary_json(const dt_train_result *r, char *buf, size_t n) {
    json_t *o = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:I}", "steps", (json_int_t)r->steps, "final_loss",
                          (double)r->final_loss, "test_acc", (double)r->test_acc, "eval_loss", (double)r->eval_loss,
                          "items_per_s", r->items_per_s, "seconds", r->seconds, "resumed_from",
                          (json_int_t)r->resumed_from, "stopped_at", (json_int_t)r->stopped_at);
    if (o && r->loss_scale > 0) {
        json_object_set_new(o, "loss_scale", json_real(r->loss_scale));
        json_object_set_new(o, "overflow_steps", json_integer(r->overflow_steps));
    }
    char *t = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    snprintf(buf, n, "%s", t ? t : "{}");
    free(t);
    json_decref(o);
}

/* The reporters of a command-line run with --out, and the callback's. */
static dt_status hooks_install(dt_train_cfg *cfg, api_hooks *h, dt_report_jsonl **jl) {
    cfg->n_reporters = 0;
    if (cfg->out_dir) {
        dt_status st = dt_report_jsonl_create(jl, &cfg->reporters[cfg->n_reporters++]);
        if (st) return st;
        dt_report_weights(&cfg->reporters[cfg->n_reporters++], &h->weights_dir);
        cfg->reporters[cfg->n_reporters++] = (dt_reporter){.ctx = h, .on_start = api_config};
    }
    if (h->fn) cfg->reporters[cfg->n_reporters++] = (dt_reporter){.ctx = h, .on_step = api_step};
    return DT_OK;
}

dt_status dt_train_flags_run(int argc, char **argv, int threads, dt_train_step_fn on_step, void *ctx, char *summary,
                             size_t summary_n) {
    if (summary && summary_n) summary[0] = '\0';
    if (threads < 0 || threads > 1024) return dt_errorf(DT_ERR_INVALID, "threads must be in [0, 1024] (0: the BLAS's own)");
    dt_train_cfg cfg;
    int nf;
    dt_flag_table tab = {dt_train_flags(&nf), nf, &cfg};
    dt_config_src src;
    bool model_given;
    dt_status st = dt_train_cfg_parse(&tab, 1, DT_FLAG_TRAIN, DT_MODEL_MLP, argc, argv, &src, &model_given);
    if (!st) {
        if (cfg.min_lr > cfg.lr) cfg.min_lr = cfg.lr; /* as the command line: a schedule's floor under its peak */
        if (cfg.strategy == DT_STRATEGY_HOGWILD) cfg.hogwild_threads = threads;
        st = dt_train_cfg_check(&cfg);
    }
    dt_comm *world = NULL;
    dt_report_jsonl *jl = NULL;
    api_hooks h = {.fn = on_step, .ctx = ctx, .cfg = &cfg};
    if (!st) st = hooks_install(&cfg, &h, &jl);
    if (!st && threads > 0 && cfg.strategy != DT_STRATEGY_HOGWILD) openblas_set_num_threads(threads);
    if (!st && cfg.strategy == DT_STRATEGY_HOGWILD) openblas_set_num_threads(1);
    if (!st) st = dt_comm_init(false, &world);
    dt_train_result r;
    memset(&r, 0, sizeof r);
    if (!st) st = dt_train_run(&cfg, world, &r);
    dt_status cs = dt_report_jsonl_close(jl);
    if (!st) st = cs;
    dt_comm_destroy(world);
    dt_config_src_free(&src);
    if (!st && summary && summary_n) summary_json(&r, summary, summary_n);
    return st;
}
