/* The hosts of an Open MPI hostfile, and whether each can be reached now
 * (hosts.c). Used by the launcher to name a host a failed job lost, and by the
 * supervisor to restart without the hosts that are gone. */
#ifndef DT_HOSTS_H
#define DT_HOSTS_H

#include <stdbool.h>

#define DT_MAX_HOSTS 256

typedef struct {
    char name[256];
    int slots;        /* "slots=N", 1 when not given */
    int first_rank;   /* ranks first_rank .. first_rank + slots - 1 under mpirun's by-slot mapping */
    bool reachable;   /* after dt_hosts_probe */
    char why[256];    /* why not, when not reachable */
} dt_host;

/* Reads path into hosts (at most DT_MAX_HOSTS). Returns the number of hosts,
 * or -1 when the file cannot be read. */
int dt_hostfile_read(const char *path, dt_host *hosts);
/* Total slots listed in an Open MPI hostfile, -1 if unreadable. */
int dt_hostfile_slots(const char *path);
/* Asks every host, in parallel, to run `true` through the agent Open MPI would
 * use (OMPI_MCA_plm_rsh_agent, else ssh in batch mode), each within `seconds`.
 * This machine's own name and localhost are reachable without asking; when
 * the agent cannot be run at all, every host counts as reachable (no news).
 * Returns the number of hosts that cannot be reached. */
int dt_hosts_probe(dt_host *hosts, int n, double seconds);
/* "ranks 2-3" / "rank 4" of hosts[i] into buf. */
void dt_host_ranks(const dt_host *h, char *buf, unsigned long n);
/* Writes the reachable hosts to a new file under $TMPDIR (or /tmp), its path
 * into path (n bytes). Returns their slots, or -1 (said on stderr). */
int dt_hostfile_write_reachable(const dt_host *hosts, int n, char *path, unsigned long pn);

#endif
