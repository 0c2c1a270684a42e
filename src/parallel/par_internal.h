/* Shared between the data-parallel files (dp.c, zero3.c, arena_map.c):
 * the bucket layout and the released-on-demand arenas. Private. */
#ifndef DT_PAR_INTERNAL_H
#define DT_PAR_INTERNAL_H

#include "dtrain/core.h"

#include <stddef.h>

typedef struct dt_bucket {
    size_t lo, hi;            /* arena range [lo, hi) */
    int first_block;          /* lowest block index in the bucket: done => bucket ready */
    int top_block;            /* highest block index in the bucket */
    size_t own_off, own_len;  /* this rank's chunk (arena offset, floats) */
    size_t state_off;         /* where the chunk sits in the shard (optimizer state) */
} dt_bucket;

/* An arena of `floats` floats in an anonymous mapping whose ranges can be
 * handed back to the kernel (they read as zeros and fault in again when
 * written): ZeRO-2's gradients, ZeRO-3's parameters. */
typedef struct dt_arena_map {
    void *map;
    size_t map_len;
    float *base;              /* the arena: 2 MiB aligned */
    size_t bytes;             /* its bytes (at least 1) */
    size_t page_floats;       /* release granularity: the arena's page size */
} dt_arena_map;

/* Maps the arena (zeroed); what names it in the error. `unit` is the
 * typical range released (floats): 2 MiB pages are asked for when it spans
 * at least one (far fewer faults; a release hands back the huge pages
 * wholly inside the range), 4 KiB pages otherwise (a release smaller than a
 * huge page would hand nothing back). */
dt_status dt_arena_map_create(dt_arena_map *a, size_t floats, size_t unit, const char *what);
void dt_arena_map_destroy(dt_arena_map *a); /* zeroed struct ok */
/* Zeroes [lo, hi): the pages wholly inside it are released, the partial
 * pages at its edges zeroed by hand. */
void dt_arena_release(const dt_arena_map *a, size_t lo, size_t hi);
/* Faults the pages of [lo, hi) in at once (MADV_POPULATE_WRITE, where the
 * kernel has it: one call instead of a fault a page); their contents kept. */
void dt_arena_populate(const dt_arena_map *a, size_t lo, size_t hi);
/* The arena's resident bytes now (mincore). */
size_t dt_arena_resident(const dt_arena_map *a);

#endif
