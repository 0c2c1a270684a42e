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

/* Meetings, for checkpoints and stops. Every `every` steps (and at the end
 * with at_end), and at the step
 * boundary K fixed once stop_poll first returns nonzero (the furthest boundary
 * a thread reaches next, so none goes back), every thread waits while one
 * calls meet with the threads' optimizers (the weights hold still); after a
 * stop's meeting the threads end. load sets the optimizers' state before the
 * threads start (a resume). Any hook may be NULL. Per step: one uncontended
 * lock; per meeting: two barriers. */
typedef struct dt_hogwild_hooks {
    void *ctx;
    int64_t every;              /* 0: no periodic meetings */
    bool at_end;                /* one more meeting after the last step */
    int (*stop_poll)(void *ctx); /* a stop code, 0: none; called from the threads */
    dt_status (*meet)(void *ctx, int64_t step, dt_optim *const *opts, int threads, int stop_code);
    dt_status (*load)(void *ctx, dt_optim *const *opts, int threads);
} dt_hogwild_hooks;

typedef struct dt_hogwild_cfg {
    int threads;
    int64_t steps;              /* steps per thread, in all */
    int64_t start;              /* steps done already (a resume): threads begin after them */
    int maxB;                   /* largest per-thread batch */
    dt_optim_cfg optim;
    dt_lr_sched sched;
} dt_hogwild_cfg;

/* Trains m (its w is the shared arena) from step cfg->start on. loss[s]
 * receives the mean over threads of the loss at step s (steps entries; may be
 * NULL). hooks may be NULL. *stopped_at (may be NULL): the step every thread
 * stopped after on a stop, -1 when they ran to the end; *stop_code its code. */
dt_status dt_hogwild_train(dt_model *m, const dt_hogwild_cfg *cfg, dt_hogwild_batch_fn fn, void *ctx, double *loss,
                           const dt_hogwild_hooks *hooks, int64_t *stopped_at, int *stop_code);

#ifdef __cplusplus
}
#endif
#endif
