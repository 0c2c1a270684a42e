/* What the program installs around a library run: the reporters (metrics
 * file, weights file, the progress line), the fault injections that end or
 * stall a process (crash, hang, slow) and the watchdog. */
#ifndef DT_HOOKS_H
#define DT_HOOKS_H

#include "dtrain/train.h"

typedef struct cli_hooks {
    const dt_train_cfg *cfg;
    dt_report_jsonl *jsonl;
    const char *weights_dir;
    dt_strategy strategy;
    int64_t total;
    bool progress;           /* a live line on a terminal instead of log lines */
    double watchdog_s;
} cli_hooks;

/* Installs the reporters and the step hook into cfg (which h borrows); the
 * hook starts the watchdog at the first step: a step that makes no progress
 * for watchdog_s ends the process with exit code 3 (0: no watchdog). */
dt_status cli_hooks_install(cli_hooks *h, dt_train_cfg *cfg, bool progress, double watchdog_s);
/* --inject crash|hang|slow of `rank` at `step` (crash and hang at its
 * beginning, slow at its compute: prev_compute_s times factor - 1 more). */
void cli_inject_fire(const dt_inject *inject, int n, int rank, int64_t step, dt_step_point at, double prev_compute_s);
/* Stops the watchdog and closes the metrics file; returns its status. */
dt_status cli_hooks_finish(cli_hooks *h);

#endif
