/* Pipeline parallelism: the GPipe, 1F1B and interleaved 1F1B schedules
 * (their operation orders in pipe_schedule.c) run over point-to-point sends of
 * activations and gradients. See include/dtrain/pipeline.h.
 *
 * Each local chunk keeps a ring of activation slots, micro-batch i in slot
 * i % pool: forwards and backwards of a chunk go in micro-batch order, so a
 * ring as deep as the most micro-batches the schedule keeps alive in that
 * chunk (found by running the order, for every micro-batch count up to M)
 * never overwrites a live one.
 *
 * Receives are posted one micro-batch ahead, into a chunk's own pair of
 * buffers per direction: when micro-batch i's activations (or gradients)
 * arrive, i + 1's receive is posted before i is computed. MPI moves a large
 * message (over its eager limit: 64 KiB on TCP) only once the receiver has
 * posted the receive; posted ahead, the transfer can start when the sender
 * sends. (Measured on W1 at 100 Mbit/s: no change; there the link's queue
 * sets the step, which the planner now simulates.) Activations are copied
 * from the buffer into the slot (the backward needs them there); gradients
 * are read where they landed. */
#include "dtrain/pipeline.h"

#include <string.h>
#include <time.h>

#define TAG_ACT 0x4000  /* + 2*(chunk edge*M + micro-batch) [+1: gradient] */
#define TAG_SPAN 0x1f00 /* act tags stay below the diagnosis tags (0x7e00) */
#define TAG_TIED 0x3f00 /* + tied index */

typedef struct tied {
    int param;           /* model parameter index */
    int owner, user;     /* stages */
} tied;

typedef struct chunk {
    int c;                   /* global chunk index */
    int first, last;         /* its blocks */
    int pool;                /* activation slots */
    dt_acts **acts;
    dt_acts *shared;         /* recompute: the one set of saved activations */
    float **din;             /* per slot: gradient of the chunk input (c > 0) */
    dt_req *act_req, *din_req;
    bool *act_busy, *din_busy;
    /* Posted receives, micro-batch i in [i % 2]: [0] activations in (c > 0),
     * [1] gradients in (c < C - 1). */
    float *rbuf[2][2];
    dt_req rreq[2][2];
    bool rposted[2][2];
} chunk;

struct dt_pipe {
    dt_model *m;
    dt_comm *pp;
    dt_pipe_cfg cfg;
    int stage, P, V, C;      /* C = P*V chunks */
    dt_partition part;
    chunk ch[DT_PIPE_MAX_VIRTUAL];
    int maxB;
    int B, Mu;               /* this step's rows and micro-batches */
    int n_tied;
    tied ties[16];
    dt_pipe_stats st;
    int alive;
};

static void find_tied(dt_pipe *p) {
    const dt_model *m = p->m;
    p->n_tied = 0;
    for (int b = 0; b < m->n_blocks; b++) {
        const dt_block *blk = &m->blocks[b];
        int user = dt_partition_stage(&p->part, b);
        for (int t = 0; t < blk->n_tensors; t++) {
            for (int i = 0; i < m->n_params; i++) {
                if (m->params[i].offset != blk->off[t]) continue;
                int owner = dt_partition_stage(&p->part, m->params[i].block);
                if (owner == user) continue;
                bool seen = false;
                for (int k = 0; k < p->n_tied; k++)
                    seen |= p->ties[k].param == i && p->ties[k].user == user;
                if (!seen && p->n_tied < 16) p->ties[p->n_tied++] = (tied){i, owner, user};
            }
        }
    }
}

/* The deepest each local chunk's ring must be (pipe_schedule.c). */
static void ring_depths(dt_pipe *p) {
    int depth[DT_PIPE_MAX_VIRTUAL];
    dt_pipe_sched_depths(p->cfg.schedule, p->P, p->V, p->stage, p->cfg.micro_batches, depth);
    for (int j = 0; j < p->V; j++) p->ch[j].pool = depth[j];
}

static dt_status chunk_create(dt_pipe *p, chunk *h) {
    dt_model *m = p->m;
    int n = h->pool;
    h->acts = dt_calloc((size_t)n, sizeof *h->acts);
    h->din = dt_calloc((size_t)n, sizeof *h->din);
    h->act_req = dt_calloc((size_t)n, sizeof *h->act_req);
    h->din_req = dt_calloc((size_t)n, sizeof *h->din_req);
    h->act_busy = dt_calloc((size_t)n, sizeof *h->act_busy);
    h->din_busy = dt_calloc((size_t)n, sizeof *h->din_busy);
    if (!h->acts || !h->din || !h->act_req || !h->din_req || !h->act_busy || !h->din_busy)
        return dt_errorf(DT_ERR_NOMEM, "out of memory");
    dt_status st;
    if (p->cfg.recompute && (st = dt_acts_create(&h->shared, m, h->first, h->last, p->maxB))) return st;
    size_t in = (size_t)p->maxB * m->blocks[h->first].in_dim;
    for (int i = 0; i < n; i++) {
        st = p->cfg.recompute ? dt_acts_create_shared(&h->acts[i], m, h->shared)
                              : dt_acts_create(&h->acts[i], m, h->first, h->last, p->maxB);
        if (st) return st;
        p->st.act_floats += h->acts[i]->n_floats;
        if (h->c > 0 && !(h->din[i] = dt_alloc_floats(in)))
            return dt_errorf(DT_ERR_NOMEM, "cannot allocate pipeline buffers for micro-batch %d", p->maxB);
        if (h->c > 0) p->st.buf_floats += dt_alloc_floats_held(in);
    }
    if (h->shared) p->st.act_floats += h->shared->n_floats;
    size_t rn[2] = {h->c > 0 ? in : 0, h->c < p->C - 1 ? (size_t)p->maxB * m->blocks[h->last].out_dim : 0};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2 && rn[d]; k++) {
            if (!(h->rbuf[d][k] = dt_alloc_floats(rn[d])))
                return dt_errorf(DT_ERR_NOMEM, "cannot allocate pipeline buffers for micro-batch %d", p->maxB);
            p->st.buf_floats += dt_alloc_floats_held(rn[d]);
        }
    return DT_OK;
}

static void chunk_destroy(dt_pipe *p, chunk *h) {
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++) {
            if (h->rposted[d][k]) dt_cancel(p->pp, &h->rreq[d][k], 1); /* a step that failed part-way */
            dt_free(h->rbuf[d][k]);
        }
    for (int i = 0; h->acts && i < h->pool; i++) {
        dt_acts_destroy(h->acts[i]);
        if (h->din) dt_free(h->din[i]);
    }
    dt_acts_destroy(h->shared);
    dt_free(h->acts);
    dt_free(h->din);
    dt_free(h->act_req);
    dt_free(h->din_req);
    dt_free(h->act_busy);
    dt_free(h->din_busy);
}

dt_status dt_pipe_create(dt_pipe **out, dt_model *m, dt_comm *pp, const dt_partition *part,
                         const dt_pipe_cfg *cfg, int maxB) {
    *out = NULL;
    int P = dt_comm_size(pp), V = cfg->schedule == DT_SCHED_INTERLEAVED && cfg->virtual_stages > 1 ? cfg->virtual_stages : 1;
    if (part->stages != P) return dt_errorf(DT_ERR_INVALID, "partition has %d stages for %d pipeline ranks", part->stages, P);
    if (dt_partition_virt(part) != V || V > DT_PIPE_MAX_VIRTUAL)
        return dt_errorf(DT_ERR_INVALID, "partition has %d chunks per stage for %d virtual stages", dt_partition_virt(part), V);
    if (cfg->micro_batches < 1) return dt_errorf(DT_ERR_INVALID, "--micro-batches must be >= 1");
    dt_pipe *p = dt_calloc(1, sizeof *p);
    if (!p) return dt_errorf(DT_ERR_NOMEM, "out of memory");
    p->m = m;
    p->pp = pp;
    p->cfg = *cfg;
    p->P = P;
    p->V = V;
    p->C = P * V;
    p->stage = dt_comm_rank(pp);
    p->part = *part;
    p->maxB = maxB;
    for (int j = 0; j < V; j++) {
        chunk *h = &p->ch[j];
        h->c = p->stage + j * P;
        h->first = part->first[h->c];
        h->last = part->first[h->c + 1] - 1;
    }
    ring_depths(p);
    find_tied(p);
    dt_status st = DT_OK;
    for (int j = 0; j < V && !st; j++) st = chunk_create(p, &p->ch[j]);
    if (st) {
        dt_pipe_destroy(p);
        return st;
    }
    *out = p;
    return DT_OK;
}

void dt_pipe_destroy(dt_pipe *p) {
    if (!p) return;
    for (int j = 0; j < p->V; j++) chunk_destroy(p, &p->ch[j]);
    dt_free(p);
}

/* The tag of micro-batch i crossing the edge from chunk c to c+1. */
static int tag_of(const dt_pipe *p, int c, int i, int grad) {
    return TAG_ACT + 2 * (int)(((int64_t)c * p->cfg.micro_batches + i) % TAG_SPAN) + grad;
}
static int rank_of(const dt_pipe *p, int c) { return c % p->P; }

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

/* Rows of this step's micro-batch i (as micro() cuts them). */
static int mb_rows(const dt_pipe *p, int i) {
    return (int)((int64_t)p->B * (i + 1) / p->Mu - (int64_t)p->B * i / p->Mu);
}

/* Posts chunk h's receive of micro-batch i in direction d (0: activations from
 * chunk c - 1, 1: gradients from chunk c + 1), if the step has an i. */
static dt_status post_recv(dt_pipe *p, chunk *h, int d, int i) {
    if (i >= p->Mu || !h->rbuf[d][0]) return DT_OK;
    const dt_model *m = p->m;
    size_t n = (size_t)mb_rows(p, i) * (size_t)(d ? m->blocks[h->last].out_dim : m->blocks[h->first].in_dim);
    int k = i % 2, from = d ? h->c + 1 : h->c - 1, edge = d ? h->c : h->c - 1;
    dt_status st = dt_irecv(p->pp, h->rbuf[d][k], n * sizeof(float), rank_of(p, from), tag_of(p, edge, i, d),
                            &h->rreq[d][k]);
    h->rposted[d][k] = !st;
    return st;
}

/* Waits for micro-batch i's receive in direction d (the wait counts as idle),
 * posts i + 1's into the other buffer (i - 1's, consumed), and gives the data. */
static dt_status take_recv(dt_pipe *p, chunk *h, int d, int i, const char *what, float **data) {
    int k = i % 2;
    if (!h->rposted[d][k]) return dt_errorf(DT_ERR_INVALID, "%s: micro-batch %d's receive was not posted", what, i);
    double t0 = dt_now();
    dt_status st = dt_waitall(p->pp, &h->rreq[d][k], 1, what);
    h->rposted[d][k] = false;
    p->st.idle_s += dt_now() - t0;
    if (!st) st = post_recv(p, h, d, i + 1);
    *data = h->rbuf[d][k];
    return st;
}

static dt_status fwd(dt_pipe *p, int j, const dt_batch *mb, int i, double *loss) {
    chunk *h = &p->ch[j];
    int slot = i % h->pool;
    dt_acts *a = h->acts[slot];
    dt_status st = wait1(p, &h->act_req[slot], &h->act_busy[slot], "pipeline send (activations)");
    if (st) return st;
    const dt_model *m = p->m;
    if (h->c > 0) {
        float *in;
        if ((st = take_recv(p, h, 0, i, "pipeline receive (activations)", &in))) return st;
        memcpy(a->bound[0], in, (size_t)mb->B * m->blocks[h->first].in_dim * sizeof(float));
    }
    double t0 = dt_now();
    float l = dt_model_forward(m, a, mb, NULL);
    sleep_us(p->cfg.stage_cost_us / p->V);
    p->st.busy_s += dt_now() - t0;
    if (h->c == p->C - 1) *loss += l;
    if (++p->alive > p->st.acts_alive_peak) p->st.acts_alive_peak = p->alive;
    if (h->c < p->C - 1) {
        st = dt_isend(p->pp, a->bound[h->last - h->first + 1], (size_t)mb->B * m->blocks[h->last].out_dim * sizeof(float),
                      rank_of(p, h->c + 1), tag_of(p, h->c, i, 0), &h->act_req[slot]);
        if (st) return st;
        h->act_busy[slot] = true;
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

static dt_status bwd(dt_pipe *p, dt_dp *dp, int j, const dt_batch *mb, int i, bool last_mb) {
    chunk *h = &p->ch[j];
    int slot = i % h->pool;
    dt_acts *a = h->acts[slot];
    dt_model *m = p->m;
    dt_status st = wait1(p, &h->act_req[slot], &h->act_busy[slot], "pipeline send (activations)");
    if (!st) st = wait1(p, &h->din_req[slot], &h->din_busy[slot], "pipeline send (gradients)");
    if (st) return st;
    float *dout = NULL;
    if (h->c < p->C - 1 && (st = take_recv(p, h, 1, i, "pipeline receive (gradients)", &dout))) return st;
    float *din = NULL;
    size_t nin = (size_t)mb->B * m->blocks[h->first].in_dim;
    if (h->c > 0) {
        din = h->din[slot];
        memset(din, 0, nin * sizeof(float));
    }
    done_ctx dc = {p, dp};
    double t0 = dt_now();
    if (p->cfg.recompute)
        dt_model_backward_recompute(m, a, mb, dout, din, last_mb ? done_cb : NULL, &dc);
    else
        dt_model_backward(m, a, mb, dout, din, last_mb ? done_cb : NULL, &dc);
    sleep_us(2 * p->cfg.stage_cost_us / p->V);
    p->st.busy_s += dt_now() - t0;
    p->alive--;
    if (h->c > 0) {
        st = dt_isend(p->pp, din, nin * sizeof(float), rank_of(p, h->c - 1), tag_of(p, h->c - 1, i, 1), &h->din_req[slot]);
        if (st) return st;
        h->din_busy[slot] = true;
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
    int M = p->cfg.micro_batches;
    int T = p->m->seq_len;
    double t0 = dt_now();
    dt_status st = DT_OK;
    *loss = 0;
    /* A shard smaller than M runs fewer micro-batches, alike on every stage. */
    int Mu = dt_pipe_sched_micro(p->cfg.schedule, p->P, p->V, M, batch->B);
    p->B = batch->B;
    p->Mu = Mu;
    dt_dp_begin_backward(dp, true);
    for (int j = 0; j < p->V && !st; j++)
        for (int d = 0; d < 2 && !st; d++) st = post_recv(p, &p->ch[j], d, 0);
    for (int k = 0; k < 2 * Mu * p->V && !st; k++) {
        dt_pipe_op op;
        dt_pipe_sched_op(p->cfg.schedule, p->P, p->V, p->stage, Mu, k, &op);
        dt_batch mb = micro(batch, Mu, op.mb, in_dim_x, T, p->m->y_dim);
        st = op.bwd ? bwd(p, dp, op.chunk, &mb, op.mb, op.mb == Mu - 1) : fwd(p, op.chunk, &mb, op.mb, loss);
    }
    for (int j = 0; j < p->V; j++)
        for (int i = 0; i < p->ch[j].pool && !st; i++) {
            chunk *h = &p->ch[j];
            st = wait1(p, &h->act_req[i], &h->act_busy[i], "pipeline send (activations)");
            if (!st) st = wait1(p, &h->din_req[i], &h->din_busy[i], "pipeline send (gradients)");
        }
    for (int j = 0; j < p->V && st; j++) /* a failed step leaves no receive posted */
        for (int d = 0; d < 2; d++)
            for (int k = 0; k < 2; k++)
                if (p->ch[j].rposted[d][k]) {
                    dt_cancel(p->pp, &p->ch[j].rreq[d][k], 1);
                    p->ch[j].rposted[d][k] = false;
                }
    p->st.step_s += dt_now() - t0;
    if (!st) st = reduce_tied(p);
    if (!st) st = dt_dp_end_backward(dp);
    return st;
}

/* Forward of one evaluation piece through local chunk j: its input from the
 * chunk before, its output to the chunk after (or the loss, on the last). */
static dt_status eval_chunk(dt_pipe *p, int j, const dt_batch *mb, double *loss_sum, double *correct) {
    const chunk *h = &p->ch[j];
    const dt_model *m = p->m;
    dt_acts *a = h->acts[0];
    dt_status st = DT_OK;
    if (h->c > 0 && (st = recv_floats(p, a->bound[0], (size_t)mb->B * m->blocks[h->first].in_dim, rank_of(p, h->c - 1),
                                      tag_of(p, h->c - 1, 0, 0), "pipeline receive (evaluation)")))
        return st;
    float l = dt_model_forward(m, a, mb, NULL);
    if (h->c == p->C - 1) {
        *loss_sum += l;
        if (m->input != DT_INPUT_TOKENS && m->loss_kind == DT_LOSS_XENT) *correct += dt_model_count_correct(m, a, mb);
        return DT_OK;
    }
    dt_req r;
    st = dt_isend(p->pp, a->bound[h->last - h->first + 1], (size_t)mb->B * m->blocks[h->last].out_dim * sizeof(float),
                  rank_of(p, h->c + 1), tag_of(p, h->c, 0, 0), &r);
    return st ? st : dt_waitall(p->pp, &r, 1, "pipeline send (evaluation)");
}

dt_status dt_pipe_eval(dt_pipe *p, const dt_batch *batch, double *loss_sum, double *correct) {
    int T = p->m->seq_len;
    int chunks = (batch->B + p->maxB - 1) / p->maxB;
    *loss_sum = 0;
    *correct = 0;
    for (int c = 0; c < chunks; c++) {
        dt_batch mb = micro(batch, chunks, c, p->m->in_floats, T, p->m->y_dim);
        if (mb.B == 0) continue;
        for (int j = 0; j < p->V; j++) {
            dt_status st = eval_chunk(p, j, &mb, loss_sum, correct);
            if (st) return st;
        }
    }
    return DT_OK;
}

void dt_pipe_take_stats(dt_pipe *p, dt_pipe_stats *s) {
    *s = p->st;
    p->st.step_s = p->st.busy_s = p->st.idle_s = 0;
}
