/* Trains dtrain's MLP on Fashion-MNIST through the public API only, and
 * prints what the reporter hooks hand back: each logged step's loss and the
 * final test accuracy. Build against an installed dtrain:
 *
 *   cc train_mlp.c -o train_mlp $(pkg-config --cflags --libs dtrain)
 *   ./train_mlp [FASHION_MNIST_DIR]
 *
 * One process trains alone; under `mpirun -n N` the N ranks train together
 * (the program tells dt_comm_init which) and rank 0 alone runs the hooks. Exit status 0 on
 * success, 1 when the run failed (the reason is printed). */
#include <dtrain/dtrain.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* What the hooks collect; the run hands it back to every hook as ctx. */
typedef struct metrics {
    int steps_reported;
    float last_acc;
} metrics;

static dt_status on_step(void *ctx, const dt_step_info *s) {
    metrics *m = ctx;
    m->steps_reported++;
    printf("step %lld/%lld loss %.4f lr %.4f %.0f %s/s\n", (long long)s->step,
           (long long)s->total_steps, s->loss, s->lr, s->items_per_s, s->unit);
    return DT_OK;
}

static dt_status on_eval(void *ctx, const dt_eval_info *e) {
    metrics *m = ctx;
    m->last_acc = e->acc;
    printf("eval at step %lld: accuracy %.4f loss %.4f\n", (long long)e->step, e->acc, e->loss);
    return DT_OK;
}

static dt_status on_end(void *ctx, const dt_end_info *e) {
    (void)ctx;
    printf("end: %lld steps in %.2f s\n", (long long)e->res->steps, e->res->seconds);
    return DT_OK;
}

int main(int argc, char **argv) {
    dt_train_cfg cfg;
    dt_train_cfg_default(&cfg, DT_MODEL_MLP);
    cfg.steps = 30;
    cfg.log_every = 10;
    cfg.quiet = true; /* the hooks do the talking */
    if (argc > 1) cfg.data = argv[1]; /* default: DT_FMNIST_DEFAULT_DIR */

    metrics m = {0, -1.0f};
    cfg.reporters[cfg.n_reporters++] = (dt_reporter){
        .ctx = &m, .on_step = on_step, .on_eval = on_eval, .on_end = on_end};

    dt_comm *comm = NULL;
    dt_train_result res;
    /* One process, or every rank of an mpirun/srun job: the program decides. */
    bool mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
    dt_status st = dt_comm_init(mpi, &comm);
    if (st == DT_OK) st = dt_train_run(&cfg, comm, &res);
    int rank = comm ? dt_comm_rank(comm) : 0;
    dt_comm_destroy(comm);
    dt_comm_finalize();
    if (st != DT_OK) {
        fprintf(stderr, "train_mlp: %s: %s\n", dt_status_str(st), dt_error_msg());
        return 1;
    }
    if (rank == 0)
        printf("final test accuracy %.4f (%d steps reported)\n", res.test_acc, m.steps_reported);
    return 0;
}
