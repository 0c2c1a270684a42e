/* Launcher: re-executes dtrain under mpirun for `-n N` (see launch.c). */
#ifndef DT_LAUNCH_H
#define DT_LAUNCH_H

#include <stdbool.h>

/* Started by mpirun/srun (read from the environment)? The one answer to "is this
 * an MPI job": what dt_comm_init is told, and whether dt_launch starts mpirun. */
bool dt_under_mpi_launcher(void);
/* Reads -n/--nproc from args (default 1). Returns 0, or 2 after printing a usage error. */
int dt_launch_nproc(int argc, char **argv, int *n);
/* If -n N > 1 (or --hostfile) and not already under a launcher, execs mpirun
 * (does not return on success). Returns -1 to carry on in this process, or an
 * exit code. argv[cmd_args_from..] are the command's flags.
 * Parameter-server runs under ASP or SSP survive a lost worker: there mpirun
 * runs as a child told not to end the job when one rank dies, and the exit
 * code is 0 if rank 0 reported the run complete (dt_launch_report_done),
 * otherwise mpirun's. */
int dt_launch(int argc, char **argv, int cmd_args_from);
/* Rank 0, at the very end of a run that completed: tells the launcher (if it
 * asked, through DTRAIN_DONE_FILE) that every output is written, and which
 * workers were lost ("" for none). */
void dt_launch_report_done(const char *lost_desc);
/* Rank 0, once MPI is initialised: tells the launcher MPI started. */
void dt_launch_report_up(void);
/* Rank 0, after a run that stopped on request ended on every rank: tells the
 * launcher, whose exit code is then DT_EXIT_STOPPED whatever mpirun's. */
void dt_launch_report_stopped(void);
/* A stopped rank's exit code: 0 under dtrain's launcher (which exits with
 * DT_EXIT_STOPPED for the job; mpirun takes a second or two longer to end a
 * job whose ranks exit non-zero), else DT_EXIT_STOPPED (srun, mpirun). */
int dt_launch_stopped_code(void);
/* Any rank, just before it aborts the job with exit code `code`: tells the
 * launcher, which stops mpirun if it has not ended the job soon after. */
void dt_launch_report_abort(int code);

#endif
