/* Persisting a checkpoint snapshot (the writer thread's work): this rank's
 * safetensors file (whole parameters, optimizer-state slices, extra tensors,
 * a crc32c per tensor), then on rank 0 the wait for every writer's file, the
 * manifest written last and atomically (the checkpoint counts from then on),
 * and the pruning of old checkpoints. Cost: one pass over the bytes this rank
 * owns for the checksums plus one write and fsync of them; rank 0 polls for
 * the other files every 20 ms. */
#include "ckpt_internal.h"

#include "dtrain/crc32c.h"
#include "dtrain/weights.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Pruning looks at no more than this many checkpoint directories. */
#define MAX_LISTED 4096

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

dt_status dt_ckpt_mkdir_p(const char *dir) {
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

/* ---- this rank's file ---------------------------------------------------------- */

/* What one rank file collects before it is written. */
typedef struct rank_out {
    dt_st_writer *sw;
    json_t *crcs, *slices;     /* the "crc32c" and "slices" metadata */
    char (*names)[160];        /* slice names: must outlive sw */
    size_t n_names;
} rank_out;

static dt_status add_tensor(rank_out *ro, const char *name, int ndim, const int64_t *shape,
                            const float *data, size_t numel) {
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", dt_crc32c(0, data, numel * sizeof(float)));
    json_object_set_new(ro->crcs, name, json_string(hex));
    return dt_st_writer_add(ro->sw, name, DT_F32, ndim, shape, data);
}

/* Whole parameters under their PyTorch names (rank 0's, or this stage's). */
static dt_status add_params(const dt_ckpt_writer *w, rank_out *ro) {
    const dt_model *m = w->model;
    dt_status st = DT_OK;
    for (int i = 0; i < m->n_params && !st; i++) {
        const dt_param *p = &m->params[i];
        if (w->mask[i]) st = add_tensor(ro, p->name, p->ndim, p->shape, w->params + p->offset, p->numel);
    }
    return st;
}

/* The overlap [a, e) of run r with parameter p as one 1-D slice of state k
 * (k < 0: the parameter itself), recorded in the "slices" metadata. */
static dt_status add_slice(const dt_ckpt_writer *w, rank_out *ro, int k, int r, const dt_param *p,
                           size_t a, size_t e) {
    size_t lo = w->runs[3 * r], so = w->runs[3 * r + 2];
    char *nm = ro->names[ro->n_names++];
    const char *state = k < 0 ? "param" : dt_ckpt_state_name(w->state.optim, k);
    if (k < 0) snprintf(nm, sizeof ro->names[0], "%s@%zu", p->name, a - p->offset);
    else snprintf(nm, sizeof ro->names[0], "optim.%s.%s@%zu", state, p->name, a - p->offset);
    int64_t shp[1] = {(int64_t)(e - a)};
    const float *src = k < 0 ? w->params + a : w->st[k] + so + (a - lo);
    dt_status st = add_tensor(ro, nm, 1, shp, src, e - a);
    json_t *sl = json_object();
    json_t *gs = json_array();
    for (int d = 0; d < p->ndim; d++) json_array_append_new(gs, json_integer(p->shape[d]));
    json_object_set_new(sl, "param", json_string(p->name));
    json_object_set_new(sl, "state", json_string(state));
    json_object_set_new(sl, "offset", json_integer((json_int_t)(a - p->offset)));
    json_object_set_new(sl, "global_shape", gs);
    json_object_set_new(ro->slices, nm, sl);
    return st;
}

/* Optimizer slices: one per (state, run, parameter) overlap, so any layout can
 * reassemble the logical tensors. */
static dt_status add_slices(const dt_ckpt_writer *w, rank_out *ro) {
    const dt_model *m = w->model;
    size_t max_slices = (size_t)w->nruns * (size_t)m->n_params * (size_t)(w->n_states + 1);
    ro->names = dt_calloc(max_slices ? max_slices : 1, sizeof *ro->names);
    if (!ro->names) return dt_errorf(DT_ERR_NOMEM, "out of memory writing a checkpoint");
    dt_status st = DT_OK;
    for (int k = w->params_too ? -1 : 0; k < w->n_states && !st; k++)
        for (int r = 0; r < w->nruns && !st; r++) {
            size_t lo = w->runs[3 * r], len = w->runs[3 * r + 1];
            for (int i = 0; i < m->n_params && !st; i++) {
                const dt_param *p = &m->params[i];
                size_t a = p->offset > lo ? p->offset : lo;
                size_t e = p->offset + p->numel < lo + len ? p->offset + p->numel : lo + len;
                if (a < e) st = add_slice(w, ro, k, r, p, a, e);
            }
        }
    return st;
}

static dt_status add_extras(const dt_ckpt_writer *w, rank_out *ro) {
    dt_status st = DT_OK;
    for (int i = 0; i < w->n_extra && !st; i++) {
        int64_t shp[1] = {(int64_t)w->extra_len[i]};
        st = add_tensor(ro, w->extra_name[i], 1, shp, w->extra_data[i], w->extra_len[i]);
    }
    return st;
}

/* The file's metadata: format, who wrote it, checksums, slices, the model. */
static dt_status add_meta(const dt_ckpt_writer *w, rank_out *ro) {
    char *crc_text = json_dumps(ro->crcs, JSON_COMPACT | JSON_SORT_KEYS);
    char *slice_text = json_dumps(ro->slices, JSON_COMPACT | JSON_SORT_KEYS);
    char num[32];
    dt_status st = dt_st_writer_meta(ro->sw, "dtrain_ckpt", DT_CKPT_FORMAT);
    snprintf(num, sizeof num, "%d", w->rank);
    if (!st) st = dt_st_writer_meta(ro->sw, "rank", num);
    snprintf(num, sizeof num, "%d", w->world);
    if (!st) st = dt_st_writer_meta(ro->sw, "world", num);
    snprintf(num, sizeof num, "%lld", (long long)w->state.step);
    if (!st) st = dt_st_writer_meta(ro->sw, "step", num);
    if (!st) st = dt_st_writer_meta(ro->sw, "crc32c", crc_text ? crc_text : "{}");
    if (!st) st = dt_st_writer_meta(ro->sw, "slices", slice_text ? slice_text : "{}");
    const char *kv[48];
    char buf[1024];
    int nkv = dt_weights_cfg_meta(&w->model->cfg, kv, 24, buf, sizeof buf);
    for (int i = 0; i < nkv && !st; i++) st = dt_st_writer_meta(ro->sw, kv[2 * i], kv[2 * i + 1]);
    free(crc_text);
    free(slice_text);
    return st;
}

/* Writes CDIR/rank-<rank>.safetensors. */
static dt_status write_rank_file(const dt_ckpt_writer *w, const char *cdir) {
    rank_out ro = {.crcs = json_object(), .slices = json_object()};
    dt_status st = dt_st_writer_create(&ro.sw);
    if (!st) st = add_params(w, &ro);
    if (!st) st = add_slices(w, &ro);
    if (!st) st = add_extras(w, &ro);
    if (!st) st = add_meta(w, &ro);
    char path[4200];
    dt_ckpt_rank_file(path, sizeof path, cdir, w->rank);
    if (!st) st = dt_st_writer_write(ro.sw, path);
    dt_st_writer_destroy(ro.sw);
    json_decref(ro.crcs);
    json_decref(ro.slices);
    dt_free(ro.names);
    return st;
}

/* ---- rank 0: the manifest -------------------------------------------------------- */

/* Waits (up to w->timeout) for every writer's file; *files gets their names and
 * sizes in writer order, for the manifest. */
static dt_status await_files(const dt_ckpt_writer *w, const char *cdir, json_t **files) {
    *files = json_array();
    double t0 = dt_now();
    for (int wi = 0; wi < w->n_writers; wi++) {
        int r = w->writers[wi];
        char path[4200];
        dt_ckpt_rank_file(path, sizeof path, cdir, r);
        struct stat sb;
        while (stat(path, &sb) != 0) {
            if (dt_now() - t0 > w->timeout) {
                json_decref(*files);
                *files = NULL;
                return dt_errorf(DT_ERR_TIMEOUT, "checkpoint at step %lld: rank %d's file never appeared in %s; the checkpoint stays incomplete",
                                 (long long)w->state.step, r, cdir);
            }
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        json_t *f = json_object();
        const char *base = strrchr(path, '/') + 1;
        json_object_set_new(f, "name", json_string(base));
        json_object_set_new(f, "bytes", json_integer((json_int_t)sb.st_size));
        json_array_append_new(*files, f);
    }
    return DT_OK;
}

/* The manifest's JSON (takes files). */
static json_t *manifest_json(const dt_ckpt_writer *w, json_t *files) {
    const dt_ckpt_state *s = &w->state;
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
    if (s->loss_scale > 0)
        json_object_set_new(man, "loss_scale", json_pack("{s:f, s:I}", "scale", (double)s->loss_scale, "clean",
                                                          (json_int_t)s->scale_clean));
    char lay[96];
    snprintf(lay, sizeof lay, "dp=%d,pp=%d,tp=%d", s->dp, s->pp, s->tp);
    json_object_set_new(man, "layout", json_string(lay));
    json_object_set_new(man, "written", json_real(dt_wall_time()));
    const char *kv[48];
    char buf[1024];
    int nkv = dt_weights_cfg_meta(&w->model->cfg, kv, 24, buf, sizeof buf);
    json_t *model = json_object();
    for (int i = 0; i < nkv; i++) json_object_set_new(model, kv[2 * i], json_string(kv[2 * i + 1]));
    json_object_set_new(man, "model", model);
    json_t *cfg = json_loads(s->config, 0, NULL);
    json_object_set_new(man, "config", cfg ? cfg : json_object());
    json_object_set_new(man, "files", files);
    return man;
}

/* Writes CDIR/manifest.json last: from then on the checkpoint counts. */
static dt_status write_manifest(const dt_ckpt_writer *w, const char *cdir, json_t *files) {
    json_t *man = manifest_json(w, files);
    char *text = json_dumps(man, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(man);
    char path[4200];
    snprintf(path, sizeof path, "%s/" MANIFEST, cdir);
    dt_status st = text ? write_atomic(cdir, path, text) : dt_errorf(DT_ERR_NOMEM, "out of memory");
    free(text);
    if (!st) st = fsync_dir(w->dir);
    return st;
}

/* ---- retention ---------------------------------------------------------------------- */

/* Steps of the ckpt-<step> directories in dir (at most max), newest first. */
static int list_steps(const char *dir, int64_t *steps, int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        long long sv;
        char tail;
        if (sscanf(de->d_name, "ckpt-%lld%c", &sv, &tail) == 1) steps[n++] = sv;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

/* Removes checkpoint directory c, its manifest first so that a half-removed
 * checkpoint never looks complete. */
static void remove_ckpt(const char *c, const char *manifest) {
    unlink(manifest);
    DIR *dd = opendir(c);
    if (dd) {
        struct dirent *de;
        while ((de = readdir(dd))) {
            if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2]))) continue;
            char fp[4400];
            snprintf(fp, sizeof fp, "%s/%s", c, de->d_name);
            unlink(fp);
        }
        closedir(dd);
    }
    rmdir(c);
}

/* Keeps the newest `keep` complete checkpoints, and anything newer than the
 * oldest of them (possibly still being written). Best effort: errors are
 * ignored. */
static void prune(const dt_ckpt_writer *w) {
    int64_t steps[MAX_LISTED];
    int nsteps = list_steps(w->dir, steps, MAX_LISTED);
    int complete = 0;
    for (int i = 0; i < nsteps; i++) {
        char c2[4096], mf[4200];
        dt_ckpt_dir_name(c2, sizeof c2, w->dir, steps[i]);
        snprintf(mf, sizeof mf, "%s/" MANIFEST, c2);
        struct stat sb;
        bool done = stat(mf, &sb) == 0;
        if (complete >= w->keep && steps[i] < w->state.step) remove_ckpt(c2, mf);
        else if (done) complete++;
    }
}

/* The writers' files as the manifest lists them, from the sizes the net
 * exchanged (the lead cannot see the other hosts' disks). */
static dt_status files_from_sizes(const dt_ckpt_writer *w, const char *cdir, const int64_t *sizes, json_t **files) {
    *files = json_array();
    for (int wi = 0; wi < w->n_writers; wi++) {
        int r = w->writers[wi];
        if (sizes[r] < 0)
            return dt_errorf(DT_ERR_IO, "checkpoint at step %lld: rank %d wrote no file into %s; the checkpoint stays incomplete",
                             (long long)w->state.step, r, cdir);
        char path[4200];
        dt_ckpt_rank_file(path, sizeof path, cdir, r);
        json_t *f = json_object();
        json_object_set_new(f, "name", json_string(strrchr(path, '/') + 1));
        json_object_set_new(f, "bytes", json_integer((json_int_t)sizes[r]));
        json_array_append_new(*files, f);
    }
    return DT_OK;
}

/* A directory per host: every rank takes part (the net moves sizes, replicas
 * and the manifest); each host's lead prunes its own directory. */
static dt_status persist_net(dt_ckpt_writer *w, const char *cdir) {
    char path[4200];
    int64_t bytes = -1;
    dt_status st = dt_ckpt_mkdir_p(cdir);
    if (!st && w->writes) {
        dt_ckpt_rank_file(path, sizeof path, cdir, w->rank);
        struct stat sb;
        if (!(st = write_rank_file(w, cdir))) bytes = stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
    }
    int64_t *sizes = dt_calloc((size_t)w->world, sizeof(int64_t));
    if (!sizes) return st ? st : dt_errorf(DT_ERR_NOMEM, "out of memory");
    /* A rank whose write failed still takes part, so the others do not wait
     * for it; its -1 makes the lead leave the checkpoint incomplete. */
    dt_status xs = w->net.exchange(w->net.ctx, cdir, w->writes && !st ? path : NULL, st ? -1 : bytes, sizes);
    if (!st) st = xs;
    json_t *files = NULL;
    char mpath[4200] = "";
    if (!st && w->rank == 0 && !(st = files_from_sizes(w, cdir, sizes, &files))) {
        st = write_manifest(w, cdir, files);
        snprintf(mpath, sizeof mpath, "%s/" MANIFEST, cdir);
    } else {
        json_decref(files);
    }
    dt_free(sizes);
    dt_status ms = w->net.manifest(w->net.ctx, cdir, st ? NULL : mpath);
    if (!st) st = ms;
    if (!st && w->net.host_lead && w->keep > 0) prune(w);
    return st;
}

dt_status dt_ckpt_persist(dt_ckpt_writer *w) {
    char cdir[4096];
    dt_ckpt_dir_name(cdir, sizeof cdir, w->dir, w->state.step);
    if (w->net.exchange) return persist_net(w, cdir);
    if (!w->writes) return DT_OK;
    dt_status st = dt_ckpt_mkdir_p(cdir);
    if (!st) st = write_rank_file(w, cdir);
    if (st || w->rank != 0) return st;
    json_t *files = NULL;
    if ((st = await_files(w, cdir, &files))) return st;
    if ((st = write_manifest(w, cdir, files))) return st;
    if (w->keep > 0) prune(w);
    return DT_OK;
}
