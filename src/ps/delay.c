/* Delay-tolerant asynchronous SGD (ASP and SSP): what a server does to a push
 * computed on parameters that others have updated since the worker read them.
 *
 * Staleness-aware learning rate (after Zhang et al., IJCAI 2016): the push's
 * step is scaled by 1/(1 + tau), tau = the updates the server applied since the
 * worker read its parameters, in rounds of W pushes (floor(pushes / W)): a
 * worker that keeps pace with the others (the W-1 others push once while it
 * computes) has tau = 0 and the plain step; a worker 10x slower than two others
 * sees ~20 pushes, tau ~ 6, a 1/7 step.
 *
 * Delay compensation (DC-ASGD, Zheng et al., ICML 2017): the gradient at the
 * parameters the worker read, g(w_read), is corrected to approximate g(w_now)
 * with the diagonal of the outer product g g^T standing in for the Hessian:
 *   g' = g + lambda * g * g * (w_now - w_read)      (elementwise)
 * The server keeps w_read: the values it sent the worker at its last pull.
 * Cost: one pass over the range per push, O(range) memory per worker (the
 * reply buffers the server keeps anyway). */
#include "ps_internal.h"

float dt_ps_staleness_scale(int64_t pushes_since_read, int W) {
    int64_t tau = pushes_since_read > 0 && W > 0 ? pushes_since_read / W : 0;
    return 1.0f / (1.0f + (float)tau);
}

void dt_ps_delay_compensate(float *g, const float *w_now, const float *w_read, size_t n, float lambda) {
    for (size_t i = 0; i < n; i++) g[i] += lambda * g[i] * g[i] * (w_now[i] - w_read[i]);
}
