/* dtrain: the command-line trainer.
 *
 *   dtrain train --model mlp|cnn|gpt [flags]     train, write weights + metrics
 *   dtrain eval  --weights FILE [--model M]      test accuracy / validation loss
 *
 *   dtrain bench allreduce [-n N] ...            collective bandwidth table
 *
 * `-n N` starts N ranks through mpirun (see launch.c).
 * Exit codes: 0 success, 1 the run failed (bad data, bad weights, I/O),
 * 2 usage error (unknown flag, bad value), 3 a communication deadline expired
 * (a rank stalled or died; the message names it), 75 the run stopped on a
 * signal or before its time limit after writing a checkpoint (resume it with
 * --resume auto; stop.h). */
#include "dtrain/ckpt.h"
#include "dtrain/config.h"
#include "dtrain/comm.h"
#include "dtrain/nn.h"
#include "dtrain/safetensors.h"
#include "dtrain/train.h"
#include "dtrain/weights.h"

#include "cli.h"
#include "hooks.h"
#include "launch.h"
#include "stop.h"
#include "supervisor.h"

#include <jansson.h>

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_RUN 1
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 3

static const char *g_cmd = "dtrain";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see '%s --help')\n", g_cmd);
    va_end(ap);
    return EXIT_USAGE;
}

/* What the program holds beside the library's dt_train_cfg. */
typedef struct cli {
    dt_train_cfg cfg;
    const char *weights;
    int threads;
    int nproc;
    const char *hostfile;
    int max_restarts, min_nproc;
    int pretend_hosts;
    float backoff;
    bool progress_off;
    const char *stop_signals, *time_limit;
    const char *layout, *cluster;
} cli;

/* The program's defaults (the library's are dt_train_cfg_default's). */
static cli cli_default(void) {
    return (cli){.backoff = 1.0f, .stop_signals = "TERM,INT,USR1"};
}

/* The program's own flags (how to start and supervise the ranks), read by the
 * library's engine beside its table; none of them is saved in config.json. */
#define CLI(fld) offsetof(cli, fld)
static const dt_flag cli_flags[] = {
    {.name = "nproc", .alias = "-n", .type = DT_FLAG_INT, .off = CLI(nproc), .ilo = 1, .ihi = 100000, .attr = DT_FLAG_TRAIN,
     .section = "parallel", .arg = "N", .help = "start N data-parallel ranks through mpirun (one machine, or --hostfile)"},
    {.name = "hostfile", .type = DT_FLAG_STRING, .off = CLI(hostfile), .attr = DT_FLAG_TRAIN, .section = "parallel",
     .arg = "FILE", .help = "passed to mpirun for multi-host runs"},
    {.name = "pretend-hosts", .type = DT_FLAG_INT, .off = CLI(pretend_hosts), .ilo = 1, .ihi = 4096, .attr = DT_FLAG_TRAIN,
     .section = "parallel", .arg = "K", .help = "testing: the ranks of this machine as K hosts (blocks of consecutive "
     "ranks), so that the hierarchical collectives run on one machine"},
    {.name = "layout", .type = DT_FLAG_STRING, .off = CLI(layout), .attr = DT_FLAG_TRAIN, .section = "parallel",
     .arg = "manual|auto", .default_text = "manual", .help = "auto: the planner's fastest layout that fits memory "
     "for this launch's world (-n, --hostfile or --pretend-hosts), printed, then run as if its flags were given "
     "(--tp, --pp, --zero, --micro-batches, --schedule, --pp-partition, --recompute, --compress, --strategy ps "
     "--servers, --balance; config.json records them). Not with local SGD, Hogwild!, --aggregate or --accum "
     "(docs/PLANNING.md)"},
    {.name = "cluster", .type = DT_FLAG_STRING, .off = CLI(cluster), .attr = DT_FLAG_TRAIN, .section = "parallel",
     .arg = "FILE", .default_text = "this machine, measured; links assumed", .help = "with --layout auto: the "
     "cluster description to plan on ('dtrain plan --calibrate' writes one); its ranks must be the launch's"},
    {.name = "threads", .type = DT_FLAG_INT, .off = CLI(threads), .ilo = 1, .ihi = 1024, .attr = DT_FLAG_TRAIN | DT_FLAG_EVAL,
     .section = "run", .arg = "N", .help = "BLAS threads; with --strategy hogwild the Hogwild! threads",
     .default_text = "OpenBLAS default; 1 per rank with -n"},
    {.name = "no-progress", .type = DT_FLAG_SWITCH, .off = CLI(progress_off), .attr = DT_FLAG_TRAIN, .section = "run",
     .help = "log lines instead of the live progress line on a terminal"},
    {.name = "max-restarts", .type = DT_FLAG_INT, .off = CLI(max_restarts), .ilo = 0, .ihi = 1000, .attr = DT_FLAG_TRAIN,
     .section = "fault tolerance", .arg = "K", .help = "supervise: restart the job from the newest checkpoint when a rank "
     "dies or a deadline expires, up to K times"},
    {.name = "restart-backoff", .type = DT_FLAG_FLOAT, .off = CLI(backoff), .lo = 0, .hi = 3600, .attr = DT_FLAG_TRAIN,
     .section = "fault tolerance", .arg = "S", .help = "first wait before a restart, doubling up to 30 s"},
    {.name = "min-nproc", .type = DT_FLAG_INT, .off = CLI(min_nproc), .ilo = 1, .ihi = 100000, .attr = DT_FLAG_TRAIN,
     .section = "fault tolerance", .arg = "M", .help = "with --hostfile and no -n: refuse to run on fewer than M slots"},
    {.name = "stop-signals", .type = DT_FLAG_STRING, .off = CLI(stop_signals), .attr = DT_FLAG_TRAIN,
     .section = "fault tolerance", .arg = "LIST", .help = "signals that stop the run at the next step with a checkpoint "
     "(exit 75; a third one ends at once): names or numbers, or none"},
    {.name = "time-limit", .type = DT_FLAG_STRING, .off = CLI(time_limit), .attr = DT_FLAG_TRAIN,
     .section = "fault tolerance", .arg = "DURATION", .help = "checkpoint and stop (exit 75) before this much time has "
     "passed since the command started (90s, 15m, 2h, 1:30:00); under Slurm also before the allocation ends",
     .default_text = "none"},
    {.name = "weights", .type = DT_FLAG_STRING, .off = CLI(weights), .attr = DT_FLAG_EVAL, .section = "run",
     .arg = "FILE", .help = "the weights to evaluate (safetensors)"},
};

static const char *train_usage =
    "usage: dtrain train --model mlp|cnn|gpt [flags]\n"
    "Every flag takes --flag VALUE or --flag=VALUE. --config FILE reads flags from a JSON object\n"
    "({\"model\": \"gpt\", \"lr\": 0.001, \"recompute\": true}); flags on the command line win. A run\n"
    "with --out DIR writes DIR/config.json, which --config reads back to repeat the run.\n\n";
static const char *eval_usage =
    "usage: dtrain eval --weights FILE [--model mlp|cnn|gpt] [--data PATH] [--eval-max N]\n"
    "Prints test accuracy and loss (mlp, cnn) or validation loss (gpt). The model and its\n"
    "sizes are read from the file's metadata when --model is not given.\n\n";

/* --help / -h anywhere among argv. */
static bool wants_help(int argc, char **argv, const char *text) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (text) fputs(text, stdout);
            return true;
        }
    return false;
}

static void print_help(unsigned cmd) {
    int n;
    const dt_flag *tf = dt_train_flags(&n);
    cli defaults = cli_default();
    dt_flag_table tabs[2] = {{tf, n, NULL}, {cli_flags, (int)(sizeof cli_flags / sizeof cli_flags[0]), &defaults}};
    fputs(cmd == DT_FLAG_TRAIN ? train_usage : eval_usage, stdout);
    dt_cli_print_help(stdout, tabs, 2, cmd);
}

/* Reads the flags of `cmd` (defaults of `kind` unless --model says otherwise)
 * into c; 0, -1 when it printed --help, or EXIT_USAGE with the message printed.
 * src keeps what a --config
 * file's strings point to. */
static int parse_cli(cli *c, unsigned cmd, dt_model_kind kind, int argc, char **argv, dt_config_src *src, bool *model_given) {
    int n;
    memset(src, 0, sizeof *src);
    if (wants_help(argc, argv, NULL)) {
        print_help(cmd);
        return -1;
    }
    const dt_flag *tf = dt_train_flags(&n);
    dt_flag_table tabs[2] = {{tf, n, &c->cfg}, {cli_flags, (int)(sizeof cli_flags / sizeof cli_flags[0]), c}};
    if (dt_train_cfg_parse(tabs, 2, cmd, kind, argc, argv, src, model_given)) return usage_error("%s", dt_error_msg());
    return 0;
}

static int run_error(void) {
    fprintf(stderr, "%s: %s\n", g_cmd, dt_error_msg());
    return EXIT_RUN;
}

/* Ends this rank's part of the job as the library decides (dt_train_end_job),
 * after every output of a run that completed is written. */
static int end_job(dt_comm *world, dt_status st, const dt_train_result *r, double timeout) {
    dt_train_end end;
    dt_train_end_job(world, st, r, timeout, &end);
    if (end.report) fprintf(stderr, "%s: %s\n", g_cmd, end.msg);
    int code = end.status == DT_OK ? 0 : end.status == DT_ERR_TIMEOUT ? EXIT_TIMEOUT : EXIT_RUN;
    fflush(NULL);
    /* An aborted job never finalizes: the others may never reach MPI_Finalize. */
    if (end.action == DT_END_ABORT) {
        dt_launch_report_abort(code);
        dt_comm_abort(world, code);
    }
    if (end.action != DT_END_FINALIZE) _exit(code);
    dt_comm_destroy(world);
    dt_comm_finalize();
    return code;
}

static int train_run(cli *cp, int full_argc, char **full_argv);

/* This process hands the job to the supervisor (which restarts it). */
static bool supervises(const cli *c) {
    return c->max_restarts > 0 && !getenv("DTRAIN_SUPERVISED") && !dt_under_mpi_launcher();
}

/* Runs the parsed command line; with --layout auto, in the process that starts
 * the ranks, first plans and then runs the command line with the chosen flags
 * in place of --layout and --cluster (layout.c), parsed again into *c and *src. */
static int train_layout(cli *c, dt_config_src *src, int argc, char **argv, int full_argc, char **full_argv) {
    dt_cli_layout l = {.layout = c->layout, .cluster = c->cluster, .nproc = c->nproc, .hostfile = c->hostfile,
                       .pretend_hosts = c->pretend_hosts, .threads = c->threads};
    int rc = dt_cli_layout_check(&l, &c->cfg, argc, argv, src), an = 0;
    if (rc || !c->layout || strcmp(c->layout, "auto") != 0 || supervises(c)) return rc ? rc : train_run(c, full_argc, full_argv);
    char **av = NULL;
    bool model_given;
    if ((rc = dt_cli_layout_plan(&l, &c->cfg, full_argc, full_argv, &av, &an))) return rc;
    dt_config_src_free(src);
    *c = cli_default();
    rc = parse_cli(c, DT_FLAG_TRAIN, DT_MODEL_MLP, an - 2, av + 2, src, &model_given);
    if (!rc) rc = train_run(c, an, av);
    dt_cli_layout_free(av, an);
    return rc;
}

/* dtrain train --join OUT [FLAGS]: the job's command line (OUT/join.json),
 * without what only the job's launcher uses, then FLAGS; its port in *port. */
static int join_args(const char *dir, int argc, char **argv, char ***out, int *n, char **port) {
    char path[4096];
    snprintf(path, sizeof path, "%s/join.json", dir);
    json_error_t err;
    json_t *o = json_load_file(path, 0, &err), *av = o ? json_object_get(o, "argv") : NULL;
    const char *p = o ? json_string_value(json_object_get(o, "port")) : NULL;
    if (!o || !json_is_array(av) || !p) {
        json_decref(o);
        return usage_error("--join %s: no job to join there (%s: %s); start the job with --elastic MAX --out %s and wait "
                           "for its 'workers may join' line", dir, path, o ? "no port or command line" : err.text, dir);
    }
    *port = strdup(p);
    char **v = calloc(json_array_size(av) + (size_t)argc + 1, sizeof *v);
    int k = 0;
    static const char *const drop[] = {"-n", "--hostfile", "--max-restarts", "--out", "--join"};
    for (size_t i = 1; v && i < json_array_size(av); i++) { /* [0] is "train" */
        const char *a = json_string_value(json_array_get(av, i));
        bool skip = false;
        for (size_t d = 0; a && d < sizeof drop / sizeof *drop; d++) skip |= strcmp(a, drop[d]) == 0;
        if (skip) i++;
        else if (a) v[k++] = strdup(a);
    }
    for (int i = 0; v && i < argc; i++) {
        if (strcmp(argv[i], "--join") == 0) i++;
        else v[k++] = strdup(argv[i]);
    }
    json_decref(o);
    *out = v;
    *n = k;
    return v ? 0 : run_error();
}

static int cmd_train(int argc, char **argv, int full_argc, char **full_argv) {
    cli c = cli_default();
    g_cmd = "dtrain train";
    dt_config_src src;
    bool model_given;
    int rc = parse_cli(&c, DT_FLAG_TRAIN, DT_MODEL_MLP, argc, argv, &src, &model_given);
    if (!rc && c.cfg.join_dir && dt_under_mpi_launcher()) {
        /* A joiner under its own mpirun: the job's flags, then these. */
        const char *dir = c.cfg.join_dir;
        char **jv = NULL, *port = NULL;
        int jn = 0;
        dt_config_src_free(&src);
        rc = join_args(dir, argc, argv, &jv, &jn, &port);
        if (!rc) {
            c = cli_default();
            rc = parse_cli(&c, DT_FLAG_TRAIN, DT_MODEL_MLP, jn, jv, &src, &model_given);
        } else {
            memset(&src, 0, sizeof src);
        }
        c.cfg.join_dir = dir;
        c.cfg.join_port = port;
        c.cfg.out_dir = NULL; /* rank 0 of the job writes the run's outputs */
        if (!rc) rc = train_run(&c, full_argc, full_argv);
        for (int i = 0; jv && i < jn; i++) free(jv[i]);
        free(jv);
        free(port);
    } else if (!rc) {
        rc = train_layout(&c, &src, argc, argv, full_argc, full_argv);
    }
    dt_config_src_free(&src);
    return rc < 0 ? 0 : rc;
}

/* "tokens" for a model that reads tokens, else "samples". */
static const char *unit_of(const dt_model_cfg *mc) {
    dt_model *m = NULL;
    if (dt_model_probe(mc, &m)) return "samples";
    const char *u = m->input == DT_INPUT_TOKENS ? "tokens" : "samples";
    dt_model_destroy(m);
    return u;
}

/* The line a finished run prints (rank 0). */
static void print_summary(const dt_train_cfg *cfg, const dt_train_result *r, int size) {
    char loss[64];
    if (r->resumed_from >= 0 && r->resumed_from >= r->steps)
        snprintf(loss, sizeof loss, "no step left to run (resumed at step %lld)", (long long)r->resumed_from);
    else
        snprintf(loss, sizeof loss, "final train loss %.4f", (double)r->final_loss);
    if (r->test_acc < 0)
        printf("trained %s: %lld steps, %s, validation loss %.4f, %.0f %s/s", dt_model_name(&cfg->model),
               (long long)r->steps, loss, (double)r->eval_loss, r->items_per_s, unit_of(&cfg->model));
    else
        printf("trained %s: %lld steps, %s, test accuracy %.2f%%, %.0f samples/s", dt_model_name(&cfg->model),
               (long long)r->steps, loss, 100.0 * r->test_acc, r->items_per_s);
    if (size > 1 && cfg->strategy == DT_STRATEGY_PS) {
        const char *cons = cfg->ps.mode == DT_PS_BSP ? "BSP" : cfg->ps.mode == DT_PS_ASP ? "ASP" : "SSP";
        printf(" on %d ranks (parameter server: %d server%s, %d worker%s, %s", size, cfg->ps.servers,
               cfg->ps.servers == 1 ? "" : "s", size - cfg->ps.servers, size - cfg->ps.servers == 1 ? "" : "s", cons);
        if (r->lost_workers) printf("; lost worker%s %s", r->lost_workers == 1 ? "" : "s", r->lost_desc);
        if (cfg->ps.max_workers > 0) printf("; %lld samples trained", (long long)r->samples);
        printf(")");
    } else if (size > 1) {
        double ov = r->comm_s > 0 ? 1.0 - r->exposed_s / r->comm_s : 0;
        if (ov < 0) ov = 0;
        printf(" on %d ranks (ZeRO-%d; per rank: params %.1f MB, grads %.1f MB, optimizer %.1f MB; %.0f%% of communication overlapped)",
               size, cfg->dp.zero, r->mem.param_bytes / 1e6, r->mem.grad_bytes / 1e6,
               r->mem.optim_bytes / 1e6, 100.0 * ov);
    }
    if (r->loss_scale > 0)
        printf(" (fp16: %lld overflowed step%s dropped, loss scale now %g)", (long long)r->overflow_steps,
               r->overflow_steps == 1 ? "" : "s", (double)r->loss_scale);
    printf("\n");
    fflush(stdout);
}

/* Where a stop writes when no --ckpt-dir was given: OUT/ckpt (only a stop
 * writes there, and --resume auto reads it). */
static void default_stop_dir(cli *c) {
    static char dir[4200];
    dt_train_cfg *cfg = &c->cfg;
    if (cfg->ckpt_dir || !cfg->out_dir) return;
    snprintf(dir, sizeof dir, "%.4000s/ckpt", cfg->out_dir);
    cfg->ckpt_dir = dir;
    cfg->ckpt_stop_only = true;
}

/* The line a stopped run prints (rank 0). */
static void print_stopped(const dt_train_result *r) {
    char why[96];
    const char *name = dt_stop_signal_name(r->stop_signal);
    if (r->stop_signal > 0 && name) snprintf(why, sizeof why, "on SIG%s", name);
    else if (r->stop_signal > 0) snprintf(why, sizeof why, "on signal %d", r->stop_signal);
    else snprintf(why, sizeof why, "%s", r->stop_signal < 0 ? "before the time limit" : "on request");
    if (r->stop_ckpt[0])
        fprintf(stderr, "%s: stopped at step %lld %s; checkpoint %s; resume with --resume auto\n", g_cmd,
                (long long)r->stopped_at, why, r->stop_ckpt);
    else
        fprintf(stderr, "%s: stopped at step %lld %s; no checkpoint written (give --ckpt-dir DIR or --out DIR): its steps "
                        "are lost\n", g_cmd, (long long)r->stopped_at, why);
    fflush(stderr);
}

/* Runs the parsed command line: supervisor, launcher, then this rank's run. */
static int train_run(cli *cp, int full_argc, char **full_argv) {
    cli c = *cp;
    int rc;
    if (c.cfg.min_lr > c.cfg.lr) c.cfg.min_lr = c.cfg.lr;
    if (c.cfg.strategy == DT_STRATEGY_HOGWILD) c.cfg.hogwild_threads = c.threads;
    bool mask[65];
    double limit = 0;
    if (dt_stop_parse_signals(c.stop_signals, mask, 65) || (c.time_limit && dt_stop_parse_duration(c.time_limit, &limit)))
        return EXIT_USAGE;
    dt_stop_configure(mask, 65);
    dt_stop_enable(true);
    default_stop_dir(&c);
    if (dt_train_cfg_check(&c.cfg)) return usage_error("%s", dt_error_msg());
    dt_stop_set_deadline(limit);
    /* Checked where the command was typed: a rank on another host may lack the
     * path (its own disk) and get the checkpoint's files from the others. */
    if (c.cfg.resume && strcmp(c.cfg.resume, "auto") != 0 && !dt_under_mpi_launcher() && access(c.cfg.resume, F_OK) != 0)
        return usage_error("--resume %s: no such checkpoint", c.cfg.resume);
    /* Flags are valid. Supervise (the child comes back here with DTRAIN_SUPERVISED). */
    if (supervises(&c)) {
        dt_supervise_cfg sc = {c.max_restarts, c.min_nproc, c.nproc, c.nproc > 0, c.hostfile,
                               c.cfg.ckpt_dir != NULL, c.backoff};
        return dt_supervise(full_argc, full_argv, &sc);
    }
    /* Start the ranks (returns only in a rank or a 1-process run). */
    rc = dt_launch(full_argc, full_argv, 2);
    if (rc >= 0) return rc;
    if (c.cfg.strategy == DT_STRATEGY_HOGWILD) {
        /* --threads are the Hogwild! threads; each calls a one-thread BLAS. */
        openblas_set_num_threads(1);
    } else if (c.threads) {
        openblas_set_num_threads(c.threads);
    } else if (dt_under_mpi_launcher() && !getenv("OPENBLAS_NUM_THREADS")) {
        /* One BLAS thread per rank whichever launcher started us (srun does
         * not pass what dtrain's own launcher exports). */
        openblas_set_num_threads(1);
    }

    /* Stop signals: from here on they stop the run at a step boundary. */
    dt_stop_install_rank(dt_under_mpi_launcher());
    c.cfg.deadline = dt_stop_deadline();

    /* MPI only for a job that a launcher started: a one-process run (no -n, not
     * under mpirun/srun) never initialises MPI, so nothing of its start-up can
     * delay or print on a run that fails on its input. */
    dt_comm *world = NULL;
    if (dt_comm_init(dt_under_mpi_launcher(), &world)) return run_error();
    if (dt_comm_rank(world) == 0) dt_launch_report_up();
    if (c.pretend_hosts > 1 && dt_comm_pretend_hosts(world, c.pretend_hosts)) {
        fprintf(stderr, "%s: --pretend-hosts: %s\n", g_cmd, dt_error_msg());
        dt_comm_destroy(world);
        dt_comm_finalize();
        return EXIT_USAGE;
    }
    int rank = dt_comm_rank(world), size = dt_comm_size(world);
    dt_stop_quiet(rank != 0);
    if (c.nproc && size != c.nproc) {
        if (rank == 0)
            fprintf(stderr, "%s: -n %d but the job has %d ranks; drop -n under an existing mpirun/srun\n",
                    g_cmd, c.nproc, size);
        dt_comm_destroy(world);
        dt_comm_finalize();
        return EXIT_USAGE;
    }
    if (size > 1) dt_log_set_rank(rank);
    bool progress = !c.progress_off && isatty(STDERR_FILENO);
    /* The command line goes into checkpoints (dtrain inspect shows it). */
    json_t *args = json_array();
    for (int i = 1; i < full_argc; i++) json_array_append_new(args, json_string(full_argv[i]));
    json_t *cj = json_pack("{s:o}", "argv", args);
    char *config = cj ? json_dumps(cj, JSON_COMPACT) : NULL;
    json_decref(cj);
    c.cfg.config_json = config;
    /* Injected crashes, hangs and slowness fire in the first attempt only, so
     * a supervised restart can get past them (the supervisor counts them). */
    const char *attempt = getenv("DTRAIN_ATTEMPT");
    c.cfg.attempt = attempt ? atoi(attempt) : 0;
    cli_hooks hooks;
    dt_status st = cli_hooks_install(&hooks, &c.cfg, progress, 2.0 * c.cfg.timeout + 10.0);
    dt_train_result r;
    if (!st) st = dt_train_run(&c.cfg, world, &r);
    dt_status hs = cli_hooks_finish(&hooks);
    if (!st) st = hs;
    free(config);
    if (st) return end_job(world, st, &r, c.cfg.timeout);
    if (c.cfg.strategy == DT_STRATEGY_HOGWILD) size = 1;
    if (r.stopped_at >= 0) {
        if (rank == 0) {
            /* The checkpoint is whole: rank 0's manifest waited for every file. */
            print_stopped(&r);
            dt_launch_report_stopped();
        }
        rc = end_job(world, DT_OK, &r, c.cfg.timeout);
        return rc ? rc : dt_launch_stopped_code();
    }
    if (c.cfg.join_port) { /* a joined worker: the job's rank 0 reports the run */
        printf("worker %s the job (%s)\n", r.left ? "left" : "finished with", c.cfg.join_dir);
        fflush(stdout);
    } else if (rank == 0) {
        print_summary(&c.cfg, &r, size);
        if (c.cfg.strategy == DT_STRATEGY_PS) dt_launch_report_done(r.lost_desc);
    }
    return end_job(world, DT_OK, &r, c.cfg.timeout);
}

static int eval_run(cli *cp, bool model_given, int argc, char **argv, dt_config_src *src);

static int cmd_eval(int argc, char **argv) {
    cli c = cli_default();
    g_cmd = "dtrain eval";
    dt_config_src src;
    bool model_given;
    int rc = parse_cli(&c, DT_FLAG_EVAL, DT_MODEL_MLP, argc, argv, &src, &model_given);
    if (!rc && !c.weights) rc = usage_error("--weights FILE is required");
    if (!rc) rc = eval_run(&c, model_given, argc, argv, &src);
    dt_config_src_free(&src);
    return rc < 0 ? 0 : rc;
}

static int eval_run(cli *cp, bool model_given, int argc, char **argv, dt_config_src *src) {
    cli c = *cp;
    int rc;
    if (!model_given) {
        /* The file says which model it holds; the flags refine its defaults. */
        dt_model_cfg mc;
        if (dt_weights_read_cfg(c.weights, &mc)) return run_error();
        dt_config_src_free(src);
        rc = parse_cli(&c, DT_FLAG_EVAL, mc.kind, argc, argv, src, &model_given);
        if (rc) return rc;
        c.cfg.model = mc;
    } else if (c.cfg.model.kind != DT_MODEL_CNN) {
        /* Sizes come from the file even when the kind is given. */
        dt_model_cfg mc;
        if (dt_weights_read_cfg(c.weights, &mc) == DT_OK && mc.kind == c.cfg.model.kind) c.cfg.model = mc;
    }
    if (c.threads) openblas_set_num_threads(c.threads);
    dt_train_result r;
    if (dt_eval_run(&c.cfg, c.weights, &r)) return run_error();
    if (r.test_acc < 0)
        printf("validation loss %.4f (%s, %s)\n", (double)r.eval_loss, dt_model_name(&c.cfg.model), c.weights);
    else
        printf("test accuracy %.2f%% (loss %.4f; %s, %s)\n", 100.0 * r.test_acc, (double)r.eval_loss,
               dt_model_name(&c.cfg.model), c.weights);
    return 0;
}

static int cmd_inspect(int argc, char **argv) {
    g_cmd = "dtrain inspect";
    if (wants_help(argc, argv, "usage: dtrain inspect CHECKPOINT_DIR\n"
                               "Verifies every checksum of a checkpoint and prints its step, layout and tensors;\n"
                               "exit 0 when it is whole, 1 with the first damaged file named otherwise.\n"))
        return 0;
    if (argc != 1 || argv[0][0] == '-') return usage_error("usage: dtrain inspect CHECKPOINT_DIR");
    if (dt_ckpt_inspect(argv[0], stdout)) return run_error();
    return 0;
}

static int cmd_export(int argc, char **argv) {
    g_cmd = "dtrain export";
    const char *ck = NULL, *out = NULL;
    if (wants_help(argc, argv, "usage: dtrain export CHECKPOINT_DIR --out model.safetensors\n"
                               "Writes a checkpoint's weights (any layout) as one plain safetensors file with\n"
                               "PyTorch names, readable by 'dtrain eval' and safetensors.torch.load_file.\n"))
        return 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) out = argv[++i];
        else if (argv[i][0] == '-') return usage_error("unknown flag '%s'", argv[i]);
        else if (!ck) ck = argv[i];
        else return usage_error("expects one checkpoint");
    }
    if (!ck || !out) return usage_error("usage: dtrain export CHECKPOINT_DIR --out model.safetensors");
    dt_model_cfg mc;
    dt_model *m = NULL;
    int rc = EXIT_RUN;
    if (dt_ckpt_verify(ck, NULL) || dt_ckpt_model_cfg(ck, &mc) || dt_model_create(&m, &mc) ||
        dt_ckpt_load(ck, m, NULL, NULL, NULL) || dt_weights_save(m, out, 0, NULL)) {
        fprintf(stderr, "%s: %s\n", g_cmd, dt_error_msg());
    } else {
        printf("wrote %s (%s, %zu parameters)\n", out, dt_model_name(&mc), m->n);
        rc = 0;
    }
    dt_model_destroy(m);
    return rc;
}

/* dtrain diff A B [--rtol R] [--atol A]: compares two weights files tensor by
 * tensor (names, shapes, values); exit 0 when every value is within
 * atol + rtol*|b|, 1 otherwise, printing the largest differences. */
static int cmd_diff(int argc, char **argv) {
    g_cmd = "dtrain diff";
    const char *pa = NULL, *pb = NULL;
    float rtol = 0, atol = 0;
    if (wants_help(argc, argv, "usage: dtrain diff A.safetensors B.safetensors [--rtol R] [--atol A]\n"
                               "Compares two weights files tensor by tensor; exit 0 when every value is within\n"
                               "atol + rtol*|b| (both 0 by default: bitwise), 1 otherwise.\n"))
        return 0;
    for (int i = 0; i < argc; i++) {
        if ((strcmp(argv[i], "--rtol") == 0 || strcmp(argv[i], "--atol") == 0) && i + 1 < argc) {
            const dt_flag tol = {.name = argv[i] + 2, .type = DT_FLAG_FLOAT, .lo = 0, .hi = 1e9};
            if (dt_flag_set(&tol, argv[i][2] == 'r' ? &rtol : &atol, argv[i], argv[i + 1])) return usage_error("%s", dt_error_msg());
            i++;
        } else if (argv[i][0] == '-') {
            return usage_error("unknown flag '%s'", argv[i]);
        } else if (!pa) pa = argv[i];
        else if (!pb) pb = argv[i];
        else return usage_error("expects two files");
    }
    if (!pa || !pb) return usage_error("usage: dtrain diff A.safetensors B.safetensors [--rtol R] [--atol A]");
    dt_st_file *a = NULL, *b = NULL;
    float *x = NULL, *y = NULL;
    int rc = EXIT_RUN;
    if (dt_st_open(pa, &a) || dt_st_open(pb, &b)) {
        fprintf(stderr, "%s: %s\n", g_cmd, dt_error_msg());
        goto out;
    }
    if (dt_st_count(a) != dt_st_count(b)) {
        fprintf(stderr, "%s: %s has %d tensors, %s has %d\n", g_cmd, pa, dt_st_count(a), pb, dt_st_count(b));
        goto out;
    }
    double worst_abs = 0, worst_ratio = 0;
    const char *worst_name = "";
    for (int i = 0; i < dt_st_count(a); i++) {
        const dt_st_tensor *ta = dt_st_get(a, i), *tb = dt_st_find(b, ta->name);
        if (!tb || tb->numel != ta->numel || tb->ndim != ta->ndim) {
            fprintf(stderr, "%s: tensor '%s' is missing from %s or has another shape\n", g_cmd, ta->name, pb);
            goto out;
        }
        dt_free(x);
        dt_free(y);
        x = dt_alloc_floats(ta->numel);
        y = dt_alloc_floats(ta->numel);
        if (!x || !y || dt_st_read_f32(a, ta, x, ta->numel) || dt_st_read_f32(b, tb, y, tb->numel)) {
            fprintf(stderr, "%s: %s\n", g_cmd, x && y ? dt_error_msg() : "out of memory");
            goto out;
        }
        for (size_t j = 0; j < ta->numel; j++) {
            double d = fabs((double)x[j] - (double)y[j]);
            double lim = atol + rtol * fabs((double)y[j]);
            double ratio = d == 0 ? 0 : (lim > 0 ? d / lim : INFINITY);
            if (isnan(x[j]) != isnan(y[j])) ratio = INFINITY;
            if (d > worst_abs) worst_abs = d;
            if (ratio > worst_ratio) {
                worst_ratio = ratio;
                worst_name = ta->name;
            }
        }
    }
    printf("max |diff| %.3g; worst tensor %s at %.3g of the tolerance (atol %g, rtol %g)\n", worst_abs,
           worst_ratio > 0 ? worst_name : "-", worst_ratio, (double)atol, (double)rtol);
    rc = worst_ratio <= 1.0 ? 0 : EXIT_RUN;
out:
    dt_free(x);
    dt_free(y);
    dt_st_close(a);
    dt_st_close(b);
    return rc;
}

static const char *main_help =
    "usage: dtrain <command> [flags]\n"
    "\n"
    "  train    train a model (mlp, cnn, gpt); 'dtrain train --help'\n"
    "  eval     evaluate saved weights; 'dtrain eval --help'\n"
    "  rl       reinforcement learning, actor ranks and a learner (cartpole); 'dtrain rl --help'\n"
    "  bench allreduce   collective bandwidth table; 'dtrain bench allreduce --help'\n"
    "  plan     predict and rank the layouts of a cluster; 'dtrain plan --help'\n"
    "  report RUN_DIR...    one HTML page of charts comparing runs; 'dtrain report --help'\n"
    "  diff A B [--rtol R] [--atol A]   compare two weights files\n"
    "  inspect CKPT         verify every checksum of a checkpoint and print what it holds\n"
    "  export CKPT --out F  write a checkpoint's weights as a plain safetensors file\n";

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    /* The fp32 GEMM's library (src/nn/sgemm.c): chosen by the CPU unless DTRAIN_SGEMM says. */
    if (dt_sgemm_use(getenv("DTRAIN_SGEMM"))) {
        fprintf(stderr, "dtrain: %s\n", dt_error_msg());
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "train") == 0) return cmd_train(argc - 2, argv + 2, argc, argv);
    if (strcmp(argv[1], "bench") == 0 && argc > 2 && strcmp(argv[2], "allreduce") == 0) {
        int rc = dt_launch(argc, argv, 3);
        if (rc >= 0) return rc;
        return dt_cli_bench_allreduce(argc - 3, argv + 3);
    }
    if (strcmp(argv[1], "rl") == 0) return dt_cli_rl(argc, argv);
    if (strcmp(argv[1], "plan") == 0) return dt_cli_plan(argc - 2, argv + 2);
    if (strcmp(argv[1], "report") == 0) return dt_cli_report(argc - 2, argv + 2);
    if (strcmp(argv[1], "eval") == 0) return cmd_eval(argc - 2, argv + 2);
    if (strcmp(argv[1], "diff") == 0) return cmd_diff(argc - 2, argv + 2);
    if (strcmp(argv[1], "inspect") == 0) return cmd_inspect(argc - 2, argv + 2);
    if (strcmp(argv[1], "export") == 0) return cmd_export(argc - 2, argv + 2);
    fprintf(stderr, "dtrain: unknown command '%s' (commands: train, eval, rl, plan, report, bench, diff, inspect, export; see 'dtrain --help')\n", argv[1]);
    return EXIT_USAGE;
}
