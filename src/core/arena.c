/* A bump arena: one allocation, carved into aligned pieces, freed at once. */
#include "dtrain/core.h"

#include <stdlib.h>
#include <string.h>

dt_status dt_arena_init(dt_arena *a, size_t bytes) {
    memset(a, 0, sizeof *a);
    size_t rounded;
    if (!dt_size_add(bytes, 63, &rounded))
        return dt_errorf(DT_ERR_NOMEM, "arena of %zu bytes is too large", bytes);
    rounded &= ~(size_t)63;
    if (rounded == 0) rounded = 64;
    a->base = aligned_alloc(64, rounded);
    if (!a->base) return dt_errorf(DT_ERR_NOMEM, "cannot allocate an arena of %zu bytes", bytes);
    memset(a->base, 0, rounded);
    a->size = rounded;
    return DT_OK;
}

void *dt_arena_alloc(dt_arena *a, size_t bytes, size_t align) {
    DT_ASSERT(align && (align & (align - 1)) == 0);
    size_t start = (a->used + align - 1) & ~(align - 1);
    if (start < a->used || start > a->size || bytes > a->size - start) return NULL;
    a->used = start + bytes;
    return a->base + start;
}

void dt_arena_reset(dt_arena *a) { a->used = 0; }

void dt_arena_free(dt_arena *a) {
    if (!a) return;
    free(a->base);
    memset(a, 0, sizeof *a);
}
