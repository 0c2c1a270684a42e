/* `dtrain rl` checkpoints: DIR/ckpt-<update>/rank-<k>.safetensors, one file
 * per rank that has state, then rank 0's manifest.json (the files and their
 * sizes) last, so a directory without a manifest, or whose files' sizes
 * differ from it, is not a checkpoint. Each file is written atomically
 * (temporary name, fsync, rename). The learner's file: the policy, Adam's
 * moments and step count, the update, the env steps and the metrics window;
 * an actor's: every copy's state, episode step count and random stream, its
 * own stream, its current observations and running returns. Asynchronous
 * runs keep the learner's file only (their actors start new episodes when
 * resumed). Cost: one write of each rank's state and one all-reduce of n
 * doubles (sizes). The directory must be shared by the ranks. */
#include "rl_internal.h"

#include "dtrain/ckpt.h"
#include "dtrain/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RL_CKPT_FORMAT "dtrain-rl-ckpt-1"

static void file_name(char *buf, size_t n, const char *cdir, int rank) { snprintf(buf, n, "%s/rank-%05d.safetensors", cdir, rank); }

static dt_status meta_i64(dt_st_writer *w, const char *key, int64_t v) {
    char s[32];
    snprintf(s, sizeof s, "%" PRId64, v);
    return dt_st_writer_meta(w, key, s);
}

static dt_status meta_f64(dt_st_writer *w, const char *key, double v) {
    char s[40];
    snprintf(s, sizeof s, "%.17g", v);
    return dt_st_writer_meta(w, key, s);
}

/* What must match for a resume: the run's shape. */
static void identity(const rl_run *r, char *id, size_t n) {
    const dt_rl_cfg *c = r->c;
    snprintf(id, n, "env=%s envs=%d unroll=%d hidden=%d seed=%" PRIu64 " ranks=%d async=%d updates=%" PRId64, c->env, c->envs,
             c->unroll, c->hidden, c->seed, r->n, c->async ? 1 : 0, c->updates);
}

static dt_status add_identity(dt_st_writer *w, const rl_run *r) {
    char id[256];
    identity(r, id, sizeof id);
    dt_status st = dt_st_writer_meta(w, "format", RL_CKPT_FORMAT);
    return st ? st : dt_st_writer_meta(w, "run", id);
}

static dt_status add_learner(dt_st_writer *w, rl_run *r, int64_t u) {
    int64_t P = (int64_t)dt_policy_n_params(r->p);
    dt_status st = dt_st_writer_add(w, "policy", DT_F32, 1, &P, dt_policy_params(r->p));
    if (!st) st = dt_st_writer_add(w, "adam.m", DT_F32, 1, &P, r->opt->m);
    if (!st) st = dt_st_writer_add(w, "adam.v", DT_F32, 1, &P, r->opt->v);
    int64_t nl = 8;
    if (!st) st = dt_st_writer_add(w, "lag_hist", DT_I64, 1, &nl, r->lag_hist);
    if (!st) st = meta_i64(w, "update", u);
    if (!st) st = meta_i64(w, "adam_t", r->opt->t);
    if (!st) st = meta_i64(w, "env_steps", r->steps);
    if (!st) st = meta_i64(w, "dropped", r->dropped);
    if (!st) st = meta_f64(w, "ret_sum", r->ret_sum);
    if (!st) st = meta_i64(w, "ret_n", r->ret_n);
    if (!st) st = meta_f64(w, "loss_sum", r->loss_sum);
    if (!st) st = meta_i64(w, "loss_n", r->loss_n);
    return st;
}

static dt_status add_actor(dt_st_writer *w, rl_actor *a) {
    rl_env_state es;
    rl_env_expose(a->env, &es);
    int64_t ns = (int64_t)es.n * es.state_dim, n = es.n, rb = (int64_t)(es.n * sizeof(dt_rng)), one = sizeof(dt_rng);
    int64_t cur = (int64_t)a->traj.E * a->traj.D;
    dt_status st = dt_st_writer_add(w, "env.state", DT_F64, 1, &ns, es.s);
    if (!st) st = dt_st_writer_add(w, "env.steps", DT_I32, 1, &n, es.steps);
    if (!st) st = dt_st_writer_add(w, "env.rng", DT_U8, 1, &rb, es.rng);
    if (!st) st = dt_st_writer_add(w, "actor.rng", DT_U8, 1, &one, &a->rng);
    if (!st) st = dt_st_writer_add(w, "actor.obs", DT_F32, 1, &cur, a->cur);
    if (!st) st = dt_st_writer_add(w, "actor.return", DT_F64, 1, &n, a->ret);
    return st;
}

/* This rank's file of update u in cdir; *bytes its size (-1: none). */
static dt_status write_mine(rl_run *r, const char *cdir, int64_t u, bool learner, bool actor, double *bytes) {
    *bytes = -1;
    if (!learner && !actor) return DT_OK;
    dt_st_writer *w;
    char path[4300];
    file_name(path, sizeof path, cdir, r->rank);
    dt_status st = dt_st_writer_create(&w);
    if (st) return st;
    st = add_identity(w, r);
    if (!st && learner) st = add_learner(w, r, u);
    if (!st && actor) st = add_actor(w, &r->actor);
    if (!st) st = dt_st_writer_write(w, path);
    dt_st_writer_destroy(w);
    struct stat sb;
    if (!st && stat(path, &sb) == 0) *bytes = (double)sb.st_size;
    return st;
}

static dt_status write_manifest(const char *cdir, int64_t u, const double *bytes, int n) {
    json_t *files = json_array();
    for (int k = 0; k < n; k++) {
        if (bytes[k] < 0) continue;
        char name[64];
        snprintf(name, sizeof name, "rank-%05d.safetensors", k);
        json_array_append_new(files, json_pack("{s:s,s:I}", "name", name, "bytes", (json_int_t)bytes[k]));
    }
    json_t *m = json_pack("{s:s,s:I,s:o}", "format", RL_CKPT_FORMAT, "update", (json_int_t)u, "files", files);
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    char path[4300], tmp[4400];
    snprintf(path, sizeof path, "%s/manifest.json", cdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f) ok = fclose(f) == 0 && ok;
    free(text);
    if (!ok || rename(tmp, path) != 0) return dt_errorf(DT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return DT_OK;
}

/* Removes a checkpoint directory and the files in it. */
static void remove_dir(const char *cdir) {
    DIR *d = opendir(cdir);
    struct dirent *e;
    char path[4600];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", cdir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(cdir);
}

/* The update of a checkpoint directory's name ckpt-<10 digits>, else -1. */
static int64_t dir_update(const char *name) {
    if (strncmp(name, "ckpt-", 5) != 0 || strlen(name) != 15 || strspn(name + 5, "0123456789") != 10) return -1;
    return strtoll(name + 5, NULL, 10);
}

/* Keeps the newest `keep` checkpoints (0: all), rank 0 after a manifest. */
static void prune(const char *dir, int keep) {
    if (keep <= 0) return;
    DIR *d = opendir(dir);
    struct dirent *e;
    int64_t kept[64];
    int n = 0;
    while (d && (e = readdir(d))) {
        int64_t u = dir_update(e->d_name);
        if (u >= 0 && n < 64) kept[n++] = u;
    }
    if (d) closedir(d);
    for (int a = 0; a < n; a++) /* newest first */
        for (int b = a + 1; b < n; b++)
            if (kept[b] > kept[a]) {
                int64_t t = kept[a];
                kept[a] = kept[b], kept[b] = t;
            }
    char cdir[4200];
    for (int a = keep; a < n; a++) {
        dt_ckpt_dir_name(cdir, sizeof cdir, dir, kept[a]);
        remove_dir(cdir);
    }
}

dt_status rl_ckpt_save(rl_run *r, int64_t u, bool collective) {
    const dt_rl_cfg *c = r->c;
    char cdir[4200];
    dt_ckpt_dir_name(cdir, sizeof cdir, c->ckpt_dir, u);
    dt_status st = r->rank == 0 ? dt_ckpt_mkdir_p(cdir) : DT_OK;
    double *bytes = dt_calloc((size_t)r->n, sizeof(double));
    if (!bytes) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    /* the directory exists before the others write into it */
    double fail = st ? 1 : 0;
    dt_status cs = collective && r->n > 1 ? dt_allreduce_f64(r->w, &fail, 1) : DT_OK;
    if (!st) st = cs;
    if (!st && fail > 0) st = dt_errorf(DT_ERR_IO, "rank 0 could not create the checkpoint %s", cdir);
    bool actor = collective && (r->rank > 0 || r->n == 1);
    double mine = -1;
    if (!st) st = write_mine(r, cdir, u, r->rank == 0, actor, &mine);
    /* every rank's size reaches rank 0 (-1: no file, -2: it failed) */
    bytes[r->rank] = st ? -2 : mine;
    if (collective && r->n > 1 && !cs) {
        cs = dt_allreduce_f64(r->w, bytes, (size_t)r->n);
        if (!st) st = cs;
    }
    for (int k = 0; k < r->n && !st; k++)
        if (bytes[k] < -1.5) st = dt_errorf(DT_ERR_IO, "rank %d could not write its part of the checkpoint %s", k, cdir);
    if (!st && r->rank == 0) st = write_manifest(cdir, u, bytes, collective ? r->n : 1);
    if (!st && r->rank == 0) prune(c->ckpt_dir, c->ckpt_keep);
    dt_free(bytes);
    return st;
}

/* Whether cdir holds a whole checkpoint: a manifest whose files all have the
 * sizes it says; *u its update. */
static bool valid(const char *cdir, int64_t *u) {
    char path[4300];
    snprintf(path, sizeof path, "%s/manifest.json", cdir);
    json_t *m = json_load_file(path, 0, NULL), *files = m ? json_object_get(m, "files") : NULL;
    json_t *fmt = m ? json_object_get(m, "format") : NULL, *up = m ? json_object_get(m, "update") : NULL;
    bool ok = json_is_array(files) && json_is_string(fmt) && strcmp(json_string_value(fmt), RL_CKPT_FORMAT) == 0 && json_is_integer(up);
    for (size_t i = 0; ok && i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i), *name = json_object_get(f, "name"), *bytes = json_object_get(f, "bytes");
        struct stat sb;
        ok = json_is_string(name) && json_is_integer(bytes) && !strchr(json_string_value(name), '/');
        if (ok) snprintf(path, sizeof path, "%s/%s", cdir, json_string_value(name));
        ok = ok && stat(path, &sb) == 0 && (json_int_t)sb.st_size == json_integer_value(bytes);
    }
    if (ok) *u = json_integer_value(up);
    json_decref(m);
    return ok;
}

dt_status rl_ckpt_check(const char *cdir, int64_t *u) {
    if (valid(cdir, u)) return DT_OK;
    return dt_errorf(DT_ERR_FORMAT, "--resume %s: not a whole dtrain rl checkpoint (no manifest.json, or a file of another "
                     "size than it says); name a DIR/ckpt-UPDATE, or use --resume auto", cdir);
}

dt_status rl_ckpt_find(const char *dir, char *path, size_t n, int64_t *u) {
    DIR *d = opendir(dir);
    struct dirent *e;
    *u = -1;
    path[0] = '\0';
    while (d && (e = readdir(d))) {
        int64_t v = dir_update(e->d_name), got;
        char cdir[4200];
        if (v < 0 || v <= *u) continue;
        dt_ckpt_dir_name(cdir, sizeof cdir, dir, v);
        if (!valid(cdir, &got)) {
            dt_log(DT_LOG_WARN, "%s is not a whole checkpoint (no manifest, or a file of the wrong size): skipped", cdir);
            continue;
        }
        *u = v;
        snprintf(path, n, "%s", cdir);
    }
    if (d) closedir(d);
    return DT_OK;
}

/* A tensor of exactly `bytes` bytes from f, or a line saying what is wrong. */
static dt_status take(const dt_st_file *f, const char *path, const char *name, void *out, size_t bytes) {
    const dt_st_tensor *t = dt_st_find(f, name);
    if (!t || t->end - t->begin != bytes)
        return dt_errorf(DT_ERR_FORMAT, "%s: %s is %s (a checkpoint of another run?)", path, name, t ? "of the wrong size" : "missing");
    memcpy(out, dt_st_data(f, t), bytes);
    return DT_OK;
}

static dt_status meta_num(const dt_st_file *f, const char *path, const char *key, double *v) {
    const char *s = dt_st_meta(f, key);
    char *end;
    if (s) *v = strtod(s, &end);
    if (!s || *end) return dt_errorf(DT_ERR_FORMAT, "%s: no valid '%s' in its metadata", path, key);
    return DT_OK;
}

static dt_status load_learner(rl_run *r, const dt_st_file *f, const char *path, int64_t *u) {
    size_t P = dt_policy_n_params(r->p) * sizeof(float);
    dt_status st = take(f, path, "policy", dt_policy_params(r->p), P);
    if (!st) st = take(f, path, "adam.m", r->opt->m, P);
    if (!st) st = take(f, path, "adam.v", r->opt->v, P);
    if (!st) st = take(f, path, "lag_hist", r->lag_hist, sizeof r->lag_hist);
    double v[8];
    const char *keys[8] = {"update", "adam_t", "env_steps", "dropped", "ret_sum", "ret_n", "loss_sum", "loss_n"};
    for (int i = 0; i < 8 && !st; i++) st = meta_num(f, path, keys[i], &v[i]);
    if (st) return st;
    *u = (int64_t)v[0];
    r->opt->t = (int64_t)v[1];
    r->steps = (int64_t)v[2];
    r->dropped = (int64_t)v[3];
    r->ret_sum = v[4], r->ret_n = (int)v[5], r->loss_sum = v[6], r->loss_n = (int)v[7];
    return DT_OK;
}

static dt_status load_actor(rl_actor *a, const dt_st_file *f, const char *path) {
    rl_env_state es;
    rl_env_expose(a->env, &es);
    size_t E = (size_t)es.n;
    dt_status st = take(f, path, "env.state", es.s, E * es.state_dim * sizeof(double));
    if (!st) st = take(f, path, "env.steps", es.steps, E * sizeof(int));
    if (!st) st = take(f, path, "env.rng", es.rng, E * sizeof(dt_rng));
    if (!st) st = take(f, path, "actor.rng", &a->rng, sizeof a->rng);
    if (!st) st = take(f, path, "actor.obs", a->cur, (size_t)a->traj.E * a->traj.D * sizeof(float));
    if (!st) st = take(f, path, "actor.return", a->ret, E * sizeof(double));
    return st;
}

dt_status rl_ckpt_load(rl_run *r, const char *cdir, int64_t *u) {
    char path[4300], id[256];
    file_name(path, sizeof path, cdir, r->rank);
    bool learner = r->rank == 0, actor = !r->c->async && (r->rank > 0 || r->n == 1);
    if (!learner && !actor) return DT_OK;
    dt_st_file *f;
    dt_status st = dt_st_open(path, &f);
    if (st) return st;
    const char *run = dt_st_meta(f, "run");
    identity(r, id, sizeof id);
    if (!run || strcmp(run, id) != 0)
        st = dt_errorf(DT_ERR_INVALID, "%s was written by another run (%s); resume with the same flags and -n (%s now)", path,
                       run ? run : "unknown", id);
    if (!st && learner) st = load_learner(r, f, path, u);
    if (!st && actor) st = load_actor(&r->actor, f, path);
    dt_st_close(f);
    return st;
}
