/* dtrain rl: the command line of the actor-learner run (src/rl/a2c.c). Flags
 * are read here; the launcher starts the ranks for -n N. */
#include "cli.h"
#include "launch.h"
#include "dtrain/rl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *rl_help =
    "usage: dtrain rl --env cartpole|acrobot [-n N] [--out DIR] [flags]\n"
    "Actor-learner reinforcement learning (V-trace targets, IMPALA's loss): rank 0 learns,\n"
    "ranks 1..N-1 act; alone, one process does both. Synchronous (A2C, bitwise repeatable)\n"
    "unless --async.\n"
    "  --env NAME          cartpole | acrobot\n"
    "  --envs E            environment copies per actor (16)\n"
    "  --unroll T          steps per rollout (16)\n"
    "  --hidden H          width of the policy-value network (64)\n"
    "  --updates U         learner updates (600)\n"
    "  --lr LR             Adam learning rate (0.002)\n"
    "  --gamma G           discount (0.99)\n"
    "  --entropy C         entropy bonus (0.01)\n"
    "  --value-coef C      value loss weight (0.5)\n"
    "  --seed S            (1)\n"
    "  --log-every K       a metrics line every K updates (20)\n"
    "  --eval-every K      evaluate the greedy policy every K updates (100; 0: at the end only)\n"
    "  --eval-episodes M   episodes per evaluation (20)\n"
    "  --out DIR           DIR/metrics.jsonl and DIR/policy.safetensors\n"
    "  --timeout SEC       deadline of every wait (60)\n"
    "  --async             IMPALA: actors never wait for each other; the learner takes rollouts\n"
    "                      as they come (V-trace corrects the lag)\n"
    "  --max-lag V         --async: drop a rollout more than V weight versions behind (4)\n"
    "  --quiet             no log lines\n";

static int bad(const char *flag, const char *v, const char *want) {
    fprintf(stderr, "dtrain rl: %s expects %s, got '%s' (see 'dtrain rl --help')\n", flag, want, v);
    return 2;
}

static int num(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || x < lo || x > hi) {
        char want[64];
        snprintf(want, sizeof want, "a number in [%g, %g]", lo, hi);
        return bad(flag, v, want);
    }
    *out = x;
    return 0;
}

static int parse(int argc, char **argv, dt_rl_cfg *c, bool *help) {
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) return *help = true, 0;
        if (strcmp(f, "--quiet") == 0 || strcmp(f, "--async") == 0) {
            *(strcmp(f, "--quiet") == 0 ? &c->quiet : &c->async) = true;
            continue;
        }
        if (!v) return bad(f, "(nothing)", "a value");
        i++;
        double x = 0;
        int rc = 0;
        if (strcmp(f, "--env") == 0) c->env = v;
        else if (strcmp(f, "--out") == 0) c->out = v;
        else if (strcmp(f, "-n") == 0 || strcmp(f, "--nproc") == 0 || strcmp(f, "--hostfile") == 0) continue;
        else if (strcmp(f, "--envs") == 0) rc = num(f, v, 1, 65536, &x), c->envs = (int)x;
        else if (strcmp(f, "--unroll") == 0) rc = num(f, v, 1, 4096, &x), c->unroll = (int)x;
        else if (strcmp(f, "--hidden") == 0) rc = num(f, v, 1, 4096, &x), c->hidden = (int)x;
        else if (strcmp(f, "--updates") == 0) rc = num(f, v, 1, 1e9, &x), c->updates = (int64_t)x;
        else if (strcmp(f, "--lr") == 0) rc = num(f, v, 1e-9, 10, &x), c->lr = (float)x;
        else if (strcmp(f, "--gamma") == 0) rc = num(f, v, 0, 1, &x), c->gamma = (float)x;
        else if (strcmp(f, "--entropy") == 0) rc = num(f, v, 0, 10, &x), c->entropy_coef = (float)x;
        else if (strcmp(f, "--value-coef") == 0) rc = num(f, v, 0, 100, &x), c->value_coef = (float)x;
        else if (strcmp(f, "--seed") == 0) rc = num(f, v, 0, 9e15, &x), c->seed = (uint64_t)x;
        else if (strcmp(f, "--log-every") == 0) rc = num(f, v, 1, 1e9, &x), c->log_every = (int)x;
        else if (strcmp(f, "--eval-every") == 0) rc = num(f, v, 0, 1e9, &x), c->eval_every = (int)x;
        else if (strcmp(f, "--eval-episodes") == 0) rc = num(f, v, 1, 100000, &x), c->eval_episodes = (int)x;
        else if (strcmp(f, "--timeout") == 0) rc = num(f, v, 0.01, 1e6, &x), c->timeout = x;
        else if (strcmp(f, "--max-lag") == 0) rc = num(f, v, 0, 1e6, &x), c->max_lag = (int)x;
        else {
            fprintf(stderr, "dtrain rl: unknown flag '%s' (see 'dtrain rl --help')\n", f);
            return 2;
        }
        if (rc) return rc;
    }
    return 0;
}

int dt_cli_rl(int argc, char **argv) {
    dt_rl_cfg c;
    dt_rl_cfg_default(&c);
    bool help = false;
    int rc = parse(argc, argv, &c, &help);
    if (rc) return rc;
    if (help) return fputs(rl_help, stdout), 0;
    dt_comm *w = NULL;
    if (dt_comm_init(dt_under_mpi_launcher(), &w)) {
        fprintf(stderr, "dtrain rl: %s\n", dt_error_msg());
        return 1;
    }
    if (dt_comm_rank(w) == 0) dt_launch_report_up();
    if (dt_comm_size(w) > 1) dt_log_set_rank(dt_comm_rank(w));
    dt_rl_result res;
    dt_status st = dt_rl_run(&c, w, &res);
    if (st) {
        fprintf(stderr, "dtrain rl: %s\n", dt_error_msg());
        if (dt_comm_size(w) > 1) {
            dt_comm_abort(w, 1);
            _exit(1);
        }
    } else if (dt_comm_rank(w) == 0) {
        int n = dt_comm_size(w);
        printf("trained %s: %lld env steps in %.1f s (%.0f/s, %d actor%s), eval return %.1f over %d episodes\n", c.env,
               (long long)res.env_steps, res.seconds, res.env_steps_per_s, n > 1 ? n - 1 : 1, n > 2 ? "s" : "", res.eval_return,
               c.eval_episodes);
    }
    dt_comm_destroy(w);
    dt_comm_finalize();
    return st ? 1 : 0;
}
