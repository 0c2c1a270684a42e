/* Model descriptions against PyTorch (fixtures from tools/gen_fixture_models.py):
 * the description in each fixture's metadata is compiled by dtrain, given the
 * fixture's weights by name, and must reproduce PyTorch's loss and every
 * gradient of one batch, the losses of K steps of plain SGD and batch norm's
 * running statistics after them.
 *
 *   test_desc_reference                 every tests/fixtures/ref_desc_*.safetensors
 *   test_desc_reference FILE...         those fixtures (tools/random_desc.py's)
 *
 * Prints the largest difference seen over all files on its last line. */
#include "dtrain/model.h"
#include "dtrain/safetensors.h"
#include "testhelp.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ATOL 2e-5
#define RTOL 5e-4

static double worst = 0;

static bool close_all(const char *what, const float *a, const float *b, size_t n) {
    double maxd = 0;
    size_t at = 0;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > maxd) maxd = d, at = i;
        if (!(d <= ATOL + RTOL * fabs((double)b[i]))) ok = false;
    }
    if (maxd > worst) worst = maxd;
    if (!ok) printf("FAIL %-48s n=%zu max|diff|=%.3g (at %zu: %g vs %g)\n", what, n, maxd, at, (double)a[at], (double)b[at]);
    return ok;
}

static const float *tensor(const dt_st_file *f, const char *name, size_t n, float *buf) {
    const dt_st_tensor *t = dt_st_find(f, name);
    if (!t || t->numel != n || dt_st_read_f32(f, t, buf, n)) return NULL;
    return buf;
}

/* The weights of the fixture into m (every tensor by its name). */
static bool load_weights(const dt_st_file *f, dt_model *m) {
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        if (!tensor(f, p->name, p->numel, m->w + p->offset)) {
            printf("FAIL fixture has no tensor '%s' of %zu floats\n", p->name, p->numel);
            return false;
        }
    }
    return true;
}

/* Batch k: x or tokens, targets or y, into the buffers. */
static bool load_batch(const dt_st_file *f, const dt_model *m, int B, int k, float *x, int32_t *tok, int32_t *tgt,
                       float *y, dt_batch *b) {
    char n1[32], n2[32];
    memset(b, 0, sizeof *b);
    b->B = B;
    if (m->input == DT_INPUT_TOKENS) {
        snprintf(n1, sizeof n1, "tokens.%d", k);
        snprintf(n2, sizeof n2, "targets.%d", k);
        const dt_st_tensor *a = dt_st_find(f, n1), *c = dt_st_find(f, n2);
        size_t n = (size_t)B * m->seq_len;
        if (!a || !c || dt_st_read_i32(f, a, tok, n) || dt_st_read_i32(f, c, tgt, n)) return false;
        b->tokens = tok;
        b->targets = tgt;
    } else {
        snprintf(n1, sizeof n1, "x.%d", k);
        if (!tensor(f, n1, (size_t)B * m->in_floats, x)) return false;
        b->x = x;
        if (m->loss_kind == DT_LOSS_MSE) {
            snprintf(n2, sizeof n2, "y.%d", k);
            if (!tensor(f, n2, (size_t)B * m->y_dim, y)) return false;
            b->y = y;
        } else {
            snprintf(n2, sizeof n2, "targets.%d", k);
            const dt_st_tensor *c = dt_st_find(f, n2);
            if (!c || dt_st_read_i32(f, c, tgt, (size_t)B)) return false;
            b->targets = tgt;
        }
    }
    b->loss_scale = 1.0f / ((float)B * (float)m->loss_terms);
    return true;
}

static bool check_file(const char *path) {
    dt_st_file *f = NULL;
    dt_model *m = NULL;
    dt_acts *a = NULL;
    bool ok = false;
    char tmp[] = "/tmp/dtrain_descXXXXXX.json";
    float *x = NULL, *y = NULL, *buf = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    if (dt_st_open(path, &f)) {
        printf("FAIL %s: %s\n", path, dt_error_msg());
        return false;
    }
    const char *desc = dt_st_meta(f, "desc");
    int B = atoi(dt_st_meta(f, "B") ? dt_st_meta(f, "B") : "0"), K = atoi(dt_st_meta(f, "K") ? dt_st_meta(f, "K") : "0");
    float lr = (float)atof(dt_st_meta(f, "lr") ? dt_st_meta(f, "lr") : "0");
    int fd = mkstemps(tmp, 5);
    if (!desc || fd < 0 || write(fd, desc, strlen(desc)) != (ssize_t)strlen(desc)) {
        printf("FAIL %s: no description in the metadata\n", path);
        goto done;
    }
    close(fd);
    dt_model_cfg c;
    dt_model_cfg_default(&c, DT_MODEL_FILE);
    if (dt_model_select(&c, tmp) || dt_model_create(&m, &c)) {
        printf("FAIL %s: %s\n", path, dt_error_msg());
        goto done;
    }
    size_t per = m->input == DT_INPUT_TOKENS ? (size_t)m->seq_len : (size_t)m->in_floats;
    x = calloc((size_t)B * per + 1, sizeof(float));
    y = calloc((size_t)B * (size_t)(m->y_dim + 1), sizeof(float));
    tok = calloc((size_t)B * per + 1, sizeof(int32_t));
    tgt = calloc((size_t)B * per + 1, sizeof(int32_t));
    buf = calloc(m->n + 1, sizeof(float));
    if (!x || !y || !tok || !tgt || !buf || dt_acts_create(&a, m, 0, m->n_blocks - 1, B) || !load_weights(f, m)) goto done;
    ok = true;
    for (int k = 0; k < K; k++) {
        dt_batch b;
        if (!load_batch(f, m, B, k, x, tok, tgt, y, &b)) {
            printf("FAIL %s: batch %d missing\n", path, k);
            ok = false;
            break;
        }
        dt_model_zero_grad(m);
        float loss = dt_model_forward(m, a, &b, NULL);
        dt_model_backward(m, a, &b, NULL, NULL, NULL, NULL);
        float want[16];
        if (!tensor(f, "losses", (size_t)K, want) || K > 16) {
            ok = false;
            break;
        }
        char what[96];
        snprintf(what, sizeof what, "%s loss at step %d", path, k);
        ok &= close_all(what, &loss, &want[k], 1);
        for (int i = 0; k == 0 && i < m->n_params; i++) {
            const dt_param *p = &m->params[i];
            if (p->buffer) continue;
            snprintf(what, sizeof what, "grad.%s", p->name);
            if (!tensor(f, what, p->numel, buf)) {
                printf("FAIL %s: no %s\n", path, what);
                ok = false;
                continue;
            }
            ok &= close_all(what, m->g + p->offset, buf, p->numel);
        }
        for (int i = 0; i < m->n_params; i++) {
            const dt_param *p = &m->params[i];
            if (p->buffer) continue;
            for (size_t j = 0; j < p->numel; j++) m->w[p->offset + j] -= lr * m->g[p->offset + j];
        }
    }
    for (int i = 0; i < m->n_params; i++) {
        const dt_param *p = &m->params[i];
        char what[96];
        snprintf(what, sizeof what, "final.%s", p->name);
        if (p->buffer && tensor(f, what, p->numel, buf)) ok &= close_all(what, m->w + p->offset, buf, p->numel);
    }
    printf("%s %s (%d tensors, %d blocks)\n", ok ? "ok  " : "FAIL", path, m->n_params, m->n_blocks);
done:
    unlink(tmp);
    dt_acts_destroy(a);
    dt_model_destroy(m);
    dt_st_close(f);
    free(x);
    free(y);
    free(tok);
    free(tgt);
    free(buf);
    return ok;
}

int main(int argc, char **argv) {
    int fails = 0, n = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++, n++) fails += !check_file(argv[i]);
    } else {
        DIR *d = opendir("fixtures");
        struct dirent *e;
        char path[512];
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, "ref_desc_", 9) != 0) continue;
            snprintf(path, sizeof path, "fixtures/%s", e->d_name);
            fails += !check_file(path);
            n++;
        }
        if (d) closedir(d);
        if (n < 4) {
            printf("FAIL found %d ref_desc_ fixtures, expected at least 4\n", n);
            fails++;
        }
    }
    printf("%d of %d descriptions match PyTorch; largest difference %.3g\n", n - fails, n, worst);
    return fails ? 1 : 0;
}
