/* The actor-critic network of the RL floor and its loss. Network: obs (D) ->
 * tanh(H) -> tanh(H) -> policy logits (A) and a value (1), PyTorch's layer
 * initialisation (weights and biases uniform in +-1/sqrt(fan_in)), one arena
 * of parameters and one of gradients. Cost per sample: 2(DH + H^2 + H(A+1))
 * flops forward, twice that backward.
 *
 * Loss over N samples (IMPALA's, with V-trace's vs and advantages):
 *   L = 1/N sum_i [ -adv_i log pi(a_i|x_i) + c_v/2 (V(x_i) - vs_i)^2 - c_e H(pi(.|x_i)) ]
 * whose gradient in the logits z is, with p = softmax(z),
 *   dL/dz_ij = 1/N [ -adv_i (1[j = a_i] - p_ij) + c_e p_ij (log p_ij + H_i) ]
 * and in the value 1/N c_v (V_i - vs_i). */
#include "dtrain/rl.h"
#include "dtrain/nn.h"

#include <math.h>
#include <string.h>

struct dt_policy {
    int D, H, A, cap;
    size_t n;
    float *w, *g;                 /* arenas: W1 b1 W2 b2 Wh bh, Wh = (A+1, H) */
    size_t o_w1, o_b1, o_w2, o_b2, o_wh, o_bh;
    float *h1, *h2, *head;        /* activations of the last forward (cap rows) */
    float *d1, *d2, *dhead;
    const float *x;
    int N;
};

static void init_layer(float *w, float *b, int out, int in, dt_rng *r) {
    float k = 1.0f / sqrtf((float)in);
    for (size_t i = 0; i < (size_t)out * (size_t)in; i++) w[i] = (2.0f * dt_rng_uniform(r) - 1.0f) * k;
    for (int i = 0; i < out; i++) b[i] = (2.0f * dt_rng_uniform(r) - 1.0f) * k;
}

dt_status dt_policy_create(dt_policy **out, int obs_dim, int n_actions, int hidden, int max_batch, uint64_t seed) {
    *out = NULL;
    if (obs_dim < 1 || n_actions < 2 || hidden < 1 || max_batch < 1)
        return dt_errorf(DT_ERR_INVALID, "policy: obs %d, actions %d, hidden %d, batch %d", obs_dim, n_actions, hidden, max_batch);
    dt_policy *p = dt_calloc(1, sizeof *p);
    if (!p) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    int D = obs_dim, H = hidden, A = n_actions;
    *p = (dt_policy){.D = D, .H = H, .A = A, .cap = max_batch};
    p->o_w1 = 0;
    p->o_b1 = p->o_w1 + (size_t)H * D;
    p->o_w2 = p->o_b1 + (size_t)H;
    p->o_b2 = p->o_w2 + (size_t)H * H;
    p->o_wh = p->o_b2 + (size_t)H;
    p->o_bh = p->o_wh + (size_t)(A + 1) * H;
    p->n = p->o_bh + (size_t)(A + 1);
    size_t rows = (size_t)max_batch;
    p->w = dt_alloc_floats(p->n);
    p->g = dt_alloc_floats(p->n);
    p->h1 = dt_alloc_floats(rows * H);
    p->h2 = dt_alloc_floats(rows * H);
    p->head = dt_alloc_floats(rows * (A + 1));
    p->d1 = dt_alloc_floats(rows * H);
    p->d2 = dt_alloc_floats(rows * H);
    p->dhead = dt_alloc_floats(rows * (A + 1));
    if (!p->w || !p->g || !p->h1 || !p->h2 || !p->head || !p->d1 || !p->d2 || !p->dhead) {
        dt_policy_destroy(p);
        return dt_errorf(DT_ERR_NOMEM, "out of memory for the policy network");
    }
    dt_rng r;
    dt_rng_init(&r, seed, 0x9011c7);
    init_layer(p->w + p->o_w1, p->w + p->o_b1, H, D, &r);
    init_layer(p->w + p->o_w2, p->w + p->o_b2, H, H, &r);
    init_layer(p->w + p->o_wh, p->w + p->o_bh, A + 1, H, &r);
    memset(p->g, 0, p->n * sizeof(float));
    *out = p;
    return DT_OK;
}

void dt_policy_destroy(dt_policy *p) {
    if (!p) return;
    dt_free(p->w);
    dt_free(p->g);
    dt_free(p->h1);
    dt_free(p->h2);
    dt_free(p->head);
    dt_free(p->d1);
    dt_free(p->d2);
    dt_free(p->dhead);
    dt_free(p);
}

size_t dt_policy_n_params(const dt_policy *p) { return p->n; }
float *dt_policy_params(dt_policy *p) { return p->w; }
float *dt_policy_grads(dt_policy *p) { return p->g; }

static void tanh_inplace(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i]);
}

dt_status dt_policy_forward(dt_policy *p, const float *obs, int N, float *logits, float *value) {
    if (N < 1 || N > p->cap) return dt_errorf(DT_ERR_INVALID, "policy: batch of %d, at most %d", N, p->cap);
    int D = p->D, H = p->H, A = p->A;
    dt_linear_forward(p->h1, obs, p->w + p->o_w1, p->w + p->o_b1, N, D, H);
    tanh_inplace(p->h1, (size_t)N * H);
    dt_linear_forward(p->h2, p->h1, p->w + p->o_w2, p->w + p->o_b2, N, H, H);
    tanh_inplace(p->h2, (size_t)N * H);
    dt_linear_forward(p->head, p->h2, p->w + p->o_wh, p->w + p->o_bh, N, H, A + 1);
    for (int i = 0; i < N; i++) {
        memcpy(logits + (size_t)i * A, p->head + (size_t)i * (A + 1), (size_t)A * sizeof(float));
        value[i] = p->head[(size_t)i * (A + 1) + A];
    }
    p->x = obs;
    p->N = N;
    return DT_OK;
}

void dt_policy_backward(dt_policy *p, const float *dlogits, const float *dvalue) {
    int N = p->N, D = p->D, H = p->H, A = p->A;
    for (int i = 0; i < N; i++) {
        memcpy(p->dhead + (size_t)i * (A + 1), dlogits + (size_t)i * A, (size_t)A * sizeof(float));
        p->dhead[(size_t)i * (A + 1) + A] = dvalue[i];
    }
    memset(p->d2, 0, (size_t)N * H * sizeof(float));
    dt_linear_backward(p->d2, p->g + p->o_wh, p->g + p->o_bh, p->dhead, p->h2, p->w + p->o_wh, N, H, A + 1);
    for (size_t k = 0; k < (size_t)N * H; k++) p->d2[k] *= 1.0f - p->h2[k] * p->h2[k];
    memset(p->d1, 0, (size_t)N * H * sizeof(float));
    dt_linear_backward(p->d1, p->g + p->o_w2, p->g + p->o_b2, p->d2, p->h1, p->w + p->o_w2, N, H, H);
    for (size_t k = 0; k < (size_t)N * H; k++) p->d1[k] *= 1.0f - p->h1[k] * p->h1[k];
    dt_linear_backward(NULL, p->g + p->o_w1, p->g + p->o_b1, p->d1, p->x, p->w + p->o_w1, N, D, H);
}

void dt_log_softmax(const float *logits, int N, int A, float *out) {
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * A;
        double m = z[0], s = 0;
        for (int j = 1; j < A; j++) m = z[j] > m ? z[j] : m;
        for (int j = 0; j < A; j++) s += exp((double)z[j] - m);
        double lse = m + log(s);
        for (int j = 0; j < A; j++) out[(size_t)i * A + j] = (float)((double)z[j] - lse);
    }
}

double dt_ac_loss(const float *logits, const float *value, const int *actions, const float *adv, const float *vs, int N, int A,
                  float value_coef, float entropy_coef, float *dlogits, float *dvalue) {
    double loss = 0;
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * A;
        double m = z[0], s = 0, ent = 0;
        for (int j = 1; j < A; j++) m = z[j] > m ? z[j] : m;
        for (int j = 0; j < A; j++) s += exp((double)z[j] - m);
        double lse = m + log(s);
        for (int j = 0; j < A; j++) {
            double lp = (double)z[j] - lse;
            ent -= exp(lp) * lp;
        }
        double dv = (double)value[i] - (double)vs[i];
        loss += -(double)adv[i] * ((double)z[actions[i]] - lse) + 0.5 * value_coef * dv * dv - entropy_coef * ent;
        for (int j = 0; j < A; j++) {
            double lp = (double)z[j] - lse, pj = exp(lp);
            double d = -(double)adv[i] * ((j == actions[i] ? 1.0 : 0.0) - pj) + entropy_coef * pj * (lp + ent);
            dlogits[(size_t)i * A + j] = (float)(d / N);
        }
        dvalue[i] = (float)(value_coef * dv / N);
    }
    return loss / N;
}
