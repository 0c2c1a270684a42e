/* dtrain core: status codes, errors, checked allocation, arenas, RNG, logging, clocks.
 *
 * Every library function that can fail returns a dt_status and, before returning
 * an error, records one human-readable line with dt_errorf(); the CLI prints
 * dt_error_msg() and decides the exit code. The library never calls exit(). */
#ifndef DTRAIN_CORE_H
#define DTRAIN_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* _Noreturn is C11's spelling; C++ (an embedder's) has the attribute. */
#ifdef __cplusplus
#define DT_NORETURN [[noreturn]]
#else
#define DT_NORETURN _Noreturn
#endif

typedef enum dt_status {
    DT_OK = 0,
    DT_ERR_NOMEM,       /* allocation failed or size overflowed */
    DT_ERR_INVALID,     /* bad argument, flag or configuration value */
    DT_ERR_IO,          /* open/read/write/fsync failed */
    DT_ERR_FORMAT,      /* a file is malformed (bad magic, truncated, bad header) */
    DT_ERR_SHAPE,       /* tensors or models do not match */
    DT_ERR_UNSUPPORTED, /* valid request this build cannot serve */
    DT_ERR_TIMEOUT,     /* a deadline expired */
    DT_ERR_COMM,        /* the communication layer failed */
    DT_STATUS_COUNT
} dt_status;

/* Short constant name of a status ("invalid argument", ...). Never NULL. */
const char *dt_status_str(dt_status s);

/* Records a one-line message (printf format) for the current thread and returns
 * `code`, so callers write `return dt_errorf(DT_ERR_FORMAT, "%s: bad magic", p);`. */
dt_status dt_errorf(dt_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" if none). */
const char *dt_error_msg(void);
void dt_error_clear(void);

/* Programmer errors: never compiled out; prints file:line and aborts. */
#define DT_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) dt_assert_fail(#cond, __FILE__, __LINE__);                \
    } while (0)
DT_NORETURN void dt_assert_fail(const char *cond, const char *file, int line);

/* ---- checked allocation ---------------------------------------------------
 * All return NULL on failure (and on size overflow); free with dt_free (NULL ok).
 * dt_alloc_floats returns 64-byte aligned, zeroed memory. */
bool dt_size_mul(size_t a, size_t b, size_t *out); /* false on overflow */
bool dt_size_add(size_t a, size_t b, size_t *out);
void *dt_malloc(size_t n);
void *dt_calloc(size_t count, size_t size);
void *dt_realloc_array(void *p, size_t count, size_t size);
float *dt_alloc_floats(size_t n);
/* Floats that dt_alloc_floats(n) holds for n >= 1: n rounded up to 16 (whole
 * 64-byte lines); 0 for n = 0 (memory accounting: callers allocate nothing). */
size_t dt_alloc_floats_held(size_t n);
void dt_free(void *p);
char *dt_strdup(const char *s);

/* ---- arena: one contiguous block, carved by a bump pointer ---------------- */
typedef struct dt_arena {
    uint8_t *base;
    size_t size;
    size_t used;
} dt_arena;

dt_status dt_arena_init(dt_arena *a, size_t bytes); /* zeroed, 64-byte aligned */
/* Returns `bytes` from the arena aligned to `align` (power of two), or NULL
 * when it does not fit. Memory belongs to the arena. */
void *dt_arena_alloc(dt_arena *a, size_t bytes, size_t align);
void dt_arena_reset(dt_arena *a);
void dt_arena_free(dt_arena *a);

/* ---- RNG: Philox4x32-10, counter based --------------------------------------
 * The whole state is (seed, counter, used): copy the struct to checkpoint it.
 * Streams with different `stream` ids from one seed are independent. */
typedef struct dt_rng {
    uint64_t seed;
    uint64_t stream;
    uint64_t counter; /* index of the next 4-word block */
    uint32_t buf[4];
    uint32_t used;    /* words of buf already consumed (4 = empty) */
} dt_rng;

void dt_rng_init(dt_rng *r, uint64_t seed, uint64_t stream);
uint32_t dt_rng_u32(dt_rng *r);
uint64_t dt_rng_u64(dt_rng *r);
float dt_rng_uniform(dt_rng *r);          /* [0, 1) with 24 random bits */
uint64_t dt_rng_below(dt_rng *r, uint64_t n); /* uniform in [0, n), unbiased; n > 0 */
float dt_rng_normal(dt_rng *r);           /* N(0, 1), Box-Muller */
/* Stateless: the 4 words of block `counter` of stream (seed, stream). */
void dt_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]);

/* ---- logging ------------------------------------------------------------ */
typedef enum { DT_LOG_ERROR, DT_LOG_WARN, DT_LOG_INFO, DT_LOG_DEBUG } dt_log_level;
void dt_log_set_level(dt_log_level lvl);
void dt_log_set_rank(int rank); /* -1: no rank prefix */
void dt_log(dt_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- clocks ------------------------------------------------------------- */
double dt_now(void);        /* monotonic seconds */
uint64_t dt_now_ns(void);   /* monotonic nanoseconds */
double dt_wall_time(void);  /* seconds since the epoch */

#ifdef __cplusplus
}
#endif
#endif
