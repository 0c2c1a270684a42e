/* The pipeline schedules' operation orders (pipe_schedule.c), checked for
 * every P <= 5, V <= 4 and M <= 12: each stage runs every forward and backward
 * of its chunks exactly once, a chunk's micro-batches in order, a backward
 * after its forward; the warm-up counts of each schedule; the activation sets
 * kept (1F1B: P-s, GPipe: M); and a dataflow run of all stages together (sends
 * never block) that finishes, so no order deadlocks. */
#include "dtrain/pipeline.h"
#include "testhelp.h"

#include <string.h>

#define MAXOPS (2 * 12 * 4)

/* Stage s's order obeys the rules; returns false at the first broken one. */
static bool order_ok(dt_pipe_schedule k, int P, int V, int s, int M) {
    int nf[4] = {0}, nb[4] = {0};
    for (int i = 0; i < 2 * M * V; i++) {
        dt_pipe_op op;
        dt_pipe_sched_op(k, P, V, s, M, i, &op);
        if (op.chunk < 0 || op.chunk >= V || op.mb < 0 || op.mb >= M) return false;
        if (op.bwd && (op.mb != nb[op.chunk] || nb[op.chunk] >= nf[op.chunk])) return false;
        if (!op.bwd && op.mb != nf[op.chunk]) return false;
        (op.bwd ? nb : nf)[op.chunk]++;
    }
    for (int j = 0; j < V; j++)
        if (nf[j] != M || nb[j] != M) return false;
    return true;
}

/* All stages advance together: an operation runs once its input exists (the
 * chunk before's forward, the chunk after's backward). True when every stage
 * finishes. */
static bool dataflow_finishes(dt_pipe_schedule k, int P, int V, int M) {
    static bool fdone[20][12], bdone[20][12];
    int next[5] = {0}, C = P * V, total = 2 * M * V;
    memset(fdone, 0, sizeof fdone);
    memset(bdone, 0, sizeof bdone);
    for (bool moved = true; moved;) {
        moved = false;
        for (int s = 0; s < P; s++) {
            if (next[s] == total) continue;
            dt_pipe_op op;
            dt_pipe_sched_op(k, P, V, s, M, next[s], &op);
            int c = s + op.chunk * P;
            bool ready = op.bwd ? (c == C - 1 ? fdone[c][op.mb] : bdone[c + 1][op.mb]) : (c == 0 || fdone[c - 1][op.mb]);
            if (!ready) continue;
            (op.bwd ? bdone : fdone)[c][op.mb] = true;
            next[s]++;
            moved = true;
        }
    }
    for (int s = 0; s < P; s++)
        if (next[s] != total) return false;
    return true;
}

int main(void) {
    const dt_pipe_schedule kinds[3] = {DT_SCHED_GPIPE, DT_SCHED_1F1B, DT_SCHED_INTERLEAVED};
    int orders = 0, bad_order = 0, stuck = 0, bad_depth = 0, bad_warm = 0;
    for (int ki = 0; ki < 3; ki++)
        for (int P = 2; P <= 5; P++)
            for (int V = 1; V <= (kinds[ki] == DT_SCHED_INTERLEAVED ? 4 : 1); V++)
                for (int M = 1; M <= 12; M++) {
                    stuck += !dataflow_finishes(kinds[ki], P, V, M);
                    for (int s = 0; s < P; s++) {
                        orders++;
                        bad_order += !order_ok(kinds[ki], P, V, s, M);
                        int depth[4], w = dt_pipe_sched_warmup(kinds[ki], P, V, s, M), want = M * V;
                        if (kinds[ki] == DT_SCHED_1F1B) want = P - s - 1 < M ? P - s - 1 : M;
                        if (kinds[ki] == DT_SCHED_INTERLEAVED && V > 1 && M % P == 0) {
                            want = 2 * (P - s - 1) + (V - 1) * P;
                            if (want > M * V) want = M * V;
                        }
                        bad_warm += w != want;
                        dt_pipe_sched_depths(kinds[ki], P, V, s, M, depth);
                        if (kinds[ki] == DT_SCHED_GPIPE) bad_depth += depth[0] != M;
                        if (kinds[ki] == DT_SCHED_1F1B) bad_depth += depth[0] != (P - s < M ? P - s : M);
                    }
                }
    printf("%d stage orders: %d broken, %d warm-ups off, %d depths off; %d schedules stuck\n", orders, bad_order, bad_warm,
           bad_depth, stuck);
    test_cond("every order runs each operation once, in micro-batch order per chunk", bad_order == 0);
    test_cond("warm-up counts: M V (GPipe), P-s-1 (1F1B), 2(P-s-1)+(V-1)P (interleaved)", bad_warm == 0);
    test_cond("activation sets: M (GPipe), min(P-s, M) (1F1B)", bad_depth == 0);
    test_cond("no schedule deadlocks", stuck == 0);
    /* Megatron's interleaved order for P = 2, V = 2, M = 4 on stage 0: warm-up
     * 2(P-1) + (V-1)P = 4 forwards (chunk 0 mb 0,1, chunk 1 mb 0,1), then
     * F(c0 mb2) B(c1 mb0) F(c0 mb3) B(c1 mb1) F(c1 mb2) B(c0 mb0) ... */
    const char *want = "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 ";
    char got[256] = "";
    for (int i = 0; i < 16; i++) {
        dt_pipe_op op;
        dt_pipe_sched_op(DT_SCHED_INTERLEAVED, 2, 2, 0, 4, i, &op);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%c%d.%d ", op.bwd ? 'B' : 'F', op.chunk, op.mb);
    }
    printf("interleaved P=2 V=2 M=4 stage 0: %s\n", got);
    test_cond("interleaved stage 0 order as Megatron's", strcmp(got, want) == 0);
    int d[2];
    dt_pipe_sched_depths(DT_SCHED_INTERLEAVED, 2, 2, 0, 4, d);
    printf("its activation sets per chunk: %d, %d\n", d[0], d[1]);
    test_cond("interleaved P=2 V=2 M=4 stage 0 keeps 4 and 2 sets", d[0] == 4 && d[1] == 2);
    test_cond("bubble (P-1)/(VM+P-1)", fabs(dt_pipe_bubble(4, 2, 8) - 3.0 / 19) < 1e-12 && fabs(dt_pipe_bubble(2, 1, 4) - 0.2) < 1e-12);
    return test_report();
}
