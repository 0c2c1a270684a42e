/* The launcher's side of elastic parameter-server jobs: the job's secret and
 * the name server joiners need. Open MPI connects processes of two mpiruns
 * only through an ompi-server both were started with; we start one per
 * elastic job, on the loopback interface unless the job spans hosts (then on
 * the interfaces Open MPI picks for the job itself), and stop it when mpirun
 * ends. The secret (32 random bytes as hex, mode 0600) is what a joiner must
 * show; only someone who can read the run directory has it. */
#include "elastic.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *value_of(int argc, char **argv, const char *flag) {
    const char *v = NULL;
    size_t n = strlen(flag);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], flag) == 0 && i + 1 < argc) v = argv[i + 1];
        else if (strncmp(argv[i], flag, n) == 0 && argv[i][n] == '=') v = argv[i] + n + 1;
    }
    return v;
}

static int write_secret(const char *dir) {
    char path[4096], tmp[4200], hex[65];
    unsigned char raw[32];
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw) {
        fprintf(stderr, "dtrain: cannot read /dev/urandom for the job's secret: %s\n", strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    close(fd);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    snprintf(path, sizeof path, "%s/join.token", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || write(fd, hex, 64) != 64 || write(fd, "\n", 1) != 1 || close(fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "dtrain: cannot write the job's secret %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* Starts ompi-server writing its contact to e->uri; waits for it (10 s). */
static int start_name_server(dt_elastic_launch *e, bool hosts) {
    unlink(e->uri);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dtrain: cannot start ompi-server: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
        }
        setpgid(0, 0); /* a terminal's ^C goes to the job, which stops; we stop the server after */
        if (hosts) execlp("ompi-server", "ompi-server", "--no-daemonize", "-r", e->uri, (char *)NULL);
        else
            execlp("ompi-server", "ompi-server", "--no-daemonize", "-r", e->uri, "--mca", "oob_tcp_if_include", "lo",
                   (char *)NULL);
        fprintf(stderr, "dtrain: cannot run ompi-server (Open MPI's name server, needed for --elastic): %s; install "
                        "openmpi-bin\n", strerror(errno));
        _exit(127);
    }
    e->server = pid;
    struct timespec ts = {0, 20 * 1000 * 1000};
    for (int i = 0; i < 500; i++) {
        struct stat sb;
        if (stat(e->uri, &sb) == 0 && sb.st_size > 0) return 0;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            e->server = 0;
            fprintf(stderr, "dtrain: ompi-server ended before it was ready (status %d); --elastic needs it\n", status);
            return 1;
        }
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "dtrain: ompi-server did not write %s within 10 s\n", e->uri);
    dt_elastic_end(e);
    return 1;
}

/* Whether a TCP connection to HOST:PORT (an IPv4 address) opens within 2 s. */
static bool tcp_answers(const char *host, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) return true; /* not ours to judge */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return true;
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (!ok && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t n = sizeof err;
        ok = poll(&p, 1, 2000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) == 0 && err == 0;
    }
    close(fd);
    return ok;
}

/* Whether the job's name server still answers at one of the tcp:// addresses
 * its contact file lists ("ID;tcp://A:P[,tcp://B:P]"); the address that
 * refused in `dead` (none parsed: assumed alive, MPI will say). A job killed
 * outright leaves its files behind, and MPI_Comm_connect to a name server
 * that is gone waits half an hour. */
static bool name_server_alive(const char *uri, char *dead, size_t dn) {
    char text[1024] = "";
    FILE *f = fopen(uri, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    bool parsed = false;
    for (char *p = strstr(text, "tcp://"); p; p = strstr(p + 1, "tcp://")) {
        char host[64];
        int port = 0;
        if (sscanf(p + 6, "%63[0-9.]:%d", host, &port) != 2) continue;
        if (tcp_answers(host, port)) return true;
        if (!parsed) snprintf(dead, dn, "%s:%d", host, port);
        parsed = true;
    }
    return !parsed;
}

int dt_elastic_prepare(int argc, char **argv, dt_elastic_launch *e) {
    memset(e, 0, sizeof *e);
    const char *join = value_of(argc, argv, "--join"), *el = value_of(argc, argv, "--elastic");
    const char *out = value_of(argc, argv, "--out");
    if (join) {
        e->on = e->joiner = true;
        snprintf(e->uri, sizeof e->uri, "%s/ompi-server.uri", join);
        if (access(e->uri, R_OK) != 0) {
            fprintf(stderr, "dtrain: --join %s: %s: %s (is the job running with --elastic MAX --out %s?)\n", join, e->uri,
                    strerror(errno), join);
            return 1;
        }
        char dead[96];
        if (!name_server_alive(e->uri, dead, sizeof dead)) {
            fprintf(stderr, "dtrain: --join %s: the job there has ended (its name server at %s, from %s, does not "
                            "answer); start a job with --elastic MAX --out %s to join one\n", join, dead, e->uri, join);
            return 1;
        }
    } else if (el && atoi(el) > 0 && out) {
        e->on = true;
        if (mkdir(out, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "dtrain: --out %s: %s\n", out, strerror(errno));
            return 1;
        }
        char path[4200];
        snprintf(path, sizeof path, "%s/join.json", out);
        unlink(path); /* a former job's port is no way in */
        snprintf(e->uri, sizeof e->uri, "%s/ompi-server.uri", out);
        if (write_secret(out) || start_name_server(e, value_of(argc, argv, "--hostfile") != NULL)) return 1;
    } else {
        return 0;
    }
    snprintf(e->arg, sizeof e->arg, "file:%s", e->uri);
    return 0;
}

void dt_elastic_end(dt_elastic_launch *e) {
    if (!e || e->server <= 0) return;
    kill(e->server, SIGTERM);
    int status;
    for (int i = 0; i < 100 && waitpid(e->server, &status, WNOHANG) == 0; i++) usleep(20000);
    if (waitpid(e->server, &status, WNOHANG) == 0) {
        kill(e->server, SIGKILL);
        waitpid(e->server, &status, 0);
    }
    e->server = 0;
    unlink(e->uri);
}
