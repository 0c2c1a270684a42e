/* dtrain plan: every layout of a cluster for a model and batch, predicted
 * (include/dtrain/plan.h) and ranked, with the command line of the best.
 *
 *   dtrain plan --cluster FILE [--model M] [--set K=V,...] [--batch B]
 *               [--optim adamw|sgd] [--top N] [--json]
 *
 * Exit 0 with the table, 2 for bad flags, 1 when nothing can run. */
#include "cli.h"

#include "dtrain/plan.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *help =
    "usage: dtrain plan --cluster FILE [--model M] [--set K=V,...] [--batch B] [--optim adamw|sgd] [--top N] [--json]\n"
    "       dtrain plan --calibrate OUT [--model M] [--set ...] [--batch B] [--fit FIT.json] [--hosts H]\n"
    "                   [--ranks-per-host N] [--cores C]\n"
    "\n"
    "Predicts step time and memory per rank of every dp x tp x pp layout (ZeRO 0-2,\n"
    "micro-batches, GPipe/1F1B, recomputation) of the cluster FILE describes\n"
    "(docs/PLANNING.md), ranks them (layouts that fit memory first) and prints the\n"
    "command line of the best. --model and --set as for train (default mlp);\n"
    "--batch the global batch (default: the model's train default); --top N rows (20).\n"
    "--calibrate writes the description of this machine: the FLOP/s of the model's\n"
    "training step measured here, the links from FIT.json (the last line of\n"
    "'dtrain bench allreduce -n N --fit'), memory and cores from the system.\n";

/* The links of `dtrain bench allreduce --fit`'s JSON line into c. */
static int read_fit(const char *path, dt_plan_cluster *c) {
    json_error_t err;
    json_t *o = json_load_file(path, 0, &err);
    double la, lb, ca, cb, g;
    if (!o || json_unpack(o, "{s:{s:F,s:F},s:{s:F,s:F},s:F}", "local", "alpha", &la, "beta", &lb, "cross", "alpha", &ca,
                          "beta", &cb, "gamma", &g)) {
        fprintf(stderr, "dtrain plan: %s: not the JSON line of 'dtrain bench allreduce --fit'\n", path);
        json_decref(o);
        return 1;
    }
    json_decref(o);
    c->links.local = (dt_link_cost){la, lb};
    c->links.cross = cb > 0 ? (dt_link_cost){ca, cb} : c->links.local;
    c->links.gamma = g;
    return 0;
}

static int calibrate(const char *out, const char *fit, const dt_model_cfg *mc, int batch, int hosts, int per, int cores) {
    dt_plan_cluster *c = calloc(1, sizeof *c);
    if (!c) return 1;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    *c = (dt_plan_cluster){.hosts = hosts, .per_host = per, .cores = cores, .optim_s_per_param = 1e-9,
                           .memory = pages > 0 && psize > 0 ? (double)pages * psize / per : 1e9,
                           .links = {{2e-6, 8.0 / 40e9}, {50e-6, 8.0 / 1e9}, 0}};
    for (int h = 0; h < hosts; h++) c->speed[h] = 1;
    int rc = fit ? read_fit(fit, c) : 0;
    dt_status st = rc ? DT_OK : dt_plan_calibrate_flops(mc, batch, &c->flops);
    if (!rc && !st) st = dt_plan_cluster_write(out, c);
    if (!rc && st) fprintf(stderr, "dtrain plan: %s\n", dt_error_msg());
    if (!rc && !st)
        printf("wrote %s: %d x %d ranks, %.1f GFLOP/s per rank on the %s step, local %.2f us + %.3f ns/B%s\n", out, hosts,
               per, c->flops / 1e9, dt_model_name(mc), c->links.local.alpha * 1e6, c->links.local.beta * 1e9,
               fit ? "" : " (links assumed: pass --fit)");
    free(c);
    return rc ? 1 : st ? 1 : 0;
}

static int usage(const char *fmt, const char *a) {
    fprintf(stderr, "dtrain plan: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, " (see 'dtrain plan --help')\n");
    return 2;
}

static void command_line(const dt_plan_pred *p, const char *model, const char *set, int batch, char *buf, size_t n) {
    const dt_plan_layout *l = &p->l;
    int w = snprintf(buf, n, "dtrain train -n %d --model %s%s%s --batch %d", l->dp * l->tp * l->pp, model,
                     set[0] ? " --set " : "", set, batch);
    if (l->tp > 1 && w > 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " --tp %d", l->tp);
    if (l->pp > 1 && w > 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " --pp %d --micro-batches %d --schedule %s%s", l->pp, l->micro,
                      l->sched == DT_PLAN_GPIPE ? "gpipe" : "1f1b", l->recompute ? " --recompute" : "");
    if (l->zero && w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, " --zero %d", l->zero);
}

static void print_json(const dt_plan_pred *v, int n, const char *model, const char *set, int batch) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        const dt_plan_pred *p = &v[i];
        char cmd[512];
        command_line(p, model, set, batch, cmd, sizeof cmd);
        json_array_append_new(a, json_pack("{s:i,s:i,s:i,s:i,s:i,s:s,s:b,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:b,s:s}",
            "dp", p->l.dp, "tp", p->l.tp, "pp", p->l.pp, "zero", p->l.zero, "micro_batches", p->l.micro,
            "schedule", p->l.sched == DT_PLAN_GPIPE ? "gpipe" : "1f1b", "recompute", p->l.recompute,
            "step_s", p->step_s, "compute_s", p->compute_s, "bubble_s", p->bubble_s, "tp_s", p->tp_s, "dp_s", p->dp_s,
            "zero_s", p->zero_s, "optim_s", p->optim_s, "memory_bytes", p->mem.total, "fits", p->fits, "command", cmd));
    }
    char *s = json_dumps(a, JSON_INDENT(1));
    if (s) puts(s);
    free(s);
    json_decref(a);
}

static void print_table(const dt_plan_pred *v, int n, int total, const dt_plan_cluster *c) {
    printf("%d layouts of %d ranks (%d hosts x %d); the first %d, fitting first, fastest first:\n", total,
           c->hosts * c->per_host, c->hosts, c->per_host, n);
    printf("  dp tp pp zero  M sched recomp |  step ms  compute  bubble   tp comm  dp comm  zero ag  optim | MB/rank fits\n");
    for (int i = 0; i < n; i++) {
        const dt_plan_pred *p = &v[i];
        printf("  %2d %2d %2d   %d %2d %-5s %-6s | %8.2f %8.2f %7.2f %8.2f %8.2f %8.2f %6.2f | %7.1f %s\n", p->l.dp,
               p->l.tp, p->l.pp, p->l.zero, p->l.micro, p->l.pp > 1 ? (p->l.sched == DT_PLAN_GPIPE ? "gpipe" : "1f1b") : "-",
               p->l.recompute ? "yes" : "no", 1e3 * p->step_s, 1e3 * p->compute_s, 1e3 * p->bubble_s, 1e3 * p->tp_s,
               1e3 * p->dp_s, 1e3 * p->zero_s, 1e3 * p->optim_s, p->mem.total / 1e6, p->fits ? "yes" : "NO");
    }
}

int dt_cli_plan(int argc, char **argv) {
    const char *cluster = NULL, *model = "mlp", *set = "", *cal = NULL, *fit = NULL;
    int batch = 0, top = 20, hosts = 1, per = (int)sysconf(_SC_NPROCESSORS_ONLN), cores = per;
    bool json = false, adam_given = false, adam = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) { json = true; continue; }
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
    dt_train_cfg tc;
    dt_train_cfg_default(&tc, DT_MODEL_MLP);
    dt_status st = dt_model_select(&tc.model, model);
    if (!st && tc.model.kind != DT_MODEL_FILE) dt_train_cfg_default(&tc, tc.model.kind);
    if (!st && set[0] && !(st = dt_model_set_check(set))) snprintf(tc.model.set, sizeof tc.model.set, "%s", set);
    if (st) return usage("%s", dt_error_msg());
    if (cal) return calibrate(cal, fit, &tc.model, batch ? batch : tc.batch, hosts, per, cores);
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
        char cmd[512];
        command_line(&v[0], model, set, in.batch, cmd, sizeof cmd);
        printf("%s\n  %s\n", v[0].fits ? "best:" : "none fits in memory; the smallest need:", cmd);
    }
    dt_free(v);
    free(c);
    return 0;
}
