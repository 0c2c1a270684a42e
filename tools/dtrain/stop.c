/* Stopping on signals and time limits: what the program does so that the
 * library can stop a run at a step boundary with a checkpoint.
 *
 * Signals. A rank's handler asks the run to stop (dt_train_request_stop);
 * the request reaches every rank through the step's loss all-reduce. The
 * launcher (`dtrain train -n N`) and the supervisor catch the stop signals
 * too and pass each on to their child as SIGUSR2, writing the first one's
 * number into DTRAIN_STOP_FILE so the ranks name it. SIGUSR2 because mpirun
 * forwards it to every rank and does nothing else with it, whereas mpirun's
 * own SIGTERM or SIGINT ends the job (SIGCONT, then after
 * odls_base_sigkill_timeout SIGTERM, then SIGKILL). For the same reason mpirun
 * runs in its own process group (launch.c): a Ctrl-C on the terminal reaches
 * only dtrain. A second signal says the stop is under way; a third ends the
 * ranks at once (their checkpoints are written atomically, so the previous
 * one stays whole).
 *
 * Time limits. The first process of the command turns --time-limit and a
 * Slurm allocation's end time into a wall-clock deadline in DTRAIN_DEADLINE;
 * the ranks turn it into a time on their own clock, and the library stops
 * early enough by its measured step and checkpoint times. */
#include "stop.h"

#include "dtrain/core.h"
#include "dtrain/train.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define STOP_FILE_ENV "DTRAIN_STOP_FILE"
#define DEADLINE_ENV "DTRAIN_DEADLINE"

static const struct {
    const char *name;
    int sig;
} g_names[] = {{"TERM", SIGTERM}, {"INT", SIGINT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP},
               {"QUIT", SIGQUIT}, {"ALRM", SIGALRM}, {"XCPU", SIGXCPU}, {"KILL", SIGKILL}, {"STOP", SIGSTOP}};

const char *dt_stop_signal_name(int sig) {
    for (size_t i = 0; i < sizeof g_names / sizeof g_names[0]; i++)
        if (g_names[i].sig == sig) return g_names[i].name;
    return NULL;
}

static const char *g_name = "dtrain train"; /* the command, in the lines below */

void dt_stop_set_name(const char *cmd) { g_name = cmd; }

int dt_stop_parse_signals(const char *list, bool *mask, int n) {
    memset(mask, 0, (size_t)n * sizeof *mask);
    if (strcmp(list, "none") == 0) return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const char *w = strncasecmp(t, "SIG", 3) == 0 ? t + 3 : t;
        int sig = -1;
        for (size_t i = 0; i < sizeof g_names / sizeof g_names[0]; i++)
            if (strcasecmp(w, g_names[i].name) == 0) sig = g_names[i].sig;
        if (sig < 0 && isdigit((unsigned char)*w)) sig = atoi(w);
        if (sig <= 0 || sig >= n) {
            fprintf(stderr, "%s: --stop-signals '%s': '%s' is not a signal (e.g. TERM,INT,USR1, or none)\n", g_name, list, t);
            return 2;
        }
        if (sig == SIGKILL || sig == SIGSTOP) {
            fprintf(stderr, "%s: --stop-signals: SIG%s cannot be caught, so it cannot stop a run cleanly; "
                            "use TERM, INT, USR1 or HUP\n", g_name, sig == SIGKILL ? "KILL" : "STOP");
            return 2;
        }
        if (sig == DT_STOP_FORWARD_SIGNAL) {
            fprintf(stderr, "%s: --stop-signals: SIGUSR2 is dtrain's own (how the launcher passes a stop on to "
                            "the ranks) and always stops a run; list the others\n", g_name);
            return 2;
        }
        mask[sig] = true;
    }
    return 0;
}

int dt_stop_parse_duration(const char *s, double *seconds) {
    char *end;
    double v = 0;
    errno = 0;
    long days = 0;
    const char *p = s;
    const char *dash = strchr(s, '-');
    if (dash && dash != s) { /* D-HH:MM:SS */
        days = strtol(s, &end, 10);
        if (end != dash || days < 0) goto bad;
        p = dash + 1;
    }
    if (strchr(p, ':')) { /* [HH:]MM:SS, Slurm's spelling */
        double part[3] = {0, 0, 0};
        int k = 0;
        for (const char *q = p; k < 3;) {
            part[k++] = strtod(q, &end);
            if (end == q || part[k - 1] < 0) goto bad;
            if (*end != ':') break;
            q = end + 1;
        }
        if (*end) goto bad;
        v = k == 3 ? part[0] * 3600 + part[1] * 60 + part[2] : part[0] * 60 + part[1];
    } else {
        v = strtod(p, &end);
        if (end == p || errno || !(v > 0)) goto bad;
        if (*end == 'm' && !end[1]) v *= 60;
        else if (*end == 'h' && !end[1]) v *= 3600;
        else if (*end == 'd' && !end[1]) v *= 86400;
        else if (*end && !(*end == 's' && !end[1])) goto bad;
    }
    v += (double)days * 86400;
    if (!(v > 0) || v > 1e9) goto bad;
    *seconds = v;
    return 0;
bad:
    fprintf(stderr, "%s: --time-limit '%s': expected a duration such as 90, 90s, 15m, 2h, 1:30:00 or 1-00:00:00\n", g_name, s);
    return 2;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The Slurm allocation's end (wall-clock seconds), or 0. Only the first rank
 * of a job step asks (the others' deadlines would repeat its vote), and
 * squeue only runs with SLURM_CONF set: without it Slurm's clients look for
 * their controller in DNS. */
static double slurm_end(void) {
    const char *id = getenv("SLURM_JOB_ID"), *proc = getenv("SLURM_PROCID"), *env_end = getenv("SLURM_JOB_END_TIME");
    if (!id || !*id || (proc && strcmp(proc, "0") != 0)) return 0;
    if (env_end && *env_end) return atof(env_end);
    if (!getenv("SLURM_CONF")) return 0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "squeue -h -j %ld -o %%e 2>/dev/null", atol(id));
    FILE *f = popen(cmd, "r");
    char line[64] = "";
    if (!f) return 0;
    bool got = fgets(line, sizeof line, f) != NULL;
    pclose(f);
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!got || sscanf(line, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                       &tm.tm_sec) != 6)
        return 0; /* "UNLIMITED", "N/A" */
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1; /* squeue prints local time */
    time_t t = mktime(&tm);
    return t > 0 ? (double)t : 0;
}

void dt_stop_set_deadline(double limit) {
    const char *have = getenv(DEADLINE_ENV);
    if (have && *have) return;
    double d = limit > 0 ? wall_now() + limit : 0, s = slurm_end();
    if (s > 0 && (d == 0 || s < d)) d = s;
    if (d <= 0) return;
    char buf[64];
    snprintf(buf, sizeof buf, "%.3f", d);
    setenv(DEADLINE_ENV, buf, 1);
}

double dt_stop_deadline(void) {
    const char *v = getenv(DEADLINE_ENV);
    if (!v || !*v) return 0;
    double left = atof(v) - wall_now();
    double d = dt_now() + (left > 0 ? left : 0);
    return d > 0 ? d : 1e-9;
}

/* ---- handlers ------------------------------------------------------------------------- */

static volatile sig_atomic_t g_count = 0, g_caught = 0, g_quiet = 0;
static volatile sig_atomic_t g_child = 0, g_ready = 0, g_pending = 0;
static char g_own_file[4096]; /* the stop file this process made */
static char g_path[4096];     /* DTRAIN_STOP_FILE, read at install (handlers never call getenv) */
static bool g_ompi;           /* started by Open MPI's mpirun */
static bool g_enabled = false; /* `dtrain train`: the run stops at a step boundary (else a signal ends it as before) */

void dt_stop_enable(bool on) { g_enabled = on; }

static void remember_env(void) {
    const char *p = getenv(STOP_FILE_ENV);
    snprintf(g_path, sizeof g_path, "%s", p ? p : "");
    g_ompi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
}
static bool g_mask[65] = {[SIGTERM] = true, [SIGINT] = true, [SIGUSR1] = true}; /* --stop-signals */

void dt_stop_configure(const bool *mask, int n) {
    for (int s = 1; s < 65; s++) g_mask[s] = s < n && mask[s];
}

static void install(void (*fn)(int), void (*info)(int, siginfo_t *, void *)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (info) sa.sa_sigaction = info;
    else sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART | (info ? SA_SIGINFO : 0);
    sigemptyset(&sa.sa_mask);
    for (int s = 1; s < 65; s++)
        if (g_mask[s] || s == DT_STOP_FORWARD_SIGNAL) sigaction(s, &sa, NULL);
}

static void say(const char *s) {
    if (!g_quiet) {
        ssize_t w = write(STDERR_FILENO, s, strlen(s));
        (void)w;
    }
}

/* The signal the stop file names (written by whoever caught it first), or 0. */
static int forwarded_signal(void) {
    if (!g_path[0]) return 0;
    int fd = open(g_path, O_RDONLY);
    if (fd < 0) return 0;
    char b[16] = "";
    ssize_t k = read(fd, b, sizeof b - 1);
    close(fd);
    int v = 0;
    for (ssize_t i = 0; i < k && b[i] >= '0' && b[i] <= '9'; i++) v = v * 10 + (b[i] - '0');
    return v;
}

/* Copies of one signal arrive close together (the launcher's SIGUSR2 beside
 * the signal itself when the whole job was signalled, as Slurm does): those
 * within MERGE_S of the previous one count once. */
#define MERGE_S 0.1
static double g_last_at = -1e9;

static void on_rank_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    int saved = errno;
    /* mpirun ending the job (a rank died, or mpirun itself was signalled)
     * sends SIGTERM: stop if there is time, without a line for a job that is
     * going down anyway. */
    bool from_mpirun = sig == SIGTERM && si && si->si_pid == getppid() && g_ompi;
    int named = sig == DT_STOP_FORWARD_SIGNAL ? forwarded_signal() : sig;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, last = g_last_at;
    g_last_at = now;
    if (g_count > 0 && now - last < MERGE_S) {
        errno = saved;
        return;
    }
    int n = ++g_count;
    if (n == 1) {
        dt_train_request_stop(named);
        if (!from_mpirun) say("dtrain: stopping at the next step boundary, after a checkpoint (a second signal does nothing more, a third ends at once)\n");
    } else if (n == 2) {
        say("dtrain: already stopping (the checkpoint is being written); one more signal ends at once\n");
    } else {
        say("dtrain: third stop signal: ending now (the newest complete checkpoint stays valid)\n");
        _exit(128 + (named > 0 ? named : sig));
    }
    errno = saved;
}

void dt_stop_install_rank(bool quiet) {
    if (!g_enabled) return;
    g_quiet = quiet;
    remember_env();
    install(NULL, on_rank_signal);
}

void dt_stop_quiet(bool quiet) { g_quiet = quiet; }

static void on_forward_signal(int sig) {
    int saved = errno;
    if (!g_caught) g_caught = sig;
    if (sig != DT_STOP_FORWARD_SIGNAL && ++g_count == 1 && g_path[0]) {
        int fd = open(g_path, O_WRONLY | O_TRUNC);
        if (fd >= 0) {
            char b[16];
            int k = 0, v = sig;
            char r[16];
            do r[k++] = (char)('0' + v % 10); while ((v /= 10) > 0);
            for (int i = 0; i < k; i++) b[i] = r[k - 1 - i];
            ssize_t w = write(fd, b, (size_t)k);
            (void)w;
            close(fd);
        }
    }
    /* Before the child can take it, SIGUSR2 would end it: held until ready. */
    if (!g_enabled) { /* as before: the job ends at once */
        if (g_child > 0) {
            kill((pid_t)g_child, sig);
        } else { /* no job yet: this process ends as the signal says */
            signal(sig, SIG_DFL);
            raise(sig);
        }
    } else if (g_child > 0 && g_ready) {
        kill((pid_t)g_child, DT_STOP_FORWARD_SIGNAL);
    } else {
        g_pending++;
    }
    errno = saved;
}

void dt_stop_install_forward(void) {
    const char *have = getenv(STOP_FILE_ENV);
    if (!have || !*have) {
        const char *tmp = getenv("TMPDIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/dtrain-stop-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(path);
        if (fd >= 0) {
            close(fd);
            setenv(STOP_FILE_ENV, path, 1);
            snprintf(g_own_file, sizeof g_own_file, "%s", path);
        }
    }
    remember_env();
    install(on_forward_signal, NULL);
}

void dt_stop_forward_to(int pid, bool ready) {
    g_ready = 0;
    g_child = pid;
    if (ready) dt_stop_child_ready();
}

void dt_stop_child_ready(void) {
    if (g_ready || g_child <= 0) return;
    g_ready = 1;
    for (; g_pending > 0; g_pending--) kill((pid_t)g_child, DT_STOP_FORWARD_SIGNAL);
}

void dt_stop_cleanup(void) {
    if (g_own_file[0]) unlink(g_own_file);
    g_own_file[0] = '\0';
}

int dt_stop_caught(void) { return g_caught; }
