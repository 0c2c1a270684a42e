/* A run: its configuration checked, the setup phases, then the driver of its
 * strategy (sync: data/pipeline/tensor parallelism and local SGD; the
 * parameter server; Hogwild!). Evaluation of given weights. */
#include "run.h"

#include "dtrain/weights.h"

#include <string.h>

dt_status dt_train_run(const dt_train_cfg *c, dt_comm *comm, dt_train_result *res) {
    memset(res, 0, sizeof *res);
    res->test_acc = -1.0f;
    res->resumed_from = -1;
    res->stopped_at = -1;
    dt_status st = dt_train_cfg_check(c);
    if (st) return st;
    int world = dt_comm_size(comm);
    /* A joined worker takes the job's injections by its slot (checked by the job). */
    if (!c->join_port && (st = tr_inject_check(c, c->strategy == DT_STRATEGY_HOGWILD ? 1 : world))) return st;
    tr_run r;
    st = tr_setup(&r, c, comm, res);
    if (!st) {
        if (c->strategy == DT_STRATEGY_PS) st = tr_drive_ps(&r);
        else if (c->strategy != DT_STRATEGY_HOGWILD) st = tr_drive_sync(&r);
        else if (world > 1) st = dt_errorf(DT_ERR_INVALID, "--strategy hogwild runs threads in one process: drop -n (or use -n 1)");
        else st = tr_drive_hogwild(&r);
    }
    tr_free(&r);
    return st;
}

dt_status dt_eval_run(const dt_train_cfg *c, const char *weights, dt_train_result *res) {
    memset(res, 0, sizeof *res);
    res->test_acc = -1.0f;
    dt_dataset d;
    dt_loader ld = {0};
    dt_model *m = NULL;
    dt_status st = tr_data_open(c, false, &d);
    if (!st) st = dt_model_create(&m, &c->model);
    if (!st) st = dt_weights_load(m, weights);
    if (!st) st = dt_loader_init(&ld, &d, d.lm ? 16 : 256, c->seed, 0, 1);
    double t0 = dt_now();
    if (!st) st = tr_evaluate_alone(m, &ld, c->eval_max, &res->test_acc, &res->eval_loss);
    res->seconds = dt_now() - t0;
    dt_loader_free(&ld);
    dt_model_destroy(m);
    dt_dataset_free(&d);
    return st;
}
