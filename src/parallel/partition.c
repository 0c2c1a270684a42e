/* Pipeline stage partitions. The balanced one is the classic linear-partition
 * dynamic program: best[k][i] = min over j of max(best[k-1][j], sum(cost[j..i))),
 * O(stages * n^2) with n the number of blocks (tens), exact. */
#include "dtrain/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double dt_partition_best(const double *cost, int n, int stages, dt_partition *out) {
    DT_ASSERT(n >= 1 && stages >= 1 && stages <= n && stages <= 256);
    double *pre = dt_calloc((size_t)n + 1, sizeof(double));
    double *best = dt_calloc((size_t)(stages + 1) * (size_t)(n + 1), sizeof(double));
    int *cut = dt_calloc((size_t)(stages + 1) * (size_t)(n + 1), sizeof(int));
    DT_ASSERT(pre && best && cut);
    for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + cost[i];
#define B(k, i) best[(size_t)(k) * (size_t)(n + 1) + (size_t)(i)]
#define C(k, i) cut[(size_t)(k) * (size_t)(n + 1) + (size_t)(i)]
    for (int i = 0; i <= n; i++) B(1, i) = pre[i];
    for (int k = 2; k <= stages; k++)
        for (int i = 0; i <= n; i++) {
            B(k, i) = INFINITY;
            for (int j = k - 1; j < i; j++) { /* every stage gets at least one block */
                double v = fmax(B(k - 1, j), pre[i] - pre[j]);
                if (v < B(k, i)) {
                    B(k, i) = v;
                    C(k, i) = j;
                }
            }
        }
    double result = B(stages, n);
    out->stages = stages;
    out->virt = 1;
    out->first[stages] = n;
    int i = n;
    for (int k = stages; k >= 2; k--) {
        i = C(k, i);
        out->first[k - 1] = i;
    }
    out->first[0] = 0;
#undef B
#undef C
    dt_free(pre);
    dt_free(best);
    dt_free(cut);
    return result;
}

void dt_partition_uniform(int n, int stages, dt_partition *out) {
    DT_ASSERT(stages >= 1 && stages <= n && stages <= 256);
    out->stages = stages;
    out->virt = 1;
    for (int s = 0; s <= stages; s++) out->first[s] = (int)((int64_t)n * s / stages);
}

dt_status dt_partition_parse(const char *s, int n, int stages, dt_partition *out) {
    out->stages = stages;
    out->virt = 1;
    out->first[0] = 0;
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || k >= stages)
            return dt_errorf(DT_ERR_INVALID, "--pp-partition '%s': give %d positive block counts separated by commas", s, stages);
        out->first[k + 1] = out->first[k] + (int)v;
        k++;
        p = end;
        if (*p == ',') p++;
        else if (*p) return dt_errorf(DT_ERR_INVALID, "--pp-partition '%s': give %d block counts separated by commas", s, stages);
    }
    if (k != stages || out->first[stages] != n)
        return dt_errorf(DT_ERR_INVALID, "--pp-partition '%s': %d counts summing to %d, but the model has %d blocks for %d stages",
                         s, k, k ? out->first[k] : 0, n, stages);
    return DT_OK;
}

int dt_partition_stage(const dt_partition *p, int b) {
    int n = dt_partition_chunks(p);
    for (int c = 0; c < n; c++)
        if (b >= p->first[c] && b < p->first[c + 1]) return c % p->stages;
    return -1;
}

int dt_partition_blocks(const dt_partition *p, int s) {
    int n = 0;
    for (int c = s; c < dt_partition_chunks(p); c += p->stages) n += p->first[c + 1] - p->first[c];
    return n;
}

void dt_partition_interleave(dt_partition *p, int stages) {
    DT_ASSERT(stages >= 1 && p->stages % stages == 0);
    p->virt = p->stages / stages;
    p->stages = stages;
}
