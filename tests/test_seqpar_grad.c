/* Sequence parallelism's layer paths (src/model/seq_parallel.c and the
 * linear, layer norm, RMSNorm, dropout and SwiGLU branches under
 * --sequence-parallel), on 1..4 ranks as one tp group (ctest runs it under
 * mpiexec): one forward and backward of a model compiled with
 * --sequence-parallel against the unsharded model on the same batch, in every
 * rank. The loss must agree, and every tensor's gradient, taken to the local
 * layout (each rank's shard of split tensors, the whole of replicated ones),
 * within atol 1e-5 + rtol 1e-3 of the unsharded gradient: the gpt, llama
 * (RMSNorm, rope, SwiGLU pairs) and a description with dropout and a linear
 * without "tp" on the local rows. A second backward without zeroing (gradient
 * accumulation) must give twice the gradient: the partial gradients of
 * replicated parameters are summed per backward, never the accumulated ones;
 * a backward with recomputation the same as one without. B = 3 samples, so
 * with 2 or 4 ranks a rank's rows start inside a sample. The block boundaries
 * inside the region must carry 1/P of the floats. */
#include "dtrain/model.h"
#include "testhelp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dt_comm *W;
static int P, R;

enum { BATCH = 3 };

static const char *DROP_DESC =
    "{\"input\": {\"tokens\": \"T\", \"vocab\": 64}, \"loss\": \"cross_entropy\", \"vars\": {\"T\": 8, \"C\": 16, \"H\": 2},"
    " \"layers\": [{\"type\": \"embedding\", \"name\": \"wte\", \"num\": 64, \"dim\": \"C\"},"
    "  {\"type\": \"repeat\", \"name\": \"h\", \"count\": 2, \"layers\": ["
    "   {\"type\": \"residual\", \"layers\": [{\"type\": \"layernorm\", \"name\": \"ln\"},"
    "     {\"type\": \"linear\", \"name\": \"qkv\", \"out\": \"3 * C\", \"tp\": \"column\", \"tp_parts\": 3},"
    "     {\"type\": \"attention\", \"heads\": \"H\"},"
    "     {\"type\": \"linear\", \"name\": \"o\", \"out\": \"C\", \"tp\": \"row\"}, {\"type\": \"dropout\", \"p\": 0.3}]},"
    "   {\"type\": \"residual\", \"layers\": [{\"type\": \"rmsnorm\", \"name\": \"n\"},"
    "     {\"type\": \"linear\", \"name\": \"fc\", \"out\": \"4 * C\", \"tp\": \"column\", \"activation\": \"relu\"},"
    "     {\"type\": \"linear\", \"name\": \"pr\", \"out\": \"C\", \"tp\": \"row\"}, {\"type\": \"gelu\"},"
    "     {\"type\": \"dropout\", \"p\": 0.2}, {\"type\": \"linear\", \"name\": \"mix\", \"out\": \"C\"}]}]},"
    "  {\"type\": \"sequential\", \"layers\": [{\"type\": \"layernorm\", \"name\": \"ln_f\"},"
    "   {\"type\": \"linear\", \"name\": \"head\", \"out\": 64, \"bias\": false}]}]}";

/* One forward and backward (twice when twice; with recompute: the
 * recomputing backward) adding into m->g; returns the loss. */
static float step(dt_model *m, const dt_batch *b, int times, bool recompute) {
    dt_acts *a = NULL;
    if (dt_acts_create(&a, m, 0, m->n_blocks - 1, b->B)) return NAN;
    float loss = 0;
    for (int k = 0; k < times; k++) {
        loss = dt_model_forward(m, a, b, NULL);
        if (recompute) dt_model_backward_recompute(m, a, b, NULL, NULL, NULL, NULL);
        else dt_model_backward(m, a, b, NULL, NULL, NULL, NULL);
    }
    dt_acts_destroy(a);
    return loss;
}

static void check(const char *what, dt_model_cfg cfg, int times, bool recompute) {
    dt_model *full = NULL, *m = NULL;
    cfg.tp_size = 0;
    cfg.tp_rank = 0;
    cfg.seq_parallel = false;
    dt_status st = dt_model_create(&full, &cfg);
    cfg.tp_size = P;
    cfg.tp_rank = R;
    cfg.seq_parallel = true;
    if (!st) st = dt_model_create(&m, &cfg);
    if (st) {
        fprintf(stderr, "%s: %s\n", what, dt_error_msg());
        test_cond("model builds", 0);
        goto done;
    }
    dt_model_set_tp(m, P > 1 ? W : NULL);
    dt_model_init(full, 7);
    dt_model_init(m, 7);
    dt_model_zero_grad(full);
    dt_model_zero_grad(m);
    int T = full->seq_len, n = BATCH * T;
    int32_t *tok = malloc((size_t)n * sizeof *tok), *tgt = malloc((size_t)n * sizeof *tgt);
    int64_t ids[BATCH] = {11, 4, 29};
    dt_rng r;
    dt_rng_init(&r, 3, 0);
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(dt_rng_uniform(&r) * (float)full->vocab) % full->vocab;
        tgt[i] = (int32_t)(dt_rng_uniform(&r) * (float)full->vocab) % full->vocab;
    }
    dt_batch b = {.B = BATCH, .tokens = tok, .targets = tgt, .loss_scale = 1.0f / (float)n, .ids = ids, .step = 5,
                  .seed = 99};
    float lf = step(full, &b, times, false), lm = step(m, &b, times, recompute);
    char name[160];
    snprintf(name, sizeof name, "%s: loss %.6f vs %.6f", what, (double)lm, (double)lf);
    test_cond(name, fabsf(lf - lm) <= 1e-5f * fabsf(lf) && !m->tp_err);
    /* the region's boundaries carry 1/P of the rows */
    bool thin = false;
    for (int k = 1; k < m->n_blocks; k++) thin |= P > 1 && m->blocks[k].in_dim * (size_t)P == full->blocks[k].in_dim;
    test_cond("a block boundary inside the region carries 1/P of the floats", P == 1 || thin);
    float *want = dt_alloc_floats(m->n);
    memset(want, 0, m->n * sizeof(float));
    dt_model_local_from_logical(m, want, full, full->g);
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        snprintf(name, sizeof name, "rank %d/%d %s %s", R, P, what, p->name);
        test_close(name, m->g + p->offset, want + p->offset, p->numel, 1e-5, 1e-3);
    }
    dt_free(want);
    free(tok);
    free(tgt);
done:
    dt_model_destroy(full);
    dt_model_destroy(m);
}

int main(void) {
    if (dt_comm_init(getenv("OMPI_COMM_WORLD_SIZE") != NULL, &W)) {
        fprintf(stderr, "%s\n", dt_error_msg());
        return 1;
    }
    P = dt_comm_size(W);
    R = dt_comm_rank(W);
    dt_model_cfg gpt;
    dt_model_cfg_default(&gpt, DT_MODEL_GPT);
    gpt.n_layer = 2;
    gpt.n_head = 2 * P;
    gpt.n_embd = 8 * P;
    gpt.block_size = 4 * P;
    gpt.vocab_size = 64;
    check("gpt", gpt, 1, false);
    check("gpt, two backwards accumulated", gpt, 2, false);
    check("gpt, recomputed", gpt, 1, true);

    dt_model_cfg llama;
    dt_model_cfg_default(&llama, DT_MODEL_FILE);
    snprintf(llama.file, sizeof llama.file, "llama");
    snprintf(llama.set, sizeof llama.set, "n_layer=2,n_head=%d,n_kv_head=%d,n_embd=%d,ffn=%d,block_size=%d,vocab_size=64",
             P, P, 8 * P, 12 * P, 4 * P);
    check("llama", llama, 2, false);

    char path[] = "/tmp/dt_seqpar_XXXXXX";
    if (R == 0) {
        int fd = mkstemp(path);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (f) {
            fputs(DROP_DESC, f);
            fclose(f);
        }
    }
    dt_bcast(W, path, sizeof path, 0, DT_ALGO_AUTO);
    dt_model_cfg desc;
    dt_model_cfg_default(&desc, DT_MODEL_FILE);
    snprintf(desc.file, sizeof desc.file, "%s.json", path);
    if (R == 0) rename(path, desc.file);
    dt_barrier(W);
    snprintf(desc.set, sizeof desc.set, "T=%d,C=%d,H=%d", 4 * P, 8 * P, 2 * P);
    check("dropout description", desc, 2, false);
    dt_barrier(W);
    if (R == 0) remove(desc.file);

    int rc = test_report();
    int all = rc;
    double v = rc;
    dt_allreduce_f64(W, &v, 1);
    all = v > 0;
    dt_comm_destroy(W);
    dt_comm_finalize();
    return all;
}
