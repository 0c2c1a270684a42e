/* The launcher: `dtrain <cmd> -n N ...` on one machine (or with --hostfile on
 * several) re-executes itself under mpirun with the flags a user would
 * otherwise have to know: --oversubscribe (more ranks than cores is fine for
 * testing), --allow-run-as-root when running as root, --bind-to none (the
 * ranks share cores with their communication threads), and one BLAS thread
 * per rank unless the user set OPENBLAS_NUM_THREADS or --threads. Under an
 * existing mpirun/srun, dtrain just runs as the rank it was given. */
#include "launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool dt_under_mpi_launcher(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
           (getenv("SLURM_PROCID") && getenv("SLURM_NTASKS") && getenv("PMI_FD"));
}

static const char *flag_value(int argc, char **argv, const char *a, const char *b) {
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], a) == 0 || (b && strcmp(argv[i], b) == 0)) return argv[i + 1];
    return NULL;
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

int dt_launch(int argc, char **argv, int cmd_args_from) {
    int n;
    int rc = dt_launch_nproc(argc - cmd_args_from, argv + cmd_args_from, &n);
    if (rc) return rc;
    const char *hostfile = flag_value(argc - cmd_args_from, argv + cmd_args_from, "--hostfile", NULL);
    if (dt_under_mpi_launcher() || (n == 1 && !hostfile)) return -1;
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
    const char **av = calloc((size_t)argc + 32, sizeof *av);
    if (!av) return 1;
    int k = 0;
    av[k++] = "mpirun";
    av[k++] = "-n";
    av[k++] = nbuf;
    av[k++] = "--oversubscribe";
    av[k++] = "--bind-to";
    av[k++] = "none";
    av[k++] = "--quiet";
    if (geteuid() == 0) av[k++] = "--allow-run-as-root";
    if (hostfile) {
        av[k++] = "--hostfile";
        av[k++] = hostfile;
    }
    av[k++] = "-x";
    av[k++] = "OPENBLAS_NUM_THREADS";
    av[k++] = self;
    for (int i = 1; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    fflush(NULL);
    execvp("mpirun", (char *const *)av);
    fprintf(stderr, "dtrain: cannot run mpirun to start %d ranks: %s; install openmpi-bin (scripts/install-deps.sh)\n",
            n, strerror(errno));
    free(av);
    return 1;
}
