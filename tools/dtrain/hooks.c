/* The program's side of a run (see hooks.h). The library never exits, raises
 * signals or sleeps on a test's behalf: these do, here. */
#include "hooks.h"

#include "dtrain/config.h"

#include <jansson.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- watchdog: a step that makes no progress for too long ends the process
 * with the distinct timeout exit code, so a supervisor can restart it even
 * when there is no peer to notice (one rank, or a hang outside communication). */
static pthread_mutex_t g_wd_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_wd_step = -1;
static double g_wd_last, g_wd_limit;
static bool g_wd_started;

static void *watchdog_main(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_wd_mu);
        bool late = g_wd_step >= 0 && g_wd_limit > 0 && dt_now() - g_wd_last > g_wd_limit;
        int64_t step = g_wd_step;
        pthread_mutex_unlock(&g_wd_mu);
        if (late) {
            fprintf(stderr, "dtrain: step %lld made no progress for %.0f s (watchdog: 2x --timeout + 10 s); ending the job\n",
                    (long long)step, g_wd_limit);
            fflush(stderr);
            _exit(3);
        }
    }
    return NULL;
}

/* step >= 1: step started (progress), and the thread started at the first
 * step with limit (> 0); -1: stop watching. */
static void watchdog_tick(int64_t step, double limit) {
    pthread_mutex_lock(&g_wd_mu);
    g_wd_step = step;
    g_wd_last = dt_now();
    bool start = step >= 0 && !g_wd_started && limit > 0;
    if (start) g_wd_limit = limit;
    g_wd_started |= start;
    pthread_mutex_unlock(&g_wd_mu);
    pthread_t t;
    if (start && pthread_create(&t, NULL, watchdog_main, NULL) == 0) pthread_detach(t);
}

/* ---- --inject crash|hang|slow: in the first attempt only, so a supervised
 * restart can get past them. A slowed rank's compute takes factor times its
 * previous step's, from the third step this process runs: the first step's
 * time is mostly one-time costs (page faults, threads starting, a sanitizer's
 * shadow memory), not the machine's speed, and 1000 times it once took 30 s,
 * 40 times it on a loaded CI machine under the sanitizers more than the 60 s
 * deadline. */
void cli_inject_fire(const dt_inject *inject, int n, int rank, int64_t step, dt_step_point at, double prev_compute_s) {
    static int computes; /* this process's compute points so far (one rank per process) */
    if (at == DT_STEP_COMPUTE && ++computes <= 2) prev_compute_s = 0; /* the 2nd gets the first step's time */
    for (int i = 0; i < n; i++) {
        const dt_inject *in = &inject[i];
        if (in->rank != rank) continue;
        if (at == DT_STEP_BEGIN && in->step == step && in->kind == DT_INJECT_CRASH) {
            dt_log(DT_LOG_WARN, "--inject crash: rank %d kills itself at step %lld", rank, (long long)step);
            fflush(NULL);
            raise(SIGKILL);
        }
        if (at == DT_STEP_BEGIN && in->step == step && in->kind == DT_INJECT_HANG) {
            dt_log(DT_LOG_WARN, "--inject hang: rank %d stops responding at step %lld", rank, (long long)step);
            for (;;) pause();
        }
        if (at == DT_STEP_COMPUTE && in->kind == DT_INJECT_SLOW) {
            /* This rank's compute takes factor times as long: the extra time is
             * spent before its gradients are ready, as on a slower machine. */
            double extra = prev_compute_s * (in->factor - 1.0);
            if (extra <= 0) continue;
            struct timespec ts = {(time_t)extra, (long)((extra - (double)(time_t)extra) * 1e9)};
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR) { /* a stop signal does not make the machine faster */
            }
        }
    }
}

static void step_hook(void *ctx, int rank, int64_t step, dt_step_point at, double prev_compute_s) {
    const cli_hooks *h = ctx;
    const dt_train_cfg *c = h->cfg;
    /* The watchdog starts at the first step, not before: a run refused on its
     * input starts no thread (a sanitizer build at exit reports the allocations
     * of a thread still starting as leaks: a 27-line "error" on a fresh machine). */
    if (at == DT_STEP_BEGIN) watchdog_tick(step, h->watchdog_s);
    if (c->attempt == 0) cli_inject_fire(c->inject, c->n_inject, rank, step, at, prev_compute_s);
}

/* ---- the progress reporter: log lines, or one live line on a terminal ---- */
static void fmt_eta(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static bool synchronous(dt_strategy s) { return s == DT_STRATEGY_SYNC || s == DT_STRATEGY_LOCALSGD; }

static dt_status progress_start(void *ctx, const dt_run_info *info) {
    cli_hooks *h = ctx;
    h->strategy = info->strategy;
    h->total = info->total_steps;
    return DT_OK;
}

static dt_status progress_step(void *ctx, const dt_step_info *s) {
    const cli_hooks *h = ctx;
    if (s->strategy == DT_STRATEGY_PS) {
        dt_log(DT_LOG_INFO, "step %lld/%lld loss %.4f (worker 0)", (long long)s->step, (long long)s->total_steps, (double)s->loss);
        return DT_OK;
    }
    if (!synchronous(s->strategy)) return DT_OK;
    char eta[32];
    fmt_eta(eta, sizeof eta, s->eta_s);
    if (h->progress)
        fprintf(stderr, "\rstep %lld/%lld | loss %.4f | lr %.3g | %.0f %s/s | ETA %s   ", (long long)s->step,
                (long long)s->total_steps, (double)s->loss, (double)s->lr, s->items_per_s, s->unit, eta);
    else
        dt_log(DT_LOG_INFO, "step %lld/%lld loss %.4f lr %.3g %.0f %s/s eta %s", (long long)s->step, (long long)s->total_steps,
               (double)s->loss, (double)s->lr, s->items_per_s, s->unit, eta);
    return DT_OK;
}

static dt_status progress_eval(void *ctx, const dt_eval_info *e) {
    const cli_hooks *h = ctx;
    if (!synchronous(h->strategy)) return DT_OK;
    if (h->progress) fprintf(stderr, "\n");
    if (e->lm) dt_log(DT_LOG_INFO, "step %lld: validation loss %.4f", (long long)e->step, (double)e->loss);
    else dt_log(DT_LOG_INFO, "step %lld: test accuracy %.2f%% (loss %.4f)", (long long)e->step, 100.0 * e->acc, (double)e->loss);
    return DT_OK;
}

static dt_status progress_end(void *ctx, const dt_end_info *e) {
    const cli_hooks *h = ctx;
    if (synchronous(e->strategy) && h->cfg->out_dir && e->res->stopped_at < 0)
        dt_log(DT_LOG_INFO, "wrote %s/model.safetensors and %s/metrics.jsonl", h->cfg->out_dir, h->cfg->out_dir);
    return DT_OK;
}

/* OUT/command: the command line as typed, shell-quoted, one line (what
 * `dtrain report` shows beside config.json). */
static dt_status write_command(const dt_train_cfg *c, const char *dir) {
    json_t *j = c->config_json ? json_loads(c->config_json, 0, NULL) : NULL, *args = json_object_get(j, "argv");
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/command", dir);
    FILE *f = json_is_array(args) ? fopen(path, "w") : NULL;
    if (f) {
        size_t i;
        json_t *a;
        fputs("dtrain", f);
        json_array_foreach(args, i, a) {
            const char *s = json_string_value(a) ? json_string_value(a) : "";
            if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/+@%") == strlen(s)) {
                fprintf(f, " %s", s);
                continue;
            }
            fputs(" '", f);
            for (; *s; s++) fputs(*s == '\'' ? "'\\''" : (char[]){*s, 0}, f);
            fputc('\'', f);
        }
        fputc('\n', f);
    }
    json_decref(j);
    if (f && fclose(f) != 0) return dt_errorf(DT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return DT_OK;
}

/* OUT/config.json as the run starts (rank 0, after the metrics reporter made
 * the folder): every saved flag's resolved value, so --config reruns it, even
 * a run that is then killed; and OUT/command. */
static dt_status config_start(void *ctx, const dt_run_info *info) {
    const cli_hooks *h = ctx;
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/config.json", info->out_dir);
    dt_status st = dt_config_write_json(h->cfg, path);
    return st ? st : write_command(h->cfg, info->out_dir);
}

dt_status cli_hooks_install(cli_hooks *h, dt_train_cfg *cfg, bool progress, double watchdog_s) {
    *h = (cli_hooks){.cfg = cfg, .progress = progress, .watchdog_s = watchdog_s};
    cfg->step_hook = step_hook;
    cfg->step_hook_ctx = h;
    cfg->n_reporters = 0;
    if (cfg->out_dir) {
        dt_status st = dt_report_jsonl_create(&h->jsonl, &cfg->reporters[cfg->n_reporters++]);
        if (st) return st;
        dt_report_weights(&cfg->reporters[cfg->n_reporters++], &h->weights_dir);
        cfg->reporters[cfg->n_reporters++] = (dt_reporter){.ctx = h, .on_start = config_start};
    }
    if (!cfg->quiet)
        cfg->reporters[cfg->n_reporters++] = (dt_reporter){.ctx = h, .on_start = progress_start, .on_step = progress_step,
                                                           .on_eval = progress_eval, .on_end = progress_end};
    return DT_OK;
}

dt_status cli_hooks_finish(cli_hooks *h) {
    watchdog_tick(-1, 0);
    dt_status st = dt_report_jsonl_close(h->jsonl);
    h->jsonl = NULL;
    return st;
}
