/* Private to src/train: checkpoints on per-host local disks (ckpt_net.c: the
 * writer's hooks and set-up; ckpt_gather.c: assembling a checkpoint at resume). */
#ifndef DTRAIN_TRAIN_CKPT_NET_H
#define DTRAIN_TRAIN_CKPT_NET_H

#include "run.h"

struct tr_net {
    dt_comm *c;          /* the writers' communicator (split from the world; key = world rank) */
    int rank, n, nhosts, R; /* world rank and size, hosts of the job, replicas */
    int *host;           /* world rank -> host (0..nhosts-1) */
    int *lead;           /* host -> its lowest rank, which assembles the host's files at resume */
    int *crank;          /* world rank -> its rank in c, -1: writes no checkpoint */
    int *wlead;          /* host -> its lowest writer, which receives replicas, -1: none */
    int *ring, nring;    /* the hosts with a writer, in host order: replicas go round it */
    int *pos;            /* host -> its place in ring, -1 */
    uint64_t replica_bytes;
    char mem[512];       /* this host's memory store of received replicas ("" none) */
};

/* The memory store of received replicas: MEM/ckpt-<step>/rank-*.safetensors,
 * the newest checkpoint only, under TR_MEM_ROOT (a tmpfs); ckpt_net.c keeps it,
 * ckpt_gather.c reads it. */
#define TR_MEM_ROOT "/dev/shm"

/* The whole file at path (bytes long) into a new buffer (*buf, dt_free). */
dt_status tr_net_read_file(const char *path, char **buf, int64_t bytes);
/* dir/name written whole or not at all (temporary file, fsync, rename). */
dt_status tr_net_write_file(const char *dir, const char *name, const char *buf, int64_t bytes);

#endif
