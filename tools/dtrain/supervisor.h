/* Supervisor: restarts a failed job from its newest checkpoint (supervisor.c). */
#ifndef DT_SUPERVISOR_H
#define DT_SUPERVISOR_H

#include <stdbool.h>

typedef struct dt_supervise_cfg {
    int max_restarts;
    int min_nproc;
    int nproc;            /* -n given by the user */
    bool nproc_given;
    const char *hostfile; /* re-read and its hosts probed before every attempt when -n is not given */
    bool can_resume;      /* --ckpt-dir given: restarts add --resume auto */
    double backoff;       /* first back-off, seconds; doubles up to 30 */
} dt_supervise_cfg;

/* Runs argv (the whole dtrain command line) under supervision; returns the exit code. */
int dt_supervise(int argc, char **argv, const dt_supervise_cfg *cfg);

#endif
