/* dtrain Byzantine-robust aggregation of n worker gradients (n x P, row-major).
 *
 *   mean        no tolerance: one bad worker moves the result arbitrarily
 *   median      coordinate-wise median: tolerates f < n/2 bad workers
 *   trimmed:B   per coordinate, drop the B largest and B smallest, average the
 *               rest: tolerates f <= B, needs n > 2B
 *   krum:F[:M]  Blanchard et al. 2017: score each worker by the sum of squared
 *               distances to its n-F-2 nearest others; average the M best-scored
 *               workers (Multi-Krum; M defaults to n-F, M = 1 is the original
 *               Krum, whose single-worker pick has n times the variance):
 *               tolerates f <= F, needs n >= 2F+3
 *   cclip[:TAU]  centred clipping (Karimireddy, He & Jaggi, ICML 2021): from
 *               the previous step's aggregate v, v + mean_i clip(x_i - v, TAU),
 *               clip scaling a difference down to norm TAU; TAU by default the
 *               median of the n distances |x_i - v| (an honest one while
 *               f < n/2). One pass, as the paper runs it with momentum. It keeps
 *               history, so the caller passes v in `out` (zeros at the start)
 *               and keeps the result for the next step. Tolerates f < n/2.
 *
 * Pre-aggregation (--pre-aggregate nnm[:F]): nearest-neighbour mixing (Allouah
 * et al., AISTATS 2023) first replaces every vector by the mean of its n-F
 * nearest vectors (itself included, squared Euclidean distance); the rule then
 * runs on the mixed vectors. An honest vector's neighbours are mostly honest,
 * so the mixed honest vectors lie close to the honest mean and a coordinate-
 * wise rule no longer has to pick one of n noisy values; F defaults to what
 * the rule tolerates (trimmed: B, krum: F, median: (n-1)/2).
 * Deterministic: every rank given the same vectors computes the same bits. */
#ifndef DTRAIN_AGGREGATE_H
#define DTRAIN_AGGREGATE_H

#include "dtrain/core.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_AGG_NONE, DT_AGG_MEAN, DT_AGG_MEDIAN, DT_AGG_TRIMMED, DT_AGG_KRUM, DT_AGG_CCLIP, DT_AGG_COUNT } dt_agg_kind;

typedef struct dt_agg {
    dt_agg_kind kind;
    int param;               /* B for trimmed, F for krum */
    int m;                   /* krum: workers averaged (0: n - F) */
    int nnm;                 /* nearest-neighbour mixing first: 0 none, -1 F from the rule, else F */
    float tau;               /* cclip: clipping radius (0: the median distance) */
} dt_agg;

/* "mean", "median", "trimmed:B", "krum:F[:M]", "cclip[:TAU]". */
dt_status dt_agg_parse(const char *s, dt_agg *out);
/* --pre-aggregate: "none", "nnm" or "nnm:F" into a->nnm. */
dt_status dt_agg_parse_pre(const char *s, dt_agg *a);
/* Refuses configurations whose guarantee cannot hold with n workers. */
dt_status dt_agg_check(const dt_agg *a, int n);
/* Bad workers the configuration tolerates with n workers (0 for mean). */
int dt_agg_tolerated(const dt_agg *a, int n);
/* out (P) from vecs (n x P). scratch: dt_agg_scratch_floats(a, n, P) floats.
 * cclip reads its centre (the previous aggregate) from out. Returns the index
 * Krum chose (-1 for the other rules). */
int dt_agg_apply(const dt_agg *a, float *out, const float *vecs, int n, size_t P, float *scratch);
size_t dt_agg_scratch_floats(const dt_agg *a, int n, size_t P);

/* "A little is enough" (Baruch, Baruch & Goldberg 2019), an attacker that sees
 * every honest vector of the step: each row r with bad[r] becomes, coordinate
 * by coordinate, mean - z * std of the honest rows (population std), a shift
 * that stays inside their spread and so passes median, trimmed mean and Krum
 * while it biases every step the same way. Needs at least one honest row. */
void dt_agg_alie(float *vecs, int n, size_t P, const bool *bad, float z);
/* The paper's z for n workers of which f are bad: the largest shift that keeps
 * the bad rows among the s = floor(n/2 + 1) - f workers a majority would still
 * accept, z = Phi^-1((n - s) / n) (0 when that is <= 0.5). */
float dt_agg_alie_z(int n, int f);

#ifdef __cplusplus
}
#endif
#endif
