/* Embedding lookup, out[i] = table[ids[i]]. Backward scatters rows back into
 * dtable; repeated ids accumulate, which is why it adds rather than writes. */
#include "dtrain/nn.h"

#include <string.h>

void dt_embedding_forward(float *out, const int32_t *ids, const float *table, int N, int C) {
    for (int i = 0; i < N; i++)
        memcpy(out + (size_t)i * C, table + (size_t)ids[i] * C, (size_t)C * sizeof(float));
}

void dt_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C) {
    for (int i = 0; i < N; i++) {
        float *restrict d = dtable + (size_t)ids[i] * C;
        const float *restrict g = dout + (size_t)i * C;
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
}
