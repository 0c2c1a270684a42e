/* dtrain timeline: Chrome trace events (opens in Perfetto / chrome://tracing),
 * one process row per rank, a thread row each for compute and communication.
 * Events are recorded in memory (thread-safe) and rank 0 gathers and writes
 * one file at the end. */
#ifndef DTRAIN_TRACE_H
#define DTRAIN_TRACE_H

#include "dtrain/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_trace dt_trace;

enum { DT_TRACE_COMPUTE = 1, DT_TRACE_COMM = 2 };

/* t0: the monotonic time that maps to ts 0 (all ranks pass a time taken right
 * after a barrier, so rows line up on one host). */
dt_status dt_trace_create(dt_trace **out, int rank, double t0);
void dt_trace_destroy(dt_trace *t); /* NULL ok */
/* name must be a string literal or otherwise outlive the trace. arg < 0: none. */
void dt_trace_event(dt_trace *t, const char *name, int tid, double t_start, double t_end,
                    int64_t step, int arg);
/* Collective: every rank calls; rank 0 writes path atomically enough (tmp+rename). */
dt_status dt_trace_write(dt_trace *t, dt_comm *comm, const char *path);

#ifdef __cplusplus
}
#endif
#endif
