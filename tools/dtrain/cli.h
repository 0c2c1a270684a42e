/* Subcommands implemented outside main.c. */
#ifndef DT_CLI_H
#define DT_CLI_H

#include "dtrain/config.h"

#include <stdio.h>

/* dtrain bench allreduce [flags]: argv are the flags after "allreduce". */
int dt_cli_bench_allreduce(int argc, char **argv);
/* dtrain plan [flags] (plan.c): argv are the flags after "plan". */
int dt_cli_plan(int argc, char **argv);
/* dtrain rl [flags] (rl.c): the whole command line (it starts the launcher). */
int dt_cli_rl(int argc, char **argv);
/* dtrain bench allreduce --fit on c (bench_fit.c): prints the cost model's
 * parameters measured here; 0 or 1. Collective over c. */
int dt_bench_fit(dt_comm *c);

/* The flags of the tables that `cmd` (DT_FLAG_TRAIN or DT_FLAG_EVAL) takes,
 * by section (train) with their defaults: tabs[0] is the library's table (its
 * defaults come from dt_train_cfg_default), the others' bases hold theirs. */
void dt_cli_print_help(FILE *out, const dt_flag_table *tabs, int ntabs, unsigned cmd);

#endif
