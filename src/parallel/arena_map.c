/* Arenas whose pages go back to the kernel between uses (par_internal.h).
 * Cost: a release is one madvise over the range's whole pages plus a memset
 * of at most two partial pages; the next write faults the pages in again, in
 * 2 MiB huge pages where the kernel offers them: a 4 KiB fault costs about a
 * microsecond in a VM, so re-faulting W1's 7.4 MB took 6.5 ms a step against
 * 0.4 ms in huge pages, and ZeRO-3's gathers of W2 (13 MB twice a step, on a
 * thread beside the compute) 110 ms a step against 40 ms (measured here).
 * Huge pages hand back only the 2 MiB pages inside a released range (its
 * owner may add the edge pages nothing else holds), so an arena released
 * in ranges under 2 MiB takes 4 KiB pages. */
#include "par_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Transparent huge pages are on for mappings that ask (madvise or always). */
static bool thp_available(void) {
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    bool ok = fgets(buf, sizeof buf, f) && !strstr(buf, "[never]");
    fclose(f);
    return ok;
}

dt_status dt_arena_map_create(dt_arena_map *a, size_t floats, size_t unit, const char *what) {
    size_t bytes = floats * sizeof(float), huge = (size_t)2 << 20, len = (bytes ? bytes : 1) + huge;
    memset(a, 0, sizeof *a);
    void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return dt_errorf(DT_ERR_NOMEM, "cannot map the %s", what);
    a->map = map;
    a->map_len = len;
    a->base = (float *)(((uintptr_t)map + huge - 1) / huge * huge);
    a->bytes = bytes ? bytes : 1;
    a->page_floats = (size_t)getpagesize() / sizeof(float);
    bool want = bytes >= huge && unit * sizeof(float) >= huge;
    if (want && thp_available() && madvise(a->base, bytes, MADV_HUGEPAGE) == 0)
        a->page_floats = huge / sizeof(float);
    else if (!want)
        madvise(a->base, bytes, MADV_NOHUGEPAGE); /* "always" would fault 2 MiB in where 4 KiB are asked */
    return DT_OK;
}

void dt_arena_map_destroy(dt_arena_map *a) {
    if (a->map) munmap(a->map, a->map_len);
    memset(a, 0, sizeof *a);
}

void dt_arena_release(const dt_arena_map *a, size_t lo, size_t hi) {
    float *g = a->base;
    size_t pf = a->page_floats;
    size_t plo = (lo + pf - 1) / pf * pf, phi = hi / pf * pf;
    if (plo >= phi) {
        memset(g + lo, 0, (hi - lo) * sizeof(float));
        return;
    }
    memset(g + lo, 0, (plo - lo) * sizeof(float));
    memset(g + phi, 0, (hi - phi) * sizeof(float));
    madvise(g + plo, (phi - plo) * sizeof(float), MADV_DONTNEED);
}

void dt_arena_populate(const dt_arena_map *a, size_t lo, size_t hi) {
#ifdef MADV_POPULATE_WRITE
    size_t pf = a->page_floats;
    size_t plo = lo / pf * pf, phi = (hi + pf - 1) / pf * pf;
    madvise(a->base + plo, (phi - plo) * sizeof(float), MADV_POPULATE_WRITE);
#else
    (void)a, (void)lo, (void)hi;
#endif
}

size_t dt_arena_resident(const dt_arena_map *a) {
    size_t page = (size_t)getpagesize(), pages = (a->bytes + page - 1) / page;
    unsigned char vec[4096];
    size_t res = 0;
    for (size_t p = 0; p < pages; p += sizeof vec) {
        size_t n = pages - p < sizeof vec ? pages - p : sizeof vec;
        if (mincore((char *)a->base + p * page, n * page, vec) != 0) return 0;
        for (size_t i = 0; i < n; i++) res += vec[i] & 1;
    }
    return res * page;
}
