/* The metrics.jsonl reporter: one JSON object per line (jansson, compact, reals
 * with 9 significant digits: every float exactly), flushed as it goes so a
 * crashed run keeps what it logged. Line kinds, keys in this order:
 *   step:  step, epoch, loss, lr, items_per_s, time_s, compute_s, comm_exposed_s,
 *          comm_s, bytes_sent, [compress, compress_ratio, encode_s, decode_s, [ef_norm]], ranks,
 *          [loss_scale, overflow_steps] (--precision fp16)
 *          (parameter server: step, loss, lr, items_per_s, time_s, workers, servers,
 *          clock_min, clock_max: the slowest and fastest running worker's clock;
 *          Hogwild!: step, loss, lr, items_per_s, threads)
 *   eval:  step, test_acc, test_loss | val_loss, time_s
 *   end:   {"pipeline":true,...}, {"memory":true,...}, {"staleness":true,...},
 *          {"stopped":true,"step":S} when the run stopped on request
 *   event: event ("stop", "skip", "rewind", "overflow"), step, [to_step, batches], [loss], why */
#include "dtrain/report.h"
#include "dtrain/train.h"

#include <jansson.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct dt_report_jsonl {
    FILE *f;
    char path[4096];
};

dt_status dt_report_make_dir(const char *dir) {
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
        struct stat sb;
        if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return DT_OK;
        return dt_errorf(DT_ERR_IO, "--out %s exists and is not a directory", dir);
    }
    return dt_errorf(DT_ERR_IO, "cannot create --out directory %s: %s", dir, strerror(errno));
}

/* On resume, drop metric lines of steps after the checkpoint (a crashed attempt
 * may have logged them); they are logged again by the resumed run. */
static void keep_upto(const char *path, int64_t step) {
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

/* Writes obj as one line and releases it. */
static dt_status put(dt_report_jsonl *j, json_t *obj) {
    if (!obj) return dt_errorf(DT_ERR_NOMEM, "out of memory writing %s", j->path);
    int rc = json_dumpf(obj, j->f, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(obj);
    if (rc != 0 || fputc('\n', j->f) == EOF || fflush(j->f) != 0)
        return dt_errorf(DT_ERR_IO, "cannot write %s: %s", j->path, strerror(errno));
    return DT_OK;
}

static void set_real(json_t *o, const char *k, double v) { json_object_set_new(o, k, json_real(v)); }
static void set_int(json_t *o, const char *k, long long v) { json_object_set_new(o, k, json_integer(v)); }

static dt_status on_start(void *ctx, const dt_run_info *info) {
    dt_report_jsonl *j = ctx;
    if (!info->out_dir) return DT_OK;
    dt_status st = dt_report_make_dir(info->out_dir);
    if (st) return st;
    snprintf(j->path, sizeof j->path, "%.4000s/metrics.jsonl", info->out_dir);
    if (info->start_step > 0) keep_upto(j->path, info->start_step);
    if (j->f) fclose(j->f);
    if (!(j->f = fopen(j->path, info->start_step > 0 ? "a" : "w")))
        return dt_errorf(DT_ERR_IO, "cannot write %s: %s", j->path, strerror(errno));
    return DT_OK;
}

/* The step line's object (NULL: out of memory). */
static json_t *step_object(const dt_step_info *s) {
    json_t *o = json_object();
    if (!o) return NULL;
    set_int(o, "step", s->step);
    if (s->strategy == DT_STRATEGY_SYNC || s->strategy == DT_STRATEGY_LOCALSGD) set_int(o, "epoch", s->epoch);
    set_real(o, "loss", s->loss);
    set_real(o, "lr", s->lr);
    set_real(o, "items_per_s", s->items_per_s);
    if (s->time_s >= 0) set_real(o, "time_s", s->time_s);
    if (s->strategy == DT_STRATEGY_PS) {
        set_int(o, "workers", s->workers);
        set_int(o, "servers", s->servers);
        set_int(o, "clock_min", s->clock_min);
        set_int(o, "clock_max", s->clock_max);
    } else if (s->strategy == DT_STRATEGY_HOGWILD) {
        set_int(o, "threads", s->threads);
    } else {
        set_real(o, "compute_s", s->compute_s);
        set_real(o, "comm_exposed_s", s->comm_exposed_s);
        set_real(o, "comm_s", s->comm_s);
        set_int(o, "bytes_sent", (long long)s->bytes_sent);
        if (s->compress) {
            json_object_set_new(o, "compress", json_string(s->compress));
            set_real(o, "compress_ratio", s->compress_ratio);
            set_real(o, "encode_s", s->encode_s);
            set_real(o, "decode_s", s->decode_s);
            if (s->ef_norm >= 0) set_real(o, "ef_norm", s->ef_norm);
        }
        set_int(o, "ranks", s->ranks);
        if (s->loss_scale > 0) {
            set_real(o, "loss_scale", s->loss_scale);
            set_int(o, "overflow_steps", (long long)s->overflow_steps);
        }
    }
    return o;
}

char *dt_report_step_json(const dt_step_info *s) {
    json_t *o = step_object(s);
    char *t = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    return t;
}

static dt_status on_step(void *ctx, const dt_step_info *s) {
    dt_report_jsonl *j = ctx;
    if (!j->f) return DT_OK;
    return put(j, step_object(s));
}

static dt_status on_eval(void *ctx, const dt_eval_info *e) {
    dt_report_jsonl *j = ctx;
    if (!j->f) return DT_OK;
    json_t *o = json_object();
    set_int(o, "step", e->step);
    if (e->lm || e->acc < 0) { /* a language model or a regressor: no accuracy */
        set_real(o, "val_loss", e->loss);
    } else {
        set_real(o, "test_acc", e->acc);
        set_real(o, "test_loss", e->loss);
    }
    if (e->time_s >= 0) set_real(o, "time_s", e->time_s);
    return put(j, o);
}

static json_t *reals(const double *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

static json_t *counts(const double *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer((long long)v[i]));
    return a;
}

static dt_status put_pipeline(dt_report_jsonl *j, const dt_pipe_summary *p) {
    json_t *o = json_object(), *blocks = json_array();
    json_object_set_new(o, "pipeline", json_true());
    set_int(o, "stages", p->stages);
    set_int(o, "micro_batches", p->micro_batches);
    json_object_set_new(o, "schedule", json_string(p->schedule));
    if (p->virtual_stages > 1) set_int(o, "virtual_stages", p->virtual_stages);
    json_object_set_new(o, "recompute", json_boolean(p->recompute));
    set_real(o, "bubble_formula", p->bubble_formula);
    json_object_set_new(o, "idle_frac", reals(p->idle_frac, p->stages));
    json_object_set_new(o, "act_bytes", counts(p->act_bytes, p->stages));
    for (int k = 0; k < p->stages; k++) json_array_append_new(blocks, json_integer(p->blocks_per_stage[k]));
    json_object_set_new(o, "blocks_per_stage", blocks);
    json_object_set_new(o, "busy_s", reals(p->busy_s, p->stages));
    json_object_set_new(o, "acts_alive_peak", counts(p->acts_alive_peak, p->stages));
    return put(j, o);
}

/* Every rank's memory: rank 0's kinds beside the fields above (act_bytes,
 * buffer_bytes, model_copy_bytes), then per rank its own bytes (every kind
 * dtrain counts) and its peak resident set, the largest of each with its rank,
 * and each kind per rank ("by_rank"). */
static void put_ranks_memory(json_t *o, const dt_mem_summary *m) {
    /* singular names: no key of the line's own is repeated inside by_rank */
    static const char *const name[DT_MEM_COUNT] = {"param", "grad", "staging", "optim", "act", "buffer", "copy", "rss_peak"};
    json_t *own = json_array(), *rss = json_array(), *by = json_object();
    double own_max = -1, rss_max = -1;
    int own_at = 0, rss_at = 0;
    for (int k = 0; k < DT_MEM_RSS; k++) json_object_set_new(by, name[k], json_array());
    for (int q = 0; q < m->ranks; q++) {
        const double *row = m->bytes + (size_t)q * DT_MEM_COUNT;
        double sum = 0;
        for (int k = 0; k < DT_MEM_RSS; k++) {
            sum += row[k];
            json_array_append_new(json_object_get(by, name[k]), json_integer((long long)row[k]));
        }
        json_array_append_new(own, json_integer((long long)sum));
        json_array_append_new(rss, json_integer((long long)row[DT_MEM_RSS]));
        if (sum > own_max) own_max = sum, own_at = q;
        if (row[DT_MEM_RSS] > rss_max) rss_max = row[DT_MEM_RSS], rss_at = q;
    }
    set_int(o, "act_bytes", (long long)m->bytes[DT_MEM_ACTS]);
    set_int(o, "buffer_bytes", (long long)m->bytes[DT_MEM_BUFFERS]);
    set_int(o, "model_copy_bytes", (long long)m->bytes[DT_MEM_COPY]);
    json_object_set_new(o, "own_bytes", own);
    set_int(o, "own_max_bytes", (long long)own_max);
    set_int(o, "own_max_rank", own_at);
    json_object_set_new(o, "rss_peak_bytes", rss);
    set_int(o, "rss_peak_max_bytes", (long long)rss_max);
    set_int(o, "rss_peak_rank", rss_at);
    json_object_set_new(o, "by_rank", by);
}

static dt_status put_memory(dt_report_jsonl *j, const dt_end_info *e) {
    const dt_train_result *r = e->res;
    json_t *o = json_object();
    json_object_set_new(o, "memory", json_true());
    set_int(o, "ranks", e->world);
    set_int(o, "zero", e->zero);
    set_int(o, "params", (long long)e->local_params);
    set_int(o, "param_bytes", (long long)r->mem.param_bytes);
    set_int(o, "grad_bytes", (long long)r->mem.grad_bytes);
    set_int(o, "grad_staging_peak_bytes", (long long)r->mem.grad_staging_peak);
    if (r->mem.param_gathered_peak) set_int(o, "param_gathered_peak_bytes", (long long)r->mem.param_gathered_peak);
    set_int(o, "optim_bytes", (long long)r->mem.optim_bytes);
    set_int(o, "shard_floats", (long long)r->mem.shard_floats);
    set_int(o, "buckets", e->buckets);
    set_real(o, "comm_s", r->comm_s);
    set_real(o, "comm_exposed_s", r->exposed_s);
    if (e->zero == 3) {
        set_real(o, "gather_s", r->gather_s);
        set_real(o, "gather_exposed_s", r->gather_exposed_s);
    }
    set_real(o, "backward_s", r->backward_s);
    if (r->ckpt_replica_bytes > 0) set_int(o, "ckpt_replica_bytes", (long long)r->ckpt_replica_bytes);
    if (e->mem) put_ranks_memory(o, e->mem);
    return put(j, o);
}

static dt_status put_staleness(dt_report_jsonl *j, const dt_ps_summary *p) {
    json_t *o = json_object(), *hist = json_array(), *lost = json_array();
    json_object_set_new(o, "staleness", json_true());
    json_object_set_new(o, "consistency", json_string(p->consistency));
    set_int(o, "bound", p->bound);
    set_int(o, "max", p->max_staleness);
    for (int i = 0; i < p->n_hist; i++) json_array_append_new(hist, json_integer((long long)p->hist[i]));
    json_object_set_new(o, "hist", hist);
    for (int i = 0; i < p->n_lost; i++) json_array_append_new(lost, json_integer(p->lost[i]));
    json_object_set_new(o, "lost_workers", lost);
    set_int(o, "samples", (long long)p->samples);
    set_int(o, "joined", p->joined);
    set_int(o, "departed", p->departed);
    return put(j, o);
}

static dt_status on_end(void *ctx, const dt_end_info *e) {
    dt_report_jsonl *j = ctx;
    if (!j->f) return DT_OK;
    dt_status st = DT_OK;
    if (e->pipe) st = put_pipeline(j, e->pipe);
    if (!st && (e->strategy == DT_STRATEGY_SYNC || e->strategy == DT_STRATEGY_LOCALSGD)) st = put_memory(j, e);
    if (!st && e->ps) st = put_staleness(j, e->ps);
    if (!st && e->res->stopped_at >= 0) {
        json_t *o = json_object();
        json_object_set_new(o, "stopped", json_true());
        set_int(o, "step", e->res->stopped_at);
        st = put(j, o);
    }
    return st;
}

static dt_status on_event(void *ctx, const dt_event_info *e) {
    dt_report_jsonl *j = ctx;
    if (!j->f) return DT_OK;
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string(e->kind));
    set_int(o, "step", e->step);
    if (strcmp(e->kind, "rewind") == 0) {
        set_int(o, "to_step", e->to_step);
        set_int(o, "batches", e->batches);
    }
    if (strcmp(e->kind, "stop") != 0) set_real(o, "loss", e->loss);
    json_object_set_new(o, "why", json_string(e->why ? e->why : ""));
    return put(j, o);
}

dt_status dt_report_jsonl_create(dt_report_jsonl **state, dt_reporter *r) {
    *state = dt_calloc(1, sizeof **state);
    if (!*state) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    *r = (dt_reporter){.ctx = *state, .on_start = on_start, .on_step = on_step, .on_eval = on_eval, .on_end = on_end,
                        .on_event = on_event};
    return DT_OK;
}

dt_status dt_report_jsonl_close(dt_report_jsonl *j) {
    if (!j) return DT_OK;
    dt_status st = DT_OK;
    if (j->f && fclose(j->f) != 0)
        st = dt_errorf(DT_ERR_IO, "cannot finish writing %s: %s", j->path, strerror(errno));
    dt_free(j);
    return st;
}
