/* dtrain inspect: what a checkpoint holds (state, model, config, every file's
 * tensors), after verifying every checksum (a pass over all its bytes). */
#include "ckpt_internal.h"

#include <stdio.h>
#include <string.h>

static void print_state(FILE *out, const char *path, const dt_ckpt_state *s, json_t *man) {
    fprintf(out, "checkpoint %s\n", path);
    fprintf(out, "  format %s, step %lld, sampler epoch %lld index %lld, seed %llu\n", DT_CKPT_FORMAT,
            (long long)s->step, (long long)s->epoch, (long long)s->index, (unsigned long long)s->seed);
    fprintf(out, "  written by %d rank%s (dp=%d pp=%d tp=%d) with ZeRO-%d, global batch %d, %s (step count %lld, %d state tensor%s per parameter)\n",
            s->world, s->world == 1 ? "" : "s", s->dp, s->pp, s->tp, s->zero, s->batch, s->optim == DT_OPTIM_ADAMW ? "adamw" : "sgd",
            (long long)s->optim_t, s->n_states, s->n_states == 1 ? "" : "s");
    json_t *model = json_object_get(man, "model");
    if (json_is_object(model)) {
        fprintf(out, "  model:");
        const char *k;
        json_t *v;
        json_object_foreach(model, k, v) if (strcmp(k, "format")) fprintf(out, " %s=%s", k, json_string_value(v));
        fprintf(out, "\n");
    }
    fprintf(out, "  config: %s\n", s->config[0] ? s->config : "{}");
}

/* One file's summary line and its tensors; returns its tensor bytes. */
static size_t print_file(FILE *out, const dt_st_file *f, const char *name) {
    int nt = dt_st_count(f);
    size_t bytes = 0, params = 0;
    for (int j = 0; j < nt; j++) {
        const dt_st_tensor *t = dt_st_get(f, j);
        bytes += t->end - t->begin;
        if (strncmp(t->name, "optim.", 6) != 0) params += t->numel;
    }
    fprintf(out, "  %s: %d tensors (%zu parameter values), %.2f MB, every crc32c ok\n",
            strrchr(name, '/') + 1, nt, params, (double)bytes / 1e6);
    for (int j = 0; j < nt; j++) {
        const dt_st_tensor *t = dt_st_get(f, j);
        fprintf(out, "    %-56s %s [", t->name, dt_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) fprintf(out, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        fprintf(out, "]\n");
    }
    return bytes;
}

dt_status dt_ckpt_inspect(const char *path, FILE *out) {
    dt_ckpt_files cf;
    dt_ckpt_state s;
    json_t *man = NULL;
    dt_status st = dt_ckpt_files_open(path, &s, &cf, &man);
    if (st) return st;
    print_state(out, path, &s, man);
    size_t total = 0;
    for (int i = 0; i < cf.n; i++) total += print_file(out, cf.f[i], cf.names[i]);
    fprintf(out, "  total %.2f MB in %d file%s\n", (double)total / 1e6, cf.n, cf.n == 1 ? "" : "s");
    json_decref(man);
    dt_ckpt_files_free(&cf);
    return DT_OK;
}
