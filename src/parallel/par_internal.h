/* Shared between the data-parallel files (dp.c, zero3.c): the bucket
 * layout. Private. (The released-on-demand arenas, dt_arena_map, are public:
 * dtrain/parallel.h.) */
#ifndef DT_PAR_INTERNAL_H
#define DT_PAR_INTERNAL_H

#include "dtrain/core.h"
#include "dtrain/parallel.h"

#include <stddef.h>

typedef struct dt_bucket {
    size_t lo, hi;            /* arena range [lo, hi) */
    int first_block;          /* lowest block index in the bucket: done => bucket ready */
    int top_block;            /* highest block index in the bucket */
    size_t own_off, own_len;  /* this rank's chunk (arena offset, floats) */
    size_t state_off;         /* where the chunk sits in the shard (optimizer state) */
} dt_bucket;

#endif
