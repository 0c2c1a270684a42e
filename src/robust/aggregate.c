/* Byzantine-robust aggregation (see include/dtrain/aggregate.h). Per coordinate
 * the n values are sorted in a fixed order, so every rank gets the same bits:
 * up to 16 workers by an odd-even transposition network run on 64 coordinates
 * at once (branch-free min/max, vectorised), beyond by an insertion sort. */
#include "dtrain/aggregate.h"

#include <math.h>
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
    } else if (strcmp(s, "cclip") == 0 || strncmp(s, "cclip:", 6) == 0) {
        out->kind = DT_AGG_CCLIP;
        if (s[5] == ':') {
            double t = strtod(s + 6, &end);
            if (end == s + 6 || *end || !((float)t > 0 && t < 1e30)) /* also a radius that rounds to 0 as a float */
                return dt_errorf(DT_ERR_INVALID, "--aggregate %s: cclip:TAU needs a clipping radius TAU > 0 (or plain cclip: the median distance)", s);
            out->tau = (float)t;
        }
    } else {
        return dt_errorf(DT_ERR_INVALID, "--aggregate must be mean, median, trimmed:B, krum:F or cclip[:TAU], got '%s'", s);
    }
    return DT_OK;
}

dt_status dt_agg_parse_pre(const char *s, dt_agg *a) {
    char *end;
    if (strcmp(s, "none") == 0) a->nnm = 0;
    else if (strcmp(s, "nnm") == 0) a->nnm = -1;
    else if (strncmp(s, "nnm:", 4) == 0) {
        long v = strtol(s + 4, &end, 10);
        if (end == s + 4 || *end || v < 1 || v > 100000)
            return dt_errorf(DT_ERR_INVALID, "--pre-aggregate %s: nnm:F needs F >= 1 (bad workers tolerated)", s);
        a->nnm = (int)v;
    } else {
        return dt_errorf(DT_ERR_INVALID, "--pre-aggregate must be none, nnm or nnm:F, got '%s'", s);
    }
    return DT_OK;
}

int dt_agg_tolerated(const dt_agg *a, int n) {
    switch (a->kind) {
    case DT_AGG_MEDIAN:
    case DT_AGG_CCLIP: return (n - 1) / 2;
    case DT_AGG_TRIMMED:
    case DT_AGG_KRUM: return a->param;
    default: return 0;
    }
}

static int nnm_f(const dt_agg *a, int n) { return a->nnm < 0 ? dt_agg_tolerated(a, n) : a->nnm; }

static dt_status rule_check(const dt_agg *a, int n) {
    switch (a->kind) {
    case DT_AGG_MEDIAN:
        if (n < 3) return dt_errorf(DT_ERR_INVALID, "--aggregate median needs at least 3 workers to tolerate one bad one (f < n/2), got %d", n);
        return DT_OK;
    case DT_AGG_CCLIP:
        if (n < 3) return dt_errorf(DT_ERR_INVALID, "--aggregate cclip needs at least 3 workers to tolerate one bad one (f < n/2), got %d", n);
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

dt_status dt_agg_check(const dt_agg *a, int n) {
    dt_status st = rule_check(a, n);
    if (st) return st;
    if (a->nnm) {
        if (a->kind != DT_AGG_MEDIAN && a->kind != DT_AGG_TRIMMED && a->kind != DT_AGG_KRUM && a->kind != DT_AGG_CCLIP)
            return dt_errorf(DT_ERR_INVALID, "--pre-aggregate nnm needs a robust --aggregate (median, trimmed:B, krum:F or cclip): "
                                             "the mean of the mixed vectors still follows a bad one");
        if (n > 256) return dt_errorf(DT_ERR_INVALID, "--pre-aggregate nnm supports at most 256 workers");
        int f = nnm_f(a, n);
        if (f < 1)
            return dt_errorf(DT_ERR_INVALID, "--pre-aggregate nnm with --aggregate krum:0 plans for no bad worker: give nnm:F (F >= 1)");
        if (n < 2 * f + 1)
            return dt_errorf(DT_ERR_INVALID, "--pre-aggregate nnm:%d needs at least %d workers (n >= 2F+1, F >= 1), got %d", f,
                             2 * f + 1, n);
    }
    return DT_OK;
}

/* Floats of the rule's own scratch (Krum: distances and scores as doubles;
 * median and trimmed mean: one block of 64 coordinates per worker and one
 * column to sort beyond 16 workers). */
static size_t rule_scratch(const dt_agg *a, int n) {
    size_t nn = (size_t)n * (size_t)n * 2 + 2 * (size_t)n;
    if (a->kind == DT_AGG_KRUM) return nn;
    if (a->kind == DT_AGG_CCLIP) return 4 * (size_t)n; /* distances and their sorted copy, as doubles */
    if (a->kind == DT_AGG_MEDIAN || a->kind == DT_AGG_TRIMMED) return (size_t)n * 65; /* blocks + one column */
    return 1;
}

/* NNM's mixed vectors sit after the rule's scratch (and its distance matrix). */
static size_t mixed_at(const dt_agg *a, int n) {
    size_t r = rule_scratch(a, n), nn = (size_t)n * (size_t)n * 2;
    if (r < nn) r = nn;
    return (r + 15) & ~(size_t)15;
}

size_t dt_agg_scratch_floats(const dt_agg *a, int n, size_t P) {
    if (!a->nnm) return rule_scratch(a, n);
    return mixed_at(a, n) + (size_t)n * P;
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

/* Krum's distances and cclip's norms: n is small, an insertion sort. */
static void sort_doubles(double *v, int n) {
    for (int i = 1; i < n; i++) {
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

/* A NaN from a bad worker would make every comparison false and could land
 * anywhere in a sort: it counts as +inf, the extreme a rule drops. */
static inline float finite_or_inf(float x) { return x != x ? INFINITY : x; }

/* Squared distances between the n vectors into d (n x n doubles); a distance
 * that is not a number (a NaN coordinate) counts as infinitely far. */
static void distances(double *d, const float *vecs, int n, size_t P) {
    for (int i = 0; i < n; i++) {
        d[(size_t)i * n + i] = 0;
        for (int k = i + 1; k < n; k++) {
            const float *x = vecs + (size_t)i * P, *y = vecs + (size_t)k * P;
            double s = 0;
            for (size_t j = 0; j < P; j++) {
                double t = (double)x[j] - (double)y[j];
                s += t * t;
            }
            if (s != s) s = INFINITY;
            d[(size_t)i * n + k] = d[(size_t)k * n + i] = s;
        }
    }
}

/* out = the mean of the k vectors with the smallest score (ties: the lower
 * index), summed in the order picked; returns the first pick. n <= 256. */
static int mean_of_smallest(float *out, const float *vecs, int n, size_t P, const double *score, int k) {
    bool taken[256] = {false};
    int first = -1;
    memset(out, 0, P * sizeof(float));
    for (int t = 0; t < k; t++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!taken[i] && (best < 0 || score[i] < score[best])) best = i;
        taken[best] = true;
        if (first < 0) first = best;
        const float *x = vecs + (size_t)best * P;
        for (size_t j = 0; j < P; j++) out[j] += x[j];
    }
    float inv = 1.0f / (float)k;
    for (size_t j = 0; j < P; j++) out[j] *= inv;
    return first;
}

/* Nearest-neighbour mixing: mixed_i = mean of the n-f vectors nearest to
 * vector i (itself first, at distance 0). */
static void nnm(float *mixed, const float *vecs, int n, size_t P, int f, double *d) {
    distances(d, vecs, n, P);
    for (int i = 0; i < n; i++) mean_of_smallest(mixed + (size_t)i * P, vecs, n, P, d + (size_t)i * n, n - f);
}

/* Median (B < 0) or trimmed mean of B per side, coordinate-wise. */
static void order_stat(float *restrict out, const float *restrict vecs, int n, size_t P, int B, float *restrict t) {
    enum { J = 64 };
    for (size_t j0 = 0; j0 < P; j0 += J) {
        size_t J1 = P - j0 < J ? P - j0 : J;
        if (n <= 16) {
            /* t[i][0..J): worker i's values; n passes of compare-exchange sort them. */
            for (int i = 0; i < n; i++) {
                const float *src = vecs + (size_t)i * P + j0;
                for (size_t x = 0; x < J1; x++) t[(size_t)i * J + x] = finite_or_inf(src[x]);
                for (size_t x = J1; x < J; x++) t[(size_t)i * J + x] = 0;
            }
            for (int pass = 0; pass < n; pass++)
                for (int i = pass & 1; i + 1 < n; i += 2) {
                    float *restrict a = t + (size_t)i * J, *restrict b = a + J;
                    for (int x = 0; x < J; x++) {
                        float lo = a[x] < b[x] ? a[x] : b[x], hi = a[x] < b[x] ? b[x] : a[x];
                        a[x] = lo;
                        b[x] = hi;
                    }
                }
        } else {
            float *col = t + (size_t)n * J;
            for (size_t x = 0; x < J1; x++) {
                for (int i = 0; i < n; i++) col[i] = finite_or_inf(vecs[(size_t)i * P + j0 + x]);
                sort_small(col, n);
                for (int i = 0; i < n; i++) t[(size_t)i * J + x] = col[i];
            }
        }
        for (size_t x = 0; x < J1; x++) {
            if (B < 0) {
                out[j0 + x] = n % 2 ? t[(size_t)(n / 2) * J + x] : 0.5f * (t[(size_t)(n / 2 - 1) * J + x] + t[(size_t)(n / 2) * J + x]);
            } else {
                double s = 0;
                for (int i = B; i < n - B; i++) s += t[(size_t)i * J + x];
                out[j0 + x] = (float)(s / (double)(n - 2 * B));
            }
        }
    }
}

/* Centred clipping, one pass from the centre v = out: every difference x_i - v
 * is scaled down to norm tau when longer (tau <= 0: the median of the n norms,
 * the lower one for even n), and v moves by their mean. A difference whose norm
 * is not finite (a NaN or inf coordinate) counts as infinitely long and moves
 * nothing. s: 2n doubles. */
static void cclip(float *v, const float *vecs, int n, size_t P, float tau, double *s) {
    double *norm = s, *sorted = s + n;
    for (int i = 0; i < n; i++) {
        const float *x = vecs + (size_t)i * P;
        double q = 0;
        for (size_t j = 0; j < P; j++) {
            double t = (double)x[j] - (double)v[j];
            q += t * t;
        }
        norm[i] = q == q && q < INFINITY ? sqrt(q) : INFINITY;
        sorted[i] = norm[i];
    }
    double r = tau;
    if (!(tau > 0)) {
        sort_doubles(sorted, n);
        r = sorted[(n - 1) / 2];
    }
    /* weights: 1 inside the radius, r/|d| outside, 0 for a non-finite difference */
    for (int i = 0; i < n; i++) norm[i] = norm[i] == INFINITY ? 0 : (norm[i] > r ? r / norm[i] : 1.0);
    for (size_t j = 0; j < P; j++) {
        double acc = 0;
        for (int i = 0; i < n; i++)
            if (norm[i] > 0) acc += norm[i] * ((double)vecs[(size_t)i * P + j] - (double)v[j]);
        v[j] = (float)((double)v[j] + acc / n);
    }
}

int dt_agg_apply(const dt_agg *a, float *out, const float *vecs, int n, size_t P, float *scratch) {
    if (a->nnm && a->kind != DT_AGG_NONE && a->kind != DT_AGG_MEAN) {
        float *mixed = scratch + mixed_at(a, n);
        nnm(mixed, vecs, n, P, nnm_f(a, n), (double *)scratch);
        dt_agg plain = *a;
        plain.nnm = 0;
        return dt_agg_apply(&plain, out, mixed, n, P, scratch);
    }
    switch (a->kind) {
    case DT_AGG_MEDIAN:
    case DT_AGG_TRIMMED:
        order_stat(out, vecs, n, P, a->kind == DT_AGG_TRIMMED ? a->param : -1, scratch);
        return -1;
    case DT_AGG_KRUM: {
        double *d = (double *)scratch;
        distances(d, vecs, n, P);
        int keep = n - a->param - 2;
        double *score = d + (size_t)n * n;
        for (int i = 0; i < n; i++) {
            /* sum of the `keep` smallest distances to the others */
            double row[256];
            int mrow = 0;
            for (int k = 0; k < n && mrow < 256; k++)
                if (k != i) row[mrow++] = d[(size_t)i * n + k];
            sort_doubles(row, mrow);
            score[i] = 0;
            for (int x = 0; x < keep && x < mrow; x++) score[i] += row[x];
        }
        /* Average the M best-scored workers (ties: the lower index). */
        return mean_of_smallest(out, vecs, n, P, score, a->m > 0 ? a->m : n - a->param);
    }
    case DT_AGG_CCLIP:
        cclip(out, vecs, n, P, a->tau, (double *)scratch);
        return -1;
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

void dt_agg_alie(float *vecs, int n, size_t P, const bool *bad, float z) {
    int h = 0;
    for (int k = 0; k < n; k++) h += !bad[k];
    if (h == 0) return;
    for (size_t j = 0; j < P; j++) {
        double sum = 0, sq = 0;
        for (int k = 0; k < n; k++)
            if (!bad[k]) sum += vecs[(size_t)k * P + j];
        double mu = sum / h;
        for (int k = 0; k < n; k++)
            if (!bad[k]) {
                double d = vecs[(size_t)k * P + j] - mu;
                sq += d * d;
            }
        float v = (float)(mu - (double)z * sqrt(sq / h));
        for (int k = 0; k < n; k++)
            if (bad[k]) vecs[(size_t)k * P + j] = v;
    }
}

float dt_agg_alie_z(int n, int f) {
    int s = n / 2 + 1 - f;
    double q = (double)(n - s) / (double)n;
    if (!(q > 0.5) || q >= 1.0) return 0.0f;
    /* Phi^-1(q) by bisection on Phi(x) = erfc(-x / sqrt 2) / 2 (monotone). */
    double lo = 0, hi = 10;
    for (int i = 0; i < 100; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < q) lo = mid;
        else hi = mid;
    }
    return (float)(0.5 * (lo + hi));
}
