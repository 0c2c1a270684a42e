/* A pipeline schedule simulated event by event (plan.h). Each stage runs its
 * operations in the order the runtime runs them (dt_pipe_sched_op, the one
 * generator src/parallel/pipeline.c executes: GPipe, 1F1B and interleaved
 * 1F1B); an operation starts at the later of its stage becoming free and its
 * input arriving: a forward of chunk c > 0 waits for chunk c-1's forward of
 * the same micro-batch plus boundary c's p2p, a backward of chunk c < C-1 for
 * chunk c+1's backward plus boundary c+1's p2p, the last chunk's backward for
 * its own forward. A boundary's message leaves when its operation ends and
 * takes p2p of that boundary after the messages its stage sent earlier to the
 * same stage (one link a direction between two stages: at 100 Mbit/s the
 * interleaved schedule's crossings queue, and W1 measured 1.45x the span of
 * messages that overlap). Operations are settled as list scheduling does:
 * round after round, every stage runs its next operations while their inputs
 * are settled; a round in which no stage moves with operations left is a
 * deadlock. A stage's messages are settled in the order it sends them, so
 * each link's queue is too. Cost: O(C M) operations, O(P) per round, at most
 * 2CM rounds (C = P V chunks), O(C M + P^2) memory.
 * For equal chunks (f, b per chunk, a stage's F = V f, B = V b) and p2p 0:
 * GPipe and 1F1B take (M + P - 1)(F + B), the bubble (P - 1)/(M + P - 1) of
 * Huang et al. 2019 and Narayanan et al. 2021; the interleaved schedule
 * (M % P == 0) takes (M + (P - 1)/V)(F + B), the bubble (P - 1)/(VM + P - 1)
 * of the step, (P - 1)/(VM) of the work (Narayanan et al. 2021, section 2.2). */
#include "plan_internal.h"

#include <string.h>

/* The simulation's state: when each operation ends and when its input
 * message arrives (-1 while not settled), each stage and each link (stage a
 * to stage b, P x P) free. */
typedef struct sim {
    int P, V, M, C;
    const double *fwd, *bwd, *p2p;
    double *endf, *endb, *arrf, *arrb, *free_at, *link;
    int *next;
} sim;

/* When the input of operation op of chunk c arrives; -1 while its sender is
 * not settled. */
static double input_ready(const sim *m, const dt_pipe_op *op, int c) {
    size_t i = (size_t)c * m->M + (size_t)op->mb;
    if (!op->bwd) return c == 0 ? 0 : m->arrf[i];
    return c == m->C - 1 ? m->endf[i] : m->arrb[i];
}

/* The message of an operation of stage s ending at `end` over boundary k
 * (p2p[k]) to stage `to`: it waits for the link from s to `to` to be free
 * (the messages one stage sends to another go one after the other, in the
 * order the stage sends them, as TCP delivers them); when it arrives. */
static double link_send(sim *m, int s, int to, int k, double end) {
    double t = m->p2p ? m->p2p[k] : 0;
    if (t <= 0) return end;
    double *l = &m->link[(size_t)s * m->P + to], start = *l > end ? *l : end;
    *l = start + t;
    return *l;
}

/* Runs stage s's next operations while their inputs are settled; how many. */
static int advance(sim *m, dt_pipe_schedule kind, int s) {
    int P = m->P, M = m->M, ran = 0;
    while (m->next[s] < 2 * M * m->V) {
        dt_pipe_op op;
        dt_pipe_sched_op(kind, P, m->V, s, M, m->next[s], &op);
        int c = s + op.chunk * P;
        double ready = input_ready(m, &op, c);
        if (ready < 0) break;
        double end = (m->free_at[s] > ready ? m->free_at[s] : ready) + (op.bwd ? m->bwd[c] : m->fwd[c]);
        size_t i = (size_t)c * M + (size_t)op.mb;
        (op.bwd ? m->endb : m->endf)[i] = end;
        if (!op.bwd && c < m->C - 1) m->arrf[i + (size_t)M] = link_send(m, s, (c + 1) % P, c + 1, end);
        if (op.bwd && c > 0) m->arrb[i - (size_t)M] = link_send(m, s, (c - 1) % P, c, end);
        m->free_at[s] = end;
        m->next[s]++;
        ran++;
    }
    return ran;
}

double dt_plan_pipeline(dt_plan_sched sched, int P, int V, int M, const double *fwd, const double *bwd,
                        const double *p2p, double *busy) {
    if (P < 1 || V < 1 || M < 1 || (long long)P * V * M > (1 << 20)) return -1;
    int C = P * V;
    size_t n = (size_t)C * M;
    sim m = {P, V, M, C, fwd, bwd, p2p, dt_calloc(n, sizeof(double)), dt_calloc(n, sizeof(double)),
             dt_calloc(n, sizeof(double)), dt_calloc(n, sizeof(double)), dt_calloc((size_t)P, sizeof(double)),
             dt_calloc((size_t)P * P, sizeof(double)), dt_calloc((size_t)P, sizeof(int))};
    double span = -1;
    if (!m.endf || !m.endb || !m.arrf || !m.arrb || !m.free_at || !m.link || !m.next) goto done;
    for (size_t i = 0; i < n; i++) m.endf[i] = m.endb[i] = m.arrf[i] = m.arrb[i] = -1;
    dt_pipe_schedule kind = plan_pipe_kind(sched);
    size_t settled = 0;
    for (int moved = 1; moved && settled < 2 * n;) {
        moved = 0;
        for (int s = 0; s < P; s++) {
            int r = advance(&m, kind, s);
            settled += (size_t)r;
            moved |= r > 0;
        }
    }
    if (settled < 2 * n) goto done; /* deadlock */
    double most = 0;
    span = 0;
    for (int s = 0; s < P; s++) {
        double work = 0;
        for (int j = 0; j < V; j++) work += M * (fwd[s + j * P] + bwd[s + j * P]);
        most = work > most ? work : most;
    }
    for (size_t i = 0; i < n; i++) span = m.endb[i] > span ? m.endb[i] : span;
    if (busy) *busy = most;
done:
    dt_free(m.endf);
    dt_free(m.endb);
    dt_free(m.arrf);
    dt_free(m.arrb);
    dt_free(m.free_at);
    dt_free(m.link);
    dt_free(m.next);
    return span;
}
