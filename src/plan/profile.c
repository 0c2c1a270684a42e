/* A model's training step profiled on this machine for the planner (plan.h).
 *
 * Forward and backward of a synthetic batch (zero inputs, class 0 targets: the
 * arithmetic is that of any batch) at B, B/2, ... B/32 samples (as many of them
 * as are distinct and >= 1), in turn, each the median of seven timed steps
 * after one warm-up, fitted as
 *   t(b) = t0 + b c
 * by the median of the pairwise slopes and of the residuals (Theil-Sen: a
 * least-squares line through four points put t0 at 20.3 ms and 0.0 ms in two
 * profiles of one model, one step's noise moving the intercept),
 * c the time per sample (flops = the model's FLOPs per sample / c) and t0 what
 * every micro-batch costs whatever its size (the layers' fixed work, the lower
 * efficiency of small GEMMs): the compute counterpart of a link's alpha and
 * beta. Then the optimizer's update (AdamW or SGD with momentum) over the
 * model's parameters, per parameter; and each codec's encode (with error
 * feedback where the codec has it by default) and decode of 2^20 normal
 * values, per value; and what a step pays when its gradient pages were
 * handed back (ZeRO-2's staging, ZeRO-3's gathers), per byte. Every timed
 * operation ends with the caller's sync hook: the program runs one profile
 * per rank of a host (processes it starts) and makes the hook a barrier
 * between them, so the times are those of a
 * synchronous step with that many ranks on the host (threads would not do:
 * OpenBLAS serialises GEMMs called from several threads of one process).
 * Everything is allocated before the first operation, so no profile fails
 * between two syncs. Cost: 64 steps (about 32 B samples), 8 updates and 16
 * codings of 2^20 values per codec. */
#include "dtrain/plan.h"

#include "dtrain/compress.h"
#include "dtrain/gradcomp.h"
#include "dtrain/optim.h"
#include "dtrain/parallel.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CODEC_N ((size_t)1 << 20)
static const char *codec_names[] = {"fp16", "bf16", "int8", "topk:0.01", "sign"};
#define N_CODECS 5

typedef struct worker {
    dt_model *m;
    dt_acts *a;
    float *x, *y, *g, *e, *tmp;
    int32_t *tok;
    uint8_t *buf;
    dt_optim *opt;
    dt_arena_map gm, gm2;     /* the model's gradient arena, as ZeRO-2 maps it, and one
                               * more that staging()'s thread releases */
    int B;
    void (*sync)(void *);     /* NULL: one process */
    void *sync_ctx;
    dt_plan_profile_out out;
} worker;

static void worker_free(worker *w) {
    dt_acts_destroy(w->a);
    if (w->m && w->gm.map && w->m->g == w->gm.base) w->m->g = NULL; /* the arena's, not the allocator's */
    dt_model_destroy(w->m);
    dt_arena_map_destroy(&w->gm);
    dt_arena_map_destroy(&w->gm2);
    dt_optim_destroy(w->opt);
    dt_free(w->x);
    dt_free(w->y);
    dt_free(w->tok);
    dt_free(w->g);
    dt_free(w->e);
    dt_free(w->tmp);
    dt_free(w->buf);
}

static dt_status worker_make(worker *w, const dt_model_cfg *mc, int B, bool adam) {
    memset(w, 0, sizeof *w);
    w->B = B;
    dt_status st = dt_model_create(&w->m, mc);
    if (st) return st;
    dt_model *m = w->m;
    dt_model_init(m, 1);
    size_t per = m->input == DT_INPUT_TOKENS ? (size_t)m->seq_len : (size_t)m->in_floats;
    w->x = dt_calloc((size_t)B * per + 1, sizeof(float));
    w->y = dt_calloc((size_t)B * (size_t)(m->y_dim + 1), sizeof(float));
    w->tok = dt_calloc((size_t)B * per + 1, sizeof(int32_t));
    w->g = dt_alloc_floats(CODEC_N);
    w->e = dt_calloc(CODEC_N, sizeof(float));
    w->tmp = dt_alloc_floats(CODEC_N);
    w->buf = dt_calloc(8 * CODEC_N + 64, 1);
    if (!w->x || !w->y || !w->tok || !w->g || !w->e || !w->tmp || !w->buf)
        st = dt_errorf(DT_ERR_NOMEM, "out of memory profiling the model");
    if (!st) st = dt_acts_create(&w->a, m, 0, m->n_blocks - 1, B);
    if (!st) st = dt_arena_map_create(&w->gm, m->n, m->n, "profile's gradient arena");
    if (!st) st = dt_arena_map_create(&w->gm2, m->n, m->n, "profile's second gradient arena");
    if (!st) {
        dt_free(m->g);
        m->g = w->gm.base;
    }
    dt_optim_cfg oc;
    dt_optim_cfg_default(&oc, adam ? DT_OPTIM_ADAMW : DT_OPTIM_SGD);
    if (!adam) oc.momentum = 0.9f;
    if (!st) st = dt_optim_create(&w->opt, &oc, m->n);
    dt_rng r;
    dt_rng_init(&r, 1, 0);
    for (size_t i = 0; !st && i < CODEC_N; i++) w->g[i] = dt_rng_normal(&r);
    if (st) worker_free(w);
    return st;
}

static void sync_all(worker *w) {
    if (w->sync) w->sync(w->sync_ctx);
}

static double step(worker *w, int B) {
    dt_batch b = {.B = B, .x = w->x, .tokens = w->tok, .targets = w->tok, .y = w->y,
                  .loss_scale = 1.0f / ((float)B * (float)w->m->loss_terms)};
    double t0 = dt_now();
    dt_model_zero_grad(w->m);
    dt_model_forward(w->m, w->a, &b, NULL);
    dt_model_backward(w->m, w->a, &b, NULL, NULL, NULL, NULL);
    sync_all(w);
    return dt_now() - t0;
}

static double update(worker *w, int B) {
    (void)B;
    double t0 = dt_now();
    dt_optim_begin_step(w->opt);
    dt_optim_update(w->opt, w->m->w, w->m->g, 0, w->m->n, 1e-3f, 0.01f);
    sync_all(w);
    return dt_now() - t0;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of seven calls of f after one warm-up. */
static double median7(double (*f)(worker *, int), worker *w, int B) {
    double t[7];
    f(w, B);
    for (int r = 0; r < 7; r++) t[r] = f(w, B);
    qsort(t, 7, sizeof t[0], by_value);
    return t[3];
}

static double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

dt_status dt_plan_fit_affine(const double *x, const double *t, int n, double *t0, double *c) {
    if (n < 1 || n > DT_PLAN_FIT_MAX || !(x[0] > 0))
        return dt_errorf(DT_ERR_INVALID, "plan: a fit needs 1 to %d points with x > 0 (got %d)", DT_PLAN_FIT_MAX, n);
    double v[DT_PLAN_FIT_MAX * (DT_PLAN_FIT_MAX - 1) / 2];
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (x[i] != x[j]) v[k++] = (t[i] - t[j]) / (x[i] - x[j]);
    if (k == 0) {
        *t0 = 0;
        *c = t[0] / x[0];
        return DT_OK;
    }
    *c = median_of(v, k);
    for (int i = 0; i < n; i++) v[i] = t[i] - *c * x[i];
    *t0 = median_of(v, n);
    return DT_OK;
}

/* Encode and decode of CODEC_N normal values per codec: the median of seven
 * after one warm-up, per value. */
static void codecs(worker *w) {
    dt_rng r;
    dt_rng_init(&r, 2, 0);
    for (int k = 0; k < N_CODECS; k++) {
        dt_comp_cfg cc;
        if (dt_comp_parse(codec_names[k], &cc)) continue; /* never: the names are ours */
        double te[8], td[8];
        for (int rep = 0; rep < 8; rep++) {
            double t0 = dt_now();
            size_t bytes = dt_gc_ef_default(cc.kind) ? dt_comp_encode_ef(&cc, w->g, w->e, CODEC_N, w->buf, w->tmp, &r)
                                                     : dt_comp_encode(&cc, w->g, CODEC_N, w->buf, &r);
            sync_all(w);
            double t1 = dt_now();
            (void)dt_comp_decode(&cc, w->buf, bytes, w->tmp, CODEC_N); /* our own encoding */
            sync_all(w);
            td[rep] = dt_now() - t1;
            te[rep] = t1 - t0;
        }
        qsort(te + 1, 7, sizeof te[0], by_value);
        qsort(td + 1, 7, sizeof td[0], by_value);
        w->out.codec_enc_s_per_float[cc.kind] = te[4] / (double)CODEC_N;
        w->out.codec_dec_s_per_float[cc.kind] = td[4] / (double)CODEC_N;
    }
}

/* A communication thread's releases during a step: the arena's eight ranges
 * handed back one by one, `gap` seconds apart. */
typedef struct releaser {
    const dt_arena_map *a;
    size_t n;
    double gap;
} releaser;

static void *release_in_turn(void *arg) {
    const releaser *r = arg;
    for (int k = 0; k < 8; k++) {
        struct timespec ts = {(time_t)r->gap, (long)((r->gap - (double)(time_t)r->gap) * 1e9)};
        nanosleep(&ts, NULL);
        dt_arena_release(r->a, r->n * (size_t)k / 8, r->n * (size_t)(k + 1) / 8);
    }
    return NULL;
}

/* What ZeRO-2's and ZeRO-3's released pages cost: a step whose gradient arena
 * was handed back (its writes fault the pages in again) while a thread hands
 * back another arena's ranges one by one, as ZeRO-2's communication thread
 * releases each bucket after its reduce-scatter while backward runs, against
 * the resident step before it, in eight pairs (the first a warm-up): the
 * median difference per gradient byte (0 when noise makes it negative). The
 * host's ranks do it at once, as a run's do. Both halves count: W1 at two
 * ranks lost 1.5-2 ms a step to the releases (7.4 MB), where re-faulting alone
 * in one thread measured 0.3 ms. */
static void staging(worker *w) {
    double d[8];
    size_t n = w->m->n;
    for (int r = 0; r < 8; r++) {
        double res = step(w, w->B);
        dt_arena_release(&w->gm, 0, n);
        memset(w->gm2.base, 1, 4 * n); /* resident, for the thread to release */
        releaser rl = {&w->gm2, n, res / 9};
        pthread_t th;
        bool started = pthread_create(&th, NULL, release_in_turn, &rl) == 0;
        double t = step(w, w->B);
        if (started) pthread_join(th, NULL);
        d[r] = t - res;
    }
    double med = median_of(d + 1, 7);
    w->out.staging_s_per_byte = med > 0 && n ? med / (4.0 * (double)n) : 0;
}

/* The whole profile of one worker; the same barriers in every worker. */
static void profile_all(worker *w) {
    double xs[DT_PLAN_FIT_MAX], ts[DT_PLAN_FIT_MAX], t[DT_PLAN_FIT_MAX][8];
    int k = 0;
    for (int b = w->B; k < DT_PLAN_FIT_MAX && (k == 0 || b < (int)xs[k - 1]); b = b / 2 > 0 ? b / 2 : 1) xs[k++] = b;
    /* The sizes in turn, eight rounds (the first a warm-up): a slow spell of
     * the machine (two profiles a minute apart differed by 40% at one size)
     * then lands on a round of every size, which each size's median drops,
     * instead of on all seven steps of one size, which bends the line. */
    for (int r = 0; r < 8; r++)
        for (int i = 0; i < k; i++) t[i][r] = step(w, (int)xs[i]);
    for (int i = 0; i < k; i++) ts[i] = median_of(t[i] + 1, 7);
    w->out.optim_s_per_param = median7(update, w, w->B) / (double)(w->m->n ? w->m->n : 1);
    staging(w);
    codecs(w);
    double c = 0, t0 = 0;
    (void)dt_plan_fit_affine(xs, ts, k, &t0, &c); /* never fails: k >= 1, xs[0] = B >= 1 */
    if (!(c > 0) || t0 < 0) { /* noise: no fixed part to speak of */
        c = ts[0] / w->B;
        t0 = 0;
    }
    w->out.micro_overhead_s = t0;
    w->out.step_s = ts[0];
    w->out.points = k;
    for (int i = 0; i < k; i++) { /* ascending rows */
        w->out.rows[i] = xs[k - 1 - i];
        w->out.time[i] = ts[k - 1 - i];
    }
    w->out.flops_per_sample = (double)w->m->flops_per_sample;
    w->out.flops = c > 0 ? (double)w->m->flops_per_sample / c : 0;
}

dt_status dt_plan_profile(const dt_model_cfg *mc, int B, bool adam, void (*sync)(void *), void *sync_ctx,
                          dt_plan_profile_out *out) {
    if (B < 1) return dt_errorf(DT_ERR_INVALID, "plan: profile needs a batch >= 1 (got %d)", B);
    memset(out, 0, sizeof *out);
    worker w;
    dt_status st = worker_make(&w, mc, B, adam);
    if (st) return st;
    w.sync = sync;
    w.sync_ctx = sync_ctx;
    profile_all(&w);
    *out = w.out;
    out->procs = 1;
    worker_free(&w);
    return out->flops > 0 ? DT_OK : dt_errorf(DT_ERR_INVALID, "plan: profiling measured no time");
}
