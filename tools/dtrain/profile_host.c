/* The host's ranks profiled at once (cli.h): per - 1 forked children and
 * this process each run dt_plan_profile, every timed operation ending at a
 * barrier in shared memory, so a profile's times are those of a synchronous
 * step with that many ranks on the host. The barrier polls (a 20 us sleep
 * between looks, never a spin that would steal a core from the ranks being
 * timed) and gives way when a profile failed: the failing process marks
 * `failed` and every wait returns at once. Cost: the profile's, per process. */
#include "cli.h"

#include "dtrain/plan.h"

#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct shared_bar {
    _Atomic int arrived;     /* arrivals in the current round */
    _Atomic int round;
    _Atomic int failed;
    int n;
} shared_bar;

static void bar_wait(void *ctx) {
    shared_bar *b = ctx;
    int r = atomic_load(&b->round);
    if (atomic_fetch_add(&b->arrived, 1) == b->n - 1) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->round, 1);
        return;
    }
    struct timespec ts = {0, 20000};
    while (atomic_load(&b->round) == r && !atomic_load(&b->failed)) nanosleep(&ts, NULL);
}

int dt_cli_profile_host(const char *who, const dt_model_cfg *mc, int B, bool adam, int per, dt_plan_profile_out *out) {
    if (per < 1 || per > 256) {
        fprintf(stderr, "%s: cannot profile %d ranks per host (1-256)\n", who, per);
        return 1;
    }
    shared_bar *b = per > 1 ? mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0) : NULL;
    if (b == MAP_FAILED) b = NULL;
    if (b) b->n = per;
    pid_t pid[256];
    int kids = 0;
    fflush(NULL);
    for (; b && kids < per - 1; kids++) {
        if ((pid[kids] = fork()) < 0) break;
        if (pid[kids] == 0) {
            dt_plan_profile_out o;
            dt_status st = dt_plan_profile(mc, B, adam, bar_wait, b, &o);
            if (st) atomic_store(&b->failed, 1);
            _exit(st ? 1 : 0);
        }
    }
    if (b && kids < per - 1) atomic_store(&b->failed, 1); /* a fork failed: the rest must not wait for it */
    dt_status st = dt_plan_profile(mc, B, adam, b ? bar_wait : NULL, b, out);
    if (st && b) atomic_store(&b->failed, 1);
    int bad = 0;
    for (int i = 0; i < kids; i++) {
        int ws = 0;
        waitpid(pid[i], &ws, 0);
        bad |= !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    }
    int failed = b && (atomic_load(&b->failed) || kids < per - 1);
    if (b) munmap(b, sizeof *b);
    if (st) fprintf(stderr, "%s: %s\n", who, dt_error_msg());
    else if (failed || bad) fprintf(stderr, "%s: profiling %d ranks at once failed (a process could not start or ran out of memory)\n", who, per);
    out->procs = per;
    return st || failed || bad ? 1 : 0;
}
