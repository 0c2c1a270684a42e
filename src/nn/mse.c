/* Mean squared error per row: losses[i] = sum_j (pred - target)^2 / D, so that
 * a mean over the N rows (scale 1/N in backward) is torch.nn.MSELoss()'s mean
 * over all N*D elements. Backward: dpred += scale * 2 (pred - target) / D,
 * scale being dL/dlosses[i] as in dt_crossentropy_backward. The target is data
 * and gets no gradient. */
#include "core/cpu.h"
#include "dtrain/nn.h"

DT_HOT void dt_mse_forward(float *losses, const float *pred, const float *target, int N, int D) {
    for (int i = 0; i < N; i++) {
        const float *restrict p = pred + (size_t)i * D;
        const float *restrict y = target + (size_t)i * D;
        float s = 0.0f;
        for (int j = 0; j < D; j++) s += (p[j] - y[j]) * (p[j] - y[j]);
        losses[i] = s / (float)D;
    }
}

DT_HOT void dt_mse_backward(float *dpred, const float *pred, const float *target, float scale,
                            int N, int D) {
    if (!dpred) return;
    const float k = 2.0f * scale / (float)D;
    const size_t n = (size_t)N * D;
    for (size_t i = 0; i < n; i++) dpred[i] += k * (pred[i] - target[i]);
}
