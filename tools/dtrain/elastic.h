/* The launcher's side of elastic parameter-server jobs (elastic.c). */
#ifndef DT_ELASTIC_H
#define DT_ELASTIC_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct dt_elastic_launch {
    bool on;                 /* the job takes joiners (--elastic) or this is one (--join) */
    bool joiner;
    char uri[4096];          /* the ompi-server's contact file, for mpirun --ompi-server file:URI */
    char arg[4200];          /* "file:URI" */
    pid_t server;            /* the ompi-server we started (the job), 0 none */
} dt_elastic_launch;

/* Before mpirun: a job with --elastic MAX (MAX > 0) and --out DIR gets DIR, a
 * fresh secret DIR/join.token (0600) and an ompi-server whose contact goes to
 * DIR/ompi-server.uri (Open MPI needs one for processes that join from
 * outside); a joiner (--join DIR) finds that contact. Returns 0, or 1 after
 * printing why not. */
int dt_elastic_prepare(int argc, char **argv, dt_elastic_launch *e);
/* After mpirun: stops the ompi-server (NULL ok). */
void dt_elastic_end(dt_elastic_launch *e);

#endif
