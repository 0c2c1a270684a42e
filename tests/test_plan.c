/* The planner's closed-form parts (include/dtrain/plan.h) against values
 * computed by hand: the ZeRO paper's memory figure (7.5B parameters, 64-way
 * data parallelism, mixed-precision Adam: 120 / 31.4 / 16.6 / 1.9 GB per
 * device), the division by tp x pp, refusals; pipeline makespans and bubbles
 * for equal stages ((P-1)/(M+P-1)), with transfer time, and unequal stages
 * (traced by hand in the comments). */
#include "dtrain/plan.h"
#include "testhelp.h"

#include <math.h>

static void zero_figure(void) {
    /* Rajbhandari et al. 2020, figure 1: Psi = 7.5e9, Nd = 64, K = 12, fp16 params and grads */
    const double want[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
    const double paper[4] = {120, 31.4, 16.6, 1.9}; /* GB, as printed */
    for (int z = 0; z <= 3; z++) {
        dt_plan_mem_in in = {.params = 7.5e9, .dp = 64, .tp = 1, .pp = 1, .zero = z,
                             .param_bytes = 2, .grad_bytes = 2, .optim_bytes = 12};
        dt_plan_mem m;
        test_cond("ZeRO figure: computed", dt_plan_memory(&in, &m) == DT_OK);
        printf("ZeRO stage %d: %.4f GB per device (paper: %.1f)\n", z, m.total / 1e9, paper[z]);
        test_cond("ZeRO figure: exact", m.total == want[z]);
        test_cond("ZeRO figure: the paper's rounding", fabs(m.total / 1e9 - paper[z]) < 0.05);
    }
}

static void shares(void) {
    dt_plan_mem_in in = {.params = 1e6, .dp = 4, .tp = 2, .pp = 2, .zero = 1, .param_bytes = 4, .grad_bytes = 4,
                         .optim_bytes = 8, .act_bytes = 1000, .buffer_bytes = 24};
    dt_plan_mem m;
    test_cond("shares: computed", dt_plan_memory(&in, &m) == DT_OK);
    test_cond("tp x pp divide the model", m.params == 1e6 && m.grads == 1e6 && m.optim == 5e5);
    test_cond("activations and buffers added", m.total == 1e6 + 1e6 + 5e5 + 1000 + 24);
    in.dp = 0;
    test_cond("dp 0 refused", dt_plan_memory(&in, &m) == DT_ERR_INVALID);
    in.dp = 2;
    in.zero = 4;
    test_cond("ZeRO 4 refused", dt_plan_memory(&in, &m) == DT_ERR_INVALID);
    in.zero = 0;
    in.params = -1;
    test_cond("negative size refused", dt_plan_memory(&in, &m) == DT_ERR_INVALID);
}

static void pipelines(void) {
    double f[8], b[8], busy;
    for (int i = 0; i < 8; i++) f[i] = 1, b[i] = 2;
    for (int s = 0; s < 2; s++) {
        dt_plan_sched sc = s ? DT_PLAN_1F1B : DT_PLAN_GPIPE;
        for (int P = 1; P <= 8; P *= 2)
            for (int M = 1; M <= 16; M *= 2) {
                double span = dt_plan_pipeline(sc, P, 1, M, f, b, NULL, &busy);
                double bubble = 1 - busy / span, want = (double)(P - 1) / (M + P - 1);
                test_cond("equal stages: (M+P-1)(f+b)", span == (M + P - 1) * 3.0);
                test_cond("equal stages: bubble (P-1)/(M+P-1)", fabs(bubble - want) < 1e-12);
            }
    }
    /* P 2, M 2, f = b = 1, p2p 0.5: stage 1 runs F0 [1.5, 2.5], F1 or B0 ...; both end at 7 */
    double half[2] = {0, 0.5};
    double span_g = dt_plan_pipeline(DT_PLAN_GPIPE, 2, 1, 2, f, f, half, NULL);
    double span_1 = dt_plan_pipeline(DT_PLAN_1F1B, 2, 1, 2, f, f, half, NULL);
    printf("P 2, M 2, p2p 0.5: gpipe %.2f, 1f1b %.2f (hand: 7)\n", span_g, span_1);
    test_cond("transfer time: gpipe 7", span_g == 7);
    test_cond("transfer time: 1f1b 7", span_1 == 7);
    /* unequal: fwd {1, 2}, bwd {2, 4}, M 4: stage 1 busy 24 from t = 1 with no gap;
     * stage 0's last backward waits for stage 1's, then takes 2: 27 */
    double uf[2] = {1, 2}, ub[2] = {2, 4};
    double span_u = dt_plan_pipeline(DT_PLAN_1F1B, 2, 1, 4, uf, ub, NULL, &busy);
    printf("unequal stages: 1f1b %.2f (hand: 27), busiest stage %.2f\n", span_u, busy);
    test_cond("unequal stages: 27", span_u == 27 && busy == 24);
    test_cond("gpipe no shorter than 1f1b here", dt_plan_pipeline(DT_PLAN_GPIPE, 2, 1, 4, uf, ub, NULL, NULL) >= 27);
    test_cond("P 0 refused", dt_plan_pipeline(DT_PLAN_1F1B, 0, 1, 4, uf, ub, NULL, NULL) < 0);
    test_cond("M 0 refused", dt_plan_pipeline(DT_PLAN_1F1B, 2, 1, 0, uf, ub, NULL, NULL) < 0);
    test_cond("V 0 refused", dt_plan_pipeline(DT_PLAN_1F1B, 2, 0, 4, uf, ub, NULL, NULL) < 0);
}

/* Interleaved 1F1B (Narayanan et al. 2021): equal chunks f, b (a stage's F =
 * V f, B = V b) and free transfers take (M + (P-1)/V)(F + B), the bubble
 * (P-1)/(VM+P-1) of the step, for M a multiple of P; hand-traced with
 * transfers; the order never deadlocks, where 1F1B's over V chunks would. */
static void interleaved(void) {
    double f[64], b[64], busy;
    for (int i = 0; i < 64; i++) f[i] = 0.5, b[i] = 1.25;
    for (int P = 2; P <= 4; P += 2)
        for (int V = 2; V <= 3; V++)
            for (int M = P; M <= 4 * P; M += P) {
                double F = V * 0.5, B = V * 1.25, want = (M + (double)(P - 1) / V) * (F + B);
                double span = dt_plan_pipeline(DT_PLAN_INTERLEAVED, P, V, M, f, b, NULL, &busy);
                double bubble = 1 - busy / span, wb = (double)(P - 1) / (V * M + P - 1);
                printf("interleaved P %d V %d M %2d: %.4f, (M + (P-1)/V)(F+B) = %.4f; bubble %.4f, (P-1)/(VM+P-1) = "
                       "%.4f\n", P, V, M, span, want, bubble, wb);
                test_cond("interleaved, equal chunks: (M + (P-1)/V)(F+B)", fabs(span - want) < 1e-9);
                test_cond("interleaved: busy M(F+B)", fabs(busy - M * (F + B)) < 1e-9);
                test_cond("interleaved: bubble (P-1)/(VM+P-1)", fabs(bubble - wb) < 1e-12);
            }
    /* never deadlocks: every P, V, M, M not a multiple of P too (the
     * runtime's chunk-major fallback); 1F1B's order over V > 1 chunks does */
    int stuck = 0;
    for (int P = 1; P <= 5; P++)
        for (int V = 1; V <= 4; V++)
            for (int M = 1; M <= 12; M++)
                stuck += !(dt_plan_pipeline(DT_PLAN_INTERLEAVED, P, V, M, f, b, NULL, NULL) > 0);
    printf("interleaved: %d of 240 (P, V, M) deadlocked\n", stuck);
    test_cond("interleaved: never deadlocks", stuck == 0);
    test_cond("1f1b's order over 2 chunks a stage deadlocks: refused",
              dt_plan_pipeline(DT_PLAN_1F1B, 2, 2, 4, f, b, NULL, NULL) < 0);
    double s1 = dt_plan_pipeline(DT_PLAN_1F1B, 4, 1, 8, f, b, NULL, NULL);
    test_cond("interleaved, V 1: 1F1B's", dt_plan_pipeline(DT_PLAN_INTERLEAVED, 4, 1, 8, f, b, NULL, NULL) == s1);
    /* P 2, V 2, M 2, f = b = 1, every transfer 0.5 (chunk c on stage c % 2).
     * Stage 0 runs F(c0,m0) [0,1] F(c0,m1) [1,2]; stage 1 F(c1,m0) [1.5,2.5]
     * F(c1,m1) [2.5,3.5]; stage 0 F(c2,m0) [3,4] F(c2,m1) [4,5]; stage 1
     * F(c3,m0) [4.5,5.5] B(c3,m0) [5.5,6.5] F(c3,m1) [6.5,7.5] B(c3,m1)
     * [7.5,8.5]; stage 0 B(c2,m0) [7,8] B(c2,m1) [9,10]; stage 1 B(c1,m0)
     * [8.5,9.5] B(c1,m1) [10.5,11.5]; stage 0 B(c0,m0) [10,11] B(c0,m1)
     * [12,13]: 13, where free transfers take 10. 1F1B over the same stages
     * (f = b = 2) takes 13 too: (M + P - 1)(f + b) = 12 and one transfer's
     * wait each way; the smaller bubble went to three boundaries' transfers. */
    double one[4] = {1, 1, 1, 1}, half[4] = {0, 0.5, 0.5, 0.5}, two[2] = {2, 2};
    double span = dt_plan_pipeline(DT_PLAN_INTERLEAVED, 2, 2, 2, one, one, half, NULL);
    double plain = dt_plan_pipeline(DT_PLAN_1F1B, 2, 1, 2, two, two, half, NULL);
    printf("P 2, V 2, M 2, p2p 0.5: interleaved %.2f (hand: 13), 1f1b %.2f (hand: 13)\n", span, plain);
    test_cond("interleaved, transfers: 13 by hand", span == 13);
    test_cond("1f1b, the same stages: 13 by hand", plain == 13);
}

/* Narayanan et al. 2021 (arXiv 2104.04473), Table 1: GPT, s 2048, V 51200, on
 * DGX A100 nodes. Micro-batch, interleaving (layers per chunk) and DDP from
 * Megatron-LM's examples/sc21/run_table_1.sh, which reproduces the table. */
typedef struct table1_row {
    double billions;                /* as printed */
    int heads, hidden, layers, tp, pp, gpus, batch;
    double tflops, pct, pflops;     /* per GPU, of peak, aggregate: as printed */
    int micro, chunks, torch_ddp;
} table1_row;

static const table1_row table1[10] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4, 16, 1, 1},
    {3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8, 16, 1, 1},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2, 16, 1, 1},
    {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6, 8, 1, 1},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8, 4, 1, 0},
    {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8, 2, 3, 0},    /* 5 layers a chunk */
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1, 2, 2, 0},   /* 5 */
    {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4, 1, 2, 0}, /* 3 */
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2, 1, 3, 0},/* 1 */
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0, 1, 1, 0},
};

static void table1_case(const table1_row *r, dt_plan_scale_gpt *g, dt_plan_scale_layout *l) {
    *g = (dt_plan_scale_gpt){.layers = r->layers, .hidden = r->hidden, .heads = r->heads, .seq = 2048, .vocab = 51200};
    *l = (dt_plan_scale_layout){.tp = r->tp, .pp = r->pp, .dp = r->gpus / (r->tp * r->pp), .micro = r->micro,
                                .batch = r->batch, .chunks = r->chunks, .dp_overlap = r->torch_ddp};
}

/* Predicts every row with e fitted on row 0; returns how many are within 15%. */
static int table1_predict(const dt_plan_scale_hw *base, bool print, double *e_out) {
    dt_plan_scale_gpt g;
    dt_plan_scale_layout l;
    dt_plan_scale_hw hw = *base;
    table1_case(&table1[0], &g, &l);
    test_cond("Table 1: e fitted on row 1", dt_plan_scale_fit(&g, &l, &hw, table1[0].tflops * 1e12, &hw.gemm_eff) == DT_OK);
    *e_out = hw.gemm_eff;
    int within = 0;
    if (print)
        printf("| params (B) | t | p | d | b | v | m | reported TFLOP/s | predicted | error | bubble | tp | memory-bound |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 10; i++) {
        const table1_row *r = &table1[i];
        dt_plan_scale_pred pr;
        table1_case(r, &g, &l);
        test_cond("Table 1: predicted", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_OK);
        double x = pr.flops_per_gpu / 1e12, err = (x - r->tflops) / r->tflops;
        within += fabs(err) <= 0.15;
        if (print)
            printf("| %.1f | %d | %d | %d | %d | %d | %d | %.0f | %.1f | %+.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", r->billions,
                   l.tp, l.pp, l.dp, l.micro, l.chunks, pr.micro_batches, r->tflops, x, 100 * err,
                   100 * pr.bubble_s / pr.iter_s, 100 * pr.tp_s / pr.iter_s, 100 * pr.memory_s / pr.iter_s);
    }
    return within;
}

static void megatron_table1(void) {
    /* eq. 3 for row 1 by hand: 96 B s l h^2 + 16 B s^2 l h + 6 B s h V with B 512,
     * s 2048, l 24, h 2304, V 51200: 15466830067924992 (an exact double) */
    dt_plan_scale_gpt g;
    dt_plan_scale_layout l;
    table1_case(&table1[0], &g, &l);
    double F = dt_plan_scale_flops(&g, 512);
    printf("eq. 3, row 1: %.17g (hand: 15466830067924992)\n", F);
    test_cond("eq. 3 by hand", fabs(F - 15466830067924992.0) <= 16);
    /* the transcription: eq. 2 rounds to the printed size, n x TFLOP/s to the
     * printed aggregate (within the per-GPU figure's rounding), TFLOP/s / 312 to
     * the printed percentage */
    for (int i = 0; i < 10; i++) {
        const table1_row *r = &table1[i];
        table1_case(r, &g, &l);
        test_cond("Table 1: eq. 2 gives the printed size", fabs(dt_plan_scale_params(&g) / 1e9 - r->billions) < 0.0501);
        test_cond("Table 1: aggregate", fabs(r->gpus * r->tflops / 1e3 - r->pflops) <= r->gpus * 0.5e-3 + 0.05);
        test_cond("Table 1: percentage of peak", fabs(100 * r->tflops / 312 - r->pct) <= 0.5 + 100 * 0.5 / 312);
        test_cond("Table 1: a whole layout", l.dp * l.tp * l.pp == r->gpus && r->batch % (l.micro * l.dp) == 0);
    }

    dt_plan_scale_hw hw;
    dt_plan_scale_dgx_a100(&hw);
    double e;
    int within = table1_predict(&hw, true, &e);
    printf("GEMM efficiency fitted on row 1: e = %.4f (%.1f TFLOP/s); %d of 10 rows within 15%%\n", e, e * 312, within);
    test_cond("Table 1: at least 5 rows within 15%", within >= 5);
    table1_case(&table1[0], &g, &l);
    hw.gemm_eff = e;
    dt_plan_scale_pred pr;
    dt_plan_scale_predict(&g, &l, &hw, &pr);
    test_cond("the fitted e reproduces row 1", fabs(pr.flops_per_gpu - 137e12) < 1e-6 * 137e12);

    /* the same without the memory-bound operations (HBM infinitely fast) */
    dt_plan_scale_hw gemm_only = hw;
    gemm_only.hbm_bw = INFINITY;
    double e0;
    int within0 = table1_predict(&gemm_only, false, &e0);
    printf("GEMMs only (no memory-bound term): e = %.4f, %d of 10 rows within 15%%\n", e0, within0);
}

static void scale_closed_forms(void) {
    /* nothing but GEMMs (free links and memory, one replica): the prediction is e x peak */
    dt_plan_scale_gpt g = {.layers = 8, .hidden = 256, .heads = 4, .seq = 128, .vocab = 1000};
    dt_plan_scale_layout l = {.tp = 1, .pp = 1, .dp = 1, .micro = 2, .batch = 8, .chunks = 1};
    dt_plan_scale_hw hw = {.peak = 100e12, .gemm_eff = 0.5, .hbm_bw = INFINITY, .per_node = 8};
    dt_plan_scale_pred pr;
    test_cond("GEMMs only: predicted", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_OK);
    printf("GEMMs only: %.6g FLOP/s (hand: 5e13), %d micro-batches\n", pr.flops_per_gpu, pr.micro_batches);
    test_cond("GEMMs only: e x peak", fabs(pr.flops_per_gpu - 50e12) < 1e-9 * 50e12 && pr.micro_batches == 4);

    /* 4 stages, 4 micro-batches of 1: S = 2 layers x 96 b s h^2 (1 + s/6h) / rate, the
     * last stage adds 6 b s h V / rate; iteration 4 S_last + 3 S */
    l = (dt_plan_scale_layout){.tp = 1, .pp = 4, .dp = 1, .micro = 1, .batch = 4, .chunks = 1};
    test_cond("4 stages: predicted", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_OK);
    double rate = 50e12, S = 2 * 96.0 * 128 * 256 * 256 * (1 + 128.0 / (6 * 256)) / rate;
    double last = S + 6.0 * 128 * 256 * 1000 / rate, want = 4 * last + 3 * S;
    printf("4 stages: %.6g s (hand %.6g)\n", pr.iter_s, want);
    test_cond("4 stages: 4 S_last + 3 S", fabs(pr.iter_s - want) < 1e-12 * want);
    l.chunks = 2;
    test_cond("interleaved: 4 S_last + 3/2 S",
              dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_OK && fabs(pr.iter_s - (4 * last + 1.5 * S)) < 1e-12 * want);

    /* the closed-form pipeline against the simulated 1F1B (dt_plan_pipeline) for the
     * Table 1 rows without interleaving, stage times from the prediction */
    dt_plan_scale_dgx_a100(&hw);
    hw.gemm_eff = 0.6;
    const int rows[2] = {4, 9};
    for (int k = 0; k < 2; k++) {
        table1_case(&table1[rows[k]], &g, &l);
        test_cond("pipeline check: predicted", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_OK);
        int P = l.pp, M = pr.micro_batches;
        double f[64], b[64], Sm = pr.bubble_s / (P - 1);
        for (int s = 0; s < P; s++) {
            double st = s == P - 1 ? pr.stage_s : Sm;
            f[s] = st / 4, b[s] = 3 * st / 4;
        }
        double sim = dt_plan_pipeline(DT_PLAN_1F1B, P, 1, M, f, b, NULL, NULL);
        double closed = M * pr.stage_s + (P - 1) * Sm;
        printf("%.1fB, P %d, M %d: closed form %.4f s, simulated 1F1B %.4f s\n", table1[rows[k]].billions, P, M, closed, sim);
        test_cond("pipeline check: within 1%", fabs(closed - sim) < 0.01 * sim);
    }

    /* refusals */
    table1_case(&table1[5], &g, &l);
    l.chunks = 4; /* 60 layers on 4 stages: 15 a stage, not 4 chunks */
    test_cond("chunks that do not divide refused", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_ERR_INVALID);
    l.chunks = 3;
    l.batch = 1800; /* 28.1 micro-batches */
    test_cond("batch not a multiple refused", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_ERR_INVALID);
    l.batch = 64 * 30; /* m 30, not a multiple of 4: no interleaving */
    test_cond("interleaving needs m % p == 0", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_ERR_INVALID);
    l.chunks = 1;
    test_cond("the same without interleaving runs", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_OK);
    l.tp = 16, l.dp = 16; /* tp across nodes */
    test_cond("tp across nodes refused", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_ERR_INVALID);
    table1_case(&table1[0], &g, &l);
    hw.gemm_eff = 1.5;
    test_cond("e above 1 refused", dt_plan_scale_predict(&g, &l, &hw, &pr) == DT_ERR_INVALID);
    double e;
    test_cond("unreachable FLOP/s refused", dt_plan_scale_fit(&g, &l, &hw, 400e12, &e) == DT_ERR_INVALID);
}

int main(void) {
    zero_figure();
    shares();
    pipelines();
    interleaved();
    megatron_table1();
    scale_closed_forms();
    return test_report();
}
