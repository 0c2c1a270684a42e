/* A shared-memory segment for the ranks of one host (a communicator's local
 * group), and the synchronisation over it that the shared-memory collectives
 * (shm_coll.c) use.
 *
 * The segment is an anonymous memory file (memfd_create): local rank 0 makes
 * it, the others open it through /proc/<pid>/fd/<fd> and map it. It never has
 * a name in /dev/shm, so a job killed at any moment leaves nothing behind, and
 * the memory goes with the last process that maps it. Layout: a header (the
 * arrival counter, the number of sleepers, then one arrival line per rank,
 * each on its own cache line), then L + 1 areas of DT_SHM_ROUND_BYTES: one slot
 * per local rank and one result area.
 *
 * Sync point k (every local rank passes the same sequence of them): a rank
 * publishes k in its line and adds one to the counter; it goes on when the
 * counter reaches k.L. The rank that completes a sync point wakes the
 * sleepers. Waiting: spin on the counter for a moment (only when the host has
 * a core for every local rank), then yield the core a few times, then sleep
 * on the counter with futex(2) until the last arrival wakes it, never past the
 * communicator's deadline. Cost: one atomic add per arrival and, when someone
 * sleeps, one futex wake per sync point (a sleeper resumes in ~5-20 us). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "comm/comm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define SPINS 256   /* ~2-5 us of pause instructions */
#define YIELDS 16

typedef struct {
    _Atomic uint32_t count;    /* arrivals at sync points, all ranks (the futex word) */
    _Atomic uint32_t sleepers; /* ranks asleep on count */
    char pad[LINE - 8];
} shm_head;

typedef struct {
    _Atomic uint32_t seq;      /* the last sync point this rank reached */
    char pad[LINE - 4];
} shm_line;

struct dt_shm {
    int L, me;
    int *world;                /* local rank -> world rank (reports) */
    unsigned char *base;
    size_t bytes;
    shm_head *head;
    shm_line *line;
    float *area;               /* L + 1 areas of area_floats */
    size_t area_floats;
    uint32_t seq;              /* sync points this rank has passed */
    bool spin;
};

static size_t header_bytes(int L) { return ((size_t)(L + 1) * LINE + 4095) & ~(size_t)4095; }

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Cores this process may run on. */
static int usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Rank 0's half: the memory file; info = {pid, fd} or {-1, errno}. */
static int make_file(size_t bytes, int info[2]) {
    int fd = (int)syscall(SYS_memfd_create, "dtrain-shm", 1u /* MFD_CLOEXEC */);
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        fd = -1;
        errno = e;
    }
    info[0] = fd >= 0 ? (int)getpid() : -1;
    info[1] = fd >= 0 ? fd : errno;
    return fd;
}

static dt_status map_file(dt_shm *s, int fd, const int info[2], char *why, size_t nwhy) {
    int own = fd;
    if (s->me != 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", info[0], info[1]);
        own = open(path, O_RDWR | O_CLOEXEC);
        if (own < 0) {
            snprintf(why, nwhy, "cannot open local rank 0's memory file %s: %s", path, strerror(errno));
            return DT_ERR_IO;
        }
    }
    void *p = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
    if (own != fd) close(own);
    if (p == MAP_FAILED) {
        snprintf(why, nwhy, "cannot map %zu bytes of shared memory: %s", s->bytes, strerror(errno));
        return DT_ERR_IO;
    }
    s->base = p;
    return DT_OK;
}

dt_status dt_shm_create(dt_comm *lc, size_t area_bytes, dt_shm **out, char *why, size_t nwhy) {
    *out = NULL;
    why[0] = '\0';
    dt_shm *s = dt_calloc(1, sizeof *s);
    if (!s || !(s->world = dt_calloc((size_t)lc->size, sizeof(int)))) {
        dt_free(s);
        return dt_errorf(DT_ERR_NOMEM, "shared-memory segment: out of memory");
    }
    s->L = lc->size;
    s->me = lc->rank;
    memcpy(s->world, lc->world, (size_t)lc->size * sizeof(int));
    s->area_floats = area_bytes / sizeof(float) / 64 * 64;
    s->bytes = header_bytes(s->L) + (size_t)(s->L + 1) * s->area_floats * sizeof(float);
    s->spin = s->L <= usable_cores();
    int info[2] = {-1, 0}, fd = -1;
    if (s->me == 0) fd = make_file(s->bytes, info);
    /* Our own broadcast and sum: each has the deadline, unlike MPI's. */
    dt_status st = dt_bcast(lc, info, sizeof info, 0, DT_ALGO_RING);
    double bad = 0;
    if (!st && info[0] < 0) snprintf(why, nwhy, "memfd_create on local rank 0 failed: %s", strerror(info[1]));
    else if (!st && map_file(s, fd, info, why, nwhy)) bad = 1;
    if (!st) st = dt_allreduce_f64(lc, &bad, 1); /* every rank has opened it: rank 0 may close */
    if (fd >= 0) close(fd);
    if (st || bad > 0 || info[0] < 0) {
        if (!why[0] && !st) snprintf(why, nwhy, "another local rank could not map the segment");
        dt_shm_destroy(s);
        return st;
    }
    s->head = (shm_head *)(void *)s->base;
    s->line = (shm_line *)(void *)(s->base + LINE);
    s->area = (float *)(void *)(s->base + header_bytes(s->L));
    *out = s;
    return DT_OK;
}

void dt_shm_destroy(dt_shm *s) {
    if (!s) return;
    if (s->base) munmap(s->base, s->bytes);
    dt_free(s->world);
    dt_free(s);
}

int dt_shm_size(const dt_shm *s) { return s->L; }
int dt_shm_rank(const dt_shm *s) { return s->me; }
size_t dt_shm_area_floats(const dt_shm *s) { return s->area_floats; }
float *dt_shm_area(dt_shm *s, int q) { return s->area + (size_t)q * s->area_floats; }

static bool reached(uint32_t count, uint32_t target) { return (int32_t)(count - target) >= 0; }

static dt_status sync_timeout(dt_shm *s, dt_comm *c, uint32_t k, const char *what, double waited) {
    char peers[256];
    size_t len = 0;
    int listed = 0;
    peers[0] = '\0';
    for (int q = 0; q < s->L; q++) {
        if (q == s->me || reached(atomic_load(&s->line[q].seq), k)) continue;
        int w = snprintf(peers + len, sizeof peers - len, "%srank %d (shared memory)", listed++ ? ", " : "", s->world[q]);
        if (w < 0 || (size_t)w >= sizeof peers - len) break;
        len += (size_t)w;
    }
    c->broken = true;
    return dt_errorf(DT_ERR_TIMEOUT, "%s timed out after %.1f s at step %lld: rank %d was waiting for %s", what, waited,
                     (long long)c->step, s->world[s->me], listed ? peers : "a rank of this host (shared memory)");
}

/* Sleeps on the counter while it still reads v, at most ns nanoseconds. */
static void sleep_on(dt_shm *s, uint32_t v, uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    atomic_fetch_add(&s->head->sleepers, 1);
    if (atomic_load(&s->head->count) == v)
        syscall(SYS_futex, (uint32_t *)&s->head->count, FUTEX_WAIT, v, &ts, NULL, 0);
    atomic_fetch_sub(&s->head->sleepers, 1);
}

dt_status dt_shm_sync(dt_shm *s, dt_comm *c, const char *what) {
    uint32_t k = ++s->seq, target = k * (uint32_t)s->L;
    atomic_store(&s->line[s->me].seq, k);
    uint32_t now = atomic_fetch_add(&s->head->count, 1) + 1;
    if (now == target) {
        /* The last arrival: everyone waits for this same target. */
        if (atomic_load(&s->head->sleepers) > 0) syscall(SYS_futex, (uint32_t *)&s->head->count, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        return DT_OK;
    }
    for (int i = 0; s->spin && i < SPINS; i++) {
        if (reached(atomic_load(&s->head->count), target)) return DT_OK;
        cpu_relax();
    }
    for (int i = 0; i < YIELDS; i++) {
        if (reached(atomic_load(&s->head->count), target)) return DT_OK;
        sched_yield();
    }
    uint64_t t0 = dt_now_ns(), limit = c->timeout > 0 ? (uint64_t)(c->timeout * 1e9) : UINT64_MAX;
    for (;;) {
        uint32_t v = atomic_load(&s->head->count);
        if (reached(v, target)) return DT_OK;
        uint64_t waited = dt_now_ns() - t0;
        if (waited >= limit) return sync_timeout(s, c, k, what, (double)waited * 1e-9);
        uint64_t left = limit - waited;
        sleep_on(s, v, left < 100000000ull ? left : 100000000ull);
    }
}
