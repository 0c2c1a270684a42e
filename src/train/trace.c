/* Chrome trace event timeline, gathered to rank 0 at the end of a run. */
#include "dtrain/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct ev {
    const char *name;
    int tid;
    double t0, t1;
    int64_t step;
    int arg;
} ev;

struct dt_trace {
    int rank;
    double base;
    pthread_mutex_t mu;
    ev *e;
    size_t n, cap;
};

dt_status dt_trace_create(dt_trace **out, int rank, double t0) {
    dt_trace *t = dt_calloc(1, sizeof *t);
    if (!t) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    t->rank = rank;
    t->base = t0;
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return DT_OK;
}

void dt_trace_destroy(dt_trace *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    dt_free(t->e);
    dt_free(t);
}

void dt_trace_event(dt_trace *t, const char *name, int tid, double t_start, double t_end,
                    int64_t step, int arg) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        ev *ne = dt_realloc_array(t->e, cap, sizeof *ne);
        if (!ne) { /* drop the event rather than fail the run */
            pthread_mutex_unlock(&t->mu);
            return;
        }
        t->e = ne;
        t->cap = cap;
    }
    t->e[t->n++] = (ev){name, tid, t_start, t_end, step, arg};
    pthread_mutex_unlock(&t->mu);
}

/* Serialises this rank's events as JSON objects separated by ",\n". */
static char *serialise(dt_trace *t, size_t *len) {
    size_t cap = 256 + t->n * 160, n = 0;
    char *s = dt_malloc(cap);
    if (!s) return NULL;
    n += (size_t)snprintf(s + n, cap - n,
                          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
                          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"compute\"}},\n"
                          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":\"communication\"}}",
                          t->rank, t->rank, t->rank, t->rank);
    for (size_t i = 0; i < t->n && n < cap; i++) {
        const ev *e = &t->e[i];
        double ts = (e->t0 - t->base) * 1e6, dur = (e->t1 - e->t0) * 1e6;
        if (e->arg >= 0)
            n += (size_t)snprintf(s + n, cap - n,
                                  ",\n{\"name\":\"%s\",\"ph\":\"X\",\"ts\":%.1f,\"dur\":%.1f,\"pid\":%d,\"tid\":%d,\"args\":{\"step\":%lld,\"bucket\":%d}}",
                                  e->name, ts, dur, t->rank, e->tid, (long long)e->step, e->arg);
        else
            n += (size_t)snprintf(s + n, cap - n,
                                  ",\n{\"name\":\"%s\",\"ph\":\"X\",\"ts\":%.1f,\"dur\":%.1f,\"pid\":%d,\"tid\":%d,\"args\":{\"step\":%lld}}",
                                  e->name, ts, dur, t->rank, e->tid, (long long)e->step);
    }
    if (n >= cap) n = cap - 1;
    s[n] = '\0';
    *len = n;
    return s;
}

dt_status dt_trace_write(dt_trace *t, dt_comm *comm, const char *path) {
    int rank = dt_comm_rank(comm), size = dt_comm_size(comm);
    size_t len = 0;
    char *mine = serialise(t, &len);
    if (!mine) return dt_errorf(DT_ERR_NOMEM, "out of memory writing the trace");
    dt_status st = DT_OK;
    const int tag = 7301;
    if (rank != 0) {
        uint64_t l = len;
        dt_req r[2];
        st = dt_isend(comm, &l, sizeof l, 0, tag, &r[0]);
        if (!st) st = dt_waitall(comm, r, 1, "trace gather");
        if (!st) st = dt_isend(comm, mine, len, 0, tag + 1, &r[1]);
        if (!st) st = dt_waitall(comm, &r[1], 1, "trace gather");
        dt_free(mine);
        return st;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        dt_free(mine);
        return dt_errorf(DT_ERR_IO, "cannot write --trace %s: %s", path, strerror(errno));
    }
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n%s", mine);
    dt_free(mine);
    for (int r = 1; r < size && !st; r++) {
        uint64_t l = 0;
        dt_req q;
        st = dt_irecv(comm, &l, sizeof l, r, tag, &q);
        if (!st) st = dt_waitall(comm, &q, 1, "trace gather");
        if (st) break;
        char *buf = dt_malloc(l + 1);
        if (!buf) { st = dt_errorf(DT_ERR_NOMEM, "out of memory gathering the trace"); break; }
        st = dt_irecv(comm, buf, l, r, tag + 1, &q);
        if (!st) st = dt_waitall(comm, &q, 1, "trace gather");
        if (!st) fprintf(f, ",\n%.*s", (int)l, buf);
        dt_free(buf);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0 && !st) st = dt_errorf(DT_ERR_IO, "cannot write --trace %s: %s", path, strerror(errno));
    if (!st && rename(tmp, path) != 0) st = dt_errorf(DT_ERR_IO, "cannot write --trace %s: %s", path, strerror(errno));
    if (st) remove(tmp);
    return st;
}
