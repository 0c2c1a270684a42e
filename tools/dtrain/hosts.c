/* Hostfiles and host probes (hosts.h). A probe is what Open MPI itself would
 * do to start a daemon there: run a command through the rsh agent (ssh by
 * default), so a host that answers the probe can take ranks, and one that
 * does not (powered off, its link down, no route) cannot. Probes run in
 * parallel, one child each, bounded by a deadline: n hosts cost one deadline
 * at most, a few milliseconds when all answer. */
#include "hosts.h"

#include "dtrain/core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int dt_hostfile_read(const char *path, dt_host *hosts) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int n = 0, rank = 0;
    while (n < DT_MAX_HOSTS && fgets(line, sizeof line, f)) {
        char *h = strchr(line, '#');
        if (h) *h = '\0';
        dt_host *x = &hosts[n];
        memset(x, 0, sizeof *x);
        if (sscanf(line, "%255s", x->name) != 1) continue;
        char *s = strstr(line, "slots=");
        x->slots = s ? atoi(s + 6) : 1;
        if (x->slots < 1) x->slots = 1;
        x->first_rank = rank;
        x->reachable = true;
        rank += x->slots;
        n++;
    }
    fclose(f);
    return n;
}

int dt_hostfile_slots(const char *path) {
    dt_host *hosts = calloc(DT_MAX_HOSTS, sizeof *hosts);
    int n = hosts ? dt_hostfile_read(path, hosts) : -1, total = 0;
    for (int i = 0; i < n; i++) total += hosts[i].slots;
    free(hosts);
    return n < 0 ? -1 : total;
}

void dt_host_ranks(const dt_host *h, char *buf, unsigned long n) {
    if (h->slots == 1) snprintf(buf, n, "rank %d", h->first_rank);
    else snprintf(buf, n, "ranks %d-%d", h->first_rank, h->first_rank + h->slots - 1);
}

static bool is_this_machine(const char *name) {
    char me[256] = "";
    if (strcmp(name, "localhost") == 0 || strncmp(name, "127.", 4) == 0) return true;
    if (gethostname(me, sizeof me - 1) != 0) return false;
    size_t k = strcspn(me, ".");
    return strcmp(name, me) == 0 || (strlen(name) == k && strncmp(name, me, k) == 0);
}

/* Starts `AGENT host true` with stdout/stderr into the pipe fd; -1 if it could not fork. */
static pid_t start_probe(const char *agent, const char *host, int fd) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, STDIN_FILENO);
    if (agent) {
        /* Open MPI splits the agent on spaces; so do we (first alternative only). */
        char copy[1024], *av[32];
        snprintf(copy, sizeof copy, "%s", agent);
        char *colon = strchr(copy, ':');
        if (colon) *colon = '\0';
        int k = 0;
        for (char *t = strtok(copy, " \t"); t && k < 28; t = strtok(NULL, " \t")) av[k++] = t;
        av[k++] = (char *)host;
        av[k++] = "true";
        av[k] = NULL;
        execvp(av[0], av);
    } else {
        execlp("ssh", "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", host, "true", (char *)NULL);
    }
    _exit(127);
}

int dt_hosts_probe(dt_host *hosts, int n, double seconds) {
    const char *agent = getenv("OMPI_MCA_plm_rsh_agent");
    if (agent && !*agent) agent = NULL;
    pid_t pid[DT_MAX_HOSTS];
    int fd[DT_MAX_HOSTS];
    for (int i = 0; i < n; i++) {
        pid[i] = 0;
        fd[i] = -1;
        hosts[i].reachable = true;
        hosts[i].why[0] = '\0';
        if (is_this_machine(hosts[i].name)) continue;
        int p[2];
        if (pipe(p) != 0) continue;
        fflush(NULL);
        pid[i] = start_probe(agent, hosts[i].name, p[1]);
        close(p[1]);
        if (pid[i] < 0) {
            pid[i] = 0;
            close(p[0]);
            continue;
        }
        fd[i] = p[0];
        fcntl(fd[i], F_SETFL, O_NONBLOCK);
    }
    struct timespec nap = {0, 10 * 1000 * 1000};
    double t0 = dt_now();
    int lost = 0, left = 0;
    for (int i = 0; i < n; i++) left += pid[i] > 0;
    while (left > 0) {
        bool late = dt_now() - t0 > seconds;
        for (int i = 0; i < n; i++) {
            if (pid[i] <= 0) continue;
            int status = 0;
            if (waitpid(pid[i], &status, WNOHANG) == 0) continue; /* still asking */
            char out[200] = "";
            ssize_t got = read(fd[i], out, sizeof out - 1);
            out[got > 0 ? got : 0] = '\0';
            out[strcspn(out, "\n")] = '\0';
            if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !out[0]) {
                /* the agent itself is missing: no news about the host */
            } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                hosts[i].reachable = false;
                snprintf(hosts[i].why, sizeof hosts[i].why, "%s", out[0] ? out : "the probe failed");
                lost++;
            }
            close(fd[i]);
            pid[i] = 0;
            left--;
        }
        if (left == 0) break;
        if (late) {
            for (int i = 0; i < n; i++) {
                if (pid[i] <= 0) continue;
                kill(pid[i], SIGKILL);
                waitpid(pid[i], NULL, 0);
                close(fd[i]);
                pid[i] = 0;
                hosts[i].reachable = false;
                snprintf(hosts[i].why, sizeof hosts[i].why, "no answer within %.0f s", seconds);
                lost++;
            }
            break;
        }
        nanosleep(&nap, NULL);
    }
    return lost;
}

int dt_hostfile_write_reachable(const dt_host *hosts, int n, char *path, unsigned long pn) {
    const char *tmp = getenv("TMPDIR");
    snprintf(path, pn, "%s/dtrain-hosts-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "dtrain: cannot write a hostfile in %s: %s\n", tmp && *tmp ? tmp : "/tmp", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    int slots = 0;
    for (int i = 0; i < n; i++) {
        if (!hosts[i].reachable) continue;
        fprintf(f, "%s slots=%d\n", hosts[i].name, hosts[i].slots);
        slots += hosts[i].slots;
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "dtrain: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return slots;
}
