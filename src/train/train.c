/* The training loop on one process: data -> forward -> backward -> clip ->
 * optimizer, with evaluation, JSONL metrics, a progress line and weights out.
 *
 * The loop is written against the block-list model and the flat arenas only;
 * nothing here knows which model it is training beyond "classifier or LM". */
#include "internal.h"

#include "dtrain/ckpt.h"
#include "dtrain/data.h"
#include "dtrain/trace.h"
#include "dtrain/weights.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the run's data, whichever kind ------------------------------------- */


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



dt_status tr_batch_buf_init(batch_buf *b, const dt_model *m, int B, int T) {
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

void tr_batch_buf_free(batch_buf *b) {
    dt_free(b->idx);
    dt_free(b->x);
    dt_free(b->tokens);
    dt_free(b->targets);
}

/* ---- evaluation ------------------------------------------------------------
 * Each rank evaluates its contiguous share of the test set (or validation
 * windows); sums are combined across ranks. */
dt_status tr_evaluate(const dt_model *m, dt_acts *a, const run_data *d, batch_buf *bb, int B,
                          int eval_max, dt_comm *comm, dt_pipe *pipe, int share, int shares,
                          bool counts, float *acc, float *loss) {
    double sums[3] = {0, 0, 0}; /* loss sum, correct, loss terms (or samples) */
    int64_t total = d->lm ? dt_corpus_val_windows(&d->corpus, d->T) : d->test.n;
    if (d->lm && eval_max > 0 && total > eval_max) total = eval_max;
    int64_t lo = total * share / shares, hi = total * (share + 1) / shares;
    for (int64_t first = lo; first < hi; first += B) {
        int b = (int)((hi - first) < B ? (hi - first) : B);
        dt_batch batch = {.B = b, .targets = bb->targets, .loss_scale = 1.0f};
        if (d->lm) {
            dt_corpus_gather_val(&d->corpus, first, b, d->T, bb->tokens, bb->targets);
            batch.tokens = bb->tokens;
        } else {
            for (int i = 0; i < b; i++) bb->idx[i] = first + i;
            dt_imageset_gather(&d->test, bb->idx, b, bb->x, bb->targets);
            batch.x = bb->x;
        }
        if (pipe) {
            double l, cc;
            dt_status st = dt_pipe_eval(pipe, &batch, &l, &cc);
            if (st) return st;
            sums[0] += l;
            sums[1] += cc;
        } else {
            sums[0] += dt_model_forward(m, a, &batch, NULL);
            if (!d->lm) sums[1] += dt_model_count_correct(m, a, &batch);
        }
        if (counts) sums[2] += (double)b * (d->lm ? d->T : 1);
    }
    if (!counts) sums[0] = sums[1] = 0; /* another rank reports these samples */
    dt_status st = dt_allreduce_f64(comm, sums, 3);
    if (st) return st;
    *acc = d->lm ? -1.0f : (sums[2] > 0 ? (float)(sums[1] / sums[2]) : NAN);
    *loss = sums[2] > 0 ? (float)(sums[0] / sums[2]) : NAN;
    return DT_OK;
}

/* Per-block forward+backward time of the whole model on one micro-batch (median
 * of 3), for --pp-partition auto. Gradients are cleared afterwards. */
static dt_status profile_blocks(dt_model *m, const dt_batch *b, double *cost) {
    dt_acts *a = NULL;
    dt_status st = dt_acts_create(&a, m, 0, m->n_blocks - 1, b->B);
    if (st) return st;
    int n = m->n_blocks;
    double *runs = dt_calloc((size_t)n * 3, sizeof(double));
    if (!runs) {
        dt_acts_destroy(a);
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    }
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < n; i++) {
            const dt_block *blk = &m->blocks[i];
            double t0 = dt_now();
            blk->ops->forward(blk, m->w, b, i ? a->bound[i] : NULL, a->bound[i + 1], a->saved[i], a->scratch);
            runs[(size_t)i * 3 + (size_t)r] = dt_now() - t0;
        }
        const float *dout = NULL;
        int which = 0;
        for (int i = n - 1; i >= 0; i--) {
            const dt_block *blk = &m->blocks[i];
            float *dprev = NULL;
            if (i > 0) {
                dprev = a->dbuf[which];
                which ^= 1;
                memset(dprev, 0, (size_t)b->B * blk->in_dim * sizeof(float));
            }
            double t0 = dt_now();
            blk->ops->backward(blk, m->w, m->g, b, i ? a->bound[i] : NULL, a->bound[i + 1], dout, dprev,
                               a->saved[i], a->scratch);
            runs[(size_t)i * 3 + (size_t)r] += dt_now() - t0;
            dout = dprev;
        }
    }
    for (int i = 0; i < n; i++) {
        double *x = runs + (size_t)i * 3;
        double lo = x[0] < x[1] ? x[0] : x[1], hi = x[0] < x[1] ? x[1] : x[0];
        cost[i] = x[2] < lo ? lo : (x[2] > hi ? hi : x[2]);
    }
    dt_model_zero_grad(m);
    dt_free(runs);
    dt_acts_destroy(a);
    return DT_OK;
}

/* ---- output -------------------------------------------------------------------- */
dt_status tr_make_dir(const char *dir) {
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

/* ---- fault injection ------------------------------------------------------ */
/* Injected faults fire in the first attempt only, so a supervised restart can
 * get past them (the supervisor sets DTRAIN_ATTEMPT). */
bool tr_first_attempt(void) {
    const char *a = getenv("DTRAIN_ATTEMPT");
    return !a || strcmp(a, "0") == 0;
}

void tr_inject_at_step(const dt_train_cfg *c, int rank, int64_t step) {
    if (!tr_first_attempt()) return;
    for (int i = 0; i < c->n_inject; i++) {
        const dt_inject *in = &c->inject[i];
        if (in->rank != rank || in->step != step) continue;
        if (in->kind == DT_INJECT_CRASH) {
            dt_log(DT_LOG_WARN, "--inject crash: rank %d kills itself at step %lld", rank, (long long)step);
            fflush(NULL);
            raise(SIGKILL);
        }
        if (in->kind == DT_INJECT_HANG) {
            dt_log(DT_LOG_WARN, "--inject hang: rank %d stops responding at step %lld", rank, (long long)step);
            for (;;) pause();
        }
    }
}

void tr_inject_slow(const dt_train_cfg *c, int rank, double compute_s) {
    if (!tr_first_attempt()) return;
    for (int i = 0; i < c->n_inject; i++) {
        const dt_inject *in = &c->inject[i];
        if (in->kind != DT_INJECT_SLOW || in->rank != rank) continue;
        double extra = compute_s * (in->factor - 1.0);
        struct timespec ts = {(time_t)extra, (long)((extra - (double)(time_t)extra) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static void trace_hook(void *ctx, const char *name, int bucket, double t0, double t1, bool comm_thread) {
    dt_trace *t = ctx;
    dt_trace_event(t, name, comm_thread ? DT_TRACE_COMM : DT_TRACE_COMPUTE, t0, t1, -1, bucket);
}

/* On resume, drop metric lines of steps after the checkpoint (a crashed attempt
 * may have logged them); they are logged again by the resumed run. */
void tr_keep_metrics_upto(const char *path, int64_t step) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%.4000s.tmp", path);
    FILE *o = fopen(tmp, "w");
    if (!o) {
        fclose(f);
        return;
    }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"step\":");
        long long sv = p ? atoll(p + 7) : 0;
        if (!p || sv <= step) fputs(line, o);
    }
    fclose(f);
    if (fclose(o) == 0) rename(tmp, path);
    else remove(tmp);
}

/* ---- Byzantine-robust aggregation ------------------------------------------
 * Every worker's own mean gradient is gathered (an all-gather of D x P floats),
 * a rank told to misbehave (--inject byzantine) corrupts its own first, and
 * every rank computes the same robust aggregate into its gradient arena.
 *
 * With worker momentum each worker first turns its gradient into its own
 * momentum direction (clipped first, with --clip, by its own norm), and the
 * aggregate of the directions is applied as plain SGD. A worker's direction
 * averages ~1/(1-momentum) steps of its gradients, so the honest workers'
 * vectors lie much closer together than their raw gradients: a coordinate-wise
 * median or trimmed mean of them is close to their mean, and an attacker has
 * less room to hide in (Karimireddy, He & Jaggi 2021). */
void tr_worker_direction(const dt_train_cfg *c, dt_model *m, float *buf, size_t lo, size_t hi) {
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        size_t a = p->offset > lo ? p->offset : lo;
        size_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= e) continue;
        dt_sgd_direction(&c->optim, m->w + a, m->g + a, buf + a, e - a, p->decay ? c->optim.weight_decay : 0.0f);
    }
}

dt_optim_cfg tr_applied_optim(const dt_train_cfg *c) {
    dt_optim_cfg o = c->optim;
    if (dt_train_worker_momentum(c)) {
        o.momentum = 0.0f;
        o.nesterov = false;
        o.weight_decay = 0.0f;
    }
    return o;
}

dt_status tr_robust_aggregate(const dt_train_cfg *c, dt_model *m, dt_comm *dpc, agg_state *ag,
                                  int64_t step) {
    int r = dt_comm_rank(dpc), D = dt_comm_size(dpc);
    size_t P = m->n;
    if (ag->wm) {
        if (c->clip > 0) dt_scale(m->g, P, dt_clip_factor(sqrt(dt_sumsq(m->g, P)), c->clip));
        tr_worker_direction(c, m, ag->wm, 0, P);
    }
    tr_byzantine_corrupt(c, m, r, step);
    memcpy(ag->vecs + (size_t)r * P, m->g, P * sizeof(float));
    dt_status st = dt_allgather(dpc, ag->vecs, (size_t)D * P, c->dp.algo);
    if (st) return st;
    if (ag->alie_bad) dt_agg_alie(ag->vecs, D, P, ag->alie_bad, ag->alie_z);
    if (ag->centre) memcpy(m->g, ag->centre, P * sizeof(float)); /* cclip starts from the last aggregate */
    dt_agg_apply(&ag->a, m->g, ag->vecs, D, P, ag->scratch);
    if (ag->centre) memcpy(ag->centre, m->g, P * sizeof(float));
    return DT_OK;
}

/* --inject byzantine:mode=alie: *bad becomes an allocated mask of which of n
 * workers attack (NULL when none does) and *z the shift: the one given, or the
 * paper's for n workers and that many attackers (a 0 is refused by
 * inject_check, so a first attempt never injects a no-op silently). */
dt_status tr_alie_mask(const dt_train_cfg *c, int n, bool **bad, float *z) {
    int f = 0;
    *z = NAN;
    *bad = NULL;
    for (int i = 0; i < c->n_inject; i++) {
        const dt_inject *in = &c->inject[i];
        if (in->kind != DT_INJECT_BYZANTINE || in->mode != DT_BYZ_ALIE || in->rank >= n) continue;
        if (!*bad && !(*bad = dt_calloc((size_t)n, sizeof(bool)))) return dt_errorf(DT_ERR_NOMEM, "out of memory");
        f += !(*bad)[in->rank];
        (*bad)[in->rank] = true;
        if (!isnan(in->factor)) *z = in->factor;
    }
    if (isnan(*z)) *z = dt_agg_alie_z(n, f);
    return DT_OK;
}

void tr_alie_log(float z) {
    if (z > 0)
        dt_log(DT_LOG_WARN, "--inject byzantine:mode=alie: the attackers send mean - %.3g x std of the honest gradients", (double)z);
    else /* a restart on fewer workers (the first attempt refuses this) */
        dt_log(DT_LOG_WARN, "--inject byzantine:mode=alie: on this many workers the paper's shift is 0: the attackers send the honest mean");
}

/* --inject byzantine: this rank replaces its gradient (m->g) by an attack. */
bool tr_byzantine_corrupt(const dt_train_cfg *c, dt_model *m, int r, int64_t step) {
    size_t P = m->n;
    bool hit = false;
    for (int i = 0; i < c->n_inject; i++) {
        const dt_inject *in = &c->inject[i];
        if (in->kind != DT_INJECT_BYZANTINE || in->rank != r) continue;
        hit = true;
        if (in->mode == DT_BYZ_ALIE) continue; /* rewritten where every vector meets (dt_agg_alie) */
        /* signflip: the negated gradient amplified 10x, as an attacker pulling the
         * model uphill would send; random: noise 100x the honest gradient's rms,
         * fresh every step; scale:X: the gradient times X. */
        if (in->mode == DT_BYZ_SIGNFLIP) dt_scale(m->g, P, -10.0f);
        else if (in->mode == DT_BYZ_SCALE) dt_scale(m->g, P, in->factor);
        else {
            double rms = sqrt(dt_sumsq(m->g, P) / (double)(P ? P : 1));
            dt_rng rng;
            dt_rng_init(&rng, c->seed ^ 0xbad5eedull, 0x9000 + (uint64_t)step);
            for (size_t j = 0; j < P; j++) m->g[j] = (float)(100.0 * rms) * dt_rng_normal(&rng);
        }
    }
    return hit;
}

/* ---- resume ------------------------------------------------------------------
 * Every rank reads the checkpoint (a shared file system for multi-host jobs),
 * takes the full logical parameters and its own shard of the optimizer state:
 * any layout resumes any checkpoint. */
/* Gradient compression's state: every data-parallel rank's error-feedback
 * residual (compress.error.<replica>) and PowerSGD's Q (compress.powersgd_q).
 * On the layout that wrote them each rank takes its own residual; on another
 * number of replicas each takes an equal share of their sum, which keeps the
 * total of what is still owed to the model. */
static dt_status resume_compression(const char *path, const dt_ckpt_state *s, dt_dp *dp, int replica, int D,
                                    size_t n, bool lead) {
    dt_gc *gc = dt_dp_gc(dp);
    if (!gc) return DT_OK;
    dt_status st = DT_OK;
    float *e = dt_gc_error(gc);
    if (e) {
        char name[64];
        snprintf(name, sizeof name, "compress.error.%d", replica);
        bool found = false;
        if (s->dp == D && (st = dt_ckpt_read_extra(path, name, e, n, &found))) return st;
        if (!found) {
            int count = 0;
            if ((st = dt_ckpt_sum_extra(path, "compress.error.", e, n, &count))) return st;
            if (count) dt_scale(e, n, 1.0f / (float)D);
            if (lead && count)
                dt_log(DT_LOG_INFO, "error-feedback residuals of %d replicas shared out over %d", count, D);
        }
    }
    size_t nq;
    float *q = dt_gc_powersgd_q(gc, &nq);
    if (q && nq) {
        bool found = false;
        if ((st = dt_ckpt_read_extra(path, "compress.powersgd_q", q, nq, &found))) return st;
    }
    return DT_OK;
}

/* Worker momentum (momentum.worker.<replica>, one per rank): on the layout that
 * wrote them each rank takes its own buffer, on another their mean (the
 * momentum of the mean gradient); a checkpoint of a run that kept the momentum
 * in the optimizer gives every worker that buffer (M), and the other way round
 * the optimizer gets the workers' mean (wm NULL, M filled, *have_m set). */
dt_status tr_resume_worker_momentum(const char *path, const dt_ckpt_state *s, float *wm, float *M, bool *have_m,
                                   int replica, int D, size_t n, bool lead) {
    dt_status st;
    int count = 0;
    if (!wm) {
        if (s->n_states >= 1 || !M) return DT_OK;
        if ((st = dt_ckpt_sum_extra(path, "momentum.worker.", M, n, &count))) return st;
        if (!count) return DT_OK;
        dt_scale(M, n, 1.0f / (float)count);
        *have_m = true;
        if (lead) dt_log(DT_LOG_INFO, "the optimizer's momentum is the mean of the %d workers' momenta in %s", count, path);
        return DT_OK;
    }
    char name[64];
    snprintf(name, sizeof name, "momentum.worker.%d", replica);
    bool found = false;
    if (s->dp == D && (st = dt_ckpt_read_extra(path, name, wm, n, &found))) return st;
    if (found) return DT_OK;
    if ((st = dt_ckpt_sum_extra(path, "momentum.worker.", wm, n, &count))) return st;
    if (count) {
        dt_scale(wm, n, 1.0f / (float)count);
        if (lead) dt_log(DT_LOG_INFO, "every worker starts from the mean of the %d worker momenta in %s", count, path);
    } else if (s->n_states >= 1) {
        memcpy(wm, M, n * sizeof(float));
        if (lead) dt_log(DT_LOG_INFO, "every worker starts from the optimizer's momentum in %s", path);
    } else {
        memset(wm, 0, n * sizeof(float));
    }
    return DT_OK;
}

static dt_status resume_from(const dt_train_cfg *c, dt_model *m, dt_model *full, dt_dp *dp, float *wm, float *centre,
                             int64_t pos[2], int64_t *start_step, bool lead, int replica, int D) {
    char path[4096];
    dt_status st;
    if (strcmp(c->resume, "auto") == 0) {
        st = dt_ckpt_find_latest(c->ckpt_dir, path, sizeof path);
        if (st) {
            if (lead) dt_log(DT_LOG_INFO, "no valid checkpoint in %s: starting from scratch", c->ckpt_dir);
            return DT_OK;
        }
    } else {
        snprintf(path, sizeof path, "%s", c->resume);
    }
    /* With tensor parallelism the checkpoint's logical tensors are loaded into the
     * unsharded model `full`, and this rank takes its shards. */
    dt_model *lm = full ? full : m;
    float *M = dt_alloc_floats(lm->n), *V = dt_alloc_floats(lm->n);
    float *Ml = full ? dt_alloc_floats(m->n) : NULL, *Vl = full ? dt_alloc_floats(m->n) : NULL;
    if (!M || !V || (full && (!Ml || !Vl))) {
        dt_free(M);
        dt_free(V);
        dt_free(Ml);
        dt_free(Vl);
        return dt_errorf(DT_ERR_NOMEM, "out of memory resuming from %s", path);
    }
    dt_ckpt_state s;
    double tl = dt_now();
    st = dt_ckpt_load(path, lm, M, V, &s);
    tl = dt_now() - tl;
    /* Worker momenta <-> optimizer momentum on the logical M (before tensor
     * parallelism takes its shards; worker momentum itself never runs with --tp). */
    bool have_m = s.n_states >= 1;
    if (!st) st = tr_resume_worker_momentum(path, &s, wm, M, &have_m, replica, D, lm->n, lead);
    if (!st && centre) { /* centred clipping's history: the last aggregate, the same on every rank */
        bool found = false, ck_wm = false;
        st = dt_ckpt_read_extra(path, "aggregate.centre", centre, lm->n, &found);
        /* A centre of momenta (worker momentum) is ~1/(1-beta) times one of
         * gradients: it only carries over between runs that aggregate the same. */
        if (!st && found) {
            float *probe = dt_alloc_floats(lm->n);
            st = probe ? dt_ckpt_read_extra(path, "momentum.worker.0", probe, lm->n, &ck_wm)
                       : dt_errorf(DT_ERR_NOMEM, "out of memory resuming from %s", path);
            dt_free(probe);
        }
        if (!st && found && ck_wm != (wm != NULL)) {
            memset(centre, 0, lm->n * sizeof(float));
            if (lead)
                dt_log(DT_LOG_INFO, "%s's centred-clipping centre is an aggregate of %s, this run aggregates %s: it starts from zero",
                       path, ck_wm ? "momenta" : "gradients", wm ? "momenta" : "gradients");
        } else if (!st && !found && lead) {
            dt_log(DT_LOG_INFO, "%s has no centred-clipping centre (aggregate.centre): it starts from zero", path);
        }
    }
    if (!st && full) {
        dt_model_local_from_logical(m, m->w, full, full->w);
        dt_model_local_from_logical(m, Ml, full, M);
        dt_model_local_from_logical(m, Vl, full, V);
        float *t;
        t = M; M = Ml; Ml = t;
        t = V; V = Vl; Vl = t;
    }
    if (!st && s.optim != c->optim.kind)
        st = dt_errorf(DT_ERR_INVALID, "%s was written with --optim %s; resume with the same optimizer", path,
                       s.optim == DT_OPTIM_ADAMW ? "adamw" : "sgd");
    if (!st && s.batch != c->batch)
        st = dt_errorf(DT_ERR_INVALID, "%s was written with global --batch %d, not %d; resume with the same global batch",
                       path, s.batch, c->batch);
    if (!st && s.seed != c->seed)
        st = dt_errorf(DT_ERR_INVALID, "%s was written with --seed %llu, not %llu; resume with the same seed",
                       path, (unsigned long long)s.seed, (unsigned long long)c->seed);
    if (!st) st = resume_compression(path, &s, dp, replica, D, m->n, lead);
    if (!st) {
        dt_dp_set_optim_state(dp, have_m ? M : NULL, s.n_states >= 2 ? V : NULL, s.optim_t);
        pos[0] = s.epoch;
        pos[1] = s.index;
        *start_step = s.step;
        if (lead)
            dt_log(DT_LOG_INFO, "resuming from %s (step %lld, written by %d rank%s with ZeRO-%d; verified and loaded in %.3f s)",
                   path, (long long)s.step, s.world, s.world == 1 ? "" : "s", s.zero, tl);
    }
    dt_free(M);
    dt_free(V);
    dt_free(Ml);
    dt_free(Vl);
    return st;
}

/* ---- gathering logical tensors (tensor/pipeline parallelism) -------------------
 * Each element of the logical model is held by exactly one (stage, tp rank)
 * pair of replica 0 (replicated tensors: tp rank 0); every such rank writes its
 * part into a zeroed logical buffer and a sum over the world assembles it. */
static dt_status gather_logical(const dt_model *m, const float *local, const dt_model *full,
                                float *logical, bool contribute, const bool *stage_mask, dt_comm *world) {
    memset(logical, 0, full->n * sizeof(float));
    if (contribute) dt_model_local_to_logical(m, local, full, logical, true, stage_mask);
    return dt_allreduce(world, logical, full->n, DT_OP_SUM, DT_ALGO_AUTO);
}

/* ---- watchdog: a step that makes no progress for too long ends the process
 * with the distinct timeout exit code, so a supervisor can restart it even
 * when there is no peer to notice (one rank, or a hang outside communication). */
static pthread_mutex_t g_wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wd_cv = PTHREAD_COND_INITIALIZER;
static int64_t g_wd_step = -1;
static double g_wd_last, g_wd_limit;
static bool g_wd_started;

static void *watchdog_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_wd_mu);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&g_wd_cv, &g_wd_mu, &ts);
        if (g_wd_step >= 0 && g_wd_limit > 0 && dt_now() - g_wd_last > g_wd_limit) {
            fprintf(stderr, "dtrain: step %lld made no progress for %.0f s (watchdog: 2x --timeout + 10 s); ending the job\n",
                    (long long)g_wd_step, g_wd_limit);
            fflush(stderr);
            _exit(3);
        }
    }
    return NULL;
}

/* step >= 1: step started (progress); -1: stop watching. */
void tr_watchdog_tick(int64_t step) {
    pthread_mutex_lock(&g_wd_mu);
    g_wd_step = step;
    g_wd_last = dt_now();
    pthread_mutex_unlock(&g_wd_mu);
}

static void watchdog_start(double limit) {
    pthread_mutex_lock(&g_wd_mu);
    g_wd_limit = limit;
    g_wd_step = -1;
    bool start = !g_wd_started && limit > 0;
    g_wd_started |= start;
    pthread_mutex_unlock(&g_wd_mu);
    pthread_t t;
    if (start && pthread_create(&t, NULL, watchdog_main, NULL) == 0) pthread_detach(t);
}

/* Every --inject names a rank that exists and acts on it: a worker under the
 * parameter server (servers run no steps to crash, slow or corrupt). Under
 * ALIE the shift must move something. Checked in the first attempt only: a
 * supervisor's restart on fewer ranks (elastic) keeps the flags, and crash,
 * hang and slow fire in the first attempt only anyway. */
static dt_status inject_check(const dt_train_cfg *c, int world) {
    if (c->n_inject > 0 && c->strategy == DT_STRATEGY_HOGWILD)
        return dt_errorf(DT_ERR_INVALID, "--inject does not apply to --strategy hogwild (its threads share one process)");
    int workers = c->strategy == DT_STRATEGY_PS ? world - c->ps.servers : world;
    if (workers < 1 || !tr_first_attempt()) return DT_OK; /* no worker: refused with its own message */
    int f = 0;
    float z = NAN;
    for (int i = 0; i < c->n_inject; i++) {
        const dt_inject *in = &c->inject[i];
        if (in->rank >= world)
            return dt_errorf(DT_ERR_INVALID, "--inject: rank %d does not exist in a run of %d rank%s (0..%d)", in->rank, world,
                             world == 1 ? "" : "s", world - 1);
        if (in->rank >= workers)
            return dt_errorf(DT_ERR_INVALID, "--inject: rank %d is a parameter server (ranks %d..%d); injections target the workers, ranks 0..%d",
                             in->rank, workers, world - 1, workers - 1);
        if (in->kind != DT_INJECT_BYZANTINE || in->mode != DT_BYZ_ALIE) continue;
        f++;
        if (!isnan(in->factor) && !isnan(z) && in->factor != z)
            return dt_errorf(DT_ERR_INVALID, "--inject byzantine:mode=alie: the attackers collude on one shift; give every alie injection the same Z");
        if (!isnan(in->factor)) z = in->factor;
    }
    if (f == 0) return DT_OK;
    if (2 * f >= workers)
        return dt_errorf(DT_ERR_INVALID, "--inject byzantine:mode=alie: %d of %d workers attack; it hides among an honest majority, so at most %d may",
                         f, workers, (workers - 1) / 2);
    if (isnan(z) && !(dt_agg_alie_z(workers, f) > 0))
        return dt_errorf(DT_ERR_INVALID, "--inject byzantine:mode=alie: with %d workers and %d attacker%s the paper's shift z is 0 (they would send the honest mean); give one, e.g. mode=alie:1",
                         workers, f, f == 1 ? "" : "s");
    return DT_OK;
}

dt_status dt_train_run(const dt_train_cfg *c, dt_comm *comm, dt_train_result *res) {
    memset(res, 0, sizeof *res);
    res->test_acc = -1.0f;
    dt_status st = dt_train_cfg_check(c);
    if (st) return st;
    int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
    if ((st = inject_check(c, c->strategy == DT_STRATEGY_HOGWILD ? 1 : world))) return st;
    bool lead = rank == 0;
    bool quiet = c->quiet || !lead;
    dt_comm_set_timeout(comm, c->timeout);
    watchdog_start(2.0 * c->timeout + 10.0);

    run_data d;
    dt_model *m = NULL;
    dt_acts *acts = NULL, *eacts = NULL;
    dt_dp *dp = NULL;
    dt_trace *trace = NULL;
    dt_ckpt_writer *ckw = NULL;
    dt_comm *dpc = comm, *ppc = NULL, *tpc = NULL;
    dt_model *full = NULL;
    float *gbuf[4] = {NULL, NULL, NULL, NULL}; /* tp checkpoints: local M, V; logical M, V */
    double *bal = NULL;                          /* --balance dynamic: smoothed samples/s per worker */
    agg_state ag = {0};
    bool *smask = NULL;
    dt_pipe *pipe = NULL;
    int *writers = NULL;
    bool *pmask = NULL;
    int64_t sampler_pos[2] = {-1, -1};
    batch_buf bb = {0};
    dt_sampler sampler = {0};
    FILE *metrics = NULL;
    char path[4096];

    if ((st = run_data_load(c, &d, true))) goto done;
    if (d.n_train < 1) {
        st = dt_errorf(DT_ERR_INVALID, "the training set is empty");
        goto done;
    }
    /* The mesh: pp stages (outermost) x dp replicas x tp ranks (fastest):
     * rank = (stage*D + replica)*TP + tpr. Tensor-parallel peers are neighbours,
     * so on a cluster they share a host and its fast links, as in Megatron. */
    int P = c->pp, TP = c->tp;
    if (world % (P * TP)) {
        st = dt_errorf(DT_ERR_INVALID, "%d ranks do not split into --pp %d x --tp %d (the world must be dp x pp x tp)", world, P, TP);
        goto done;
    }
    int D = world / (P * TP);
    int tpr = rank % TP, replica = (rank / TP) % D, stage = rank / (TP * D);
    dt_model_cfg mcfg = c->model;
    mcfg.tp_size = TP;
    mcfg.tp_rank = tpr;
    if ((st = dt_model_create(&m, &mcfg))) goto done;
    dt_model_init(m, c->seed);
    if (TP > 1 || P > 1) {
        /* The unsharded model: for weights files, checkpoints and --init. */
        dt_model_cfg fc = c->model;
        fc.tp_size = 0;
        fc.tp_rank = 0;
        if ((st = dt_model_create(&full, &fc))) goto done;
    }
    if (c->init) {
        if (TP > 1) {
            if ((st = dt_weights_load(full, c->init))) goto done;
            dt_model_local_from_logical(m, m->w, full, full->w);
        } else if ((st = dt_weights_load(m, c->init))) {
            goto done;
        }
    }
    if (c->strategy == DT_STRATEGY_PS) {
        st = tr_train_ps(c, &d, m, comm, res);
        goto done;
    }
    if (c->strategy == DT_STRATEGY_HOGWILD) {
        if (world > 1) {
            st = dt_errorf(DT_ERR_INVALID, "--strategy hogwild runs threads in one process: drop -n (or use -n 1)");
            goto done;
        }
        st = tr_train_hogwild(c, &d, m, res);
        goto done;
    }
    if (P > m->n_blocks) {
        st = dt_errorf(DT_ERR_INVALID, "--pp %d: the %s has only %d blocks", P, dt_model_kind_name(m->cfg.kind), m->n_blocks);
        goto done;
    }
    if (P > 1 || TP > 1) {
        if ((st = dt_comm_split(comm, stage * TP + tpr, replica, &dpc))) goto done;
        if ((st = dt_comm_split(comm, replica * TP + tpr, stage, &ppc))) goto done;
        if ((st = dt_comm_split(comm, stage * D + replica, tpr, &tpc))) goto done;
        dt_comm_set_timeout(dpc, c->timeout);
        dt_comm_set_timeout(ppc, c->timeout);
        dt_comm_set_timeout(tpc, c->timeout);
        dt_model_set_tp(m, tpc);
    }
    int B = c->batch;
    /* Largest shard of a global batch: with dynamic balance a worker may get all of it. */
    int local_max = c->balance_dynamic ? B : (B + D - 1) / D;
    int micro_max = P > 1 ? (local_max + c->pipe.micro_batches - 1) / c->pipe.micro_batches
                          : (local_max + c->accum - 1) / c->accum;
    if (micro_max < 1) micro_max = 1;
    int eB = d.lm ? (micro_max > 16 ? micro_max : 16) : 256;
    if ((st = tr_batch_buf_init(&bb, m, eB > local_max ? eB : local_max, d.T))) goto done;

    dt_partition part;
    dt_dp_cfg dcfg = c->dp;
    if (P > 1) {
        const char *spec = c->pp_partition ? c->pp_partition : "uniform";
        if (strcmp(spec, "uniform") == 0) {
            dt_partition_uniform(m->n_blocks, P, &part);
        } else if (strcmp(spec, "auto") == 0) {
            /* Rank 0 times every block on a micro-batch of real data; all ranks split alike. */
            double *cost = dt_calloc((size_t)m->n_blocks, sizeof(double));
            if (!cost) {
                st = dt_errorf(DT_ERR_NOMEM, "out of memory");
                goto done;
            }
            if (rank == 0) {
                for (int i = 0; i < micro_max; i++) bb.idx[i] = i % d.n_train;
                dt_batch pb = {.B = micro_max, .targets = bb.targets, .loss_scale = 1.0f / (float)micro_max};
                if (d.lm) {
                    dt_corpus_gather(&d.corpus, bb.idx, micro_max, d.T, 0, bb.tokens, bb.targets);
                    pb.tokens = bb.tokens;
                } else {
                    dt_imageset_gather(&d.train, bb.idx, micro_max, bb.x, bb.targets);
                    pb.x = bb.x;
                }
                st = profile_blocks(m, &pb, cost);
            }
            if (!st) st = dt_bcast(comm, cost, (size_t)m->n_blocks * sizeof(double), 0, DT_ALGO_AUTO);
            if (!st) {
                double bottleneck = dt_partition_best(cost, m->n_blocks, P, &part);
                if (lead && !quiet) {
                    char desc[512];
                    size_t u = 0;
                    for (int k = 0; k < P && u < sizeof desc; k++)
                        u += (size_t)snprintf(desc + u, sizeof desc - u, "%s%d", k ? "," : "", part.first[k + 1] - part.first[k]);
                    dt_log(DT_LOG_INFO, "auto partition from measured block times: %s blocks per stage (bottleneck %.2f ms per micro-batch)",
                           desc, 1e3 * bottleneck);
                }
            }
            dt_free(cost);
            if (st) goto done;
        } else if ((st = dt_partition_parse(spec, m->n_blocks, P, &part))) {
            goto done;
        }
        dcfg.first_block = part.first[stage];
        dcfg.last_block = part.first[stage + 1] - 1;
    }
    /* The gradient norm sums over stages and, for sharded tensors, over the tp
     * group (replicated tensors hold the same gradient on every tp rank and
     * count once). */
    dcfg.norm_comm = P > 1 ? ppc : NULL;
    dcfg.tp_comm = TP > 1 ? tpc : NULL;
    dcfg.comp.seed = c->seed;
    /* Worker momentum: the workers hold the momentum (and the weight decay), the
     * aggregate is applied as plain SGD. */
    bool wmom = dt_train_worker_momentum(c);
    if (c->agg.kind == DT_AGG_CCLIP && !(ag.centre = dt_alloc_floats(m->n))) { /* zeroed: the first centre */
        st = dt_errorf(DT_ERR_NOMEM, "out of memory for the centred-clipping centre");
        goto done;
    }
    if (wmom && !(ag.wm = dt_alloc_floats(m->n))) { /* zeroed */
        st = dt_errorf(DT_ERR_NOMEM, "out of memory for the worker momentum");
        goto done;
    }
    dt_optim_cfg ocfg = tr_applied_optim(c);
    if ((st = dt_dp_create(&dp, m, dpc, &dcfg, &ocfg))) goto done;
    if (c->dp.comp.comp.kind != DT_COMP_NONE && D == 1 && lead && !quiet)
        dt_log(DT_LOG_INFO, "--compress: one data-parallel rank has nothing to send, so nothing is compressed");
    if ((st = dt_dp_broadcast_params(dp))) goto done;
    {
        dt_dp_stats discard; /* the broadcast is not step 1's traffic */
        dt_dp_take_stats(dp, &discard);
    }
    if (P > 1 && (st = dt_pipe_create(&pipe, m, ppc, &part, &c->pipe, micro_max))) goto done;
    int64_t start_step = 0;
    res->resumed_from = -1;
    if (c->resume && (st = resume_from(c, m, TP > 1 ? full : NULL, dp, ag.wm, ag.centre, sampler_pos, &start_step, lead, replica, D))) goto done;
    if (start_step > 0) res->resumed_from = start_step;

    bool byz = false;
    for (int i = 0; i < c->n_inject; i++) byz |= c->inject[i].kind == DT_INJECT_BYZANTINE;
    bool gathered = (c->agg.kind != DT_AGG_NONE || byz) && c->strategy != DT_STRATEGY_PS;
    bool per_worker = gathered || c->strategy == DT_STRATEGY_LOCALSGD;
    if (gathered) {
        ag.a = c->agg.kind == DT_AGG_NONE ? (dt_agg){.kind = DT_AGG_MEAN} : c->agg;
        if ((st = dt_agg_check(&ag.a, D))) goto done;
        ag.vecs = dt_alloc_floats((size_t)D * m->n);
        ag.scratch = dt_alloc_floats(dt_agg_scratch_floats(&ag.a, D, m->n));
        if (!ag.vecs || !ag.scratch) {
            st = dt_errorf(DT_ERR_NOMEM, "out of memory gathering %d worker gradients", D);
            goto done;
        }
        if ((st = tr_alie_mask(c, D, &ag.alie_bad, &ag.alie_z))) goto done;
        if (ag.alie_bad && lead) tr_alie_log(ag.alie_z);
    }
    int64_t steps_per_epoch = (d.n_train + B - 1) / B;
    int64_t total = c->steps > 0 ? c->steps : c->epochs * steps_per_epoch;
    if (!pipe) {
        if ((st = dt_acts_create(&acts, m, 0, m->n_blocks - 1, micro_max))) goto done;
        if ((st = dt_acts_create(&eacts, m, 0, m->n_blocks - 1, eB))) goto done;
    }
    if ((st = dt_sampler_init(&sampler, d.n_train, c->seed, true, false, replica, D))) goto done;
    if (c->balance_dynamic && !(bal = dt_calloc((size_t)2 * D, sizeof(double)))) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (sampler_pos[0] >= 0 && (st = dt_sampler_seek(&sampler, sampler_pos[0], sampler_pos[1]))) goto done;
    /* The parameters this rank's stage owns. */
    smask = dt_calloc((size_t)m->n_params + 1, sizeof(bool));
    if (!smask) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        goto done;
    }
    {
        int bf = P > 1 ? part.first[stage] : 0, bl = P > 1 ? part.first[stage + 1] - 1 : m->n_blocks - 1;
        for (int i = 0; i < m->n_params; i++) smask[i] = m->params[i].block >= bf && m->params[i].block <= bl;
    }
    /* Checkpoint files: replica 0 of each stage writes its stage's parameters; the
     * optimizer state is written by every rank under ZeRO-1/2 (each holds a
     * different shard), by replica 0 of each stage under ZeRO-0. */
    int n_writers = 0;
    /* Error-feedback residuals and worker momenta are per rank: every replica writes its own. */
    bool ef_ckpt = dt_dp_gc(dp) && dt_gc_error(dt_dp_gc(dp));
    if (c->ckpt_dir) {
        writers = dt_calloc((size_t)world, sizeof(int));
        pmask = dt_calloc((size_t)m->n_params + 1, sizeof(bool));
        if (!writers || !pmask) {
            st = dt_errorf(DT_ERR_NOMEM, "out of memory");
            goto done;
        }
        /* With tensor parallelism the shards are gathered into logical tensors
         * and rank 0 writes them all. */
        for (int r = 0; r < world; r++)
            if (TP > 1 ? r == 0 : (c->dp.zero || ef_ckpt || wmom || (r / TP) % D == 0)) writers[n_writers++] = r;
        for (int i = 0; i < m->n_params; i++)
            pmask[i] = TP > 1 ? rank == 0 : (replica == 0 && smask[i]);
        if (TP > 1) {
            gbuf[0] = dt_alloc_floats(m->n);
            gbuf[1] = dt_alloc_floats(m->n);
            gbuf[2] = dt_alloc_floats(full->n);
            gbuf[3] = dt_alloc_floats(full->n);
            if (!gbuf[0] || !gbuf[1] || !gbuf[2] || !gbuf[3]) {
                st = dt_errorf(DT_ERR_NOMEM, "out of memory for checkpoint buffers");
                goto done;
            }
        }
        if ((st = dt_ckpt_writer_create(&ckw, c->ckpt_dir, rank, world, writers, n_writers, c->ckpt_keep, 10 * c->timeout)))
            goto done;
    }
    if (lead && c->out_dir) {
        if ((st = tr_make_dir(c->out_dir))) goto done;
        snprintf(path, sizeof path, "%s/metrics.jsonl", c->out_dir);
        if (start_step > 0) tr_keep_metrics_upto(path, start_step);
        metrics = fopen(path, start_step > 0 ? "a" : "w");
        if (!metrics) {
            st = dt_errorf(DT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
            goto done;
        }
    }
    if ((st = dt_barrier(comm))) goto done;
    double t0 = dt_now();
    if (c->trace) {
        if ((st = dt_trace_create(&trace, rank, t0))) goto done;
        dt_dp_set_trace(dp, trace_hook, trace);
    }

    dt_lr_sched sched = {c->lr, c->min_lr, c->warmup, total, c->cosine};
    const char *unit = d.lm ? "tokens" : "samples";
    int64_t items_per_sample = d.lm ? d.T : 1;
    if (!quiet) {
        dt_dp_mem mem;
        dt_dp_memory(dp, &mem);
        if (ag.wm) mem.optim_bytes += m->n * sizeof(float);
        dt_log(DT_LOG_INFO, "training %s (%zu parameters) on %lld %s, %lld steps of batch %d, %s lr %g%s",
               dt_model_kind_name(m->cfg.kind), m->n, (long long)d.n_train,
               d.lm ? "windows" : "images", (long long)total, B,
               c->optim.kind == DT_OPTIM_SGD ? "sgd" : "adamw", (double)c->lr, "");
        if (world > 1)
            dt_log(DT_LOG_INFO, "data parallel on %d ranks: %d buckets, %s, ZeRO-%d, %zu optimizer bytes per rank",
                   world, dt_dp_n_buckets(dp), dt_algo_name(c->dp.algo), c->dp.zero, mem.optim_bytes);
        static const char *const rule[DT_AGG_COUNT] = {"mean", "mean", "coordinate-wise median", "trimmed mean", "Multi-Krum",
                                                       "centred clipping"};
        if (gathered)
            dt_log(DT_LOG_INFO, "aggregation: %s%s of the %d workers' %s", rule[ag.a.kind], ag.a.nnm ? " after nearest-neighbour mixing" : "",
                   D, ag.wm ? "momenta (worker momentum)" : "gradients");
    }

    double t_win = t0, win_loss = 0, win_compute = 0, slow_prev = 0;
    dt_dp_stats win_stats = {0};
    int64_t win_items = 0, win_steps = 0, all_items = 0;
    float acc = -1, eloss = NAN;
    if (start_step > 0 && !quiet)
        dt_log(DT_LOG_INFO, "resumed at step %lld of %lld", (long long)start_step, (long long)total);
    for (int64_t step = start_step; step < total; step++) {
        dt_comm_set_step(comm, step + 1);
        tr_watchdog_tick(step + 1);
        tr_inject_at_step(c, rank, step + 1);
        double tc0 = dt_now();
        /* --inject slow: this rank's compute takes factor times as long; the extra
         * time is spent before its gradients are ready, as on a slower machine. */
        double slept = dt_now();
        tr_inject_slow(c, rank, slow_prev);
        slept = dt_now() - slept;
        int local_n, global_n;
        dt_sampler_next(&sampler, B, bb.idx, &local_n, &global_n);
        if (local_n > 0) {
            if (d.lm) {
                dt_rng shift_rng;
                dt_rng_init(&shift_rng, c->seed, 0x5000 + (uint64_t)sampler.epoch);
                int shift = (int)dt_rng_below(&shift_rng, (uint64_t)d.T);
                dt_corpus_gather(&d.corpus, bb.idx, local_n, d.T, shift, bb.tokens, bb.targets);
            } else {
                dt_imageset_gather(&d.train, bb.idx, local_n, bb.x, bb.targets);
            }
        }
        /* Synchronous: every loss term weighs 1/(terms in the global batch) and the
         * collectives sum. Local SGD and gathered (robust) aggregation: each worker's
         * gradient is the mean over its own shard. */
        float loss_scale = per_worker ? (local_n > 0 ? 1.0f / ((float)local_n * (float)m->loss_terms) : 0.0f)
                                      : 1.0f / ((float)global_n * (float)m->loss_terms);
        double local_loss = 0, bwd_s = 0;
        if (pipe) {
            dt_batch sb = {.B = local_n, .targets = bb.targets, .loss_scale = loss_scale};
            if (d.lm) sb.tokens = bb.tokens;
            else sb.x = bb.x;
            double tb = dt_now();
            if ((st = dt_pipe_step(pipe, dp, &sb, m->cfg.in_dim, &local_loss))) goto done;
            if (m->tp_err) {
                st = dt_errorf(m->tp_err, "tensor-parallel all-reduce failed: %s", dt_error_msg());
                goto done;
            }
            bwd_s = dt_now() - tb;
            if (trace) dt_trace_event(trace, "pipeline schedule", DT_TRACE_COMPUTE, tb, tb + bwd_s, step + 1, -1);
        }
        for (int mi = 0; mi < (pipe ? 0 : c->accum); mi++) {
            int lo = (int)((int64_t)local_n * mi / c->accum), hi = (int)((int64_t)local_n * (mi + 1) / c->accum);
            dt_batch batch = {.B = hi - lo, .loss_scale = loss_scale};
            size_t per = d.lm ? (size_t)d.T : 1;
            batch.targets = bb.targets + (size_t)lo * per;
            if (d.lm) batch.tokens = bb.tokens + (size_t)lo * per;
            else batch.x = bb.x + (size_t)lo * (size_t)m->cfg.in_dim;
            dt_dp_begin_backward(dp, mi == c->accum - 1 && !per_worker);
            if (batch.B > 0) {
                double tf = dt_now();
                local_loss += dt_model_forward(m, acts, &batch, NULL);
                double tb = dt_now();
                dt_model_backward(m, acts, &batch, NULL, NULL, dt_dp_block_done, dp);
                double te = dt_now();
                bwd_s += te - tb;
                if (trace) {
                    dt_trace_event(trace, "forward", DT_TRACE_COMPUTE, tf, tb, step + 1, mi);
                    dt_trace_event(trace, "backward", DT_TRACE_COMPUTE, tb, te, step + 1, mi);
                }
            }
            if (m->tp_err) {
                st = dt_errorf(m->tp_err, "tensor-parallel all-reduce failed: %s", dt_error_msg());
                goto done;
            }
            if ((st = dt_dp_end_backward(dp))) goto done;
        }
        if (gathered && (st = tr_robust_aggregate(c, m, dpc, &ag, step + 1))) goto done;
        double tc1 = dt_now();
        float lr = dt_lr_at(&sched, step);
        if ((st = dt_dp_step(dp, lr, ag.wm ? 0.0f : c->clip, NULL))) goto done;
        if (c->strategy == DT_STRATEGY_LOCALSGD && D > 1 && (step + 1) % c->local_h == 0) {
            /* Local SGD: the workers' parameters are averaged every H steps
             * (optimizer state stays local). */
            double ta = dt_now();
            if ((st = dt_allreduce(dpc, m->w, m->n, DT_OP_AVG, c->dp.algo))) goto done;
            if (trace) dt_trace_event(trace, "parameter average", DT_TRACE_COMPUTE, ta, dt_now(), step + 1, -1);
        }
        if (pipe && (st = dt_pipe_sync_tied(pipe))) goto done;
        double tc2 = dt_now();
        if (trace) dt_trace_event(trace, "optimizer", DT_TRACE_COMPUTE, tc1, tc2, step + 1, -1);
        if (ckw && ((c->ckpt_every > 0 && (step + 1) % c->ckpt_every == 0) || step + 1 == total)) {
            dt_ckpt_state cs;
            memset(&cs, 0, sizeof cs);
            cs.step = step + 1;
            cs.epoch = sampler.epoch;
            cs.index = sampler.index;
            cs.seed = c->seed;
            cs.optim_t = dt_dp_optim(dp)->t;
            cs.world = world;
            cs.zero = c->dp.zero;
            cs.dp = D;
            cs.pp = P;
            cs.tp = TP;
            cs.batch = B;
            cs.optim = c->optim.kind;
            snprintf(cs.config, sizeof cs.config, "%s", c->config_json ? c->config_json : "{}");
            dt_ckpt_shard shard;
            dt_dp_shard(dp, &shard);
            /* Compression state as extra tensors; under ZeRO-0 only replica 0
             * writes optimizer state (the others hold the same copy). */
            char ef_name[64], wm_name[64];
            const char *xname[4];
            const float *xdata[4];
            size_t xlen[4];
            shard.extra_name = xname; /* read only up to shard.n_extra */
            shard.extra_data = xdata;
            shard.extra_len = xlen;
            dt_gc *gc = dt_dp_gc(dp);
            if (ag.wm) {
                /* Worker momentum: every replica's own buffer (the optimizer has none). */
                snprintf(wm_name, sizeof wm_name, "momentum.worker.%d", replica);
                xname[shard.n_extra] = wm_name;
                xdata[shard.n_extra] = ag.wm;
                xlen[shard.n_extra++] = m->n;
                if (replica != 0) shard.n = 0;
            }
            if (ag.centre && replica == 0) {
                xname[shard.n_extra] = "aggregate.centre";
                xdata[shard.n_extra] = ag.centre;
                xlen[shard.n_extra++] = m->n;
            }
            if (gc) {
                if (dt_gc_error(gc)) {
                    snprintf(ef_name, sizeof ef_name, "compress.error.%d", replica);
                    xname[shard.n_extra] = ef_name;
                    xdata[shard.n_extra] = dt_gc_error(gc);
                    xlen[shard.n_extra++] = m->n;
                }
                size_t nq;
                const float *q = dt_gc_powersgd_q(gc, &nq);
                if (q && nq && replica == 0) {
                    xname[shard.n_extra] = "compress.powersgd_q";
                    xdata[shard.n_extra] = q;
                    xlen[shard.n_extra++] = nq;
                }
                if (!c->dp.zero && replica != 0) shard.n = 0;
            }
            double ts = dt_now();
            if (TP > 1) {
                /* Gather logical parameters and optimizer state to rank 0, which writes them. */
                const dt_optim *o = dt_dp_optim(dp);
                bool owns = c->dp.zero || replica == 0;
                float *src[2] = {o->m, o->v};
                for (int k = 0; k < 2; k++) {
                    memset(gbuf[k], 0, m->n * sizeof(float));
                    if (owns && src[k])
                        for (int r = 0; r < shard.n; r++)
                            memcpy(gbuf[k] + shard.arena_off[r], src[k] + shard.state_off[r], shard.len[r] * sizeof(float));
                }
                if ((st = gather_logical(m, m->w, full, full->w, replica == 0, smask, comm))) goto done;
                if ((st = gather_logical(m, gbuf[0], full, gbuf[2], owns, smask, comm))) goto done;
                if ((st = gather_logical(m, gbuf[1], full, gbuf[3], owns, smask, comm))) goto done;
                if (rank == 0) {
                    dt_optim fo = *o;
                    fo.n = full->n;
                    fo.m = o->m ? gbuf[2] : NULL;
                    fo.v = o->v ? gbuf[3] : NULL;
                    size_t zero_off = 0, all = full->n;
                    dt_ckpt_shard one = {.n = 1, .arena_off = &zero_off, .len = &all, .state_off = &zero_off};
                    if ((st = dt_ckpt_save_async(ckw, full, &fo, &one, pmask, &cs))) goto done;
                }
            } else if ((st = dt_ckpt_save_async(ckw, m, dt_dp_optim(dp), &shard, pmask, &cs))) {
                goto done;
            }
            if (trace) dt_trace_event(trace, "checkpoint snapshot", DT_TRACE_COMPUTE, ts, dt_now(), step + 1, -1);
        }
        double loss_d = tpr == 0 ? local_loss : 0.0; /* tp ranks compute the same loss */
        if (per_worker && global_n > 0) loss_d *= (double)local_n / (double)global_n; /* worker mean -> global mean */
        if (world > 1 && (st = dt_allreduce_f64(comm, &loss_d, 1))) goto done;
        float loss = (float)loss_d;
        if (!isfinite(loss)) {
            st = dt_errorf(DT_ERR_INVALID, "the loss became %f at step %lld: lower --lr or set --clip",
                           (double)loss, (long long)step + 1);
            goto done;
        }
        dt_dp_stats ss;
        dt_dp_take_stats(dp, &ss);
        ss.backward_s = bwd_s;
        double compute = (tc2 - tc0) - ss.exposed_s;
        slow_prev = compute - slept;
        if (c->balance_dynamic && D > 1) {
            /* Each worker's speed (samples per second of its own compute, slowness
             * included), smoothed, sets its share of the next global batch. */
            double own = dt_now() - tc0 - ss.exposed_s;
            double *v = bal + D;
            memset(v, 0, (size_t)D * sizeof(double));
            v[replica] = local_n > 0 && own > 0 ? (double)local_n / own : bal[replica];
            if ((st = dt_allreduce_f64(dpc, v, (size_t)D))) goto done;
            for (int k = 0; k < D; k++) bal[k] = bal[k] > 0 ? 0.5 * bal[k] + 0.5 * v[k] : v[k];
            dt_sampler_set_weights(&sampler, bal);
        }
        win_stats.comm_s += ss.comm_s;
        win_stats.exposed_s += ss.exposed_s;
        win_stats.backward_s += ss.backward_s;
        win_stats.bytes_sent += ss.bytes_sent;
        win_stats.comp.encode_s += ss.comp.encode_s;
        win_stats.comp.decode_s += ss.comp.decode_s;
        win_stats.comp.raw_bytes += ss.comp.raw_bytes;
        win_stats.comp.payload_bytes += ss.comp.payload_bytes;
        res->comp.encode_s += ss.comp.encode_s;
        res->comp.decode_s += ss.comp.decode_s;
        res->comp.raw_bytes += ss.comp.raw_bytes;
        res->comp.payload_bytes += ss.comp.payload_bytes;
        res->comm_s += ss.comm_s;
        res->exposed_s += ss.exposed_s;
        res->backward_s += ss.backward_s;
        res->bytes_sent += ss.bytes_sent;
        win_compute += compute;

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
            char comp[256] = "";
            if (dt_dp_gc(dp)) {
                /* Compression: the codec, raw / encoded bytes of this rank's
                 * contributions, its time per step (0 during the warm-up). */
                char nm[48];
                dt_comp_name(&c->dp.comp.comp, nm, sizeof nm);
                const dt_gc_stats *g = &win_stats.comp;
                snprintf(comp, sizeof comp, ",\"compress\":\"%s\",\"compress_ratio\":%.2f,\"encode_s\":%.5f,\"decode_s\":%.5f",
                         nm, g->payload_bytes ? (double)g->raw_bytes / (double)g->payload_bytes : 1.0,
                         g->encode_s / (double)win_steps, g->decode_s / (double)win_steps);
            }
            if (metrics)
                fprintf(metrics,
                        "{\"step\":%lld,\"epoch\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"items_per_s\":%.1f,\"time_s\":%.3f,"
                        "\"compute_s\":%.5f,\"comm_exposed_s\":%.5f,\"comm_s\":%.5f,\"bytes_sent\":%llu%s,\"ranks\":%d}\n",
                        (long long)step + 1, (long long)sampler.epoch, (double)res->final_loss,
                        (double)lr, ips, now - t0, win_compute / (double)win_steps,
                        win_stats.exposed_s / (double)win_steps, win_stats.comm_s / (double)win_steps,
                        (unsigned long long)(win_stats.bytes_sent / (uint64_t)win_steps), comp, world);
            if (metrics) fflush(metrics);
            if (!quiet) {
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
            win_compute = 0;
            memset(&win_stats, 0, sizeof win_stats);
            t_win = now;
        }
        if ((c->eval_every > 0 && (step + 1) % c->eval_every == 0) || last) {
            double te = dt_now();
            if ((st = tr_evaluate(m, eacts, &d, &bb, eB, c->eval_max, comm, pipe, replica, D,
                               (!pipe || stage == P - 1) && tpr == 0, &acc, &eloss)))
                goto done;
            if (trace) dt_trace_event(trace, "eval", DT_TRACE_COMPUTE, te, dt_now(), step + 1, -1);
            double at = te - t0; /* training time when evaluated (earlier evaluations excluded) */
            t0 += dt_now() - te; /* evaluation time is not training throughput */
            t_win += dt_now() - te;
            if (metrics) {
                if (d.lm)
                    fprintf(metrics, "{\"step\":%lld,\"val_loss\":%.6f,\"time_s\":%.3f}\n", (long long)step + 1,
                            (double)eloss, at);
                else
                    fprintf(metrics, "{\"step\":%lld,\"test_acc\":%.6f,\"test_loss\":%.6f,\"time_s\":%.3f}\n",
                            (long long)step + 1, (double)acc, (double)eloss, at);
                fflush(metrics);
            }
            if (!quiet) {
                if (c->progress) fprintf(stderr, "\n");
                if (d.lm) dt_log(DT_LOG_INFO, "step %lld: validation loss %.4f", (long long)step + 1, (double)eloss);
                else
                    dt_log(DT_LOG_INFO, "step %lld: test accuracy %.2f%% (loss %.4f)", (long long)step + 1,
                           100.0 * acc, (double)eloss);
            }
        }
    }
    /* Resumed at its end: no step ran, but the weights are still evaluated. */
    if (start_step >= total &&
        (st = tr_evaluate(m, eacts, &d, &bb, eB, c->eval_max, comm, pipe, replica, D, (!pipe || stage == P - 1) && tpr == 0,
                          &acc, &eloss)))
        goto done;
    if (ckw) {
        if ((st = dt_ckpt_flush(ckw))) goto done;
        res->ckpt_blocking_s = dt_ckpt_blocking_seconds(ckw);
    }
    res->seconds = dt_now() - t0;
    res->steps = total;
    res->test_acc = acc;
    res->eval_loss = eloss;
    res->items_per_s = (double)all_items / (res->seconds > 1e-9 ? res->seconds : 1e-9);
    dt_dp_memory(dp, &res->mem);
    if (ag.wm) res->mem.optim_bytes += m->n * sizeof(float); /* the worker's momentum is its optimizer state */
    tr_watchdog_tick(-1);
    if (pipe) {
        /* Every stage's schedule statistics, to rank 0. */
        dt_pipe_stats ps;
        dt_pipe_take_stats(pipe, &ps);
        double *arr = dt_calloc((size_t)P * 5, sizeof(double));
        if (!arr) {
            st = dt_errorf(DT_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (replica == 0) {
            double *a5 = arr + 5 * stage;
            a5[0] = ps.step_s;
            a5[1] = ps.busy_s;
            a5[2] = ps.idle_s;
            a5[3] = (double)ps.act_floats;
            a5[4] = ps.acts_alive_peak;
        }
        st = dt_allreduce_f64(comm, arr, (size_t)P * 5);
        if (!st && metrics) {
            int M = c->pipe.micro_batches;
            fprintf(metrics, "{\"pipeline\":true,\"stages\":%d,\"micro_batches\":%d,\"schedule\":\"%s\",\"recompute\":%s,"
                             "\"bubble_formula\":%.4f,\"idle_frac\":[", P, M,
                    c->pipe.schedule == DT_SCHED_GPIPE ? "gpipe" : "1f1b", c->pipe.recompute ? "true" : "false",
                    (double)(P - 1) / (double)(M + P - 1));
            /* Idle = 1 - busy / the pipeline's span (the longest stage schedule). */
            double span = 0;
            for (int k = 0; k < P; k++) span = arr[5 * k] > span ? arr[5 * k] : span;
            for (int k = 0; k < P; k++)
                fprintf(metrics, "%s%.4f", k ? "," : "", span > 0 ? 1.0 - arr[5 * k + 1] / span : 0.0);
            fprintf(metrics, "],\"act_bytes\":[");
            for (int k = 0; k < P; k++) fprintf(metrics, "%s%.0f", k ? "," : "", 4 * arr[5 * k + 3]);
            fprintf(metrics, "],\"blocks_per_stage\":[");
            for (int k = 0; k < P; k++) fprintf(metrics, "%s%d", k ? "," : "", part.first[k + 1] - part.first[k]);
            fprintf(metrics, "],\"busy_s\":[");
            for (int k = 0; k < P; k++) fprintf(metrics, "%s%.5f", k ? "," : "", arr[5 * k + 1]);
            fprintf(metrics, "],\"acts_alive_peak\":[");
            for (int k = 0; k < P; k++) fprintf(metrics, "%s%.0f", k ? "," : "", arr[5 * k + 4]);
            fprintf(metrics, "]}\n");
        }
        double span = 0;
        for (int k = 0; k < P; k++) span = arr[5 * k] > span ? arr[5 * k] : span;
        for (int k = 0; k < P; k++) {
            double f = span > 0 ? 1.0 - arr[5 * k + 1] / span : 0.0;
            if (f > res->pp_idle_frac) res->pp_idle_frac = f;
        }
        dt_free(arr);
        if (st) goto done;
    }
    if (metrics)
        fprintf(metrics,
                "{\"memory\":true,\"ranks\":%d,\"zero\":%d,\"params\":%zu,\"param_bytes\":%zu,\"grad_bytes\":%zu,"
                "\"grad_staging_peak_bytes\":%zu,\"optim_bytes\":%zu,\"shard_floats\":%zu,\"buckets\":%d,"
                "\"comm_s\":%.4f,\"comm_exposed_s\":%.4f,\"backward_s\":%.4f}\n",
                world, c->dp.zero, m->n, res->mem.param_bytes, res->mem.grad_bytes,
                res->mem.grad_staging_peak, res->mem.optim_bytes, res->mem.shard_floats,
                dt_dp_n_buckets(dp), res->comm_s, res->exposed_s, res->backward_s);

    if (full && c->out_dir && (st = gather_logical(m, m->w, full, full->w, replica == 0, smask, comm))) goto done;
    if (lead && c->out_dir) {
        snprintf(path, sizeof path, "%s/model.safetensors", c->out_dir);
        char steps_s[32];
        snprintf(steps_s, sizeof steps_s, "%lld", (long long)total);
        const char *kv[] = {"steps", steps_s};
        if ((st = dt_weights_save(full ? full : m, path, 1, kv))) goto done;
        if (!quiet) dt_log(DT_LOG_INFO, "wrote %s and %s/metrics.jsonl", path, c->out_dir);
    }
    if (trace) {
        if ((st = dt_trace_write(trace, comm, c->trace))) goto done;
        if (!quiet) dt_log(DT_LOG_INFO, "wrote the timeline %s (open it in https://ui.perfetto.dev)", c->trace);
    }
done:
    tr_watchdog_tick(-1);
    if (metrics && fclose(metrics) != 0 && !st)
        st = dt_errorf(DT_ERR_IO, "cannot finish writing metrics in %s: %s", c->out_dir, strerror(errno));
    dt_ckpt_writer_destroy(ckw);
    dt_free(writers);
    dt_free(pmask);
    dt_free(smask);
    for (int k = 0; k < 4; k++) dt_free(gbuf[k]);
    dt_free(ag.vecs);
    dt_free(ag.scratch);
    dt_free(ag.alie_bad);
    dt_free(ag.centre);
    dt_free(ag.wm);
    dt_free(bal);
    dt_pipe_destroy(pipe);
    dt_trace_destroy(trace);
    dt_sampler_free(&sampler);
    tr_batch_buf_free(&bb);
    dt_dp_destroy(dp);
    dt_acts_destroy(acts);
    dt_acts_destroy(eacts);
    dt_model_destroy(m);
    dt_model_destroy(full);
    run_data_free(&d);
    /* The sub-communicators last: the dp object used them. */
    if (dpc != comm) dt_comm_destroy(dpc);
    dt_comm_destroy(ppc);
    dt_comm_destroy(tpc);
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
    if ((st = tr_batch_buf_init(&bb, m, B, d.T))) goto done;
    dt_comm *self = NULL;
    if ((st = dt_comm_self(&self))) goto done;
    double t0 = dt_now();
    st = tr_evaluate(m, acts, &d, &bb, B, c->eval_max, self, NULL, 0, 1, true, &res->test_acc, &res->eval_loss);
    res->seconds = dt_now() - t0;
    dt_comm_destroy(self);
done:
    tr_batch_buf_free(&bb);
    dt_acts_destroy(acts);
    dt_model_destroy(m);
    run_data_free(&d);
    return st;
}
