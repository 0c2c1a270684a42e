/* dtrain train --layout auto (issue 16): the planner's best fitting layout for
 * the world the launch gives, run as if its flags had been typed.
 *
 * Decided once, in the process that starts the ranks (the launcher, or the
 * only process of a one-rank run; under --max-restarts each attempt, on the
 * hosts that attempt has), before anything starts: the world from -n and
 * --hostfile or --pretend-hosts, the cluster from --cluster FILE or this
 * machine measured as 'dtrain plan --calibrate' measures it (plan.c), every
 * layout predicted and ranked (dt_plan_layouts), the first that fits memory
 * taken. The command line is then rewritten: --layout and --cluster out, the
 * layout's --tp, --pp, --zero (and --micro-batches, --schedule, --pp-partition,
 * --recompute for a pipeline, --virtual-stages for the interleaved schedule) in. The ranks, config.json and the checkpoints'
 * command line see only the concrete flags, so every rank runs the same layout
 * and a rerun from config.json or a resume repeats it without planning again. */
#include "cli.h"
#include "launch.h"
#include "hosts.h"

#include "dtrain/compress.h"
#include "dtrain/plan.h"
#include "dtrain/train.h"

#include <cblas.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WHO "dtrain train"

/* The flags a layout sets (dt_cli_plan_flags): --layout auto decides them. */
static const char *const layout_flags[] = {"tp", "pp", "zero", "micro-batches", "schedule", "virtual-stages", "recompute",
                                           "sequence-parallel", "pp-partition", "compress", "strategy", "servers",
                                           "consistency", "balance"};

/* argv[i] is --name or --name=VALUE. */
static bool is_flag(const char *a, const char *name) {
    size_t n = strlen(name);
    return a[0] == '-' && a[1] == '-' && strncmp(a + 2, name, n) == 0 && (a[2 + n] == '\0' || a[2 + n] == '=');
}

static bool given(int argc, char **argv, const char *name) {
    for (int i = 0; i < argc; i++)
        if (is_flag(argv[i], name)) return true;
    return false;
}

/* What the planner does not model, as the flag that asks for it, or NULL. */
static const char *unmodelled(const dt_train_cfg *cfg) {
    if (cfg->strategy == DT_STRATEGY_LOCALSGD) return "localsgd";
    if (cfg->strategy == DT_STRATEGY_HOGWILD) return "hogwild";
    if (cfg->agg.kind != DT_AGG_NONE) return "--aggregate";
    if (cfg->accum > 1) return "--accum";
    for (int i = 0; i < cfg->n_inject; i++)
        if (cfg->inject[i].kind == DT_INJECT_BYZANTINE) return "--inject byzantine";
    return NULL;
}

/* One line on stderr; returns 2 (a usage error). */
static int refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int refuse(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, WHO ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int dt_cli_layout_check(const dt_cli_layout *l, const dt_train_cfg *cfg, int argc, char **argv, const dt_config_src *src) {
    const char *v = l->layout ? l->layout : "manual";
    if (strcmp(v, "auto") != 0 && strcmp(v, "manual") != 0)
        return refuse("--layout '%s': expects auto (the planner chooses) or manual (the flags as given)", v);
    bool on = strcmp(v, "auto") == 0;
    if (!on && l->cluster)
        return refuse("--cluster %s is what --layout auto plans on: add --layout auto, or see its layouts with "
                      "'dtrain plan --cluster %s'", l->cluster, l->cluster);
    if (!on) return 0;
    const char *u = unmodelled(cfg);
    if (u && u[0] != '-')
        return refuse("--layout auto plans synchronous data, tensor and pipeline parallelism and the parameter server; "
                      "the planner does not model --strategy %s yet: give the layout's flags yourself", u);
    if (u)
        return refuse("--layout auto: the planner does not model %s yet: drop %s or --layout auto", u, u);
    for (size_t i = 0; i < sizeof layout_flags / sizeof *layout_flags; i++) {
        const char *f = layout_flags[i];
        if (given(argc, argv, f))
            return refuse("--layout auto chooses --%s itself: drop --%s, or drop --layout auto", f, f);
        if (src && given(src->argc, src->argv, f))
            return refuse("--layout auto chooses --%s itself, and --config %s sets it: drop --layout auto to rerun "
                          "that file's layout", f, src->path);
    }
    if (dt_under_mpi_launcher())
        return refuse("--layout auto plans before the ranks start: start the job with 'dtrain train -n N --layout "
                      "auto ...', or under mpirun/srun give the flags 'dtrain plan --cluster FILE' prints");
    return 0;
}

/* ---- the world and the cluster --------------------------------------------- */

/* The hosts the launch's n ranks fill on a hostfile (mpirun maps by slot):
 * *hosts of *per ranks each; 0, or 2 after one line. */
static int hostfile_world(const char *path, int n, int *hosts, int *per) {
    dt_host *h = calloc(DT_MAX_HOSTS, sizeof *h);
    int nh = h ? dt_hostfile_read(path, h) : -1, used = 0, left = n, first = 0, rc = 0, slots = 0;
    for (int i = 0; i < nh; i++) slots += h[i].slots;
    if (nh < 1) rc = refuse("--layout auto: --hostfile %s lists no hosts (or cannot be read)", path);
    else if (n > slots)
        rc = refuse("--layout auto: -n %d is more ranks than the %d slots of --hostfile %s: the planner needs to know "
                    "where every rank runs", n, slots, path);
    while (!rc && left > 0) {
        int k = h[used].slots < left ? h[used].slots : left;
        if (used == 0) first = k;
        if (k != first) {
            rc = refuse("--layout auto: the %d ranks fill the hosts of --hostfile %s unevenly (%d on %s, %d on %s): "
                        "the planner takes hosts of equal ranks; give -n a multiple of the slots per host", n, path,
                        first, h[0].name, k, h[used].name);
            break;
        }
        left -= k;
        used++;
    }
    *hosts = used;
    *per = first;
    free(h);
    return rc;
}

/* The launch's world: n ranks as *hosts x *per. 0, or 2 after one line. */
static int launch_world(const dt_cli_layout *l, int *hosts, int *per) {
    int n = l->nproc > 0 ? l->nproc : 1;
    *hosts = 1;
    *per = n;
    if (l->hostfile) return hostfile_world(l->hostfile, n, hosts, per);
    if (l->pretend_hosts > 1) {
        if (n % l->pretend_hosts)
            return refuse("--layout auto: --pretend-hosts %d does not divide the %d ranks: the planner takes hosts of "
                          "equal ranks", l->pretend_hosts, n);
        *hosts = l->pretend_hosts;
        *per = n / l->pretend_hosts;
    }
    return 0;
}

/* The cluster to plan on: --cluster FILE (its world the launch's), or this
 * machine measured at the per-rank batch. 0, or 1/2 after one line. */
static int load_cluster(const dt_cli_layout *l, const dt_train_cfg *cfg, int hosts, int per, dt_plan_cluster *c) {
    if (!l->cluster) {
        /* Measured as the ranks will run: one BLAS thread each unless --threads. */
        if (hosts * per > 1) openblas_set_num_threads(l->threads > 0 ? l->threads : 1);
        int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), B = cfg->batch / (hosts * per);
        return dt_cli_plan_here(WHO ": --layout auto", &cfg->model, B > 0 ? B : 1, cfg->optim.kind == DT_OPTIM_ADAMW,
                                hosts, per, per, cores > 0 ? cores : 1, NULL, c);
    }
    if (dt_plan_cluster_read(l->cluster, c)) {
        fprintf(stderr, WHO ": --layout auto: %s\n", dt_error_msg());
        return 1;
    }
    if (c->hosts * c->per_host == hosts * per) return 0;
    fprintf(stderr, WHO ": --cluster %s describes %d ranks (%d host%s x %d), the launch has %d (%d host%s x %d): give "
            "-n %d, or a description of this launch ('dtrain plan --calibrate FILE --hosts %d --ranks-per-host %d')\n",
            l->cluster, c->hosts * c->per_host, c->hosts, c->hosts == 1 ? "" : "s", c->per_host, hosts * per, hosts,
            hosts == 1 ? "" : "s", per, c->hosts * c->per_host, hosts, per);
    return 2;
}

/* ---- the choice ---------------------------------------------------------------- */

/* "dp 1 x tp 1 x pp 2 (blocks 1,3), 16 micro-batches GPipe, recompute, ZeRO-0"
 * into buf, then what the layout adds: sequence parallelism, compression,
 * servers, a split by speed. */
static void describe(const dt_plan_pred *p, char *buf, size_t n) {
    const dt_plan_layout *l = &p->l;
    char comp[64] = "";
    int w = snprintf(buf, n, "dp %d x tp %d x pp %d", l->dp, l->tp, l->pp);
    char il[48];
    snprintf(il, sizeof il, "interleaved 1F1B (%d chunks a stage)", l->virt);
    if (l->pp > 1 && w > 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " (blocks %s), %d micro-batch%s %s%s", p->partition, l->micro,
                      l->micro == 1 ? "" : "es",
                      l->sched == DT_PLAN_GPIPE ? "GPipe" : l->sched == DT_PLAN_1F1B ? "1F1B" : il,
                      l->recompute ? ", recompute" : "");
    if (w > 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ", ZeRO-%d", l->zero);
    if (l->seqpar && w > 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ", sequence parallel");
    if (l->comp.kind != DT_COMP_NONE) dt_comp_name(&l->comp, comp, sizeof comp);
    if (comp[0] && w > 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ", --compress %s", comp);
    if (l->servers && w > 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " + %d parameter server%s (BSP)", l->servers, l->servers == 1 ? "" : "s");
    if (l->balance && w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, ", batch split by speed");
}

/* The line before training: the choice, its prediction, where the table is. */
static void print_choice(const dt_cli_layout *l, const dt_train_cfg *cfg, const dt_plan_pred *p, int n) {
    char what[512], set[300] = "";
    describe(p, what, sizeof what);
    if (cfg->model.set[0]) snprintf(set, sizeof set, " --set %s", cfg->model.set);
    double mb = p->mem.total / 1e6;
    printf("layout auto: %s (predicted %.1f ms/step, %.*f MB/rank", what, 1e3 * p->step_s, mb < 10 ? 1 : 0, mb);
    if (l->cluster)
        printf("; 'dtrain plan --cluster %s --model %s%s --batch %d --optim %s' lists all %d)\n", l->cluster,
               dt_model_name(&cfg->model), set, cfg->batch, cfg->optim.kind == DT_OPTIM_SGD ? "sgd" : "adamw", n);
    else
        printf(" on this machine as measured, links assumed; 'dtrain plan --calibrate FILE' then 'dtrain plan "
               "--cluster FILE' lists all %d)\n", n);
    fflush(stdout);
}

/* The first layout that fits, or NULL after one line naming the smallest need. */
static const dt_plan_pred *choose(const dt_plan_pred *v, int n, const dt_plan_cluster *c) {
    if (v[0].fits) return &v[0];
    const dt_plan_pred *least = &v[0];
    for (int i = 1; i < n; i++)
        if (v[i].mem.total < least->mem.total) least = &v[i];
    char what[512];
    describe(least, what, sizeof what);
    fprintf(stderr, WHO ": --layout auto: no layout of %d ranks fits in memory: the smallest needs %.1f MB per rank "
            "(%s), the cluster has %.1f MB per rank\n", c->hosts * c->per_host, least->mem.total / 1e6, what,
            c->memory / 1e6);
    return NULL;
}

/* ---- the command line ---------------------------------------------------------- */

void dt_cli_layout_free(char **argv, int argc) {
    for (int i = 0; argv && i < argc; i++) free(argv[i]);
    free(argv);
}

/* argv without --layout and --cluster, then p's flags (those that differ from
 * the defaults: the others are refused beside --layout auto, so the defaults
 * hold); NULL when out of memory. */
static char **rewrite(int argc, char **argv, const dt_plan_pred *p, int *out_n) {
    char flags[1024];
    dt_cli_plan_flags(p, flags, sizeof flags);
    char **v = calloc((size_t)argc + sizeof flags / 2 + 1, sizeof *v);
    int k = 0;
    for (int i = 0; v && i < argc; i++) {
        bool drop = is_flag(argv[i], "layout") || is_flag(argv[i], "cluster");
        if (drop && !strchr(argv[i], '=')) i++; /* and its value */
        else if (!drop) v[k++] = strdup(argv[i]);
    }
    for (char *save = NULL, *t = strtok_r(flags, " ", &save); v && t; t = strtok_r(NULL, " ", &save)) v[k++] = strdup(t);
    for (int i = 0; v && i < k; i++)
        if (!v[i]) {
            dt_cli_layout_free(v, k);
            return NULL;
        }
    *out_n = k;
    return v;
}

int dt_cli_layout_plan(const dt_cli_layout *l, const dt_train_cfg *cfg, int argc, char **argv, char ***out, int *out_n) {
    int hosts, per, rc = launch_world(l, &hosts, &per), n = 0;
    dt_plan_cluster *c = rc ? NULL : calloc(1, sizeof *c);
    dt_plan_pred *v = NULL;
    const dt_plan_pred *best = NULL;
    if (!rc && !c) rc = 1, fprintf(stderr, WHO ": out of memory\n");
    if (!rc) rc = load_cluster(l, cfg, hosts, per, c);
    dt_plan_in in = {.model = &cfg->model, .batch = cfg->batch, .adam = cfg->optim.kind == DT_OPTIM_ADAMW, .cluster = c};
    if (!rc && dt_plan_layouts(&in, &v, &n)) rc = 1, fprintf(stderr, WHO ": --layout auto: %s\n", dt_error_msg());
    if (!rc && !(best = choose(v, n, c))) rc = 1;
    if (!rc) print_choice(l, cfg, best, n);
    char **av = rc ? NULL : rewrite(argc, argv, best, out_n);
    if (!rc && !av) rc = 1, fprintf(stderr, WHO ": out of memory\n");
    if (av) *out = av;
    dt_free(v);
    free(c);
    return rc;
}
