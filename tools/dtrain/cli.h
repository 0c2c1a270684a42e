/* Subcommands implemented outside main.c. */
#ifndef DT_CLI_H
#define DT_CLI_H

#include "dtrain/config.h"
#include "dtrain/plan.h"

#include <stdbool.h>
#include <stdio.h>

/* dtrain bench allreduce [flags]: argv are the flags after "allreduce". */
int dt_cli_bench_allreduce(int argc, char **argv);
/* dtrain plan [flags] (plan.c): argv are the flags after "plan". */
int dt_cli_plan(int argc, char **argv);
/* dtrain report RUN_DIR... [flags] (report.c): argv after "report". */
int dt_cli_report(int argc, char **argv);
/* dtrain rl [flags] (rl.c): the whole command line (it starts the launcher). */
int dt_cli_rl(int argc, char **argv);
/* dtrain bench allreduce --fit on c (bench_fit.c): prints the cost model's
 * parameters measured here; 0 or 1. Collective over c. */
int dt_bench_fit(dt_comm *c);

/* The flags of the tables that `cmd` (DT_FLAG_TRAIN or DT_FLAG_EVAL) takes,
 * by section (train) with their defaults: tabs[0] is the library's table (its
 * defaults come from dt_train_cfg_default), the others' bases hold theirs. */
void dt_cli_print_help(FILE *out, const dt_flag_table *tabs, int ntabs, unsigned cmd);

/* This machine described for the planner (plan.c), as 'dtrain plan
 * --calibrate' describes it: hosts x per ranks, `cores` per host; a rank's
 * FLOP/s, fixed time per micro-batch and optimizer cost measured here on mc's
 * training step at batch B (the faster of two dt_cli_profile_host runs of
 * `profile` ranks at once: per, or every host's ranks when emulated hosts share
 * this machine; with more of them than cores, the fixed time per micro-batch
 * from `cores` at once);
 * memory per rank the machine's over `profile` (the ranks that share it);
 * the links from fit (the JSON line of
 * 'dtrain bench allreduce --fit'), assumed (40 Gbit/s inside a host, 1 across)
 * when fit is NULL. Fills *c; returns 0, or 1 after one line on stderr that
 * starts with `who`. */
/* mc's training step profiled at batch B by per processes at once, in
 * lock-step (profile_host.c), into *out (this process's profile). Returns 0,
 * or 1 after one line on stderr that starts with `who`. */
int dt_cli_profile_host(const char *who, const dt_model_cfg *mc, int B, bool adam, int per, dt_plan_profile_out *out);
int dt_cli_plan_here(const char *who, const dt_model_cfg *mc, int B, bool adam, int hosts, int per, int profile,
                     int cores, const char *fit, dt_plan_cluster *c);

/* The `dtrain train` flags of p's layout that differ from the defaults, each
 * after a space (" --tp 2 --zero 1"; "" for plain data parallelism), into buf
 * (n bytes, cut short if smaller). plan.c; the command line `dtrain plan`
 * recommends and what --layout auto runs. */
void dt_cli_plan_flags(const dt_plan_pred *p, char *buf, size_t n);

/* `dtrain train --layout auto` (layout.c): what it plans for. */
typedef struct dt_cli_layout {
    const char *layout;    /* --layout: "auto", "manual" or NULL (manual) */
    const char *cluster;   /* --cluster FILE, or NULL: this machine, measured */
    int nproc;             /* -n (0: one rank) */
    const char *hostfile;  /* --hostfile, or NULL */
    int pretend_hosts;     /* --pretend-hosts (0, 1: one host) */
    int threads;           /* --threads (0: one BLAS thread per rank when several) */
} dt_cli_layout;

/* Refuses what --layout and --cluster cannot take, before anything runs: a
 * --layout other than auto or manual, --cluster without --layout auto, and
 * with --layout auto a layout flag given on argv (the command's flags) or in
 * src (--config's, may be NULL), a strategy the planner does not model, or an
 * existing mpirun/srun. Returns 0, or 2 after one line on stderr. */
int dt_cli_layout_check(const dt_cli_layout *l, const dt_train_cfg *cfg, int argc, char **argv, const dt_config_src *src);
/* Plans cfg's run for l's world (-n as hosts x ranks per host from --hostfile
 * or --pretend-hosts) on --cluster FILE or this machine measured, prints the
 * chosen layout in one line on stdout, and sets *out (*n entries, NULL-
 * terminated; free with dt_cli_layout_free) to argv (the whole command line)
 * without --layout and --cluster and with the layout's flags. Returns 0, or
 * 1 (a bad cluster file, nothing fits in memory) or 2 (a world the planner or
 * the file does not match) after one line on stderr; *out is then untouched. */
int dt_cli_layout_plan(const dt_cli_layout *l, const dt_train_cfg *cfg, int argc, char **argv, char ***out, int *n);
/* Frees what dt_cli_layout_plan returned; NULL is fine. */
void dt_cli_layout_free(char **argv, int argc);

#endif
