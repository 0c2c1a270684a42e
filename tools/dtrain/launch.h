/* Launcher: re-executes dtrain under mpirun for `-n N` (see launch.c). */
#ifndef DT_LAUNCH_H
#define DT_LAUNCH_H

#include <stdbool.h>

bool dt_under_mpi_launcher(void);
/* Reads -n/--nproc from args (default 1). Returns 0, or 2 after printing a usage error. */
int dt_launch_nproc(int argc, char **argv, int *n);
/* If -n N > 1 (or --hostfile) and not already under a launcher, execs mpirun
 * (does not return on success). Returns -1 to carry on in this process, or an
 * exit code. argv[cmd_args_from..] are the command's flags. */
int dt_launch(int argc, char **argv, int cmd_args_from);

#endif
