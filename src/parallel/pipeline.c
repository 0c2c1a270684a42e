/* Pipeline parallelism: GPipe and 1F1B schedules over point-to-point sends of
 * activations and gradients. See include/dtrain/pipeline.h. */
#include "dtrain/pipeline.h"

#include <string.h>
#include <time.h>

#define TAG_ACT 0x4000  /* + 2*micro-batch */
#define TAG_TIED 0x3f00 /* + tied index */

typedef struct tied {
    int param;           /* model parameter index */
    int owner, user;     /* stages */
} tied;

struct dt_pipe {
    dt_model *m;
    dt_comm *pp;
    dt_pipe_cfg cfg;
    int stage, P;
    dt_partition part;
    int first, last;         /* this stage's blocks */
    int maxB;
    int pool;                /* activation slots */
    dt_acts **acts;
    dt_acts *shared;         /* recompute: the one set of saved activations */
    float **din;             /* per slot: gradient of the stage input (stage > 0) */
    float *dout;             /* gradient of the stage output (stage < P-1) */
    dt_req *act_req, *din_req;
    bool *act_busy, *din_busy;
    int n_tied;
    tied ties[16];
    dt_pipe_stats st;
    int alive;
};

static int stage_of_block(const dt_partition *p, int b) {
    for (int s = 0; s < p->stages; s++)
        if (b >= p->first[s] && b < p->first[s + 1]) return s;
    return -1;
}

static void find_tied(dt_pipe *p) {
    const dt_model *m = p->m;
    p->n_tied = 0;
    for (int b = 0; b < m->n_blocks; b++) {
        const dt_block *blk = &m->blocks[b];
        int user = stage_of_block(&p->part, b);
        for (int t = 0; t < blk->n_tensors; t++) {
            for (int i = 0; i < m->n_params; i++) {
                if (m->params[i].offset != blk->off[t]) continue;
                int owner = stage_of_block(&p->part, m->params[i].block);
                if (owner == user) continue;
                bool seen = false;
                for (int k = 0; k < p->n_tied; k++)
                    seen |= p->ties[k].param == i && p->ties[k].user == user;
                if (!seen && p->n_tied < 16) p->ties[p->n_tied++] = (tied){i, owner, user};
            }
        }
    }
}

dt_status dt_pipe_create(dt_pipe **out, dt_model *m, dt_comm *pp, const dt_partition *part,
                         const dt_pipe_cfg *cfg, int maxB) {
    *out = NULL;
    int P = dt_comm_size(pp);
    if (part->stages != P) return dt_errorf(DT_ERR_INVALID, "partition has %d stages for %d pipeline ranks", part->stages, P);
    if (cfg->micro_batches < 1) return dt_errorf(DT_ERR_INVALID, "--micro-batches must be >= 1");
    dt_pipe *p = dt_calloc(1, sizeof *p);
    if (!p) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    p->m = m;
    p->pp = pp;
    p->cfg = *cfg;
    p->P = P;
    p->stage = dt_comm_rank(pp);
    p->part = *part;
    p->first = part->first[p->stage];
    p->last = part->first[p->stage + 1] - 1;
    p->maxB = maxB;
    int M = cfg->micro_batches;
    p->pool = cfg->schedule == DT_SCHED_GPIPE ? M : (P - p->stage < M ? P - p->stage : M);
    find_tied(p);
    dt_status st = DT_OK;
    p->acts = dt_calloc((size_t)p->pool, sizeof *p->acts);
    p->din = dt_calloc((size_t)p->pool, sizeof *p->din);
    p->act_req = dt_calloc((size_t)p->pool, sizeof *p->act_req);
    p->din_req = dt_calloc((size_t)p->pool, sizeof *p->din_req);
    p->act_busy = dt_calloc((size_t)p->pool, sizeof *p->act_busy);
    p->din_busy = dt_calloc((size_t)p->pool, sizeof *p->din_busy);
    if (!p->acts || !p->din || !p->act_req || !p->din_req || !p->act_busy || !p->din_busy) {
        st = dt_errorf(DT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (cfg->recompute && (st = dt_acts_create(&p->shared, m, p->first, p->last, maxB))) goto fail;
    size_t in_dim = m->blocks[p->first].in_dim, out_dim = m->blocks[p->last].out_dim;
    for (int i = 0; i < p->pool; i++) {
        st = cfg->recompute ? dt_acts_create_shared(&p->acts[i], m, p->shared)
                            : dt_acts_create(&p->acts[i], m, p->first, p->last, maxB);
        if (st) goto fail;
        p->st.act_floats += p->acts[i]->n_floats;
        if (p->stage > 0 && !(p->din[i] = dt_alloc_floats((size_t)maxB * in_dim))) goto nomem;
        if (p->stage > 0) p->st.buf_floats += dt_alloc_floats_held((size_t)maxB * in_dim);
    }
    if (p->shared) p->st.act_floats += p->shared->n_floats;
    if (p->stage < P - 1 && !(p->dout = dt_alloc_floats((size_t)maxB * out_dim))) goto nomem;
    if (p->stage < P - 1) p->st.buf_floats += dt_alloc_floats_held((size_t)maxB * out_dim);
    *out = p;
    return DT_OK;
nomem:
    st = dt_errorf(DT_ERR_NOMEM, "cannot allocate pipeline buffers for micro-batch %d", maxB);
fail:
    dt_pipe_destroy(p);
    return st;
}

void dt_pipe_destroy(dt_pipe *p) {
    if (!p) return;
    for (int i = 0; p->acts && i < p->pool; i++) {
        dt_acts_destroy(p->acts[i]);
        if (p->din) dt_free(p->din[i]);
    }
    dt_acts_destroy(p->shared);
    dt_free(p->acts);
    dt_free(p->din);
    dt_free(p->dout);
    dt_free(p->act_req);
    dt_free(p->din_req);
    dt_free(p->act_busy);
    dt_free(p->din_busy);
    dt_free(p);
}

int dt_pipe_stage_first(const dt_pipe *p) { return p->first; }
int dt_pipe_stage_last(const dt_pipe *p) { return p->last; }

static void sleep_us(double us) {
    if (us <= 0) return;
    struct timespec ts = {(time_t)(us / 1e6), (long)((us - (double)(time_t)(us / 1e6) * 1e6) * 1e3)};
    nanosleep(&ts, NULL);
}

/* Micro-batch i of the shard: rows [lo, hi). */
static dt_batch micro(const dt_batch *b, int M, int i, int in_dim_x, int T, int y_dim) {
    int lo = (int)((int64_t)b->B * i / M), hi = (int)((int64_t)b->B * (i + 1) / M);
    dt_batch mb = *b;
    mb.B = hi - lo;
    if (b->x) mb.x = b->x + (size_t)lo * (size_t)in_dim_x;
    if (b->tokens) mb.tokens = b->tokens + (size_t)lo * (size_t)T;
    if (b->targets) mb.targets = b->targets + (size_t)lo * (size_t)(T ? T : 1);
    if (b->y) mb.y = b->y + (size_t)lo * (size_t)y_dim;
    if (b->ids) mb.ids = b->ids + lo;
    return mb;
}

static dt_status wait1(dt_pipe *p, dt_req *r, bool *busy, const char *what) {
    if (!*busy) return DT_OK;
    *busy = false;
    return dt_waitall(p->pp, r, 1, what);
}

/* Receives n floats from stage `from` with tag, counting the wait as idle. */
static dt_status recv_floats(dt_pipe *p, float *buf, size_t n, int from, int tag, const char *what) {
    double t0 = dt_now();
    dt_req r;
    dt_status st = dt_irecv(p->pp, buf, n * sizeof(float), from, tag, &r);
    if (!st) st = dt_waitall(p->pp, &r, 1, what);
    p->st.idle_s += dt_now() - t0;
    return st;
}

static dt_status fwd(dt_pipe *p, const dt_batch *mb, int i, double *loss) {
    int slot = i % p->pool;
    dt_acts *a = p->acts[slot];
    dt_status st = wait1(p, &p->act_req[slot], &p->act_busy[slot], "pipeline send (activations)");
    if (st) return st;
    const dt_model *m = p->m;
    if (p->stage > 0 &&
        (st = recv_floats(p, a->bound[0], (size_t)mb->B * m->blocks[p->first].in_dim, p->stage - 1,
                          TAG_ACT + 2 * i, "pipeline receive (activations)")))
        return st;
    double t0 = dt_now();
    float l = dt_model_forward(m, a, mb, NULL);
    sleep_us(p->cfg.stage_cost_us);
    p->st.busy_s += dt_now() - t0;
    if (p->stage == p->P - 1) *loss += l;
    if (++p->alive > p->st.acts_alive_peak) p->st.acts_alive_peak = p->alive;
    if (p->stage < p->P - 1) {
        int nb = p->last - p->first + 1;
        st = dt_isend(p->pp, a->bound[nb], (size_t)mb->B * m->blocks[p->last].out_dim * sizeof(float),
                      p->stage + 1, TAG_ACT + 2 * i, &p->act_req[slot]);
        if (st) return st;
        p->act_busy[slot] = true;
    }
    return DT_OK;
}

/* Forwards block-done to dp, except for blocks owning a tensor that another
 * stage also uses: their bucket waits until that stage's gradient is added. */
typedef struct done_ctx {
    dt_pipe *p;
    dt_dp *dp;
} done_ctx;

static void done_cb(void *ctx, int block) {
    done_ctx *c = ctx;
    for (int k = 0; k < c->p->n_tied; k++)
        if (c->p->ties[k].owner == c->p->stage && c->p->m->params[c->p->ties[k].param].block == block) return;
    dt_dp_block_done(c->dp, block);
}

static dt_status bwd(dt_pipe *p, dt_dp *dp, const dt_batch *mb, int i, bool last_mb) {
    int slot = i % p->pool;
    dt_acts *a = p->acts[slot];
    dt_model *m = p->m;
    dt_status st = wait1(p, &p->act_req[slot], &p->act_busy[slot], "pipeline send (activations)");
    if (!st) st = wait1(p, &p->din_req[slot], &p->din_busy[slot], "pipeline send (gradients)");
    if (st) return st;
    const float *dout = NULL;
    if (p->stage < p->P - 1) {
        st = recv_floats(p, p->dout, (size_t)mb->B * m->blocks[p->last].out_dim, p->stage + 1,
                         TAG_ACT + 2 * i + 1, "pipeline receive (gradients)");
        if (st) return st;
        dout = p->dout;
    }
    float *din = NULL;
    if (p->stage > 0) {
        din = p->din[slot];
        memset(din, 0, (size_t)mb->B * m->blocks[p->first].in_dim * sizeof(float));
    }
    done_ctx dc = {p, dp};
    double t0 = dt_now();
    if (p->cfg.recompute)
        dt_model_backward_recompute(m, a, mb, dout, din, last_mb ? done_cb : NULL, &dc);
    else
        dt_model_backward(m, a, mb, dout, din, last_mb ? done_cb : NULL, &dc);
    sleep_us(2 * p->cfg.stage_cost_us);
    p->st.busy_s += dt_now() - t0;
    p->alive--;
    if (p->stage > 0) {
        st = dt_isend(p->pp, din, (size_t)mb->B * m->blocks[p->first].in_dim * sizeof(float), p->stage - 1,
                      TAG_ACT + 2 * i + 1, &p->din_req[slot]);
        if (st) return st;
        p->din_busy[slot] = true;
    }
    return DT_OK;
}

/* Tied gradients: users send theirs to the owner, which adds them. */
static dt_status reduce_tied(dt_pipe *p) {
    dt_model *m = p->m;
    for (int k = 0; k < p->n_tied; k++) {
        const tied *t = &p->ties[k];
        const dt_param *par = &m->params[t->param];
        dt_status st = DT_OK;
        if (p->stage == t->user) {
            dt_req r;
            st = dt_isend(p->pp, m->g + par->offset, par->numel * sizeof(float), t->owner, TAG_TIED + k, &r);
            if (!st) st = dt_waitall(p->pp, &r, 1, "pipeline tied gradient");
            /* The user never updates it: clear for the next step. */
            memset(m->g + par->offset, 0, par->numel * sizeof(float));
        } else if (p->stage == t->owner) {
            float *buf = dt_alloc_floats(par->numel);
            if (!buf) return dt_errorf(DT_ERR_NOMEM, "out of memory");
            st = recv_floats(p, buf, par->numel, t->user, TAG_TIED + k, "pipeline tied gradient");
            if (!st)
                for (size_t j = 0; j < par->numel; j++) m->g[par->offset + j] += buf[j];
            dt_free(buf);
        }
        if (st) return st;
    }
    return DT_OK;
}

int dt_pipe_n_tied(const dt_pipe *p) { return p->n_tied; }

dt_status dt_pipe_sync_tied(dt_pipe *p, dt_dp *dp) {
    dt_model *m = p->m;
    for (int k = 0; k < p->n_tied; k++) {
        const tied *t = &p->ties[k];
        const dt_param *par = &m->params[t->param];
        dt_status st = DT_OK;
        if (p->stage == t->owner) {
            dt_req r;
            st = dt_dp_params_hold(dp, par->offset, par->offset + par->numel, true);
            if (!st) st = dt_isend(p->pp, m->w + par->offset, par->numel * sizeof(float), t->user, TAG_TIED + 8 + k, &r);
            if (!st) st = dt_waitall(p->pp, &r, 1, "pipeline tied weights");
            dt_status rs = dt_dp_params_hold(dp, par->offset, par->offset + par->numel, false);
            if (!st) st = rs;
        } else if (p->stage == t->user) {
            st = recv_floats(p, m->w + par->offset, par->numel, t->owner, TAG_TIED + 8 + k, "pipeline tied weights");
        }
        if (st) return st;
    }
    return DT_OK;
}

dt_status dt_pipe_step(dt_pipe *p, dt_dp *dp, const dt_batch *batch, int in_dim_x, double *loss) {
    int M = p->cfg.micro_batches, P = p->P, s = p->stage;
    int T = p->m->seq_len;
    double t0 = dt_now();
    dt_status st = DT_OK;
    *loss = 0;
    /* Micro-batches with no rows (shard smaller than M) are skipped on every stage alike. */
    int Mu = M < batch->B ? M : batch->B;
    dt_dp_begin_backward(dp, true);
    if (Mu > 0) {
        if (p->cfg.schedule == DT_SCHED_GPIPE) {
            for (int i = 0; i < Mu && !st; i++) {
                dt_batch mb = micro(batch, Mu, i, in_dim_x, T, p->m->y_dim);
                st = fwd(p, &mb, i, loss);
            }
            for (int i = 0; i < Mu && !st; i++) {
                dt_batch mb = micro(batch, Mu, i, in_dim_x, T, p->m->y_dim);
                st = bwd(p, dp, &mb, i, i == Mu - 1);
            }
        } else {
            int warm = P - s - 1 < Mu ? P - s - 1 : Mu;
            int f = 0, b = 0;
            for (; f < warm && !st; f++) {
                dt_batch mb = micro(batch, Mu, f, in_dim_x, T, p->m->y_dim);
                st = fwd(p, &mb, f, loss);
            }
            while (f < Mu && !st) {
                dt_batch mb = micro(batch, Mu, f, in_dim_x, T, p->m->y_dim);
                st = fwd(p, &mb, f, loss);
                f++;
                if (st) break;
                dt_batch mb2 = micro(batch, Mu, b, in_dim_x, T, p->m->y_dim);
                st = bwd(p, dp, &mb2, b, b == Mu - 1);
                b++;
            }
            for (; b < Mu && !st; b++) {
                dt_batch mb = micro(batch, Mu, b, in_dim_x, T, p->m->y_dim);
                st = bwd(p, dp, &mb, b, b == Mu - 1);
            }
        }
    }
    for (int i = 0; i < p->pool && !st; i++) {
        st = wait1(p, &p->act_req[i], &p->act_busy[i], "pipeline send (activations)");
        if (!st) st = wait1(p, &p->din_req[i], &p->din_busy[i], "pipeline send (gradients)");
    }
    p->st.step_s += dt_now() - t0;
    if (!st) st = reduce_tied(p);
    if (!st) st = dt_dp_end_backward(dp);
    return st;
}

dt_status dt_pipe_eval(dt_pipe *p, const dt_batch *batch, double *loss_sum, double *correct) {
    int T = p->m->seq_len;
    int in_dim_x = p->m->in_floats;
    int chunks = (batch->B + p->maxB - 1) / p->maxB;
    *loss_sum = 0;
    *correct = 0;
    dt_acts *a = p->acts[0];
    const dt_model *m = p->m;
    int nb = p->last - p->first + 1;
    for (int c = 0; c < chunks; c++) {
        dt_batch mb = micro(batch, chunks, c, in_dim_x, T, p->m->y_dim);
        if (mb.B == 0) continue;
        dt_status st = DT_OK;
        if (p->stage > 0 &&
            (st = recv_floats(p, a->bound[0], (size_t)mb.B * m->blocks[p->first].in_dim, p->stage - 1,
                              TAG_ACT, "pipeline receive (evaluation)")))
            return st;
        float l = dt_model_forward(m, a, &mb, NULL);
        if (p->stage == p->P - 1) {
            *loss_sum += l;
            if (m->input != DT_INPUT_TOKENS && m->loss_kind == DT_LOSS_XENT) *correct += dt_model_count_correct(m, a, &mb);
        } else {
            dt_req r;
            st = dt_isend(p->pp, a->bound[nb], (size_t)mb.B * m->blocks[p->last].out_dim * sizeof(float),
                          p->stage + 1, TAG_ACT, &r);
            if (!st) st = dt_waitall(p->pp, &r, 1, "pipeline send (evaluation)");
            if (st) return st;
        }
    }
    return DT_OK;
}

void dt_pipe_take_stats(dt_pipe *p, dt_pipe_stats *s) {
    *s = p->st;
    p->st.step_s = p->st.busy_s = p->st.idle_s = 0;
}

dt_status dt_pipe_gather_params(dt_pipe *p) {
    dt_model *m = p->m;
    for (int s = 1; s < p->P; s++) {
        size_t lo = m->blocks[p->part.first[s]].param_lo, hi = m->blocks[p->part.first[s + 1] - 1].param_hi;
        if (hi <= lo) continue;
        dt_status st = DT_OK;
        if (p->stage == s) {
            dt_req r;
            st = dt_isend(p->pp, m->w + lo, (hi - lo) * sizeof(float), 0, TAG_TIED + 32 + s, &r);
            if (!st) st = dt_waitall(p->pp, &r, 1, "pipeline parameter gather");
        } else if (p->stage == 0) {
            st = recv_floats(p, m->w + lo, hi - lo, s, TAG_TIED + 32 + s, "pipeline parameter gather");
        }
        if (st) return st;
    }
    return DT_OK;
}
