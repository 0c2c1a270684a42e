/* dtrain report RUN_DIR... [--out report.html] [--watch SECONDS]: one
 * self-contained HTML page comparing runs (docs/REPORT.md). Each run's
 * metrics.jsonl becomes columns of numbers (downsampled to at most
 * REPORT_MAX_POINTS logged steps, said on the chart), its evaluations, events,
 * resumes and end lines, beside its config.json and command line; the page's
 * script (tools/report/report.js, embedded at build time) draws them as SVG.
 * Nothing in the page reaches the network: its Content-Security-Policy allows
 * no fetch, and it names no URL. --watch rewrites the page every SECONDS
 * (which then reloads itself) until every run has ended. */
#include "cli.h"

#include <jansson.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern const unsigned char dt_report_js[], dt_report_css[];
extern const size_t dt_report_js_len, dt_report_css_len;

#define REPORT_MAX_POINTS 2000
#define REPORT_MAX_RUNS 64

/* The columns of a step row, in the order report.js reads them (D.keys). */
static const char *const KEYS[] = {"step", "time_s", "loss", "lr", "items_per_s", "compute_s", "comm_exposed_s",
                                   "bytes_sent", "compress_ratio", "loss_scale", "workers", "ef_norm",
                                   "clock_min", "clock_max"};
enum { NKEYS = sizeof KEYS / sizeof KEYS[0] };

typedef struct run_data {
    json_t *rows, *evals, *events, *end, *notes;
    int64_t logged;
    bool ended;
} run_data;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dtrain report: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* One step line as a row; time_s made monotonic across resumes (a resumed
 * process's clock starts again: *offset carries the time before it). */
static json_t *step_row(json_t *o, double *offset, double *last_t, run_data *d) {
    json_t *row = json_array();
    json_t *t = json_object_get(o, "time_s");
    if (json_is_number(t)) {
        double v = json_number_value(t);
        if (v + *offset < *last_t - 1e-9) { /* the clock went back: a resumed process */
            json_array_append_new(d->events, json_pack("{s:s, s:O, s:f, s:s}", "event", "resume", "step",
                                                       json_object_get(o, "step"), "time_s", *last_t,
                                                       "why", "a resumed run continues here"));
            *offset = *last_t;
        }
        *last_t = v + *offset;
    }
    for (int k = 0; k < NKEYS; k++) {
        json_t *v = json_object_get(o, KEYS[k]);
        if (k == 1 && json_is_number(v)) json_array_append_new(row, json_real(json_number_value(v) + *offset));
        else json_array_append_new(row, json_is_number(v) ? json_real(json_number_value(v)) : json_null());
    }
    return row;
}

/* The time of the step line at or before step (events carry only steps). */
static double time_at(json_t *rows, json_int_t step) {
    double t = NAN;
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        if (json_number_value(json_array_get(r, 0)) > (double)step) break;
        if (json_is_number(json_array_get(r, 1))) t = json_number_value(json_array_get(r, 1));
    }
    return t;
}

static void add_line(run_data *d, json_t *o, double *offset, double *last_t) {
    if (json_object_get(o, "event")) {
        json_array_append(d->events, o);
        const char *ev = json_string_value(json_object_get(o, "event"));
        if (ev && strcmp(ev, "stop") == 0) d->ended = true;
    } else if (json_object_get(o, "test_acc") || json_object_get(o, "test_loss") || json_object_get(o, "val_loss")) {
        json_t *acc = json_object_get(o, "test_acc"), *l = json_object_get(o, "test_loss");
        if (!l) l = json_object_get(o, "val_loss");
        json_t *t = json_object_get(o, "time_s");
        json_array_append_new(d->evals, json_pack("{s:O, s:O, s:O, s:o}", "step", json_object_get(o, "step"), "acc",
                                                  acc ? acc : json_null(), "loss", l ? l : json_null(), "time_s",
                                                  json_is_number(t) ? json_real(json_number_value(t) + *offset) : json_null()));
    } else if (json_object_get(o, "memory") || json_object_get(o, "pipeline") || json_object_get(o, "staleness") ||
               json_object_get(o, "stopped")) {
        const char *kind = json_object_get(o, "memory") ? "memory" : json_object_get(o, "pipeline") ? "pipeline"
                           : json_object_get(o, "staleness") ? "staleness" : "stopped";
        json_object_set(d->end, kind, o);
        d->ended = true;
    } else if (json_is_integer(json_object_get(o, "step"))) {
        json_array_append_new(d->rows, step_row(o, offset, last_t, d));
        d->logged++;
        d->ended = false; /* steps after a stop: the run was resumed and goes on */
    }
}

/* dir/metrics.jsonl into d. A last line cut short (a run killed mid-write) is
 * skipped with a note; a bad line before it is an error. */
static int read_metrics(const char *dir, run_data *d) {
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) return fail("%s: %s (is this a run's --out folder?)", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int no = 0, bad_at = 0;
    double offset = 0, last_t = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        no++;
        bool whole = len > 0 && line[len - 1] == '\n';
        json_t *o = json_loads(line, JSON_DECODE_ANY, NULL);
        if (!json_is_object(o)) {
            json_decref(o);
            if (whole && getline(&line, &cap, f) >= 0) { /* more after it: not a line cut short */
                bad_at = no;
                break;
            }
            char note[96];
            snprintf(note, sizeof note, "its last line (%d) is cut short and was skipped: the run was stopped mid-line", no);
            json_array_append_new(d->notes, json_string(note));
            break;
        }
        add_line(d, o, &offset, &last_t);
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (bad_at) return fail("%s: line %d is not a JSON object (not a dtrain metrics file?)", path, bad_at);
    json_t *r;
    size_t i;
    json_array_foreach(d->events, i, r) {
        if (json_object_get(r, "time_s")) continue;
        double t = time_at(d->rows, json_integer_value(json_object_get(r, "step")));
        json_object_set_new(r, "time_s", isnan(t) ? json_null() : json_real(t));
    }
    return 0;
}

/* At most REPORT_MAX_POINTS rows: every k-th and the last. */
static int64_t downsample(run_data *d) {
    size_t n = json_array_size(d->rows);
    if (n <= REPORT_MAX_POINTS) return 1;
    int64_t k = (int64_t)((n + REPORT_MAX_POINTS - 1) / REPORT_MAX_POINTS);
    json_t *keep = json_array();
    for (size_t i = 0; i < n; i++)
        if (i % (size_t)k == 0 || i + 1 == n) json_array_append(keep, json_array_get(d->rows, i));
    json_decref(d->rows);
    d->rows = keep;
    return k;
}

static json_t *read_json_file(const char *path) {
    json_t *j = json_load_file(path, 0, NULL);
    return json_is_object(j) ? j : (json_decref(j), NULL);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return strdup(buf);
}

/* One run's object for the page; *ended: it logged its end. */
static int run_json(const char *dir, json_t **out, bool *ended) {
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return fail("%s: no such run folder", dir);
    run_data d = {json_array(), json_array(), json_array(), json_object(), json_array(), 0, false};
    int rc = read_metrics(dir, &d);
    if (!rc && d.logged == 0 && json_array_size(d.evals) == 0)
        json_array_append_new(d.notes, json_string("metrics.jsonl has no step yet (an empty or just-started run)"));
    int64_t every = rc ? 1 : downsample(&d);
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/config.json", dir);
    json_t *cfg = read_json_file(path);
    snprintf(path, sizeof path, "%.4000s/command", dir);
    char *cmd = read_text(path);
    const char *base = strrchr(dir, '/') && strrchr(dir, '/')[1] ? strrchr(dir, '/') + 1 : dir;
    *out = json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:o}", "name", base, "steps", d.rows, "evals",
                     d.evals, "events", d.events, "end", d.end, "notes", d.notes, "logged", (json_int_t)d.logged,
                     "every", (json_int_t)every, "config", cfg ? cfg : json_object(), "command",
                     cmd ? json_string(cmd) : json_null());
    free(cmd);
    *ended = d.ended;
    return rc;
}

/* The page: the style, the data (with "</" escaped so no string can end the
 * script element), the drawing script. */
static int write_page(const char *out, json_t *data, int refresh) {
    char *text = json_dumps(data, JSON_COMPACT | JSON_REAL_PRECISION(7) | JSON_ESCAPE_SLASH);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%.4000s.tmp", out);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    if (!f) {
        free(text);
        return fail("cannot write %s: %s", out, text ? strerror(errno) : "out of memory");
    }
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
               "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; "
               "style-src 'unsafe-inline'; img-src data:\">\n");
    if (refresh > 0) fprintf(f, "<meta http-equiv=\"refresh\" content=\"%d\">\n", refresh);
    fprintf(f, "<title>dtrain report</title>\n<style>\n");
    fwrite(dt_report_css, 1, dt_report_css_len, f);
    fprintf(f, "</style></head>\n<body>\n<h1>dtrain report</h1>\n<p class=\"note\">%s</p>\n<ul id=\"notes\"></ul>\n"
               "<div id=\"charts\"></div>\n<script id=\"dt-data\" type=\"application/json\">",
            refresh > 0 ? "live: this page reloads itself while the runs go on" : "");
    fputs(text, f);
    fprintf(f, "</script>\n<script>\n");
    fwrite(dt_report_js, 1, dt_report_js_len, f);
    fprintf(f, "</script>\n</body></html>\n");
    free(text);
    if (fclose(f) != 0 || rename(tmp, out) != 0) return fail("cannot write %s: %s", out, strerror(errno));
    return 0;
}

/* Every run read again into one page; *all_ended: nothing left to watch. */
static int build(char **dirs, int n, const char *out, int refresh, bool *all_ended) {
    json_t *runs = json_array(), *keys = json_array();
    for (int k = 0; k < NKEYS; k++) json_array_append_new(keys, json_string(KEYS[k]));
    *all_ended = true;
    int rc = 0, steps = 0;
    for (int i = 0; i < n && !rc; i++) {
        json_t *r = NULL;
        bool ended = false;
        rc = run_json(dirs[i], &r, &ended);
        if (r) {
            steps += (int)json_array_size(json_object_get(r, "steps")) + (int)json_array_size(json_object_get(r, "evals"));
            json_array_append_new(runs, r);
        }
        *all_ended &= ended;
    }
    json_t *data = json_pack("{s:o, s:o}", "keys", keys, "runs", runs);
    if (!rc && steps == 0 && refresh <= 0) {
        json_decref(data);
        return fail("%s: nothing to draw: no run has logged a step or an evaluation yet (an empty run; wait for its "
                    "first --log-every steps, or watch it with --watch SECONDS)", n == 1 ? dirs[0] : "the runs");
    }
    if (!rc) rc = write_page(out, data, *all_ended ? 0 : refresh);
    json_decref(data);
    return rc;
}

static const char *usage =
    "usage: dtrain report RUN_DIR... [--out report.html] [--watch SECONDS]\n"
    "One self-contained HTML page (no network) comparing runs: loss and evaluation against step and\n"
    "time, throughput, the step's compute / exposed communication / bubble, bytes per step, memory per\n"
    "rank against the ZeRO formulas, the parameter server's staleness and workers, compression, the\n"
    "fp16 loss scale, events, and config.json and the command line side by side. --watch rewrites the\n"
    "page every SECONDS (it reloads itself) until every run has ended.\n";

int dt_cli_report(int argc, char **argv) {
    char *dirs[REPORT_MAX_RUNS];
    int n = 0, watch = 0;
    const char *out = "report.html";
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if ((strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "--live") == 0) && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 3600)
                return fail("--watch expects whole seconds in [1, 3600], got '%s'", argv[i]);
            watch = (int)v;
        } else if (argv[i][0] == '-') {
            return fail("unknown flag '%s' (see 'dtrain report --help')", argv[i]);
        } else if (n == REPORT_MAX_RUNS) {
            return fail("at most %d runs in one report", REPORT_MAX_RUNS);
        } else {
            dirs[n++] = argv[i];
        }
    }
    if (n == 0) {
        fputs(usage, stderr);
        return 2;
    }
    bool ended = false;
    for (;;) {
        int rc = build(dirs, n, out, watch, &ended);
        if (rc || !watch || ended) {
            if (!rc) printf("wrote %s (%d run%s)\n", out, n, n == 1 ? "" : "s");
            return rc;
        }
        sleep((unsigned)watch);
    }
}
