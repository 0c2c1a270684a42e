/* The flag engine: reads flags into a struct through a table of dt_flag
 * entries (command line `--x v` / `--x=v`, JSON files of the same flags) and
 * writes them back. The train table and the defaults are in config.c. */
#include "dtrain/config.h"

#include "flags.h"

#include <jansson.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fl_format_real(double v, bool as_float, char *buf, size_t n) {
    /* At least the integer digits, so 60 is "60", not "6e+01". */
    int p = 1;
    for (double a = fabs(v); a >= 10 && p < 17; a /= 10) p++;
    for (; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        double r = strtod(buf, NULL);
        if (as_float ? (float)r == (float)v : r == v) return;
    }
}

static void *field(void *base, const dt_flag *f) { return (char *)base + f->off; }
static const void *cfield(const void *base, const dt_flag *f) { return (const char *)base + f->off; }

/* Whether arg (len chars of it) spells f: "--name" or its alias. */
static bool spells(const dt_flag *f, const char *arg, size_t len) {
    if (f->alias && strlen(f->alias) == len && strncmp(arg, f->alias, len) == 0) return true;
    return len > 2 && strncmp(arg, "--", 2) == 0 && strlen(f->name) == len - 2 && strncmp(arg + 2, f->name, len - 2) == 0;
}

static const dt_flag *lookup(const dt_flag_table *tabs, int ntabs, unsigned cmd, const char *arg, size_t len, int *tab) {
    for (int t = 0; t < ntabs; t++)
        for (int i = 0; i < tabs[t].n; i++) {
            const dt_flag *f = &tabs[t].flags[i];
            if ((f->attr & cmd) && spells(f, arg, len)) {
                if (tab) *tab = t;
                return f;
            }
        }
    return NULL;
}

const dt_flag *dt_flag_find(const dt_flag_table *tabs, int ntabs, const char *name, int *tab) {
    char spelled[128];
    snprintf(spelled, sizeof spelled, "%s%s", name[0] == '-' ? "" : "--", name);
    return lookup(tabs, ntabs, ~0u, spelled, strlen(spelled), tab);
}

static dt_status set_integer(const dt_flag *f, void *p, const char *flag, const char *s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return dt_errorf(DT_ERR_INVALID, "%s expects an integer, got '%s'", flag, s);
    if (v < f->ilo || v > f->ihi)
        return dt_errorf(DT_ERR_INVALID, "%s %lld is out of range [%lld, %lld]", flag, v, (long long)f->ilo, (long long)f->ihi);
    if (f->type == DT_FLAG_INT) *(int *)p = (int)v;
    else if (f->type == DT_FLAG_I64) *(int64_t *)p = v;
    else *(uint64_t *)p = (uint64_t)v;
    return DT_OK;
}

static dt_status set_real(const dt_flag *f, void *p, const char *flag, const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return dt_errorf(DT_ERR_INVALID, "%s expects a number, got '%s'", flag, s);
    if (v < f->lo || v > f->hi) return dt_errorf(DT_ERR_INVALID, "%s %g is out of range [%g, %g]", flag, v, f->lo, f->hi);
    if (f->type == DT_FLAG_FLOAT) *(float *)p = (float)v;
    else *(double *)p = v;
    return DT_OK;
}

static dt_status set_switch(const dt_flag *f, void *p, const char *flag, const char *s) {
    bool on;
    if (!s || strcmp(s, "true") == 0 || strcmp(s, "on") == 0 || strcmp(s, "1") == 0) on = true;
    else if (strcmp(s, "false") == 0 || strcmp(s, "off") == 0 || strcmp(s, "0") == 0) on = false;
    else return dt_errorf(DT_ERR_INVALID, "%s takes no value, or true or false, got '%s'", flag, s);
    *(bool *)p = on != f->negate;
    return DT_OK;
}

dt_status dt_flag_set(const dt_flag *f, void *base, const char *flag, const char *value) {
    void *p = field(base, f);
    if (!value && f->type != DT_FLAG_SWITCH) return dt_errorf(DT_ERR_INVALID, "%s needs a value", flag);
    switch (f->type) {
    case DT_FLAG_INT:
    case DT_FLAG_I64:
    case DT_FLAG_U64: return set_integer(f, p, flag, value);
    case DT_FLAG_FLOAT:
    case DT_FLAG_DOUBLE: return set_real(f, p, flag, value);
    case DT_FLAG_SWITCH: return set_switch(f, p, flag, value);
    case DT_FLAG_STRING: *(const char **)p = value; return DT_OK;
    case DT_FLAG_CHOICE: return f->parse(base, flag, value);
    default: DT_ASSERT(!"flag type");
    }
    return DT_ERR_INVALID;
}

void dt_flag_format(const dt_flag *f, const void *base, char *buf, size_t n) {
    const void *p = cfield(base, f);
    switch (f->type) {
    case DT_FLAG_INT: snprintf(buf, n, "%d", *(const int *)p); break;
    case DT_FLAG_I64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)p); break;
    case DT_FLAG_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case DT_FLAG_FLOAT: fl_format_real(*(const float *)p, true, buf, n); break;
    case DT_FLAG_DOUBLE: fl_format_real(*(const double *)p, false, buf, n); break;
    case DT_FLAG_SWITCH: snprintf(buf, n, "%s", *(const bool *)p != f->negate ? "true" : "false"); break;
    case DT_FLAG_STRING: snprintf(buf, n, "%s", *(const char *const *)p ? *(const char *const *)p : ""); break;
    case DT_FLAG_CHOICE: f->format(base, buf, n); break;
    default: DT_ASSERT(!"flag type");
    }
}

/* Re-raises the pending error with "--config FILE: " in front. */
static dt_status in_file(dt_status st, const char *file) {
    if (!st || !file) return st;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dt_error_msg());
    return dt_errorf(st, "--config %s: %s", file, msg);
}

/* One flag at argv[*i] (and its value, which may be argv[*i + 1]). */
static dt_status apply_one(const dt_flag_table *tabs, int ntabs, unsigned cmd, int argc, char **argv, int *i,
                           const char *file) {
    const char *a = argv[*i];
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    int t = 0;
    const dt_flag *f = a[0] == '-' ? lookup(tabs, ntabs, cmd, a, len, &t) : NULL;
    if (!f && file) return dt_errorf(DT_ERR_INVALID, "--config %s: unknown key '%.*s'", file, (int)(len > 2 ? len - 2 : len), len > 2 ? a + 2 : a);
    if (!f) return dt_errorf(DT_ERR_INVALID, "unknown flag '%.*s'", (int)len, a);
    char flag[128];
    snprintf(flag, sizeof flag, "%.*s", (int)len, a);
    const char *v = eq ? eq + 1 : NULL;
    if (!eq && f->type != DT_FLAG_SWITCH) {
        if (*i + 1 >= argc) return in_file(dt_errorf(DT_ERR_INVALID, "%s needs a value", flag), file);
        v = argv[++*i];
    }
    return in_file(dt_flag_set(f, tabs[t].base, flag, v), file);
}

dt_status dt_flags_apply(const dt_flag_table *tabs, int ntabs, unsigned cmd, int argc, char **argv, const char *file) {
    for (int i = 0; i < argc; i++) {
        if (!file && strcmp(argv[i], "--config") == 0) {
            if (++i == argc) return dt_errorf(DT_ERR_INVALID, "--config needs a value");
            continue;
        }
        if (!file && strncmp(argv[i], "--config=", 9) == 0) continue;
        dt_status st = apply_one(tabs, ntabs, cmd, argc, argv, &i, file);
        if (st) return st;
    }
    return DT_OK;
}

/* ---- --config FILE ------------------------------------------------------ */

/* "--key=value" of one JSON scalar (malloc'd), or NULL for another kind. */
static char *json_arg(const char *key, const json_t *v) {
    char num[64];
    const char *s = NULL;
    if (json_is_string(v)) s = json_string_value(v);
    else if (json_is_integer(v)) snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v)), s = num;
    else if (json_is_real(v)) fl_format_real(json_real_value(v), false, num, sizeof num), s = num;
    else if (json_is_boolean(v)) s = json_is_true(v) ? "true" : "false";
    if (!s) return NULL;
    size_t n = strlen(key) + strlen(s) + 4;
    char *a = malloc(n);
    if (a) snprintf(a, n, "--%s=%s", key, s);
    return a;
}

static dt_status push_arg(dt_config_src *out, const char *key, const json_t *v) {
    char *a = json_arg(key, v);
    if (!a && (json_is_string(v) || json_is_number(v) || json_is_boolean(v)))
        return dt_errorf(DT_ERR_NOMEM, "--config %s: out of memory", out->path);
    if (!a)
        return dt_errorf(DT_ERR_INVALID, "--config %s: key '%s' expects a number, a string or a boolean (an array: a flag given more than once)",
                         out->path, key);
    out->argv[out->argc++] = a;
    return DT_OK;
}

static dt_status config_args(const json_t *root, dt_config_src *out) {
    size_t cap = 0;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v) cap += json_is_array(v) ? json_array_size(v) : 1;
    out->argv = calloc(cap + 1, sizeof *out->argv);
    if (!out->argv) return dt_errorf(DT_ERR_NOMEM, "--config %s: out of memory", out->path);
    json_object_foreach((json_t *)root, key, v) {
        dt_status st = DT_OK;
        size_t i;
        const json_t *e;
        if (!json_is_array(v)) st = push_arg(out, key, v);
        else json_array_foreach(v, i, e) if (!st) st = push_arg(out, key, e);
        if (st) return st;
    }
    return DT_OK;
}

dt_status dt_config_read(const char *path, dt_config_src *out) {
    memset(out, 0, sizeof *out);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    dt_status st = DT_OK;
    out->path = strdup(path);
    if (!out->path) st = dt_errorf(DT_ERR_NOMEM, "--config %s: out of memory", path);
    else if (!root && access(path, R_OK) != 0) st = dt_errorf(DT_ERR_INVALID, "--config %s: %s", path, strerror(errno));
    else if (!root) st = dt_errorf(DT_ERR_INVALID, "--config %s:%d: %s", path, err.line, err.text);
    else if (!json_is_object(root)) st = dt_errorf(DT_ERR_INVALID, "--config %s: expects a JSON object of flags ({\"lr\": 0.1, ...})", path);
    else st = config_args(root, out);
    json_decref(root);
    if (st) dt_config_src_free(out);
    return st;
}

void dt_config_src_free(dt_config_src *s) {
    if (!s) return;
    for (int i = 0; i < s->argc; i++) free(s->argv[i]);
    free(s->argv);
    free(s->path);
    memset(s, 0, sizeof *s);
}

/* ---- the whole command line ------------------------------------------------ */

/* Where the last `name` flag of argv is: *at its index, *n 1 (--x=v) or 2 (--x v). */
static bool find_last(int argc, char **argv, const char *name, int *at, int *n) {
    size_t len = strlen(name);
    bool found = false;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0 || strncmp(argv[i] + 2, name, len) != 0) continue;
        char c = argv[i][2 + len];
        if (c == '=' || (c == '\0' && i + 1 < argc)) {
            *at = i;
            *n = c == '=' ? 1 : 2;
            found = true;
        }
    }
    return found;
}

/* Applies the last --name of the command line, else of the file; false when neither has one. */
static dt_status apply_decider(const dt_flag_table *tabs, int ntabs, unsigned cmd, const char *name, int argc,
                               char **argv, const dt_config_src *src, bool *given) {
    int at, n;
    *given = true;
    if (find_last(argc, argv, name, &at, &n)) return dt_flags_apply(tabs, ntabs, cmd, n, argv + at, NULL);
    if (find_last(src->argc, src->argv, name, &at, &n)) return dt_flags_apply(tabs, ntabs, cmd, n, src->argv + at, src->path);
    *given = false;
    return DT_OK;
}

static const char *config_path(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0) path = argv[i] + 9;
    }
    return path;
}

dt_status dt_train_cfg_parse(const dt_flag_table *tabs, int ntabs, unsigned cmd, dt_model_kind kind, int argc,
                             char **argv, dt_config_src *src, bool *model_given) {
    dt_train_cfg *cfg = tabs[0].base;
    const char *path = config_path(argc, argv);
    bool optim_given, inject_given;
    int at, n;
    memset(src, 0, sizeof *src);
    dt_status st = path ? dt_config_read(path, src) : DT_OK;
    /* The model kind and the optimizer decide the defaults the other flags refine. */
    dt_train_cfg_default(cfg, kind);
    if (!st) st = apply_decider(tabs, ntabs, cmd, "model", argc, argv, src, model_given);
    if (!st) {
        dt_model_cfg chosen = cfg->model;
        dt_train_cfg_default(cfg, chosen.kind);
        if (chosen.kind == DT_MODEL_FILE && chosen.file[0]) {
            /* A description's defaults follow what it reads: tokens or tensors. */
            dt_model *m = NULL;
            cfg->model = chosen;
            st = dt_model_probe(&cfg->model, &m);
            if (!st) dt_train_cfg_model_defaults(cfg, m->input == DT_INPUT_TOKENS);
            dt_model_destroy(m);
        }
    }
    if (!st && (cmd & DT_FLAG_TRAIN)) st = apply_decider(tabs, ntabs, cmd, "optim", argc, argv, src, &optim_given);
    /* A file describes the run: the library's flags only, not how to start it (-n, --threads). */
    if (!st) st = dt_flags_apply(tabs, 1, cmd, src->argc, src->argv, src->path);
    inject_given = find_last(argc, argv, "inject", &at, &n);
    if (!st && inject_given) cfg->n_inject = 0; /* the command line's replace the file's */
    if (!st) st = dt_flags_apply(tabs, ntabs, cmd, argc, argv, NULL);
    return st;
}

/* ---- writing the resolved configuration ------------------------------------ */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->failed || n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = 2 * (b->len + (size_t)n + 1);
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void sb_json_string(sbuf *b, const char *s) {
    json_t *j = json_string(s);
    char *q = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    if (q) sb_printf(b, "%s", q);
    else b->failed = true;
    free(q);
    json_decref(j);
}

/* One flag's value as JSON: numbers and booleans bare, the rest as strings;
 * a repeated flag as an array of its space-separated values. */
static void sb_value(sbuf *b, const dt_flag *f, const char *v) {
    if (f->type != DT_FLAG_STRING && f->type != DT_FLAG_CHOICE) {
        sb_printf(b, "%s", v);
    } else if (!(f->attr & DT_FLAG_MULTI)) {
        sb_json_string(b, v);
    } else {
        sb_printf(b, "[");
        for (const char *p = v; *p;) {
            size_t k = strcspn(p, " ");
            char item[512];
            snprintf(item, sizeof item, "%.*s", (int)k, p);
            if (p != v) sb_printf(b, ", ");
            sb_json_string(b, item);
            p += k + (p[k] == ' ');
        }
        sb_printf(b, "]");
    }
}

char *dt_config_dump_json(const dt_train_cfg *c) {
    int n;
    const dt_flag *t = dt_train_flags(&n);
    sbuf b = {0};
    sb_printf(&b, "{");
    for (int i = 0, k = 0; i < n; i++) {
        const dt_flag *f = &t[i];
        if ((f->attr & DT_FLAG_NOSAVE) || (f->type == DT_FLAG_STRING && !*(const char *const *)cfield(c, f))) continue;
        char v[2048];
        dt_flag_format(f, c, v, sizeof v);
        sb_printf(&b, "%s\n  \"%s\": ", k++ ? "," : "", f->name);
        sb_value(&b, f, v);
    }
    sb_printf(&b, "\n}\n");
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

dt_status dt_config_write_json(const dt_train_cfg *c, const char *path) {
    char tmp[4200];
    char *text = dt_config_dump_json(c);
    if (!text) return dt_errorf(DT_ERR_NOMEM, "cannot write %s: out of memory", path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    dt_status st = DT_OK;
    FILE *fp = fopen(tmp, "w");
    if (!fp) st = dt_errorf(DT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    else if ((fputs(text, fp) < 0) | (fclose(fp) != 0)) st = dt_errorf(DT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0) st = dt_errorf(DT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    free(text);
    return st;
}
