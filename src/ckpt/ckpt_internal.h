/* Private to src/ckpt: what the checkpoint writer (ckpt_write.c, ckpt_persist.c)
 * and the readers (ckpt_manifest.c, ckpt_read.c, ckpt_inspect.c) share: names
 * on disk, the writer's snapshot, and a checkpoint opened and verified. */
#ifndef DTRAIN_CKPT_INTERNAL_H
#define DTRAIN_CKPT_INTERNAL_H

#include "dtrain/ckpt.h"
#include "dtrain/safetensors.h"

#include <jansson.h>
#include <pthread.h>

#define MANIFEST "manifest.json"

/* Name of optimizer state tensor i of optimizer k ("exp_avg", ...). */
const char *dt_ckpt_state_name(dt_optim_kind k, int i);
/* CDIR/rank-<rank, five digits>.safetensors into buf. */
void dt_ckpt_rank_file(char *buf, size_t n, const char *cdir, int rank);

struct dt_ckpt_writer {
    char *dir;
    int rank, world, keep;
    int *writers, n_writers;  /* world ranks that write a file */
    bool params_too;          /* the snapshot's runs also carry parameters */
    bool writes;              /* this rank is one of them */
    bool *mask;               /* parameters this rank writes (snapshot) */
    double timeout;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool pending, quit;
    dt_status last;
    char last_msg[1024];
    double blocking_s;
    double persist_s;         /* the last persist's duration (under mu) */
    dt_ckpt_net net;          /* net.exchange NULL: a shared directory */

    /* the snapshot */
    const dt_model *model;
    float *params;             /* m->n floats (rank 0) */
    size_t params_cap;
    float *st[2];              /* optimizer state shard copies */
    size_t st_cap;
    int n_states;
    size_t *runs;              /* 3 * nruns: arena_off, len, state_off */
    int nruns;
    int n_extra;               /* extra tensors (copies) */
    char (*extra_name)[96];
    float **extra_data;
    size_t *extra_len;
    dt_ckpt_state state;
};

/* Writes the snapshot in w: this rank's file; on rank 0 also the manifest once
 * every writer's file is there, then prunes old checkpoints (ckpt_persist.c).
 * Runs on the writer thread. */
dt_status dt_ckpt_persist(dt_ckpt_writer *w);

/* A checkpoint opened and verified: its files in manifest order. */
typedef struct dt_ckpt_files {
    int n;
    dt_st_file **f;
    char **names;   /* full paths */
} dt_ckpt_files;

/* Reads the manifest of the checkpoint at cpath, checks it and every file it
 * lists (size, safetensors structure, every tensor's crc32c). On success s
 * (may be NULL) gets the state, cf the open files (dt_ckpt_files_free) and
 * *man_out (may be NULL) the manifest (json_decref). On failure cf is empty. */
dt_status dt_ckpt_files_open(const char *cpath, dt_ckpt_state *s, dt_ckpt_files *cf, json_t **man_out);
void dt_ckpt_files_free(dt_ckpt_files *cf);

#endif
