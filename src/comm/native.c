/* MPI's own collectives with the semantics of ours (DT_ALGO_NATIVE), for
 * comparison and as a fallback. Open MPI picks its algorithm per call (coll/tuned
 * decision table), so the cost is whatever that table chose.
 *
 * Differences from our algorithms: these calls block inside MPI and have no
 * deadline (a late rank stalls them without a timeout), and counts above INT_MAX
 * are cut into INT_MAX-element pieces for all-reduce and broadcast, while
 * reduce-scatter and all-gather take int counts per rank (larger: unsupported).
 * AVG is the MPI sum scaled by 1/p on every rank. */
#include "comm/comm_internal.h"

#include <limits.h>
#include <string.h>

dt_status dt_allreduce_native(dt_comm *c, float *buf, size_t count, dt_reduce_op op) {
    dt_status st = DT_OK;
    for (size_t off = 0; off < count; off += (size_t)INT_MAX) {
        size_t n = count - off < (size_t)INT_MAX ? count - off : (size_t)INT_MAX;
        DT_TRY(dt_mpi_check(c, MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, c->mc),
                            "MPI_Allreduce"));
    }
    if (op == DT_OP_AVG) dt_scale_f32(buf, count, 1.0f / (float)c->size);
fn_exit:
    return st;
}

/* Per-rank counts and displacements of the partition convention, as ints. */
static dt_status int_counts(dt_comm *c, size_t count, int **counts, int **displs, const char *what) {
    *counts = dt_calloc((size_t)c->size, sizeof(int));
    *displs = dt_calloc((size_t)c->size, sizeof(int));
    if (!*counts || !*displs) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory", what);
    if (count > (size_t)INT_MAX)
        return dt_errorf(DT_ERR_UNSUPPORTED, "%s(native): %zu elements exceed MPI's int counts; use ring", what, count);
    for (int i = 0; i < c->size; i++) {
        (*counts)[i] = (int)dt_chunk_len(count, c->size, i);
        (*displs)[i] = (int)dt_chunk_off(count, c->size, i);
    }
    return DT_OK;
}

dt_status dt_reduce_scatter_native(dt_comm *c, float *buf, size_t count, dt_reduce_op op) {
    dt_status st = DT_OK;
    int *counts = NULL, *displs = NULL;
    DT_TRY(int_counts(c, count, &counts, &displs, "reduce_scatter"));
    /* In place, MPI leaves our block at the start of buf; move it to chunk r. */
    DT_TRY(dt_mpi_check(c, MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts, MPI_FLOAT, MPI_SUM, c->mc),
                        "MPI_Reduce_scatter"));
    size_t off = (size_t)displs[c->rank], n = (size_t)counts[c->rank];
    if (off) memmove(buf + off, buf, n * sizeof(float));
    if (op == DT_OP_AVG) dt_scale_f32(buf + off, n, 1.0f / (float)c->size);
fn_exit:
    dt_free(counts);
    dt_free(displs);
    return st;
}

dt_status dt_allgather_native(dt_comm *c, float *buf, size_t count) {
    dt_status st = DT_OK;
    int *counts = NULL, *displs = NULL;
    DT_TRY(int_counts(c, count, &counts, &displs, "allgather"));
    DT_TRY(dt_mpi_check(c, MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, c->mc),
                        "MPI_Allgatherv"));
fn_exit:
    dt_free(counts);
    dt_free(displs);
    return st;
}

dt_status dt_bcast_native(dt_comm *c, void *buf, size_t bytes, int root) {
    dt_status st = DT_OK;
    for (size_t off = 0; off < bytes; off += (size_t)INT_MAX) {
        size_t n = bytes - off < (size_t)INT_MAX ? bytes - off : (size_t)INT_MAX;
        DT_TRY(dt_mpi_check(c, MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, c->mc), "MPI_Bcast"));
    }
fn_exit:
    return st;
}

dt_status dt_barrier_native(dt_comm *c) { return dt_mpi_check(c, MPI_Barrier(c->mc), "MPI_Barrier"); }
