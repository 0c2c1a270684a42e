/* Resuming from checkpoints kept on per-host local disks (ckpt_net.c says how
 * they are written). Each host's lead lists its disk: one line per file of
 * every ckpt-* directory, and for a manifest the files it names. Rank 0 takes
 * the newest checkpoint (or the one asked for) that the hosts present can
 * assemble together, and broadcasts a plan: for each host, the files it lacks
 * and a host that has each. The files move lead to lead; afterwards every
 * host holds the whole checkpoint and every rank loads it from its own disk.
 * Cost: the inventories (about 40 bytes per file) and the bytes each host lacks. */
#include "ckpt_net.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG_INVENTORY 0x7f01
#define TAG_GATHER 0x7f02
#define MAX_STEPS 256

/* ---- this host's inventory ----------------------------------------------------------- */

/* Appends printf-style text to *buf (grown as needed); false when out of memory. */
static bool put(char **buf, size_t *len, size_t *cap, const char *fmt, const char *a, long long b, const char *c) {
    int need = snprintf(NULL, 0, fmt, a, b, c);
    if (*len + (size_t)need + 1 > *cap) {
        size_t nc = (*cap + (size_t)need + 1) * 2;
        char *nb = dt_realloc_array(*buf, nc, 1);
        if (!nb) return false;
        *buf = nb;
        *cap = nc;
    }
    snprintf(*buf + *len, *cap - *len, fmt, a, b, c);
    *len += (size_t)need;
    return true;
}

/* "name:bytes,name:bytes" of the files a manifest names ("" if unreadable). */
static void manifest_list(const char *mpath, char *out, size_t n) {
    out[0] = '\0';
    json_t *man = json_load_file(mpath, 0, NULL), *files = man ? json_object_get(man, "files") : NULL;
    size_t len = 0, i;
    json_t *f;
    json_array_foreach(files, i, f) {
        const char *name = json_string_value(json_object_get(f, "name"));
        json_int_t bytes = json_integer_value(json_object_get(f, "bytes"));
        if (!name || strchr(name, ' ') || strchr(name, ',')) continue;
        int w = snprintf(out + len, n - len, "%s%s:%lld", len ? "," : "", name, (long long)bytes);
        if (w < 0 || (size_t)w >= n - len) {
            out[0] = '\0';
            break;
        }
        len += (size_t)w;
    }
    json_decref(man);
}

/* "STEP NAME BYTES [LIST]\n" for every file of every ckpt-* directory in dir,
 * then in the memory store mem (replicas; "" none). */
static char *inventory(const char *dir, const char *mem) {
    size_t len = 0, cap = 256;
    char *buf = dt_malloc(cap), list[16384];
    if (!buf) return NULL;
    buf[0] = '\0';
    for (int pass = 0; pass < 2 && buf; pass++, dir = mem) {
    if (pass == 1 && !mem[0]) break;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long long step;
        char tail;
        if (sscanf(e->d_name, "ckpt-%lld%c", &step, &tail) != 1) continue;
        char cdir[4200], path[4500], sstep[32];
        snprintf(cdir, sizeof cdir, "%.3900s/%.290s", dir, e->d_name);
        snprintf(sstep, sizeof sstep, "%lld", step);
        DIR *cd = opendir(cdir);
        struct dirent *f;
        while (cd && (f = readdir(cd))) {
            bool man = strcmp(f->d_name, "manifest.json") == 0;
            struct stat sb;
            snprintf(path, sizeof path, "%s/%s", cdir, f->d_name);
            if (!man && (strncmp(f->d_name, "rank-", 5) != 0 || strstr(f->d_name, ".part"))) continue;
            if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
            if (man) manifest_list(path, list, sizeof list);
            if (man && !list[0]) continue;
            bool ok = put(&buf, &len, &cap, "%s ", sstep, 0, "") &&
                      put(&buf, &len, &cap, "%s %lld %s\n", f->d_name, (long long)sb.st_size, man ? list : "-");
            if (!ok) {
                dt_free(buf);
                buf = NULL;
                break;
            }
        }
        if (cd) closedir(cd);
        if (!buf) break;
    }
    if (d) closedir(d);
    }
    return buf;
}

/* ---- rank 0: choose and plan --------------------------------------------------------- */

/* Does host h hold name (bytes) of step s, according to the inventories? */
static bool holds(char *const *inv, int h, long long s, const char *name, long long bytes) {
    char want[400];
    snprintf(want, sizeof want, "%lld %s %lld ", s, name, bytes);
    const char *p = inv[h];
    while (p && *p) {
        if (strncmp(p, want, strlen(want)) == 0) return true;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return false;
}

/* The plan for step s with manifest list L: "src dst name bytes" lines; false
 * (and why, in missing) when some file is on no host. */
static bool plan_step(const struct tr_net *t, char *const *inv, long long s, const char *L, long long mbytes,
                      char **plan, size_t *len, size_t *cap, char *missing, size_t mn) {
    char list[16384], sstep[32];
    snprintf(list, sizeof list, "%.16300s,manifest.json:%lld", L, mbytes);
    snprintf(sstep, sizeof sstep, "%lld", s);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        char *colon = strrchr(tok, ':');
        if (!colon) return false;
        *colon = '\0';
        long long bytes = atoll(colon + 1);
        int src = -1;
        for (int h = 0; h < t->nhosts && src < 0; h++)
            if (holds(inv, h, s, tok, bytes)) src = h;
        if (src < 0) {
            snprintf(missing, mn, "%s is on none of the %d hosts here", tok, t->nhosts);
            return false;
        }
        for (int h = 0; h < t->nhosts; h++) {
            if (holds(inv, h, s, tok, bytes)) continue;
            char line[600];
            snprintf(line, sizeof line, "%d %d %s", t->lead[src], t->lead[h], tok);
            if (!put(plan, len, cap, "%s %lld%s\n", line, bytes, "")) return false;
        }
    }
    return true;
}

/* The newest step (or want) the hosts can assemble: "STEP s\n" + plan lines. */
static char *choose(const struct tr_net *t, char *const *inv, long long want, bool lead) {
    long long steps[MAX_STEPS];
    int ns = 0;
    for (int h = 0; h < t->nhosts; h++)
        for (const char *p = inv[h]; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : "") {
            long long s;
            char name[300];
            if (sscanf(p, "%lld %299s", &s, name) != 2 || strcmp(name, "manifest.json") != 0) continue;
            bool seen = false;
            int low = 0; /* the newest MAX_STEPS are candidates: a full list drops its oldest */
            for (int i = 0; i < ns; i++) {
                seen |= steps[i] == s;
                if (steps[i] < steps[low]) low = i;
            }
            if (seen || (want >= 0 && s != want)) continue;
            if (ns < MAX_STEPS) steps[ns++] = s;
            else if (s > steps[low]) steps[low] = s;
        }
    for (int i = 0; i < ns; i++) /* newest first */
        for (int j = i + 1; j < ns; j++)
            if (steps[j] > steps[i]) {
                long long x = steps[i];
                steps[i] = steps[j];
                steps[j] = x;
            }
    for (int i = 0; i < ns; i++) {
        size_t len = 0, cap = 256;
        char *plan = dt_malloc(cap), missing[400] = "";
        if (!plan) return NULL;
        snprintf(plan, cap, "STEP %lld\n", steps[i]);
        len = strlen(plan);
        /* the list of the first manifest of this step found */
        char L[16384] = "";
        long long mbytes = 0;
        for (int h = 0; h < t->nhosts && !L[0]; h++)
            for (const char *p = inv[h]; p && *p && !L[0]; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : "") {
                long long s;
                char name[300];
                if (sscanf(p, "%lld %299s %lld %16383s", &s, name, &mbytes, L) != 4 || s != steps[i] || strcmp(name, "manifest.json"))
                    L[0] = '\0';
            }
        if (L[0] && plan_step(t, inv, steps[i], L, mbytes, &plan, &len, &cap, missing, sizeof missing)) return plan;
        if (lead)
            dt_log(DT_LOG_WARN, "checkpoint at step %lld cannot be assembled from the hosts here: %s "
                                "(--ckpt-replicas R keeps every file on R more hosts)", steps[i], missing[0] ? missing : "its manifest is unreadable");
        dt_free(plan);
    }
    char *none = dt_malloc(16);
    if (none) snprintf(none, 16, "STEP -1\n");
    return none;
}

/* ---- everyone: inventories in, plan out, files moved ------------------------------------- */

/* Rank 0 receives every lead's inventory (inv[host]); the others send theirs. */
static dt_status gather_inventories(dt_comm *w, const struct tr_net *t, const char *mine, char **inv) {
    double *len = dt_calloc((size_t)t->n, sizeof(double));
    dt_req *reqs = dt_calloc((size_t)t->n + 1, sizeof(dt_req));
    if (!len || !reqs) {
        dt_free(len);
        dt_free(reqs);
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    }
    len[t->rank] = mine ? (double)strlen(mine) : 0;
    dt_status st = dt_allreduce_f64(w, len, (size_t)t->n);
    int nr = 0;
    for (int h = 0; h < t->nhosts && !st; h++) {
        int q = t->lead[h];
        size_t l = (size_t)len[q];
        if (t->rank == 0) {
            if (!(inv[h] = dt_calloc(l + 1, 1))) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
            else if (q == 0) memcpy(inv[h], mine ? mine : "", l);
            else if (l) st = dt_irecv(w, inv[h], l, q, TAG_INVENTORY, &reqs[nr++]);
        } else if (q == t->rank && l) {
            st = dt_isend(w, mine, l, 0, TAG_INVENTORY, &reqs[nr++]);
        }
    }
    if (!st) st = dt_waitall(w, reqs, nr, "checkpoint inventories");
    dt_free(len);
    dt_free(reqs);
    return st;
}

/* Moves the files of the plan (lines after the first) and writes what this
 * rank receives into cdir, manifests last. */
static dt_status run_plan(dt_comm *w, const struct tr_net *t, char *plan, const char *cdir, const char *mdir) {
    int lines = 0;
    for (char *p = plan; *p; p++) lines += *p == '\n';
    dt_req *reqs = dt_calloc((size_t)lines + 1, sizeof(dt_req));
    char **buf = dt_calloc((size_t)lines + 1, sizeof(char *)), (*name)[300] = dt_calloc((size_t)lines + 1, 300);
    long long *bytes = dt_calloc((size_t)lines + 1, sizeof(long long));
    dt_status st = reqs && buf && name && bytes ? DT_OK : dt_errorf(DT_ERR_NOMEM, "out of memory");
    int nr = 0, i = 0;
    char *save = NULL;
    strtok_r(plan, "\n", &save); /* STEP s */
    for (char *l = strtok_r(NULL, "\n", &save); l && !st; l = strtok_r(NULL, "\n", &save), i++) {
        int src, dst;
        if (sscanf(l, "%d %d %299s %lld", &src, &dst, name[i], &bytes[i]) != 4) continue;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", cdir, name[i]);
        if (src == t->rank && access(path, R_OK) != 0 && mdir[0]) snprintf(path, sizeof path, "%s/%s", mdir, name[i]);
        if (src == t->rank && !(st = tr_net_read_file(path, &buf[i], bytes[i])))
            st = dt_isend(w, buf[i], (size_t)bytes[i], dst, TAG_GATHER, &reqs[nr++]);
        else if (dst == t->rank && !(buf[i] = dt_malloc((size_t)(bytes[i] > 0 ? bytes[i] : 1))))
            st = dt_errorf(DT_ERR_NOMEM, "out of memory for %s", name[i]);
        else if (dst == t->rank)
            st = dt_irecv(w, buf[i], (size_t)bytes[i], src, TAG_GATHER, &reqs[nr++]);
        if (dst != t->rank && src != t->rank) name[i][0] = '\0';
        if (src == t->rank) name[i][0] = '\0';
    }
    if (!st) st = dt_waitall(w, reqs, nr, "copying checkpoint files between hosts");
    for (int pass = 0; pass < 2 && !st; pass++) /* the manifest last: it makes the copy count */
        for (int k = 0; k < i && !st; k++)
            if (name[k][0] && (strcmp(name[k], "manifest.json") == 0) == (pass == 1))
                st = tr_net_write_file(cdir, name[k], buf[k], bytes[k]);
    for (int k = 0; buf && k < lines; k++) dt_free(buf[k]);
    dt_free(buf);
    dt_free(name);
    dt_free(bytes);
    dt_free(reqs);
    return st;
}

/* The host lead's view of the checkpoint for the load: MEM/view/ckpt-S with a
 * link to each file, to the replica held in memory where there is one, else
 * to the disk. Returns the number of files from memory (0: no view made). */
static int make_view(const char *plan_list, const char *cdir, const char *mdir, const char *view) {
    int from_mem = 0;
    char path[4600], target[4600];
    for (const char *p = plan_list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
        char name[300];
        if (sscanf(p, "%299[^:,]", name) != 1) continue;
        snprintf(path, sizeof path, "%s/%s", mdir, name);
        from_mem += access(path, R_OK) == 0;
    }
    if (!from_mem) return 0;
    if (dt_ckpt_mkdir_p(view) != DT_OK) return 0;
    for (const char *p = plan_list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
        char name[300];
        if (sscanf(p, "%299[^:,]", name) != 1) continue;
        snprintf(target, sizeof target, "%s/%s", mdir, name);
        if (access(target, R_OK) != 0) snprintf(target, sizeof target, "%s/%s", cdir, name);
        snprintf(path, sizeof path, "%s/%s", view, name);
        unlink(path);
        if (symlink(target, path) != 0) return 0;
    }
    snprintf(target, sizeof target, "%s/manifest.json", cdir);
    snprintf(path, sizeof path, "%s/manifest.json", view);
    unlink(path);
    return symlink(target, path) == 0 ? from_mem : 0;
}

dt_status tr_ckpt_gather(tr_run *r, char *path, size_t n, bool *found) {
    const struct tr_net *t = r->ck.net;
    const dt_train_cfg *c = r->c;
    *found = false;
    char dir[4096];
    long long want = -1;
    if (strcmp(c->resume, "auto") == 0) {
        snprintf(dir, sizeof dir, "%s", c->ckpt_dir);
    } else {
        snprintf(dir, sizeof dir, "%s", c->resume);
        size_t l = strlen(dir);
        while (l > 1 && dir[l - 1] == '/') dir[--l] = '\0';
        char *slash = strrchr(dir, '/');
        if (!slash || sscanf(slash + 1, "ckpt-%lld", &want) != 1)
            return dt_errorf(DT_ERR_INVALID, "--resume %s: with a checkpoint directory on each host's own disk, name a DIR/ckpt-STEP", c->resume);
        *slash = '\0';
    }
    bool lead = t->lead[t->host[t->rank]] == t->rank;
    char *mine = lead ? inventory(dir, t->mem) : NULL, **inv = dt_calloc((size_t)t->nhosts, sizeof(char *)), *plan = NULL;
    dt_status st = inv && (!lead || mine) ? gather_inventories(r->world, t, mine, inv) : dt_errorf(DT_ERR_NOMEM, "out of memory");
    int64_t len = 0;
    if (!st && t->rank == 0) {
        plan = choose(t, inv, want, r->lead);
        if (!plan) st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        else len = (int64_t)strlen(plan) + 1;
    }
    /* Every rank takes part in the broadcasts, even after a failure on rank 0
     * (len 0 then), so that no rank waits for the others. */
    dt_status bs = dt_bcast(r->world, &len, sizeof len, 0, DT_ALGO_AUTO);
    if (!bs && len > 0 && t->rank != 0 && !(plan = dt_calloc((size_t)len, 1))) bs = dt_errorf(DT_ERR_NOMEM, "out of memory");
    if (!bs && len > 0) bs = dt_bcast(r->world, plan, (size_t)len, 0, DT_ALGO_AUTO);
    if (!st) st = bs;
    if (!st && len == 0) st = dt_errorf(DT_ERR_IO, "resume: rank 0 could not plan the checkpoint's assembly");
    long long step = -1;
    if (!st) sscanf(plan, "STEP %lld", &step);
    char cdir[4096], mdir[1200] = "", view[1300] = "";
    dt_ckpt_dir_name(cdir, sizeof cdir, dir, step);
    const char *base = strrchr(cdir, '/') ? strrchr(cdir, '/') + 1 : cdir;
    if (t->mem[0]) {
        snprintf(mdir, sizeof mdir, "%s/%.40s", t->mem, base);
        snprintf(view, sizeof view, "%s/view/%.40s", t->mem, base);
    }
    char list[16384] = "", vman[1400];
    snprintf(vman, sizeof vman, "%s/manifest.json", view);
    if (!st && step >= 0) st = run_plan(r->world, t, plan, cdir, mdir);
    if (!st && step >= 0 && lead && view[0]) {
        unlink(vman); /* a view an earlier attempt left is not this one's */
        /* the file list of the manifest now on this host's disk */
        char mpath[4200];
        snprintf(mpath, sizeof mpath, "%s/manifest.json", cdir);
        manifest_list(mpath, list, sizeof list);
        int k = make_view(list, cdir, mdir, view);
        if (k && r->lead) dt_log(DT_LOG_INFO, "resuming: %d of the checkpoint's files from this host's memory (replicas), the rest from its disk", k);
    }
    if (!st) st = dt_barrier(r->world);
    if (!st && step >= 0) {
        snprintf(path, n, "%s", view[0] && access(vman, R_OK) == 0 ? view : cdir);
        *found = true;
    } else if (!st && want >= 0) {
        st = dt_errorf(DT_ERR_INVALID, "--resume %s: the hosts of this job cannot assemble that checkpoint (see above)", c->resume);
    } else if (!st && r->lead) {
        dt_log(DT_LOG_INFO, "no checkpoint in %s that the hosts here can assemble: starting from scratch", dir);
    }
    for (int h = 0; inv && h < t->nhosts; h++) dt_free(inv[h]);
    dt_free(inv);
    dt_free(mine);
    dt_free(plan);
    return st;
}
