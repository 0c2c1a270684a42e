/* llm.c token shards (the format contract is in data.h).
 *
 * Each shard is mapped, its header checked, and its tokens become one or two
 * segments of the train or validation stream. A window is a range of a stream;
 * reading one finds its first segment by binary search over the segments'
 * start offsets and walks on, so windows may cross shards. Only the pages of
 * the windows gathered are ever touched (plus, at open, the vocabulary scan
 * described in data.h). */
#include "data_int.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_HEADER_BYTES 1024
#define TOK_GPT2_VOCAB 50257

static int tok_name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool tok_has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* The *.bin files of dir, sorted by name, into t->files. */
static dt_status tok_list_dir(const char *dir, dt_tokbin *t) {
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(DT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    dt_status st = DT_OK;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !tok_has_suffix(e->d_name, ".bin")) continue;
        char *p = data_join(dir, e->d_name);
        if (!p) {
            st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory listing the directory", dir);
            break;
        }
        if (!data_is_file(p)) {
            dt_free(p);
            continue;
        }
        if (t->nfiles == cap) {
            int ncap = cap ? cap * 2 : 16;
            char **f = dt_realloc_array(t->files, (size_t)ncap, sizeof *f);
            if (!f) {
                dt_free(p);
                st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory listing the directory", dir);
                break;
            }
            t->files = f;
            cap = ncap;
        }
        t->files[t->nfiles++] = p;
    }
    closedir(d);
    if (!st && t->nfiles == 0)
        st = dt_errorf(DT_ERR_INVALID, "%s: no *.bin token shards in the directory", dir);
    if (!st) qsort(t->files, (size_t)t->nfiles, sizeof *t->files, tok_name_cmp);
    return st;
}

/* Maps shard i and checks its header; *n receives its token count. */
static dt_status tok_map(dt_tokbin *t, int i, size_t *n) {
    const char *path = t->files[i];
    data_fmap m;
    dt_status st = data_fmap_open(path, &m);
    if (st) return st;
    t->maps[i] = m.p;
    t->map_lens[i] = m.n;
    if (m.n < TOK_HEADER_BYTES)
        return dt_errorf(DT_ERR_FORMAT, "%s: truncated: %zu bytes, an llm.c token shard starts with a %d-byte header", path, m.n,
                         TOK_HEADER_BYTES);
    int32_t h[3];
    memcpy(h, m.p, sizeof h);
    if (h[0] != DT_TOKBIN_MAGIC)
        return dt_errorf(DT_ERR_FORMAT, "%s: bad magic %d (an llm.c token shard starts with %d); not a token shard — pass "
                         "a shard written by llm.c's data scripts", path, h[0], DT_TOKBIN_MAGIC);
    if (h[1] != 1)
        return dt_errorf(DT_ERR_FORMAT, "%s: shard version %d (read: 1, uint16 GPT-2 tokens)%s", path, h[1],
                         h[1] == 2 ? "; version 2 (uint32 LLaMA 3 tokens) is not supported" : "");
    if (h[2] < 0) return dt_errorf(DT_ERR_FORMAT, "%s: negative token count %d in the header", path, h[2]);
    size_t want = TOK_HEADER_BYTES + 2 * (size_t)h[2];
    if (m.n != want)
        return dt_errorf(DT_ERR_FORMAT, "%s: %s: the header says %d tokens (%zu bytes) but the file has %zu bytes; %s", path,
                         m.n < want ? "truncated" : "trailing bytes", h[2], want, m.n,
                         m.n < want ? "copy or write it again" : "header and data disagree");
    *n = (size_t)h[2];
    return DT_OK;
}

static dt_status tok_add(dt_tokbin_seg **segs, int *nseg, size_t *total, const uint16_t *tok, size_t n, int file) {
    if (n == 0) return DT_OK;
    dt_tokbin_seg *s = dt_realloc_array(*segs, (size_t)*nseg + 1, sizeof *s);
    if (!s) return dt_errorf(DT_ERR_NOMEM, "token shards: out of memory");
    s[*nseg] = (dt_tokbin_seg){.tok = tok, .n = n, .start = *total, .file = file};
    *segs = s;
    (*nseg)++;
    *total += n;
    return DT_OK;
}

/* Both streams from the mapped shards. */
static dt_status tok_streams(dt_tokbin *t, const size_t *ntok, double val_frac) {
    bool any_val = false;
    size_t all = 0;
    for (int i = 0; i < t->nfiles; i++) {
        const char *base = strrchr(t->files[i], '/');
        base = base ? base + 1 : t->files[i];
        if (t->nfiles > 1 && strstr(base, "val")) any_val = true;
        else all += ntok[i];
    }
    size_t cut = any_val ? all : all - (size_t)floor((double)all * val_frac); /* train tokens */
    size_t seen = 0;
    dt_status st = DT_OK;
    for (int i = 0; i < t->nfiles && !st; i++) {
        const uint16_t *tok = (const uint16_t *)((const uint8_t *)t->maps[i] + TOK_HEADER_BYTES);
        const char *base = strrchr(t->files[i], '/');
        base = base ? base + 1 : t->files[i];
        if (any_val && strstr(base, "val")) {
            st = tok_add(&t->val, &t->nval, &t->n_val, tok, ntok[i], i);
            continue;
        }
        size_t k = seen >= cut ? 0 : cut - seen < ntok[i] ? cut - seen : ntok[i];
        st = tok_add(&t->train, &t->ntrain, &t->n_train, tok, k, i);
        if (!st) st = tok_add(&t->val, &t->nval, &t->n_val, tok + k, ntok[i] - k, i);
        seen += ntok[i];
    }
    return st;
}

/* The vocabulary rule of data.h. */
static void tok_vocab(dt_tokbin *t) {
    size_t total = t->n_train + t->n_val, maxid = 0;
    bool all = total <= DT_TOKBIN_SCAN_ALL;
    for (int s = 0; s < t->ntrain + t->nval; s++) {
        const dt_tokbin_seg *g = s < t->ntrain ? &t->train[s] : &t->val[s - t->ntrain];
        size_t n = all ? g->n : g->n < DT_TOKBIN_SCAN_FIRST ? g->n : DT_TOKBIN_SCAN_FIRST;
        for (size_t i = 0; i < n; i++)
            if (g->tok[i] > maxid) maxid = g->tok[i];
        if (!all) break; /* the first training segment only */
    }
    if (all) t->vocab = (int)maxid + 1;
    else t->vocab = maxid < TOK_GPT2_VOCAB ? TOK_GPT2_VOCAB : 65536;
}

dt_status dt_tokbin_open(const char *path, double val_frac, int T, dt_tokbin *out) {
    DT_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    if (T < 1) return dt_errorf(DT_ERR_INVALID, "%s: context length T=%d must be >= 1", path, T);
    if (!(val_frac >= 0.0 && val_frac < 1.0))
        return dt_errorf(DT_ERR_INVALID, "%s: validation fraction %g must be in [0, 1)", path, val_frac);
    dt_status st = DT_OK;
    size_t *ntok = NULL;
    if (data_is_dir(path)) {
        if ((st = tok_list_dir(path, out))) goto done;
    } else {
        out->files = dt_calloc(1, sizeof *out->files);
        if (!out->files || !(out->files[0] = dt_strdup(path))) {
            st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        out->nfiles = 1;
    }
    out->maps = dt_calloc((size_t)out->nfiles, sizeof *out->maps);
    out->map_lens = dt_calloc((size_t)out->nfiles, sizeof *out->map_lens);
    ntok = dt_calloc((size_t)out->nfiles, sizeof *ntok);
    if (!out->maps || !out->map_lens || !ntok) {
        st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < out->nfiles && !st; i++) st = tok_map(out, i, &ntok[i]);
    if (!st) st = tok_streams(out, ntok, val_frac);
    if (st) goto done;
    size_t need = (size_t)T + 1;
    if (out->n_train < need || ((out->n_val > 0 || val_frac > 0) && out->n_val < need)) {
        st = dt_errorf(DT_ERR_INVALID, "%s: too few tokens: %zu for training and %zu for validation, each needs at least "
                       "T+1 = %zu; use more data, a smaller context or another validation fraction",
                       path, out->n_train, out->n_val, need);
        goto done;
    }
    tok_vocab(out);
done:
    dt_free(ntok);
    if (st) dt_tokbin_close(out);
    return st;
}

void dt_tokbin_close(dt_tokbin *t) {
    if (!t) return;
    for (int i = 0; i < t->nfiles; i++) {
        data_fmap m = {t->maps ? t->maps[i] : NULL, t->map_lens ? t->map_lens[i] : 0};
        data_fmap_close(&m);
        dt_free(t->files[i]);
    }
    dt_free(t->files);
    dt_free(t->maps);
    dt_free(t->map_lens);
    dt_free(t->train);
    dt_free(t->val);
    memset(t, 0, sizeof *t);
}

int64_t dt_tokbin_train_windows(const dt_tokbin *t, int T) {
    DT_ASSERT(t && T >= 1);
    if (t->n_train < (size_t)T + 1) return 0;
    return (int64_t)((t->n_train - 1) / (size_t)T);
}

int64_t dt_tokbin_val_windows(const dt_tokbin *t, int T) {
    DT_ASSERT(t && T >= 1);
    if (t->n_val < (size_t)T + 1) return 0;
    return (int64_t)((t->n_val - 1) / (size_t)T);
}

/* Tokens [at, at + n) of a stream into out, ids >= vocab replaced by 0;
 * returns how many were. */
static int64_t tok_copy(const dt_tokbin_seg *seg, int nseg, size_t at, int n, int vocab, int32_t *out) {
    int lo = 0, hi = nseg - 1;
    while (lo < hi) { /* the last segment starting at or before `at` */
        int mid = (lo + hi + 1) / 2;
        if (seg[mid].start <= at) lo = mid;
        else hi = mid - 1;
    }
    int64_t bad = 0;
    int s = lo, k = 0;
    size_t off = at - seg[s].start;
    while (k < n) {
        DT_ASSERT(s < nseg);
        const uint16_t *p = seg[s].tok + off;
        size_t m = seg[s].n - off < (size_t)(n - k) ? seg[s].n - off : (size_t)(n - k);
        for (size_t i = 0; i < m; i++) {
            int v = p[i];
            bad += v >= vocab;
            out[k + (int)i] = v < vocab ? v : 0;
        }
        k += (int)m;
        s++;
        off = 0;
    }
    return bad;
}

int64_t dt_tokbin_gather(const dt_tokbin *t, const int64_t *idx, int B, int T, int shift, int32_t *tokens,
                         int32_t *targets) {
    DT_ASSERT(t && T >= 1 && shift >= 0 && shift < T);
    int64_t nw = dt_tokbin_train_windows(t, T), bad = 0;
    size_t last = t->n_train - (size_t)T - 1;
    for (int b = 0; b < B; b++) {
        DT_ASSERT(idx[b] >= 0 && idx[b] < nw);
        size_t start = (size_t)idx[b] * (size_t)T + (size_t)shift;
        if (start > last) start = last;
        size_t off = (size_t)b * (size_t)T;
        bad += tok_copy(t->train, t->ntrain, start, T, t->vocab, tokens + off);
        bad += tok_copy(t->train, t->ntrain, start + 1, T, t->vocab, targets + off);
    }
    return bad;
}

int64_t dt_tokbin_gather_val(const dt_tokbin *t, int64_t first, int B, int T, int32_t *tokens, int32_t *targets) {
    DT_ASSERT(t && T >= 1 && first >= 0 && B >= 0);
    DT_ASSERT(first + B <= dt_tokbin_val_windows(t, T));
    int64_t bad = 0;
    for (int b = 0; b < B; b++) {
        size_t start = (size_t)(first + b) * (size_t)T, off = (size_t)b * (size_t)T;
        bad += tok_copy(t->val, t->nval, start, T, t->vocab, tokens + off);
        bad += tok_copy(t->val, t->nval, start + 1, T, t->vocab, targets + off);
    }
    return bad;
}
