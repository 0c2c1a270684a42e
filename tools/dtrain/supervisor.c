/* The supervisor (--max-restarts K): runs the job as a child process (which
 * starts the ranks through mpirun, or runs the single rank), and when it ends
 * badly — a rank died of any signal or exit code, or a deadline expired (exit
 * 3) — waits a back-off and starts it again from the newest valid checkpoint,
 * up to K times, logging each restart with its cause. With --hostfile and no
 * -n, the hostfile is read again before every attempt, every host in it is
 * probed the way mpirun would reach it, and the job runs on the slots of the
 * hosts that answer (elastic down- and up-sizing: a host that died or dropped
 * off the network is named with the ranks it held, and left out until it
 * answers again); --min-nproc refuses fewer. */
#include "supervisor.h"

#include "hosts.h"
#include "stop.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void describe(int status, char *buf, size_t n) {
    if (WIFSIGNALED(status))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (WEXITSTATUS(status) == 3)
        snprintf(buf, n, "a communication deadline expired (exit 3)");
    else
        snprintf(buf, n, "exit code %d%s", WEXITSTATUS(status),
                 WEXITSTATUS(status) > 128 ? " (a rank died of a signal)" : "");
}

static bool has_flag(int argc, char **argv, const char *f) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], f) == 0) return true;
    return false;
}

/* The hosts of this attempt: the hostfile read again, its hosts probed; those
 * that do not answer are named (with the ranks the last attempt gave them) and
 * left out. Writes the hosts that answer to a new file (path) and returns
 * their slots, or -1 after saying why the job cannot start. */
static int attempt_hosts(const dt_supervise_cfg *cfg, int attempt, char *path, size_t pn) {
    static dt_host hosts[DT_MAX_HOSTS];
    int n = dt_hostfile_read(cfg->hostfile, hosts);
    if (n <= 0) {
        fprintf(stderr, "dtrain: --hostfile %s lists no hosts (or cannot be read)\n", cfg->hostfile);
        return -1;
    }
    int lost = n > 1 || attempt > 0 ? dt_hosts_probe(hosts, n, 5.0) : 0;
    for (int i = 0; i < n && lost; i++) {
        if (hosts[i].reachable) continue;
        char ranks[64];
        dt_host_ranks(&hosts[i], ranks, sizeof ranks);
        fprintf(stderr, "dtrain supervisor: host %s (%s in a full job) cannot be reached: %s; leaving it out\n",
                hosts[i].name, ranks, hosts[i].why);
    }
    int slots = dt_hostfile_write_reachable(hosts, n, path, pn);
    if (slots < 0) return -1;
    if (slots < 1 || slots < cfg->min_nproc) {
        fprintf(stderr, "dtrain: --hostfile %s: %d slot%s on hosts that answer, fewer than %s %d; not starting\n",
                cfg->hostfile, slots, slots == 1 ? "" : "s", slots < 1 ? "the" : "--min-nproc", slots < 1 ? 1 : cfg->min_nproc);
        unlink(path);
        return -1;
    }
    if (attempt > 0)
        fprintf(stderr, "dtrain supervisor: %s lists %d slot%s now%s\n", cfg->hostfile, slots, slots == 1 ? "" : "s",
                lost ? " on the hosts that answer" : "");
    return slots;
}

static int supervise(int argc, char **argv, const dt_supervise_cfg *cfg) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "dtrain: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    self[len] = '\0';
    /* A stop signal goes to the job as the launcher passes it on; the job
     * stops with a checkpoint and exit DT_EXIT_STOPPED, which ends supervision. */
    dt_stop_install_forward();

    double backoff = cfg->backoff;
    for (int attempt = 0;; attempt++) {
        /* argv for this attempt: the user's, plus -n from the hostfile, plus resume. */
        const char **av = calloc((size_t)argc + 8, sizeof *av);
        if (!av) return 1;
        int k = 0;
        av[k++] = self;
        for (int i = 1; i < argc; i++) av[k++] = argv[i];
        char nbuf[32], hostfile[4096] = "";
        if (cfg->hostfile && !cfg->nproc_given) {
            int slots = attempt_hosts(cfg, attempt, hostfile, sizeof hostfile);
            if (slots < 0) {
                free(av);
                return 1;
            }
            snprintf(nbuf, sizeof nbuf, "%d", slots);
            av[k++] = "-n";
            av[k++] = nbuf;
            av[k++] = "--hostfile";
            av[k++] = hostfile;
        } else if (cfg->nproc_given && cfg->nproc < cfg->min_nproc) {
            fprintf(stderr, "dtrain: -n %d is fewer than --min-nproc %d\n", cfg->nproc, cfg->min_nproc);
            free(av);
            return 2;
        }
        if (attempt > 0 && cfg->can_resume && !has_flag(argc, argv, "--resume")) {
            av[k++] = "--resume";
            av[k++] = "auto";
        }
        av[k] = NULL;
        char abuf[32];
        snprintf(abuf, sizeof abuf, "%d", attempt);
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "dtrain: cannot start the job: %s\n", strerror(errno));
            free(av);
            return 1;
        }
        if (pid == 0) {
            setpgid(0, 0); /* a Ctrl-C reaches the supervisor alone, which passes it on once */
            setenv("DTRAIN_SUPERVISED", "1", 1);
            setenv("DTRAIN_ATTEMPT", abuf, 1);
            execv(self, (char *const *)av);
            fprintf(stderr, "dtrain: cannot run %s: %s\n", self, strerror(errno));
            _exit(127);
        }
        free(av);
        setpgid(pid, pid);
        dt_stop_forward_to(pid, true);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        dt_stop_forward_to(0, false);
        if (hostfile[0]) unlink(hostfile);
        if (WIFEXITED(status) && WEXITSTATUS(status) == DT_EXIT_STOPPED) {
            fprintf(stderr, "dtrain supervisor: the job stopped on request with a checkpoint; not restarting (resume "
                            "with --resume auto)\n");
            return DT_EXIT_STOPPED;
        }
        if (dt_stop_caught()) {
            char why[256];
            describe(status, why, sizeof why);
            fprintf(stderr, "dtrain supervisor: stopped by signal %d (%s); the job ended: %s\n", dt_stop_caught(),
                    strsignal(dt_stop_caught()), why);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            if (attempt > 0) fprintf(stderr, "dtrain supervisor: the job finished after %d restart%s\n", attempt, attempt == 1 ? "" : "s");
            return 0;
        }
        char why[256];
        describe(status, why, sizeof why);
        if (WIFEXITED(status) && (WEXITSTATUS(status) == 2 || WEXITSTATUS(status) == 1)) {
            /* Usage errors and errors every rank hits alike (bad data, bad
             * checkpoint) would fail again: do not restart on them. */
            fprintf(stderr, "dtrain supervisor: the job failed (%s); not restarting an error that would repeat\n", why);
            return WEXITSTATUS(status);
        }
        if (attempt >= cfg->max_restarts) {
            fprintf(stderr, "dtrain supervisor: attempt %d ended: %s; no restarts left (--max-restarts %d)\n",
                    attempt + 1, why, cfg->max_restarts);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        fprintf(stderr, "dtrain supervisor: attempt %d ended: %s; restarting %s in %.1f s (restart %d of %d)\n",
                attempt + 1, why, cfg->can_resume ? "from the newest valid checkpoint" : "from scratch (no --ckpt-dir)",
                backoff, attempt + 1, cfg->max_restarts);
        struct timespec ts = {(time_t)backoff, (long)((backoff - (double)(time_t)backoff) * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !dt_stop_caught()) {
        }
        if (dt_stop_caught()) {
            fprintf(stderr, "dtrain supervisor: stopped by signal %d before the restart\n", dt_stop_caught());
            return 128 + dt_stop_caught();
        }
        backoff = backoff * 2 > 30 ? 30 : backoff * 2;
    }
}

int dt_supervise(int argc, char **argv, const dt_supervise_cfg *cfg) {
    int rc = supervise(argc, argv, cfg);
    dt_stop_cleanup();
    return rc;
}
