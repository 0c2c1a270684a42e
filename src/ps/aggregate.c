/* Byzantine-robust aggregation (see include/dtrain/aggregate.h). Per coordinate
 * the n values are sorted with an insertion sort (n is the number of workers:
 * small), in a fixed order, so every rank gets the same bits. */
#include "dtrain/aggregate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dt_status dt_agg_parse(const char *s, dt_agg *out) {
    memset(out, 0, sizeof *out);
    char *end;
    if (strcmp(s, "mean") == 0) out->kind = DT_AGG_MEAN;
    else if (strcmp(s, "median") == 0) out->kind = DT_AGG_MEDIAN;
    else if (strncmp(s, "trimmed:", 8) == 0) {
        out->kind = DT_AGG_TRIMMED;
        long v = strtol(s + 8, &end, 10);
        if (end == s + 8 || *end || v < 1 || v > 100000)
            return dt_errorf(DT_ERR_INVALID, "--aggregate %s: trimmed:B needs B >= 1 (values dropped per side)", s);
        out->param = (int)v;
    } else if (strncmp(s, "krum:", 5) == 0) {
        out->kind = DT_AGG_KRUM;
        long v = strtol(s + 5, &end, 10);
        if (end == s + 5 || (*end && *end != ':') || v < 0 || v > 100000)
            return dt_errorf(DT_ERR_INVALID, "--aggregate %s: krum:F[:M] needs F >= 0 (bad workers tolerated)", s);
        out->param = (int)v;
        if (*end == ':') {
            const char *q = end + 1;
            long mm = strtol(q, &end, 10);
            if (end == q || *end || mm < 1 || mm > 100000)
                return dt_errorf(DT_ERR_INVALID, "--aggregate %s: krum:F:M needs M >= 1 (workers averaged)", s);
            out->m = (int)mm;
        }
    } else {
        return dt_errorf(DT_ERR_INVALID, "--aggregate must be mean, median, trimmed:B or krum:F, got '%s'", s);
    }
    return DT_OK;
}

dt_status dt_agg_check(const dt_agg *a, int n) {
    switch (a->kind) {
    case DT_AGG_MEDIAN:
        if (n < 3) return dt_errorf(DT_ERR_INVALID, "--aggregate median needs at least 3 workers to tolerate one bad one (f < n/2), got %d", n);
        return DT_OK;
    case DT_AGG_TRIMMED:
        if (n <= 2 * a->param)
            return dt_errorf(DT_ERR_INVALID, "--aggregate trimmed:%d needs more than %d workers (n > 2B), got %d", a->param, 2 * a->param, n);
        return DT_OK;
    case DT_AGG_KRUM:
        if (n > 256) return dt_errorf(DT_ERR_INVALID, "--aggregate krum supports at most 256 workers");
        if (n < 2 * a->param + 3)
            return dt_errorf(DT_ERR_INVALID, "--aggregate krum:%d needs at least %d workers (n >= 2F+3), got %d", a->param, 2 * a->param + 3, n);
        if (a->m > n - a->param)
            return dt_errorf(DT_ERR_INVALID, "--aggregate krum:%d:%d may average at most n-F = %d workers", a->param, a->m, n - a->param);
        return DT_OK;
    default:
        return DT_OK;
    }
}

size_t dt_agg_scratch_floats(const dt_agg *a, int n, size_t P) {
    if (a->kind == DT_AGG_KRUM) return (size_t)n * (size_t)n * 2 + 2 * (size_t)n; /* distances, scores (doubles) */
    return (size_t)n;
}

static void sort_small(float *v, int n) {
    for (int i = 1; i < n; i++) {
        float x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

int dt_agg_apply(const dt_agg *a, float *out, const float *vecs, int n, size_t P, float *scratch) {
    switch (a->kind) {
    case DT_AGG_MEDIAN:
    case DT_AGG_TRIMMED: {
        int B = a->kind == DT_AGG_TRIMMED ? a->param : 0;
        for (size_t j = 0; j < P; j++) {
            for (int i = 0; i < n; i++) scratch[i] = vecs[(size_t)i * P + j];
            sort_small(scratch, n);
            if (a->kind == DT_AGG_MEDIAN) {
                out[j] = n % 2 ? scratch[n / 2] : 0.5f * (scratch[n / 2 - 1] + scratch[n / 2]);
            } else {
                double s = 0;
                for (int i = B; i < n - B; i++) s += scratch[i];
                out[j] = (float)(s / (double)(n - 2 * B));
            }
        }
        return -1;
    }
    case DT_AGG_KRUM: {
        double *d = (double *)scratch;
        for (int i = 0; i < n; i++) {
            d[(size_t)i * n + i] = 0;
            for (int k = i + 1; k < n; k++) {
                const float *x = vecs + (size_t)i * P, *y = vecs + (size_t)k * P;
                double s = 0;
                for (size_t j = 0; j < P; j++) {
                    double t = (double)x[j] - (double)y[j];
                    s += t * t;
                }
                d[(size_t)i * n + k] = d[(size_t)k * n + i] = s;
            }
        }
        int keep = n - a->param - 2;
        double *score = d + (size_t)n * n;
        for (int i = 0; i < n; i++) {
            /* sum of the `keep` smallest distances to the others */
            double row[256];
            int mrow = 0;
            for (int k = 0; k < n && mrow < 256; k++)
                if (k != i) row[mrow++] = d[(size_t)i * n + k];
            for (int x = 1; x < mrow; x++) {
                double v = row[x];
                int y = x - 1;
                while (y >= 0 && row[y] > v) {
                    row[y + 1] = row[y];
                    y--;
                }
                row[y + 1] = v;
            }
            score[i] = 0;
            for (int x = 0; x < keep && x < mrow; x++) score[i] += row[x];
        }
        /* Average the M best-scored workers (ties: the lower index). */
        int M = a->m > 0 ? a->m : n - a->param;
        bool taken[256] = {false};
        int first = -1;
        memset(out, 0, P * sizeof(float));
        for (int k = 0; k < M; k++) {
            int best = -1;
            for (int i = 0; i < n; i++)
                if (!taken[i] && (best < 0 || score[i] < score[best])) best = i;
            taken[best] = true;
            if (first < 0) first = best;
            const float *x = vecs + (size_t)best * P;
            for (size_t j = 0; j < P; j++) out[j] += x[j];
        }
        float inv = 1.0f / (float)M;
        for (size_t j = 0; j < P; j++) out[j] *= inv;
        return first;
    }
    default: {
        for (size_t j = 0; j < P; j++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += vecs[(size_t)i * P + j];
            out[j] = (float)(s / n);
        }
        return -1;
    }
    }
}
