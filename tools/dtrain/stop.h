/* Stopping on signals and time limits, the program's side (stop.c): the
 * library only takes a request (dt_train_request_stop) and a deadline. */
#ifndef DT_STOP_H
#define DT_STOP_H

#include <stdbool.h>
#include <stddef.h>

/* dtrain's exit code for a run that stopped on request or at its time limit
 * after writing its checkpoint: EX_TEMPFAIL, "try again" (requeue and resume). */
#define DT_EXIT_STOPPED 75

/* The signal the launcher and the supervisor send the ranks for any stop
 * signal they catch (mpirun forwards it; it never ends the job itself). */
#define DT_STOP_FORWARD_SIGNAL SIGUSR2

/* --stop-signals LIST ("TERM,INT,USR1", names with or without SIG, or
 * numbers; "none"): into a mask of signal numbers (mask[s] true). Returns 0,
 * or prints one line and returns 2. */
int dt_stop_parse_signals(const char *list, bool *mask, int n);
/* The command the flag errors name ("dtrain train" until called). */
void dt_stop_set_name(const char *cmd);
/* "TERM" for SIGTERM (the signals --stop-signals knows by name), else NULL. */
const char *dt_stop_signal_name(int sig);
/* --time-limit: seconds from "90", "90s", "15m", "2h", "1:30:00", "1-00:00:00"
 * (Slurm's spellings). Returns 0, or prints one line and returns 2. */
int dt_stop_parse_duration(const char *s, double *seconds);

/* In the process that first sees the command (supervisor, launcher or the
 * only rank): the job's deadline as wall-clock seconds into DTRAIN_DEADLINE
 * for the ranks: now + limit (limit <= 0: none), or the Slurm allocation's
 * end time when that is sooner. Already set (a parent did it): kept. */
void dt_stop_set_deadline(double limit);
/* Whether runs stop at a step boundary (dtrain train, every strategy); off, a
 * stop signal ends the job at once as it always did. */
void dt_stop_enable(bool on);
/* The stop signals (mask[s]: signal s; TERM, INT and USR1 until called). */
void dt_stop_configure(const bool *mask, int n);

/* In a rank: the deadline on dt_now()'s clock (0: none). */
double dt_stop_deadline(void);

/* The rank's handlers: the first stop signal asks the run to stop at the
 * next step boundary, a second says it is being done, a third ends the
 * process at once. DT_STOP_FORWARD_SIGNAL from the launcher counts as the
 * signal it names in DTRAIN_STOP_FILE. quiet: no lines (ranks other than 0). */
void dt_stop_install_rank(bool quiet);
void dt_stop_quiet(bool quiet);
/* The launcher's and supervisor's handlers: every stop signal goes to the
 * child process as DT_STOP_FORWARD_SIGNAL, the first one named in the stop
 * file (DTRAIN_STOP_FILE, made here unless a parent made it). */
void dt_stop_install_forward(void);
/* The child to forward to (0: none); ready: it handles the signal already,
 * else signals are held until dt_stop_child_ready (mpirun: once rank 0 is up). */
void dt_stop_forward_to(int pid, bool ready);
void dt_stop_child_ready(void);
/* The first stop signal caught here (0: none). */
int dt_stop_caught(void);
/* Removes the stop file if this process made it. */
void dt_stop_cleanup(void);

#endif
