/* The planner's step-time model (dt_plan_predict, dt_plan_layouts) on cases
 * worked by hand: one rank's step is the profile's line plus the optimizer;
 * a tensor-parallel rank pays its shard's share of a micro-batch's fixed part;
 * a micro-batch priced at its rows from the profile's measured sizes;
 * an exposed reduction with and without a core to spare; stages cut by host
 * speed and a batch split by speed on unequal hosts; the codecs' bytes on the
 * wire; every refusal in one line; and the enumeration's variants. */
#include "dtrain/parallel.h"
#include "dtrain/plan.h"
#include "plan/plan_internal.h"
#include "plan_testhelp.h"
#include "testhelp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dt_model_cfg mlp(void) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_MLP);
    return mc;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-6 * fabs(b) + 1e-15; }

static void one_rank(void) {
    dt_model_cfg mc = mlp();
    dt_model *m = NULL;
    test_cond("one rank: probe", dt_model_probe(&mc, &m) == DT_OK);
    double fps = (double)m->flops_per_sample, P = (double)m->n;
    dt_model_destroy(m);
    dt_plan_in in = {.model = &mc, .batch = 64, .adam = true, .cluster = cluster(1, 1, 1)};
    dt_plan_layout l = {.dp = 1, .tp = 1, .pp = 1, .micro = 1};
    dt_plan_pred p;
    test_cond("one rank: predicted", dt_plan_predict(&in, &l, &p) == DT_OK);
    double want = 1e-3 + fps * 64 / 1e10 + P * 1e-9;
    printf("one rank: %.4f ms (t0 + B flops/rate + P optim = %.4f ms)\n", p.step_s * 1e3, want * 1e3);
    test_cond("one rank: t0 + B x flops / rate + optimizer", near(p.step_s, want));
    test_cond("one rank: nothing exposed", p.dp_s == 0 && p.bubble_s == 0 && p.tp_s == 0 && p.zero_s == 0);
}

/* A tensor-parallel rank's compute: its shard's FLOPs at the rate and the
 * fixed part of a micro-batch by the shard's share of the whole model's FLOPs
 * (tp 2: about half of it, not the whole). */
static void tp_fixed_part(void) {
    dt_model_cfg mc = mlp(), sh = mc;
    sh.tp_size = 2;
    dt_model *m = NULL, *half = NULL;
    test_cond("tp fixed part: probes", dt_model_probe(&mc, &m) == DT_OK && dt_model_probe(&sh, &half) == DT_OK);
    double F = (double)m->flops_per_sample, S = (double)half->flops_per_sample;
    dt_model_destroy(m);
    dt_model_destroy(half);
    dt_plan_in in = {.model = &mc, .batch = 64, .adam = true, .cluster = cluster(1, 2, 2)};
    dt_plan_layout l = {.dp = 1, .tp = 2, .pp = 1, .micro = 1};
    dt_plan_pred p;
    test_cond("tp fixed part: predicted", dt_plan_predict(&in, &l, &p) == DT_OK);
    double want = 1e-3 * S / F + S * 64 / 1e10;
    printf("mlp tp 2: compute %.4f ms (t0 S/F + B S/rate = %.4f ms, S/F = %.3f)\n", p.compute_s * 1e3, want * 1e3, S / F);
    test_cond("tp fixed part: t0 x shard share + B x shard flops / rate", near(p.compute_s, want) && S / F < 0.6);
}

/* A micro-batch priced at its size from the profile's measured sizes: linear
 * between them, along the rate beyond them (not below the fixed part), and
 * only for the model they were measured on; a one-rank step and a two-stage
 * pipeline's compute from them. */
static void measured_sizes(void) {
    dt_model_cfg mc = mlp();
    dt_model *m = NULL;
    test_cond("sizes: probe", dt_model_probe(&mc, &m) == DT_OK);
    double F = (double)m->flops_per_sample, P = (double)m->n, r = F / 1e10; /* s per row */
    dt_model_destroy(m);
    dt_plan_cluster *c = cluster(1, 2, 2);
    c->step_n = 3, c->step_flops = F;
    double rows[3] = {16, 32, 64}, t[3] = {2e-3, 2.5e-3, 4.5e-3};
    memcpy(c->step_rows, rows, sizeof rows);
    memcpy(c->step_time, t, sizeof t);
    test_cond("sizes: at a size, its time", near(dt_plan_micro_time(c, F, 32), 2.5e-3));
    test_cond("sizes: between two, linear", near(dt_plan_micro_time(c, F, 48), 3.5e-3));
    test_cond("sizes: above the last, along the rate", near(dt_plan_micro_time(c, F, 128), 4.5e-3 + 64 * r));
    test_cond("sizes: below the first, along the rate", near(dt_plan_micro_time(c, F, 8), fmax(2e-3 - 8 * r, 1e-3)));
    test_cond("sizes: another model's FLOPs: the line",
              near(dt_plan_micro_time(c, 2 * F, 32), 1e-3 + 32 * 2 * F / 1e10));
    dt_plan_in in = {.model = &mc, .batch = 48, .adam = true, .cluster = c};
    dt_plan_layout one = {.dp = 1, .tp = 1, .pp = 1, .micro = 1}, pipe = {.dp = 1, .tp = 1, .pp = 2, .micro = 3};
    dt_plan_pred p, q;
    c->per_host = 1;
    test_cond("sizes: one rank's step, 48 rows",
              dt_plan_predict(&in, &one, &p) == DT_OK && near(p.step_s, 3.5e-3 + P * 1e-9));
    c->per_host = 2;
    /* 3 micro-batches of 16 rows: the busier stage computes its FLOPs' share of 2 ms each */
    test_cond("sizes: a pipeline predicted", dt_plan_predict(&in, &pipe, &q) == DT_OK);
    int first = atoi(q.partition);
    double f0 = 0;
    test_cond("sizes: probe again", dt_model_probe(&mc, &m) == DT_OK);
    for (int b = 0; b < first && b < m->n_blocks; b++) f0 += (double)m->blocks[b].flops;
    dt_model_destroy(m);
    double share = fmax(f0, F - f0) / F;
    printf("sizes: one rank %.4f ms; pipeline (%s) compute %.4f ms (3 x 2 ms x %.3f)\n", p.step_s * 1e3, q.partition,
           q.compute_s * 1e3, share);
    test_cond("sizes: a pipeline's micro-batches priced at their 16 rows", near(q.compute_s, 3 * 2e-3 * share));
}

/* The measured sizes written into a description and read back; rows out of
 * order refused in one line naming the entry. */
static void measured_sizes_file(void) {
    dt_plan_cluster *c = cluster(1, 1, 1);
    c->step_n = 3, c->step_flops = 1e6;
    double rows[3] = {16, 32, 64}, t[3] = {2e-3, 2.5e-3, 4.5e-3};
    memcpy(c->step_rows, rows, sizeof rows);
    memcpy(c->step_time, t, sizeof t);
    char path[] = "/tmp/dt_plan_sizes_XXXXXX";
    int fd = mkstemp(path);
    dt_plan_cluster back;
    test_cond("sizes: written and read back", fd >= 0 && dt_plan_cluster_write(path, c) == DT_OK &&
                                                  dt_plan_cluster_read(path, &back) == DT_OK && back.step_n == 3 &&
                                                  near(back.step_flops, 1e6) && near(back.step_rows[2], 64) &&
                                                  near(back.step_time[1], 2.5e-3));
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("{\"hosts\": 1, \"ranks_per_host\": 1, \"gflops\": 10, \"memory_gb\": 1, \"local\": {\"latency_us\": 1, "
              "\"bandwidth_gbit\": 10}, \"cross\": {\"latency_us\": 1, \"bandwidth_gbit\": 1}, \"step\": "
              "{\"flops_per_sample\": 1000, \"measured_ms\": [[16, 2], [8, 1]]}}\n", f);
        fclose(f);
    }
    test_cond("sizes: rows out of order refused in one line",
              dt_plan_cluster_read(path, &back) == DT_ERR_INVALID && strstr(dt_error_msg(), "step.measured_ms[1]") &&
                  !strchr(dt_error_msg(), '\n'));
    if (fd >= 0) close(fd), unlink(path);
}

/* The all-reduces of dtrain's dp buckets of mc on c's 2 ranks (parallel.h:
 * whole blocks from the last, each at least 4 MiB of gradients unless it ends
 * at the first block), summed. */
static double buckets_ar(const dt_plan_cluster *c, const dt_model_cfg *mc, double *last_bucket) {
    dt_model *m = NULL;
    if (dt_model_probe(mc, &m)) return -1;
    double sum = 0;
    if (last_bucket) *last_bucket = -1;
    for (int top = m->n_blocks - 1, low; top >= 0; top = low - 1) {
        low = dt_dp_bucket_low(m, 0, top, (4 << 20) / sizeof(float));
        double floats = (double)(m->blocks[top].param_hi - m->blocks[low].param_lo);
        if (floats > 0) sum += plan_ar(c, 1, 2, 1, 4 * floats);
        if (last_bucket && *last_bucket < 0) *last_bucket = plan_ar(c, 1, 2, 1, 4 * floats);
    }
    dt_model_destroy(m);
    return sum;
}

/* The bucket rule itself, on the mlp's blocks as the probe builds them (their
 * sizes read from the model, not assumed): from the last block down, a bucket
 * closes at the block where it first holds min_floats parameters. */
static void bucket_rule(void) {
    dt_model_cfg mc = mlp();
    dt_model *m = NULL;
    test_cond("buckets: probe", dt_model_probe(&mc, &m) == DT_OK);
    int last = m->n_blocks - 1;
    test_cond("buckets: a bucket of one block is that block", dt_dp_bucket_low(m, last, last, 1) == last);
    test_cond("buckets: everything fits one bucket when the minimum is the whole model",
              dt_dp_bucket_low(m, 0, last, m->n) == 0);
    for (size_t min = 1; min <= m->n; min = min * 4 + 1) {
        int ok = 1, nb = 0;
        for (int top = last, low; top >= 0; top = low - 1, nb++) {
            low = dt_dp_bucket_low(m, 0, top, min);
            size_t held = m->blocks[top].param_hi - m->blocks[low].param_lo;
            size_t before = low < top ? m->blocks[top].param_hi - m->blocks[low + 1].param_lo : 0;
            /* full at low and not before it; only the lowest bucket may be short */
            if (low < 0 || low > top || (low > 0 && held < min) || (low < top && before >= min)) ok = 0;
        }
        char nm[96];
        snprintf(nm, sizeof nm, "buckets of at least %zu floats: %d, each closed at its first full block", min, nb);
        test_cond(nm, ok);
    }
    dt_model_destroy(m);
}

static void spare_core(void) {
    dt_model_cfg mc = mlp();
    dt_plan_layout l = {.dp = 2, .tp = 1, .pp = 1, .micro = 1};
    dt_plan_pred busy, spare;
    dt_plan_in in = {.model = &mc, .batch = 64, .adam = true, .cluster = cluster(1, 2, 2)};
    test_cond("no spare core: predicted", dt_plan_predict(&in, &l, &busy) == DT_OK);
    in.cluster = cluster(1, 2, 4);
    test_cond("spare cores: predicted", dt_plan_predict(&in, &l, &spare) == DT_OK);
    double whole = plan_ar(in.cluster, 1, 2, 1, 4.0 * (double)busy.mem.params / 4), all = buckets_ar(in.cluster, &mc, NULL);
    printf("2 ranks: exposed %.4f ms on 2 cores (the buckets' all-reduces: %.4f), %.4f ms on 4\n", busy.dp_s * 1e3,
           all * 1e3, spare.dp_s * 1e3);
    test_cond("no spare core: every bucket's all-reduce is exposed", near(busy.dp_s, all));
    test_cond("a spare core: backward hides part of it", spare.dp_s < busy.dp_s);
    l.zero = 2;
    dt_plan_pred z2;
    in.cluster = cluster(1, 2, 2);
    test_cond("ZeRO-2: predicted", dt_plan_predict(&in, &l, &z2) == DT_OK);
    test_cond("ZeRO-2: a reduce-scatter is half an all-reduce", near(z2.dp_s, all / 2));
    test_cond("ZeRO-2: the parameters gathered after the update", near(z2.zero_s, whole / 2));
    test_cond("ZeRO-2: optimizer on half the parameters", near(z2.optim_s, busy.optim_s / 2));
    /* ZeRO-3 with no core to spare: every bucket gathered for forward, all but
     * the one backward starts with again for backward, all exposed */
    l.zero = 3;
    dt_plan_pred z3, z3s;
    double last;
    buckets_ar(in.cluster, &mc, &last);
    test_cond("ZeRO-3: predicted", dt_plan_predict(&in, &l, &z3) == DT_OK);
    printf("ZeRO-3, no spare core: gathers exposed %.4f ms (2 x %.4f - %.4f)\n", z3.zero_s * 1e3, all / 2 * 1e3,
           last / 2 * 1e3);
    test_cond("ZeRO-3: two passes of half all-reduces, less the bucket kept", near(z3.zero_s, all - last / 2));
    test_cond("ZeRO-3: the gradients reduce-scattered as under ZeRO-2", near(z3.dp_s, z2.dp_s));
    dt_plan_pred z3g;
    dt_plan_cluster *cg = cluster(1, 2, 2);
    cg->links.gamma = 1e-10; /* three passes over each gathered byte */
    in.cluster = cg;
    test_cond("ZeRO-3 with gamma: predicted", dt_plan_predict(&in, &l, &z3g) == DT_OK);
    double sum = 0, last_g = -1; /* each bucket: half an all-reduce and 3 x 4 bytes x gamma a float */
    {
        dt_model *m = NULL;
        test_cond("ZeRO-3: probe", dt_model_probe(&mc, &m) == DT_OK);
        for (int top = m->n_blocks - 1, low; top >= 0; top = low - 1) {
            low = dt_dp_bucket_low(m, 0, top, (4 << 20) / sizeof(float));
            double f = (double)(m->blocks[top].param_hi - m->blocks[low].param_lo);
            double g = 0.5 * plan_ar(cg, 1, 2, 1, 4 * f) + 12e-10 * f;
            sum += g;
            if (last_g < 0) last_g = g;
        }
        dt_model_destroy(m);
    }
    printf("ZeRO-3 with gamma 0.1 ns/B: gathers exposed %.4f ms (closed form %.4f)\n", z3g.zero_s * 1e3,
           (2 * sum - last_g) * 1e3);
    test_cond("ZeRO-3: each gather's memory passes at gamma", near(z3g.zero_s, 2 * sum - last_g));
    cg->links.gamma = 0;
    /* Released pages written again: ZeRO-2 the gradients once a step, ZeRO-3
     * those and the gathered parameters twice a micro-batch, at staging_s_per_byte */
    cg->staging_s_per_byte = 0.2e-9;
    dt_plan_pred z2p, z3p;
    double gbytes = busy.mem.params; /* ZeRO-0: the whole model, in bytes */
    l.zero = 2;
    test_cond("ZeRO-2 with re-faults: predicted", dt_plan_predict(&in, &l, &z2p) == DT_OK);
    l.zero = 3;
    l.micro = 2;
    dt_plan_pred z3m;
    cg->staging_s_per_byte = 0;
    test_cond("ZeRO-3, 2 micro-batches: predicted", dt_plan_predict(&in, &l, &z3m) == DT_OK);
    cg->staging_s_per_byte = 0.2e-9;
    test_cond("ZeRO-3 with re-faults: predicted", dt_plan_predict(&in, &l, &z3p) == DT_OK);
    printf("re-faults at 0.2 ns/B of %.0f gradient bytes: ZeRO-2 +%.4f ms, ZeRO-3 (M 2) +%.4f ms\n", gbytes,
           (z2p.zero_s - z2.zero_s) * 1e3, (z3p.zero_s - z3m.zero_s) * 1e3);
    test_cond("ZeRO-2: the gradient arena re-faulted once a step", near(z2p.zero_s - z2.zero_s, 0.2e-9 * gbytes));
    test_cond("ZeRO-3: and the parameters twice a micro-batch", near(z3p.zero_s - z3m.zero_s, 0.2e-9 * gbytes * 5));
    test_cond("re-faults are ZeRO's: the step grows by as much", near(z2p.step_s - z2.step_s, 0.2e-9 * gbytes));
    cg->staging_s_per_byte = 0;
    l.micro = 1;
    in.cluster = cluster(1, 2, 4);
    test_cond("ZeRO-3, a spare core: predicted", dt_plan_predict(&in, &l, &z3s) == DT_OK);
    printf("ZeRO-3, a spare core: gathers exposed %.4f ms\n", z3s.zero_s * 1e3);
    test_cond("ZeRO-3, a spare core: compute hides part of the gathers", z3s.zero_s > 0 && z3s.zero_s < z3.zero_s);
}

static void unequal_hosts(void) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_GPT);
    dt_plan_in in = {.model = &mc, .batch = 8, .adam = true, .cluster = cluster(2, 1, 1)};
    dt_plan_layout l = {.dp = 1, .tp = 1, .pp = 2, .micro = 4, .sched = DT_PLAN_1F1B};
    dt_plan_pred even, slow;
    test_cond("speeds 1, 1: predicted", dt_plan_predict(&in, &l, &even) == DT_OK);
    dt_plan_cluster *c = cluster(2, 1, 1);
    c->speed[1] = 0.5;
    test_cond("speeds 1, 0.5: predicted", dt_plan_predict(&in, &l, &slow) == DT_OK);
    int a0, a1, b0, b1;
    sscanf(even.partition, "%d,%d", &a0, &a1);
    sscanf(slow.partition, "%d,%d", &b0, &b1);
    printf("pp 2: partition %s on equal hosts, %s when the second runs at half speed\n", even.partition,
           slow.partition);
    test_cond("the slower host's stage gets fewer blocks", b1 < a1 && b0 + b1 == a0 + a1);
    /* plain dp on 2 hosts of speed 1 and 0.5: 1/0.5 static, 1/0.75 split by speed */
    l = (dt_plan_layout){.dp = 2, .tp = 1, .pp = 1, .micro = 1};
    dt_plan_pred st, bal;
    test_cond("dp static: predicted", dt_plan_predict(&in, &l, &st) == DT_OK);
    l.balance = true;
    test_cond("dp by speed: predicted", dt_plan_predict(&in, &l, &bal) == DT_OK);
    printf("dp on speeds 1, 0.5: compute %.2f ms static, %.2f ms split by speed\n", st.compute_s * 1e3,
           bal.compute_s * 1e3);
    test_cond("split by speed: the mean speed, not the slowest", near(bal.compute_s / st.compute_s, 0.5 / 0.75));
}

static void codecs(void) {
    dt_comp_cfg cc;
    dt_comp_parse("fp16", &cc);
    test_cond("fp16: 2 bytes a value", plan_codec_bytes(&cc) == 2);
    dt_comp_parse("int8", &cc);
    test_cond("int8: a byte plus a scale per 256", near(plan_codec_bytes(&cc), 1 + 4.0 / 256));
    dt_comp_parse("sign", &cc);
    test_cond("sign: a bit plus a scale per 256", near(plan_codec_bytes(&cc), 0.125 + 4.0 / 256));
    dt_comp_parse("topk:0.01", &cc);
    test_cond("topk 1%: value and a 1-byte index delta", near(plan_codec_bytes(&cc), 0.01 * (4 + 1)));
    dt_comp_parse("topk:0.0001:fp16", &cc);
    test_cond("topk 0.01% fp16: 2-byte value, 2-byte delta", near(plan_codec_bytes(&cc), 0.0001 * (2 + 2)));
}

static void refuse(const dt_plan_in *in, dt_plan_layout l, const char *want) {
    dt_plan_pred p;
    dt_status st = dt_plan_predict(in, &l, &p);
    bool ok = st == DT_ERR_INVALID && strstr(dt_error_msg(), want) && !strchr(dt_error_msg(), '\n');
    printf("refused: %s\n", st ? dt_error_msg() : "(not refused)");
    test_cond(want, ok);
}

static void refusals(void) {
    dt_model_cfg mc = mlp();
    dt_plan_in in = {.model = &mc, .batch = 8, .adam = true, .cluster = cluster(2, 2, 2)};
    dt_comp_cfg int8, psgd;
    dt_comp_parse("int8", &int8);
    dt_comp_parse("powersgd:2", &psgd);
    refuse(&in, (dt_plan_layout){.dp = 2, .tp = 1, .pp = 1, .micro = 1}, "is not the world of 4 ranks");
    refuse(&in, (dt_plan_layout){.dp = 1, .tp = 4, .pp = 1, .micro = 1}, "--tp 4 spans hosts");
    refuse(&in, (dt_plan_layout){.dp = 1, .tp = 1, .pp = 4, .micro = 16}, "batch 8 is smaller than dp 1 x micro-batches 16");
    refuse(&in, (dt_plan_layout){.dp = 4, .tp = 1, .pp = 1, .micro = 1, .zero = 4}, "ZeRO 4 is not built");
    refuse(&in, (dt_plan_layout){.dp = 2, .tp = 1, .pp = 2, .micro = 1, .comp = int8}, "for plain data parallelism");
    refuse(&in, (dt_plan_layout){.dp = 4, .tp = 1, .pp = 1, .micro = 1, .comp = psgd}, "powersgd's cost is not modelled");
    refuse(&in, (dt_plan_layout){.dp = 3, .tp = 1, .pp = 1, .micro = 1, .servers = 1, .zero = 1}, "planned plain");
    in.batch = 64;
    in.cluster = cluster(2, 4, 4);
    refuse(&in, (dt_plan_layout){.dp = 1, .tp = 1, .pp = 8, .micro = 1}, "--pp 8: the model has 4 blocks");
    /* the interleaved schedule where the runtime refuses it (src/train/config.c) */
    in.cluster = cluster(1, 4, 4);
    dt_plan_layout il = {.dp = 2, .tp = 1, .pp = 2, .micro = 4, .sched = DT_PLAN_INTERLEAVED, .virt = 2};
    dt_plan_pred p;
    test_cond("interleaved pp 2 x 2 chunks of 4 blocks: valid", dt_plan_predict(&in, &il, &p) == DT_OK);
    il.micro = 3;
    refuse(&in, il, "groups of pp 2: 3 is not a multiple");
    il.micro = 4, il.zero = 3;
    test_cond("interleaved with ZeRO-3: valid", dt_plan_predict(&in, &il, &p) == DT_OK);
    il.zero = 0, il.virt = 4;
    refuse(&in, il, "--pp 2 x 4 virtual stages: 8 chunks, the model has 4 blocks");
    il.virt = 1;
    refuse(&in, il, "takes 2 to 16 chunks a stage, not 1");
    il = (dt_plan_layout){.dp = 4, .tp = 1, .pp = 1, .micro = 1, .sched = DT_PLAN_INTERLEAVED, .virt = 2};
    refuse(&in, il, "the interleaved schedule is for a pipeline");
    il = (dt_plan_layout){.dp = 2, .tp = 1, .pp = 2, .micro = 4, .sched = DT_PLAN_1F1B, .virt = 2};
    refuse(&in, il, "--virtual-stages 2 is for the interleaved schedule");
}

static void enumeration(void) {
    dt_model_cfg mc = mlp();
    dt_plan_cluster *c = cluster(2, 2, 2);
    c->speed[1] = 0.5;
    dt_plan_in in = {.model = &mc, .batch = 64, .adam = true, .cluster = c};
    dt_plan_pred *v = NULL;
    int n = 0, ps = 0, comp = 0, bal = 0, sorted = 1, il = 0, il_ok = 1;
    test_cond("layouts: enumerated", dt_plan_layouts(&in, &v, &n) == DT_OK && n > 0);
    for (int i = 0; i < n; i++) {
        const dt_plan_layout *l = &v[i].l;
        if (l->sched == DT_PLAN_INTERLEAVED) {
            il++;
            /* the mlp's 4 blocks: pp 2 at V = 2 only, every M a multiple of 2 */
            il_ok &= l->pp == 2 && l->virt == 2 && l->micro % 2 == 0 &&
                     strchr(v[i].partition, ',') && strlen(v[i].partition) == 7;
        }
        ps += v[i].l.servers > 0;
        comp += v[i].l.comp.kind != DT_COMP_NONE;
        bal += v[i].l.balance;
        if (i && v[i].fits == v[i - 1].fits && v[i].step_s < v[i - 1].step_s) sorted = 0;
        if (v[i].l.dp * v[i].l.tp * v[i].l.pp + v[i].l.servers != 4) sorted = 0;
    }
    printf("2 x 2 ranks, speeds 1 and 0.5: %d layouts, %d parameter-server, %d compressed, %d split by speed\n", n, ps,
           comp, bal);
    test_cond("layouts: the parameter server with 1 and 2 servers", ps == 2);
    test_cond("layouts: 4 codecs x ZeRO 0-3", comp == 16);
    test_cond("layouts: the batch split by speed on unequal hosts", bal == 1);
    test_cond("layouts: the world's, fastest first", sorted);
    /* pp 2: dp 2 x tp 1 at ZeRO 0-3 and M 2..32 (M dp <= 64), dp 1 x tp 2 at
     * ZeRO 0 and M 2..64; recompute or not */
    printf("interleaved: %d layouts (want (4 x 5 + 6) x 2 = 52), all valid: %s\n", il, il_ok ? "yes" : "no");
    test_cond("layouts: interleaved where the runtime takes it", il == 52 && il_ok);
    dt_free(v);
}

/* --sequence-parallel: the gpt compiled with it. Its tensor-parallel bytes are
 * 5/4 of plain tp's (an all-reduce's volume in a reduce-scatter and an
 * all-gather, plus the column pairs' second gather of their input and the
 * region's two transitions: src/model/seq_parallel.c), its activations fewer;
 * no tp, or a model without a sequence, refused in one line; enumerated
 * beside every tp > 1 layout. */
static void sequence_parallel(void) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_GPT);
    dt_plan_in in = {.model = &mc, .batch = 16, .adam = true, .cluster = cluster(1, 4, 4)};
    dt_plan_layout l = {.dp = 2, .tp = 2, .pp = 1, .micro = 1}, s = l;
    s.seqpar = true;
    dt_plan_pred a, b;
    test_cond("seqpar: both predicted", dt_plan_predict(&in, &l, &a) == DT_OK && dt_plan_predict(&in, &s, &b) == DT_OK);
    printf("gpt dp 2 x tp 2: tp comm %.3f ms plain, %.3f ms sequence parallel; activations %.1f MB, %.1f MB\n",
           1e3 * a.tp_s, 1e3 * b.tp_s, a.mem.acts / 1e6, b.mem.acts / 1e6);
    test_cond("seqpar: more tp bytes than plain tp, at most 1.5x", b.tp_s > a.tp_s && b.tp_s <= 1.5 * a.tp_s);
    test_cond("seqpar: fewer activations", b.mem.acts < a.mem.acts);
    s.tp = 1, s.dp = 4;
    refuse(&in, s, "--sequence-parallel needs tp > 1");
    dt_model_cfg_default(&mc, DT_MODEL_MLP);
    s.tp = 2, s.dp = 2;
    dt_plan_pred p;
    test_cond("seqpar: the mlp refused", dt_plan_predict(&in, &s, &p) == DT_ERR_INVALID);
    dt_model_cfg_default(&mc, DT_MODEL_GPT);
    dt_plan_pred *v = NULL;
    int n = 0, sp = 0, tp2 = 0;
    test_cond("seqpar: enumerated", dt_plan_layouts(&in, &v, &n) == DT_OK);
    for (int i = 0; i < n; i++) {
        sp += v[i].l.seqpar;
        tp2 += v[i].l.tp > 1 && !v[i].l.seqpar;
        if (v[i].l.seqpar && v[i].l.tp < 2) sp = -1000;
    }
    printf("seqpar: %d of %d layouts, %d plain tp ones\n", sp, n, tp2);
    test_cond("seqpar: one beside every tp layout", sp == tp2 && sp > 0);
    dt_free(v);
}

/* 4 ranks taking turns on 2 cores: a rank in the bubble lends its cores, so
 * the span shrinks toward the mean stage's compute (never below the span at a
 * core's full speed, half the time-sliced one's compute); hosts emulated on
 * one machine (shared_cores) lend nothing. */
static void time_sliced(void) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_GPT);
    dt_plan_cluster *c = cluster(1, 4, 2);
    dt_plan_in in = {.model = &mc, .batch = 16, .adam = true, .cluster = c};
    dt_plan_layout l = {.dp = 2, .tp = 1, .pp = 2, .micro = 4, .sched = DT_PLAN_1F1B};
    dt_plan_pred lent, shared;
    c->shared_cores = 2;
    test_cond("shared cores: predicted", dt_plan_predict(&in, &l, &shared) == DT_OK);
    c->shared_cores = 0;
    test_cond("one host's cores: predicted", dt_plan_predict(&in, &l, &lent) == DT_OK);
    double s_span = shared.compute_s + shared.tp_s + shared.bubble_s, l_span = lent.compute_s + lent.tp_s + lent.bubble_s;
    printf("4 ranks on 2 cores, 2x1x2 M 4: span %.3f ms (bubble %.3f) lending cores, %.3f ms (bubble %.3f) emulated hosts\n",
           l_span * 1e3, lent.bubble_s * 1e3, s_span * 1e3, shared.bubble_s * 1e3);
    test_cond("lending cores shortens the span and the bubble", l_span < s_span && lent.bubble_s < shared.bubble_s);
    test_cond("no shorter than half the compute (a core's full speed)", l_span >= 0.5 * (shared.compute_s + shared.tp_s));
    test_cond("the rest of the step is the same", near(lent.step_s - l_span, shared.step_s - s_span));
}

int main(void) {
    one_rank();
    tp_fixed_part();
    measured_sizes();
    measured_sizes_file();
    sequence_parallel();
    bucket_rule();
    spare_core();
    unequal_hosts();
    time_sliced();
    codecs();
    refusals();
    enumeration();
    return test_report();
}
