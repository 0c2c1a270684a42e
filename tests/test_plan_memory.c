/* The planner's memory per rank (src/plan/layout_memory.c) on cases worked by
 * hand: a GPT of n_layer 4, n_embd C = 512, vocabulary V = 256, context
 * T = 16, whose arena is A = (V + T) C + 4 (12 C^2 + 13 C) + 2 C floats
 * (embeddings, four layers, the final LayerNorm; the LM head is tied to the
 * token embedding) and whose gradient buckets (4 MiB) are one layer each, the
 * last with the final LayerNorm, the embeddings alone; ZeRO 0-2 with a shard
 * of ceil(n/dp) floats of each bucket on rank 0; ZeRO-2's staging with and
 * without a spare core; the activations of 1F1B against GPipe, with
 * recomputation, as dt_acts_create allocates them; the unsharded copy of tp
 * and pp; the base with and without MPI; the setup peak of ZeRO-2; the
 * cluster file's base_mb and mpi_mb. */
#include "dtrain/pipeline.h"
#include "dtrain/plan.h"
#include "plan/plan_internal.h"
#include "plan_testhelp.h"
#include "testhelp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define C 512.0
#define LAYER (12 * C * C + 13 * C)
#define EMB ((256 + 16) * C)
#define ARENA (EMB + 4 * LAYER + 2 * C)

static dt_model_cfg gpt(const char *set) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_GPT);
    snprintf(mc.set, sizeof mc.set, "%s", set);
    return mc;
}

/* Stage s of a pipeline cut at blocks first..last of m. */
static stage_cost stage(const dt_model *m, int first, int last) {
    stage_cost sc = {.model = m, .nr = 1, .first = {first}, .last = {last}};
    sc.params = (double)(m->blocks[last].param_hi - m->blocks[first].param_lo);
    return sc;
}

static double own(const dt_plan_mem *m) {
    return m->params + m->grads + m->staging + m->optim + m->acts + m->buffers + m->copy;
}

/* plan_acts_floats against what dt_acts_create allocates. */
static void acts_sizes(void) {
    const char *sets[] = {"n_layer=2,n_embd=64,block_size=16"};
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        dt_model_cfg mc = gpt(sets[0]);
        if (k) dt_model_cfg_default(&mc, DT_MODEL_MLP);
        dt_model *m = NULL;
        test_cond("acts: model", dt_model_create(&m, &mc) == DT_OK);
        int nb = m->n_blocks;
        int ranges[3][2] = {{0, nb - 1}, {0, nb / 2}, {nb / 2, nb - 1}};
        for (int r = 0; r < 3; r++)
            for (int B = 1; B <= 7; B += 3) {
                dt_acts *a = NULL, *sh = NULL;
                test_cond("acts: allocated", dt_acts_create(&a, m, ranges[r][0], ranges[r][1], B) == DT_OK);
                test_cond("acts: shared allocated", dt_acts_create_shared(&sh, m, a) == DT_OK);
                double d1 = fabs(plan_acts_floats(m, ranges[r][0], ranges[r][1], B, false) - (double)a->n_floats);
                double d2 = fabs(plan_acts_floats(m, ranges[r][0], ranges[r][1], B, true) - (double)sh->n_floats);
                worst = fmax(worst, fmax(d1, d2));
                dt_acts_destroy(sh);
                dt_acts_destroy(a);
            }
        dt_model_destroy(m);
    }
    printf("activations: largest difference from dt_acts_create %.0f floats\n", worst);
    test_cond("acts: the allocation's floats exactly", worst == 0);
}

/* ZeRO 0-2 on 3 ranks, AdamW and SGD; staging with and without a spare core. */
static void zero_stages(void) {
    dt_model_cfg mc = gpt("n_layer=4,n_embd=512,block_size=16");
    dt_model *m = NULL;
    test_cond("zero: probe", dt_model_probe(&mc, &m) == DT_OK);
    test_cond("zero: the arena by hand", (double)m->n == ARENA);
    /* buckets: layer 4 + ln_f, layers 3, 2, 1, the embeddings; rank 0 of 3 holds ceil(n/3) of each */
    double shard = ceil((LAYER + 2 * C) / 3) + 3 * ceil(LAYER / 3) + ceil(EMB / 3);
    stage_cost sc = stage(m, 0, m->n_blocks - 1);
    dt_plan_in in = {.model = &mc, .batch = 12, .adam = true, .cluster = cluster(1, 3, 2)};
    dt_plan_mem z[3];
    for (int k = 0; k < 3; k++) {
        dt_plan_layout l = {.dp = 3, .tp = 1, .pp = 1, .micro = 1, .zero = k};
        plan_stage_memory(&in, &l, &sc, 0, &z[k]);
        printf("ZeRO-%d on 3 ranks: params %.0f grads %.0f staging %.0f optim %.0f (bytes)\n", k, z[k].params, z[k].grads,
               z[k].staging, z[k].optim);
    }
    test_cond("zero 0: 4A + 4A + 8A", z[0].params == 4 * ARENA && z[0].grads == 4 * ARENA && z[0].optim == 8 * ARENA);
    test_cond("zero 0: no staging, no setup peak", z[0].staging == 0 && z[0].setup == 0);
    test_cond("zero 1: optimizer state of the shard", z[1].grads == 4 * ARENA && z[1].optim == 8 * shard);
    test_cond("zero 2: gradients of the shard", z[2].grads == 4 * shard && z[2].optim == 8 * shard);
    test_cond("zero 2, no core to spare: the whole range staged", z[2].staging == 4 * ARENA);
    test_cond("zero 2: setup holds both arenas", z[2].setup == 8 * ARENA);
    in.cluster = cluster(1, 3, 8);
    dt_plan_layout l2 = {.dp = 3, .tp = 1, .pp = 1, .micro = 1, .zero = 2};
    dt_plan_mem spare;
    plan_stage_memory(&in, &l2, &sc, 0, &spare);
    double tied = 256 * C; /* the LM head's gradient lands in the token embedding's pages first */
    printf("ZeRO-2 staging with a core to spare: %.0f bytes (two buckets and the tied embedding: %.0f)\n", spare.staging,
           4 * (2 * LAYER + 2 * C + tied));
    test_cond("zero 2, a core to spare: two buckets, the tied tensor", spare.staging == 4 * (2 * LAYER + 2 * C + tied));
    /* ZeRO-3: the shard, the two largest adjacent buckets (two layers, one
     * with ln_f) and the embeddings' bucket, which the LM head reads */
    dt_plan_layout l3 = {.dp = 3, .tp = 1, .pp = 1, .micro = 1, .zero = 3};
    dt_plan_mem z3;
    plan_stage_memory(&in, &l3, &sc, 0, &z3);
    double bound = 4 * (2 * LAYER + 2 * C + EMB);
    printf("ZeRO-3 on 3 ranks: params %.0f bytes (shard %.0f + gathered %.0f)\n", z3.params, 4 * shard, bound);
    test_cond("zero 3: parameters of the shard and the gathered bound", z3.params == 4 * shard + bound);
    test_cond("zero 3: gradients and optimizer state as ZeRO-2",
              z3.grads == spare.grads && z3.optim == spare.optim && z3.staging == spare.staging);
    in.adam = false;
    plan_stage_memory(&in, &l2, &sc, 0, &spare);
    test_cond("sgd: 4 bytes of momentum a parameter of the shard", spare.optim == 4 * shard);
    dt_model_destroy(m);
}

/* Two stages, 4 micro-batches of 2 samples: GPipe keeps 4 sets, 1F1B 2 and 1. */
static void pipelines(void) {
    dt_model_cfg mc = gpt("n_layer=4,n_embd=64,block_size=16");
    dt_model *m = NULL;
    test_cond("pp: probe", dt_model_probe(&mc, &m) == DT_OK);
    int cut = 3, nb = m->n_blocks;
    stage_cost sc[2] = {stage(m, 0, cut - 1), stage(m, cut, nb - 1)};
    double slot[2], shared[2];
    for (int s = 0; s < 2; s++) {
        slot[s] = plan_acts_floats(m, sc[s].first[0], sc[s].last[0], 2, false);
        shared[s] = plan_acts_floats(m, sc[s].first[0], sc[s].last[0], 2, true);
    }
    dt_plan_in in = {.model = &mc, .batch = 8, .adam = true, .cluster = cluster(1, 2, 2)};
    dt_plan_layout g = {.dp = 1, .tp = 1, .pp = 2, .micro = 4, .sched = DT_PLAN_GPIPE};
    dt_plan_layout f = g, r = g;
    f.sched = r.sched = DT_PLAN_1F1B;
    r.recompute = true;
    dt_plan_mem mg[2], mf[2], mr[2];
    for (int s = 0; s < 2; s++) {
        plan_stage_memory(&in, &g, &sc[s], s, &mg[s]);
        plan_stage_memory(&in, &f, &sc[s], s, &mf[s]);
        plan_stage_memory(&in, &r, &sc[s], s, &mr[s]);
        printf("stage %d: activations GPipe %.0f, 1F1B %.0f, 1F1B recomputing %.0f bytes\n", s, mg[s].acts, mf[s].acts,
               mr[s].acts);
    }
    test_cond("GPipe: M sets on every stage", mg[0].acts == 16 * slot[0] && mg[1].acts == 16 * slot[1]);
    test_cond("1F1B: P - s sets", mf[0].acts == 4 * 2 * slot[0] && mf[1].acts == 4 * 1 * slot[1]);
    test_cond("recompute: one whole set and the slots' boundaries",
              mr[0].acts == 4 * (slot[0] + 2 * shared[0]) && mr[1].acts == 4 * (slot[1] + shared[1]));
    double din = ceil((double)m->blocks[cut].in_dim * 2 / 16) * 16;
    double dout = ceil((double)m->blocks[cut - 1].out_dim * 2 / 16) * 16;
    /* receives posted one ahead: two buffers for each direction a stage receives in */
    test_cond("buffers: two output-gradient receives on stage 0", mg[0].buffers == 4 * 2 * dout &&
                                                                     mf[0].buffers == 4 * 2 * dout);
    test_cond("buffers: an input gradient a slot and two activation receives on stage 1",
              mg[1].buffers == 4 * (4 + 2) * din && mf[1].buffers == 4 * (1 + 2) * din);
    test_cond("pp: every stage holds the whole arena and the unsharded copy",
              mf[1].params == 4.0 * (double)m->n && mf[1].grads == 4.0 * (double)m->n && mf[1].copy == 8.0 * (double)m->n);
    test_cond("pp: the optimizer state of the stage only", mf[1].optim == 8 * sc[1].params);
    /* dt_plan_predict: its own cut, the larger stage's memory */
    dt_plan_pred p;
    int n0 = 0, n1 = 0;
    test_cond("pp: predicted", dt_plan_predict(&in, &g, &p) == DT_OK && sscanf(p.partition, "%d,%d", &n0, &n1) == 2);
    stage_cost pc[2] = {stage(m, 0, n0 - 1), stage(m, n0, nb - 1)};
    dt_plan_mem pm[2];
    for (int s = 0; s < 2; s++) plan_stage_memory(&in, &g, &pc[s], s, &pm[s]);
    test_cond("pp: the layout's memory is its larger stage's", p.mem.total == fmax(pm[0].total, pm[1].total));
    dt_model_destroy(m);
}

/* Stage s of an interleaved pipeline of P stages: chunks s, s + P, ... of the
 * cut cut[0..nc] (chunk c is blocks cut[c]..cut[c+1]-1). */
static stage_cost chunks_of(const dt_model *m, const int *cut, int nc, int P, int s) {
    stage_cost sc = {.model = m};
    for (int c = s; c < nc; c += P) {
        sc.first[sc.nr] = cut[c];
        sc.last[sc.nr++] = cut[c + 1] - 1;
        sc.params += (double)(m->blocks[cut[c + 1] - 1].param_hi - m->blocks[cut[c]].param_lo);
    }
    return sc;
}

static double r16(double n) { return ceil(n / 16) * 16; }

/* Interleaved 1F1B, P 2, V 2, M 4, micro-batches of 2 samples: chunks c0..c3
 * (stage 0 holds c0 and c2, stage 1 c1 and c3). The ring of a chunk is as
 * deep as the most micro-batches the runtime's order keeps alive in it, over
 * every step of 1 to M micro-batches (dt_pipe_sched_depths). Counted by hand
 * from pipe_schedule.c's order: at M = 4 stage 0 warms up with 4 forwards
 * (c0 m0, c0 m1, c2 m0, c2 m1), then F c0 m2, B c2 m0, F c0 m3, B c2 m1, ...:
 * c0 holds 4, c2 2; stage 1 warms up with 2 (c1 m0, c1 m1), then F c3 m0,
 * B c3 m0, ..., F c1 m2, B c1 m0: c1 holds 3, c3 1. A batch of 3 rows runs
 * 2 micro-batches (a multiple of P: dt_pipe_sched_micro), one of 1 row runs
 * 1: neither keeps more alive. So the rings are {4, 2} on stage 0 and {3, 1}
 * on stage 1. */
static void interleaved(void) {
    int want[2][2] = {{4, 2}, {3, 1}}, depth[2][DT_PIPE_MAX_VIRTUAL];
    for (int s = 0; s < 2; s++) dt_pipe_sched_depths(DT_SCHED_INTERLEAVED, 2, 2, s, 4, depth[s]);
    printf("interleaved P 2 V 2 M 4: rings {%d, %d} on stage 0, {%d, %d} on stage 1 (hand: {4, 2}, {3, 1})\n",
           depth[0][0], depth[0][1], depth[1][0], depth[1][1]);
    test_cond("interleaved: the rings counted by hand", depth[0][0] == want[0][0] && depth[0][1] == want[0][1] &&
                                                            depth[1][0] == want[1][0] && depth[1][1] == want[1][1]);
    dt_model_cfg mc = gpt("n_layer=4,n_embd=64,block_size=16");
    dt_model *m = NULL;
    test_cond("il: probe", dt_model_probe(&mc, &m) == DT_OK);
    int nb = m->n_blocks, cut[5] = {0, 1, 3, 5, nb};
    stage_cost sc[2] = {chunks_of(m, cut, 4, 2, 0), chunks_of(m, cut, 4, 2, 1)};
    double slot[4], shared[4], din[4], dout[4];
    for (int c = 0; c < 4; c++) {
        slot[c] = plan_acts_floats(m, cut[c], cut[c + 1] - 1, 2, false);
        shared[c] = plan_acts_floats(m, cut[c], cut[c + 1] - 1, 2, true);
        din[c] = r16((double)m->blocks[cut[c]].in_dim * 2);
        dout[c] = r16((double)m->blocks[cut[c + 1] - 1].out_dim * 2);
    }
    dt_plan_in in = {.model = &mc, .batch = 8, .adam = true, .cluster = cluster(1, 2, 2)};
    dt_plan_layout l = {.dp = 1, .tp = 1, .pp = 2, .micro = 4, .sched = DT_PLAN_INTERLEAVED, .virt = 2}, r = l;
    r.recompute = true;
    dt_plan_mem ml[2], mr[2];
    for (int s = 0; s < 2; s++) {
        plan_stage_memory(&in, &l, &sc[s], s, &ml[s]);
        plan_stage_memory(&in, &r, &sc[s], s, &mr[s]);
        printf("interleaved stage %d: activations %.0f, recomputing %.0f, buffers %.0f bytes\n", s, ml[s].acts,
               mr[s].acts, ml[s].buffers);
    }
    test_cond("interleaved: each chunk's ring of whole sets",
              ml[0].acts == 4 * (4 * slot[0] + 2 * slot[2]) && ml[1].acts == 4 * (3 * slot[1] + 1 * slot[3]));
    test_cond("interleaved, recompute: a whole set a chunk and the rings' boundaries",
              mr[0].acts == 4 * (slot[0] + 4 * shared[0] + slot[2] + 2 * shared[2]) &&
                  mr[1].acts == 4 * (slot[1] + 3 * shared[1] + slot[3] + 1 * shared[3]));
    /* input gradients a slot but for chunk 0, and two receives a direction a
     * chunk: activations in but for chunk 0, gradients in but for chunk 3 */
    test_cond("interleaved: the gradient and receive buffers",
              ml[0].buffers == 4 * ((2 + 2) * din[2] + 2 * dout[0] + 2 * dout[2]) &&
                  ml[1].buffers == 4 * ((3 + 2) * din[1] + (1 + 2) * din[3] + 2 * dout[1]));
    double p0 = (double)(m->blocks[0].param_hi - m->blocks[0].param_lo) +
                (double)(m->blocks[4].param_hi - m->blocks[3].param_lo); /* chunks 0 and 2 */
    test_cond("interleaved: the optimizer state of both chunks", ml[0].optim == 8 * sc[0].params && sc[0].params == p0);
    /* one case whole, by hand: stage 1's own bytes (params, grads, optimizer,
     * activations, buffers, the unsharded copy) */
    double A = (double)m->n, want1 = 4 * A + 4 * A + 8 * sc[1].params + 4 * (3 * slot[1] + 1 * slot[3]) +
                                     4 * ((3 + 2) * din[1] + (1 + 2) * din[3] + 2 * dout[1]) + 8 * A;
    printf("interleaved stage 1: own %.0f bytes (hand %.0f)\n", own(&ml[1]), want1);
    test_cond("interleaved: stage 1's memory by hand", own(&ml[1]) == want1 && ml[1].total == want1);
    /* dt_plan_predict: its own cut into 4 chunks, the larger stage's memory */
    dt_plan_pred p;
    int k[4] = {0};
    test_cond("il: predicted", dt_plan_predict(&in, &l, &p) == DT_OK &&
                                   sscanf(p.partition, "%d,%d,%d,%d", &k[0], &k[1], &k[2], &k[3]) == 4);
    int pcut[5] = {0, k[0], k[0] + k[1], k[0] + k[1] + k[2], nb};
    stage_cost pc[2] = {chunks_of(m, pcut, 4, 2, 0), chunks_of(m, pcut, 4, 2, 1)};
    dt_plan_mem pm[2];
    for (int s = 0; s < 2; s++) plan_stage_memory(&in, &l, &pc[s], s, &pm[s]);
    printf("interleaved predicted: partition %s, %.0f bytes\n", p.partition, p.mem.total);
    test_cond("il: four chunks", pcut[4] - pcut[3] >= 1 && k[0] + k[1] + k[2] + k[3] == nb);
    test_cond("il: the layout's memory is its larger stage's", p.mem.total == fmax(pm[0].total, pm[1].total));
    dt_model_destroy(m);
}

/* --tp 2: the local arena, the logical copy and the checkpoints' gather buffers. */
static void tensor_parallel(void) {
    dt_model_cfg mc = gpt("n_layer=2,n_embd=64,block_size=16"), m2 = mc;
    m2.tp_size = 2;
    dt_model *full = NULL, *local = NULL;
    test_cond("tp: probes", dt_model_probe(&mc, &full) == DT_OK && dt_model_probe(&m2, &local) == DT_OK);
    double L = (double)full->n, A = (double)local->n;
    dt_plan_in in = {.model = &mc, .batch = 8, .adam = true, .cluster = cluster(1, 2, 2)};
    dt_plan_layout l = {.dp = 1, .tp = 2, .pp = 1, .micro = 1};
    dt_plan_pred p;
    test_cond("tp: predicted", dt_plan_predict(&in, &l, &p) == DT_OK);
    printf("tp 2: arena %.0f of %.0f floats; copy %.0f bytes (8L + 8(A + L) = %.0f)\n", A, L, p.mem.copy,
           8 * L + 8 * (A + L));
    test_cond("tp: the local arena", p.mem.params == 4 * A);
    test_cond("tp: the logical copy and the gather buffers", p.mem.copy == 8 * L + 8 * (A + L));
    dt_model_destroy(full);
    dt_model_destroy(local);
}

/* The base: the cluster's, MPI's share beyond one rank; the peak is the larger
 * of the kinds and ZeRO-2's setup. */
static void base_and_peak(void) {
    dt_model_cfg mc = gpt("n_layer=4,n_embd=512,block_size=16");
    dt_plan_cluster *c = cluster(1, 1, 1);
    c->base = 100e6;
    c->mpi_base = 10e6;
    dt_plan_in in = {.model = &mc, .batch = 16, .adam = true, .cluster = c};
    dt_plan_layout one = {.dp = 1, .tp = 1, .pp = 1, .micro = 1};
    dt_plan_pred p;
    test_cond("base: predicted", dt_plan_predict(&in, &one, &p) == DT_OK);
    test_cond("base: one rank, no MPI", p.mem.base == 100e6 && p.mem.total == 100e6 + own(&p.mem));
    c->per_host = 2;
    dt_plan_layout two = {.dp = 2, .tp = 1, .pp = 1, .micro = 1};
    test_cond("base: predicted on 2", dt_plan_predict(&in, &two, &p) == DT_OK);
    test_cond("base: two ranks, MPI's share too", p.mem.base == 110e6 && p.mem.total == 110e6 + own(&p.mem));
    /* 16 ranks on 2 hosts, ZeRO-2, one sequence of 4 tokens each: steps hold 4A + 12A/16, two of
     * the four layers' buckets (2A) and small activations, less than the 8A the setup holds before
     * the staging arena replaces the gradients */
    mc = gpt("n_layer=4,n_embd=512,block_size=4");
    dt_model *m = NULL;
    test_cond("setup: probe", dt_model_probe(&mc, &m) == DT_OK);
    double A = (double)m->n;
    dt_model_destroy(m);
    c->hosts = 2;
    c->per_host = 8;
    c->cores = 8;
    c->speed[1] = 1;
    dt_plan_layout z2 = {.dp = 16, .tp = 1, .pp = 1, .micro = 1, .zero = 2};
    test_cond("setup: predicted", dt_plan_predict(&in, &z2, &p) == DT_OK);
    printf("ZeRO-2 on 16 ranks: own %.1f MB at steps, %.1f MB at setup, total %.1f MB\n", own(&p.mem) / 1e6,
           p.mem.setup / 1e6, p.mem.total / 1e6);
    test_cond("setup: the peak when it is the larger", p.mem.setup > own(&p.mem) && p.mem.total == 110e6 + 8 * A);
}

/* base_mb and mpi_mb in a cluster file: optional, read back as written, never negative. */
static void cluster_file(void) {
    char path[] = "/tmp/dtrain_plan_memory_XXXXXX";
    int fd = mkstemp(path);
    test_cond("cluster: temp file", fd >= 0);
    if (fd < 0) return;
    close(fd);
    const char *plain = "{\"hosts\": 1, \"ranks_per_host\": 2, \"gflops\": 10, \"memory_gb\": 4, "
                        "\"local\": {\"latency_us\": 1, \"bandwidth_gbit\": 40}, \"cross\": {\"latency_us\": 1, "
                        "\"bandwidth_gbit\": 1}%s}";
    dt_plan_cluster *c = cluster(1, 1, 1);
    FILE *f = fopen(path, "w");
    fprintf(f, plain, "");
    fclose(f);
    test_cond("cluster: without a base", dt_plan_cluster_read(path, c) == DT_OK && c->base == 0 && c->mpi_base == 0);
    f = fopen(path, "w");
    fprintf(f, plain, ", \"base_mb\": 15.5, \"mpi_mb\": 10.25");
    fclose(f);
    test_cond("cluster: base_mb and mpi_mb", dt_plan_cluster_read(path, c) == DT_OK && c->base == 15.5e6 &&
                                                 c->mpi_base == 10.25e6);
    test_cond("cluster: written", dt_plan_cluster_write(path, c) == DT_OK);
    c->base = c->mpi_base = 0;
    test_cond("cluster: read back", dt_plan_cluster_read(path, c) == DT_OK && c->base == 15.5e6 && c->mpi_base == 10.25e6);
    f = fopen(path, "w");
    fprintf(f, plain, ", \"base_mb\": -3");
    fclose(f);
    dt_status st = dt_plan_cluster_read(path, c);
    printf("refused: %s\n", st ? dt_error_msg() : "(not refused)");
    test_cond("cluster: a negative base refused in one line",
              st == DT_ERR_INVALID && strstr(dt_error_msg(), "base_mb") && !strchr(dt_error_msg(), '\n'));
    f = fopen(path, "w");
    fprintf(f, plain, ", \"mpi_mb\": \"ten\"");
    fclose(f);
    test_cond("cluster: a base that is no number refused", dt_plan_cluster_read(path, c) == DT_ERR_INVALID);
    remove(path);
}

/* The base measured here: a tiny GPT on its corpus, without MPI. */
static void calibrated(void) {
    dt_model_cfg mc = gpt("n_layer=1,n_embd=32,block_size=16");
    double base = -1, mpi = -1;
    test_cond("calibrate: batch 0 refused", dt_plan_calibrate_base(&mc, NULL, 0, false, &base, &mpi) == DT_ERR_INVALID);
    if (access("/usr/share/games/fortunes", R_OK) != 0) {
        printf("skip the measured base: no /usr/share/games/fortunes\n");
        return;
    }
    dt_status st = dt_plan_calibrate_base(&mc, NULL, 4, false, &base, &mpi);
    printf("base measured here: %.1f MB (MPI not asked: %.0f)\n", base / 1e6, mpi);
    test_cond("calibrate: measured", st == DT_OK);
    test_cond("calibrate: a few MB of runtime and data, no MPI", base > 1e6 && base < 1e9 && mpi == 0);
    st = dt_plan_calibrate_base(&mc, "/nonexistent/corpus", 4, false, &base, &mpi);
    test_cond("calibrate: a missing corpus named", st != DT_OK && strstr(dt_error_msg(), "/nonexistent"));
}

int main(void) {
    acts_sizes();
    zero_stages();
    pipelines();
    interleaved();
    tensor_parallel();
    base_and_peak();
    cluster_file();
    calibrated();
    return test_report();
}
