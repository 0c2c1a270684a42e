/* How a run's job ends on each rank (include/dtrain/train.h, dt_train_end):
 * the failure policy of a multi-rank job in the library, so every program
 * that embeds dtrain ends a job the same way. */
#include "run.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static void fail(dt_comm *world, dt_status st, double timeout, dt_train_end *out) {
    int rank = dt_comm_rank(world), size = dt_comm_size(world);
    bool comm_fault = st == DT_ERR_TIMEOUT || st == DT_ERR_COMM;
    /* One rank's communication fault (a worker joining a job that ended) can
     * leave an MPI call blocked on a thread that MPI_Finalize would wait for. */
    out->action = !comm_fault ? DT_END_FINALIZE : size > 1 ? DT_END_ABORT : DT_END_EXIT;
    if (st == DT_ERR_TIMEOUT && size > 1) {
        /* Find out who is late; the first rank that timed out reports. */
        char what[1024], report[600];
        snprintf(what, sizeof what, "%s", dt_error_msg());
        double grace = timeout < DT_DIAGNOSE_GRACE_MAX ? timeout : DT_DIAGNOSE_GRACE_MAX;
        if (dt_comm_diagnose(world, grace, report, sizeof report)) {
            out->report = true;
            snprintf(out->msg, sizeof out->msg, "%s; %s", what, report);
        } else {
            /* The reporter is still diagnosing or printing: ending the job
             * now could take its line down with it. It answered us inside our
             * grace period, so its own grace ends at most `grace` after ours;
             * its abort usually ends us first. */
            struct timespec ts = {(time_t)grace + 2, (long)((grace - (double)(time_t)grace) * 1e9)};
            nanosleep(&ts, NULL);
        }
        return;
    }
    /* Faults of one rank are reported by the rank that saw them; errors every
     * rank hits alike (data, flags) once, by rank 0. */
    out->report = rank == 0 || comm_fault;
    if (size > 1) snprintf(out->msg, sizeof out->msg, "rank %d: %s", rank, dt_error_msg());
    else snprintf(out->msg, sizeof out->msg, "%s", dt_error_msg());
}

void dt_train_end_job(dt_comm *world, dt_status st, const dt_train_result *res, double timeout, dt_train_end *out) {
    memset(out, 0, sizeof *out);
    out->status = st;
    if (st) {
        fail(world, st, timeout, out);
        return;
    }
    if (!res->lost_workers) return;
    /* A worker died: MPI_Finalize would wait for it forever, and the first rank
     * to end without it makes mpirun take the job down. So rank 0 (its outputs
     * written) releases the others, and everyone ends without MPI_Finalize. */
    out->action = DT_END_EXIT;
    if ((out->status = dt_ps_release(world, 2.0 * timeout + 10.0))) {
        out->report = true;
        snprintf(out->msg, sizeof out->msg, "rank %d: %s", dt_comm_rank(world), dt_error_msg());
    }
}
