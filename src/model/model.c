/* The block-list machinery: the builder calls that lay blocks and tensors out
 * in the arena, initialisation, the local <-> logical copies, activations, the
 * forward/backward drivers that walk a block range, and the loss blocks
 * (cross-entropy, mean squared error). Nothing here knows which model it runs;
 * a model is compiled from its description in build.c and desc.c. */
#include "blocks.h"

#include "dtrain/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- builder ---------------------------------------------------------------- */

dt_block *dt_builder_block(dt_builder *bd, const dt_block_ops *ops, const char *name,
                           size_t in_dim, size_t out_dim) {
    dt_model *m = bd->m;
    if (bd->st) return NULL;
    if (m->n_blocks == bd->cap_blocks) {
        int cap = bd->cap_blocks ? 2 * bd->cap_blocks : 8;
        dt_block *nb = dt_realloc_array(m->blocks, (size_t)cap, sizeof *nb);
        if (!nb) {
            bd->st = dt_errorf(DT_ERR_NOMEM, "out of memory building the model");
            return NULL;
        }
        m->blocks = nb;
        bd->cap_blocks = cap;
    }
    dt_block *b = &m->blocks[m->n_blocks++];
    memset(b, 0, sizeof *b);
    b->ops = ops;
    snprintf(b->name, sizeof b->name, "%s", name);
    b->in_dim = in_dim;
    b->out_dim = out_dim;
    b->param_lo = b->param_hi = m->n;
    return b;
}

size_t dt_builder_param(dt_builder *bd, const char *name, int ndim, const int64_t *shape,
                        int init, float init_scale) {
    dt_model *m = bd->m;
    if (bd->st) return 0;
    DT_ASSERT(m->n_blocks > 0 && ndim >= 1 && ndim <= 4);
    dt_block *b = &m->blocks[m->n_blocks - 1];
    DT_ASSERT(b->n_tensors < DT_BLOCK_MAX_TENSORS);
    if (m->n_params == bd->cap_params) {
        int cap = bd->cap_params ? 2 * bd->cap_params : 16;
        dt_param *np = dt_realloc_array(m->params, (size_t)cap, sizeof *np);
        if (!np) {
            bd->st = dt_errorf(DT_ERR_NOMEM, "out of memory building the model");
            return 0;
        }
        m->params = np;
        bd->cap_params = cap;
    }
    dt_param *p = &m->params[m->n_params++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        if (!dt_size_mul(numel, (size_t)shape[i], &numel)) bd->st = dt_errorf(DT_ERR_NOMEM, "tensor %s is too large", name);
    }
    p->numel = numel;
    p->offset = m->n;
    p->decay = ndim >= 2;
    p->block = m->n_blocks - 1;
    p->init = init;
    p->init_scale = init_scale;
    for (int i = 0; i < ndim; i++) p->lshape[i] = shape[i];
    p->lnumel = numel;
    p->split = DT_SPLIT_NONE;
    /* Keep every tensor 16-float aligned so kernels see aligned rows. */
    size_t padded = (numel + 15) & ~(size_t)15;
    if (!dt_size_add(m->n, padded, &m->n)) bd->st = dt_errorf(DT_ERR_NOMEM, "model is too large");
    b->off[b->n_tensors++] = p->offset;
    b->param_hi = m->n;
    return p->offset;
}

size_t dt_builder_param_tp(dt_builder *bd, const char *name, int ndim, const int64_t *lshape,
                           int init, float init_scale, int split, int nparts, const int64_t *pstart,
                           const int64_t *plen) {
    int64_t shape[4];
    for (int i = 0; i < ndim; i++) shape[i] = lshape[i];
    int64_t sum = 0;
    for (int k = 0; k < nparts; k++) sum += plen[k];
    if (split == DT_SPLIT_ROWS) shape[0] = sum;
    else if (split == DT_SPLIT_COLS) shape[ndim - 1] = sum;
    size_t off = dt_builder_param(bd, name, ndim, shape, init, init_scale);
    if (bd->st) return off;
    dt_param *p = &bd->m->params[bd->m->n_params - 1];
    size_t ln = 1;
    for (int i = 0; i < ndim; i++) {
        p->lshape[i] = lshape[i];
        ln *= (size_t)lshape[i];
    }
    p->lnumel = ln;
    p->split = split;
    p->nparts = nparts;
    for (int k = 0; k < nparts; k++) {
        p->pstart[k] = pstart[k];
        p->plen[k] = plen[k];
    }
    return off;
}

void dt_builder_use(dt_builder *bd, size_t offset) {
    dt_block *b = &bd->m->blocks[bd->m->n_blocks - 1];
    DT_ASSERT(b->n_tensors < DT_BLOCK_MAX_TENSORS);
    b->off[b->n_tensors++] = offset;
}

void dt_model_destroy(dt_model *m) {
    if (!m) return;
    dt_free(m->blocks);
    dt_free(m->layers);
    dt_free(m->params);
    dt_free(m->w);
    dt_free(m->g);
    dt_free(m);
}

/* Copies one parameter between its local part (local) and its logical tensor
 * (logical), in the direction to_local. */
static void copy_param(const dt_param *p, float *local, float *logical, bool to_local) {
    if (p->split == DT_SPLIT_NONE) {
        if (to_local) memcpy(local, logical, p->numel * sizeof(float));
        else memcpy(logical, local, p->numel * sizeof(float));
        return;
    }
    /* 2-D view [R, Cc] of the logical tensor; a 1-D tensor is [1, n]. */
    size_t R = p->ndim == 1 ? 1 : (size_t)p->lshape[0];
    size_t Cc = p->lnumel / R;
    if (p->split == DT_SPLIT_ROWS) {
        size_t lr = 0;
        for (int k = 0; k < p->nparts; k++) {
            size_t n = (size_t)p->plen[k] * Cc;
            float *a = local + lr * Cc, *b = logical + (size_t)p->pstart[k] * Cc;
            if (to_local) memcpy(a, b, n * sizeof(float));
            else memcpy(b, a, n * sizeof(float));
            lr += (size_t)p->plen[k];
        }
        return;
    }
    size_t W = 0;
    for (int k = 0; k < p->nparts; k++) W += (size_t)p->plen[k];
    for (size_t r = 0; r < R; r++) {
        size_t lc = 0;
        for (int k = 0; k < p->nparts; k++) {
            float *a = local + r * W + lc, *b = logical + r * Cc + (size_t)p->pstart[k];
            if (to_local) memcpy(a, b, (size_t)p->plen[k] * sizeof(float));
            else memcpy(b, a, (size_t)p->plen[k] * sizeof(float));
            lc += (size_t)p->plen[k];
        }
    }
}

void dt_model_init(dt_model *m, uint64_t seed) {
    memset(m->w, 0, m->n * sizeof(float));
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        /* The logical tensor is drawn whole, so every tp layout starts from the
         * same weights as one process. */
        float *w = p->split == DT_SPLIT_NONE ? m->w + p->offset : dt_alloc_floats(p->lnumel);
        DT_ASSERT(w);
        dt_rng r;
        dt_rng_init(&r, seed, 0x1000 + (uint64_t)i);
        switch (p->init) {
        case DT_INIT_UNIFORM:
            for (size_t j = 0; j < p->lnumel; j++)
                w[j] = (2.0f * dt_rng_uniform(&r) - 1.0f) * p->init_scale;
            break;
        case DT_INIT_NORMAL:
            for (size_t j = 0; j < p->lnumel; j++) w[j] = dt_rng_normal(&r) * p->init_scale;
            break;
        default:
            for (size_t j = 0; j < p->lnumel; j++) w[j] = p->init_scale;
            break;
        }
        if (p->split != DT_SPLIT_NONE) {
            copy_param(p, m->w + p->offset, w, true);
            dt_free(w);
        }
    }
}

void dt_model_set_dp(dt_model *m, dt_comm *dp) {
    for (int b = 0; b < m->n_blocks; b++) {
        m->blocks[b].dp = dp && dt_comm_size(dp) > 1 ? dp : NULL;
        m->blocks[b].tp_err = &m->tp_err;
    }
}

void dt_model_set_tp(dt_model *m, dt_comm *tp) {
    for (int b = 0; b < m->n_blocks; b++) {
        m->blocks[b].tp = tp && dt_comm_size(tp) > 1 ? tp : NULL;
        m->blocks[b].tp_err = &m->tp_err;
    }
}

void dt_model_local_to_logical(const dt_model *m, const float *local, const dt_model *full,
                               float *logical, bool owned_only, const bool *params_mask) {
    DT_ASSERT(m->n_params == full->n_params);
    bool lead = m->cfg.tp_size <= 1 || m->cfg.tp_rank == 0;
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        if (params_mask && !params_mask[i]) continue;
        if (owned_only && p->split == DT_SPLIT_NONE && !lead) continue;
        copy_param(p, (float *)local + p->offset, logical + full->params[i].offset, false);
    }
}

void dt_model_local_from_logical(const dt_model *m, float *local, const dt_model *full,
                                 const float *logical) {
    DT_ASSERT(m->n_params == full->n_params);
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        copy_param(p, local + p->offset, (float *)logical + full->params[i].offset, true);
    }
}

const dt_param *dt_model_find(const dt_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

void dt_model_zero_grad(dt_model *m) { memset(m->g, 0, m->n * sizeof(float)); }

/* ---- activations --------------------------------------------------------- */

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

dt_status dt_acts_create(dt_acts **out, const dt_model *m, int first, int last, int maxB) {
    *out = NULL;
    if (first < 0 || last >= m->n_blocks || first > last || maxB < 1)
        return dt_errorf(DT_ERR_INVALID, "bad block range [%d, %d] or batch %d", first, last, maxB);
    int nb = last - first + 1;
    dt_acts *a = dt_calloc(1, sizeof *a);
    if (!a) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    a->first = first;
    a->last = last;
    a->maxB = maxB;
    a->bound = dt_calloc((size_t)nb + 1, sizeof(float *));
    a->saved = dt_calloc((size_t)nb, sizeof(float *));
    if (!a->bound || !a->saved) goto nomem;

    /* One allocation: boundaries, saved activations, scratch, two gradient buffers. */
    size_t total = 0, maxdim = 0, maxscratch = 0, B = (size_t)maxB, t;
    bool ok = true;
    for (int i = 0; i <= nb; i++) {
        size_t dim = i < nb ? m->blocks[first + i].in_dim : m->blocks[last].out_dim;
        if (dim > maxdim) maxdim = dim;
        ok &= dt_size_mul(dim, B, &t) && dt_size_add(total, round16(t), &total);
    }
    for (int i = 0; i < nb; i++) {
        const dt_block *b = &m->blocks[first + i];
        ok &= dt_size_add(total, round16(b->ops->saved_floats(b, maxB)), &total);
        size_t s = b->ops->scratch_floats(b, maxB);
        if (s > maxscratch) maxscratch = s;
    }
    size_t dsz = 0;
    ok &= dt_size_mul(maxdim, B, &dsz);
    ok &= dt_size_add(total, round16(maxscratch), &total);
    ok &= dt_size_add(total, 2 * round16(dsz), &total);
    if (!ok) goto nomem;
    a->mem = dt_alloc_floats(total);
    if (!a->mem) goto nomem;
    a->n_floats = total;

    float *p = a->mem;
    for (int i = 0; i <= nb; i++) {
        size_t dim = i < nb ? m->blocks[first + i].in_dim : m->blocks[last].out_dim;
        a->bound[i] = p;
        p += round16(dim * B);
    }
    for (int i = 0; i < nb; i++) {
        const dt_block *b = &m->blocks[first + i];
        a->saved[i] = p;
        p += round16(b->ops->saved_floats(b, maxB));
    }
    a->scratch = p;
    p += round16(maxscratch);
    a->dbuf[0] = p;
    p += round16(dsz);
    a->dbuf[1] = p;
    *out = a;
    return DT_OK;
nomem:
    dt_acts_destroy(a);
    return dt_errorf(DT_ERR_NOMEM, "cannot allocate activations for batch %d", maxB);
}

dt_status dt_acts_create_shared(dt_acts **out, const dt_model *m, const dt_acts *share) {
    *out = NULL;
    int first = share->first, last = share->last, nb = last - first + 1;
    size_t B = (size_t)share->maxB, total = 0, maxdim = 0;
    for (int i = 0; i <= nb; i++) {
        size_t dim = i < nb ? m->blocks[first + i].in_dim : m->blocks[last].out_dim;
        if (dim > maxdim) maxdim = dim;
        total += round16(dim * B);
    }
    total += 2 * round16(maxdim * B);
    dt_acts *a = dt_calloc(1, sizeof *a);
    if (!a) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    a->first = first;
    a->last = last;
    a->maxB = share->maxB;
    a->shared = true;
    a->bound = dt_calloc((size_t)nb + 1, sizeof(float *));
    a->saved = dt_calloc((size_t)nb, sizeof(float *));
    a->mem = dt_alloc_floats(total);
    if (!a->bound || !a->saved || !a->mem) {
        dt_acts_destroy(a);
        return dt_errorf(DT_ERR_NOMEM, "cannot allocate activations for batch %d", share->maxB);
    }
    a->n_floats = total;
    float *p = a->mem;
    for (int i = 0; i <= nb; i++) {
        size_t dim = i < nb ? m->blocks[first + i].in_dim : m->blocks[last].out_dim;
        a->bound[i] = p;
        p += round16(dim * B);
    }
    for (int i = 0; i < nb; i++) a->saved[i] = share->saved[i];
    a->scratch = share->scratch;
    a->dbuf[0] = p;
    a->dbuf[1] = p + round16(maxdim * B);
    *out = a;
    return DT_OK;
}

void dt_acts_destroy(dt_acts *a) {
    if (!a) return;
    dt_free(a->bound);
    dt_free(a->saved);
    dt_free(a->mem);
    dt_free(a);
}

float dt_model_forward(const dt_model *m, dt_acts *a, const dt_batch *b, const float *in) {
    DT_ASSERT(b->B >= 1 && b->B <= a->maxB);
    int nb = a->last - a->first + 1;
    if (in && a->first > 0)
        memcpy(a->bound[0], in, (size_t)b->B * m->blocks[a->first].in_dim * sizeof(float));
    const dt_param_hooks *h = &m->params_hook;
    for (int i = 0; i < nb; i++) {
        const dt_block *blk = &m->blocks[a->first + i];
        const float *bin = (a->first + i == 0) ? NULL : a->bound[i];
        if (h->use) h->use(h->ctx, a->first + i, DT_PARAMS_FORWARD, b->eval);
        blk->ops->forward(blk, m->w, b, bin, a->bound[i + 1], a->saved[i], a->scratch);
        if (h->use) h->use(h->ctx, a->first + i, DT_PARAMS_FORWARD_DONE, b->eval);
    }
    const dt_block *lastb = &m->blocks[a->last];
    if (!lastb->is_loss) return 0.0f;
    const float *losses = a->bound[nb];
    size_t terms = (size_t)b->B * lastb->out_dim;
    double sum = 0;
    for (size_t i = 0; i < terms; i++) sum += losses[i];
    return (float)(sum * b->loss_scale);
}

/* Backward through the acts' range in reverse; with recompute, each block's
 * forward is run again from its kept input first (its output is rewritten with
 * the same values) to rebuild its saved activations. */
static void backward_range(dt_model *m, dt_acts *a, const dt_batch *b, const float *dout, float *din,
                           dt_block_done_fn done, void *ctx, bool recompute) {
    int nb = a->last - a->first + 1;
    const float *d = dout;
    int which = 0;
    for (int i = nb - 1; i >= 0; i--) {
        const dt_block *blk = &m->blocks[a->first + i];
        const float *bin = (a->first + i == 0) ? NULL : a->bound[i];
        if (m->params_hook.use) m->params_hook.use(m->params_hook.ctx, a->first + i, DT_PARAMS_BACKWARD, false);
        if (recompute) {
            dt_batch rb = *b; /* the statistics were taken in the first forward */
            rb.recompute = true;
            blk->ops->forward(blk, m->w, &rb, bin, a->bound[i + 1], a->saved[i], a->scratch);
        }
        float *dprev = NULL;
        if (a->first + i > 0) {
            if (i == 0) {
                dprev = din;
            } else {
                dprev = a->dbuf[which];
                which ^= 1;
                memset(dprev, 0, (size_t)b->B * blk->in_dim * sizeof(float));
            }
        }
        blk->ops->backward(blk, m->w, m->g, b, bin, a->bound[i + 1], d, dprev, a->saved[i], a->scratch);
        if (m->params_hook.use) m->params_hook.use(m->params_hook.ctx, a->first + i, DT_PARAMS_BACKWARD_DONE, false);
        if (done) done(ctx, a->first + i);
        d = dprev;
    }
}

void dt_model_backward(dt_model *m, dt_acts *a, const dt_batch *b, const float *dout,
                       float *din, dt_block_done_fn done, void *ctx) {
    backward_range(m, a, b, dout, din, done, ctx, false);
}

void dt_model_backward_recompute(dt_model *m, dt_acts *a, const dt_batch *b, const float *dout,
                                 float *din, dt_block_done_fn done, void *ctx) {
    backward_range(m, a, b, dout, din, done, ctx, true);
}

void dt_model_params_skip(const dt_model *m, bool eval) {
    if (m->params_hook.skip) m->params_hook.skip(m->params_hook.ctx, eval);
}

int dt_model_count_correct(const dt_model *m, const dt_acts *a, const dt_batch *b) {
    const dt_block *lb = &m->blocks[a->last];
    DT_ASSERT(lb->is_loss && lb->dims[1] == 1);
    int V = lb->dims[0];
    const float *probs = a->saved[a->last - a->first];
    int correct = 0;
    for (int i = 0; i < b->B; i++) {
        const float *p = probs + (size_t)i * V;
        int best = 0;
        for (int k = 1; k < V; k++)
            if (p[k] > p[best]) best = k;
        correct += best == b->targets[i];
    }
    return correct;
}

/* ---- blocks shared by the models --------------------------------------------- */

/* Sums buf over group (none: nothing), recording the first failure in the
 * block's sticky status; after one, no more collectives start. */
static void group_sum(const dt_block *b, dt_comm *group, float *buf, size_t n) {
    if (!group || *b->tp_err) return;
    dt_status st = dt_allreduce(group, buf, n, DT_OP_SUM, DT_ALGO_AUTO);
    if (st) *b->tp_err = st;
}

void dt_block_dp_allreduce(const dt_block *b, float *buf, size_t n) { group_sum(b, b->dp, buf, n); }

void dt_block_tp_allreduce(const dt_block *b, float *buf, size_t n) { group_sum(b, b->tp, buf, n); }

/* softmax cross-entropy: dims = {V, terms}; in (B, terms*V) logits, out (B, terms) losses,
 * saved (B, terms*V) probabilities. */
static size_t xent_saved(const dt_block *b, int B) { return (size_t)B * b->dims[1] * b->dims[0]; }
static size_t xent_scratch(const dt_block *b, int B) { return 0; }

static void xent_forward(const dt_block *b, const float *P, const dt_batch *batch,
                         const float *in, float *out, float *saved, float *scratch) {
    int N = batch->B * b->dims[1];
    dt_crossentropy_forward(out, saved, in, batch->targets, N, b->dims[0]);
}

static void xent_backward(const dt_block *b, const float *P, float *G, const dt_batch *batch,
                          const float *in, const float *out, const float *dout, float *din,
                          const float *saved, float *scratch) {
    int N = batch->B * b->dims[1];
    dt_crossentropy_backward(din, saved, batch->targets, batch->loss_scale, N, b->dims[0]);
}

const dt_block_ops dt_block_xent_ops = {"softmax_xent", xent_saved, xent_scratch,
                                        xent_forward, xent_backward};

void dt_add_xent(dt_builder *bd, int V, int terms) {
    dt_block *b = dt_builder_block(bd, &dt_block_xent_ops, "loss", (size_t)V * terms, (size_t)terms);
    if (!b) return;
    b->dims[0] = V;
    b->dims[1] = terms;
    b->is_loss = true;
}

/* mean squared error: dims = {D}; in (B, D) predictions, out (B) losses (each the
 * mean over its D terms); batch->y the targets. */
static size_t mse_floats(const dt_block *b, int B) { return 0; }

static void mse_forward(const dt_block *b, const float *P, const dt_batch *batch, const float *in, float *out,
                        float *saved, float *scratch) {
    dt_mse_forward(out, in, batch->y, batch->B, b->dims[0]);
}

static void mse_backward(const dt_block *b, const float *P, float *G, const dt_batch *batch, const float *in,
                         const float *out, const float *dout, float *din, const float *saved, float *scratch) {
    dt_mse_backward(din, in, batch->y, batch->loss_scale, batch->B, b->dims[0]);
}

static const dt_block_ops mse_ops = {"mse", mse_floats, mse_floats, mse_forward, mse_backward};

void dt_add_mse(dt_builder *bd, int D) {
    dt_block *b = dt_builder_block(bd, &mse_ops, "loss", (size_t)D, 1);
    if (!b) return;
    b->dims[0] = D;
    b->is_loss = true;
}
