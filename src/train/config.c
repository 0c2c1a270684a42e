/* The single source of dt_train_cfg's defaults (dt_train_cfg_default,
 * dt_train_cfg_set_optim) and its checks. The flag table and the parsers of the
 * flags whose values are specs are in config_flags.c; the engine that reads
 * and writes flags with the table is flags.c. */
#include "dtrain/config.h"

#include "flags.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dt_train_cfg_default(dt_train_cfg *c, dt_model_kind kind) {
    memset(c, 0, sizeof *c);
    dt_model_cfg_default(&c->model, kind);
    c->epochs = 1;
    c->seed = 1;
    c->log_every = 10;
    c->val_frac = 0.1;
    c->prefetch = true;
    c->eval_max = 256;
    c->cosine = true;
    c->accum = 1;
    c->loss_scale = 65536.0f;     /* PyTorch GradScaler's init_scale and growth_interval */
    c->loss_scale_window = 2000;
    c->timeout = 60.0;
    c->ckpt_keep = 3;
    c->diverge = (dt_diverge_cfg){.mode = DT_DIVERGE_STOP, .back = 100, .skip = 200, .window = 50, .max_rewinds = 10};
    c->pp = 1;
    c->tp = 1;
    c->ps.servers = 1;
    c->ps.mode = DT_PS_BSP;
    c->worker_momentum = -1;
    c->pipe.micro_batches = 1;
    c->pipe.schedule = DT_SCHED_1F1B;
    c->pipe.virtual_stages = 1;
    dt_dp_cfg_default(&c->dp);
    dt_train_cfg_model_defaults(c, kind == DT_MODEL_GPT);
}

void dt_train_cfg_model_defaults(dt_train_cfg *c, bool lm) {
    if (lm) {
        c->batch = 16;
        c->lr = 1e-3f;
        c->min_lr = 1e-4f;
        c->warmup = 20;
        c->clip = 1.0f;
        dt_optim_cfg_default(&c->optim, DT_OPTIM_ADAMW);
        c->optim.weight_decay = 0.1f;
        c->optim.beta2 = 0.99f;
        c->steps = 300;
    } else {
        c->batch = 128;
        c->lr = 0.1f;
        c->min_lr = 0.0f;
        c->warmup = 0;
        dt_optim_cfg_default(&c->optim, DT_OPTIM_SGD);
        c->optim.momentum = 0.9f;
    }
}

/* Kept apart from the model's defaults so --optim can switch after them. */
void dt_train_cfg_set_optim(dt_train_cfg *c, dt_optim_kind kind) {
    if (c->optim.kind == kind) return;
    dt_optim_cfg_default(&c->optim, kind);
    if (kind == DT_OPTIM_SGD) {
        c->lr = 0.1f;
        c->optim.momentum = 0.9f;
    } else {
        c->lr = 1e-3f;
    }
}

bool dt_train_worker_momentum(const dt_train_cfg *c) {
    bool sgd_momentum = c->optim.kind == DT_OPTIM_SGD && c->optim.momentum > 0.0f;
    if (c->worker_momentum >= 0) return c->worker_momentum == 1 && sgd_momentum && c->agg.kind != DT_AGG_NONE;
    return sgd_momentum && (c->agg.kind == DT_AGG_MEDIAN || c->agg.kind == DT_AGG_TRIMMED || c->agg.kind == DT_AGG_KRUM ||
                            c->agg.kind == DT_AGG_CCLIP);
}

/* --on-divergence, --skip-batches, --inject spike, the deadline. */
static dt_status check_stopping(const dt_train_cfg *c) {
    const dt_diverge_cfg *d = &c->diverge;
    bool sync = c->strategy == DT_STRATEGY_SYNC || c->strategy == DT_STRATEGY_LOCALSGD, spike = false;
    for (int i = 0; i < c->n_inject; i++) spike |= c->inject[i].kind == DT_INJECT_SPIKE;
    if (!sync && (d->mode != DT_DIVERGE_STOP || c->n_skips || spike || d->z > 0))
        return dt_errorf(DT_ERR_INVALID, "--on-divergence skip|rewind, --spike-z, --skip-batches and --inject spike are for the "
                         "synchronous strategies (sync, localsgd:H), not --strategy %s",
                         c->strategy == DT_STRATEGY_PS ? "ps" : "hogwild");
    if (d->mode == DT_DIVERGE_REWIND && (!c->ckpt_dir || c->ckpt_stop_only || c->ckpt_every < 1))
        return dt_errorf(DT_ERR_INVALID, "--on-divergence rewind goes back to a checkpoint: it needs --ckpt-dir DIR and "
                         "--ckpt-every N");
    if (d->window < 2 || d->window > 100000) return dt_errorf(DT_ERR_INVALID, "--spike-window must be in [2, 100000]");
    if (!(d->z >= 0) || !isfinite(d->z)) return dt_errorf(DT_ERR_INVALID, "--spike-z must be >= 0 (0: the default)");
    if (d->max_rewinds < 0) return dt_errorf(DT_ERR_INVALID, "--max-rewinds must be >= 0");
    if (c->deadline < 0 || !isfinite(c->deadline)) return dt_errorf(DT_ERR_INVALID, "the deadline must be a time on dt_now()'s clock");
    return DT_OK;
}

/* --precision fp16 and its loss scale: the synchronous strategies only (every
 * rank must agree on dropping a step), and no error feedback (its residual
 * would keep an overflowed step's inf, in the loss scale's units). */
static dt_status check_precision(const dt_train_cfg *c) {
    bool fp16 = c->model.precision == DT_PRECISION_FP16;
    if (!(c->loss_scale >= 1.0f && c->loss_scale <= 0x1p64f))
        return dt_errorf(DT_ERR_INVALID, "--loss-scale %g must be in [1, 2^64]", (double)c->loss_scale);
    if (c->loss_scale_window < 0) return dt_errorf(DT_ERR_INVALID, "--loss-scale-window must be >= 0 (0: a static scale)");
    if (!fp16 && (c->loss_scale != 65536.0f || c->loss_scale_window != 2000))
        return dt_errorf(DT_ERR_INVALID, "--loss-scale and --loss-scale-window are for --precision fp16 (bf16 and fp32 have "
                         "fp32's range and need no scaling)");
    for (int i = 0; i < c->n_inject && !fp16; i++)
        if (c->inject[i].kind == DT_INJECT_OVERFLOW)
            return dt_errorf(DT_ERR_INVALID, "--inject overflow tests the fp16 loss scaler: add --precision fp16");
    if (!fp16) return DT_OK;
    if (c->strategy == DT_STRATEGY_PS || c->strategy == DT_STRATEGY_HOGWILD)
        return dt_errorf(DT_ERR_INVALID, "--precision fp16 drops a step on every rank when any gradient overflows, which "
                         "needs the synchronous strategies (sync, localsgd:H): use --precision bf16 with --strategy %s",
                         c->strategy == DT_STRATEGY_PS ? "ps" : "hogwild");
    if (c->dp.comp.comp.kind != DT_COMP_NONE && dt_gc_cfg_uses_ef(&c->dp.comp))
        return dt_errorf(DT_ERR_INVALID, "--precision fp16 with error feedback (on for --compress int8, topk, sign and "
                         "powersgd): its residual would keep an overflowed step's inf; add --error-feedback off, or "
                         "use --compress fp16|bf16, or --precision bf16");
    return DT_OK;
}

/* The pipeline schedule's flags against --pp and --micro-batches. */
static dt_status pipe_check(const dt_train_cfg *c) {
    int V = c->pipe.virtual_stages, P = c->pp, M = c->pipe.micro_batches;
    if (c->pipe.schedule != DT_SCHED_INTERLEAVED) {
        if (V > 1) return dt_errorf(DT_ERR_INVALID, "--virtual-stages %d is for --schedule interleaved", V);
        return DT_OK;
    }
    if (P < 2) return dt_errorf(DT_ERR_INVALID, "--schedule interleaved is a pipeline schedule: give --pp P >= 2");
    if (V < 2 || V > DT_PIPE_MAX_VIRTUAL)
        return dt_errorf(DT_ERR_INVALID, "--schedule interleaved needs --virtual-stages V in [2, %d] (chunks per stage), got %d",
                         DT_PIPE_MAX_VIRTUAL, V);
    if (M % P)
        return dt_errorf(DT_ERR_INVALID, "--schedule interleaved runs micro-batches in groups of --pp %d: --micro-batches %d "
                         "is not a multiple of %d (try %d)", P, M, P, (M / P + 1) * P);
    return DT_OK;
}

dt_status dt_train_cfg_check(const dt_train_cfg *c) {
    dt_status st = dt_model_cfg_check(&c->model);
    if (st) return st;
    if ((st = dt_optim_cfg_check(&c->optim))) return st;
    if (c->batch < 1 || c->batch > (1 << 20))
        return dt_errorf(DT_ERR_INVALID, "--batch %d is out of range [1, 1048576]", c->batch);
    if (c->steps < 0) return dt_errorf(DT_ERR_INVALID, "--steps must be positive");
    if (c->steps == 0 && (c->epochs < 1 || c->epochs > 100000))
        return dt_errorf(DT_ERR_INVALID, "--epochs %lld is out of range [1, 100000]", (long long)c->epochs);
    if (!(c->lr > 0.0f) || !isfinite(c->lr) || c->lr > 100.0f)
        return dt_errorf(DT_ERR_INVALID, "--lr %g is out of range (0, 100]", (double)c->lr);
    if (!(c->min_lr >= 0.0f) || c->min_lr > c->lr)
        return dt_errorf(DT_ERR_INVALID, "--min-lr %g must be in [0, --lr]", (double)c->min_lr);
    if (c->warmup < 0) return dt_errorf(DT_ERR_INVALID, "--warmup must be >= 0");
    if (!(c->clip >= 0.0f) || !isfinite(c->clip))
        return dt_errorf(DT_ERR_INVALID, "--clip %g must be >= 0 (0 disables clipping)", (double)c->clip);
    if (c->eval_every < 0) return dt_errorf(DT_ERR_INVALID, "--eval-every must be >= 0");
    if (c->log_every < 1) return dt_errorf(DT_ERR_INVALID, "--log-every must be >= 1");
    if (!(c->val_frac > 0.0 && c->val_frac < 1.0))
        return dt_errorf(DT_ERR_INVALID, "--val-frac %g must be in (0, 1)", c->val_frac);
    if (c->eval_max < 0) return dt_errorf(DT_ERR_INVALID, "--eval-max must be >= 0");
    if (c->accum < 1 || c->accum > c->batch)
        return dt_errorf(DT_ERR_INVALID, "--accum %d must be in [1, --batch]", c->accum);
    if (c->dp.zero < 0 || c->dp.zero > 3) return dt_errorf(DT_ERR_INVALID, "--zero must be 0, 1, 2 or 3");
    if (c->dp.zero3_keep && c->dp.zero != 3) return dt_errorf(DT_ERR_INVALID, "--zero3-keep is for --zero 3");
    if (c->dp.bucket_bytes < 4) return dt_errorf(DT_ERR_INVALID, "--bucket-mb is too small");
    if (c->ckpt_every < 0) return dt_errorf(DT_ERR_INVALID, "--ckpt-every must be >= 0");
    if (c->pp < 1 || c->pp > 256) return dt_errorf(DT_ERR_INVALID, "--pp %d is out of range [1, 256]", c->pp);
    if (c->pipe.micro_batches < 1) return dt_errorf(DT_ERR_INVALID, "--micro-batches must be >= 1");
    if ((st = pipe_check(c))) return st;
    if (c->tp < 1 || c->tp > 256) return dt_errorf(DT_ERR_INVALID, "--tp %d is out of range [1, 256]", c->tp);
    if (c->model.seq_parallel && c->tp < 2)
        return dt_errorf(DT_ERR_INVALID, "--sequence-parallel splits the sequence across the tensor-parallel group: it "
                         "needs --tp T (T > 1)");
    bool byz = false;
    for (int i = 0; i < c->n_inject; i++) byz |= c->inject[i].kind == DT_INJECT_BYZANTINE;
    if ((c->strategy == DT_STRATEGY_LOCALSGD || c->agg.kind != DT_AGG_NONE || byz || c->balance_dynamic) &&
        (c->pp > 1 || c->tp > 1 || c->dp.zero))
        return dt_errorf(DT_ERR_INVALID, "--strategy localsgd, --aggregate, byzantine injection and --balance dynamic are for plain data parallelism: drop --pp, --tp and --zero");
    if (c->strategy == DT_STRATEGY_LOCALSGD && (c->local_h < 1 || c->agg.kind != DT_AGG_NONE))
        return dt_errorf(DT_ERR_INVALID, "--strategy localsgd:H needs H >= 1 and no --aggregate");
    if (c->strategy == DT_STRATEGY_HOGWILD && c->dp.zero)
        return dt_errorf(DT_ERR_INVALID, "--strategy hogwild shares one model among threads: --zero does not apply (drop it)");
    if (c->strategy == DT_STRATEGY_HOGWILD && (c->agg.kind != DT_AGG_NONE || byz ||
                                               c->balance_dynamic || c->pp > 1 || c->tp > 1 || c->clip > 0))
        return dt_errorf(DT_ERR_INVALID, "--strategy hogwild runs threads of one process on one model: no --aggregate, --balance, --pp, --tp or --clip");
    if (c->strategy == DT_STRATEGY_HOGWILD && (c->hogwild_threads < 1 || c->hogwild_threads > 256))
        return dt_errorf(DT_ERR_INVALID, "--strategy hogwild needs --threads T (1 to 256)");
    if (c->strategy == DT_STRATEGY_PS && (c->balance_dynamic || c->pp > 1 || c->tp > 1 ||
                                          c->dp.zero || c->accum > 1 || c->clip > 0))
        return dt_errorf(DT_ERR_INVALID, "--strategy ps: --balance, --pp, --tp, --zero, --accum and --clip are not supported with the parameter server");
    bool alie = false;
    for (int i = 0; i < c->n_inject; i++) alie |= c->inject[i].kind == DT_INJECT_BYZANTINE && c->inject[i].mode == DT_BYZ_ALIE;
    if (alie && c->strategy == DT_STRATEGY_PS && c->ps.mode != DT_PS_BSP)
        return dt_errorf(DT_ERR_INVALID, "--inject byzantine:mode=alie sees every honest gradient of a step: it needs --consistency bsp with the parameter server");
    if (c->strategy == DT_STRATEGY_PS && c->agg.kind == DT_AGG_CCLIP)
        return dt_errorf(DT_ERR_INVALID, "--aggregate cclip keeps the last aggregate as its centre, which the parameter server does not checkpoint yet: use it with data parallelism (-n N), or median, trimmed:B or krum:F on the server");
    if (c->strategy == DT_STRATEGY_PS && c->agg.kind != DT_AGG_NONE && c->ps.mode != DT_PS_BSP)
        return dt_errorf(DT_ERR_INVALID, "--aggregate with the parameter server needs --consistency bsp (every step's gradients together)");
    if (c->agg.nnm && (c->agg.kind == DT_AGG_NONE || c->agg.kind == DT_AGG_MEAN))
        return dt_errorf(DT_ERR_INVALID, "--pre-aggregate nnm needs a robust --aggregate (median, trimmed:B, krum:F or cclip)");
    if (c->worker_momentum == 1 && c->agg.kind == DT_AGG_NONE)
        return dt_errorf(DT_ERR_INVALID, "--worker-momentum on is for robust aggregation: add --aggregate (mean, median, trimmed:B, krum:F or cclip)");
    if (c->worker_momentum == 1 && !(c->optim.kind == DT_OPTIM_SGD && c->optim.momentum > 0.0f))
        return dt_errorf(DT_ERR_INVALID, "--worker-momentum on needs --optim sgd with --momentum > 0 (AdamW's moments stay with the aggregate)");
    if (c->strategy == DT_STRATEGY_PS && (c->ps.servers < 1 || c->ps.servers > 1024))
        return dt_errorf(DT_ERR_INVALID, "--servers must be in [1, 1024]");
    if (c->strategy == DT_STRATEGY_LOCALSGD && c->ckpt_every % c->local_h)
        return dt_errorf(DT_ERR_INVALID, "with --strategy localsgd:%d, --ckpt-every must be a multiple of %d (checkpoints at averaging steps)", c->local_h, c->local_h);
    if (c->tp > 1) {
        dt_model_cfg mc = c->model;
        mc.tp_size = c->tp;
        mc.tp_rank = 0;
        if ((st = dt_model_cfg_check(&mc))) return st;
    }
    if (c->pp > 1 && c->accum > 1)
        return dt_errorf(DT_ERR_INVALID, "--accum is for data parallelism alone; with --pp use --micro-batches");
    if (c->ckpt_keep < 0) return dt_errorf(DT_ERR_INVALID, "--ckpt-keep must be >= 0");
    if (c->ckpt_replicas && !c->ckpt_dir) return dt_errorf(DT_ERR_INVALID, "--ckpt-replicas needs --ckpt-dir");
    if ((c->ps.staleness_lr || c->ps.dc_lambda > 0) && (c->strategy != DT_STRATEGY_PS || c->ps.mode == DT_PS_BSP))
        return dt_errorf(DT_ERR_INVALID, "--staleness-lr and --dc-asgd are for the parameter server's asynchronous modes: "
                                         "--strategy ps --consistency asp or ssp:K");
    if (c->ps.max_workers > 0 && (c->strategy != DT_STRATEGY_PS || c->ps.mode == DT_PS_BSP))
        return dt_errorf(DT_ERR_INVALID, "--elastic is for the parameter server's asynchronous modes (--strategy ps "
                         "--consistency asp or ssp:K); synchronous runs change size by restarting from a checkpoint "
                         "(--supervise, docs/FAULT_TOLERANCE.md)");
    if (c->ps.max_workers > 0 && !c->out_dir && !c->join_port)
        return dt_errorf(DT_ERR_INVALID, "--elastic needs --out DIR: the joiners find the job there (join.json, join.token)");
    if (c->dp.comp.comp.kind != DT_COMP_NONE) {
        if (c->pp > 1 || c->tp > 1 || c->strategy == DT_STRATEGY_LOCALSGD || c->strategy == DT_STRATEGY_HOGWILD ||
            c->agg.kind != DT_AGG_NONE || byz || c->balance_dynamic)
            return dt_errorf(DT_ERR_INVALID, "--compress applies to synchronous data parallelism (any --zero) and the parameter server: drop --pp, --tp, --strategy localsgd|hogwild, --aggregate, --balance and byzantine injection");
        if (c->strategy == DT_STRATEGY_PS && c->dp.comp.comp.kind == DT_COMP_POWERSGD)
            return dt_errorf(DT_ERR_INVALID, "--compress powersgd needs an all-reduce between workers; with the parameter server use fp16, bf16, int8, topk:RATIO or sign");
    }
    if (c->dp.comp.warmup < 0) return dt_errorf(DT_ERR_INVALID, "--compress-warmup must be >= 0");
    if ((c->ckpt_every > 0 && (!c->ckpt_dir || c->ckpt_stop_only)) || (c->resume && strcmp(c->resume, "auto") == 0 && !c->ckpt_dir))
        return dt_errorf(DT_ERR_INVALID, "--ckpt-every and --resume auto need --ckpt-dir DIR");
    if ((st = check_precision(c))) return st;
    if (c->max_memory > 0 && (c->strategy == DT_STRATEGY_PS || c->strategy == DT_STRATEGY_HOGWILD))
        return dt_errorf(DT_ERR_INVALID, "--max-memory counts the synchronous strategies' layouts (data, tensor, pipeline "
                         "parallelism, ZeRO), not --strategy %s", c->strategy == DT_STRATEGY_PS ? "ps" : "hogwild");
    return check_stopping(c);
}

