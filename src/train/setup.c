/* The setup phases of a run: the mesh, the data, the model, and the sync
 * driver's strategy (pipeline partition, data parallelism, robust reduction). */
#include "run.h"

#include "dtrain/nn.h"
#include "dtrain/weights.h"

#include <math.h>
#include <string.h>

int64_t tr_total_steps(const dt_train_cfg *c, int64_t n_train) {
    return c->steps > 0 ? c->steps : c->epochs * ((n_train + c->batch - 1) / c->batch);
}

/* What the data gives against what the model m takes: inputs, targets, token ids. */
static dt_status data_fits(const dt_train_cfg *c, const dt_model *m, const dt_dataset *d) {
    const char *src = c->data ? c->data : d->lm ? DT_CORPUS_DEFAULT_PATH : DT_FMNIST_DEFAULT_DIR;
    const char *name = dt_model_name(&c->model);
    dt_status st = DT_OK;
    char shape[64] = "";
    for (int i = 0, k = 0; i < d->in_ndim && k < (int)sizeof shape; i++)
        k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%lld", i ? "x" : "", (long long)d->in_shape[i]);
    if (d->lm && m->vocab < d->vocab)
        st = dt_errorf(DT_ERR_SHAPE, "%s: token ids go up to %d but the %s's vocabulary is %d", src, d->vocab - 1, name, m->vocab);
    else if (!d->lm && m->input == DT_INPUT_TOKENS)
        st = dt_errorf(DT_ERR_SHAPE, "%s: the %s reads tokens but the data holds tensors (%s)", src, name, shape);
    else if (!d->lm && m->in_floats != d->in_dim)
        st = dt_errorf(DT_ERR_SHAPE, "%s: samples are %s (%d values) but the %s takes %d inputs (a description takes --set NAME=VALUE)", src, shape, d->in_dim, name,
                       m->in_floats);
    else if (!d->lm && d->y_dim > 0 && (m->loss_kind != DT_LOSS_MSE || m->y_dim != d->y_dim))
        st = dt_errorf(DT_ERR_SHAPE, "%s: the targets are %d float(s) per sample, but the %s's loss is %s", src, d->y_dim, name,
                       m->loss_kind == DT_LOSS_MSE ? "mse over another width" : "cross_entropy (it needs class labels)");
    else if (!d->lm && d->y_dim == 0 && m->loss_kind != DT_LOSS_XENT)
        st = dt_errorf(DT_ERR_SHAPE, "%s: the data has class labels but the %s's loss is mse", src, name);
    else if (!d->lm && m->n_classes < d->n_classes)
        st = dt_errorf(DT_ERR_SHAPE, "%s: labels go up to %d but the %s has %d classes", src, d->n_classes - 1, name,
                       m->n_classes);
    return st;
}

dt_status tr_data_open(const dt_train_cfg *c, bool need_train, dt_dataset *d) {
    memset(d, 0, sizeof *d);
    dt_model *m = NULL;
    dt_status st = dt_model_probe(&c->model, &m); /* what it reads: tokens (how many) or tensors */
    if (st) return st;
    dt_data_opts o = {.path = c->data, .lm = m->input == DT_INPUT_TOKENS, .T = m->seq_len, .val_frac = c->val_frac,
                      .need_train = need_train, .target = c->target};
    st = dt_dataset_open(d, &o);
    if (!st) st = data_fits(c, m, d);
    dt_model_destroy(m);
    return st;
}

static dt_status setup_data(tr_run *r) {
    const dt_train_cfg *c = r->c;
    dt_status st = tr_data_open(c, true, &r->data);
    if (!st && r->data.n_train < 1) st = dt_errorf(DT_ERR_INVALID, "the training set is empty");
    return st;
}

/* What --precision bf16 or fp16 runs on, in one line. */
static void log_lowp(int precision) {
    if (precision == DT_PRECISION_FP16)
        dt_log(DT_LOG_INFO, "--precision fp16: every GEMM and convolution runs on copies of its operands rounded to "
               "IEEE half (emulated: no CPU multiplies fp16 faster), in fp32, with dynamic loss scaling "
               "(docs/PRECISION.md)");
    else if (precision == DT_PRECISION_BF16_EMULATED)
        dt_log(DT_LOG_INFO, "--precision bf16-emulated: every GEMM and convolution runs on copies of its operands "
               "rounded to bf16, in fp32 (docs/PRECISION.md)");
    else if (dt_gemm_bf16_available())
        dt_log(DT_LOG_INFO, "--precision bf16: GEMM and convolution operands rounded to bf16, sums in fp32; linear "
               "layers, convolutions and attention's products on this CPU's AVX512-BF16 (docs/PRECISION.md)");
    else
        dt_log(DT_LOG_INFO, "--precision bf16: this CPU has no AVX512-BF16: every GEMM and convolution runs on copies "
               "of its operands rounded to bf16, in fp32 (emulated: the numbers of bf16 at fp32 speed or a little "
               "below; docs/PRECISION.md)");
}

/* This rank's model (its tensor-parallel shard), the unsharded one when the
 * layout splits the model, and --init's weights. */
static dt_status setup_model(tr_run *r) {
    const dt_train_cfg *c = r->c;
    dt_model_cfg mcfg = c->model;
    mcfg.tp_size = r->TP;
    mcfg.tp_rank = r->tpr;
    dt_status st = dt_model_create(&r->m, &mcfg);
    if (st) return st;
    dt_model_init(r->m, c->seed);
    if (c->model.precision != DT_PRECISION_FP32 && !r->quiet) log_lowp(c->model.precision);
    if (r->m->has_batchnorm && (c->strategy == DT_STRATEGY_PS || c->strategy == DT_STRATEGY_HOGWILD))
        return dt_errorf(DT_ERR_INVALID, "the %s has batch norm, whose running statistics the %s strategy would not keep: "
                         "use data parallelism (sync or localsgd)", dt_model_name(&c->model),
                         c->strategy == DT_STRATEGY_PS ? "parameter-server" : "Hogwild!");
    if (r->TP > 1 || r->P > 1) {
        dt_model_cfg fc = c->model;
        fc.tp_size = 0;
        fc.tp_rank = 0;
        if ((st = dt_model_create(&r->full, &fc))) return st;
    }
    if (!c->init) return DT_OK;
    if (r->TP == 1) return dt_weights_load(r->m, c->init);
    if ((st = dt_weights_load(r->full, c->init))) return st;
    dt_model_local_from_logical(r->m, r->m->w, r->full, r->full->w);
    return DT_OK;
}

dt_status tr_setup(tr_run *r, const dt_train_cfg *c, dt_comm *world, dt_train_result *res) {
    memset(r, 0, sizeof *r);
    r->c = c;
    r->res = res;
    r->world = r->dpc = world;
    r->rank = dt_comm_rank(world);
    r->n = dt_comm_size(world);
    r->lead = r->rank == 0;
    r->quiet = c->quiet || !r->lead;
    r->acc = -1.0f;
    r->eloss = NAN;
    dt_comm_set_timeout(world, c->timeout);
    if (r->n > 1) {
        /* every rank: the topology is made collectively (its shared memory too) */
        char hosts[1024], topo[256];
        dt_comm_topology_desc(world, topo, sizeof topo);
        dt_comm_hosts_desc(world, hosts, sizeof hosts);
        int nh = dt_comm_nhosts(world);
        if (!r->quiet) dt_log(DT_LOG_INFO, "%d ranks on %d host%s: %s; collectives see %s", r->n, nh, nh > 1 ? "s" : "", hosts, topo);
    }
    dt_status st = setup_data(r);
    if (st) return st;
    r->P = c->pp;
    r->TP = c->tp;
    if (r->n % (r->P * r->TP))
        return dt_errorf(DT_ERR_INVALID, "%d ranks do not split into --pp %d x --tp %d (the world must be dp x pp x tp)",
                         r->n, r->P, r->TP);
    /* Tensor-parallel peers are neighbours, so on a cluster they share a host
     * and its fast links, as in Megatron. */
    r->D = r->n / (r->P * r->TP);
    r->tpr = r->rank % r->TP;
    r->replica = (r->rank / r->TP) % r->D;
    r->stage = r->rank / (r->TP * r->D);
    r->total = tr_total_steps(c, r->data.n_train);
    return setup_model(r);
}

/* Per-block forward+backward time of the whole model on one micro-batch (median
 * of 3), for --pp-partition auto. Gradients are cleared afterwards. */
static dt_status profile_blocks(dt_model *m, const dt_batch *b, double *cost) {
    dt_acts *a = NULL;
    dt_status st = dt_acts_create(&a, m, 0, m->n_blocks - 1, b->B);
    if (st) return st;
    int n = m->n_blocks;
    double *runs = dt_calloc((size_t)n * 3, sizeof(double));
    if (!runs) {
        dt_acts_destroy(a);
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    }
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < n; i++) {
            const dt_block *blk = &m->blocks[i];
            double t0 = dt_now();
            blk->ops->forward(blk, m->w, b, i ? a->bound[i] : NULL, a->bound[i + 1], a->saved[i], a->scratch);
            runs[(size_t)i * 3 + (size_t)r] = dt_now() - t0;
        }
        const float *dout = NULL;
        int which = 0;
        for (int i = n - 1; i >= 0; i--) {
            const dt_block *blk = &m->blocks[i];
            float *dprev = NULL;
            if (i > 0) {
                dprev = a->dbuf[which];
                which ^= 1;
                memset(dprev, 0, (size_t)b->B * blk->in_dim * sizeof(float));
            }
            double t0 = dt_now();
            blk->ops->backward(blk, m->w, m->g, b, i ? a->bound[i] : NULL, a->bound[i + 1], dout, dprev,
                               a->saved[i], a->scratch);
            runs[(size_t)i * 3 + (size_t)r] += dt_now() - t0;
            dout = dprev;
        }
    }
    for (int i = 0; i < n; i++) {
        double *x = runs + (size_t)i * 3;
        double lo = x[0] < x[1] ? x[0] : x[1], hi = x[0] < x[1] ? x[1] : x[0];
        cost[i] = x[2] < lo ? lo : (x[2] > hi ? hi : x[2]);
    }
    dt_model_zero_grad(m);
    dt_free(runs);
    dt_acts_destroy(a);
    return DT_OK;
}

/* Chunks per stage: V under the interleaved schedule, else 1. */
static int V_of(const tr_run *r) {
    return r->c->pipe.schedule == DT_SCHED_INTERLEAVED && r->P > 1 ? r->c->pipe.virtual_stages : 1;
}

/* --pp-partition auto: rank 0 times every block on a micro-batch of real
 * data (with its tensor-parallel peers, ranks 0 .. T-1, whose blocks' all-reduces
 * it meets); every rank splits alike. */
static dt_status partition_auto(tr_run *r) {
    dt_model *m = r->m;
    double *cost = dt_calloc((size_t)m->n_blocks, sizeof(double));
    if (!cost) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    dt_status st = DT_OK;
    if (r->rank < r->TP) {
        dt_loader_first(&r->ld, r->micro_max);
        dt_batch pb = {.B = r->micro_max, .x = r->ld.x, .tokens = r->ld.tokens, .targets = r->ld.targets,
                       .y = r->ld.y, .loss_scale = 1.0f / (float)r->micro_max, .recompute = true /* statistics untouched */};
        st = profile_blocks(m, &pb, cost);
    }
    if (!st) st = dt_bcast(r->world, cost, (size_t)m->n_blocks * sizeof(double), 0, DT_ALGO_AUTO);
    if (!st) {
        int P = r->P, C = P * V_of(r);
        double bottleneck = dt_partition_best(cost, m->n_blocks, C, &r->part);
        dt_partition_interleave(&r->part, P);
        if (!r->quiet) {
            char desc[512];
            size_t u = 0;
            for (int k = 0; k < C && u < sizeof desc; k++)
                u += (size_t)snprintf(desc + u, sizeof desc - u, "%s%d", k ? "," : "", r->part.first[k + 1] - r->part.first[k]);
            dt_log(DT_LOG_INFO, "auto partition from measured block times: %s blocks per %s (bottleneck %.2f ms per micro-batch)",
                   desc, C > P ? "chunk" : "stage", 1e3 * bottleneck);
        }
    }
    dt_free(cost);
    return st;
}

/* --pp-partition over the P*V chunks (P stages, V chunks each). */
static dt_status setup_partition(tr_run *r) {
    const char *spec = r->c->pp_partition ? r->c->pp_partition : "uniform";
    int P = r->P, C = P * V_of(r), n = r->m->n_blocks;
    if (C > P && C > n)
        return dt_errorf(DT_ERR_INVALID, "--pp %d x --virtual-stages %d = %d chunks, but the model has %d blocks: use fewer "
                         "virtual stages or stages", P, C / P, C, n);
    if (C > n) return dt_errorf(DT_ERR_INVALID, "--pp %d stages, but the model has %d blocks: use fewer stages", P, n);
    int parts = 1;
    for (const char *q = spec; *q; q++) parts += *q == ',';
    if (C > P && strcmp(spec, "uniform") && strcmp(spec, "auto") && parts != C)
        return dt_errorf(DT_ERR_INVALID, "--pp-partition '%s' with --virtual-stages %d: give %d block counts, one per chunk "
                         "(chunk c runs on stage c mod %d)", spec, C / P, C, P);
    dt_status st = DT_OK;
    if (P == 1 || strcmp(spec, "uniform") == 0) dt_partition_uniform(n, C, &r->part);
    else if (strcmp(spec, "auto") == 0) return partition_auto(r);
    else st = dt_partition_parse(spec, n, C, &r->part);
    if (!st) dt_partition_interleave(&r->part, P);
    return st;
}

/* The sub-communicators of the mesh. */
static dt_status setup_mesh(tr_run *r) {
    if (r->P == 1 && r->TP == 1) return DT_OK;
    int TP = r->TP, D = r->D, stage = r->stage, replica = r->replica, tpr = r->tpr;
    dt_status st = DT_OK;
    if ((st = dt_comm_split(r->world, stage * TP + tpr, replica, &r->dpc))) return st;
    if ((st = dt_comm_split(r->world, replica * TP + tpr, stage, &r->ppc))) return st;
    if ((st = dt_comm_split(r->world, stage * D + replica, tpr, &r->tpc))) return st;
    dt_comm_set_timeout(r->dpc, r->c->timeout);
    dt_comm_set_timeout(r->ppc, r->c->timeout);
    dt_comm_set_timeout(r->tpc, r->c->timeout);
    dt_model_set_tp(r->m, r->tpc);
    return DT_OK;
}

/* Robust (gathered) aggregation: every worker's gradient meets (--aggregate, or
 * only to let --inject byzantine act where the vectors meet). */
static dt_status setup_robust(tr_run *r) {
    const dt_train_cfg *c = r->c;
    bool gathered = c->agg.kind != DT_AGG_NONE || tr_any_byzantine(c);
    r->per_worker = gathered || c->strategy == DT_STRATEGY_LOCALSGD;
    if (!gathered) return DT_OK;
    dt_robust_cfg *rc = &r->robcfg;
    memset(rc, 0, sizeof *rc);
    /* The hooks first: the reducer copies its configuration. */
    dt_status st = tr_attacks(c, r->replica, r->D, &r->att, rc, r->lead);
    if (st) return st;
    rc->agg = c->agg.kind == DT_AGG_NONE ? (dt_agg){.kind = DT_AGG_MEAN} : c->agg;
    rc->wm = dt_train_worker_momentum(c) ? &c->optim : NULL;
    rc->clip = c->clip;
    rc->algo = c->dp.algo;
    return dt_robust_create(&r->rob, rc, r->m, r->dpc);
}

dt_status tr_setup_strategy(tr_run *r) {
    const dt_train_cfg *c = r->c;
    dt_model *m = r->m;
    if (r->P > m->n_blocks)
        return dt_errorf(DT_ERR_INVALID, "--pp %d: the %s has only %d blocks", r->P, dt_model_name(&m->cfg), m->n_blocks);
    dt_status st = setup_mesh(r);
    if (st) return st;
    if (m->has_batchnorm && r->D > 1) {
        /* Batch norm sums over the replicas in every forward: each must have rows
         * in every (micro-)batch, the epoch's short last batch included. */
        int64_t need = (int64_t)r->D * (r->P > 1 ? c->pipe.micro_batches : c->accum), tail = r->data.n_train % c->batch;
        if (c->batch < need || (tail && tail < need))
            return dt_errorf(DT_ERR_INVALID, "the %s's batch norm runs over %d data-parallel ranks, so every (micro-)batch "
                             "needs at least %lld samples, the epoch's last one too (%lld here): choose a --batch that "
                             "divides %lld or leaves at least %lld", dt_model_name(&m->cfg), r->D, (long long)need,
                             (long long)(tail ? tail : c->batch), (long long)r->data.n_train, (long long)need);
        if (c->balance_dynamic)
            return dt_errorf(DT_ERR_INVALID, "--balance dynamic may leave a rank without samples, which batch norm over "
                             "the data-parallel ranks cannot take");
    }
    int B = c->batch, D = r->D;
    /* Largest shard of a global batch: with dynamic balance a worker may get all of it. */
    r->local_max = c->balance_dynamic ? B : (B + D - 1) / D;
    int split = r->P > 1 ? c->pipe.micro_batches : c->accum;
    r->micro_max = (r->local_max + split - 1) / split;
    if (r->micro_max < 1) r->micro_max = 1;
    r->eB = r->data.lm ? (r->micro_max > 16 ? r->micro_max : 16) : 256;
    int cap = r->eB > r->local_max ? r->eB : r->local_max;
    if ((st = dt_loader_init(&r->ld, &r->data, cap, c->seed, r->replica, D))) return st;
    if ((st = dt_loader_set_prefetch(&r->ld, c->prefetch))) return st;
    if ((st = setup_partition(r))) return st;
    if (m->has_batchnorm && r->D > 1) {
        /* Batch norm's sums run inside forward/backward, beside the buckets' thread:
         * a communicator of their own; set after the partition's profile, which
         * rank 0 runs alone. */
        if ((st = dt_comm_split(r->dpc, 0, dt_comm_rank(r->dpc), &r->bnc))) return st;
        dt_comm_set_timeout(r->bnc, c->timeout);
        dt_model_set_dp(m, r->bnc);
    }
    dt_dp_cfg dcfg = c->dp;
    if (r->P > 1) {
        int V = dt_partition_virt(&r->part);
        dcfg.n_ranges = V;
        for (int j = 0; j < V; j++) {
            dcfg.range_first[j] = r->part.first[r->stage + j * r->P];
            dcfg.range_last[j] = r->part.first[r->stage + j * r->P + 1] - 1;
        }
    }
    /* The gradient norm sums over stages and, for sharded tensors, over the tp
     * group (replicated tensors hold the same gradient on every tp rank and
     * count once). */
    dcfg.norm_comm = r->P > 1 ? r->ppc : NULL;
    dcfg.tp_comm = r->TP > 1 ? r->tpc : NULL;
    dcfg.comp.seed = c->seed;
    if ((st = setup_robust(r))) return st;
    dt_optim_cfg ocfg = tr_applied_optim(c);
    if ((st = dt_dp_create(&r->dp, m, r->dpc, &dcfg, &ocfg))) return st;
    if (c->dp.comp.comp.kind != DT_COMP_NONE && D == 1 && !r->quiet)
        dt_log(DT_LOG_INFO, "--compress: one data-parallel rank has nothing to send, so nothing is compressed");
    if ((st = dt_dp_broadcast_params(r->dp))) return st;
    dt_dp_stats discard; /* the broadcast is not step 1's traffic */
    dt_dp_take_stats(r->dp, &discard);
    if (r->P > 1 && (st = dt_pipe_create(&r->pipe, m, r->ppc, &r->part, &c->pipe, r->micro_max))) return st;
    if (!r->pipe) {
        if ((st = dt_acts_create(&r->acts, m, 0, m->n_blocks - 1, r->micro_max))) return st;
        if ((st = dt_acts_create(&r->eacts, m, 0, m->n_blocks - 1, r->eB))) return st;
    }
    if (c->balance_dynamic && !(r->bal = dt_calloc((size_t)2 * D, sizeof(double))))
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (!(r->smask = dt_calloc((size_t)m->n_params + 1, sizeof(bool)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_params; i++) r->smask[i] = dt_partition_stage(&r->part, m->params[i].block) == r->stage;
    return DT_OK;
}

void tr_free(tr_run *r) {
    tr_stop_free(r);
    dt_ckpt_writer_destroy(r->ck.w);
    tr_ckpt_net_free(r);
    dt_free(r->ck.writers);
    dt_free(r->ck.pmask);
    for (int k = 0; k < 4; k++) dt_free(r->ck.gbuf[k]);
    dt_free(r->smask);
    dt_free(r->bal);
    dt_free(r->att.bad);
    dt_robust_destroy(r->rob);
    dt_pipe_destroy(r->pipe);
    dt_trace_destroy(r->trace);
    dt_loader_free(&r->ld);
    dt_dp_destroy(r->dp);
    dt_acts_destroy(r->acts);
    dt_acts_destroy(r->eacts);
    dt_model_destroy(r->m);
    dt_model_destroy(r->full);
    dt_dataset_free(&r->data);
    /* The sub-communicators last: the dp object used them. */
    if (r->dpc != r->world) dt_comm_destroy(r->dpc);
    dt_comm_destroy(r->ppc);
    dt_comm_destroy(r->tpc);
    dt_comm_destroy(r->bnc);
}
