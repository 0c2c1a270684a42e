/* dtrain plan: every layout of a cluster for a model and batch, predicted
 * (include/dtrain/plan.h) and ranked, with the command line of the best.
 *
 *   dtrain plan --cluster FILE [--model M] [--set K=V,...] [--batch B]
 *               [--optim adamw|sgd] [--top N] [--json]
 *
 * Exit 0 with the table, 2 for bad flags, 1 when nothing can run or nothing
 * fits (the table still printed, with the smallest layout's command). */
#include "cli.h"

#include "dtrain/pipeline.h"
#include "dtrain/plan.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *help =
    "usage: dtrain plan --cluster FILE [--model M] [--set K=V,...] [--batch B] [--optim adamw|sgd] [--top N] [--json]\n"
    "       dtrain plan --calibrate OUT [--model M] [--set ...] [--batch B] [--fit FIT.json] [--hosts H]\n"
    "                   [--ranks-per-host N] [--cores C] [--emulated]\n"
    "\n"
    "Predicts step time and memory per rank of every dp x tp x pp layout (ZeRO 0-3,\n"
    "micro-batches, GPipe/1F1B/interleaved 1F1B (ilV: V chunks a stage), recomputation)\n"
    "of the cluster FILE describes (docs/PLANNING.md), ranks them (layouts that fit\n"
    "memory first) and prints the command line of the best. --model and --set as\n"
    "for train (default mlp); --batch the global batch (default: the model's train\n"
    "default); --top N rows (20).\n"
    "--calibrate writes the description of this machine: the FLOP/s of the model's\n"
    "training step measured here, the links from FIT.json (the last line of\n"
    "'dtrain bench allreduce -n N --fit'), memory and cores from the system.\n"
    "The step is profiled by the host's ranks at once; --emulated: the hosts are\n"
    "emulated on this one machine (scripts/cluster.sh), all their ranks share its\n"
    "--cores C and are profiled at once.\n";

/* The faster of two profiles (its step at batch B) and the least of their optimizer, staging and codec times: on a shared
 * machine a slow spell of a minute (one profile's step at one size 40% above
 * another's) would otherwise become the cluster's speed; a run's median step
 * mostly misses such spells. */
static int profile_best(const char *who, const dt_model_cfg *mc, int B, bool adam, int per, dt_plan_profile_out *out) {
    dt_plan_profile_out p[2] = {{0}};
    for (int k = 0; k < 2; k++)
        if (dt_cli_profile_host(who, mc, B, adam, per, &p[k])) return 1;
    *out = p[p[1].step_s < p[0].step_s];
    out->optim_s_per_param = fmin(p[0].optim_s_per_param, p[1].optim_s_per_param);
    out->staging_s_per_byte = fmin(p[0].staging_s_per_byte, p[1].staging_s_per_byte);
    for (int k = 0; k < DT_COMP_COUNT; k++) {
        out->codec_enc_s_per_float[k] = fmin(p[0].codec_enc_s_per_float[k], p[1].codec_enc_s_per_float[k]);
        out->codec_dec_s_per_float[k] = fmin(p[0].codec_dec_s_per_float[k], p[1].codec_dec_s_per_float[k]);
    }
    return 0;
}

int dt_cli_plan_here(const char *who, const dt_model_cfg *mc, int B, bool adam, int hosts, int per, int profile,
                     int cores, const char *fit, dt_plan_cluster *c) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    *c = (dt_plan_cluster){.hosts = hosts, .per_host = per, .cores = cores, .optim_s_per_param = 1e-9,
                           .memory = pages > 0 && psize > 0 ? (double)pages * psize / profile : 1e9,
                           .links = {{2e-6, 8.0 / 40e9}, {50e-6, 8.0 / 1e9}, 0}};
    for (int h = 0; h < hosts; h++) c->speed[h] = 1;
    if (fit && dt_plan_fit_read(fit, c)) {
        fprintf(stderr, "%s: %s\n", who, dt_error_msg());
        return 1;
    }
    dt_plan_profile_out pr = {0};
    if (profile_best(who, mc, B, adam, profile, &pr)) return 1;
    c->flops = pr.flops;
    c->micro_overhead_s = pr.micro_overhead_s;
    c->optim_s_per_param = pr.optim_s_per_param;
    c->staging_s_per_byte = pr.staging_s_per_byte;
    if (profile > cores) {
        /* More ranks than cores: the lock-step profile's fixed time carries the
         * wait, after every timed step, for the rank scheduled last, which a
         * run pays once a step, not once a micro-batch (W1's pipelines at 4
         * ranks on 2 cores measured 35-50% below it). The fixed time is taken
         * from as many ranks as cores, time-sliced profile/cores ways. */
        dt_plan_profile_out pc = {0};
        if (profile_best(who, mc, B, adam, cores, &pc)) return 1;
        c->micro_overhead_s = pc.micro_overhead_s * profile / cores;
        /* the measured sizes keep their own shape about the line, on the new
         * fixed part; should that leave a size no time, the line serves */
        for (int k = 0; k < pr.points; k++) {
            pr.time[k] += c->micro_overhead_s - pr.micro_overhead_s;
            if (!(pr.time[k] > 0)) pr.points = 0;
        }
    }
    c->step_n = pr.points;
    c->step_flops = pr.flops_per_sample;
    memcpy(c->step_rows, pr.rows, sizeof c->step_rows);
    memcpy(c->step_time, pr.time, sizeof c->step_time);
    memcpy(c->codec_enc_s_per_float, pr.codec_enc_s_per_float, sizeof c->codec_enc_s_per_float);
    memcpy(c->codec_dec_s_per_float, pr.codec_dec_s_per_float, sizeof c->codec_dec_s_per_float);
    return 0;
}

static int calibrate(const char *out, const char *fit, const dt_model_cfg *mc, int batch, int hosts, int per,
                     bool emulated, int cores, bool adam) {
    dt_plan_cluster *c = calloc(1, sizeof *c);
    if (!c) return 1;
    /* every rank that shares the cores, in lock-step: the step as a synchronous
     * run's ranks compute it (with more ranks than cores, time-sliced) */
    int rc = dt_cli_plan_here("dtrain plan", mc, batch, adam, hosts, per, emulated ? hosts * per : per, cores, fit, c);
    if (emulated) c->shared_cores = cores;
    if (!rc && dt_plan_calibrate_base(mc, NULL, batch, true, &c->base, &c->mpi_base))
        rc = 1, fprintf(stderr, "dtrain plan: %s\n", dt_error_msg());
    if (!rc && dt_plan_cluster_write(out, c)) rc = 1, fprintf(stderr, "dtrain plan: %s\n", dt_error_msg());
    char burst[64] = "";
    if (c->cross_burst > 0) snprintf(burst, sizeof burst, ", a burst of %.0f KB across", c->cross_burst / 1e3);
    if (!rc)
        printf("wrote %s: %d x %d ranks, %.1f GFLOP/s per rank on the %s step + %.2f ms a micro-batch, optimizer %.2f "
               "ns/parameter, local %.2f us + %.3f ns/B%s%s%s%s\n", out, hosts, per, c->flops / 1e9, dt_model_name(mc),
               c->micro_overhead_s * 1e3, c->optim_s_per_param * 1e9, c->links.local.alpha * 1e6,
               c->links.local.beta * 1e9, fit ? "" : " (links assumed: pass --fit)",
               c->cross_n ? ", the cross link's rate at each measured size" : "", burst,
               emulated ? ", every host's ranks sharing these cores" : "");
    free(c);
    return rc;
}

static int usage(const char *fmt, const char *a) {
    fprintf(stderr, "dtrain plan: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, " (see 'dtrain plan --help')\n");
    return 2;
}

/* What a layout adds: "seqpar" (tensor parallelism), "int8", "ps:2", "balance" (plain data parallelism), or "-". */
static void variant(const dt_plan_layout *l, char *buf, size_t n) {
    if (l->seqpar) snprintf(buf, n, "seqpar");
    else if (l->comp.kind != DT_COMP_NONE) dt_comp_name(&l->comp, buf, n);
    else if (l->servers) snprintf(buf, n, "ps:%d", l->servers);
    else snprintf(buf, n, "%s", l->balance ? "balance" : "-");
}

/* The runtime's schedule of a planned one: its --schedule name. */
static const char *sched_name(dt_plan_sched s) {
    return dt_pipe_schedule_name(s == DT_PLAN_GPIPE ? DT_SCHED_GPIPE : s == DT_PLAN_1F1B ? DT_SCHED_1F1B
                                                                                          : DT_SCHED_INTERLEAVED);
}

/* The table's schedule: "gpipe", "1f1b", "il2" (interleaved, 2 chunks a stage), "-" without a pipeline. */
static void sched_label(const dt_plan_layout *l, char *buf, size_t n) {
    if (l->pp < 2) snprintf(buf, n, "-");
    else if (l->sched == DT_PLAN_INTERLEAVED) snprintf(buf, n, "il%d", l->virt);
    else snprintf(buf, n, "%s", sched_name(l->sched));
}

void dt_cli_plan_flags(const dt_plan_pred *p, char *buf, size_t n) {
    const dt_plan_layout *l = &p->l;
    int w = 0;
    if (n) buf[0] = '\0';
    if (l->tp > 1 && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " --tp %d", l->tp);
    if (l->seqpar && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " --sequence-parallel");
    if (l->pp > 1 && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " --pp %d --pp-partition %s --micro-batches %d --schedule %s", l->pp,
                      p->partition, l->micro, sched_name(l->sched));
    if (l->pp > 1 && l->sched == DT_PLAN_INTERLEAVED && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " --virtual-stages %d", l->virt);
    if (l->pp > 1 && l->recompute && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " --recompute");
    if (l->zero && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " --zero %d", l->zero);
    char v[64];
    variant(l, v, sizeof v);
    if (l->servers && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " --strategy ps --servers %d", l->servers);
    if (l->balance && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " --balance dynamic");
    if (l->comp.kind != DT_COMP_NONE && w >= 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, " --compress %s", v);
}

static void command_line(const dt_plan_pred *p, const char *model, const char *set, int batch, char *buf, size_t n) {
    const dt_plan_layout *l = &p->l;
    int w = snprintf(buf, n, "dtrain train -n %d --model %s%s%s --batch %d", l->dp * l->tp * l->pp + l->servers, model,
                     set[0] ? " --set " : "", set, batch);
    if (w > 0 && (size_t)w < n) dt_cli_plan_flags(p, buf + w, n - (size_t)w);
}

static void print_json(const dt_plan_pred *v, int n, const char *model, const char *set, int batch) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        const dt_plan_pred *p = &v[i];
        char cmd[512];
        command_line(p, model, set, batch, cmd, sizeof cmd);
        json_array_append_new(a, json_pack("{s:i,s:i,s:i,s:i,s:i,s:s,s:b,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:b,s:s}",
            "dp", p->l.dp, "tp", p->l.tp, "pp", p->l.pp, "zero", p->l.zero, "micro_batches", p->l.micro,
            "schedule", sched_name(p->l.sched), "recompute", p->l.recompute,
            "step_s", p->step_s, "compute_s", p->compute_s, "bubble_s", p->bubble_s, "tp_s", p->tp_s, "dp_s", p->dp_s,
            "zero_s", p->zero_s, "optim_s", p->optim_s, "memory_bytes", p->mem.total, "fits", p->fits, "command", cmd));
        json_t *row = json_array_get(a, json_array_size(a) - 1);
        char comp[64];
        dt_comp_name(&p->l.comp, comp, sizeof comp);
        json_object_set_new(row, "compress", json_string(comp));
        json_object_set_new(row, "servers", json_integer(p->l.servers));
        json_object_set_new(row, "balance", json_boolean(p->l.balance));
        json_object_set_new(row, "codec_s", json_real(p->codec_s));
        json_object_set_new(row, "ps_s", json_real(p->ps_s));
        json_object_set_new(row, "virtual_stages", json_integer(p->l.sched == DT_PLAN_INTERLEAVED ? p->l.virt : 1));
        json_object_set_new(row, "sequence_parallel", json_boolean(p->l.seqpar));
        if (p->l.pp > 1) json_object_set_new(row, "partition", json_string(p->partition));
    }
    char *s = json_dumps(a, JSON_INDENT(1));
    if (s) puts(s);
    free(s);
    json_decref(a);
}

static void print_table(const dt_plan_pred *v, int n, int total, const dt_plan_cluster *c) {
    printf("%d layouts of %d ranks (%d hosts x %d); the first %d, fitting first, fastest first:\n", total,
           c->hosts * c->per_host, c->hosts, c->per_host, n);
    printf("  dp tp pp zero  M sched recomp variant   |  step ms  compute  bubble   tp comm  dp comm codec+ps  zero ag  "
           "optim | MB/rank fits\n");
    for (int i = 0; i < n; i++) {
        const dt_plan_pred *p = &v[i];
        char var[64], sch[16];
        variant(&p->l, var, sizeof var);
        sched_label(&p->l, sch, sizeof sch);
        printf("  %2d %2d %2d   %d %2d %-5s %-6s %-9s | %8.2f %8.2f %7.2f %8.2f %8.2f %8.2f %8.2f %6.2f | %7.1f %s\n",
               p->l.dp, p->l.tp, p->l.pp, p->l.zero, p->l.micro,
               sch, p->l.recompute ? "yes" : "no", var,
               1e3 * p->step_s, 1e3 * p->compute_s, 1e3 * p->bubble_s, 1e3 * p->tp_s, 1e3 * p->dp_s,
               1e3 * (p->codec_s + p->ps_s), 1e3 * p->zero_s, 1e3 * p->optim_s, p->mem.total / 1e6, p->fits ? "yes" : "NO");
    }
}

/* The layout needing the least memory per rank. */
static const dt_plan_pred *smallest(const dt_plan_pred *v, int n) {
    const dt_plan_pred *s = &v[0];
    for (int i = 1; i < n; i++)
        if (v[i].mem.total < s->mem.total) s = &v[i];
    return s;
}

/* What the table assumed about hosts of unequal speed, when they are, and
 * where it is least sure: more ranks than cores, a description's measured
 * sizes taken on another model (`flops` this one's per sample). */
static void assumptions(const dt_plan_cluster *c, double flops) {
    if (c->step_n > 0 && flops > 0 && !dt_plan_step_sizes_apply(c, flops))
        printf("assumed: the description's measured step sizes are of a model of %.4g MFLOP a sample, this one has "
               "%.4g: micro-batches priced by micro_overhead_us + rows at gflops (calibrate with this model for "
               "its own)\n", c->step_flops / 1e6, flops / 1e6);
    int cores, ranks = dt_plan_ranks_sharing(c, &cores);
    if (ranks >= cores)
        printf("assumed, %d ranks %s %d cores: no core to spare, so no communication hides behind compute\n",
               ranks, c->shared_cores > 0 ? "(all hosts) sharing" : "on a host's", cores);
    if (ranks > cores)
        printf("  and the ranks are time-sliced: GPipe is taken as no faster than 1F1B, and in docs/BENCHMARKS.md's\n"
               "  runs pipelines were off by 20-30%% either way; run the top few to compare\n");
    bool unequal = false;
    for (int h = 1; h < c->hosts; h++) unequal |= c->speed[h] != c->speed[0];
    if (!unequal) return;
    printf("assumed, hosts of unequal speed (");
    for (int h = 0; h < c->hosts && h < 8; h++) printf("%s%g", h ? ", " : "", c->speed[h]);
    printf("%s): a stage or replica runs at its slowest host's speed; pipeline stages are cut by speed (the\n"
           "command's --pp-partition); variant 'balance' splits the batch by speed (--balance dynamic)\n",
           c->hosts > 8 ? ", ..." : "");
}

int dt_cli_plan(int argc, char **argv) {
    const char *cluster = NULL, *model = "mlp", *set = "", *cal = NULL, *fit = NULL;
    int batch = 0, top = 20, hosts = 1, per = (int)sysconf(_SC_NPROCESSORS_ONLN), cores = per;
    bool json = false, adam_given = false, adam = false, emulated = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) { json = true; continue; }
        if (!strcmp(a, "--emulated")) { emulated = true; continue; }
        if (!v) return usage("%s needs a value", a);
        i++;
        if (!strcmp(a, "--cluster")) cluster = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--set")) set = v;
        else if (!strcmp(a, "--batch") && (batch = atoi(v)) >= 1) continue;
        else if (!strcmp(a, "--top") && (top = atoi(v)) >= 1) continue;
        else if (!strcmp(a, "--calibrate")) cal = v;
        else if (!strcmp(a, "--fit")) fit = v;
        else if (!strcmp(a, "--hosts") && (hosts = atoi(v)) >= 1 && hosts <= DT_PLAN_MAX_HOSTS) continue;
        else if (!strcmp(a, "--ranks-per-host") && (per = atoi(v)) >= 1) continue;
        else if (!strcmp(a, "--cores") && (cores = atoi(v)) >= 1) continue;
        else if (!strcmp(a, "--optim") && (!strcmp(v, "adamw") || !strcmp(v, "sgd"))) adam_given = true, adam = v[0] == 'a';
        else return usage("bad flag or value '%s'", a);
    }
    if (!cluster && !cal) return usage("%s", "--cluster FILE (or --calibrate OUT) is required");
    if (!cal && (emulated || fit))
        return usage("%s only describes a machine: give it with --calibrate OUT", emulated ? "--emulated" : "--fit");
    dt_train_cfg tc;
    dt_train_cfg_default(&tc, DT_MODEL_MLP);
    dt_status st = dt_model_select(&tc.model, model);
    if (!st && tc.model.kind != DT_MODEL_FILE) dt_train_cfg_default(&tc, tc.model.kind);
    if (!st && set[0] && !(st = dt_model_set_check(set))) snprintf(tc.model.set, sizeof tc.model.set, "%s", set);
    if (st) return usage("%s", dt_error_msg());
    if (cal)
        return calibrate(cal, fit, &tc.model, batch ? batch : tc.batch, hosts, per, emulated, cores,
                         adam_given ? adam : tc.optim.kind == DT_OPTIM_ADAMW);
    dt_plan_cluster *c = calloc(1, sizeof *c);
    dt_plan_pred *v = NULL;
    int n = 0;
    if (!c || (st = dt_plan_cluster_read(cluster, c))) {
        fprintf(stderr, "dtrain plan: %s\n", c ? dt_error_msg() : "out of memory");
        free(c);
        return 1;
    }
    dt_plan_in in = {.model = &tc.model, .batch = batch ? batch : tc.batch,
                     .adam = adam_given ? adam : tc.optim.kind == DT_OPTIM_ADAMW, .cluster = c};
    if ((st = dt_plan_layouts(&in, &v, &n))) {
        fprintf(stderr, "dtrain plan: %s\n", dt_error_msg());
        free(c);
        return 1;
    }
    int shown = n < top ? n : top;
    if (json) {
        print_json(v, shown, model, set, in.batch);
    } else {
        print_table(v, shown, n, c);
        assumptions(c, dt_plan_model_flops(&tc.model));
        char cmd[512];
        const dt_plan_pred *best = v[0].fits ? &v[0] : smallest(v, n);
        command_line(best, model, set, in.batch, cmd, sizeof cmd);
        printf("%s\n  %s\n", v[0].fits ? "best:" : "none fits in memory; the smallest:", cmd);
    }
    int rc = 0;
    if (!v[0].fits) {
        const dt_plan_pred *s = smallest(v, n);
        fprintf(stderr, "dtrain plan: no layout fits %.3g GB per rank: the smallest needs %.3g GB (dp %d x tp %d x pp %d, "
                        "ZeRO-%d); give more ranks or memory, or a smaller model or batch\n",
                c->memory / 1e9, s->mem.total / 1e9, s->l.dp, s->l.tp, s->l.pp, s->l.zero);
        rc = 1;
    }
    dt_free(v);
    free(c);
    return rc;
}
