/* A cluster description (plan.h, docs/PLANNING.md):
 *   {"hosts": 2, "ranks_per_host": 2, "gflops": 60, "memory_gb": 12,
 *    "local": {"latency_us": 2, "bandwidth_gbit": 40},
 *    "cross": {"latency_us": 50, "bandwidth_gbit": 1, "measured": [[4096, 0.9], [1048576, 0.5]],
 *              "burst_kb": 250},
 *    "optim_ns_per_param": 1, "cores": 2, "gamma_ns_per_byte": 0.14, "micro_overhead_us": 1300,
 *    "speed": [1, 0.5]}
 * Bandwidths in Gbit/s, as links are sold; optional: "speed" one factor per
 * host on its ranks' FLOP/s, "cores" per host (ranks beyond it share them),
 * "shared_cores" the cores all hosts' ranks share (hosts emulated on one
 * machine; absent: each host has its "cores"),
 * "gamma_ns_per_byte" the cost of summing a byte in a reduction,
 * "base_mb" what a rank holds besides dtrain's own allocations (the runtime and
 * the data) and "mpi_mb" what MPI adds to a rank of a world of more than one
 * (dt_plan_calibrate_base; 0 when absent),
 * "staging_ns_per_byte" what a step pays per byte of released pages written
 * again (ZeRO-2/3; the profile's),
 * "micro_overhead_us" the fixed forward + backward time of a micro-batch of the
 * whole model (the t0 of dt_plan_profile), "codec_ns_per_float" {"int8": [encode,
 * decode], ...} per codec (absent ones: codec_default's figures, measured on an
 * AVX2 EPYC); "cross"."measured" the link's rate by message size,
 * [bytes, Gbit/s] pairs by ascending size (dt_plan_cross_beta); "cross"."burst_kb"
 * what the link passes at once after idling (a shaper's bucket, 0 when absent);
 * "step" {"flops_per_sample": F, "measured_ms": [[rows, ms], ...]} the
 * profile's forward + backward of the whole model (of F FLOPs per sample) at
 * each size it timed, rows ascending (dt_plan_micro_time; absent: the fixed
 * part and the rate). */
#include "dtrain/plan.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static dt_status num(const char *path, const json_t *o, const char *key, double lo, double hi, double def,
                     double *out) {
    const json_t *v = json_object_get(o, key);
    if (!v && def >= 0) {
        *out = def;
        return DT_OK;
    }
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi)
        return dt_errorf(DT_ERR_INVALID, "%s: \"%s\" must be a number in [%g, %g]", path, key, lo, hi);
    *out = json_number_value(v);
    return DT_OK;
}

/* Encode and decode ns per value of the codecs when a description has none:
 * dt_plan_profile's figures on an AMD EPYC (AVX2), rounded. */
static const struct {
    const char *name;
    dt_comp_kind kind;
    double enc, dec;
} codec_default[] = {{"fp16", DT_COMP_FP16, 0.5, 0.5}, {"bf16", DT_COMP_BF16, 0.5, 0.5},
                     {"int8", DT_COMP_INT8, 3, 1}, {"topk", DT_COMP_TOPK, 6, 0.2}, {"sign", DT_COMP_SIGN, 2, 1}};

static dt_status codecs(const char *path, const json_t *o, dt_plan_cluster *c) {
    const json_t *cs = json_object_get(o, "codec_ns_per_float");
    if (cs && !json_is_object(cs)) return dt_errorf(DT_ERR_INVALID, "%s: \"codec_ns_per_float\" must be an object", path);
    for (size_t k = 0; k < sizeof codec_default / sizeof codec_default[0]; k++) {
        const json_t *v = json_object_get(cs, codec_default[k].name);
        double enc = codec_default[k].enc, dec = codec_default[k].dec;
        if (v && json_unpack((json_t *)v, "[FF]", &enc, &dec))
            return dt_errorf(DT_ERR_INVALID, "%s: codec_ns_per_float.%s must be [encode, decode]", path,
                             codec_default[k].name);
        if (!(enc >= 0 && dec >= 0 && enc < 1e6 && dec < 1e6))
            return dt_errorf(DT_ERR_INVALID, "%s: codec_ns_per_float.%s must be two numbers in [0, 1e6)", path,
                             codec_default[k].name);
        c->codec_enc_s_per_float[codec_default[k].kind] = enc * 1e-9;
        c->codec_dec_s_per_float[codec_default[k].kind] = dec * 1e-9;
    }
    return DT_OK;
}

static dt_status link_cost(const char *path, const json_t *o, const char *key, dt_link_cost *l) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_object(v))
        return dt_errorf(DT_ERR_INVALID, "%s: \"%s\" must be {\"latency_us\": L, \"bandwidth_gbit\": B}", path, key);
    double lat = 0, bw = 1;
    char k1[48], k2[48];
    snprintf(k1, sizeof k1, "%s.latency_us", key);
    snprintf(k2, sizeof k2, "%s.bandwidth_gbit", key);
    dt_status st = num(k1, v, "latency_us", 0, 1e6, -1, &lat);
    if (!st) st = num(k2, v, "bandwidth_gbit", 1e-6, 1e6, -1, &bw);
    if (st) return dt_errorf(DT_ERR_INVALID, "%s: %s", path, dt_error_msg());
    l->alpha = lat * 1e-6;
    l->beta = 8.0 / (bw * 1e9);
    return DT_OK;
}

/* The cross link's curve from v (key `key` of "cross"): [[bytes, rate], ...]
 * by ascending size, rate in Gbit/s (gbit: a description's "measured") or in
 * s/byte (the fit line's "measured_beta"), into c only when all of it is
 * good. Absent: c unchanged. */
static dt_status curve(const char *path, const json_t *v, const char *key, bool gbit, dt_plan_cluster *c) {
    if (!v) return DT_OK;
    const char *unit = gbit ? "[bytes, Gbit/s]" : "[bytes, s/byte]";
    double lo = gbit ? 1e-6 : 1e-15, hi = gbit ? 1e6 : 1e-3, msg[DT_PLAN_MAX_CURVE], beta[DT_PLAN_MAX_CURVE];
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (n < 1 || n > DT_PLAN_MAX_CURVE)
        return dt_errorf(DT_ERR_INVALID, "%s: cross.%s must list 1 to %d %s pairs", path, key, DT_PLAN_MAX_CURVE, unit);
    for (size_t k = 0; k < n; k++) {
        double m = 0, r = 0;
        if (json_unpack(json_array_get(v, k), "[FF]", &m, &r) || !(m >= 1 && r >= lo && r <= hi) ||
            (k && m <= msg[k - 1]))
            return dt_errorf(DT_ERR_INVALID, "%s: cross.%s[%zu] must be %s, the rate in [%g, %g], sizes ascending",
                             path, key, k, unit, lo, hi);
        msg[k] = m;
        beta[k] = gbit ? 8.0 / (r * 1e9) : r;
    }
    memcpy(c->cross_msg, msg, n * sizeof msg[0]);
    memcpy(c->cross_beta, beta, n * sizeof beta[0]);
    c->cross_n = (int)n;
    return DT_OK;
}

/* "step" (see above) into c's step curve when all of it is good; absent: none. */
static dt_status step_curve(const char *path, const json_t *v, dt_plan_cluster *c) {
    c->step_n = 0;
    if (!v) return DT_OK;
    const json_t *pts = json_object_get(v, "measured_ms");
    double f = 0, rows[DT_PLAN_FIT_MAX], t[DT_PLAN_FIT_MAX];
    size_t n = json_is_array(pts) ? json_array_size(pts) : 0;
    if (num("step", v, "flops_per_sample", 1, 1e30, -1, &f))
        return dt_errorf(DT_ERR_INVALID, "%s: %s", path, dt_error_msg());
    if (n < 1 || n > DT_PLAN_FIT_MAX)
        return dt_errorf(DT_ERR_INVALID, "%s: step.measured_ms must list 1 to %d [rows, ms] pairs", path,
                         DT_PLAN_FIT_MAX);
    for (size_t k = 0; k < n; k++) {
        if (json_unpack(json_array_get(pts, k), "[FF]", &rows[k], &t[k]) || !(rows[k] >= 1 && rows[k] <= 1e9) ||
            !(t[k] > 0 && t[k] < 1e9) || (k && rows[k] <= rows[k - 1]))
            return dt_errorf(DT_ERR_INVALID, "%s: step.measured_ms[%zu] must be [rows, ms], rows ascending, ms > 0",
                             path, k);
        t[k] *= 1e-3;
    }
    memcpy(c->step_rows, rows, n * sizeof rows[0]);
    memcpy(c->step_time, t, n * sizeof t[0]);
    c->step_flops = f;
    c->step_n = (int)n;
    return DT_OK;
}

bool dt_plan_step_sizes_apply(const dt_plan_cluster *c, double total) {
    return c->step_n > 0 && fabs(c->step_flops - total) <= 0.005 * total;
}

double dt_plan_micro_time(const dt_plan_cluster *c, double total, double rows) {
    double rate = c->flops > 0 ? total / c->flops : 0, fixed = c->micro_overhead_s; /* s per row; s */
    int n = c->step_n;
    if (!dt_plan_step_sizes_apply(c, total)) return fixed + rows * rate;
    const double *x = c->step_rows, *t = c->step_time;
    if (rows <= x[0]) return fmax(t[0] - (x[0] - rows) * rate, fixed);
    if (rows >= x[n - 1]) return t[n - 1] + (rows - x[n - 1]) * rate;
    int k = 1;
    while (x[k] < rows) k++;
    return t[k - 1] + (rows - x[k - 1]) / (x[k] - x[k - 1]) * (t[k] - t[k - 1]);
}

double dt_plan_cross_beta(const dt_plan_cluster *c, double bytes) {
    int n = c->cross_n;
    if (n < 1) return c->links.cross.beta;
    if (bytes <= c->cross_msg[0]) return c->cross_beta[0];
    if (bytes >= c->cross_msg[n - 1]) return c->cross_beta[n - 1];
    int k = 1;
    while (c->cross_msg[k] < bytes) k++;
    double f = log(bytes / c->cross_msg[k - 1]) / log(c->cross_msg[k] / c->cross_msg[k - 1]);
    return c->cross_beta[k - 1] + f * (c->cross_beta[k] - c->cross_beta[k - 1]);
}

int dt_plan_ranks_sharing(const dt_plan_cluster *c, int *cores) {
    *cores = c->shared_cores > 0 ? c->shared_cores : c->cores;
    return c->shared_cores > 0 ? c->hosts * c->per_host : c->per_host;
}

dt_status dt_plan_fit_read(const char *path, dt_plan_cluster *c) {
    json_error_t err;
    json_t *o = json_load_file(path, 0, &err);
    double la, lb, ca, cb, g;
    c->cross_n = 0;
    if (!o && err.line < 1) return dt_errorf(DT_ERR_IO, "%s: %s", path, err.text);
    dt_status st = DT_OK;
    if (!o || json_unpack(o, "{s:{s:F,s:F},s:{s:F,s:F},s:F}", "local", "alpha", &la, "beta", &lb, "cross", "alpha", &ca,
                          "beta", &cb, "gamma", &g))
        st = dt_errorf(DT_ERR_FORMAT, "%s: not the JSON line of 'dtrain bench allreduce --fit'", path);
    const char *key = "measured_beta";
    if (!st && cb > 0) st = curve(path, json_object_get(json_object_get(o, "cross"), key), key, false, c);
    double burst = 0;
    if (!st && cb > 0) st = num(path, json_object_get(o, "cross"), "burst_bytes", 0, 1e12, 0, &burst);
    if (!st) {
        c->cross_burst = burst;
        c->links.local = (dt_link_cost){la, lb};
        c->links.cross = cb > 0 ? (dt_link_cost){ca, cb} : c->links.local;
        c->links.gamma = g;
    }
    json_decref(o);
    return st;
}

dt_status dt_plan_cluster_read(const char *path, dt_plan_cluster *c) {
    memset(c, 0, sizeof *c);
    json_error_t err;
    json_t *o = json_load_file(path, 0, &err);
    if (!o && err.line < 1) return dt_errorf(DT_ERR_IO, "%s: %s", path, err.text);
    if (!o) return dt_errorf(DT_ERR_FORMAT, "%s: not a cluster description: %s (line %d)", path, err.text, err.line);
    double hosts = 0, per = 0, gf = 0, gb = 0, ons = 0;
    dt_status st = num(path, o, "hosts", 1, DT_PLAN_MAX_HOSTS, -1, &hosts);
    if (!st) st = num(path, o, "ranks_per_host", 1, 4096, -1, &per);
    if (!st) st = num(path, o, "gflops", 1e-3, 1e9, -1, &gf);
    if (!st) st = num(path, o, "memory_gb", 1e-3, 1e9, -1, &gb);
    if (!st) st = num(path, o, "optim_ns_per_param", 0, 1e6, 1.0, &ons);
    double cores = 0, gamma = 0, t0 = 0, base = 0, mpi = 0, shared = 0, stage = 0;
    if (!st) st = num(path, o, "cores", 1, 1 << 20, 0, &cores);
    if (!st) st = num(path, o, "shared_cores", 1, 1 << 20, 0, &shared);
    if (!st) st = num(path, o, "base_mb", 0, 1e9, 0, &base);
    if (!st) st = num(path, o, "mpi_mb", 0, 1e9, 0, &mpi);
    if (!st) st = num(path, o, "micro_overhead_us", 0, 1e9, 0, &t0);
    if (!st) st = num(path, o, "gamma_ns_per_byte", 0, 1e6, 0, &gamma);
    if (!st) st = num(path, o, "staging_ns_per_byte", 0, 1e6, 0, &stage);
    if (!st) st = link_cost(path, o, "local", &c->links.local);
    if (!st) st = codecs(path, o, c);
    if (!st) st = link_cost(path, o, "cross", &c->links.cross);
    if (!st) st = curve(path, json_object_get(json_object_get(o, "cross"), "measured"), "measured", true, c);
    double burst = 0;
    if (!st && num("cross.burst_kb", json_object_get(o, "cross"), "burst_kb", 0, 1e9, 0, &burst))
        st = dt_errorf(DT_ERR_INVALID, "%s: %s", path, dt_error_msg());
    c->cross_burst = burst * 1e3;
    if (!st) st = step_curve(path, json_object_get(o, "step"), c);
    if (!st && (hosts != (int)hosts || per != (int)per))
        st = dt_errorf(DT_ERR_INVALID, "%s: \"hosts\" and \"ranks_per_host\" must be integers", path);
    if (!st) {
        c->hosts = (int)hosts;
        c->per_host = (int)per;
        c->flops = gf * 1e9;
        c->memory = gb * 1e9;
        c->base = base * 1e6;
        c->mpi_base = mpi * 1e6;
        c->optim_s_per_param = ons * 1e-9;
        c->cores = cores > 0 ? (int)cores : c->per_host;
        c->shared_cores = (int)shared;
        c->links.gamma = gamma * 1e-9;
        c->micro_overhead_s = t0 * 1e-6;
        c->staging_s_per_byte = stage * 1e-9;
        for (int h = 0; h < c->hosts; h++) c->speed[h] = 1.0;
    }
    const json_t *sp = json_object_get(o, "speed");
    if (!st && sp) {
        if (!json_is_array(sp) || (int)json_array_size(sp) != c->hosts)
            st = dt_errorf(DT_ERR_INVALID, "%s: \"speed\" must list one factor per host (%d)", path, c->hosts);
        for (int h = 0; !st && h < c->hosts; h++) {
            const json_t *v = json_array_get(sp, (size_t)h);
            if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1e3)
                st = dt_errorf(DT_ERR_INVALID, "%s: speed[%d] must be a positive number", path, h);
            else c->speed[h] = json_number_value(v);
        }
    }
    json_decref(o);
    return st;
}

dt_status dt_plan_cluster_write(const char *path, const dt_plan_cluster *c) {
    json_t *sp = json_array();
    for (int h = 0; h < c->hosts; h++) json_array_append_new(sp, json_real(c->speed[h]));
    json_t *o = json_pack("{s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:{s:f,s:f},s:{s:f,s:f},s:o}", "hosts", c->hosts, "ranks_per_host",
                          c->per_host, "cores", c->cores, "gflops", c->flops / 1e9, "memory_gb", c->memory / 1e9,
                          "optim_ns_per_param", c->optim_s_per_param * 1e9, "gamma_ns_per_byte", c->links.gamma * 1e9,
                          "local", "latency_us", c->links.local.alpha * 1e6, "bandwidth_gbit",
                          c->links.local.beta > 0 ? 8.0 / c->links.local.beta / 1e9 : 1e6, "cross", "latency_us",
                          c->links.cross.alpha * 1e6, "bandwidth_gbit",
                          c->links.cross.beta > 0 ? 8.0 / c->links.cross.beta / 1e9 : 1e6, "speed", sp);
    json_t *cs = json_object();
    for (size_t k = 0; k < sizeof codec_default / sizeof codec_default[0]; k++)
        json_object_set_new(cs, codec_default[k].name, json_pack("[f,f]", c->codec_enc_s_per_float[codec_default[k].kind] * 1e9,
                                                                  c->codec_dec_s_per_float[codec_default[k].kind] * 1e9));
    if (o) json_object_set_new(o, "micro_overhead_us", json_real(c->micro_overhead_s * 1e6));
    if (o) json_object_set_new(o, "staging_ns_per_byte", json_real(c->staging_s_per_byte * 1e9));
    if (o && c->shared_cores > 0) json_object_set_new(o, "shared_cores", json_integer(c->shared_cores));
    if (o) json_object_set_new(o, "base_mb", json_real(c->base / 1e6));
    if (o) json_object_set_new(o, "mpi_mb", json_real(c->mpi_base / 1e6));
    json_t *cr = json_object_get(o, "cross"), *cv = c->cross_n > 0 && cr ? json_array() : NULL;
    for (int k = 0; cv && k < c->cross_n; k++)
        json_array_append_new(cv, json_pack("[f,f]", c->cross_msg[k], 8.0 / c->cross_beta[k] / 1e9));
    if (cv) json_object_set_new(cr, "measured", cv);
    if (cr && c->cross_burst > 0) json_object_set_new(cr, "burst_kb", json_real(c->cross_burst / 1e3));
    json_t *pts = c->step_n > 0 ? json_array() : NULL;
    for (int k = 0; pts && k < c->step_n; k++)
        json_array_append_new(pts, json_pack("[f,f]", c->step_rows[k], c->step_time[k] * 1e3));
    if (o && pts)
        json_object_set_new(o, "step", json_pack("{s:f,s:o}", "flops_per_sample", c->step_flops, "measured_ms", pts));
    else json_decref(pts);
    if (o) json_object_set_new(o, "codec_ns_per_float", cs);
    else json_decref(cs);
    if (!o) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    int rc = json_dump_file(o, path, JSON_INDENT(1));
    json_decref(o);
    return rc ? dt_errorf(DT_ERR_IO, "%s: cannot write the cluster description", path) : DT_OK;
}
