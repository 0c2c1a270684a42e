/* The launcher: `dtrain <cmd> -n N ...` on one machine (or with --hostfile on
 * several) re-executes itself under mpirun with the flags a user would
 * otherwise have to know: --oversubscribe (more ranks than cores is fine for
 * testing), --allow-run-as-root when running as root, --bind-to none (the
 * ranks share cores with their communication threads), and one BLAS thread
 * per rank unless the user set OPENBLAS_NUM_THREADS or --threads. Under an
 * existing mpirun/srun, dtrain just runs as the rank it was given.
 *
 * A parameter-server run under ASP/SSP goes on without a worker that dies
 * (src/ps/ps.c). Open MPI's mpirun would end the whole job at the first rank
 * that dies, so for those runs it gets --mca orte_abort_on_non_zero_status 0
 * and runs as our child rather than replacing us: the survivors end with
 * _exit (MPI_Finalize would wait for the dead rank forever), mpirun then exits
 * with the dead rank's status, and we turn that into 0 when rank 0 wrote
 * "done" into the file named by DTRAIN_DONE_FILE, which it does only after every
 * output of the run is on disk.
 *
 * mpirun runs with --quiet (Open MPI's banners on a failing rank repeat what
 * dtrain already said in one line), which also hides why MPI itself could not
 * start. So mpirun is always our child: rank 0 writes "up" into the file named
 * by DTRAIN_UP_FILE once MPI is initialised, and when mpirun fails before that
 * we say so in one line (DTRAIN_MPI_VERBOSE=1 shows Open MPI's own messages).
 *
 * On a cluster, a rank that ends the job (MPI_Abort after a fault it
 * reported) first appends "abort CODE" to that file: when mpirun has not
 * ended the job ABORT_GRACE seconds later (its teardown waits for a host that
 * cannot answer: powered off, or cut off the network), we stop mpirun
 * ourselves. And when a job with --hostfile fails, every host of the job is
 * probed (hosts.c) and the ones that cannot be reached are named with their
 * ranks: "lost host node2 (ranks 2-3)", which mpirun's own message does not
 * say. */
#include "launch.h"

#include "elastic.h"
#include "hosts.h"
#include "stop.h"

#include "dtrain/core.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DONE_ENV "DTRAIN_DONE_FILE"
#define UP_ENV "DTRAIN_UP_FILE"
#define ABORT_GRACE 10.0 /* seconds mpirun gets to end an aborted job */
#define STOPPED_GRACE 5.0 /* seconds mpirun gets to end once rank 0 said the run stopped */

static bool env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

/* Open MPI's mpirun, MPICH/Hydra (PMI_*), PMIx launchers, or srun
 * (SLURM_STEP_ID exists only inside a job step, so a plain sbatch script that
 * runs dtrain without srun stays single-process). */
bool dt_under_mpi_launcher(void) {
    if (env_set("OMPI_COMM_WORLD_SIZE")) return true;
    if (env_set("PMI_SIZE") && env_set("PMI_RANK")) return true;
    if (env_set("PMIX_RANK")) return true;
    return env_set("SLURM_NTASKS") && env_set("SLURM_PROCID") && env_set("SLURM_STEP_ID");
}

/* The value of the last flag a (or b) of argv, given as `a v` or `a=v`, as the
 * flag parser reads it (which also reads --config FILE: the launcher does not). */
static const char *flag_value(int argc, char **argv, const char *a, const char *b) {
    const char *v = NULL;
    for (int i = 0; i < argc; i++) {
        const char *names[2] = {a, b};
        for (int k = 0; k < 2 && names[k]; k++) {
            size_t n = strlen(names[k]);
            if (strncmp(argv[i], names[k], n) != 0) continue;
            if (argv[i][n] == '=' && names[k][1] == '-') v = argv[i] + n + 1;
            else if (argv[i][n] == '\0' && i + 1 < argc) v = argv[i + 1];
        }
    }
    return v;
}

int dt_launch_nproc(int argc, char **argv, int *n) {
    *n = 1;
    const char *v = flag_value(argc, argv, "-n", "--nproc");
    if (!v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 1 || x > 100000) {
        fprintf(stderr, "dtrain: -n expects a number of ranks in [1, 100000], got '%s'\n", v);
        return 2;
    }
    *n = (int)x;
    return 0;
}

/* --strategy ps with --consistency asp or ssp:K, and `dtrain rl --async`: the
 * runs that outlive a worker (an actor). */
static bool survives_lost_worker(int argc, char **argv, bool rl) {
    for (int i = 0; rl && i < argc; i++)
        if (strcmp(argv[i], "--async") == 0) return true;
    const char *strategy = flag_value(argc, argv, "--strategy", NULL);
    const char *cons = flag_value(argc, argv, "--consistency", NULL);
    return strategy && strcmp(strategy, "ps") == 0 && cons &&
           (strcmp(cons, "asp") == 0 || strncmp(cons, "ssp:", 4) == 0);
}

void dt_launch_report_up(void) {
    const char *path = getenv(UP_ENV);
    if (!path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("up\n", f);
    fclose(f);
}

void dt_launch_report_done(const char *lost_desc) {
    const char *path = getenv(DONE_ENV);
    if (!path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "dtrain: cannot write %s to tell the launcher the run completed: %s\n", path, strerror(errno));
        return;
    }
    fprintf(f, "done\n%s\n", lost_desc ? lost_desc : "");
    if (fclose(f) != 0) fprintf(stderr, "dtrain: cannot write %s: %s\n", path, strerror(errno));
}

int dt_launch_stopped_code(void) {
    const char *path = getenv(UP_ENV);
    return path && *path ? 0 : DT_EXIT_STOPPED;
}

void dt_launch_report_stopped(void) {
    const char *path = getenv(UP_ENV);
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fputs("stopped\n", f);
    fclose(f);
}

void dt_launch_report_abort(int code) {
    const char *path = getenv(UP_ENV);
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "abort %d\n", code);
    fclose(f);
}

static bool file_says(const char *path, const char *word) {
    char line[64] = "";
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool yes = fgets(line, sizeof line, f) && strncmp(line, word, strlen(word)) == 0;
    fclose(f);
    return yes;
}

static bool file_has_line(const char *path, const char *want) {
    char line[64];
    bool yes = false;
    FILE *f = fopen(path, "r");
    while (f && !yes && fgets(line, sizeof line, f)) yes = strcmp(line, want) == 0;
    if (f) fclose(f);
    return yes;
}

/* Waits for mpirun; stops it when a rank appended "abort" to the up file and
 * mpirun has not ended the job ABORT_GRACE seconds later. Returns its status. */
static int wait_mpirun(pid_t pid, const char *up_path, int *stopped_code) {
    int status = 0;
    *stopped_code = -1;
    off_t seen = 0;
    double abort_at = 0, term_at = 0, stop_at = 0;
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) {
            if (!term_at) *stopped_code = -1;
            return status;
        }
        double now = dt_now();
        struct stat st;
        if (!abort_at && up_path[0] && stat(up_path, &st) == 0 && st.st_size != seen) {
            seen = st.st_size;
            dt_stop_child_ready(); /* rank 0 is up: mpirun forwards SIGUSR2 by now */
            char line[64];
            FILE *f = fopen(up_path, "r");
            while (f && fgets(line, sizeof line, f)) {
                if (sscanf(line, "abort %d", stopped_code) == 1) abort_at = now;
                if (strcmp(line, "stopped\n") == 0 && !stop_at) stop_at = now;
            }
            if (f) fclose(f);
        }
        if (stop_at && !term_at && now - stop_at > STOPPED_GRACE) {
            /* Every rank has written its checkpoint and left (rank 0 says so
             * after the others); mpirun, signalled itself, may linger. */
            kill(pid, SIGKILL);
            term_at = now;
            *stopped_code = DT_EXIT_STOPPED;
        }
        if (abort_at && !term_at && now - abort_at > ABORT_GRACE) {
            /* SIGKILL: mpirun's own SIGTERM handling waits on the same host
             * (and crashed in PMIx_Finalize when tried). Ranks that aborted
             * have ended by themselves; those of the host that cannot answer
             * are beyond anyone's reach until it does. */
            fprintf(stderr, "dtrain: a rank ended the job (see its report above), but mpirun had not stopped the other ranks "
                            "%.0f s later (a host that cannot answer?); stopping mpirun\n", ABORT_GRACE);
            kill(pid, SIGKILL);
            term_at = now;
        }
        nanosleep(&nap, NULL);
    }
}

/* After a failed job on a hostfile: names the hosts of the job's n ranks that
 * cannot be reached now, with the ranks they held. */
static void name_lost_hosts(const char *hostfile, int n) {
    static dt_host hosts[DT_MAX_HOSTS];
    int nh = dt_hostfile_read(hostfile, hosts), used = 0;
    while (used < nh && hosts[used].first_rank < n) used++;
    if (used < 2 || dt_hosts_probe(hosts, used, 5.0) == 0) return;
    for (int i = 0; i < used; i++) {
        if (hosts[i].reachable) continue;
        char ranks[64];
        dt_host_ranks(&hosts[i], ranks, sizeof ranks);
        fprintf(stderr, "dtrain: the job lost host %s (%s): it cannot be reached: %s\n", hosts[i].name, ranks, hosts[i].why);
    }
}

/* Runs mpirun (av) as a child and returns dtrain's exit code (see the top).
 * done_path: the completion marker of a run that may lose workers, or "". */
static int run_mpirun(const char **av, const char *done_path, const char *up_path, int n, const char *hostfile, const char *who) {
    dt_stop_install_forward();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dtrain: cannot start mpirun: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        /* Its own process group: a Ctrl-C reaches dtrain alone, which passes
         * the stop on (mpirun's own SIGINT would end the job). */
        setpgid(0, 0);
        execvp("mpirun", (char *const *)av);
        fprintf(stderr, "dtrain: cannot run mpirun: %s; install openmpi-bin (scripts/install-deps.sh)\n", strerror(errno));
        _exit(1);
    }
    setpgid(pid, pid); /* also here: whichever of the two runs first */
    dt_stop_forward_to(pid, !up_path[0]);
    int stopped = -1;
    int status = wait_mpirun(pid, up_path, &stopped);
    dt_stop_forward_to(0, false);
    dt_stop_cleanup();
    int code = stopped >= 0 ? stopped : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && hostfile) name_lost_hosts(hostfile, n);
    bool up = up_path[0] && file_says(up_path, "up");
    if (up && file_has_line(up_path, "stopped\n")) code = DT_EXIT_STOPPED; /* whatever mpirun made of it */
    if (up_path[0]) unlink(up_path);
    if (code != 0 && !up && up_path[0] && !(WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM)))
        fprintf(stderr, "dtrain: MPI could not start the %d ranks (mpirun exit status %d): check that Open MPI works here "
                        "(e.g. `mpirun -n %d hostname`) and rerun with DTRAIN_MPI_VERBOSE=1 to see its messages\n",
                n, code, n);
    if (!done_path[0]) return code;
    char line[2][512] = {"", ""};
    FILE *f = fopen(done_path, "r");
    bool done = false;
    if (f) {
        done = fgets(line[0], sizeof line[0], f) && strcmp(line[0], "done\n") == 0;
        if (done && fgets(line[1], sizeof line[1], f)) line[1][strcspn(line[1], "\n")] = '\0';
        fclose(f);
    }
    unlink(done_path);
    /* mpirun told not to end the job at a failing rank exits 0 even when every
     * rank failed: without rank 0's "done" (or a stop) the run did not complete. */
    if (!done && code == 0) return 1;
    if (!done || code == 0) return code;
    if (line[1][0])
        fprintf(stderr, "dtrain: the run completed without the lost %s%s %s (mpirun's exit status %d came from %s)\n", who,
                strchr(line[1], ',') ? "s" : "", line[1], code, strchr(line[1], ',') ? "them" : "it");
    else
        fprintf(stderr, "dtrain: the run completed; a rank ended badly afterwards (mpirun's exit status %d)\n", code);
    return 0;
}

int dt_launch(int argc, char **argv, int cmd_args_from) {
    int n;
    int rc = dt_launch_nproc(argc - cmd_args_from, argv + cmd_args_from, &n);
    if (rc) return rc;
    const char *hostfile = flag_value(argc - cmd_args_from, argv + cmd_args_from, "--hostfile", NULL);
    bool joiner = flag_value(argc - cmd_args_from, argv + cmd_args_from, "--join", NULL) != NULL;
    if (dt_under_mpi_launcher() || (n == 1 && !hostfile && !joiner)) return -1;
    if (hostfile && access(hostfile, R_OK) != 0) {
        fprintf(stderr, "dtrain: --hostfile %s: %s\n", hostfile, strerror(errno));
        return 1;
    }

    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "dtrain: cannot find my own executable to launch ranks: %s\n", strerror(errno));
        return 1;
    }
    self[len] = '\0';
    bool threads_flag = flag_value(argc - cmd_args_from, argv + cmd_args_from, "--threads", NULL) != NULL;
    if (!getenv("OPENBLAS_NUM_THREADS") && !threads_flag) setenv("OPENBLAS_NUM_THREADS", "1", 1);

    char nbuf[32];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    const char **av = calloc((size_t)argc + 48, sizeof *av);
    if (!av) return 1;
    int k = 0;
    av[k++] = "mpirun";
    av[k++] = "-n";
    av[k++] = nbuf;
    av[k++] = "--oversubscribe";
    av[k++] = "--bind-to";
    av[k++] = "none";
    const char *verbose = getenv("DTRAIN_MPI_VERBOSE");
    if (!verbose || !*verbose || strcmp(verbose, "0") == 0) av[k++] = "--quiet";
    if (geteuid() == 0) av[k++] = "--allow-run-as-root";
    if (hostfile) {
        av[k++] = "--hostfile";
        av[k++] = hostfile;
    }
    av[k++] = "-x";
    av[k++] = "OPENBLAS_NUM_THREADS";
    /* What mpirun does when a signal reaches it (or a rank dies): SIGCONT,
     * SIGTERM G seconds later, SIGKILL G seconds after that (Open MPI's G is
     * 1 s). The ranks stop on its SIGTERM with a checkpoint if that fits in G
     * seconds; DTRAIN_MPI_KILL_GRACE raises G (every failed job then takes 2G
     * longer to end). A signal to dtrain itself has no such limit. */
    const char *grace = getenv("DTRAIN_MPI_KILL_GRACE");
    if (grace && *grace) {
        av[k++] = "--mca";
        av[k++] = "odls_base_sigkill_timeout";
        av[k++] = grace;
    }
    av[k++] = "--stdin";
    av[k++] = "none"; /* mpirun is not in the terminal's foreground group */
    dt_stop_install_forward(); /* makes the stop file the ranks read */
    if (getenv("DTRAIN_STOP_FILE")) {
        av[k++] = "-x";
        av[k++] = "DTRAIN_STOP_FILE";
    }
    if (getenv("DTRAIN_DEADLINE")) {
        av[k++] = "-x";
        av[k++] = "DTRAIN_DEADLINE";
    }
    char done_path[4096] = "";
    bool rl = cmd_args_from >= 2 && strcmp(argv[cmd_args_from - 1], "rl") == 0;
    if (survives_lost_worker(argc - cmd_args_from, argv + cmd_args_from, rl)) {
        const char *tmp = getenv("TMPDIR");
        snprintf(done_path, sizeof done_path, "%s/dtrain-done-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(done_path);
        if (fd < 0) {
            fprintf(stderr, "dtrain: cannot create %s (the run's completion marker): %s\n", done_path, strerror(errno));
            free(av);
            return 1;
        }
        close(fd);
        setenv(DONE_ENV, done_path, 1);
        av[k++] = "--mca";
        av[k++] = "orte_abort_on_non_zero_status";
        av[k++] = "0";
        av[k++] = "-x";
        av[k++] = DONE_ENV;
    }
    char up_path[4096];
    {
        const char *tmp = getenv("TMPDIR");
        snprintf(up_path, sizeof up_path, "%s/dtrain-up-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(up_path);
        if (fd < 0) {
            up_path[0] = '\0'; /* no marker: no diagnosis, the run itself is unaffected */
        } else {
            close(fd);
            setenv(UP_ENV, up_path, 1);
            av[k++] = "-x";
            av[k++] = UP_ENV;
        }
    }
    dt_elastic_launch el;
    if (dt_elastic_prepare(argc - cmd_args_from, argv + cmd_args_from, &el)) {
        free(av);
        return 1;
    }
    if (el.on) {
        av[k++] = "--ompi-server";
        av[k++] = el.arg;
    }
    av[k++] = self;
    for (int i = 1; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    fflush(NULL);
    int code = run_mpirun(av, done_path, up_path, n, hostfile, rl ? "actor" : "worker");
    dt_elastic_end(&el);
    free(av);
    return code;
}
