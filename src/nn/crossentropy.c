/* Softmax cross-entropy, fused: forward keeps the probabilities so backward is
 * one pass, dlogits += scale * (probs - onehot). The row maximum is subtracted
 * before exponentiating, and the loss is taken as log(sum) - (z_t - max) rather
 * than -log(prob_t), which stays finite when prob_t underflows. */
#include "core/cpu.h"
#include "dtrain/nn.h"

#include <math.h>

DT_HOT void dt_crossentropy_forward(float *losses, float *probs, const float *logits,
                             const int32_t *targets, int N, int V) {
    for (int i = 0; i < N; i++) {
        const float *restrict z = logits + (size_t)i * V;
        float *restrict p = probs + (size_t)i * V;
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        float s = 0.0f;
        for (int v = 0; v < V; v++) {
            p[v] = expf(z[v] - mx);
            s += p[v];
        }
        float inv = 1.0f / s;
        for (int v = 0; v < V; v++) p[v] *= inv;
        losses[i] = logf(s) - (z[targets[i]] - mx);
    }
}

DT_HOT void dt_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets,
                              float scale, int N, int V) {
    if (!dlogits) return;
    for (int i = 0; i < N; i++) {
        float *restrict d = dlogits + (size_t)i * V;
        const float *restrict p = probs + (size_t)i * V;
        for (int v = 0; v < V; v++) d[v] += scale * p[v];
        d[targets[i]] -= scale;
    }
}
