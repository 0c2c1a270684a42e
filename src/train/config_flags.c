/* The flag table of dt_train_cfg (name, type, bounds, help, target field) and
 * the parsers and formatters of the flags whose values are words or specs
 * (--inject, --strategy, ...); defaults and checks are in config.c, the engine
 * that reads and writes flags with this table in flags.c. */
#include "dtrain/config.h"

#include "flags.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dt_status dt_inject_parse(const char *spec, dt_inject *out) {
    memset(out, 0, sizeof *out);
    out->rank = -1;
    out->step = -1;
    const char *p = strchr(spec, ':');
    size_t kl = p ? (size_t)(p - spec) : strlen(spec);
    if (kl == 5 && strncmp(spec, "crash", 5) == 0) out->kind = DT_INJECT_CRASH;
    else if (kl == 4 && strncmp(spec, "hang", 4) == 0) out->kind = DT_INJECT_HANG;
    else if (kl == 4 && strncmp(spec, "slow", 4) == 0) out->kind = DT_INJECT_SLOW;
    else if (kl == 9 && strncmp(spec, "byzantine", 9) == 0) out->kind = DT_INJECT_BYZANTINE;
    else if (kl == 5 && strncmp(spec, "spike", 5) == 0) out->kind = DT_INJECT_SPIKE;
    else if (kl == 8 && strncmp(spec, "overflow", 8) == 0) out->kind = DT_INJECT_OVERFLOW;
    else
        return dt_errorf(DT_ERR_INVALID, "--inject '%s': kind must be crash, hang, slow, byzantine, spike or overflow", spec);
    if (out->kind == DT_INJECT_SPIKE) {
        out->rank = 0; /* every rank scales its share of the batch */
        out->factor = 1000.0f;
    }
    bool have_mode = false, have_factor = false, have_step = false;
    while (p && *p == ':') {
        p++;
        const char *eq = strchr(p, '=');
        if (!eq) return dt_errorf(DT_ERR_INVALID, "--inject '%s': expected key=value after ':'", spec);
        char *end;
        errno = 0;
        if (strncmp(p, "rank=", 5) == 0) {
            long v = strtol(eq + 1, &end, 10);
            if (errno || end == eq + 1 || v < 0 || v > 1000000) return dt_errorf(DT_ERR_INVALID, "--inject '%s': bad rank", spec);
            out->rank = (int)v;
        } else if (strncmp(p, "step=", 5) == 0) {
            long long v = strtoll(eq + 1, &end, 10);
            if (errno || end == eq + 1 || v < 1) return dt_errorf(DT_ERR_INVALID, "--inject '%s': bad step (1-based)", spec);
            out->step = v;
            have_step = true;
        } else if (strncmp(p, "scale=", 6) == 0 && out->kind == DT_INJECT_SPIKE) {
            double v = strtod(eq + 1, &end);
            if (errno || end == eq + 1 || !(v > 0 && v <= 1e30)) return dt_errorf(DT_ERR_INVALID, "--inject '%s': scale must be a positive number", spec);
            out->factor = (float)v;
        } else if (strncmp(p, "rank=", 5) == 0 && out->kind == DT_INJECT_SPIKE) {
            return dt_errorf(DT_ERR_INVALID, "--inject '%s': spike takes step and scale only (it hits the batch on every rank)", spec);
        } else if (strncmp(p, "factor=", 7) == 0) {
            have_factor = true;
            double v = strtod(eq + 1, &end);
            if (errno || end == eq + 1 || !(v >= 1.0 && v <= 1000.0)) return dt_errorf(DT_ERR_INVALID, "--inject '%s': factor must be in [1, 1000]", spec);
            out->factor = (float)v;
        } else if (strncmp(p, "mode=", 5) == 0) {
            const char *v = eq + 1;
            have_mode = true;
            size_t vl = strcspn(v, ":");
            if (vl == 8 && strncmp(v, "signflip", 8) == 0) { out->mode = DT_BYZ_SIGNFLIP; end = (char *)v + 8; }
            else if (vl == 6 && strncmp(v, "random", 6) == 0) { out->mode = DT_BYZ_RANDOM; end = (char *)v + 6; }
            else if (vl == 4 && strncmp(v, "alie", 4) == 0) {
                out->mode = DT_BYZ_ALIE;
                out->factor = NAN;
                end = (char *)v + 4;
                if (*end == ':' && end[1] != '\0' && strchr("0123456789.-+", end[1])) {
                    const char *q = end + 1;
                    double z = strtod(q, &end);
                    if (end == q || !(z > 0 && z <= 100))
                        return dt_errorf(DT_ERR_INVALID, "--inject '%s': alie:Z needs a shift Z in (0, 100] (honest standard deviations)", spec);
                    out->factor = (float)z;
                }
            }
            else if (vl == 5 && strncmp(v, "scale:", 6) == 0) {
                out->mode = DT_BYZ_SCALE;
                double x = strtod(v + 6, &end);
                if (end == v + 6 || !(x >= -1e6 && x <= 1e6))
                    return dt_errorf(DT_ERR_INVALID, "--inject '%s': scale:X needs a number", spec);
                out->factor = (float)x;
            } else {
                return dt_errorf(DT_ERR_INVALID, "--inject '%s': mode must be signflip, random, scale:X or alie[:Z]", spec);
            }
        } else {
            return dt_errorf(DT_ERR_INVALID, "--inject '%s': unknown key (rank, step, factor, mode; spike: step, scale)", spec);
        }
        p = end;
        if (*p && *p != ':') return dt_errorf(DT_ERR_INVALID, "--inject '%s': junk after a value", spec);
    }
    if (out->rank < 0) return dt_errorf(DT_ERR_INVALID, "--inject '%s': needs rank=R", spec);
    /* Every key acts: one that the kind ignores is refused, not dropped. */
    static const char *takes[] = {"rank and step", "rank and step", "rank and factor", "rank and mode", "step and scale",
                                  "rank and step"};
    bool stray = out->kind == DT_INJECT_BYZANTINE ? have_step || have_factor
                 : out->kind == DT_INJECT_SLOW     ? have_step || have_mode
                                                   : have_factor || have_mode;
    if (stray)
        return dt_errorf(DT_ERR_INVALID, "--inject '%s': %.*s takes %s only", spec, (int)kl, spec, takes[out->kind]);
    if (out->kind == DT_INJECT_BYZANTINE) {
        if (!have_mode) return dt_errorf(DT_ERR_INVALID, "--inject '%s': needs mode=signflip|random|scale:X|alie[:Z]", spec);
        return DT_OK;
    }
    if (out->kind != DT_INJECT_SLOW && out->step < 1) return dt_errorf(DT_ERR_INVALID, "--inject '%s': needs step=S", spec);
    if (out->kind == DT_INJECT_SLOW && out->factor < 1.0f) return dt_errorf(DT_ERR_INVALID, "--inject '%s': needs factor=F", spec);
    return DT_OK;
}

/* The --inject spelling of one injection (what dt_inject_parse reads). */
static void inject_format(const dt_inject *in, char *buf, size_t n) {
    static const char *kinds[] = {"crash", "hang", "slow", "byzantine", "spike", "overflow"};
    static const char *modes[] = {"signflip", "random", "scale", "alie"};
    char x[40];
    fl_format_real(in->factor, true, x, sizeof x);
    if (in->kind == DT_INJECT_SPIKE) {
        snprintf(buf, n, "spike:step=%lld:scale=%s", (long long)in->step, x);
        return;
    }
    int k = snprintf(buf, n, "%s:rank=%d", kinds[in->kind], in->rank);
    if (k < 0 || (size_t)k >= n) return;
    if (in->kind == DT_INJECT_SLOW) snprintf(buf + k, n - (size_t)k, ":factor=%s", x);
    else if (in->kind != DT_INJECT_BYZANTINE) snprintf(buf + k, n - (size_t)k, ":step=%lld", (long long)in->step);
    else if (in->mode == DT_BYZ_SCALE || (in->mode == DT_BYZ_ALIE && !isnan(in->factor)))
        snprintf(buf + k, n - (size_t)k, ":mode=%s:%s", modes[in->mode], x);
    else snprintf(buf + k, n - (size_t)k, ":mode=%s", modes[in->mode]);
}

/* ---- flags whose values are words or specs --------------------------------
 * parse(base, flag, s) sets the dt_train_cfg at base; format writes it back. */

static dt_status model_parse(void *base, const char *flag, const char *s) {
    /* The kind's defaults were applied before any flag (dt_train_cfg_parse). */
    return dt_model_select(&((dt_train_cfg *)base)->model, s);
}
static void model_format(const void *base, char *buf, size_t n) {
    snprintf(buf, n, "%s", dt_model_name(&((const dt_train_cfg *)base)->model));
}

static dt_status optim_parse(void *base, const char *flag, const char *s) {
    if (strcmp(s, "sgd") == 0) dt_train_cfg_set_optim(base, DT_OPTIM_SGD);
    else if (strcmp(s, "adamw") == 0) dt_train_cfg_set_optim(base, DT_OPTIM_ADAMW);
    else return dt_errorf(DT_ERR_INVALID, "%s must be sgd or adamw, got '%s'", flag, s);
    return DT_OK;
}
static void optim_format(const void *base, char *buf, size_t n) {
    snprintf(buf, n, "%s", ((const dt_train_cfg *)base)->optim.kind == DT_OPTIM_SGD ? "sgd" : "adamw");
}

static dt_status hidden_parse(void *base, const char *flag, const char *s) {
    dt_model_cfg *m = &((dt_train_cfg *)base)->model;
    m->n_hidden = 0;
    if (strcmp(s, "none") == 0) return DT_OK;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > 65536)
            return dt_errorf(DT_ERR_INVALID, "%s expects sizes in [1, 65536] separated by commas, got '%s'", flag, s);
        if (m->n_hidden == DT_MLP_MAX_HIDDEN)
            return dt_errorf(DT_ERR_INVALID, "%s: at most %d hidden layers", flag, DT_MLP_MAX_HIDDEN);
        m->hidden[m->n_hidden++] = (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return dt_errorf(DT_ERR_INVALID, "%s expects sizes separated by commas, got '%s'", flag, s);
    }
    return DT_OK;
}
static void hidden_format(const void *base, char *buf, size_t n) {
    const dt_model_cfg *m = &((const dt_train_cfg *)base)->model;
    size_t k = 0;
    snprintf(buf, n, "none");
    for (int i = 0; i < m->n_hidden && k < n; i++) {
        int w = snprintf(buf + k, n - k, "%s%d", i ? "," : "", m->hidden[i]);
        if (w < 0) return;
        k += (size_t)w;
    }
}

static dt_status set_parse(void *base, const char *flag, const char *s) {
    dt_model_cfg *m = &((dt_train_cfg *)base)->model;
    dt_status st = dt_model_set_check(s);
    if (st) return dt_errorf(DT_ERR_INVALID, "%s: %s", flag, dt_error_msg());
    if (strlen(s) >= sizeof m->set) return dt_errorf(DT_ERR_INVALID, "%s: '%s' is too long", flag, s);
    snprintf(m->set, sizeof m->set, "%s", s);
    return DT_OK;
}
static void set_format(const void *base, char *buf, size_t n) {
    snprintf(buf, n, "%s", ((const dt_train_cfg *)base)->model.set);
}

/* A bool spelled by two words, a (meaning a_is) or b (cosine|constant, static|dynamic). */
static dt_status two_words_parse(bool *out, const char *flag, const char *s, const char *a, bool a_is, const char *b) {
    if (strcmp(s, a) == 0) *out = a_is;
    else if (strcmp(s, b) == 0) *out = !a_is;
    else return dt_errorf(DT_ERR_INVALID, "%s must be %s or %s, got '%s'", flag, a, b, s);
    return DT_OK;
}

static dt_status lr_schedule_parse(void *base, const char *flag, const char *s) {
    return two_words_parse(&((dt_train_cfg *)base)->cosine, flag, s, "cosine", true, "constant");
}
static void lr_schedule_format(const void *base, char *buf, size_t n) {
    snprintf(buf, n, "%s", ((const dt_train_cfg *)base)->cosine ? "cosine" : "constant");
}

/* --schedule names the pipeline schedule; cosine|constant stay an alias of --lr-schedule. */
static dt_status schedule_parse(void *base, const char *flag, const char *s) {
    dt_train_cfg *c = base;
    if (strcmp(s, "gpipe") == 0) c->pipe.schedule = DT_SCHED_GPIPE;
    else if (strcmp(s, "1f1b") == 0) c->pipe.schedule = DT_SCHED_1F1B;
    else if (strcmp(s, "interleaved") == 0) c->pipe.schedule = DT_SCHED_INTERLEAVED;
    else if (lr_schedule_parse(base, flag, s))
        return dt_errorf(DT_ERR_INVALID, "%s must be gpipe, 1f1b or interleaved (pipeline), or cosine or constant (lr), got '%s'",
                         flag, s);
    return DT_OK;
}
static void schedule_format(const void *base, char *buf, size_t n) {
    snprintf(buf, n, "%s", dt_pipe_schedule_name(((const dt_train_cfg *)base)->pipe.schedule));
}

static dt_status strategy_parse(void *base, const char *flag, const char *s) {
    dt_train_cfg *c = base;
    if (strcmp(s, "sync") == 0) c->strategy = DT_STRATEGY_SYNC;
    else if (strcmp(s, "hogwild") == 0) c->strategy = DT_STRATEGY_HOGWILD;
    else if (strcmp(s, "ps") == 0) c->strategy = DT_STRATEGY_PS;
    else if (strncmp(s, "localsgd:", 9) == 0) {
        char *end;
        errno = 0;
        long h = strtol(s + 9, &end, 10);
        if (errno || end == s + 9 || *end)
            return dt_errorf(DT_ERR_INVALID, "--strategy localsgd:H expects an integer, got '%s'", s + 9);
        if (h < 1 || h > 1000000)
            return dt_errorf(DT_ERR_INVALID, "--strategy localsgd:H %ld is out of range [1, 1000000]", h);
        c->strategy = DT_STRATEGY_LOCALSGD;
        c->local_h = (int)h;
    } else return dt_errorf(DT_ERR_INVALID, "%s must be sync, localsgd:H, hogwild or ps, got '%s'", flag, s);
    return DT_OK;
}
static void strategy_format(const void *base, char *buf, size_t n) {
    const dt_train_cfg *c = base;
    static const char *names[] = {"sync", "localsgd", "hogwild", "ps"};
    if (c->strategy == DT_STRATEGY_LOCALSGD) snprintf(buf, n, "localsgd:%d", c->local_h);
    else snprintf(buf, n, "%s", names[c->strategy]);
}

static dt_status consistency_parse(void *base, const char *flag, const char *s) {
    return dt_ps_cfg_parse(s, &((dt_train_cfg *)base)->ps);
}
static void consistency_format(const void *base, char *buf, size_t n) {
    const dt_ps_cfg *p = &((const dt_train_cfg *)base)->ps;
    if (p->mode == DT_PS_SSP) snprintf(buf, n, "ssp:%d", p->staleness);
    else snprintf(buf, n, "%s", p->mode == DT_PS_BSP ? "bsp" : "asp");
}

static dt_status aggregate_parse(void *base, const char *flag, const char *s) {
    dt_agg *a = &((dt_train_cfg *)base)->agg;
    int pre = a->nnm; /* --pre-aggregate may come first */
    dt_status st = DT_OK;
    if (strcmp(s, "none") == 0) memset(a, 0, sizeof *a);
    else st = dt_agg_parse(s, a);
    a->nnm = pre;
    return st;
}
static void aggregate_format(const void *base, char *buf, size_t n) {
    const dt_agg *a = &((const dt_train_cfg *)base)->agg;
    static const char *names[] = {"none", "mean", "median", "trimmed", "krum", "cclip"};
    char tau[40];
    fl_format_real(a->tau, true, tau, sizeof tau);
    if (a->kind == DT_AGG_TRIMMED) snprintf(buf, n, "trimmed:%d", a->param);
    else if (a->kind == DT_AGG_KRUM && a->m) snprintf(buf, n, "krum:%d:%d", a->param, a->m);
    else if (a->kind == DT_AGG_KRUM) snprintf(buf, n, "krum:%d", a->param);
    else if (a->kind == DT_AGG_CCLIP && a->tau > 0) snprintf(buf, n, "cclip:%s", tau);
    else snprintf(buf, n, "%s", names[a->kind]);
}

static dt_status pre_aggregate_parse(void *base, const char *flag, const char *s) {
    return dt_agg_parse_pre(s, &((dt_train_cfg *)base)->agg);
}
static void pre_aggregate_format(const void *base, char *buf, size_t n) {
    int nnm = ((const dt_train_cfg *)base)->agg.nnm;
    if (nnm > 0) snprintf(buf, n, "nnm:%d", nnm);
    else snprintf(buf, n, "%s", nnm < 0 ? "nnm" : "none");
}

/* auto|on|off into -1|1|0 (worker momentum, error feedback). */
static dt_status tristate_parse(const char *flag, const char *s, bool has_auto, int *out) {
    if (has_auto && strcmp(s, "auto") == 0) *out = -1;
    else if (strcmp(s, "on") == 0) *out = 1;
    else if (strcmp(s, "off") == 0) *out = 0;
    else return dt_errorf(DT_ERR_INVALID, "%s must be %s, got '%s'", flag, has_auto ? "auto, on or off" : "on or off", s);
    return DT_OK;
}
static void tristate_format(int v, char *buf, size_t n) {
    snprintf(buf, n, "%s", v < 0 ? "auto" : v ? "on" : "off");
}

static dt_status worker_momentum_parse(void *base, const char *flag, const char *s) {
    return tristate_parse(flag, s, true, &((dt_train_cfg *)base)->worker_momentum);
}
static void worker_momentum_format(const void *base, char *buf, size_t n) {
    tristate_format(((const dt_train_cfg *)base)->worker_momentum, buf, n);
}

/* "auto" (the codec's default) is read too, so a saved configuration reads back. */
static dt_status error_feedback_parse(void *base, const char *flag, const char *s) {
    int *ef = &((dt_train_cfg *)base)->dp.comp.error_feedback;
    if (strcmp(s, "auto") == 0) {
        *ef = -1;
        return DT_OK;
    }
    return tristate_parse(flag, s, false, ef);
}
static void error_feedback_format(const void *base, char *buf, size_t n) {
    tristate_format(((const dt_train_cfg *)base)->dp.comp.error_feedback, buf, n);
}

static dt_status prefetch_parse(void *base, const char *flag, const char *s) {
    int v = 0;
    dt_status st = tristate_parse(flag, s, false, &v);
    if (!st) ((dt_train_cfg *)base)->prefetch = v == 1;
    return st;
}
static void prefetch_format(const void *base, char *buf, size_t n) {
    tristate_format(((const dt_train_cfg *)base)->prefetch, buf, n);
}

static dt_status precision_parse(void *base, const char *flag, const char *s) {
    dt_train_cfg *c = base;
    if (strcmp(s, "fp32") == 0) c->model.precision = DT_PRECISION_FP32;
    else if (strcmp(s, "bf16") == 0) c->model.precision = DT_PRECISION_BF16;
    else if (strcmp(s, "bf16-emulated") == 0) c->model.precision = DT_PRECISION_BF16_EMULATED;
    else if (strcmp(s, "fp16") == 0) c->model.precision = DT_PRECISION_FP16;
    else return dt_errorf(DT_ERR_INVALID, "%s must be fp32, bf16, bf16-emulated or fp16, got '%s'", flag, s);
    return DT_OK;
}
static void precision_format(const void *base, char *buf, size_t n) {
    static const char *names[] = {"fp32", "bf16", "bf16-emulated", "fp16"};
    snprintf(buf, n, "%s", names[((const dt_train_cfg *)base)->model.precision]);
}

/* Bytes, or with K, M, G, T (powers of 1024): 16G, 512M, 1.5G. */
static dt_status max_memory_parse(void *base, const char *flag, const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    const char *units = "KMGT", *u = *end ? strchr(units, *end) : NULL;
    if (u && *u) v *= pow(1024.0, (double)(u - units + 1)), end++;
    if (errno || end == s || *end || !(v >= 0 && v <= 0x1p60))
        return dt_errorf(DT_ERR_INVALID, "%s expects bytes, or a number with K, M, G or T (powers of 1024) like 16G or "
                         "512M, got '%s'", flag, s);
    ((dt_train_cfg *)base)->max_memory = floor(v);
    return DT_OK;
}
static void max_memory_format(const void *base, char *buf, size_t n) {
    snprintf(buf, n, "%.0f", ((const dt_train_cfg *)base)->max_memory);
}

static dt_status balance_parse(void *base, const char *flag, const char *s) {
    return two_words_parse(&((dt_train_cfg *)base)->balance_dynamic, flag, s, "static", false, "dynamic");
}
static void balance_format(const void *base, char *buf, size_t n) {
    snprintf(buf, n, "%s", ((const dt_train_cfg *)base)->balance_dynamic ? "dynamic" : "static");
}

static dt_status allreduce_parse(void *base, const char *flag, const char *s) {
    if (dt_algo_parse(s, &((dt_train_cfg *)base)->dp.algo))
        return dt_errorf(DT_ERR_INVALID, "%s must be ring, rhd, rd, shm, hier, native or auto, got '%s'", flag, s);
    return DT_OK;
}
static void allreduce_format(const void *base, char *buf, size_t n) {
    snprintf(buf, n, "%s", dt_algo_name(((const dt_train_cfg *)base)->dp.algo));
}

/* MiB as a double, so the bytes read back exactly from their saved MiB. */
static dt_status bucket_mb_parse(void *base, const char *flag, const char *s) {
    char *end;
    errno = 0;
    double mb = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(mb)) return dt_errorf(DT_ERR_INVALID, "%s expects a number, got '%s'", flag, s);
    if (mb < 1e-5 || mb > 4096) return dt_errorf(DT_ERR_INVALID, "%s %g is out of range [%g, %g]", flag, mb, 1e-5, 4096.0);
    ((dt_train_cfg *)base)->dp.bucket_bytes = (size_t)(mb * 1048576.0);
    return DT_OK;
}
static void bucket_mb_format(const void *base, char *buf, size_t n) {
    fl_format_real((double)((const dt_train_cfg *)base)->dp.bucket_bytes / 1048576.0, false, buf, n);
}

static dt_status compress_parse(void *base, const char *flag, const char *s) {
    return dt_comp_parse(s, &((dt_train_cfg *)base)->dp.comp.comp);
}
static void compress_format(const void *base, char *buf, size_t n) {
    const dt_comp_cfg *c = &((const dt_train_cfg *)base)->dp.comp.comp;
    char r[40];
    fl_format_real(c->ratio, true, r, sizeof r);
    if (c->kind == DT_COMP_TOPK) snprintf(buf, n, "topk:%s%s", r, c->fp16_values ? ":fp16" : "");
    else dt_comp_name(c, buf, n);
}

static dt_status diverge_parse(void *base, const char *flag, const char *s) {
    (void)flag;
    return dt_diverge_parse(s, &((dt_train_cfg *)base)->diverge);
}

static void diverge_format(const void *base, char *buf, size_t n) {
    const dt_diverge_cfg *d = &((const dt_train_cfg *)base)->diverge;
    if (d->mode == DT_DIVERGE_REWIND) snprintf(buf, n, "rewind:%lld:%lld", (long long)d->back, (long long)d->skip);
    else snprintf(buf, n, "%s", d->mode == DT_DIVERGE_SKIP ? "skip" : "stop");
}

/* --skip-batches S:N[,S:N...]; a repeated flag adds ranges. */
static dt_status skips_parse(void *base, const char *flag, const char *s) {
    dt_train_cfg *c = base;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long long at = strtoll(p, &end, 10), cnt = 0;
        bool ok = !errno && end != p && at >= 1 && *end == ':';
        if (ok) {
            const char *q = end + 1;
            cnt = strtoll(q, &end, 10);
            ok = !errno && end != q && cnt >= 0 && cnt <= 1000000000LL && (*end == ',' || !*end);
        }
        if (!ok) return dt_errorf(DT_ERR_INVALID, "%s '%s': expected STEP:COUNT[,STEP:COUNT...] (STEP >= 1, COUNT >= 0)", flag, s);
        if (c->n_skips == DT_MAX_SKIPS) return dt_errorf(DT_ERR_INVALID, "%s: at most %d ranges", flag, DT_MAX_SKIPS);
        c->skips[c->n_skips++] = (dt_skip_range){at, cnt};
        p = *end ? end + 1 : end;
    }
    return DT_OK;
}

static void skips_format(const void *base, char *buf, size_t n) {
    const dt_train_cfg *c = base;
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n_skips && k < n; i++) {
        int w = snprintf(buf + k, n - k, "%s%lld:%lld", i ? "," : "", (long long)c->skips[i].step, (long long)c->skips[i].count);
        if (w < 0) return;
        k += (size_t)w;
    }
}

static dt_status inject_parse(void *base, const char *flag, const char *s) {
    dt_train_cfg *c = base;
    if (c->n_inject == (int)(sizeof c->inject / sizeof c->inject[0]))
        return dt_errorf(DT_ERR_INVALID, "at most 8 --inject flags");
    dt_status st = dt_inject_parse(s, &c->inject[c->n_inject]);
    if (!st) c->n_inject++;
    return st;
}
/* A repeated flag: the specs separated by spaces (they hold none). */
static void inject_format_all(const void *base, char *buf, size_t n) {
    const dt_train_cfg *c = base;
    buf[0] = '\0';
    for (int i = 0; i < c->n_inject; i++) {
        size_t k = strlen(buf);
        if (k + 2 >= n) return;
        if (i) buf[k++] = ' ';
        inject_format(&c->inject[i], buf + k, n - k);
    }
}

/* ---- the table ------------------------------------------------------------
 * One entry per flag; its default is whatever dt_train_cfg_default() and
 * dt_train_cfg_set_optim() leave in the field (help reads them from there). */

#define OFF(field) offsetof(dt_train_cfg, field)
#define TR DT_FLAG_TRAIN
#define EV DT_FLAG_EVAL
#define NUM(nm, typ, fld, lo_, hi_, at, sec, a, h) \
    {.name = nm, .type = typ, .off = OFF(fld), .lo = lo_, .hi = hi_, .attr = at, .section = sec, .arg = a, .help = h}
#define INT(nm, typ, fld, lo_, hi_, at, sec, a, h) \
    {.name = nm, .type = typ, .off = OFF(fld), .ilo = lo_, .ihi = hi_, .attr = at, .section = sec, .arg = a, .help = h}
#define SW(nm, fld, neg, sec, h) \
    {.name = nm, .type = DT_FLAG_SWITCH, .off = OFF(fld), .negate = neg, .attr = TR, .section = sec, .help = h}
#define STR(nm, fld, at, sec, a, h, dflt) \
    {.name = nm, .type = DT_FLAG_STRING, .off = OFF(fld), .attr = at, .section = sec, .arg = a, .help = h, .default_text = dflt}
#define CH(nm, fn, fld, at, sec, a, h) \
    {.name = nm, .type = DT_FLAG_CHOICE, .off = OFF(fld), .attr = at, .parse = fn##_parse, .format = fn##_format, \
     .section = sec, .arg = a, .help = h}

static const char S_DATA[] = "data and length", S_OPT[] = "optimizer", S_MODEL[] = "model", S_RUN[] = "run",
                  S_PAR[] = "parallel", S_CONS[] = "consistency, robustness, heterogeneity (plain data parallelism)",
                  S_FT[] = "fault tolerance";

static const dt_flag train_flags[] = {
    STR("data", data, TR | EV, S_DATA, "PATH", "a folder of IDX files (Fashion-MNIST's four, .gz or not), a folder with "
        "x.npy and y.npy, a .npz, a .csv; language models: llm.c .bin token shards (a file or folder) or a text file or folder",
        "/usr/share/datasets/fashion-mnist; gpt /usr/share/games/fortunes"),
    STR("target", target, TR | EV, S_DATA, "COLUMN", "CSV data: the column to predict (a float: regression); the others are inputs",
        NULL),
    CH("prefetch", prefetch, prefetch, TR, S_DATA, "on|off", "gather the next batch in a background thread while the step computes"),
    INT("epochs", DT_FLAG_I64, epochs, 1, 100000, TR, S_DATA, "E", "passes over the training set"),
    INT("steps", DT_FLAG_I64, steps, 0, INT64_MAX / 2, TR, S_DATA, "N", "optimizer steps (overrides --epochs; 0: from --epochs)"),
    INT("batch", DT_FLAG_INT, batch, 1, 1 << 20, TR, S_DATA, "B", "global batch: images, or sequences for the gpt"),
    NUM("val-frac", DT_FLAG_DOUBLE, val_frac, 1e-6, 0.999, TR | EV, S_DATA, "F", "held-out tail: of a corpus, or of tensor data without its own test split"),
    CH("optim", optim, optim.kind, TR, S_OPT, "sgd|adamw", "the optimizer; switching it resets lr, momentum, "
       "weight decay and betas to its defaults"),
    NUM("lr", DT_FLAG_FLOAT, lr, 1e-12, 100, TR, S_OPT, "LR", "peak learning rate"),
    NUM("min-lr", DT_FLAG_FLOAT, min_lr, 0, 100, TR, S_OPT, "LR", "end of the cosine decay"),
    INT("warmup", DT_FLAG_I64, warmup, 0, INT64_MAX / 2, TR, S_OPT, "N", "linear warm-up steps"),
    CH("lr-schedule", lr_schedule, cosine, TR, S_OPT, "cosine|constant", "after warm-up"),
    NUM("momentum", DT_FLAG_FLOAT, optim.momentum, 0, 0.999999, TR, S_OPT, "M", "sgd momentum"),
    SW("nesterov", optim.nesterov, false, S_OPT, "sgd Nesterov momentum"),
    NUM("weight-decay", DT_FLAG_FLOAT, optim.weight_decay, 0, 10, TR, S_OPT, "WD",
        "sgd L2 / adamw decoupled, on >=2-D tensors only"),
    NUM("beta1", DT_FLAG_FLOAT, optim.beta1, 0, 0.999999, TR, S_OPT, "B1", "adamw"),
    NUM("beta2", DT_FLAG_FLOAT, optim.beta2, 0, 0.999999999, TR, S_OPT, "B2", "adamw"),
    NUM("eps", DT_FLAG_FLOAT, optim.eps, 1e-30, 1, TR, S_OPT, "E", "adamw"),
    NUM("clip", DT_FLAG_FLOAT, clip, 0, 1e9, TR, S_OPT, "NORM", "global gradient-norm clipping, 0 = off"),
    CH("model", model, model.kind, TR | EV, S_MODEL, "mlp|cnn|gpt|NAME|FILE.json", "the model: built in, a shipped description (models/NAME.json) or your own (docs/MODELS.md); it decides the other defaults"),
    CH("hidden", hidden, model.hidden, TR, S_MODEL, "H1,H2,...", "mlp hidden sizes ('none': a linear model)"),
    CH("precision", precision, model.precision, TR, S_MODEL, "fp32|bf16|bf16-emulated|fp16", "bf16: every GEMM and "
       "convolution multiplies its operands rounded to bf16 and sums in fp32 (PyTorch's bf16 autocast); weights, "
       "gradients and optimizer state stay fp32; products use AVX512-BF16 where the CPU has it, bf16-emulated never; "
       "fp16: operands rounded to IEEE half (emulated) with dynamic loss scaling (docs/PRECISION.md)"),
    NUM("loss-scale", DT_FLAG_FLOAT, loss_scale, 1, 0x1p64, TR, S_MODEL, "S", "fp16: the first loss scale (the fixed "
        "one with --loss-scale-window 0); halved when a step's gradient overflows (the step is dropped)"),
    INT("loss-scale-window", DT_FLAG_I64, loss_scale_window, 0, INT64_MAX / 2, TR, S_MODEL, "N", "fp16: clean steps "
        "before the loss scale doubles; 0: a static scale"),
    CH("set", set, model.set, TR | EV, S_MODEL, "NAME=V,...", "the model description's variables (a list: V1:V2:...), docs/MODELS.md"),
    INT("n-layer", DT_FLAG_INT, model.n_layer, 1, 256, TR, S_MODEL, "L", "gpt transformer blocks"),
    INT("n-head", DT_FLAG_INT, model.n_head, 1, 256, TR, S_MODEL, "H", "gpt attention heads"),
    INT("n-embd", DT_FLAG_INT, model.n_embd, 1, 16384, TR, S_MODEL, "C", "gpt embedding width"),
    INT("block-size", DT_FLAG_INT, model.block_size, 1, 8192, TR, S_MODEL, "T", "gpt context length"),
    STR("init", init, TR, S_MODEL, "FILE", "start from these weights (safetensors)", NULL),
    INT("seed", DT_FLAG_U64, seed, 0, INT64_MAX, TR, S_RUN, "S", "seed of every random choice"),
    {.name = "out", .type = DT_FLAG_STRING, .off = OFF(out_dir), .attr = TR | DT_FLAG_NOSAVE, .section = S_RUN,
     .arg = "DIR", .help = "write DIR/model.safetensors, DIR/metrics.jsonl and DIR/config.json"},
    INT("eval-every", DT_FLAG_I64, eval_every, 0, INT64_MAX / 2, TR, S_RUN, "K", "evaluate every K steps (always at the end)"),
    INT("eval-max", DT_FLAG_INT, eval_max, 0, INT_MAX, TR | EV, S_RUN, "N", "gpt: validation windows per evaluation, 0 = all"),
    INT("log-every", DT_FLAG_I64, log_every, 1, INT64_MAX / 2, TR, S_RUN, "K", "steps per metrics line"),
    SW("quiet", quiet, false, S_RUN, "no progress output"),
    {.name = "trace", .type = DT_FLAG_STRING, .off = OFF(trace), .attr = TR | DT_FLAG_NOSAVE, .section = S_RUN,
     .arg = "FILE", .help = "Chrome trace timeline of every rank (open in ui.perfetto.dev)"},
    INT("zero", DT_FLAG_INT, dp.zero, 0, 3, TR, S_PAR, "0|1|2|3", "ZeRO: 1 shards optimizer state, 2 also gradients, "
        "3 also parameters (gathered around each bucket's use)"),
    SW("zero3-keep", dp.zero3_keep, false, S_PAR, "ZeRO-3: keep forward's gathered parameters until backward (one gather "
       "a micro-batch instead of two, more memory)"),
    CH("max-memory", max_memory, max_memory, TR, S_PAR, "BYTES", "refuse a layout whose dtrain-counted memory per rank "
       "(parameters, gradients, optimizer state, activations, buffers) exceeds this at setup, naming what would fit; "
       "16G, 512M (0: no limit)"),
    CH("allreduce", allreduce, dp.algo, TR, S_PAR, "ring|rhd|rd|shm|hier|native|auto", "collective algorithm"),
    CH("bucket-mb", bucket_mb, dp.bucket_bytes, TR, S_PAR, "MB", "gradient bucket size"),
    SW("no-overlap", dp.overlap, true, S_PAR, "communicate after backward instead of during it"),
    CH("compress", compress, dp.comp.comp, TR, S_PAR, "none|fp16|bf16|int8|topk:RATIO[:fp16]|sign|powersgd:RANK",
       "gradient compression of the data-parallel collectives and parameter-server pushes"),
    CH("error-feedback", error_feedback, dp.comp.error_feedback, TR, S_PAR, "on|off",
       "keep what compression left out for the next step (auto: on for int8, topk, sign, powersgd; off for fp16, bf16)"),
    INT("compress-warmup", DT_FLAG_I64, dp.comp.warmup, 0, INT64_MAX / 2, TR, S_PAR, "N", "first N steps uncompressed"),
    INT("accum", DT_FLAG_INT, accum, 1, 1 << 20, TR, S_PAR, "K", "micro-batches per step, no sync in between"),
    INT("tp", DT_FLAG_INT, tp, 1, 256, TR, S_PAR, "T", "tensor (Megatron) parallel group size: mlp and gpt"),
    SW("sequence-parallel", model.seq_parallel, false, S_PAR, "with --tp: layer norms, dropout and residuals of the "
       "tensor-parallel blocks on 1/T of the sequence each (all-gather and reduce-scatter replace the all-reduces; "
       "their activations divided by T)"),
    INT("pp", DT_FLAG_INT, pp, 1, 256, TR, S_PAR, "P", "pipeline stages; the world is dp x pp x tp, dp = N/(P*T)"),
    INT("micro-batches", DT_FLAG_INT, pipe.micro_batches, 1, 1 << 16, TR, S_PAR, "M", "micro-batches per step through the pipeline"),
    CH("schedule", schedule, pipe.schedule, TR, S_PAR, "gpipe|1f1b|interleaved", "pipeline schedule"),
    INT("virtual-stages", DT_FLAG_INT, pipe.virtual_stages, 1, DT_PIPE_MAX_VIRTUAL, TR, S_PAR, "V",
        "interleaved schedule: chunks of blocks per stage (stage s holds chunks s, s+P, ...)"),
    STR("pp-partition", pp_partition, TR, S_PAR, "auto|uniform|N1,N2,...",
        "blocks per stage; auto balances measured block times", "uniform"),
    SW("recompute", pipe.recompute, false, S_PAR, "keep only block inputs, recompute activations in backward"),
    NUM("pp-stage-cost-us", DT_FLAG_DOUBLE, pipe.stage_cost_us, 0, 1e7, TR, S_PAR, "U",
        "testing: each stage also sleeps U us per micro-batch forward, 2U backward"),
    NUM("timeout", DT_FLAG_DOUBLE, timeout, 0.01, 1e6, TR, S_PAR, "SEC", "deadline of every communication wait; under "
        "--strategy ps with asp or ssp:K also how long a worker may be silent before it is dropped"),
    {.name = "inject", .type = DT_FLAG_CHOICE, .off = OFF(inject), .attr = TR | DT_FLAG_MULTI, .parse = inject_parse,
     .format = inject_format_all, .section = S_PAR, .arg = "SPEC",
     .help = "fault injection: crash:rank=R:step=S, hang:rank=R:step=S, slow:rank=R:factor=F, "
             "byzantine:rank=R:mode=signflip|random|scale:X|alie[:Z] (a little is enough: mean - Z std of the "
             "honest gradients, Z by default the paper's for the worker count; on the parameter server with "
             "--consistency bsp), overflow:rank=R:step=S (--precision fp16: that gradient turns inf); crash, hang "
             "and slow fire in the first attempt only, byzantine in every attempt"},
    CH("strategy", strategy, strategy, TR, S_CONS, "sync|localsgd:H|hogwild|ps", "local SGD: independent steps, "
       "parameters averaged every H; hogwild: --threads T threads share one model, no locks; ps: parameter server "
       "(--servers, --consistency)"),
    INT("servers", DT_FLAG_INT, ps.servers, 1, 1024, TR, S_CONS, "S", "parameter server: the last S ranks hold key "
        "ranges and the optimizer; workers push and pull"),
    CH("consistency", consistency, ps.mode, TR, S_CONS, "bsp|asp|ssp:K", "parameter server; asp and ssp:K go on "
       "without a worker that dies (worker 0 excepted)"),
    SW("staleness-lr", ps.staleness_lr, false, S_CONS, "parameter server, asp and ssp:K: scale each push's step by "
       "1/(1 + its staleness in rounds of W pushes)"),
    STR("join", join_dir, TR, S_CONS, "OUT", "join the running elastic job whose --out is OUT as one more worker "
        "(its flags come from OUT/join.json; flags given here, such as --threads or --timeout, come after them)", NULL),
    INT("elastic", DT_FLAG_INT, ps.max_workers, 0, 1024, TR, S_CONS, "MAX", "parameter server, asp and ssp:K: "
        "workers may join the running job (dtrain train --join OUT) and leave it (touch OUT/leave.K, or a signal to "
        "a joined one), up to MAX workers over the run (0: off)"),
    NUM("dc-asgd", DT_FLAG_FLOAT, ps.dc_lambda, 0, 1e6, TR, S_CONS, "LAMBDA", "parameter server, asp and ssp:K: "
        "delay-compensated ASGD, each push's gradient g += LAMBDA g g (w_now - w_read) (0: off)"),
    CH("aggregate", aggregate, agg, TR, S_CONS, "mean|median|trimmed:B|krum:F[:M]|cclip[:TAU]", "gather every "
       "worker's gradient and aggregate robustly (median: f < n/2; trimmed: f <= B, n > 2B; krum: n >= 2F+3; cclip: "
       "centred clipping around the last aggregate, radius TAU or the median distance, f < n/2, data parallelism only)"),
    CH("pre-aggregate", pre_aggregate, agg.nnm, TR, S_CONS, "none|nnm[:F]", "with a robust --aggregate: first "
       "replace every worker's vector by the mean of its n-F nearest (nearest-neighbour mixing; F: the bad workers "
       "planned for, by default what the rule tolerates)"),
    CH("worker-momentum", worker_momentum, worker_momentum, TR, S_CONS, "auto|on|off", "with --aggregate and SGD "
       "momentum: every worker keeps its own momentum and sends that, the aggregate is applied as plain SGD "
       "(auto: on for median, trimmed, krum and cclip)"),
    CH("balance", balance, balance_dynamic, TR, S_CONS, "static|dynamic", "dynamic: split each global batch by "
       "measured worker speed"),
    {.name = "on-divergence", .type = DT_FLAG_CHOICE, .off = OFF(diverge), .attr = TR, .parse = diverge_parse,
     .format = diverge_format, .section = S_FT, .arg = "stop|skip|rewind[:K[:SKIP]]",
     .help = "a loss spike (inf/NaN, or --spike-z deviations above the recent mean): stop the run; skip drops the "
             "step's update; rewind goes back to the newest checkpoint at least K steps before it (100) and skips SKIP "
             "batches from there (200)", .default_text = "stop"},
    {.name = "spike-z", .type = DT_FLAG_FLOAT, .off = OFF(diverge.z), .lo = 0, .hi = 1e6, .attr = TR, .section = S_FT,
     .arg = "Z", .help = "a finite loss more than Z standard deviations above the mean of the last --spike-window "
     "steps is a spike", .default_text = "6 under skip and rewind; off under stop"},
    INT("spike-window", DT_FLAG_INT, diverge.window, 2, 100000, TR, S_FT, "W", "steps the spike test's mean is over"),
    INT("max-rewinds", DT_FLAG_INT, diverge.max_rewinds, 0, 1000000, TR, S_FT, "N", "skips plus rewinds before the "
        "run gives up with one line"),
    {.name = "skip-batches", .type = DT_FLAG_CHOICE, .off = OFF(skips), .attr = TR | DT_FLAG_MULTI, .parse = skips_parse,
     .format = skips_format, .section = S_FT, .arg = "S:N[,S:N]",
     .help = "pass over N global batches just before step S draws its own (what a rewind does)"},
    {.name = "ckpt-dir", .type = DT_FLAG_STRING, .off = OFF(ckpt_dir), .attr = TR | DT_FLAG_NOSAVE, .section = S_FT,
     .arg = "DIR", .help = "write checkpoints under DIR"},
    {.name = "ckpt-every", .type = DT_FLAG_I64, .off = OFF(ckpt_every), .ilo = 0, .ihi = INT64_MAX / 2,
     .attr = TR | DT_FLAG_NOSAVE, .section = S_FT, .arg = "N", .help = "checkpoint every N steps (and at the end)",
     .default_text = "0: at the end only"},
    {.name = "ckpt-replicas", .type = DT_FLAG_INT, .off = OFF(ckpt_replicas), .ilo = 0, .ihi = 7,
     .attr = TR, .section = S_FT, .arg = "R", .help = "when --ckpt-dir is each host's own disk: keep every file on R other hosts too"},
    {.name = "ckpt-keep", .type = DT_FLAG_INT, .off = OFF(ckpt_keep), .ilo = 0, .ihi = 1000000,
     .attr = TR | DT_FLAG_NOSAVE, .section = S_FT, .arg = "K", .help = "complete checkpoints to keep, 0 = all"},
    {.name = "resume", .type = DT_FLAG_STRING, .off = OFF(resume), .attr = TR | DT_FLAG_NOSAVE, .section = S_FT,
     .arg = "auto|PATH", .help = "auto: the newest valid checkpoint in --ckpt-dir (none: start fresh)"},
};

const dt_flag *dt_train_flags(int *n) {
    *n = (int)(sizeof train_flags / sizeof train_flags[0]);
    return train_flags;
}
