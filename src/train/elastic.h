/* Private to src/train: the run directory's side of elastic parameter-server
 * jobs (elastic.c): the job's secret, the port file joiners read, the leave
 * requests. */
#ifndef DTRAIN_TRAIN_ELASTIC_H
#define DTRAIN_TRAIN_ELASTIC_H
#include "dtrain/train.h"

/* Reads DIR/join.token (written by the launcher, mode 0600) into buf. */
dt_status tr_elastic_secret(const char *dir, char *buf, size_t n);
/* dt_ps_cfg.publish: server 0 writes OUT/join.json (its port and the job's
 * command line) for `dtrain train --join OUT`; ctx: the tr_run. */
void tr_elastic_publish(void *ctx, const char *port);
/* Whether worker `slot` was asked to leave: the file OUT/leave.SLOT exists. */
bool tr_elastic_leave_asked(const dt_train_cfg *c, int slot);
#endif
