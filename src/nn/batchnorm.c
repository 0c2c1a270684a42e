/* Batch normalisation over x (N, C, S), statistics per channel c over the N*S
 * elements (n, s): S = H*W for BatchNorm2d, S = 1 for BatchNorm1d on (N, C).
 *
 * Train mode is split into steps so that SyncBatchNorm is the same kernels
 * with an all-reduce of C (then 2C) floats between them:
 *   sum -> [all-reduce] -> mean = sum / count
 *   sqdev -> [all-reduce] -> var = sqdev / count (biased), rstd = 1/sqrt(var + eps)
 *   forward
 *   bwd_sums -> [all-reduce] -> backward
 * The variance is taken around the (global) mean in a second pass rather than
 * as E[x^2] - E[x]^2, which cancels catastrophically for large means, and every
 * reduction runs in double: a channel of a 64 x 56 x 56 batch has 2e5 terms.
 *
 * Loop order: channels are taken in blocks of BN_CB whose double accumulators
 * live on the stack; inside a block, samples outer, channels, then the S
 * contiguous positions. Both layouts then stream through memory in order: the
 * (N, C) of BatchNorm1d (S = 1) reads whole rows, (N, C, H*W) whole planes. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#define BN_CB 64

static int block_len(int c0, int C) { return C - c0 < BN_CB ? C - c0 : BN_CB; }

DT_HOT void dt_batchnorm_sum(float *sum, const float *inp, int N, int C, int S) {
    for (int c0 = 0; c0 < C; c0 += BN_CB) {
        const int nc = block_len(c0, C);
        double acc[BN_CB] = {0};
        for (int n = 0; n < N; n++)
            for (int k = 0; k < nc; k++) {
                const float *restrict x = inp + ((size_t)n * C + c0 + k) * S;
                double s = 0;
                for (int i = 0; i < S; i++) s += x[i];
                acc[k] += s;
            }
        for (int k = 0; k < nc; k++) sum[c0 + k] = (float)acc[k];
    }
}

DT_HOT void dt_batchnorm_sqdev(float *sq, const float *inp, const float *mean, int N, int C,
                               int S) {
    for (int c0 = 0; c0 < C; c0 += BN_CB) {
        const int nc = block_len(c0, C);
        double acc[BN_CB] = {0};
        for (int n = 0; n < N; n++)
            for (int k = 0; k < nc; k++) {
                const float *restrict x = inp + ((size_t)n * C + c0 + k) * S;
                const double m = mean[c0 + k];
                double s = 0;
                for (int i = 0; i < S; i++) s += ((double)x[i] - m) * ((double)x[i] - m);
                acc[k] += s;
            }
        for (int k = 0; k < nc; k++) sq[c0 + k] = (float)acc[k];
    }
}

DT_HOT void dt_batchnorm_forward(float *out, const float *inp, const float *mean,
                                 const float *rstd, const float *gamma, const float *beta, int N,
                                 int C, int S) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const size_t at = ((size_t)n * C + c) * S;
            const float *restrict x = inp + at;
            float *restrict o = out + at;
            const float m = mean[c], r = rstd[c] * gamma[c], b = beta[c];
            for (int i = 0; i < S; i++) o[i] = (x[i] - m) * r + b;
        }
}

/* Channels [c0, c0 + nc): sdy[k] = sum dy, sdyx[k] = sum dy * (x - mean), in
 * double; the caller multiplies the second by rstd once per channel. */
static void local_sums(double *sdy, double *sdyx, const float *dout, const float *inp,
                       const float *mean, int N, int C, int S, int c0, int nc) {
    for (int k = 0; k < nc; k++) sdy[k] = sdyx[k] = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < nc; k++) {
            const size_t at = ((size_t)n * C + c0 + k) * S;
            const float *restrict x = inp + at;
            const float *restrict g = dout + at;
            const double m = mean[c0 + k];
            double a = 0, b = 0;
            for (int i = 0; i < S; i++) {
                a += g[i];
                b += (double)g[i] * ((double)x[i] - m);
            }
            sdy[k] += a;
            sdyx[k] += b;
        }
}

DT_HOT void dt_batchnorm_bwd_sums(float *sums, const float *dout, const float *inp,
                                  const float *mean, const float *rstd, int N, int C, int S) {
    for (int c0 = 0; c0 < C; c0 += BN_CB) {
        const int nc = block_len(c0, C);
        double sdy[BN_CB], sdyx[BN_CB];
        local_sums(sdy, sdyx, dout, inp, mean, N, C, S, c0, nc);
        for (int k = 0; k < nc; k++) {
            sums[c0 + k] = (float)sdy[k];
            sums[C + c0 + k] = (float)(sdyx[k] * rstd[c0 + k]);
        }
    }
}

/* With xhat = (x - mean) rstd, y = gamma xhat + beta and the statistics taken
 * over the whole group (count elements per channel):
 *   dx = gamma rstd (dy - mean(dy) - xhat mean(dy xhat)),
 * the means over the group, i.e. gsums / count. */
DT_HOT void dt_batchnorm_backward(float *dinp, float *dgamma, float *dbeta, const float *dout,
                                  const float *inp, const float *mean, const float *rstd,
                                  const float *gamma, const float *gsums, double count, int N,
                                  int C, int S) {
    if (dgamma || dbeta) {
        for (int c0 = 0; c0 < C; c0 += BN_CB) {
            const int nc = block_len(c0, C);
            double sdy[BN_CB], sdyx[BN_CB];
            local_sums(sdy, sdyx, dout, inp, mean, N, C, S, c0, nc);
            for (int k = 0; k < nc; k++) {
                if (dgamma) dgamma[c0 + k] += (float)(sdyx[k] * rstd[c0 + k]);
                if (dbeta) dbeta[c0 + k] += (float)sdy[k];
            }
        }
    }
    if (!dinp) return;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const size_t at = ((size_t)n * C + c) * S;
            const float *restrict x = inp + at;
            const float *restrict g = dout + at;
            float *restrict dx = dinp + at;
            const float m = mean[c], r = rstd[c], k = gamma[c] * rstd[c];
            const float mdy = (float)(gsums[c] / count), mdyx = (float)(gsums[C + c] / count);
            for (int i = 0; i < S; i++) dx[i] += k * (g[i] - mdy - (x[i] - m) * r * mdyx);
        }
}
