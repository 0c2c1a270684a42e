/* dtrain: the command-line trainer.
 *
 *   dtrain train --model mlp|cnn|gpt [flags]     train, write weights + metrics
 *   dtrain eval  --weights FILE [--model M]      test accuracy / validation loss
 *
 *   dtrain bench allreduce [-n N] ...            collective bandwidth table
 *
 * `-n N` starts N ranks through mpirun (see launch.c).
 * Exit codes: 0 success, 1 the run failed (bad data, bad weights, I/O),
 * 2 usage error (unknown flag, bad value), 3 a communication deadline expired
 * (a rank stalled or died; the message names it). */
#include "dtrain/ckpt.h"
#include "dtrain/comm.h"
#include "dtrain/safetensors.h"
#include "dtrain/train.h"
#include "dtrain/weights.h"

#include "cli.h"
#include "hooks.h"
#include "launch.h"
#include "supervisor.h"

#include <jansson.h>

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_RUN 1
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 3

static const char *g_cmd = "dtrain";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see '%s --help')\n", g_cmd);
    va_end(ap);
    return EXIT_USAGE;
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return usage_error("%s expects an integer, got '%s'", flag, s);
    if (v < lo || v > hi)
        return usage_error("%s %lld is out of range [%lld, %lld]", flag, v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
    int64_t v;
    int rc = parse_i64(flag, s, lo, hi, &v);
    if (!rc) *out = (int)v;
    return rc;
}

static int parse_float(const char *flag, const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return usage_error("%s expects a number, got '%s'", flag, s);
    if (v < lo || v > hi) return usage_error("%s %g is out of range [%g, %g]", flag, v, lo, hi);
    *out = (float)v;
    return 0;
}

static int parse_hidden(const char *s, dt_model_cfg *m) {
    m->n_hidden = 0;
    const char *p = s;
    if (strcmp(s, "none") == 0) return 0;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > 65536)
            return usage_error("--hidden expects sizes in [1, 65536] separated by commas, got '%s'", s);
        if (m->n_hidden == DT_MLP_MAX_HIDDEN)
            return usage_error("--hidden: at most %d hidden layers", DT_MLP_MAX_HIDDEN);
        m->hidden[m->n_hidden++] = (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return usage_error("--hidden expects sizes separated by commas, got '%s'", s);
    }
    return 0;
}

typedef struct cli {
    dt_train_cfg cfg;
    const char *weights;
    int threads;
    int nproc;
    const char *hostfile;
    int max_restarts, min_nproc;
    float backoff;
    bool model_given;
    bool progress_off;
} cli;

static const char *train_help =
    "usage: dtrain train --model mlp|cnn|gpt [flags]\n"
    "\n"
    "data and length\n"
    "  --data PATH          mlp/cnn: folder with the four Fashion-MNIST IDX files (.gz or not)\n"
    "                       [/usr/share/datasets/fashion-mnist]; gpt: a text file or folder\n"
    "                       [/usr/share/games/fortunes]\n"
    "  --epochs E           passes over the training set [1]\n"
    "  --steps N            optimizer steps (overrides --epochs) [gpt: 300]\n"
    "  --batch B            global batch: images, or sequences for the gpt [128; gpt 16]\n"
    "  --val-frac F         gpt: held-out tail of the corpus [0.1]\n"
    "optimizer\n"
    "  --optim sgd|adamw    [mlp/cnn sgd, gpt adamw]\n"
    "  --lr LR              peak learning rate [sgd 0.1, adamw 1e-3]\n"
    "  --min-lr LR          end of the cosine decay [0; gpt 1e-4]\n"
    "  --warmup N           linear warm-up steps [0; gpt 20]\n"
    "  --lr-schedule cosine|constant  after warm-up [cosine]\n"
    "  --momentum M         sgd momentum [0.9]\n"
    "  --nesterov           sgd Nesterov momentum\n"
    "  --weight-decay WD    sgd L2 / adamw decoupled, on >=2-D tensors only [sgd 0, adamw 0.01; gpt 0.1]\n"
    "  --beta1 B1 --beta2 B2 --eps E   adamw [0.9, 0.999 (gpt 0.99), 1e-8]\n"
    "  --clip NORM          global gradient-norm clipping, 0 = off [0; gpt 1]\n"
    "model\n"
    "  --hidden H1,H2,...   mlp hidden sizes [1024,1024]\n"
    "  --n-layer L --n-head H --n-embd C --block-size T   gpt [4, 4, 256, 128]\n"
    "  --init FILE          start from these weights (safetensors)\n"
    "run\n"
    "  --seed S             [1]\n"
    "  --out DIR            write DIR/model.safetensors and DIR/metrics.jsonl\n"
    "  --eval-every K       evaluate every K steps (always at the end) [0]\n"
    "  --eval-max N         gpt: validation windows per evaluation, 0 = all [256]\n"
    "  --log-every K        steps per metrics line [10]\n"
    "  --threads N          BLAS threads [OpenBLAS default; 1 per rank with -n]\n"
    "  --quiet              no progress output\n"
    "  --trace FILE         Chrome trace timeline of every rank (open in ui.perfetto.dev)\n"
    "parallel\n";

static const char *train_help2 =
    "  -n N                 start N data-parallel ranks through mpirun (one machine, or --hostfile)\n"
    "  --hostfile FILE      passed to mpirun for multi-host runs\n"
    "  --zero 0|1|2         ZeRO: 1 shards optimizer state, 2 also gradients [0]\n"
    "  --allreduce ring|rhd|rd|native|auto   collective algorithm [auto]\n"
    "  --bucket-mb MB       gradient bucket size [4]\n"
    "  --no-overlap         communicate after backward instead of during it\n"
    "  --compress none|fp16|bf16|int8|topk:RATIO[:fp16]|sign|powersgd:RANK   gradient compression\n"
    "                       of the data-parallel collectives and parameter-server pushes [none]\n"
    "  --error-feedback on|off  keep what compression left out for the next step\n"
    "                       [on for int8, topk, sign, powersgd; off for fp16, bf16]\n"
    "  --compress-warmup N  first N steps uncompressed [0]\n"
    "  --accum K            micro-batches per step, no sync in between [1]\n"
    "  --tp T               tensor (Megatron) parallel group size: mlp and gpt [1]\n"
    "  --pp P               pipeline stages [1]; the world is dp x pp x tp, dp = N/(P*T)\n"
    "  --micro-batches M    micro-batches per step through the pipeline [1]\n"
    "  --schedule gpipe|1f1b  pipeline schedule [1f1b]\n"
    "  --pp-partition auto|uniform|N1,N2,...  blocks per stage; auto balances measured\n"
    "                       block times [uniform]\n"
    "  --recompute          keep only block inputs, recompute activations in backward\n"
    "  --pp-stage-cost-us U testing: each stage also sleeps U us per micro-batch forward, 2U backward\n"
    "  --timeout SEC        deadline of every communication wait; under --strategy ps with asp or\n"
    "                       ssp:K also how long a worker may be silent before it is dropped [60]\n"
    "  --inject SPEC        fault injection: crash:rank=R:step=S, hang:rank=R:step=S,\n"
    "                       slow:rank=R:factor=F, byzantine:rank=R:mode=signflip|random|scale:X|\n"
    "                       alie[:Z] (a little is enough: mean - Z std of the honest gradients,\n"
    "                       Z by default the paper's for the worker count; on the parameter\n"
    "                       server with --consistency bsp); crash, hang and slow fire in the\n"
    "                       first attempt only, byzantine in every attempt\n";
static const char *train_help3 =
    "consistency, robustness, heterogeneity (plain data parallelism)\n"
    "  --strategy sync|localsgd:H|hogwild   local SGD: independent steps, parameters averaged\n"
    "                       every H; hogwild: --threads T threads share one model, no locks [sync]\n"
    "  --strategy ps --servers S --consistency bsp|asp|ssp:K   parameter server: the last S\n"
    "                       ranks hold key ranges and the optimizer; workers push and pull;\n"
    "                       asp and ssp:K go on without a worker that dies (worker 0 excepted)\n"
    "  --aggregate mean|median|trimmed:B|krum:F[:M]|cclip[:TAU]   gather every worker's gradient\n"
    "                       and aggregate robustly (median: f < n/2; trimmed: f <= B, n > 2B;\n"
    "                       krum: n >= 2F+3; cclip: centred clipping around the last aggregate,\n"
    "                       radius TAU or the median distance, f < n/2, data parallelism only)\n"
    "  --pre-aggregate none|nnm[:F]   with a robust --aggregate: first replace every worker's vector\n"
    "                       by the mean of its n-F nearest (nearest-neighbour mixing; F: the\n"
    "                       bad workers planned for, by default what the rule tolerates) [none]\n"
    "  --worker-momentum auto|on|off   with --aggregate and SGD momentum: every worker keeps its\n"
    "                       own momentum and sends that, the aggregate is applied as plain SGD\n"
    "                       (auto: on for median, trimmed, krum and cclip) [auto]\n"
    "  --balance static|dynamic     dynamic: split each global batch by measured worker speed\n"
    "fault tolerance\n"
    "  --ckpt-dir DIR       write checkpoints under DIR\n"
    "  --ckpt-every N       checkpoint every N steps (and at the end) [at the end only]\n"
    "  --ckpt-keep K        complete checkpoints to keep, 0 = all [3]\n"
    "  --resume auto|PATH   auto: the newest valid checkpoint in --ckpt-dir (none: start fresh)\n"
    "  --max-restarts K     supervise: restart the job from the newest checkpoint when a rank\n"
    "                       dies or a deadline expires, up to K times [0]\n"
    "  --restart-backoff S  first wait before a restart, doubling up to 30 s [1]\n"
    "  --min-nproc M        with --hostfile and no -n: refuse to run on fewer than M slots\n";

static const char *eval_help =
    "usage: dtrain eval --weights FILE [--model mlp|cnn|gpt] [--data PATH] [--eval-max N]\n"
    "Prints test accuracy and loss (mlp, cnn) or validation loss (gpt). The model and its\n"
    "sizes are read from the file's metadata when --model is not given.\n";

/* First pass: the model and optimizer decide the defaults the other flags refine. */
static int prescan(int argc, char **argv, cli *c) {
    dt_model_kind kind = DT_MODEL_MLP;
    const char *optim = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            if (dt_model_kind_parse(argv[i + 1], &kind)) return usage_error("%s", dt_error_msg());
            c->model_given = true;
        }
        if (strcmp(argv[i], "--optim") == 0 && i + 1 < argc) optim = argv[i + 1];
    }
    dt_train_cfg_default(&c->cfg, kind);
    if (optim) {
        dt_optim_kind ok;
        if (strcmp(optim, "sgd") == 0) ok = DT_OPTIM_SGD;
        else if (strcmp(optim, "adamw") == 0) ok = DT_OPTIM_ADAMW;
        else return usage_error("--optim must be sgd or adamw, got '%s'", optim);
        if (ok != c->cfg.optim.kind) {
            dt_optim_cfg_default(&c->cfg.optim, ok);
            if (ok == DT_OPTIM_SGD) { c->cfg.lr = 0.1f; c->cfg.optim.momentum = 0.9f; }
            else c->cfg.lr = 1e-3f;
        }
    }
    return 0;
}

static int parse_flags(int argc, char **argv, cli *c, bool train) {
    dt_train_cfg *t = &c->cfg;
    int rc = 0;
    for (int i = 0; i < argc && !rc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                                 \
    do {                                                                        \
        if (!v) return usage_error("%s needs a value", f);                      \
        i++;                                                                    \
    } while (0)
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            fputs(train ? train_help : eval_help, stdout);
            if (train) {
                fputs(train_help2, stdout);
                fputs(train_help3, stdout);
            }
            exit(0);
        } else if (strcmp(f, "--model") == 0) { NEEDV();
        } else if (strcmp(f, "--data") == 0) { NEEDV(); t->data = v;
        } else if (strcmp(f, "--eval-max") == 0) { NEEDV(); rc = parse_int(f, v, 0, INT_MAX, &t->eval_max);
        } else if (strcmp(f, "--threads") == 0) { NEEDV(); rc = parse_int(f, v, 1, 1024, &c->threads);
        } else if (strcmp(f, "--val-frac") == 0) { NEEDV(); float x; rc = parse_float(f, v, 1e-6, 0.999, &x); t->val_frac = x;
        } else if (!train && strcmp(f, "--weights") == 0) { NEEDV(); c->weights = v;
        } else if (!train) {
            return usage_error("unknown flag '%s'", f);
        } else if (strcmp(f, "--epochs") == 0) { NEEDV(); rc = parse_i64(f, v, 1, 100000, &t->epochs);
        } else if (strcmp(f, "--steps") == 0) { NEEDV(); rc = parse_i64(f, v, 1, INT64_MAX / 2, &t->steps);
        } else if (strcmp(f, "--batch") == 0) { NEEDV(); rc = parse_int(f, v, 1, 1 << 20, &t->batch);
        } else if (strcmp(f, "--optim") == 0) { NEEDV();
        } else if (strcmp(f, "--lr") == 0) { NEEDV(); rc = parse_float(f, v, 1e-12, 100, &t->lr);
        } else if (strcmp(f, "--min-lr") == 0) { NEEDV(); rc = parse_float(f, v, 0, 100, &t->min_lr);
        } else if (strcmp(f, "--warmup") == 0) { NEEDV(); rc = parse_i64(f, v, 0, INT64_MAX / 2, &t->warmup);
        } else if (strcmp(f, "--schedule") == 0 || strcmp(f, "--lr-schedule") == 0) { NEEDV();
            /* --schedule names the pipeline schedule; cosine|constant are kept as an
             * alias of --lr-schedule. */
            if (strcmp(v, "cosine") == 0) t->cosine = true;
            else if (strcmp(v, "constant") == 0) t->cosine = false;
            else if (strcmp(f, "--schedule") == 0 && strcmp(v, "gpipe") == 0) t->pipe.schedule = DT_SCHED_GPIPE;
            else if (strcmp(f, "--schedule") == 0 && strcmp(v, "1f1b") == 0) t->pipe.schedule = DT_SCHED_1F1B;
            else rc = usage_error("%s must be %s, got '%s'", f, strcmp(f, "--schedule") == 0 ? "gpipe or 1f1b (pipeline), or cosine or constant (lr)" : "cosine or constant", v);
        } else if (strcmp(f, "--pp") == 0) { NEEDV(); rc = parse_int(f, v, 1, 256, &t->pp);
        } else if (strcmp(f, "--tp") == 0) { NEEDV(); rc = parse_int(f, v, 1, 256, &t->tp);
        } else if (strcmp(f, "--strategy") == 0) { NEEDV();
            if (strcmp(v, "sync") == 0) t->strategy = DT_STRATEGY_SYNC;
            else if (strcmp(v, "hogwild") == 0) t->strategy = DT_STRATEGY_HOGWILD;
            else if (strcmp(v, "ps") == 0) t->strategy = DT_STRATEGY_PS;
            else if (strncmp(v, "localsgd:", 9) == 0) {
                t->strategy = DT_STRATEGY_LOCALSGD;
                rc = parse_int("--strategy localsgd:H", v + 9, 1, 1000000, &t->local_h);
            } else rc = usage_error("--strategy must be sync, localsgd:H, hogwild or ps, got '%s'", v);
        } else if (strcmp(f, "--servers") == 0) { NEEDV(); rc = parse_int(f, v, 1, 1024, &t->ps.servers);
        } else if (strcmp(f, "--consistency") == 0) { NEEDV();
            if (dt_ps_cfg_parse(v, &t->ps)) rc = usage_error("%s", dt_error_msg());
        } else if (strcmp(f, "--aggregate") == 0) { NEEDV();
            int pre = t->agg.nnm; /* --pre-aggregate may come first */
            if (dt_agg_parse(v, &t->agg)) rc = usage_error("%s", dt_error_msg());
            t->agg.nnm = pre;
        } else if (strcmp(f, "--pre-aggregate") == 0) { NEEDV();
            if (dt_agg_parse_pre(v, &t->agg)) rc = usage_error("%s", dt_error_msg());
        } else if (strcmp(f, "--worker-momentum") == 0) { NEEDV();
            if (strcmp(v, "auto") == 0) t->worker_momentum = -1;
            else if (strcmp(v, "on") == 0) t->worker_momentum = 1;
            else if (strcmp(v, "off") == 0) t->worker_momentum = 0;
            else rc = usage_error("--worker-momentum must be auto, on or off, got '%s'", v);
        } else if (strcmp(f, "--balance") == 0) { NEEDV();
            if (strcmp(v, "static") == 0) t->balance_dynamic = false;
            else if (strcmp(v, "dynamic") == 0) t->balance_dynamic = true;
            else rc = usage_error("--balance must be static or dynamic, got '%s'", v);
        } else if (strcmp(f, "--micro-batches") == 0) { NEEDV(); rc = parse_int(f, v, 1, 1 << 16, &t->pipe.micro_batches);
        } else if (strcmp(f, "--pp-partition") == 0) { NEEDV(); t->pp_partition = v;
        } else if (strcmp(f, "--recompute") == 0) { t->pipe.recompute = true;
        } else if (strcmp(f, "--pp-stage-cost-us") == 0) { NEEDV(); float x; rc = parse_float(f, v, 0, 1e7, &x); t->pipe.stage_cost_us = x;
        } else if (strcmp(f, "--momentum") == 0) { NEEDV(); rc = parse_float(f, v, 0, 0.999999, &t->optim.momentum);
        } else if (strcmp(f, "--nesterov") == 0) { t->optim.nesterov = true;
        } else if (strcmp(f, "--weight-decay") == 0) { NEEDV(); rc = parse_float(f, v, 0, 10, &t->optim.weight_decay);
        } else if (strcmp(f, "--beta1") == 0) { NEEDV(); rc = parse_float(f, v, 0, 0.999999, &t->optim.beta1);
        } else if (strcmp(f, "--beta2") == 0) { NEEDV(); rc = parse_float(f, v, 0, 0.999999999, &t->optim.beta2);
        } else if (strcmp(f, "--eps") == 0) { NEEDV(); rc = parse_float(f, v, 1e-30, 1, &t->optim.eps);
        } else if (strcmp(f, "--clip") == 0) { NEEDV(); rc = parse_float(f, v, 0, 1e9, &t->clip);
        } else if (strcmp(f, "--hidden") == 0) { NEEDV(); rc = parse_hidden(v, &t->model);
        } else if (strcmp(f, "--n-layer") == 0) { NEEDV(); rc = parse_int(f, v, 1, 256, &t->model.n_layer);
        } else if (strcmp(f, "--n-head") == 0) { NEEDV(); rc = parse_int(f, v, 1, 256, &t->model.n_head);
        } else if (strcmp(f, "--n-embd") == 0) { NEEDV(); rc = parse_int(f, v, 1, 16384, &t->model.n_embd);
        } else if (strcmp(f, "--block-size") == 0) { NEEDV(); rc = parse_int(f, v, 1, 8192, &t->model.block_size);
        } else if (strcmp(f, "--init") == 0) { NEEDV(); t->init = v;
        } else if (strcmp(f, "--seed") == 0) { NEEDV(); int64_t s; rc = parse_i64(f, v, 0, INT64_MAX, &s); t->seed = (uint64_t)s;
        } else if (strcmp(f, "--out") == 0) { NEEDV(); t->out_dir = v;
        } else if (strcmp(f, "--eval-every") == 0) { NEEDV(); rc = parse_i64(f, v, 0, INT64_MAX / 2, &t->eval_every);
        } else if (strcmp(f, "--log-every") == 0) { NEEDV(); rc = parse_i64(f, v, 1, INT64_MAX / 2, &t->log_every);
        } else if (strcmp(f, "--quiet") == 0) { t->quiet = true;
        } else if (strcmp(f, "-n") == 0 || strcmp(f, "--nproc") == 0) { NEEDV(); rc = parse_int(f, v, 1, 100000, &c->nproc);
        } else if (strcmp(f, "--hostfile") == 0) { NEEDV(); c->hostfile = v;
        } else if (strcmp(f, "--ckpt-dir") == 0) { NEEDV(); t->ckpt_dir = v;
        } else if (strcmp(f, "--ckpt-every") == 0) { NEEDV(); rc = parse_i64(f, v, 0, INT64_MAX / 2, &t->ckpt_every);
        } else if (strcmp(f, "--ckpt-keep") == 0) { NEEDV(); rc = parse_int(f, v, 0, 1000000, &t->ckpt_keep);
        } else if (strcmp(f, "--resume") == 0) { NEEDV(); t->resume = v;
        } else if (strcmp(f, "--max-restarts") == 0) { NEEDV(); rc = parse_int(f, v, 0, 1000, &c->max_restarts);
        } else if (strcmp(f, "--min-nproc") == 0) { NEEDV(); rc = parse_int(f, v, 1, 100000, &c->min_nproc);
        } else if (strcmp(f, "--restart-backoff") == 0) { NEEDV(); rc = parse_float(f, v, 0, 3600, &c->backoff);
        } else if (strcmp(f, "--zero") == 0) { NEEDV(); rc = parse_int(f, v, 0, 2, &t->dp.zero);
        } else if (strcmp(f, "--allreduce") == 0) { NEEDV();
            if (dt_algo_parse(v, &t->dp.algo)) rc = usage_error("--allreduce must be ring, rhd, rd, native or auto, got '%s'", v);
        } else if (strcmp(f, "--bucket-mb") == 0) { NEEDV(); float mb; rc = parse_float(f, v, 1e-5, 4096, &mb); t->dp.bucket_bytes = (size_t)((double)mb * 1048576.0);
        } else if (strcmp(f, "--no-overlap") == 0) { t->dp.overlap = false;
        } else if (strcmp(f, "--compress") == 0) { NEEDV();
            if (dt_comp_parse(v, &t->dp.comp.comp)) rc = usage_error("%s", dt_error_msg());
        } else if (strcmp(f, "--error-feedback") == 0) { NEEDV();
            if (strcmp(v, "on") == 0) t->dp.comp.error_feedback = 1;
            else if (strcmp(v, "off") == 0) t->dp.comp.error_feedback = 0;
            else rc = usage_error("--error-feedback must be on or off, got '%s'", v);
        } else if (strcmp(f, "--compress-warmup") == 0) { NEEDV(); rc = parse_i64(f, v, 0, INT64_MAX / 2, &t->dp.comp.warmup);
        } else if (strcmp(f, "--accum") == 0) { NEEDV(); rc = parse_int(f, v, 1, 1 << 20, &t->accum);
        } else if (strcmp(f, "--timeout") == 0) { NEEDV(); float x; rc = parse_float(f, v, 0.01, 1e6, &x); t->timeout = x;
        } else if (strcmp(f, "--trace") == 0) { NEEDV(); t->trace = v;
        } else if (strcmp(f, "--inject") == 0) { NEEDV();
            if (t->n_inject == 8) rc = usage_error("at most 8 --inject flags");
            else if (dt_inject_parse(v, &t->inject[t->n_inject++])) rc = usage_error("%s", dt_error_msg());
        } else if (strcmp(f, "--no-progress") == 0) { c->progress_off = true;
        } else {
            return usage_error("unknown flag '%s'", f);
        }
#undef NEEDV
    }
    return rc;
}

static int run_error(void) {
    fprintf(stderr, "%s: %s\n", g_cmd, dt_error_msg());
    return EXIT_RUN;
}

/* Ends this rank's part of the job as the library decides (dt_train_end_job),
 * after every output of a run that completed is written. */
static int end_job(dt_comm *world, dt_status st, const dt_train_result *r, double timeout) {
    dt_train_end end;
    dt_train_end_job(world, st, r, timeout, &end);
    if (end.report) fprintf(stderr, "%s: %s\n", g_cmd, end.msg);
    int code = end.status == DT_OK ? 0 : end.status == DT_ERR_TIMEOUT ? EXIT_TIMEOUT : EXIT_RUN;
    fflush(NULL);
    /* An aborted job never finalizes: the others may never reach MPI_Finalize. */
    if (end.action == DT_END_ABORT) dt_comm_abort(world, code);
    if (end.action != DT_END_FINALIZE) _exit(code);
    dt_comm_destroy(world);
    dt_comm_finalize();
    return code;
}

static int cmd_train(int argc, char **argv, int full_argc, char **full_argv) {
    cli c = {0};
    c.backoff = -1; /* not given: 1 s */
    g_cmd = "dtrain train";
    int rc = prescan(argc, argv, &c);
    if (!rc) rc = parse_flags(argc, argv, &c, true);
    if (rc) return rc;
    if (c.cfg.min_lr > c.cfg.lr) c.cfg.min_lr = c.cfg.lr;
    if (c.cfg.strategy == DT_STRATEGY_HOGWILD) c.cfg.hogwild_threads = c.threads;
    if (dt_train_cfg_check(&c.cfg)) return usage_error("%s", dt_error_msg());
    if (c.cfg.resume && strcmp(c.cfg.resume, "auto") != 0 && access(c.cfg.resume, F_OK) != 0)
        return usage_error("--resume %s: no such checkpoint", c.cfg.resume);
    /* Flags are valid. Supervise (the child comes back here with DTRAIN_SUPERVISED). */
    if (c.max_restarts > 0 && !getenv("DTRAIN_SUPERVISED") && !dt_under_mpi_launcher()) {
        dt_supervise_cfg sc = {c.max_restarts, c.min_nproc, c.nproc, c.nproc > 0, c.hostfile,
                               c.cfg.ckpt_dir != NULL, c.backoff >= 0 ? c.backoff : 1.0};
        return dt_supervise(full_argc, full_argv, &sc);
    }
    /* Start the ranks (returns only in a rank or a 1-process run). */
    rc = dt_launch(full_argc, full_argv, 2);
    if (rc >= 0) return rc;
    if (c.cfg.strategy == DT_STRATEGY_HOGWILD) {
        /* --threads are the Hogwild! threads; each calls a one-thread BLAS. */
        openblas_set_num_threads(1);
    } else if (c.threads) {
        openblas_set_num_threads(c.threads);
    }

    /* MPI only for a job that a launcher started: a one-process run (no -n, not
     * under mpirun/srun) never initialises MPI, so nothing of its start-up can
     * delay or print on a run that fails on its input. */
    dt_comm *world = NULL;
    if (dt_comm_init(dt_under_mpi_launcher(), &world)) return run_error();
    if (dt_comm_rank(world) == 0) dt_launch_report_up();
    int rank = dt_comm_rank(world), size = dt_comm_size(world);
    if (c.nproc && size != c.nproc) {
        if (rank == 0)
            fprintf(stderr, "%s: -n %d but the job has %d ranks; drop -n under an existing mpirun/srun\n",
                    g_cmd, c.nproc, size);
        dt_comm_destroy(world);
        dt_comm_finalize();
        return EXIT_USAGE;
    }
    if (size > 1) dt_log_set_rank(rank);
    c.cfg.progress = !c.progress_off && isatty(STDERR_FILENO);
    /* The command line goes into checkpoints (dtrain inspect shows it). */
    json_t *args = json_array();
    for (int i = 1; i < full_argc; i++) json_array_append_new(args, json_string(full_argv[i]));
    json_t *cj = json_pack("{s:o}", "argv", args);
    char *config = cj ? json_dumps(cj, JSON_COMPACT) : NULL;
    json_decref(cj);
    c.cfg.config_json = config;
    /* Injected crashes, hangs and slowness fire in the first attempt only, so
     * a supervised restart can get past them (the supervisor counts them). */
    const char *attempt = getenv("DTRAIN_ATTEMPT");
    c.cfg.attempt = attempt ? atoi(attempt) : 0;
    cli_hooks hooks;
    dt_status st = cli_hooks_install(&hooks, &c.cfg, c.cfg.progress, 2.0 * c.cfg.timeout + 10.0);
    dt_train_result r;
    if (!st) st = dt_train_run(&c.cfg, world, &r);
    dt_status hs = cli_hooks_finish(&hooks);
    if (!st) st = hs;
    free(config);
    if (st) return end_job(world, st, &r, c.cfg.timeout);
    if (c.cfg.strategy == DT_STRATEGY_HOGWILD) size = 1;
    if (rank == 0) {
        char loss[64];
        if (r.resumed_from >= 0 && r.resumed_from >= r.steps)
            snprintf(loss, sizeof loss, "no step left to run (resumed at step %lld)", (long long)r.resumed_from);
        else
            snprintf(loss, sizeof loss, "final train loss %.4f", (double)r.final_loss);
        if (c.cfg.model.kind == DT_MODEL_GPT)
            printf("trained %s: %lld steps, %s, validation loss %.4f, %.0f tokens/s", dt_model_kind_name(c.cfg.model.kind),
                   (long long)r.steps, loss, (double)r.eval_loss, r.items_per_s);
        else
            printf("trained %s: %lld steps, %s, test accuracy %.2f%%, %.0f samples/s", dt_model_kind_name(c.cfg.model.kind),
                   (long long)r.steps, loss, 100.0 * r.test_acc, r.items_per_s);
        if (size > 1 && c.cfg.strategy == DT_STRATEGY_PS) {
            const char *cons = c.cfg.ps.mode == DT_PS_BSP ? "BSP" : c.cfg.ps.mode == DT_PS_ASP ? "ASP" : "SSP";
            printf(" on %d ranks (parameter server: %d server%s, %d worker%s, %s", size, c.cfg.ps.servers,
                   c.cfg.ps.servers == 1 ? "" : "s", size - c.cfg.ps.servers, size - c.cfg.ps.servers == 1 ? "" : "s", cons);
            if (r.lost_workers) printf("; lost worker%s %s", r.lost_workers == 1 ? "" : "s", r.lost_desc);
            printf(")");
        } else if (size > 1) {
            double ov = r.comm_s > 0 ? 1.0 - r.exposed_s / r.comm_s : 0;
            if (ov < 0) ov = 0;
            printf(" on %d ranks (ZeRO-%d; per rank: params %.1f MB, grads %.1f MB, optimizer %.1f MB; %.0f%% of communication overlapped)",
                   size, c.cfg.dp.zero, r.mem.param_bytes / 1e6, r.mem.grad_bytes / 1e6,
                   r.mem.optim_bytes / 1e6, 100.0 * ov);
        }
        printf("\n");
        fflush(stdout);
        if (c.cfg.strategy == DT_STRATEGY_PS) dt_launch_report_done(r.lost_desc);
    }
    return end_job(world, DT_OK, &r, c.cfg.timeout);
}

static int cmd_eval(int argc, char **argv) {
    cli c = {0};
    g_cmd = "dtrain eval";
    int rc = prescan(argc, argv, &c);
    if (!rc) rc = parse_flags(argc, argv, &c, false);
    if (rc) return rc;
    if (!c.weights) return usage_error("--weights FILE is required");
    if (!c.model_given) {
        /* The file says which model it holds. */
        dt_model_cfg mc;
        if (dt_weights_read_cfg(c.weights, &mc)) return run_error();
        dt_train_cfg_default(&c.cfg, mc.kind);
        rc = parse_flags(argc, argv, &c, false);
        if (rc) return rc;
        c.cfg.model = mc;
    } else if (c.cfg.model.kind != DT_MODEL_CNN) {
        /* Sizes come from the file even when the kind is given. */
        dt_model_cfg mc;
        if (dt_weights_read_cfg(c.weights, &mc) == DT_OK && mc.kind == c.cfg.model.kind) c.cfg.model = mc;
    }
    if (c.threads) openblas_set_num_threads(c.threads);
    dt_train_result r;
    if (dt_eval_run(&c.cfg, c.weights, &r)) return run_error();
    if (c.cfg.model.kind == DT_MODEL_GPT)
        printf("validation loss %.4f (%s, %s)\n", (double)r.eval_loss, dt_model_kind_name(c.cfg.model.kind), c.weights);
    else
        printf("test accuracy %.2f%% (loss %.4f; %s, %s)\n", 100.0 * r.test_acc, (double)r.eval_loss,
               dt_model_kind_name(c.cfg.model.kind), c.weights);
    return 0;
}

/* --help / -h for the small subcommands: prints usage and exits 0. */
static bool wants_help(int argc, char **argv, const char *text) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(text, stdout);
            return true;
        }
    return false;
}

static int cmd_inspect(int argc, char **argv) {
    g_cmd = "dtrain inspect";
    if (wants_help(argc, argv, "usage: dtrain inspect CHECKPOINT_DIR\n"
                               "Verifies every checksum of a checkpoint and prints its step, layout and tensors;\n"
                               "exit 0 when it is whole, 1 with the first damaged file named otherwise.\n"))
        return 0;
    if (argc != 1 || argv[0][0] == '-') return usage_error("usage: dtrain inspect CHECKPOINT_DIR");
    if (dt_ckpt_inspect(argv[0], stdout)) return run_error();
    return 0;
}

static int cmd_export(int argc, char **argv) {
    g_cmd = "dtrain export";
    const char *ck = NULL, *out = NULL;
    if (wants_help(argc, argv, "usage: dtrain export CHECKPOINT_DIR --out model.safetensors\n"
                               "Writes a checkpoint's weights (any layout) as one plain safetensors file with\n"
                               "PyTorch names, readable by 'dtrain eval' and safetensors.torch.load_file.\n"))
        return 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) out = argv[++i];
        else if (argv[i][0] == '-') return usage_error("unknown flag '%s'", argv[i]);
        else if (!ck) ck = argv[i];
        else return usage_error("expects one checkpoint");
    }
    if (!ck || !out) return usage_error("usage: dtrain export CHECKPOINT_DIR --out model.safetensors");
    dt_model_cfg mc;
    dt_model *m = NULL;
    int rc = EXIT_RUN;
    if (dt_ckpt_verify(ck, NULL) || dt_ckpt_model_cfg(ck, &mc) || dt_model_create(&m, &mc) ||
        dt_ckpt_load(ck, m, NULL, NULL, NULL) || dt_weights_save(m, out, 0, NULL)) {
        fprintf(stderr, "%s: %s\n", g_cmd, dt_error_msg());
    } else {
        printf("wrote %s (%s, %zu parameters)\n", out, dt_model_kind_name(mc.kind), m->n);
        rc = 0;
    }
    dt_model_destroy(m);
    return rc;
}

/* dtrain diff A B [--rtol R] [--atol A]: compares two weights files tensor by
 * tensor (names, shapes, values); exit 0 when every value is within
 * atol + rtol*|b|, 1 otherwise, printing the largest differences. */
static int cmd_diff(int argc, char **argv) {
    g_cmd = "dtrain diff";
    const char *pa = NULL, *pb = NULL;
    float rtol = 0, atol = 0;
    if (wants_help(argc, argv, "usage: dtrain diff A.safetensors B.safetensors [--rtol R] [--atol A]\n"
                               "Compares two weights files tensor by tensor; exit 0 when every value is within\n"
                               "atol + rtol*|b| (both 0 by default: bitwise), 1 otherwise.\n"))
        return 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--rtol") == 0 && i + 1 < argc) {
            if (parse_float("--rtol", argv[++i], 0, 1e9, &rtol)) return EXIT_USAGE;
        } else if (strcmp(argv[i], "--atol") == 0 && i + 1 < argc) {
            if (parse_float("--atol", argv[++i], 0, 1e9, &atol)) return EXIT_USAGE;
        } else if (argv[i][0] == '-') {
            return usage_error("unknown flag '%s'", argv[i]);
        } else if (!pa) pa = argv[i];
        else if (!pb) pb = argv[i];
        else return usage_error("expects two files");
    }
    if (!pa || !pb) return usage_error("usage: dtrain diff A.safetensors B.safetensors [--rtol R] [--atol A]");
    dt_st_file *a = NULL, *b = NULL;
    float *x = NULL, *y = NULL;
    int rc = EXIT_RUN;
    if (dt_st_open(pa, &a) || dt_st_open(pb, &b)) {
        fprintf(stderr, "%s: %s\n", g_cmd, dt_error_msg());
        goto out;
    }
    if (dt_st_count(a) != dt_st_count(b)) {
        fprintf(stderr, "%s: %s has %d tensors, %s has %d\n", g_cmd, pa, dt_st_count(a), pb, dt_st_count(b));
        goto out;
    }
    double worst_abs = 0, worst_ratio = 0;
    const char *worst_name = "";
    for (int i = 0; i < dt_st_count(a); i++) {
        const dt_st_tensor *ta = dt_st_get(a, i), *tb = dt_st_find(b, ta->name);
        if (!tb || tb->numel != ta->numel || tb->ndim != ta->ndim) {
            fprintf(stderr, "%s: tensor '%s' is missing from %s or has another shape\n", g_cmd, ta->name, pb);
            goto out;
        }
        dt_free(x);
        dt_free(y);
        x = dt_alloc_floats(ta->numel);
        y = dt_alloc_floats(ta->numel);
        if (!x || !y || dt_st_read_f32(a, ta, x, ta->numel) || dt_st_read_f32(b, tb, y, tb->numel)) {
            fprintf(stderr, "%s: %s\n", g_cmd, x && y ? dt_error_msg() : "out of memory");
            goto out;
        }
        for (size_t j = 0; j < ta->numel; j++) {
            double d = fabs((double)x[j] - (double)y[j]);
            double lim = atol + rtol * fabs((double)y[j]);
            double ratio = d == 0 ? 0 : (lim > 0 ? d / lim : INFINITY);
            if (isnan(x[j]) != isnan(y[j])) ratio = INFINITY;
            if (d > worst_abs) worst_abs = d;
            if (ratio > worst_ratio) {
                worst_ratio = ratio;
                worst_name = ta->name;
            }
        }
    }
    printf("max |diff| %.3g; worst tensor %s at %.3g of the tolerance (atol %g, rtol %g)\n", worst_abs,
           worst_ratio > 0 ? worst_name : "-", worst_ratio, (double)atol, (double)rtol);
    rc = worst_ratio <= 1.0 ? 0 : EXIT_RUN;
out:
    dt_free(x);
    dt_free(y);
    dt_st_close(a);
    dt_st_close(b);
    return rc;
}

static const char *main_help =
    "usage: dtrain <command> [flags]\n"
    "\n"
    "  train    train a model (mlp, cnn, gpt); 'dtrain train --help'\n"
    "  eval     evaluate saved weights; 'dtrain eval --help'\n"
    "  bench allreduce   collective bandwidth table; 'dtrain bench allreduce --help'\n"
    "  diff A B [--rtol R] [--atol A]   compare two weights files\n"
    "  inspect CKPT         verify every checksum of a checkpoint and print what it holds\n"
    "  export CKPT --out F  write a checkpoint's weights as a plain safetensors file\n";

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "train") == 0) return cmd_train(argc - 2, argv + 2, argc, argv);
    if (strcmp(argv[1], "bench") == 0 && argc > 2 && strcmp(argv[2], "allreduce") == 0) {
        int rc = dt_launch(argc, argv, 3);
        if (rc >= 0) return rc;
        return dt_cli_bench_allreduce(argc - 3, argv + 3);
    }
    if (strcmp(argv[1], "eval") == 0) return cmd_eval(argc - 2, argv + 2);
    if (strcmp(argv[1], "diff") == 0) return cmd_diff(argc - 2, argv + 2);
    if (strcmp(argv[1], "inspect") == 0) return cmd_inspect(argc - 2, argv + 2);
    if (strcmp(argv[1], "export") == 0) return cmd_export(argc - 2, argv + 2);
    fprintf(stderr, "dtrain: unknown command '%s' (commands: train, eval, bench, diff, inspect, export; see 'dtrain --help')\n", argv[1]);
    return EXIT_USAGE;
}
