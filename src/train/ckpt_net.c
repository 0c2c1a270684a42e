/* Checkpoints on per-host local disks, with replicas on other hosts.
 *
 * At start-up the ranks find out whether --ckpt-dir is one directory for all
 * (a shared file system) or one per host: rank 0 leaves a probe file there
 * and every rank looks for it. Per host, the checkpoint writers meet over a
 * communicator of their own (the writer thread's, split from the world)
 * instead of the file system (dt_ckpt_net):
 *   - the file sizes: one all-reduce of p doubles;
 *   - replicas (--ckpt-replicas R): every file also goes to the lead rank of
 *     each of the R next hosts (host order, wrapping), which writes it to its
 *     own disk: R x (the checkpoint's bytes) on the network per checkpoint,
 *     so a checkpoint survives the loss of any R hosts;
 *   - the manifest, written by rank 0, is broadcast to every host's lead.
 * At resume, each host's lead lists what its disk holds; rank 0 picks the
 * newest checkpoint that the hosts present can assemble together and sends
 * out a plan; the files each host lacks are copied to it; then every rank
 * loads from its own disk as from a shared one (checksums verified). Cost of
 * a resume: the inventories (a few bytes per file) plus, per host, the
 * checkpoint's bytes it lacks. */
#include "ckpt_net.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG_REPLICA 0x7f00

/* ---- files --------------------------------------------------------------------- */

dt_status tr_net_read_file(const char *path, char **buf, int64_t bytes) {
    *buf = dt_malloc((size_t)(bytes > 0 ? bytes : 1));
    if (!*buf) return dt_errorf(DT_ERR_NOMEM, "out of memory for %s (%lld bytes)", path, (long long)bytes);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(*buf, 1, (size_t)bytes, f) : 0;
    if (f) fclose(f);
    if (!f || (int64_t)got != bytes) return dt_errorf(DT_ERR_IO, "cannot read %s: %s", path, f ? "short read" : strerror(errno));
    return DT_OK;
}

/* dir/name, written whole or not at all (temporary file, fsync, rename). */
dt_status tr_net_write_file(const char *dir, const char *name, const char *buf, int64_t bytes) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.part", path);
    dt_status st = dt_ckpt_mkdir_p(dir);
    if (st) return st;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return dt_errorf(DT_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    int64_t off = 0;
    while (off < bytes) {
        ssize_t w = write(fd, buf + off, (size_t)(bytes - off));
        if (w <= 0) break;
        off += w;
    }
    bool ok = off == bytes && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return dt_errorf(DT_ERR_IO, "cannot write %s: %s", path, strerror(ok ? errno : e));
    }
    return DT_OK;
}

static void file_name(char *buf, size_t n, int rank) { snprintf(buf, n, "rank-%05d.safetensors", rank); }

/* ---- the memory store ------------------------------------------------------------------ */

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1400];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(path);
        else unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* MEM/<cdir's name> for this checkpoint's replicas, every older one removed:
 * the store holds the newest checkpoint only. */
static void mem_prepare(const struct tr_net *t, const char *cdir, char *mdir, size_t n) {
    const char *base = strrchr(cdir, '/');
    base = base ? base + 1 : cdir;
    snprintf(mdir, n, "%s/%s", t->mem, base);
    DIR *d = opendir(t->mem);
    struct dirent *e;
    char old[1400];
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "ckpt-", 5) != 0 || strcmp(e->d_name, base) == 0) continue;
        snprintf(old, sizeof old, "%s/%s", t->mem, e->d_name);
        remove_tree(old);
    }
    if (d) closedir(d);
}

/* TR_MEM_ROOT/dtrain-ckpt-<host>-<hash of dir>, or "" without a memory file system. */
static void mem_path(const char *dir, const char *host, char *out, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = dir; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    struct stat sb;
    if (stat(TR_MEM_ROOT, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(TR_MEM_ROOT, W_OK) != 0) {
        out[0] = '\0';
        return;
    }
    snprintf(out, n, "%s/dtrain-ckpt-%.64s-%016llx", TR_MEM_ROOT, host, (unsigned long long)h);
}

dt_status tr_ckpt_net_end(tr_run *r) {
    struct tr_net *t = r->ck.net;
    if (!t) return DT_OK;
    if (t->mem[0] && t->lead[t->host[t->rank]] == t->rank) remove_tree(t->mem);
    double b = (double)t->replica_bytes;
    dt_status st = dt_allreduce_f64(r->world, &b, 1);
    r->res->ckpt_replica_bytes = b;
    if (!st && b > 0 && !r->quiet) dt_log(DT_LOG_INFO, "checkpoint replicas: %.2f MB sent to other hosts", b / 1e6);
    return st;
}

/* ---- the writer's hooks ------------------------------------------------------------ */

/* Does host h keep a replica of host s's files (the R hosts with a writer
 * after s, round the ring)? */
static bool keeps(const struct tr_net *t, int h, int s) {
    if (t->pos[h] < 0 || t->pos[s] < 0) return false;
    int d = (t->pos[h] - t->pos[s] + t->nring) % t->nring;
    return d >= 1 && d <= t->R;
}

static dt_status net_exchange(void *ctx, const char *cdir, const char *path, int64_t bytes, int64_t *sizes) {
    struct tr_net *t = ctx;
    double *v = dt_calloc((size_t)t->n, sizeof(double));
    if (!v) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    v[t->rank] = (double)(bytes + 1);
    dt_status st = dt_allreduce_f64(t->c, v, (size_t)t->n);
    for (int q = 0; q < t->n; q++) sizes[q] = (int64_t)v[q] - 1;
    dt_free(v);
    if (st || t->R == 0) return st;
    int me = t->host[t->rank];
    bool lead = t->wlead[me] == t->rank;
    char *mine = NULL, **in = dt_calloc((size_t)t->n, sizeof(char *));
    dt_req *reqs = dt_calloc((size_t)(t->n + t->R) + 1, sizeof(dt_req));
    int nr = 0;
    if (!in || !reqs) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (!st && path && bytes >= 0 && !(st = tr_net_read_file(path, &mine, bytes)))
        for (int k = 1; k <= t->R && !st; k++) {
            int to = t->wlead[t->ring[(t->pos[me] + k) % t->nring]];
            st = dt_isend(t->c, mine, (size_t)bytes, t->crank[to], TAG_REPLICA, &reqs[nr++]);
            t->replica_bytes += (uint64_t)bytes;
        }
    for (int q = 0; q < t->n && !st && lead; q++) {
        if (sizes[q] < 0 || !keeps(t, me, t->host[q])) continue;
        if (!(in[q] = dt_malloc((size_t)(sizes[q] > 0 ? sizes[q] : 1)))) st = dt_errorf(DT_ERR_NOMEM, "out of memory for a replica");
        else st = dt_irecv(t->c, in[q], (size_t)sizes[q], t->crank[q], TAG_REPLICA, &reqs[nr++]);
    }
    if (!st) st = dt_waitall(t->c, reqs, nr, "checkpoint replicas");
    if (st && nr > 0) {
        /* MPI may still read or write the buffers of requests that did not
         * complete: cancel them and leave the buffers to the process's end
         * (the job ends on this error). */
        dt_cancel(t->c, reqs, nr);
        return st;
    }
    char mdir[1024] = "";
    if (t->mem[0] && lead) mem_prepare(t, cdir, mdir, sizeof mdir);
    for (int q = 0; q < t->n && !st && lead; q++) {
        if (!in[q]) continue;
        char name[64];
        file_name(name, sizeof name, q);
        st = tr_net_write_file(cdir, name, in[q], sizes[q]);
        /* ... and held in memory, for a restart to read without the disk */
        if (!st && mdir[0] && tr_net_write_file(mdir, name, in[q], sizes[q])) mdir[0] = '\0';
    }
    for (int q = 0; in && q < t->n; q++) dt_free(in[q]);
    dt_free(in);
    dt_free(reqs);
    dt_free(mine);
    return st;
}

static dt_status net_manifest(void *ctx, const char *cdir, const char *mpath) {
    struct tr_net *t = ctx;
    int64_t len = 0;
    char *text = NULL;
    dt_status st = DT_OK;
    struct stat sb;
    if (t->rank == 0 && mpath && *mpath && stat(mpath, &sb) == 0) {
        len = (int64_t)sb.st_size;
        st = tr_net_read_file(mpath, &text, len);
        if (st) len = 0;
    }
    dt_status bs = dt_bcast(t->c, &len, sizeof len, 0, DT_ALGO_AUTO);
    if (!bs && len > 0 && t->rank != 0 && !(text = dt_malloc((size_t)len))) bs = dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (!bs && len > 0) bs = dt_bcast(t->c, text, (size_t)len, 0, DT_ALGO_AUTO);
    int me = t->host[t->rank];
    if (!bs && len > 0 && t->rank != 0 && t->wlead[me] == t->rank && me != t->host[0]) bs = tr_net_write_file(cdir, "manifest.json", text, len);
    dt_free(text);
    return st ? st : bs;
}

/* ---- set-up ------------------------------------------------------------------------ */

/* Is dir one directory for every rank? Rank 0 leaves a probe file in it. */
static dt_status dir_shared(dt_comm *world, const char *dir, bool *shared) {
    char probe[4200] = "";
    dt_status st = dt_ckpt_mkdir_p(dir);
    int rank = dt_comm_rank(world);
    if (rank == 0 && !st) {
        snprintf(probe, sizeof probe, "%s/.dtrain-probe-XXXXXX", dir);
        int fd = mkstemp(probe);
        if (fd < 0) st = dt_errorf(DT_ERR_IO, "cannot write in --ckpt-dir %s: %s", dir, strerror(errno));
        else close(fd);
    }
    char name[64] = "";
    if (rank == 0 && !st) snprintf(name, sizeof name, "%s", strrchr(probe, '/') + 1);
    double v[2] = {st ? 1.0 : 0.0, 0.0};
    dt_status bs = dt_bcast(world, name, sizeof name, 0, DT_ALGO_AUTO);
    char mine[4300];
    snprintf(mine, sizeof mine, "%s/%s", dir, name);
    v[1] = name[0] && access(mine, F_OK) == 0 ? 0.0 : 1.0;
    if (!bs) bs = dt_allreduce_f64(world, v, 2);
    if (rank == 0 && probe[0]) unlink(probe);
    if (st || bs) return st ? st : bs;
    if (v[0] > 0) return dt_errorf(DT_ERR_IO, "cannot write in --ckpt-dir %s", dir);
    *shared = v[1] == 0;
    return DT_OK;
}

/* Hosts, leads, which ranks write and the ring of hosts with a writer;
 * collective over the world (the writer flags). */
static dt_status net_layout(struct tr_net *t, tr_run *r, bool writer) {
    int n = r->n, nh = t->nhosts;
    double *w = dt_calloc((size_t)n, sizeof(double));
    if (!w) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    bool ok = (t->host = dt_calloc((size_t)n, sizeof(int))) && (t->crank = dt_calloc((size_t)n, sizeof(int))) &&
              (t->lead = dt_calloc((size_t)nh, sizeof(int))) && (t->wlead = dt_calloc((size_t)nh, sizeof(int))) &&
              (t->ring = dt_calloc((size_t)nh, sizeof(int))) && (t->pos = dt_calloc((size_t)nh, sizeof(int)));
    w[r->rank] = writer ? 1.0 : 0.0;
    /* every rank takes part, so none waits for one that ran out of memory */
    dt_status st = dt_allreduce_f64(r->world, w, (size_t)n);
    if (!ok) {
        dt_free(w);
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    }
    for (int h = 0; h < nh; h++) t->lead[h] = t->wlead[h] = t->pos[h] = -1;
    for (int q = 0, k = 0; q < n; q++) {
        int h = t->host[q] = dt_comm_host_index(r->world, q);
        if (t->lead[h] < 0) t->lead[h] = q;
        t->crank[q] = w[q] > 0 ? k++ : -1;
        if (w[q] > 0 && t->wlead[h] < 0) t->wlead[h] = q;
    }
    for (int h = 0; h < nh; h++)
        if (t->wlead[h] >= 0) {
            t->pos[h] = t->nring;
            t->ring[t->nring++] = h;
        }
    dt_free(w);
    return st;
}

static void log_storage(const struct tr_net *t, const char *dir, int asked) {
    if (t->nhosts < 2) return;
    if (asked > t->R)
        dt_log(DT_LOG_INFO, "--ckpt-replicas %d: only %d other host%s with checkpoint files, so %d replica%s", asked,
               t->nring - 1, t->nring == 2 ? "" : "s", t->R, t->R == 1 ? "" : "s");
    char next[32] = "host";
    if (t->R > 1) snprintf(next, sizeof next, "%d hosts", t->R);
    if (t->R)
        dt_log(DT_LOG_INFO, "%s is local to each of the %d hosts: every host keeps its ranks' checkpoint files, and a copy of them on the next %s",
               dir, t->nhosts, next);
    else
        dt_log(DT_LOG_WARN, "%s is local to each of the %d hosts and no host keeps a copy of another's files (--ckpt-replicas %d): "
                            "the checkpoint files of a host that is lost are lost with it", dir, t->nhosts, asked);
}

dt_status tr_ckpt_storage(tr_run *r, bool writer) {
    const dt_train_cfg *c = r->c;
    if (!c->ckpt_dir) return DT_OK;
    int nh = dt_comm_nhosts(r->world);
    char mem[512];
    struct stat sb;
    mem_path(c->ckpt_dir, dt_comm_host(r->world, r->rank), mem, sizeof mem);
    /* One host that holds replicas in memory (a job that lost the others)
     * resumes through them as well. */
    bool held = nh == 1 && c->resume && mem[0] && stat(mem, &sb) == 0;
    bool shared = true;
    dt_status st = nh > 1 ? dir_shared(r->world, c->ckpt_dir, &shared) : DT_OK;
    if (st) return st;
    if (shared && !held) {
        if (c->ckpt_replicas > 0 && r->lead)
            dt_log(DT_LOG_INFO, "--ckpt-replicas %d: %s: no replica is needed", c->ckpt_replicas,
                   nh > 1 ? "the checkpoint directory is one for every host (a shared file system)" : "every rank is on one host");
        return DT_OK;
    }
    if (!dt_comm_concurrent())
        return dt_errorf(DT_ERR_UNSUPPORTED, "--ckpt-dir %s is each host's own disk, and writing checkpoints there needs an MPI "
                                             "with MPI_THREAD_MULTIPLE (this one has less): use a shared directory", c->ckpt_dir);
    struct tr_net *t = dt_calloc(1, sizeof *t);
    if (!t) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    r->ck.net = t;
    snprintf(t->mem, sizeof t->mem, "%s", mem);
    t->rank = r->rank;
    t->n = r->n;
    t->nhosts = nh;
    if ((st = net_layout(t, r, writer))) return st;
    t->R = c->ckpt_replicas < t->nring - 1 ? c->ckpt_replicas : t->nring - 1;
    if (t->R < 0) t->R = 0;
    if (r->lead) log_storage(t, c->ckpt_dir, c->ckpt_replicas);
    return dt_comm_split(r->world, writer ? 0 : 1, r->rank, &t->c);
}

void tr_ckpt_net_attach(tr_run *r, dt_ckpt_writer *w) {
    struct tr_net *t = r->ck.net;
    if (!t || !w) return;
    dt_comm_set_timeout(t->c, 10 * r->c->timeout);
    dt_ckpt_net net = {.ctx = t, .host_lead = t->wlead[t->host[t->rank]] == t->rank,
                       .exchange = net_exchange, .manifest = net_manifest};
    dt_ckpt_writer_set_net(w, &net);
}

void tr_ckpt_net_free(tr_run *r) {
    struct tr_net *t = r->ck.net;
    if (!t) return;
    dt_comm_destroy(t->c);
    dt_free(t->host);
    dt_free(t->lead);
    dt_free(t->crank);
    dt_free(t->wlead);
    dt_free(t->ring);
    dt_free(t->pos);
    dt_free(t);
    r->ck.net = NULL;
}
