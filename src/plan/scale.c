/* A GPT layout on a GPU cluster, its achieved FLOP/s per GPU predicted in closed
 * form (plan.h, "at scale"): the model Narayanan et al. 2021 (SC21, "Efficient
 * Large-Scale Language Model Training on GPU Clusters Using Megatron-LM") train
 * with, t-way tensor parallelism inside a node, p pipeline stages of v chunks
 * each (interleaved 1F1B), d replicas, micro-batches of b sequences, full
 * activation recomputation. Notation: l layers, h hidden, a heads, s sequence,
 * V vocabulary, B global batch, m = B/(b d) micro-batches per replica.
 *
 * The work, as the paper counts it (its eq. 3, GEMMs only, four passes: forward,
 * recomputed forward, backward twice the forward):
 *   F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))  FLOPs per iteration,
 * reported as F / (n T). Per micro-batch on one GPU:
 *   layer    96 b s h^2 (1 + s/(6h)) / t FLOPs at e x peak (e, the one fitted
 *            constant), plus the memory-bound operations Megatron runs between
 *            the GEMMs, bytes at the HBM bandwidth: per token, forward, 2-byte
 *            elements: two LayerNorms (2h each), two fused bias+dropout+residual
 *            (3.5h each, with the 1-byte mask), all replicated over the t ranks
 *            (11h); fused bias+GeLU (8h/t); fused scale+mask+softmax and the
 *            attention dropout (4.5 s a/t); times the same four passes;
 *   tp       six ring all-reduces of 2bsh bytes (two in the forward, two in the
 *            recomputed forward, two in the backward), 2(t-1) alpha +
 *            2(t-1)/t 2bsh beta on the node's link, not overlapped (Megatron v2);
 *   logits   the last stage's vocabulary-parallel output layer, 6 b s h V / t
 *            FLOPs at e x peak (forward and backward, not recomputed);
 *   p2p      a send forward and one backward per chunk boundary: 2bsh/t bytes on
 *            the GPU's own NIC with the scatter/gather optimization when stages
 *            sit on different nodes (plus the all-gather inside the node), 2bsh
 *            on the node's link otherwise.
 * With S a stage's micro-batch time and S_last the last stage's (S + logits),
 *   pipeline  m S_last + (p - 1)/v S: the heaviest stage sets the steady state,
 *             the fill and drain cost (p-1)/v stage times (the paper's bubble
 *             (p-1)/(v m) for equal stages; dt_plan_pipeline agrees, tests);
 *   dp        the heaviest stage's gradients, 2 bytes per parameter, all-reduced
 *             over the d replicas hierarchically: k replicas per node over the
 *             node's link, then across the N = d/k nodes, each GPU on its own
 *             NIC with 1/k of the bytes; exposed after the pipeline (Megatron's
 *             local DDP) or overlapped with the last micro-batch's backward
 *             (PyTorch DDP); with p > 1 the tied embedding's gradient is also
 *             all-reduced between the first and last stages;
 *   optimizer mixed-precision Adam over the stage's parameters, memory-bound,
 *             DT_SCALE_OPTIM_BYTES per parameter at the HBM bandwidth.
 * Ranks are numbered as Megatron-LM does: tp innermost, then replicas, then
 * stages. Left out (each under 1% of an iteration on Narayanan et al.'s Table 1
 * rows): the embedding lookup, the cross-entropy's elementwise passes over the
 * logits, the gradient-norm reduction, data loading.
 * Cost: O(1) per prediction; the fit bisects e, 200 predictions. */
#include "dtrain/plan.h"

#include <math.h>

#define DT_SCALE_GRAD_BYTES 2.0
/* fp32 master, m, v read and written (24), the 4-byte main gradient read, the
 * 2-byte working copy written */
#define DT_SCALE_OPTIM_BYTES 30.0
/* replicated, split and attention elements per token per layer, forward */
#define DT_SCALE_ELEM_REPL 11.0
#define DT_SCALE_ELEM_SPLIT 8.0
#define DT_SCALE_ELEM_ATTN 4.5

double dt_plan_scale_flops(const dt_plan_scale_gpt *g, double batch) {
    double l = g->layers, h = g->hidden, s = g->seq, V = g->vocab;
    return 96.0 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

double dt_plan_scale_params(const dt_plan_scale_gpt *g) {
    double l = g->layers, h = g->hidden, s = g->seq, V = g->vocab;
    return 12.0 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
}

void dt_plan_scale_dgx_a100(dt_plan_scale_hw *hw) {
    hw->peak = 312e12;              /* dense bf16/fp16 with tensor cores */
    hw->gemm_eff = 0;               /* to be fitted (dt_plan_scale_fit) */
    hw->hbm_bw = 2.039e12;          /* A100 80 GB SXM */
    hw->per_node = 8;
    hw->intra.alpha = 2e-6;         /* NVSwitch: 600 GB/s both ways, 300 GB/s each way */
    hw->intra.beta = 1 / 300e9;
    hw->inter.alpha = 5e-6;         /* one 200 Gbit/s HDR InfiniBand NIC per GPU: 25 GB/s each way */
    hw->inter.beta = 1 / 25e9;
}

static double ring(const dt_link_cost *k, int ranks, double bytes) {
    if (ranks < 2) return 0;
    return 2.0 * (ranks - 1) * k->alpha + 2.0 * (ranks - 1) / ranks * bytes * k->beta;
}

static dt_status check(const dt_plan_scale_gpt *g, const dt_plan_scale_layout *l, const dt_plan_scale_hw *hw) {
    if (g->layers < 1 || g->hidden < 1 || g->heads < 1 || g->seq < 1 || g->vocab < 1)
        return dt_errorf(DT_ERR_INVALID, "plan: GPT sizes must be at least 1");
    if (l->tp < 1 || l->pp < 1 || l->dp < 1 || l->micro < 1 || l->batch < 1 || l->chunks < 1)
        return dt_errorf(DT_ERR_INVALID, "plan: degrees, micro-batch, batch and chunks must be at least 1");
    if (g->heads % l->tp || g->hidden % g->heads)
        return dt_errorf(DT_ERR_INVALID, "plan: %d heads of hidden %d do not split %d ways", g->heads, g->hidden, l->tp);
    if (g->layers % (l->pp * l->chunks))
        return dt_errorf(DT_ERR_INVALID, "plan: %d layers do not make %d stages x %d chunks", g->layers, l->pp, l->chunks);
    if (l->batch % (l->micro * l->dp))
        return dt_errorf(DT_ERR_INVALID, "plan: batch %d is not a multiple of micro-batch %d x dp %d", l->batch, l->micro,
                         l->dp);
    int m = l->batch / (l->micro * l->dp);
    if (l->chunks > 1 && m % l->pp)
        return dt_errorf(DT_ERR_INVALID, "plan: the interleaved schedule needs micro-batches (%d) a multiple of pp %d", m,
                         l->pp);
    if (hw->per_node < 1 || l->tp > hw->per_node || hw->per_node % l->tp)
        return dt_errorf(DT_ERR_INVALID, "plan: --tp %d does not fit nodes of %d GPUs", l->tp, hw->per_node);
    if (!(hw->peak > 0) || !(hw->gemm_eff > 0) || hw->gemm_eff > 1 || !(hw->hbm_bw > 0) || hw->intra.alpha < 0 ||
        hw->intra.beta < 0 || hw->inter.alpha < 0 || hw->inter.beta < 0)
        return dt_errorf(DT_ERR_INVALID, "plan: hardware constants must be positive (GEMM efficiency in (0, 1])");
    return DT_OK;
}

dt_status dt_plan_scale_predict(const dt_plan_scale_gpt *g, const dt_plan_scale_layout *l, const dt_plan_scale_hw *hw,
                                dt_plan_scale_pred *out) {
    dt_status st = check(g, l, hw);
    if (st != DT_OK) return st;
    double h = g->hidden, s = g->seq, a = g->heads, V = g->vocab, b = l->micro, t = l->tp;
    int p = l->pp, v = l->chunks, d = l->dp, m = l->batch / (l->micro * l->dp);
    double rate = hw->gemm_eff * hw->peak, act = 2 * b * s * h; /* one activation, bytes */
    double per_stage = (double)g->layers / p;

    /* ---- one micro-batch through one layer, forward and backward --------------- */
    double gemm = 96 * b * s * h * h * (1 + s / (6 * h)) / t / rate;
    double mem = 4 * 2 * b * s * (DT_SCALE_ELEM_REPL * h + (DT_SCALE_ELEM_SPLIT * h + DT_SCALE_ELEM_ATTN * s * a) / t) /
                 hw->hbm_bw;
    double tp = 6 * ring(&hw->intra, l->tp, act);

    /* ---- stage boundaries: Megatron places stage k on ranks k t d .. ---------- */
    double p2p = 0;
    if (p > 1) {
        bool cross = l->tp * d >= hw->per_node;
        double one = cross ? hw->inter.alpha + act / t * hw->inter.beta +
                                 (t > 1 ? (t - 1) * hw->intra.alpha + (t - 1) / t * act * hw->intra.beta : 0)
                           : hw->intra.alpha + act * hw->intra.beta;
        p2p = 2.0 * v * one;
    }
    double logits = 6 * b * s * h * V / t / rate;
    double S = per_stage * (gemm + mem + tp) + p2p, S_last = S + logits;

    /* ---- the pipeline ------------------------------------------------------------- */
    double pipe = m * S_last + (double)(p - 1) / v * S;

    /* ---- gradients and the optimizer on the heaviest stage's GPU --------------- */
    double params = (per_stage * (12 * h * h + 13 * h) + (V + s) * h) / t;
    double grad = DT_SCALE_GRAD_BYTES * params;
    int k = hw->per_node / l->tp < d ? hw->per_node / l->tp : d; /* replicas per node */
    int N = (d + k - 1) / k;
    double dp = ring(&hw->intra, k, grad) + ring(&hw->inter, N, grad / k);
    if (l->dp_overlap) {
        double last_bwd = 0.75 * S_last; /* the recomputed forward and the backward */
        dp = dp > last_bwd ? dp - last_bwd : 0;
    }
    if (p > 1) dp += ring(&hw->inter, 2, DT_SCALE_GRAD_BYTES * V * h / t);
    double optim = params * DT_SCALE_OPTIM_BYTES / hw->hbm_bw;

    out->micro_batches = m;
    out->flops = dt_plan_scale_flops(g, l->batch);
    out->iter_s = pipe + dp + optim;
    out->flops_per_gpu = out->flops / ((double)l->tp * p * d * out->iter_s);
    out->stage_s = S_last;
    out->gemm_s = m * (per_stage * gemm + logits);
    out->memory_s = m * per_stage * mem;
    out->tp_s = m * per_stage * tp;
    out->p2p_s = m * p2p;
    out->bubble_s = (double)(p - 1) / v * S;
    out->dp_s = dp;
    out->optim_s = optim;
    return DT_OK;
}

dt_status dt_plan_scale_fit(const dt_plan_scale_gpt *g, const dt_plan_scale_layout *l, const dt_plan_scale_hw *hw,
                            double flops_per_gpu, double *gemm_eff) {
    dt_plan_scale_hw w = *hw;
    dt_plan_scale_pred pr;
    w.gemm_eff = 1;
    dt_status st = dt_plan_scale_predict(g, l, &w, &pr);
    if (st != DT_OK) return st;
    if (!(flops_per_gpu > 0) || pr.flops_per_gpu < flops_per_gpu)
        return dt_errorf(DT_ERR_INVALID, "plan: %.4g FLOP/s per GPU is out of reach (%.4g at GEMM efficiency 1)",
                         flops_per_gpu, pr.flops_per_gpu);
    /* achieved FLOP/s rises with e: bisect on (0, 1] */
    double lo = 0, hi = 1;
    for (int i = 0; i < 200 && hi - lo > 1e-15; i++) {
        w.gemm_eff = 0.5 * (lo + hi);
        dt_plan_scale_predict(g, l, &w, &pr);
        if (pr.flops_per_gpu < flops_per_gpu)
            lo = w.gemm_eff;
        else
            hi = w.gemm_eff;
    }
    *gemm_eff = 0.5 * (lo + hi);
    return DT_OK;
}
