/* MPI's dynamic processes for jobs that other processes join while they run
 * (MPI_Open_port, MPI_Comm_accept / MPI_Comm_connect, MPI-2): a listener opens
 * a port and accepts connections on a thread of its own (MPI_Comm_accept
 * blocks and has no timeout, so it cannot sit in a polling loop); each
 * accepted connection becomes a 2-rank communicator (the listener rank 0, the
 * peer rank 1) that the owner picks up with dt_listener_poll.
 *
 * Cost: a connection is a few name-server round trips (Open MPI: its
 * ompi-server, which both jobs must have been started with) and one
 * Intercomm_merge; nothing per message beyond the merged communicator's own.
 *
 * Closing: nothing can interrupt a thread waiting in MPI_Comm_accept, and a
 * process cannot connect to its own port (Open MPI hangs), so closing takes
 * another process's knock (dt_knock) after dt_listener_shut: once shut, the
 * thread reads the first message of each connection (up to KNOCK_WAIT
 * seconds) and ends at the one that shows the knock it was given; anything
 * else is let go. So a stranger cannot close it, and one that connects while
 * it closes does not make the real knock wait forever. The caller
 * authenticates the connections it picks up; the listener only connects.
 * Needs MPI_THREAD_MULTIPLE (dt_comm_init asks for it). */
#include "comm/comm_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QUEUE 16 /* accepted connections not yet picked up (more wait in accept) */
#define KNOCK_MAX 128 /* bytes of a knock */
#define KNOCK_WAIT 2.0 /* seconds a connection to a shut listener has to show it */
#define KNOCK_TAG 0x4b4e

struct dt_listener {
    char port[MPI_MAX_PORT_NAME];
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    MPI_Comm q[QUEUE];
    int qn;
    bool closing, ended;
    char knock[KNOCK_MAX];
    int knock_n;
    char err[256];
};

static bool is_closing(dt_listener *l) {
    pthread_mutex_lock(&l->mu);
    bool c = l->closing;
    pthread_mutex_unlock(&l->mu);
    return c;
}

/* Merges an inter-communicator with one remote process into a 2-rank one
 * (high: this side is rank 1). */
static int merge(MPI_Comm *inter, bool high, MPI_Comm *out) {
    int rc = MPI_Intercomm_merge(*inter, high, out);
    MPI_Comm_free(inter);
    return rc;
}

/* A shut listener's connection: whether its first message is the knock. */
static bool is_knock(dt_listener *l, MPI_Comm m) {
    char got[KNOCK_MAX];
    MPI_Request r;
    if (MPI_Irecv(got, KNOCK_MAX, MPI_BYTE, 1, KNOCK_TAG, m, &r) != MPI_SUCCESS) return false;
    int flag = 0, n = 0;
    MPI_Status s;
    double t0 = MPI_Wtime();
    while (!flag && MPI_Wtime() - t0 < KNOCK_WAIT) {
        if (MPI_Test(&r, &flag, &s) != MPI_SUCCESS) break;
        if (!flag) usleep(1000);
    }
    if (!flag) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
        return false;
    }
    MPI_Get_count(&s, MPI_BYTE, &n);
    return n == l->knock_n && memcmp(got, l->knock, (size_t)n) == 0;
}

static void *accept_loop(void *arg) {
    dt_listener *l = arg;
    for (;;) {
        MPI_Comm inter = MPI_COMM_NULL, m = MPI_COMM_NULL;
        int rc = MPI_Comm_accept(l->port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
        if (rc == MPI_SUCCESS) {
            MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
            rc = merge(&inter, false, &m);
        }
        pthread_mutex_lock(&l->mu);
        bool closing = l->closing;
        pthread_mutex_unlock(&l->mu);
        bool stop = closing && rc == MPI_SUCCESS && is_knock(l, m);
        pthread_mutex_lock(&l->mu);
        if (rc != MPI_SUCCESS && !closing) snprintf(l->err, sizeof l->err, "MPI_Comm_accept failed (error %d)", rc);
        if (!closing && rc == MPI_SUCCESS && l->qn < QUEUE) {
            l->q[l->qn++] = m;
            m = MPI_COMM_NULL;
        }
        if (stop) l->ended = true;
        pthread_mutex_unlock(&l->mu);
        if (m != MPI_COMM_NULL) MPI_Comm_free(&m); /* the knock, a late one, or a full queue */
        if (stop) return NULL;
        if (rc != MPI_SUCCESS) usleep(100000);
        while (!is_closing(l)) { /* wait for room */
            pthread_mutex_lock(&l->mu);
            int n = l->qn;
            pthread_mutex_unlock(&l->mu);
            if (n < QUEUE) break;
            usleep(10000);
        }
    }
}

dt_status dt_listener_open(dt_listener **out) {
    *out = NULL;
    int provided = MPI_THREAD_SINGLE, init = 0;
    MPI_Initialized(&init);
    if (!init) return dt_errorf(DT_ERR_UNSUPPORTED, "workers can join only a job that runs under MPI");
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
        return dt_errorf(DT_ERR_UNSUPPORTED, "workers can join only with MPI_THREAD_MULTIPLE, and this MPI gives less");
    dt_listener *l = dt_calloc(1, sizeof *l);
    if (!l) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&l->mu, NULL);
    dt_status st = dt_mpi_check(NULL, MPI_Open_port(MPI_INFO_NULL, l->port), "MPI_Open_port");
    if (!st && pthread_create(&l->thread, NULL, accept_loop, l) != 0)
        st = dt_errorf(DT_ERR_IO, "cannot start the thread that accepts joining workers");
    if (st) {
        if (l->port[0]) MPI_Close_port(l->port);
        pthread_mutex_destroy(&l->mu);
        dt_free(l);
        return st;
    }
    l->started = true;
    *out = l;
    return DT_OK;
}

const char *dt_listener_port(const dt_listener *l) { return l->port; }

dt_status dt_listener_poll(dt_listener *l, dt_comm **out) {
    *out = NULL;
    MPI_Comm m = MPI_COMM_NULL;
    pthread_mutex_lock(&l->mu);
    if (l->qn > 0) {
        m = l->q[0];
        memmove(l->q, l->q + 1, (size_t)(l->qn - 1) * sizeof(MPI_Comm));
        l->qn--;
    }
    char err[256];
    snprintf(err, sizeof err, "%s", l->err);
    l->err[0] = '\0';
    pthread_mutex_unlock(&l->mu);
    if (err[0]) dt_log(DT_LOG_WARN, "a worker's connection failed: %s", err);
    return m == MPI_COMM_NULL ? DT_OK : dt_comm_wrap(m, out);
}

void dt_listener_shut(dt_listener *l, const void *knock, size_t n) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    if (!l->closing) {
        l->knock_n = (int)(n < KNOCK_MAX ? n : KNOCK_MAX);
        memcpy(l->knock, knock, (size_t)l->knock_n);
    }
    l->closing = true;
    pthread_mutex_unlock(&l->mu);
}

void dt_listener_close(dt_listener *l, double seconds) {
    if (!l) return;
    /* The knock may be late or never come (its sender died): wait a while, then
     * leave the thread blocked rather than the process. */
    double t0 = dt_now();
    bool ended = false;
    while (!ended && dt_now() - t0 < seconds) {
        pthread_mutex_lock(&l->mu);
        ended = l->ended;
        pthread_mutex_unlock(&l->mu);
        if (!ended) usleep(2000);
    }
    if (!ended) {
        dt_log(DT_LOG_WARN, "the thread accepting joining workers did not end (no knock came); leaving it");
        return; /* l stays allocated: the thread still uses it */
    }
    pthread_join(l->thread, NULL);
    for (int i = 0; i < l->qn; i++) MPI_Comm_free(&l->q[i]);
    MPI_Close_port(l->port);
    pthread_mutex_destroy(&l->mu);
    dt_free(l);
}

/* One MPI_Comm_connect on a thread of its own: MPI gives it no timeout (Open
 * MPI waits for a name server that is gone for half an hour), so the caller
 * waits for it with one. A connect given up on stays blocked on its thread
 * and keeps this (so it is never freed then). */
typedef struct {
    char port[MPI_MAX_PORT_NAME];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, abandoned;
    int rc;
    MPI_Comm inter;
} connect_try;

static void *connect_thread(void *arg) {
    connect_try *t = arg;
    MPI_Comm inter = MPI_COMM_NULL;
    int rc = MPI_Comm_connect(t->port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    pthread_mutex_lock(&t->mu);
    t->rc = rc;
    t->inter = inter;
    t->done = true;
    bool abandoned = t->abandoned;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (abandoned && rc == MPI_SUCCESS) MPI_Comm_disconnect(&inter); /* too late: let it go */
    return NULL;
}

/* Waits up to `seconds` (<= 0: no limit) for t; true if it ended (then t is the caller's). */
static bool connect_wait(connect_try *t, double seconds) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double end = (double)until.tv_sec + until.tv_nsec * 1e-9 + seconds;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    while (!t->done && rc == 0)
        rc = seconds <= 0 ? pthread_cond_wait(&t->cv, &t->mu) : pthread_cond_timedwait(&t->cv, &t->mu, &until);
    bool done = t->done;
    if (!done) t->abandoned = true;
    pthread_mutex_unlock(&t->mu);
    return done;
}

dt_status dt_connect(const char *port, double seconds, dt_comm **out) {
    *out = NULL;
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    connect_try *t = dt_calloc(1, sizeof *t);
    if (!t) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    snprintf(t->port, sizeof t->port, "%s", port);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_t th;
    if (pthread_create(&th, NULL, connect_thread, t) != 0) {
        dt_free(t);
        return dt_errorf(DT_ERR_IO, "cannot start a thread to connect to the job");
    }
    if (!connect_wait(t, seconds)) {
        pthread_detach(th);
        return dt_errorf(DT_ERR_TIMEOUT, "no answer from the job at port %.60s within %.0f s: it has ended, or its "
                         "name server (ompi-server) cannot be reached from here", port, seconds);
    }
    pthread_join(th, NULL);
    int rc = t->rc;
    MPI_Comm inter = t->inter, m = MPI_COMM_NULL;
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    dt_free(t);
    if (rc != MPI_SUCCESS)
        return dt_errorf(DT_ERR_COMM, "cannot connect to the job at port %.60s (is it running, and was this process "
                         "started with its ompi-server?)", port);
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    dt_status st = dt_mpi_check(NULL, merge(&inter, true, &m), "MPI_Intercomm_merge");
    return st ? st : dt_comm_wrap(m, out);
}

dt_status dt_knock(const char *port, const void *knock, size_t n) {
    dt_comm *c = NULL;
    dt_status st = dt_connect(port, 10.0, &c);
    if (!st) {
        dt_req r;
        st = dt_isend(c, knock, n < KNOCK_MAX ? n : KNOCK_MAX, 1 - c->rank, KNOCK_TAG, &r);
        if (!st) st = dt_waitall_for(c, &r, 1, 10.0, "knocking at a closing listener");
    }
    dt_comm_destroy(c);
    return st;
}
