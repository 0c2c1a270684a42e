/* The training engine called in-process, as an embedder would: a run with
 * reporter hooks, a hook that fails, a checkpoint round trip through the state
 * owners' parts (sampler, worker momentum) that resumes bitwise, and the part
 * interface on its own. */
#include "dtrain/ckpt.h"
#include "dtrain/data.h"
#include "dtrain/train.h"
#include "testhelp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct counts {
    int start, step, eval, end;
    int64_t last_step, start_step;
    int bad_loss;
    float last_acc;
    float *w;        /* copy of the final weights */
    size_t n;
    dt_status fail_at_step; /* on_step returns this (0: never) */
} counts;

static dt_status on_start(void *ctx, const dt_run_info *i) {
    counts *c = ctx;
    c->start++;
    c->start_step = i->start_step;
    return DT_OK;
}

static dt_status on_step(void *ctx, const dt_step_info *s) {
    counts *c = ctx;
    c->step++;
    c->last_step = s->step;
    if (!(s->loss > 0 && s->loss < 100) || s->items_per_s <= 0) c->bad_loss++;
    return c->fail_at_step ? dt_errorf(c->fail_at_step, "the test's reporter failed at step %lld", (long long)s->step) : DT_OK;
}

static dt_status on_eval(void *ctx, const dt_eval_info *e) {
    counts *c = ctx;
    c->eval++;
    c->last_acc = e->acc;
    return DT_OK;
}

static dt_status on_end(void *ctx, const dt_end_info *e) {
    counts *c = ctx;
    c->end++;
    free(c->w);
    c->n = e->model->n;
    c->w = malloc(c->n * sizeof(float));
    if (c->w) memcpy(c->w, e->model->w, c->n * sizeof(float));
    return DT_OK;
}

static void small_mlp(dt_train_cfg *cfg, counts *c) {
    dt_train_cfg_default(cfg, DT_MODEL_MLP);
    cfg->model.n_hidden = 1;
    cfg->model.hidden[0] = 32;
    cfg->batch = 32;
    cfg->steps = 12;
    cfg->log_every = 4;
    cfg->eval_every = 6;
    cfg->quiet = true;
    cfg->cosine = false; /* a constant rate: 6 steps then 6 more equal 12 */
    cfg->reporters[cfg->n_reporters++] =
        (dt_reporter){.ctx = c, .on_start = on_start, .on_step = on_step, .on_eval = on_eval, .on_end = on_end};
}

static void test_hooks(dt_comm *self) {
    dt_train_cfg cfg;
    counts c = {0};
    small_mlp(&cfg, &c);
    dt_train_result r;
    dt_status st = dt_train_run(&cfg, self, &r);
    if (st) fprintf(stderr, "run failed: %s\n", dt_error_msg());
    test_cond("a run with hooks succeeds", st == DT_OK);
    printf("hooks: start %d, step %d (last %lld), eval %d (acc %.3f), end %d\n", c.start, c.step, (long long)c.last_step,
           c.eval, (double)c.last_acc, c.end);
    test_cond("on_start once", c.start == 1);
    test_cond("on_step at steps 4, 8, 12", c.step == 3 && c.last_step == 12);
    test_cond("every step's loss and throughput are sane", c.bad_loss == 0);
    test_cond("on_eval at 6 and 12", c.eval == 2 && c.last_acc > 0.1f && c.last_acc <= 1.0f);
    test_cond("on_end once with the weights", c.end == 1 && c.w && c.n > 0);
    test_cond("the result matches the hooks", r.steps == 12 && r.test_acc == c.last_acc);
    free(c.w);

    counts f = {.fail_at_step = DT_ERR_IO};
    small_mlp(&cfg, &f);
    st = dt_train_run(&cfg, self, &r);
    printf("a failing hook: status %d, '%s'\n", (int)st, st ? dt_error_msg() : "");
    test_cond("a failing hook ends the run with its status", st == DT_ERR_IO && strstr(dt_error_msg(), "reporter failed"));
    test_cond("no step after the failing hook, no end", f.step == 1 && f.end == 0);
    free(f.w);
}

/* 12 steps straight against 6 steps, a checkpoint, and 6 more resumed: the
 * sampler's position and the worker momentum come back through their parts. */
static void test_resume(dt_comm *self, const char *dir) {
    dt_train_cfg cfg;
    counts a = {0}, b = {0}, c = {0};
    small_mlp(&cfg, &a);
    cfg.agg.kind = DT_AGG_MEAN;
    cfg.worker_momentum = 1;
    dt_train_result r;
    dt_status st = dt_train_run(&cfg, self, &r);
    if (st) fprintf(stderr, "straight run failed: %s\n", dt_error_msg());
    small_mlp(&cfg, &b);
    cfg.agg.kind = DT_AGG_MEAN;
    cfg.worker_momentum = 1;
    cfg.ckpt_dir = dir;
    cfg.steps = 6;
    if (!st && (st = dt_train_run(&cfg, self, &r))) fprintf(stderr, "first half failed: %s\n", dt_error_msg());
    small_mlp(&cfg, &c);
    cfg.agg.kind = DT_AGG_MEAN;
    cfg.worker_momentum = 1;
    cfg.ckpt_dir = dir;
    cfg.resume = "auto";
    if (!st && (st = dt_train_run(&cfg, self, &r))) fprintf(stderr, "resumed half failed: %s\n", dt_error_msg());
    test_cond("the three runs succeed", st == DT_OK);
    test_cond("the resumed run starts at step 6", c.start_step == 6 && r.resumed_from == 6);
    if (a.w && c.w && a.n == c.n) test_close("resumed weights, bitwise", c.w, a.w, a.n, 0, 0);
    else test_cond("both runs gave weights", false);
    char path[4200];
    snprintf(path, sizeof path, "%s/ckpt-0000000006", dir);
    float *wm = malloc(a.n * sizeof(float));
    bool found = false;
    st = wm ? dt_ckpt_read_extra(path, "momentum.worker.0", wm, a.n, &found) : DT_ERR_NOMEM;
    test_cond("the robust part wrote momentum.worker.0", st == DT_OK && found);
    free(wm);
    free(a.w);
    free(b.w);
    free(c.w);
}

/* The part interface itself: the sampler's part saves its position into the
 * state and seeks back to it; the extra-tensor list refuses an overflow. */
static void test_parts(void) {
    dt_sampler s, t;
    test_cond("samplers", dt_sampler_init(&s, 1000, 7, true, false, 0, 1) == DT_OK &&
                              dt_sampler_init(&t, 1000, 7, true, false, 0, 1) == DT_OK);
    int64_t idx[64], idx2[64];
    int ln, gn;
    for (int i = 0; i < 20; i++) dt_sampler_next(&s, 64, idx, &ln, &gn);
    dt_ckpt_part ps, pt;
    dt_ckpt_part_sampler(&s, &ps);
    dt_ckpt_part_sampler(&t, &pt);
    dt_ckpt_state st = {0};
    dt_ckpt_extras x = {0};
    dt_ckpt_place at = {.replica = 0, .replicas = 1, .lead = true};
    dt_ckpt_shard sh = {0};
    dt_ckpt_snapshot snap = {.state = &st, .extras = &x, .shard = &sh};
    test_cond("sampler part saves", ps.save(ps.ctx, &at, &snap) == DT_OK && x.n == 0 && st.epoch == s.epoch && st.index == s.index);
    test_cond("sampler part loads", pt.load(pt.ctx, "unused", &st, &at) == DT_OK);
    dt_sampler_next(&s, 64, idx, &ln, &gn);
    dt_sampler_next(&t, 64, idx2, &ln, &gn);
    test_cond("the loaded sampler continues where the saved one was", memcmp(idx, idx2, sizeof idx) == 0 && s.epoch == t.epoch);
    dt_sampler_free(&s);
    dt_sampler_free(&t);
    float v = 1;
    dt_status last = DT_OK;
    for (int i = 0; i <= DT_CKPT_MAX_EXTRA; i++) last = dt_ckpt_extras_add(&x, "t", &v, 1);
    test_cond("extras refuse more than DT_CKPT_MAX_EXTRA", x.n == DT_CKPT_MAX_EXTRA && last == DT_ERR_INVALID);
}

/* dt_train_flags_run: the command line's flags in this process. The step
 * callback sees every logged step's metrics line; two runs of the same flags
 * give the same losses; a non-zero return from the callback stops the run with
 * one line; bad flags fail with the command line's message. */
typedef struct flag_steps {
    int n, stop_at;
    char last[512];
} flag_steps;

static int on_step_json(void *ctx, const char *json) {
    flag_steps *f = ctx;
    f->n++;
    snprintf(f->last, sizeof f->last, "%s", json);
    return f->stop_at && f->n >= f->stop_at ? 7 : 0;
}

static void test_flags_run(const char *dir) {
    char out[300], summary[1024], summary2[1024];
    snprintf(out, sizeof out, "%s/flags", dir);
    char *argv[] = {"--model", "mlp", "--hidden", "16", "--steps", "6", "--log-every", "2", "--quiet", "--out", out};
    flag_steps f = {0}, g = {0};
    dt_status st = dt_train_flags_run(11, argv, 1, on_step_json, &f, summary, sizeof summary);
    test_cond("dt_train_flags_run: trains from flags", st == DT_OK);
    test_cond("dt_train_flags_run: 3 logged steps, each its metrics line", f.n == 3 && strstr(f.last, "\"step\":6,"));
    test_cond("dt_train_flags_run: the summary", strstr(summary, "\"steps\":6") != NULL);
    char path[400];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    test_cond("dt_train_flags_run: --out gets the weights", access(path, F_OK) == 0);
    snprintf(path, sizeof path, "%s/config.json", out);
    test_cond("dt_train_flags_run: --out gets config.json", access(path, F_OK) == 0);
    st = dt_train_flags_run(9, argv, 1, on_step_json, &g, summary2, sizeof summary2);
    const char *l1 = strstr(summary, "\"final_loss\""), *l2 = strstr(summary2, "\"final_loss\"");
    test_cond("dt_train_flags_run: the same flags, the same loss",
              st == DT_OK && l1 && l2 && strncmp(l1, l2, strcspn(l1, ",")) == 0);
    flag_steps h = {.stop_at = 2};
    st = dt_train_flags_run(9, argv, 1, on_step_json, &h, NULL, 0);
    test_cond("dt_train_flags_run: a callback's non-zero stops the run with one line",
              st != DT_OK && h.n == 2 && strstr(dt_error_msg(), "the step callback stopped the run at step 4"));
    char *bad[] = {"--lr", "-1"};
    st = dt_train_flags_run(2, bad, 0, NULL, NULL, NULL, 0);
    test_cond("dt_train_flags_run: a bad flag is the command line's message",
              st != DT_OK && strstr(dt_error_msg(), "--lr -1 is out of range"));
}

int main(void) {
    dt_comm *self = NULL;
    if (dt_comm_self(&self)) return 1;
    char dir[] = "/tmp/dt_train_api_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_hooks(self);
    test_resume(self, dir);
    test_parts();
    test_flags_run(dir);
    dt_comm_destroy(self);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_report();
}
