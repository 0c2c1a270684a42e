/* Opening a checkpoint: its manifest parsed and range-checked, every file it
 * lists checked for size, structure and every tensor's crc32c (one pass over
 * all bytes of the checkpoint); the names on disk; the model config of a
 * checkpoint (dt_ckpt_model_cfg). */
#include "ckpt_internal.h"

#include "dtrain/crc32c.h"
#include "dtrain/weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *dt_ckpt_state_name(dt_optim_kind k, int i) {
    if (k == DT_OPTIM_ADAMW) return i == 0 ? "exp_avg" : "exp_avg_sq";
    return "momentum_buffer";
}

void dt_ckpt_dir_name(char *buf, size_t n, const char *dir, int64_t step) {
    snprintf(buf, n, "%s/ckpt-%010lld", dir, (long long)step);
}

void dt_ckpt_rank_file(char *buf, size_t n, const char *cdir, int rank) {
    snprintf(buf, n, "%s/rank-%05d.safetensors", cdir, rank);
}

void dt_ckpt_files_free(dt_ckpt_files *cf) {
    for (int i = 0; i < cf->n; i++) {
        dt_st_close(cf->f[i]);
        dt_free(cf->names[i]);
    }
    dt_free(cf->f);
    dt_free(cf->names);
    memset(cf, 0, sizeof *cf);
}

static dt_status get_int(json_t *o, const char *key, const char *path, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return dt_errorf(DT_ERR_FORMAT, "%s: manifest has no integer '%s'", path, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return dt_errorf(DT_ERR_FORMAT, "%s: manifest '%s' = %lld is out of range", path, key, (long long)x);
    *out = x;
    return DT_OK;
}

/* Verifies one file's tensors against its crc32c metadata. */
static dt_status verify_file(const dt_st_file *f, const char *path) {
    const char *crc_text = dt_st_meta(f, "crc32c");
    if (!crc_text) return dt_errorf(DT_ERR_FORMAT, "%s: no crc32c metadata (not a dtrain checkpoint file?)", path);
    json_t *crcs = json_loads(crc_text, 0, NULL);
    if (!json_is_object(crcs)) {
        json_decref(crcs);
        return dt_errorf(DT_ERR_FORMAT, "%s: crc32c metadata is not a JSON object", path);
    }
    dt_status st = DT_OK;
    for (int i = 0; i < dt_st_count(f) && !st; i++) {
        const dt_st_tensor *t = dt_st_get(f, i);
        const char *want = json_string_value(json_object_get(crcs, t->name));
        if (!want) {
            st = dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s' has no checksum", path, t->name);
            break;
        }
        char got[16];
        snprintf(got, sizeof got, "%08x", dt_crc32c(0, dt_st_data(f, t), t->end - t->begin));
        if (strcmp(got, want) != 0)
            st = dt_errorf(DT_ERR_FORMAT, "%s: tensor '%s' is corrupted (crc32c %s, expected %s)", path, t->name, got, want);
    }
    if (!st && json_object_size(crcs) != (size_t)dt_st_count(f))
        st = dt_errorf(DT_ERR_FORMAT, "%s: checksums listed for tensors that are not in the file", path);
    json_decref(crcs);
    return st;
}

/* Loads CPATH/manifest.json into *man (a JSON object of this format); mpath
 * gets its path, for messages. */
static dt_status load_manifest(const char *cpath, char *mpath, size_t n, json_t **man) {
    *man = NULL;
    snprintf(mpath, n, "%s/" MANIFEST, cpath);
    struct stat sb;
    if (stat(cpath, &sb) != 0) return dt_errorf(DT_ERR_IO, "%s: %s", cpath, strerror(errno));
    if (stat(mpath, &sb) != 0)
        return dt_errorf(DT_ERR_FORMAT, "%s: no manifest.json (the checkpoint was never completed)", cpath);
    json_error_t je;
    json_t *j = json_load_file(mpath, JSON_REJECT_DUPLICATES, &je);
    if (!j) return dt_errorf(DT_ERR_FORMAT, "%s: manifest is not valid JSON (%s, line %d)", mpath, je.text, je.line);
    if (!json_is_object(j)) {
        json_decref(j);
        return dt_errorf(DT_ERR_FORMAT, "%s: manifest is not a JSON object", mpath);
    }
    const char *fmt = json_string_value(json_object_get(j, "format"));
    if (!fmt || strcmp(fmt, DT_CKPT_FORMAT) != 0) {
        dt_status st = dt_errorf(DT_ERR_FORMAT, "%s: format is '%s', expected '%s'", mpath, fmt ? fmt : "(none)", DT_CKPT_FORMAT);
        json_decref(j);
        return st;
    }
    *man = j;
    return DT_OK;
}

/* The integer fields of the state, each range-checked. */
static dt_status parse_counts(json_t *man, const char *mpath, dt_ckpt_state *s) {
    int64_t v = 0;
    dt_status st = DT_OK;
    if ((st = get_int(man, "step", mpath, 0, INT64_MAX / 4, &s->step))) return st;
    if ((st = get_int(man, "epoch", mpath, 0, INT64_MAX / 4, &s->epoch))) return st;
    if ((st = get_int(man, "index", mpath, 0, INT64_MAX / 4, &s->index))) return st;
    if ((st = get_int(man, "seed", mpath, INT64_MIN, INT64_MAX, &v))) return st;
    s->seed = (uint64_t)v;
    if ((st = get_int(man, "optim_t", mpath, 0, INT64_MAX / 4, &s->optim_t))) return st;
    if ((st = get_int(man, "optim_states", mpath, 0, 2, &v))) return st;
    s->n_states = (int)v;
    if ((st = get_int(man, "world", mpath, 1, 1 << 20, &v))) return st;
    s->world = (int)v;
    if ((st = get_int(man, "zero", mpath, 0, 3, &v))) return st;
    s->zero = (int)v;
    if ((st = get_int(man, "batch", mpath, 1, 1 << 20, &v))) return st;
    s->batch = (int)v;
    return DT_OK;
}

/* The loss scaler's state (--precision fp16), when written: {"scale": S in
 * [1, 2^64], "clean": N >= 0}. */
static dt_status parse_scale(json_t *man, const char *mpath, dt_ckpt_state *s) {
    json_t *ls = json_object_get(man, "loss_scale");
    if (!ls) return DT_OK;
    json_t *sc = json_object_get(ls, "scale");
    double v = json_is_number(sc) ? json_number_value(sc) : 0;
    if (!(v >= 1.0 && v <= 0x1p64))
        return dt_errorf(DT_ERR_FORMAT, "%s: manifest 'loss_scale' needs a 'scale' in [1, 2^64]", mpath);
    s->loss_scale = (float)v;
    return get_int(ls, "clean", mpath, 0, INT64_MAX / 4, &s->scale_clean);
}

/* The manifest's training state: counts, optimizer, layout, run config. */
static dt_status parse_state(json_t *man, const char *mpath, dt_ckpt_state *s) {
    memset(s, 0, sizeof *s);
    dt_status st = parse_counts(man, mpath, s);
    if (!st) st = parse_scale(man, mpath, s);
    if (st) return st;
    const char *on = json_string_value(json_object_get(man, "optim"));
    if (!on || (strcmp(on, "sgd") && strcmp(on, "adamw")))
        return dt_errorf(DT_ERR_FORMAT, "%s: manifest 'optim' must be sgd or adamw", mpath);
    s->optim = strcmp(on, "adamw") == 0 ? DT_OPTIM_ADAMW : DT_OPTIM_SGD;
    s->dp = s->world;
    s->pp = s->tp = 1;
    const char *lay = json_string_value(json_object_get(man, "layout"));
    if (lay && sscanf(lay, "dp=%d,pp=%d,tp=%d", &s->dp, &s->pp, &s->tp) != 3)
        return dt_errorf(DT_ERR_FORMAT, "%s: manifest 'layout' = '%s' is malformed", mpath, lay);
    json_t *cfg = json_object_get(man, "config");
    if (cfg) {
        char *t = json_dumps(cfg, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (t) snprintf(s->config, sizeof s->config, "%s", t);
        free(t);
    }
    return DT_OK;
}

/* The manifest's file list (1 to 2^20 entries). */
static dt_status file_list(json_t *man, const char *mpath, json_t **files) {
    *files = json_object_get(man, "files");
    if (!json_is_array(*files) || json_array_size(*files) < 1 || json_array_size(*files) > (1u << 20))
        return dt_errorf(DT_ERR_FORMAT, "%s: manifest has no file list", mpath);
    return DT_OK;
}

/* File entry i: its path into cf->names[i], its size checked against the
 * manifest, then opened and every checksum verified. */
static dt_status open_entry(json_t *fe, int i, const char *cpath, const char *mpath, dt_ckpt_files *cf) {
    const char *name = json_string_value(json_object_get(fe, "name"));
    json_t *bytes = json_object_get(fe, "bytes");
    if (!name || strchr(name, '/') || !json_is_integer(bytes))
        return dt_errorf(DT_ERR_FORMAT, "%s: file entry %d is malformed", mpath, i);
    char fpath[4400];
    snprintf(fpath, sizeof fpath, "%s/%s", cpath, name);
    cf->names[i] = dt_strdup(fpath);
    struct stat sb;
    if (stat(fpath, &sb) != 0) return dt_errorf(DT_ERR_FORMAT, "%s: %s", fpath, strerror(errno));
    if ((json_int_t)sb.st_size != json_integer_value(bytes))
        return dt_errorf(DT_ERR_FORMAT, "%s: %lld bytes but the manifest says %lld (truncated or rewritten)",
                         fpath, (long long)sb.st_size, (long long)json_integer_value(bytes));
    dt_status st = dt_st_open(fpath, &cf->f[i]);
    if (!st) st = verify_file(cf->f[i], fpath);
    return st;
}

static dt_status open_files(json_t *files, const char *cpath, const char *mpath, dt_ckpt_files *cf) {
    cf->n = (int)json_array_size(files);
    cf->f = dt_calloc((size_t)cf->n, sizeof *cf->f);
    cf->names = dt_calloc((size_t)cf->n, sizeof *cf->names);
    if (!cf->f || !cf->names) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    dt_status st = DT_OK;
    for (int i = 0; i < cf->n && !st; i++) st = open_entry(json_array_get(files, (size_t)i), i, cpath, mpath, cf);
    return st;
}

dt_status dt_ckpt_files_open(const char *cpath, dt_ckpt_state *s, dt_ckpt_files *cf, json_t **man_out) {
    memset(cf, 0, sizeof *cf);
    char mpath[4200];
    json_t *man = NULL, *files = NULL;
    dt_ckpt_state tmp;
    dt_status st = load_manifest(cpath, mpath, sizeof mpath, &man);
    if (st) return st;
    if ((st = parse_state(man, mpath, &tmp))) goto fail;
    if ((st = file_list(man, mpath, &files))) goto fail;
    if ((st = open_files(files, cpath, mpath, cf))) goto fail;
    if (s) *s = tmp;
    if (man_out) *man_out = man;
    else json_decref(man);
    return DT_OK;
fail:
    json_decref(man);
    dt_ckpt_files_free(cf);
    return st;
}

/* Every rank file carries the model config in its metadata and the manifest
 * lists rank 0's file (the parameters' file) first, so the config comes from
 * that file without verifying the whole checkpoint (dtrain export, eval). */
dt_status dt_ckpt_model_cfg(const char *ckpt_dir, dt_model_cfg *out) {
    char mpath[4200];
    json_t *man = NULL, *files = NULL;
    dt_status st = load_manifest(ckpt_dir, mpath, sizeof mpath, &man);
    if (st) return st;
    const char *name = NULL;
    if (!file_list(man, mpath, &files)) name = json_string_value(json_object_get(json_array_get(files, 0), "name"));
    if (!name || strchr(name, '/')) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: manifest names no parameter file", mpath);
    } else {
        char fpath[4400];
        snprintf(fpath, sizeof fpath, "%s/%s", ckpt_dir, name);
        st = dt_weights_read_cfg(fpath, out);
    }
    json_decref(man);
    return st;
}
