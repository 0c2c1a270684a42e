/* dtrain rl: the command line of the actor-learner run (src/rl/a2c.c). Flags
 * are read here; the launcher starts the ranks for -n N. */
#include "cli.h"
#include "hooks.h"
#include "launch.h"
#include "stop.h"
#include "dtrain/ps.h"
#include "dtrain/rl.h"
#include "dtrain/train.h"

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
    "  --reward-scale C    rewards times C in the learner's targets (the returns reported are\n"
    "                      unscaled); default the environment's: cartpole 1, acrobot 0.01\n"
    "  --seed S            (1)\n"
    "  --log-every K       a metrics line every K updates (20)\n"
    "  --eval-every K      evaluate the greedy policy every K updates (100; 0: at the end only)\n"
    "  --eval-episodes M   episodes per evaluation (20)\n"
    "  --out DIR           DIR/metrics.jsonl and DIR/policy.safetensors\n"
    "  --timeout SEC       deadline of every wait (60)\n"
    "  --async             IMPALA: actors never wait for each other; the learner takes rollouts\n"
    "                      as they come (V-trace corrects the lag)\n"
    "  --max-lag V         --async: drop a rollout more than V weight versions behind (4)\n"
    "  --ckpt-dir DIR      checkpoints (a directory the ranks share); default OUT/ckpt, written\n"
    "                      only when the run is stopped\n"
    "  --ckpt-every U      a checkpoint every U updates (0: only when stopped)\n"
    "  --ckpt-keep K       keep the newest K checkpoints (3; 0: all)\n"
    "  --resume auto|DIR   continue from the newest checkpoint in --ckpt-dir, or from DIR\n"
    "  --stop-signals LIST signals that stop the run after an update with a checkpoint (exit 75;\n"
    "                      a third ends at once); TERM,INT,USR1\n"
    "  --time-limit DUR    stop so (exit 75) before DUR has passed (90s, 15m, 2h, 1:30:00), or\n"
    "                      before the Slurm allocation ends\n"
    "  --inject SPEC       an actor's fault, at its Nth rollout: crash:rank=R:step=N,\n"
    "                      hang:rank=R:step=N, slow:rank=R:factor=F (repeatable)\n"
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

#define RL_MAX_INJECT 16
static dt_inject g_inject[RL_MAX_INJECT];
static int g_n_inject;

/* --inject: the faults of a process, not of the training (crash, hang, slow). */
static int add_inject(const char *v) {
    dt_inject in;
    if (dt_inject_parse(v, &in)) return fprintf(stderr, "dtrain rl: %s\n", dt_error_msg()), 2;
    if (in.kind != DT_INJECT_CRASH && in.kind != DT_INJECT_HANG && in.kind != DT_INJECT_SLOW)
        return bad("--inject", v, "crash, hang or slow (an actor's faults)");
    if (g_n_inject == RL_MAX_INJECT) return bad("--inject", v, "at most 16 of them");
    g_inject[g_n_inject++] = in;
    return 0;
}

static void rollout_hook(void *ctx, int rank, int64_t rollout, double prev_s) {
    (void)ctx;
    cli_inject_fire(g_inject, g_n_inject, rank, rollout, DT_STEP_BEGIN, prev_s);
    cli_inject_fire(g_inject, g_n_inject, rank, rollout, DT_STEP_COMPUTE, prev_s);
}

static int parse(int argc, char **argv, dt_rl_cfg *c, bool *help, const char **signals, const char **limit) {
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
        else if (strcmp(f, "--ckpt-dir") == 0) c->ckpt_dir = v;
        else if (strcmp(f, "--resume") == 0) c->resume = v;
        else if (strcmp(f, "--stop-signals") == 0) *signals = v;
        else if (strcmp(f, "--time-limit") == 0) *limit = v;
        else if (strcmp(f, "--inject") == 0) rc = add_inject(v);
        else if (strcmp(f, "--ckpt-every") == 0) rc = num(f, v, 0, 1e9, &x), c->ckpt_every = (int64_t)x;
        else if (strcmp(f, "--ckpt-keep") == 0) rc = num(f, v, 0, 1e6, &x), c->ckpt_keep = (int)x;
        else if (strcmp(f, "-n") == 0 || strcmp(f, "--nproc") == 0 || strcmp(f, "--hostfile") == 0) continue;
        else if (strcmp(f, "--envs") == 0) rc = num(f, v, 1, 65536, &x), c->envs = (int)x;
        else if (strcmp(f, "--unroll") == 0) rc = num(f, v, 1, 4096, &x), c->unroll = (int)x;
        else if (strcmp(f, "--hidden") == 0) rc = num(f, v, 1, 4096, &x), c->hidden = (int)x;
        else if (strcmp(f, "--updates") == 0) rc = num(f, v, 1, 1e9, &x), c->updates = (int64_t)x;
        else if (strcmp(f, "--lr") == 0) rc = num(f, v, 1e-9, 10, &x), c->lr = (float)x;
        else if (strcmp(f, "--gamma") == 0) rc = num(f, v, 0, 1, &x), c->gamma = (float)x;
        else if (strcmp(f, "--entropy") == 0) rc = num(f, v, 0, 10, &x), c->entropy_coef = (float)x;
        else if (strcmp(f, "--value-coef") == 0) rc = num(f, v, 0, 100, &x), c->value_coef = (float)x;
        else if (strcmp(f, "--reward-scale") == 0) rc = num(f, v, 1e-6, 1e6, &x), c->reward_scale = (float)x;
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

/* A stop code for the library, asked once per update: the signal this rank
 * caught (+2; 2: none named), or 1 when the deadline would not hold one more
 * update (the gap since the last call), a checkpoint and a margin (two
 * updates, at least a second). */
static int stop_poll(void *ctx) {
    static double last, step;
    double *deadline = ctx, now = dt_now();
    if (last > 0) { /* smoothed, but a slow update counts at once */
        double d = now - last;
        step = step > 0 ? 0.8 * step + 0.2 * d : d;
        if (step < d) step = d;
    }
    last = now;
    return dt_train_stop_code(*deadline, step, 0.2);
}

static void print_stopped(const dt_rl_result *r) {
    int sig = dt_train_stop_reason(r->stop_code);
    const char *name = sig > 0 ? dt_stop_signal_name(sig) : NULL;
    char why[64];
    if (name) snprintf(why, sizeof why, "on SIG%s", name);
    else if (r->stop_code == 1) snprintf(why, sizeof why, "before the time limit");
    else snprintf(why, sizeof why, sig > 0 ? "on signal %d" : "on request", sig);
    if (r->stop_ckpt[0])
        fprintf(stderr, "dtrain rl: stopped after update %lld %s; checkpoint %s; resume with --resume auto\n",
                (long long)r->stopped_at, why, r->stop_ckpt);
    else
        fprintf(stderr, "dtrain rl: stopped after update %lld %s; no checkpoint written (give --ckpt-dir DIR or --out DIR): "
                        "its updates are lost\n", (long long)r->stopped_at, why);
}

/* Flags, stop signals and the default checkpoint directory, before the
 * launcher (it passes the stop signals on). */
static int configure(int argc, char **argv, dt_rl_cfg *c, bool *help, char *dir, size_t n) {
    const char *signals = "TERM,INT,USR1", *limit = NULL;
    int rc = parse(argc, argv, c, help, &signals, &limit);
    if (rc || *help) return rc;
    bool mask[65];
    double secs = 0;
    dt_stop_set_name("dtrain rl");
    if (dt_stop_parse_signals(signals, mask, 65) || (limit && dt_stop_parse_duration(limit, &secs))) return 2;
    dt_stop_configure(mask, 65);
    dt_stop_enable(true);
    dt_stop_set_deadline(secs);
    if (!c->ckpt_dir && c->out) {
        snprintf(dir, n, "%.4000s/ckpt", c->out);
        c->ckpt_dir = dir;
    }
    if (c->resume && strcmp(c->resume, "auto") == 0 && !c->ckpt_dir) {
        fprintf(stderr, "dtrain rl: --resume auto reads --ckpt-dir (or OUT/ckpt): give --ckpt-dir DIR or --out DIR\n");
        return 2;
    }
    if (c->ckpt_every > 0 && !c->ckpt_dir) {
        fprintf(stderr, "dtrain rl: --ckpt-every needs --ckpt-dir DIR (or --out DIR)\n");
        return 2;
    }
    return 0;
}

int dt_cli_rl(int full_argc, char **full_argv) {
    dt_rl_cfg c;
    dt_rl_cfg_default(&c);
    bool help = false;
    static char dir[4200];
    int rc = configure(full_argc - 2, full_argv + 2, &c, &help, dir, sizeof dir);
    if (rc) return rc;
    if (help) return fputs(rl_help, stdout), 0;
    if ((rc = dt_launch(full_argc, full_argv, 2)) >= 0) return rc;
    dt_stop_install_rank(dt_under_mpi_launcher());
    static double deadline;
    deadline = dt_stop_deadline();
    c.stop_poll = stop_poll;
    c.stop_ctx = &deadline;
    if (g_n_inject) c.rollout_hook = rollout_hook;
    dt_comm *w = NULL;
    if (dt_comm_init(dt_under_mpi_launcher(), &w)) {
        fprintf(stderr, "dtrain rl: %s\n", dt_error_msg());
        return 1;
    }
    if (dt_comm_rank(w) == 0) dt_launch_report_up();
    dt_stop_quiet(dt_comm_rank(w) != 0);
    if (dt_comm_size(w) > 1) dt_log_set_rank(dt_comm_rank(w));
    dt_rl_result res;
    dt_status st = dt_rl_run(&c, w, &res);
    if (st) {
        if (dt_error_msg()[0]) fprintf(stderr, "dtrain rl: %s\n", dt_error_msg());
        if (dt_comm_size(w) > 1) {
            dt_comm_abort(w, 1);
            _exit(1);
        }
    } else if (res.stopped_at >= 0) {
        if (dt_comm_rank(w) == 0) {
            print_stopped(&res);
            dt_launch_report_stopped();
        }
    } else if (dt_comm_rank(w) == 0) {
        int n = dt_comm_size(w);
        printf("trained %s: %lld env steps in %.1f s (%.0f/s, %d actor%s), eval return %.1f over %d episodes%s%s%s\n", c.env,
               (long long)res.env_steps, res.seconds, res.env_steps_per_s, n > 1 ? n - 1 : 1, n > 2 ? "s" : "", res.eval_return,
               c.eval_episodes, res.lost_actors ? "; without the lost actor" : "", res.lost_actors > 1 ? "s " : " ",
               res.lost_actors ? res.lost_desc : "");
        dt_launch_report_done(res.lost_actors ? res.lost_desc : "");
    }
    if (!st && res.lost_actors) {
        /* A rank is gone: MPI_Finalize would wait for it. Rank 0 has written
         * every output; the others wait for its word, then all end. */
        fflush(NULL);
        dt_status rs = dt_ps_release(w, 2.0 * c.timeout + 10.0);
        if (rs) fprintf(stderr, "dtrain rl: rank %d: %s\n", dt_comm_rank(w), dt_error_msg());
        fflush(NULL);
        _exit(rs ? 1 : 0);
    }
    dt_comm_destroy(w);
    dt_comm_finalize();
    return st ? 1 : res.stopped_at >= 0 ? dt_launch_stopped_code() : 0;
}
