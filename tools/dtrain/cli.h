/* Subcommands implemented outside main.c. */
#ifndef DT_CLI_H
#define DT_CLI_H

/* dtrain bench allreduce [flags]: argv are the flags after "allreduce". */
int dt_cli_bench_allreduce(int argc, char **argv);

#endif
