/* dtrain Hogwild! (Niu et al. 2011): T threads of one process train one shared
 * parameter arena with no locks. Each thread has its own gradient arena,
 * activations and optimizer state (momentum buffer) and, every step, reads the
 * shared weights, computes its gradient on its own shard of the global batch and
 * writes its update straight into the shared weights.
 *
 * Data-race semantics, honestly: the threads read and write the same floats
 * with no synchronisation. A forward pass may see a mix of old and new values
 * of a tensor; two threads updating the same float at once may lose one of the
 * two updates (w -= lr*g is a read-modify-write). On x86 an aligned 32-bit float
 * store is atomic, so no value is ever torn, but nothing orders the stores. The
 * algorithm tolerates this (sparse or small conflicting updates are rare); the
 * result is not bitwise reproducible, unlike every other mode of dtrain. This
 * is a data race in the C11 sense; ThreadSanitizer will report it. */
#ifndef DTRAIN_HOGWILD_H
#define DTRAIN_HOGWILD_H

#include "dtrain/model.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills the thread's batch for its step (buffers owned by the callee, one set
 * per thread). Called concurrently from different threads. */
typedef void (*dt_hogwild_batch_fn)(void *ctx, int thread, int64_t step, dt_batch *out);

typedef struct dt_hogwild_cfg {
    int threads;
    int64_t steps;              /* steps per thread */
    int maxB;                   /* largest per-thread batch */
    dt_optim_cfg optim;
    dt_lr_sched sched;
} dt_hogwild_cfg;

/* Trains m (its w is the shared arena). loss[s] receives the mean over threads of
 * the loss at step s (steps entries; may be NULL). */
dt_status dt_hogwild_train(dt_model *m, const dt_hogwild_cfg *cfg, dt_hogwild_batch_fn fn, void *ctx,
                           double *loss);

#ifdef __cplusplus
}
#endif
#endif
