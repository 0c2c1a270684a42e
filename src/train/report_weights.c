/* The weights reporter: the run's final logical weights as OUT/model.safetensors
 * (PyTorch's names and layouts), the step count in the metadata. */
#include "dtrain/report.h"
#include "dtrain/train.h"
#include "dtrain/weights.h"

#include <stdio.h>

static dt_status on_start(void *ctx, const dt_run_info *info) {
    *(const char **)ctx = info->out_dir;
    return info->out_dir ? dt_report_make_dir(info->out_dir) : DT_OK;
}

static dt_status on_end(void *ctx, const dt_end_info *e) {
    const char *dir = *(const char **)ctx;
    if (!dir || !e->model || e->res->stopped_at >= 0) return DT_OK; /* a stopped run's weights are in its checkpoint */
    char path[4200], steps[32];
    snprintf(path, sizeof path, "%.4000s/model.safetensors", dir);
    snprintf(steps, sizeof steps, "%lld", (long long)e->res->steps);
    const char *kv[] = {"steps", steps};
    return dt_weights_save(e->model, path, 1, kv);
}

void dt_report_weights(dt_reporter *r, const char **dir) {
    *dir = NULL;
    *r = (dt_reporter){.ctx = (void *)dir, .on_start = on_start, .on_end = on_end};
}
