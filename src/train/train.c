/* The training loop on one process: data -> forward -> backward -> clip ->
 * optimizer, with evaluation, JSONL metrics, a progress line and weights out.
 *
 * The loop is written against the block-list model and the flat arenas only;
 * nothing here knows which model it is training beyond "classifier or LM". */
#include "dtrain/train.h"

#include "dtrain/data.h"
#include "dtrain/weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void dt_train_cfg_default(dt_train_cfg *c, dt_model_kind kind) {
    memset(c, 0, sizeof *c);
    dt_model_cfg_default(&c->model, kind);
    c->epochs = 1;
    c->seed = 1;
    c->log_every = 10;
    c->val_frac = 0.1;
    c->eval_max = 256;
    c->cosine = true;
    if (kind == DT_MODEL_GPT) {
        c->batch = 16;
        c->lr = 1e-3f;
        c->min_lr = 1e-4f;
        c->warmup = 20;
        c->clip = 1.0f;
        dt_optim_cfg_default(&c->optim, DT_OPTIM_ADAMW);
        c->optim.weight_decay = 0.1f;
        c->optim.beta2 = 0.99f;
        c->steps = 300;
    } else {
        c->batch = 128;
        c->lr = 0.1f;
        c->min_lr = 0.0f;
        c->warmup = 0;
        dt_optim_cfg_default(&c->optim, DT_OPTIM_SGD);
        c->optim.momentum = 0.9f;
    }
}

dt_status dt_train_cfg_check(const dt_train_cfg *c) {
    dt_status st = dt_model_cfg_check(&c->model);
    if (st) return st;
    if ((st = dt_optim_cfg_check(&c->optim))) return st;
    if (c->batch < 1 || c->batch > (1 << 20))
        return dt_errorf(DT_ERR_INVALID, "--batch %d is out of range [1, 1048576]", c->batch);
    if (c->steps < 0) return dt_errorf(DT_ERR_INVALID, "--steps must be positive");
    if (c->steps == 0 && (c->epochs < 1 || c->epochs > 100000))
        return dt_errorf(DT_ERR_INVALID, "--epochs %lld is out of range [1, 100000]", (long long)c->epochs);
    if (!(c->lr > 0.0f) || !isfinite(c->lr) || c->lr > 100.0f)
        return dt_errorf(DT_ERR_INVALID, "--lr %g is out of range (0, 100]", (double)c->lr);
    if (!(c->min_lr >= 0.0f) || c->min_lr > c->lr)
        return dt_errorf(DT_ERR_INVALID, "--min-lr %g must be in [0, --lr]", (double)c->min_lr);
    if (c->warmup < 0) return dt_errorf(DT_ERR_INVALID, "--warmup must be >= 0");
    if (!(c->clip >= 0.0f) || !isfinite(c->clip))
        return dt_errorf(DT_ERR_INVALID, "--clip %g must be >= 0 (0 disables clipping)", (double)c->clip);
    if (c->eval_every < 0) return dt_errorf(DT_ERR_INVALID, "--eval-every must be >= 0");
    if (c->log_every < 1) return dt_errorf(DT_ERR_INVALID, "--log-every must be >= 1");
    if (!(c->val_frac > 0.0 && c->val_frac < 1.0))
        return dt_errorf(DT_ERR_INVALID, "--val-frac %g must be in (0, 1)", c->val_frac);
    if (c->eval_max < 0) return dt_errorf(DT_ERR_INVALID, "--eval-max must be >= 0");
    return DT_OK;
}

/* ---- the run's data, whichever kind ------------------------------------- */
typedef struct run_data {
    bool lm;
    dt_imageset train, test;
    dt_corpus corpus;
    int T;
    int64_t n_train;            /* samples (images) or windows */
} run_data;

static void run_data_free(run_data *d) {
    dt_imageset_free(&d->train);
    dt_imageset_free(&d->test);
    dt_corpus_free(&d->corpus);
}

static dt_status run_data_load(const dt_train_cfg *c, run_data *d, bool need_train) {
    memset(d, 0, sizeof *d);
    d->lm = c->model.kind == DT_MODEL_GPT;
    dt_status st;
    if (d->lm) {
        d->T = c->model.block_size;
        st = dt_corpus_load(c->data ? c->data : DT_CORPUS_DEFAULT_PATH, c->val_frac, d->T, &d->corpus);
        if (st) return st;
        d->n_train = dt_corpus_train_windows(&d->corpus, d->T);
        return DT_OK;
    }
    const char *dir = c->data ? c->data : DT_FMNIST_DEFAULT_DIR;
    if (need_train && (st = dt_imageset_load(dir, true, &d->train))) return st;
    if ((st = dt_imageset_load(dir, false, &d->test))) return st;
    dt_imageset *s = need_train ? &d->train : &d->test;
    if ((int64_t)s->rows * s->cols != c->model.in_dim && c->model.kind == DT_MODEL_MLP)
        return dt_errorf(DT_ERR_SHAPE, "%s: images are %dx%d but the mlp takes %d inputs", dir,
                         s->rows, s->cols, c->model.in_dim);
    if (c->model.kind == DT_MODEL_CNN && (s->rows != 28 || s->cols != 28))
        return dt_errorf(DT_ERR_SHAPE, "%s: images are %dx%d but the cnn takes 28x28", dir, s->rows, s->cols);
    d->n_train = need_train ? d->train.n : 0;
    return DT_OK;
}

/* Buffers for one batch of either kind. */
typedef struct batch_buf {
    int64_t *idx;
    float *x;
    int32_t *tokens, *targets;
} batch_buf;

static dt_status batch_buf_init(batch_buf *b, const dt_model *m, int B, int T) {
    memset(b, 0, sizeof *b);
    b->idx = dt_calloc((size_t)B, sizeof(int64_t));
    size_t per = m->cfg.kind == DT_MODEL_GPT ? (size_t)T : 1;
    b->targets = dt_calloc((size_t)B * per, sizeof(int32_t));
    if (m->cfg.kind == DT_MODEL_GPT) b->tokens = dt_calloc((size_t)B * per, sizeof(int32_t));
    else b->x = dt_alloc_floats((size_t)B * (size_t)m->cfg.in_dim);
    if (!b->idx || !b->targets || (!b->tokens && !b->x))
        return dt_errorf(DT_ERR_NOMEM, "cannot allocate batch buffers for batch %d", B);
    return DT_OK;
}

static void batch_buf_free(batch_buf *b) {
    dt_free(b->idx);
    dt_free(b->x);
    dt_free(b->tokens);
    dt_free(b->targets);
}

/* ---- evaluation ------------------------------------------------------------ */
static void evaluate(const dt_model *m, dt_acts *a, const run_data *d, batch_buf *bb, int B,
                     int eval_max, float *acc, float *loss) {
    double loss_sum = 0;
    int64_t correct = 0, n = 0, terms = 0;
    if (d->lm) {
        int64_t nw = dt_corpus_val_windows(&d->corpus, d->T);
        if (eval_max > 0 && nw > eval_max) nw = eval_max;
        for (int64_t first = 0; first < nw; first += B) {
            int b = (int)((nw - first) < B ? (nw - first) : B);
            dt_corpus_gather_val(&d->corpus, first, b, d->T, bb->tokens, bb->targets);
            dt_batch batch = {.B = b, .tokens = bb->tokens, .targets = bb->targets, .loss_scale = 1.0f};
            loss_sum += dt_model_forward(m, a, &batch, NULL);
            terms += (int64_t)b * d->T;
        }
        *acc = -1.0f;
        *loss = terms ? (float)(loss_sum / (double)terms) : NAN;
        return;
    }
    const dt_imageset *s = &d->test;
    for (int64_t first = 0; first < s->n; first += B) {
        int b = (int)((s->n - first) < B ? (s->n - first) : B);
        for (int i = 0; i < b; i++) bb->idx[i] = first + i;
        dt_imageset_gather(s, bb->idx, b, bb->x, bb->targets);
        dt_batch batch = {.B = b, .x = bb->x, .targets = bb->targets, .loss_scale = 1.0f};
        loss_sum += dt_model_forward(m, a, &batch, NULL);
        correct += dt_model_count_correct(m, a, &batch);
        n += b;
    }
    *acc = n ? (float)correct / (float)n : NAN;
    *loss = n ? (float)(loss_sum / (double)n) : NAN;
}

/* ---- output -------------------------------------------------------------------- */
static dt_status make_dir(const char *dir) {
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
        struct stat sb;
        if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return DT_OK;
        return dt_errorf(DT_ERR_IO, "--out %s exists and is not a directory", dir);
    }
    return dt_errorf(DT_ERR_IO, "cannot create --out directory %s: %s", dir, strerror(errno));
}

static void fmt_eta(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static dt_status load_init(dt_model *m, const char *path) {
    dt_status st = dt_weights_load(m, path);
    if (st) return st;
    dt_log(DT_LOG_INFO, "initial weights from %s", path);
    return DT_OK;
}

dt_status dt_train_run(const dt_train_cfg *c, dt_train_result *res) {
    memset(res, 0, sizeof *res);
    res->test_acc = -1.0f;
    dt_status st = dt_train_cfg_check(c);
    if (st) return st;

    run_data d;
    dt_model *m = NULL;
    dt_acts *acts = NULL, *eacts = NULL;
    dt_optim *opt = NULL;
    batch_buf bb = {0};
    dt_sampler sampler = {0};
    FILE *metrics = NULL;
    char path[4096];

    if ((st = run_data_load(c, &d, true))) goto done;
    if (d.n_train < 1) {
        st = dt_errorf(DT_ERR_INVALID, "the training set is empty");
        goto done;
    }
    if ((st = dt_model_create(&m, &c->model))) goto done;
    dt_model_init(m, c->seed);
    if (c->init && (st = load_init(m, c->init))) goto done;

    int B = c->batch;
    int64_t steps_per_epoch = (d.n_train + B - 1) / B;
    int64_t total = c->steps > 0 ? c->steps : c->epochs * steps_per_epoch;
    int eB = B < 256 ? (d.lm ? B : 256) : B;
    if ((st = dt_acts_create(&acts, m, 0, m->n_blocks - 1, B))) goto done;
    if ((st = dt_acts_create(&eacts, m, 0, m->n_blocks - 1, eB))) goto done;
    if ((st = batch_buf_init(&bb, m, eB > B ? eB : B, d.T))) goto done;
    if ((st = dt_optim_create(&opt, &c->optim, m->n))) goto done;
    if ((st = dt_sampler_init(&sampler, d.n_train, c->seed, true, false, 0, 1))) goto done;
    if (c->out_dir) {
        if ((st = make_dir(c->out_dir))) goto done;
        snprintf(path, sizeof path, "%s/metrics.jsonl", c->out_dir);
        metrics = fopen(path, "w");
        if (!metrics) {
            st = dt_errorf(DT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
            goto done;
        }
    }

    dt_lr_sched sched = {c->lr, c->min_lr, c->warmup, total, c->cosine};
    const char *unit = d.lm ? "tokens" : "samples";
    int64_t items_per_sample = d.lm ? d.T : 1;
    if (!c->quiet)
        dt_log(DT_LOG_INFO, "training %s (%zu parameters) on %lld %s, %lld steps of batch %d, %s lr %g",
               dt_model_kind_name(m->cfg.kind), m->n, (long long)d.n_train,
               d.lm ? "windows" : "images", (long long)total, B,
               c->optim.kind == DT_OPTIM_SGD ? "sgd" : "adamw", (double)c->lr);

    double t0 = dt_now(), t_win = t0, win_loss = 0;
    int64_t win_items = 0, win_steps = 0, all_items = 0;
    float acc = -1, eloss = NAN;
    for (int64_t step = 0; step < total; step++) {
        int local_n, global_n;
        dt_sampler_next(&sampler, B, bb.idx, &local_n, &global_n);
        dt_batch batch = {.B = local_n, .targets = bb.targets};
        if (d.lm) {
            int shift = (int)(dt_rng_below(&(dt_rng){c->seed, 0x5000 + (uint64_t)sampler.epoch, 0, {0}, 4}, (uint64_t)d.T));
            dt_corpus_gather(&d.corpus, bb.idx, local_n, d.T, shift, bb.tokens, bb.targets);
            batch.tokens = bb.tokens;
        } else {
            dt_imageset_gather(&d.train, bb.idx, local_n, bb.x, bb.targets);
            batch.x = bb.x;
        }
        batch.loss_scale = 1.0f / ((float)global_n * (float)m->loss_terms);

        float loss = dt_model_forward(m, acts, &batch, NULL);
        dt_model_backward(m, acts, &batch, NULL, NULL, NULL, NULL);

        if (c->clip > 0) {
            float f = dt_clip_factor(sqrt(dt_sumsq(m->g, m->n)), c->clip);
            if (f < 1.0f) dt_scale(m->g, m->n, f);
        }
        float lr = dt_lr_at(&sched, step);
        dt_optim_begin_step(opt);
        for (int i = 0; i < m->n_params; i++) {
            const dt_param *p = &m->params[i];
            dt_optim_update(opt, m->w + p->offset, m->g + p->offset, p->offset, p->numel, lr,
                            p->decay ? c->optim.weight_decay : 0.0f);
            /* Zero the gradient while it is still in cache: the next backward adds. */
            memset(m->g + p->offset, 0, p->numel * sizeof(float));
        }
        if (!isfinite(loss)) {
            st = dt_errorf(DT_ERR_INVALID, "the loss became %f at step %lld: lower --lr or set --clip",
                           (double)loss, (long long)step + 1);
            goto done;
        }

        win_loss += loss;
        win_steps++;
        win_items += (int64_t)global_n * items_per_sample;
        all_items += (int64_t)global_n * items_per_sample;
        bool last = step + 1 == total;
        if ((step + 1) % c->log_every == 0 || last) {
            double now = dt_now();
            double ips = win_items / (now - t_win > 1e-9 ? now - t_win : 1e-9);
            double eta = (double)(total - step - 1) * (now - t0) / (double)(step + 1);
            res->final_loss = (float)(win_loss / (double)win_steps);
            if (metrics)
                fprintf(metrics,
                        "{\"step\":%lld,\"epoch\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"items_per_s\":%.1f,\"time_s\":%.3f}\n",
                        (long long)step + 1, (long long)sampler.epoch, (double)res->final_loss,
                        (double)lr, ips, now - t0);
            if (!c->quiet) {
                char eta_s[32];
                fmt_eta(eta_s, sizeof eta_s, eta);
                if (c->progress)
                    fprintf(stderr, "\rstep %lld/%lld | loss %.4f | lr %.3g | %.0f %s/s | ETA %s   ",
                            (long long)step + 1, (long long)total, (double)res->final_loss,
                            (double)lr, ips, unit, eta_s);
                else
                    dt_log(DT_LOG_INFO, "step %lld/%lld loss %.4f lr %.3g %.0f %s/s eta %s",
                           (long long)step + 1, (long long)total, (double)res->final_loss,
                           (double)lr, ips, unit, eta_s);
            }
            win_loss = 0;
            win_steps = 0;
            win_items = 0;
            t_win = now;
        }
        if ((c->eval_every > 0 && (step + 1) % c->eval_every == 0) || last) {
            double te = dt_now();
            evaluate(m, eacts, &d, &bb, eB, c->eval_max, &acc, &eloss);
            t0 += dt_now() - te; /* evaluation time is not training throughput */
            t_win += dt_now() - te;
            if (metrics) {
                if (d.lm)
                    fprintf(metrics, "{\"step\":%lld,\"val_loss\":%.6f}\n", (long long)step + 1, (double)eloss);
                else
                    fprintf(metrics, "{\"step\":%lld,\"test_acc\":%.6f,\"test_loss\":%.6f}\n",
                            (long long)step + 1, (double)acc, (double)eloss);
                fflush(metrics);
            }
            if (!c->quiet) {
                if (c->progress) fprintf(stderr, "\n");
                if (d.lm) dt_log(DT_LOG_INFO, "step %lld: validation loss %.4f", (long long)step + 1, (double)eloss);
                else
                    dt_log(DT_LOG_INFO, "step %lld: test accuracy %.2f%% (loss %.4f)", (long long)step + 1,
                           100.0 * acc, (double)eloss);
            }
        }
    }
    res->seconds = dt_now() - t0;
    res->steps = total;
    res->test_acc = acc;
    res->eval_loss = eloss;
    res->items_per_s = (double)all_items / (res->seconds > 1e-9 ? res->seconds : 1e-9);

    if (c->out_dir) {
        snprintf(path, sizeof path, "%s/model.safetensors", c->out_dir);
        char steps_s[32];
        snprintf(steps_s, sizeof steps_s, "%lld", (long long)total);
        const char *kv[] = {"steps", steps_s};
        if ((st = dt_weights_save(m, path, 1, kv))) goto done;
        if (!c->quiet) dt_log(DT_LOG_INFO, "wrote %s and %s/metrics.jsonl", path, c->out_dir);
    }
done:
    if (metrics && fclose(metrics) != 0 && !st)
        st = dt_errorf(DT_ERR_IO, "cannot finish writing metrics in %s: %s", c->out_dir, strerror(errno));
    dt_sampler_free(&sampler);
    batch_buf_free(&bb);
    dt_optim_destroy(opt);
    dt_acts_destroy(acts);
    dt_acts_destroy(eacts);
    dt_model_destroy(m);
    run_data_free(&d);
    return st;
}

dt_status dt_eval_run(const dt_train_cfg *c, const char *weights, dt_train_result *res) {
    memset(res, 0, sizeof *res);
    res->test_acc = -1.0f;
    run_data d;
    dt_model *m = NULL;
    dt_acts *acts = NULL;
    batch_buf bb = {0};
    dt_status st = run_data_load(c, &d, false);
    if (st) goto done;
    if ((st = dt_model_create(&m, &c->model))) goto done;
    if ((st = dt_weights_load(m, weights))) goto done;
    int B = d.lm ? 16 : 256;
    if ((st = dt_acts_create(&acts, m, 0, m->n_blocks - 1, B))) goto done;
    if ((st = batch_buf_init(&bb, m, B, d.T))) goto done;
    double t0 = dt_now();
    evaluate(m, acts, &d, &bb, B, c->eval_max, &res->test_acc, &res->eval_loss);
    res->seconds = dt_now() - t0;
done:
    batch_buf_free(&bb);
    dt_acts_destroy(acts);
    dt_model_destroy(m);
    run_data_free(&d);
    return st;
}
