/* Checkpoints: an in-memory snapshot taken by the step loop, persisted by a
 * background thread as one safetensors file per rank plus a manifest written
 * last by rank 0; verification, discovery of the newest valid checkpoint,
 * loading into any layout, inspection. See include/dtrain/ckpt.h. */
#include "dtrain/ckpt.h"

#include "dtrain/crc32c.h"
#include "dtrain/safetensors.h"
#include "dtrain/weights.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST "manifest.json"

static const char *state_names(dt_optim_kind k, int i) {
    if (k == DT_OPTIM_ADAMW) return i == 0 ? "exp_avg" : "exp_avg_sq";
    return "momentum_buffer";
}

static int n_states_of(const dt_optim *o) {
    if (o->cfg.kind == DT_OPTIM_ADAMW) return 2;
    return o->m ? 1 : 0;
}

/* ---- small file helpers ------------------------------------------------------ */

static dt_status fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return dt_errorf(DT_ERR_IO, "cannot open directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL && e != ENOTSUP)
        return dt_errorf(DT_ERR_IO, "cannot fsync directory %s: %s", dir, strerror(e));
    return DT_OK;
}

static dt_status mkdir_p(const char *dir) {
    char buf[4096];
    if (strlen(dir) >= sizeof buf) return dt_errorf(DT_ERR_INVALID, "path too long: %s", dir);
    strcpy(buf, dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return dt_errorf(DT_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return dt_errorf(DT_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
    struct stat sb;
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return dt_errorf(DT_ERR_IO, "%s is not a directory", buf);
    return DT_OK;
}

/* Writes text to path atomically and durably. */
static dt_status write_atomic(const char *dir, const char *path, const char *text) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%.4200s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) return dt_errorf(DT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    size_t len = strlen(text), done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return dt_errorf(DT_ERR_IO, "cannot write %s: %s", tmp, strerror(e));
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return dt_errorf(DT_ERR_IO, "cannot write %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return dt_errorf(DT_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    return fsync_dir(dir);
}

static void ckpt_name(char *buf, size_t n, const char *dir, int64_t step) {
    snprintf(buf, n, "%s/ckpt-%010lld", dir, (long long)step);
}

static void rank_file(char *buf, size_t n, const char *cdir, int rank) {
    snprintf(buf, n, "%s/rank-%05d.safetensors", cdir, rank);
}

/* ---- writer ---------------------------------------------------------------------- */

struct dt_ckpt_writer {
    char *dir;
    int rank, world, keep;
    int *writers, n_writers;  /* world ranks that write a file */
    bool params_too;          /* the snapshot's runs also carry parameters */
    bool writes;              /* this rank is one of them */
    bool *mask;               /* parameters this rank writes (snapshot) */
    double timeout;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool pending, quit;
    dt_status last;
    char last_msg[1024];
    double blocking_s;

    /* the snapshot */
    const dt_model *model;
    float *params;             /* m->n floats (rank 0) */
    size_t params_cap;
    float *st[2];              /* optimizer state shard copies */
    size_t st_cap;
    int n_states;
    size_t *runs;              /* 3 * nruns: arena_off, len, state_off */
    int nruns;
    int n_extra;               /* extra tensors (copies) */
    char (*extra_name)[96];
    float **extra_data;
    size_t *extra_len;
    dt_ckpt_state state;
};

static void extras_free(dt_ckpt_writer *w) {
    for (int i = 0; i < w->n_extra; i++) dt_free(w->extra_data[i]);
    dt_free(w->extra_name);
    dt_free(w->extra_data);
    dt_free(w->extra_len);
    w->extra_name = NULL;
    w->extra_data = NULL;
    w->extra_len = NULL;
    w->n_extra = 0;
}

static dt_status add_tensor(dt_st_writer *sw, json_t *crcs, const char *name, int ndim,
                            const int64_t *shape, const float *data, size_t numel) {
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", dt_crc32c(0, data, numel * sizeof(float)));
    json_object_set_new(crcs, name, json_string(hex));
    return dt_st_writer_add(sw, name, DT_F32, ndim, shape, data);
}

static dt_status persist(dt_ckpt_writer *w) {
    const dt_model *m = w->model;
    const dt_ckpt_state *s = &w->state;
    if (!w->writes) return DT_OK;
    char cdir[4096], path[4200];
    ckpt_name(cdir, sizeof cdir, w->dir, s->step);
    dt_status st = mkdir_p(cdir);
    if (st) return st;
    dt_st_writer *sw = NULL;
    json_t *crcs = json_object(), *slices = json_object();
    char (*names)[160] = NULL;
    char *crc_text = NULL, *slice_text = NULL;
    if ((st = dt_st_writer_create(&sw))) goto out;
    for (int i = 0; i < m->n_params && !st; i++) {
        const dt_param *p = &m->params[i];
        if (w->mask[i]) st = add_tensor(sw, crcs, p->name, p->ndim, p->shape, w->params + p->offset, p->numel);
    }
    /* Optimizer slices: one per (state, parameter, run) overlap. Names must outlive
     * the writer, so keep them in one array. */
    size_t max_slices = (size_t)w->nruns * (size_t)m->n_params * (size_t)(w->n_states + 1);
    names = dt_calloc(max_slices ? max_slices : 1, sizeof *names);
    if (!names) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory writing a checkpoint");
        goto out;
    }
    size_t ns = 0;
    for (int k = w->params_too ? -1 : 0; k < w->n_states && !st; k++)
        for (int r = 0; r < w->nruns && !st; r++) {
            size_t lo = w->runs[3 * r], len = w->runs[3 * r + 1], so = w->runs[3 * r + 2];
            for (int i = 0; i < m->n_params && !st; i++) {
                const dt_param *p = &m->params[i];
                size_t a = p->offset > lo ? p->offset : lo;
                size_t e = p->offset + p->numel < lo + len ? p->offset + p->numel : lo + len;
                if (a >= e) continue;
                char *nm = names[ns++];
                const char *state = k < 0 ? "param" : state_names(s->optim, k);
                if (k < 0) snprintf(nm, sizeof names[0], "%s@%zu", p->name, a - p->offset);
                else snprintf(nm, sizeof names[0], "optim.%s.%s@%zu", state, p->name, a - p->offset);
                int64_t shp[1] = {(int64_t)(e - a)};
                const float *src = k < 0 ? w->params + a : w->st[k] + so + (a - lo);
                st = add_tensor(sw, crcs, nm, 1, shp, src, e - a);
                json_t *sl = json_object();
                json_t *gs = json_array();
                for (int d = 0; d < p->ndim; d++) json_array_append_new(gs, json_integer(p->shape[d]));
                json_object_set_new(sl, "param", json_string(p->name));
                json_object_set_new(sl, "state", json_string(state));
                json_object_set_new(sl, "offset", json_integer((json_int_t)(a - p->offset)));
                json_object_set_new(sl, "global_shape", gs);
                json_object_set_new(slices, nm, sl);
            }
        }
    for (int i = 0; i < w->n_extra && !st; i++) {
        int64_t shp[1] = {(int64_t)w->extra_len[i]};
        st = add_tensor(sw, crcs, w->extra_name[i], 1, shp, w->extra_data[i], w->extra_len[i]);
    }
    if (st) goto out;
    crc_text = json_dumps(crcs, JSON_COMPACT | JSON_SORT_KEYS);
    slice_text = json_dumps(slices, JSON_COMPACT | JSON_SORT_KEYS);
    char num[32];
    st = dt_st_writer_meta(sw, "dtrain_ckpt", DT_CKPT_FORMAT);
    snprintf(num, sizeof num, "%d", w->rank);
    if (!st) st = dt_st_writer_meta(sw, "rank", num);
    snprintf(num, sizeof num, "%d", w->world);
    if (!st) st = dt_st_writer_meta(sw, "world", num);
    snprintf(num, sizeof num, "%lld", (long long)s->step);
    if (!st) st = dt_st_writer_meta(sw, "step", num);
    if (!st) st = dt_st_writer_meta(sw, "crc32c", crc_text ? crc_text : "{}");
    if (!st) st = dt_st_writer_meta(sw, "slices", slice_text ? slice_text : "{}");
    const char *kv[48];
    char buf[1024];
    int nkv = dt_weights_cfg_meta(&m->cfg, kv, 24, buf, sizeof buf);
    for (int i = 0; i < nkv && !st; i++) st = dt_st_writer_meta(sw, kv[2 * i], kv[2 * i + 1]);
    rank_file(path, sizeof path, cdir, w->rank);
    if (!st) st = dt_st_writer_write(sw, path);
    if (st || w->rank != 0) goto out;

    /* Rank 0: wait for every rank's file, then the manifest makes it count. */
    json_t *files = json_array();
    double t0 = dt_now();
    for (int wi = 0; wi < w->n_writers && !st; wi++) {
        int r = w->writers[wi];
        rank_file(path, sizeof path, cdir, r);
        struct stat sb;
        while (stat(path, &sb) != 0) {
            if (dt_now() - t0 > w->timeout) {
                st = dt_errorf(DT_ERR_TIMEOUT, "checkpoint at step %lld: rank %d's file never appeared in %s; the checkpoint stays incomplete",
                               (long long)s->step, r, cdir);
                break;
            }
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (st) break;
        json_t *f = json_object();
        const char *base = strrchr(path, '/') + 1;
        json_object_set_new(f, "name", json_string(base));
        json_object_set_new(f, "bytes", json_integer((json_int_t)sb.st_size));
        json_array_append_new(files, f);
    }
    if (st) {
        json_decref(files);
        goto out;
    }
    json_t *man = json_object();
    json_object_set_new(man, "format", json_string(DT_CKPT_FORMAT));
    json_object_set_new(man, "step", json_integer(s->step));
    json_object_set_new(man, "epoch", json_integer(s->epoch));
    json_object_set_new(man, "index", json_integer(s->index));
    json_object_set_new(man, "seed", json_integer((json_int_t)s->seed));
    json_object_set_new(man, "optim", json_string(s->optim == DT_OPTIM_ADAMW ? "adamw" : "sgd"));
    json_object_set_new(man, "optim_t", json_integer(s->optim_t));
    json_object_set_new(man, "optim_states", json_integer(s->n_states));
    json_object_set_new(man, "world", json_integer(s->world));
    json_object_set_new(man, "zero", json_integer(s->zero));
    json_object_set_new(man, "batch", json_integer(s->batch));
    char lay[96];
    snprintf(lay, sizeof lay, "dp=%d,pp=%d,tp=%d", s->dp, s->pp, s->tp);
    json_object_set_new(man, "layout", json_string(lay));
    json_object_set_new(man, "written", json_real(dt_wall_time()));
    json_t *model = json_object();
    for (int i = 0; i < nkv; i++) json_object_set_new(model, kv[2 * i], json_string(kv[2 * i + 1]));
    json_object_set_new(man, "model", model);
    json_t *cfg = json_loads(s->config, 0, NULL);
    json_object_set_new(man, "config", cfg ? cfg : json_object());
    json_object_set_new(man, "files", files);
    char *text = json_dumps(man, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(man);
    snprintf(path, sizeof path, "%s/" MANIFEST, cdir);
    st = text ? write_atomic(cdir, path, text) : dt_errorf(DT_ERR_NOMEM, "out of memory");
    free(text);
    if (!st) st = fsync_dir(w->dir);
    if (st || w->keep <= 0) goto out;

    /* Prune: keep the newest `keep` complete checkpoints, and anything newer
     * than the oldest of them (possibly still being written). */
    DIR *d = opendir(w->dir);
    if (!d) goto out;
    int64_t steps[4096];
    int nsteps = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nsteps < 4096) {
        long long sv;
        char tail;
        if (sscanf(de->d_name, "ckpt-%lld%c", &sv, &tail) == 1) steps[nsteps++] = sv;
    }
    closedir(d);
    /* sort descending */
    for (int i = 1; i < nsteps; i++)
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    int complete = 0;
    for (int i = 0; i < nsteps; i++) {
        char c2[4096], mf[4200];
        ckpt_name(c2, sizeof c2, w->dir, steps[i]);
        snprintf(mf, sizeof mf, "%s/" MANIFEST, c2);
        struct stat sb;
        bool done = stat(mf, &sb) == 0;
        if (complete >= w->keep && steps[i] < s->step) {
            /* remove manifest first so a half-removed checkpoint never looks complete */
            unlink(mf);
            DIR *dd = opendir(c2);
            if (dd) {
                while ((de = readdir(dd))) {
                    if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2]))) continue;
                    char fp[4400];
                    snprintf(fp, sizeof fp, "%s/%s", c2, de->d_name);
                    unlink(fp);
                }
                closedir(dd);
            }
            rmdir(c2);
        } else if (done) {
            complete++;
        }
    }
out:
    dt_st_writer_destroy(sw);
    json_decref(crcs);
    json_decref(slices);
    free(crc_text);
    free(slice_text);
    dt_free(names);
    return st;
}

static void *writer_thread(void *arg) {
    dt_ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && !w->pending) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->pending && w->quit) break;
        pthread_mutex_unlock(&w->mu);
        dt_status st = persist(w);
        pthread_mutex_lock(&w->mu);
        w->last = st;
        if (st) snprintf(w->last_msg, sizeof w->last_msg, "%s", dt_error_msg());
        w->pending = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

dt_status dt_ckpt_writer_create(dt_ckpt_writer **out, const char *dir, int rank, int world,
                                const int *writers, int n_writers, int keep, double timeout) {
    *out = NULL;
    dt_status st = mkdir_p(dir);
    if (st) return st;
    dt_ckpt_writer *w = dt_calloc(1, sizeof *w);
    if (!w) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    w->dir = dt_strdup(dir);
    w->rank = rank;
    w->world = world;
    w->keep = keep;
    w->timeout = timeout > 0 ? timeout : 600;
    w->n_writers = writers ? n_writers : world;
    w->writers = dt_calloc((size_t)w->n_writers, sizeof(int));
    if (!w->writers) {
        dt_ckpt_writer_destroy(w);
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < w->n_writers; i++) {
        w->writers[i] = writers ? writers[i] : i;
        w->writes |= w->writers[i] == rank;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (!w->dir || pthread_create(&w->thread, NULL, writer_thread, w) != 0) {
        dt_ckpt_writer_destroy(w);
        return dt_errorf(DT_ERR_NOMEM, "cannot start the checkpoint writer");
    }
    w->started = true;
    *out = w;
    return DT_OK;
}

void dt_ckpt_writer_destroy(dt_ckpt_writer *w) {
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->quit = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    dt_free(w->dir);
    dt_free(w->writers);
    dt_free(w->mask);
    dt_free(w->params);
    dt_free(w->st[0]);
    dt_free(w->st[1]);
    dt_free(w->runs);
    extras_free(w);
    dt_free(w);
}

static dt_status wait_idle(dt_ckpt_writer *w) {
    pthread_mutex_lock(&w->mu);
    while (w->pending) pthread_cond_wait(&w->cv, &w->mu);
    dt_status st = w->last;
    if (st) dt_errorf(st, "%s", w->last_msg);
    w->last = DT_OK;
    pthread_mutex_unlock(&w->mu);
    return st;
}

dt_status dt_ckpt_flush(dt_ckpt_writer *w) { return w ? wait_idle(w) : DT_OK; }

double dt_ckpt_blocking_seconds(const dt_ckpt_writer *w) { return w ? w->blocking_s : 0; }

dt_status dt_ckpt_save_async(dt_ckpt_writer *w, const dt_model *m, const dt_optim *o,
                             const dt_ckpt_shard *shard, const bool *param_mask,
                             const dt_ckpt_state *state) {
    double t0 = dt_now();
    dt_status st = wait_idle(w);
    if (st) return st;
    w->model = m;
    w->state = *state;
    w->n_states = n_states_of(o);
    w->state.n_states = w->n_states;
    dt_free(w->mask);
    w->mask = dt_calloc((size_t)m->n_params + 1, sizeof(bool));
    if (!w->mask) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    bool any = false;
    for (int i = 0; i < m->n_params; i++) any |= (w->mask[i] = param_mask && param_mask[i]);
    w->params_too = shard->params_too;
    if (any || shard->params_too) {
        if (w->params_cap < m->n) {
            dt_free(w->params);
            w->params = dt_alloc_floats(m->n);
            w->params_cap = w->params ? m->n : 0;
            if (!w->params) return dt_errorf(DT_ERR_NOMEM, "out of memory for a checkpoint snapshot");
        }
        memcpy(w->params, m->w, m->n * sizeof(float));
    }
    if (w->st_cap < o->n) {
        dt_free(w->st[0]);
        dt_free(w->st[1]);
        w->st[0] = dt_alloc_floats(o->n);
        w->st[1] = dt_alloc_floats(o->n);
        w->st_cap = (w->st[0] && w->st[1]) ? o->n : 0;
        if (!w->st_cap) return dt_errorf(DT_ERR_NOMEM, "out of memory for a checkpoint snapshot");
    }
    if (o->n && w->n_states >= 1) memcpy(w->st[0], o->m, o->n * sizeof(float));
    if (o->n && w->n_states >= 2) memcpy(w->st[1], o->v, o->n * sizeof(float));
    dt_free(w->runs);
    w->runs = dt_calloc((size_t)shard->n * 3 + 1, sizeof(size_t));
    if (!w->runs) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < shard->n; i++) {
        w->runs[3 * i] = shard->arena_off[i];
        w->runs[3 * i + 1] = shard->len[i];
        w->runs[3 * i + 2] = shard->state_off[i];
    }
    w->nruns = shard->n;
    extras_free(w);
    if (shard->n_extra > 0) {
        w->extra_name = dt_calloc((size_t)shard->n_extra, sizeof *w->extra_name);
        w->extra_data = dt_calloc((size_t)shard->n_extra, sizeof(float *));
        w->extra_len = dt_calloc((size_t)shard->n_extra, sizeof(size_t));
        if (!w->extra_name || !w->extra_data || !w->extra_len) return dt_errorf(DT_ERR_NOMEM, "out of memory");
        w->n_extra = shard->n_extra;
        for (int i = 0; i < shard->n_extra; i++) {
            snprintf(w->extra_name[i], sizeof w->extra_name[i], "%s", shard->extra_name[i]);
            w->extra_len[i] = shard->extra_len[i];
            w->extra_data[i] = dt_alloc_floats(shard->extra_len[i] ? shard->extra_len[i] : 1);
            if (!w->extra_data[i]) return dt_errorf(DT_ERR_NOMEM, "out of memory for a checkpoint snapshot");
            memcpy(w->extra_data[i], shard->extra_data[i], shard->extra_len[i] * sizeof(float));
        }
    }
    pthread_mutex_lock(&w->mu);
    w->pending = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    w->blocking_s += dt_now() - t0;
    return DT_OK;
}

/* ---- reading ------------------------------------------------------------------------ */

typedef struct ckpt_files {
    int n;
    dt_st_file **f;
    char **names;
} ckpt_files;

static void files_free(ckpt_files *cf) {
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

static dt_status open_ckpt(const char *cpath, dt_ckpt_state *s, ckpt_files *cf, json_t **man_out) {
    memset(cf, 0, sizeof *cf);
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/" MANIFEST, cpath);
    struct stat sb;
    if (stat(cpath, &sb) != 0) return dt_errorf(DT_ERR_IO, "%s: %s", cpath, strerror(errno));
    if (stat(mpath, &sb) != 0)
        return dt_errorf(DT_ERR_FORMAT, "%s: no manifest.json (the checkpoint was never completed)", cpath);
    json_error_t je;
    json_t *man = json_load_file(mpath, JSON_REJECT_DUPLICATES, &je);
    if (!man) return dt_errorf(DT_ERR_FORMAT, "%s: manifest is not valid JSON (%s, line %d)", mpath, je.text, je.line);
    if (!json_is_object(man)) {
        json_decref(man);
        return dt_errorf(DT_ERR_FORMAT, "%s: manifest is not a JSON object", mpath);
    }
    dt_status st = DT_OK;
    const char *fmt = json_string_value(json_object_get(man, "format"));
    if (!fmt || strcmp(fmt, DT_CKPT_FORMAT) != 0) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: format is '%s', expected '%s'", mpath, fmt ? fmt : "(none)", DT_CKPT_FORMAT);
        goto fail;
    }
    int64_t v = 0;
    dt_ckpt_state tmp;
    memset(&tmp, 0, sizeof tmp);
    if ((st = get_int(man, "step", mpath, 0, INT64_MAX / 4, &tmp.step))) goto fail;
    if ((st = get_int(man, "epoch", mpath, 0, INT64_MAX / 4, &tmp.epoch))) goto fail;
    if ((st = get_int(man, "index", mpath, 0, INT64_MAX / 4, &tmp.index))) goto fail;
    if ((st = get_int(man, "seed", mpath, INT64_MIN, INT64_MAX, &v))) goto fail;
    tmp.seed = (uint64_t)v;
    if ((st = get_int(man, "optim_t", mpath, 0, INT64_MAX / 4, &tmp.optim_t))) goto fail;
    if ((st = get_int(man, "optim_states", mpath, 0, 2, &v))) goto fail;
    tmp.n_states = (int)v;
    if ((st = get_int(man, "world", mpath, 1, 1 << 20, &v))) goto fail;
    tmp.world = (int)v;
    if ((st = get_int(man, "zero", mpath, 0, 2, &v))) goto fail;
    tmp.zero = (int)v;
    if ((st = get_int(man, "batch", mpath, 1, 1 << 20, &v))) goto fail;
    tmp.batch = (int)v;
    const char *on = json_string_value(json_object_get(man, "optim"));
    if (!on || (strcmp(on, "sgd") && strcmp(on, "adamw"))) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: manifest 'optim' must be sgd or adamw", mpath);
        goto fail;
    }
    tmp.optim = strcmp(on, "adamw") == 0 ? DT_OPTIM_ADAMW : DT_OPTIM_SGD;
    tmp.dp = tmp.world;
    tmp.pp = tmp.tp = 1;
    const char *lay = json_string_value(json_object_get(man, "layout"));
    if (lay && sscanf(lay, "dp=%d,pp=%d,tp=%d", &tmp.dp, &tmp.pp, &tmp.tp) != 3) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: manifest 'layout' = '%s' is malformed", mpath, lay);
        goto fail;
    }
    json_t *cfg = json_object_get(man, "config");
    if (cfg) {
        char *t = json_dumps(cfg, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (t) snprintf(tmp.config, sizeof tmp.config, "%s", t);
        free(t);
    }
    json_t *files = json_object_get(man, "files");
    if (!json_is_array(files) || json_array_size(files) < 1 || json_array_size(files) > (1u << 20)) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: manifest has no file list", mpath);
        goto fail;
    }
    cf->n = (int)json_array_size(files);
    cf->f = dt_calloc((size_t)cf->n, sizeof *cf->f);
    cf->names = dt_calloc((size_t)cf->n, sizeof *cf->names);
    if (!cf->f || !cf->names) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < cf->n; i++) {
        json_t *fe = json_array_get(files, (size_t)i);
        const char *name = json_string_value(json_object_get(fe, "name"));
        json_t *bytes = json_object_get(fe, "bytes");
        if (!name || strchr(name, '/') || !json_is_integer(bytes)) {
            st = dt_errorf(DT_ERR_FORMAT, "%s: file entry %d is malformed", mpath, i);
            goto fail;
        }
        char fpath[4400];
        snprintf(fpath, sizeof fpath, "%s/%s", cpath, name);
        cf->names[i] = dt_strdup(fpath);
        if (stat(fpath, &sb) != 0) {
            st = dt_errorf(DT_ERR_FORMAT, "%s: %s", fpath, strerror(errno));
            goto fail;
        }
        if ((json_int_t)sb.st_size != json_integer_value(bytes)) {
            st = dt_errorf(DT_ERR_FORMAT, "%s: %lld bytes but the manifest says %lld (truncated or rewritten)",
                           fpath, (long long)sb.st_size, (long long)json_integer_value(bytes));
            goto fail;
        }
        if ((st = dt_st_open(fpath, &cf->f[i]))) goto fail;
        if ((st = verify_file(cf->f[i], fpath))) goto fail;
    }
    if (s) *s = tmp;
    if (man_out) *man_out = man;
    else json_decref(man);
    return DT_OK;
fail:
    json_decref(man);
    files_free(cf);
    return st;
}

dt_status dt_ckpt_verify(const char *path, dt_ckpt_state *state) {
    ckpt_files cf;
    dt_status st = open_ckpt(path, state, &cf, NULL);
    if (!st) files_free(&cf);
    return st;
}

dt_status dt_ckpt_find_latest(const char *dir, char *path, size_t n) {
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(DT_ERR_IO, "--ckpt-dir %s: %s", dir, strerror(errno));
    int64_t *steps = NULL;
    size_t ns = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long long sv;
        char tail;
        if (sscanf(de->d_name, "ckpt-%lld%c", &sv, &tail) != 1 || sv < 0) continue;
        if (ns == cap) {
            cap = cap ? 2 * cap : 64;
            int64_t *ns2 = dt_realloc_array(steps, cap, sizeof *steps);
            if (!ns2) break;
            steps = ns2;
        }
        steps[ns++] = sv;
    }
    closedir(d);
    dt_status st = dt_errorf(DT_ERR_IO, "no valid checkpoint in %s", dir);
    while (ns > 0) {
        size_t best = 0;
        for (size_t i = 1; i < ns; i++)
            if (steps[i] > steps[best]) best = i;
        char c[4096];
        ckpt_name(c, sizeof c, dir, steps[best]);
        steps[best] = steps[--ns];
        dt_status vs = dt_ckpt_verify(c, NULL);
        if (vs == DT_OK) {
            snprintf(path, n, "%s", c);
            st = DT_OK;
            break;
        }
        dt_log(DT_LOG_WARN, "skipping checkpoint %s: %s", c, dt_error_msg());
        st = dt_errorf(DT_ERR_IO, "no valid checkpoint in %s", dir);
    }
    dt_free(steps);
    return st;
}

dt_status dt_ckpt_load(const char *path, dt_model *m, float *M, float *V, dt_ckpt_state *state) {
    ckpt_files cf;
    dt_ckpt_state s;
    dt_status st = open_ckpt(path, &s, &cf, NULL);
    if (st) return st;
    float *w = dt_alloc_floats(m->n);
    uint8_t *cover[2] = {NULL, NULL}; /* times each arena float was written */
    uint8_t *pcover = NULL;
    if (!w) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory loading %s", path);
        goto out;
    }
    /* Parameters: every model tensor once, in some file, whole under its name or
     * as slices (parameter-server key ranges, checked for coverage below). */
    pcover = dt_calloc(m->n ? m->n : 1, 1);
    bool *whole = dt_calloc((size_t)m->n_params + 1, sizeof(bool));
    if (!pcover || !whole) {
        dt_free(whole);
        st = dt_errorf(DT_ERR_NOMEM, "out of memory loading %s", path);
        goto out;
    }
    for (int i = 0; i < m->n_params && !st; i++) {
        const dt_param *p = &m->params[i];
        const dt_st_tensor *t = NULL;
        int fi = 0;
        for (; fi < cf.n && !t; fi++) t = dt_st_find(cf.f[fi], p->name);
        if (!t) continue;
        bool same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            st = dt_errorf(DT_ERR_SHAPE, "%s: parameter '%s' has another shape than this model's (a checkpoint of another model size?)",
                           path, p->name);
            break;
        }
        st = dt_st_read_f32(cf.f[fi - 1], t, w + p->offset, p->numel);
        whole[i] = true;
        memset(pcover + p->offset, 1, p->numel);
    }
    if (st) {
        dt_free(whole);
        goto out;
    }
    /* Optimizer state: slices reassembled into the logical tensors. */
    float *dst[2] = {M, V};
    for (int k = 0; k < 2; k++) {
        if (!dst[k]) continue;
        memset(dst[k], 0, m->n * sizeof(float));
        cover[k] = dt_calloc(m->n ? m->n : 1, 1);
    }
    int want_states = s.n_states;
    for (int fi = 0; fi < cf.n && !st; fi++) {
        const char *sl_text = dt_st_meta(cf.f[fi], "slices");
        json_t *sl = sl_text ? json_loads(sl_text, 0, NULL) : json_object();
        if (!json_is_object(sl)) {
            json_decref(sl);
            st = dt_errorf(DT_ERR_FORMAT, "%s: slices metadata is not a JSON object", cf.names[fi]);
            break;
        }
        const char *key;
        json_t *e;
        json_object_foreach(sl, key, e) {
            const char *pn = json_string_value(json_object_get(e, "param"));
            const char *sn = json_string_value(json_object_get(e, "state"));
            json_t *off = json_object_get(e, "offset");
            const dt_st_tensor *t = dt_st_find(cf.f[fi], key);
            const dt_param *p = pn ? dt_model_find(m, pn) : NULL;
            int k = -1;
            bool is_param = sn && strcmp(sn, "param") == 0;
            for (int j = 0; j < want_states; j++)
                if (sn && strcmp(sn, state_names(s.optim, j)) == 0) k = j;
            if (!t || !p || (k < 0 && !is_param) || !json_is_integer(off)) {
                st = dt_errorf(DT_ERR_FORMAT, "%s: slice '%s' names an unknown parameter or state", cf.names[fi], key);
                break;
            }
            json_int_t o = json_integer_value(off);
            if (o < 0 || (size_t)o > p->numel || t->numel > p->numel - (size_t)o) {
                st = dt_errorf(DT_ERR_FORMAT, "%s: slice '%s' runs past its tensor", cf.names[fi], key);
                break;
            }
            uint8_t *cov = is_param ? pcover : cover[k];
            float *into = is_param ? w : dst[k];
            if (!into) continue;
            if ((st = dt_st_read_f32(cf.f[fi], t, into + p->offset + (size_t)o, t->numel))) break;
            for (size_t j = 0; j < t->numel; j++) {
                size_t x = p->offset + (size_t)o + j;
                if (cov[x] < 255) cov[x]++;
            }
        }
        json_decref(sl);
    }
    for (int i = 0; i < m->n_params && !st; i++) {
        const dt_param *p = &m->params[i];
        for (size_t j = 0; j < p->numel; j++)
            if (pcover[p->offset + j] != 1) {
                st = !pcover[p->offset + j] && j == 0 && !whole[i]
                         ? dt_errorf(DT_ERR_SHAPE, "%s: parameter '%s' is missing (a checkpoint of another model?)", path, p->name)
                         : dt_errorf(DT_ERR_FORMAT, "%s: parameter '%s' is %s at element %zu", path, p->name,
                                     pcover[p->offset + j] ? "written twice" : "missing", j);
                break;
            }
    }
    dt_free(whole);
    if (st) goto out;
    for (int k = 0; k < 2 && !st; k++) {
        if (!dst[k] || k >= want_states) continue;
        if (!cover[k]) {
            st = dt_errorf(DT_ERR_NOMEM, "out of memory");
            break;
        }
        for (int i = 0; i < m->n_params && !st; i++) {
            const dt_param *p = &m->params[i];
            for (size_t j = 0; j < p->numel; j++)
                if (cover[k][p->offset + j] != 1) {
                    st = dt_errorf(DT_ERR_FORMAT, "%s: optimizer state %s of '%s' is %s at element %zu",
                                   path, state_names(s.optim, k), p->name,
                                   cover[k][p->offset + j] ? "written twice" : "missing", j);
                    break;
                }
        }
    }
    if (st) goto out;
    memcpy(m->w, w, m->n * sizeof(float));
    if (state) *state = s;
out:
    dt_free(w);
    dt_free(cover[0]);
    dt_free(cover[1]);
    dt_free(pcover);
    files_free(&cf);
    return st;
}

/* Extra tensors named `key` (prefix: every name starting with it) into out
 * (n floats each): the first exact match, or the sum of the prefix matches.
 * *count: how many were read. */
static dt_status load_extras(const char *path, const char *key, bool prefix, float *out, size_t n, int *count) {
    ckpt_files cf;
    dt_ckpt_state s;
    *count = 0;
    dt_status st = open_ckpt(path, &s, &cf, NULL);
    if (st) return st;
    float *tmp = prefix ? dt_alloc_floats(n ? n : 1) : out;
    if (!tmp) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (prefix) memset(out, 0, n * sizeof(float));
    size_t kl = strlen(key);
    for (int fi = 0; fi < cf.n && !st && (prefix || !*count); fi++)
        for (int i = 0; i < dt_st_count(cf.f[fi]) && !st && (prefix || !*count); i++) {
            const dt_st_tensor *t = dt_st_get(cf.f[fi], i);
            if (prefix ? strncmp(t->name, key, kl) != 0 : strcmp(t->name, key) != 0) continue;
            if (t->numel != n) {
                st = dt_errorf(DT_ERR_SHAPE, "%s: '%s' holds %zu values, this run needs %zu", cf.names[fi], t->name, t->numel, n);
                break;
            }
            if ((st = dt_st_read_f32(cf.f[fi], t, tmp, n))) break;
            if (prefix)
                for (size_t j = 0; j < n; j++) out[j] += tmp[j];
            (*count)++;
        }
    if (prefix) dt_free(tmp);
    files_free(&cf);
    return st;
}

dt_status dt_ckpt_read_extra(const char *path, const char *name, float *out, size_t n, bool *found) {
    int count;
    dt_status st = load_extras(path, name, false, out, n, &count);
    *found = !st && count > 0;
    return st;
}

dt_status dt_ckpt_sum_extra(const char *path, const char *prefix, float *out, size_t n, int *count) {
    return load_extras(path, prefix, true, out, n, count);
}

dt_status dt_ckpt_inspect(const char *path, FILE *out) {
    ckpt_files cf;
    dt_ckpt_state s;
    json_t *man = NULL;
    dt_status st = open_ckpt(path, &s, &cf, &man);
    if (st) return st;
    fprintf(out, "checkpoint %s\n", path);
    fprintf(out, "  format %s, step %lld, sampler epoch %lld index %lld, seed %llu\n", DT_CKPT_FORMAT,
            (long long)s.step, (long long)s.epoch, (long long)s.index, (unsigned long long)s.seed);
    fprintf(out, "  written by %d rank%s (dp=%d pp=%d tp=%d) with ZeRO-%d, global batch %d, %s (step count %lld, %d state tensor%s per parameter)\n",
            s.world, s.world == 1 ? "" : "s", s.dp, s.pp, s.tp, s.zero, s.batch, s.optim == DT_OPTIM_ADAMW ? "adamw" : "sgd",
            (long long)s.optim_t, s.n_states, s.n_states == 1 ? "" : "s");
    json_t *model = json_object_get(man, "model");
    if (json_is_object(model)) {
        fprintf(out, "  model:");
        const char *k;
        json_t *v;
        json_object_foreach(model, k, v) if (strcmp(k, "format")) fprintf(out, " %s=%s", k, json_string_value(v));
        fprintf(out, "\n");
    }
    fprintf(out, "  config: %s\n", s.config[0] ? s.config : "{}");
    size_t total = 0;
    for (int i = 0; i < cf.n; i++) {
        int nt = dt_st_count(cf.f[i]);
        size_t bytes = 0, params = 0;
        for (int j = 0; j < nt; j++) {
            const dt_st_tensor *t = dt_st_get(cf.f[i], j);
            bytes += t->end - t->begin;
            if (strncmp(t->name, "optim.", 6) != 0) params += t->numel;
        }
        total += bytes;
        fprintf(out, "  %s: %d tensors (%zu parameter values), %.2f MB, every crc32c ok\n",
                strrchr(cf.names[i], '/') + 1, nt, params, (double)bytes / 1e6);
        for (int j = 0; j < nt; j++) {
            const dt_st_tensor *t = dt_st_get(cf.f[i], j);
            fprintf(out, "    %-56s %s [", t->name, dt_dtype_name(t->dtype));
            for (int d = 0; d < t->ndim; d++) fprintf(out, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            fprintf(out, "]\n");
        }
    }
    fprintf(out, "  total %.2f MB in %d file%s\n", (double)total / 1e6, cf.n, cf.n == 1 ? "" : "s");
    json_decref(man);
    files_free(&cf);
    return DT_OK;
}
