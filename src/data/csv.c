/* CSV reader for tabular data (the format contract is in data.h). The file is
 * read whole (tabular sets are small beside memory) and parsed in one pass:
 * the header names the columns, each later line is one sample. Quoting is
 * RFC 4180's ("a ""b""" is a"b); a quoted cell may not span lines. */
#include "data_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A cell or name for a message (a compound literal buffer per use). */
#define CS(s) data_clean((s), SIZE_MAX, (char[48]){0}, 48)
#define CSV_MAX_COLS 1000000
#define CSV_CELL_MAX 256

typedef struct csv_cur {
    const char *path;
    char *buf;
    size_t n, pos;
    int64_t line;       /* 1-based line of the current row */
    char **names;       /* (ncols) column names, for messages */
} csv_cur;

static dt_status csv_slurp(const char *path, csv_cur *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return dt_errorf(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dt_status st = DT_OK;
    size_t cap = 1 << 16;
    c->buf = dt_malloc(cap);
    for (;;) {
        if (!c->buf) {
            st = dt_errorf(DT_ERR_NOMEM, "%s: out of memory reading the file", path);
            break;
        }
        c->n += fread(c->buf + c->n, 1, cap - c->n - 1, f);
        if (c->n < cap - 1) break;
        char *p = cap > SIZE_MAX / 2 ? NULL : dt_realloc_array(c->buf, cap * 2, 1);
        if (!p) dt_free(c->buf);
        c->buf = p;
        cap *= 2;
    }
    if (!st && ferror(f)) st = dt_errorf(DT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    fclose(f);
    if (!st) c->buf[c->n] = '\0';
    return st;
}

/* The cell at c->pos into cell (unquoted, blanks trimmed). *end_row: the cell
 * ended its line (or the file). Returns false when a quote is not closed on
 * the line or the cell is too long. */
static bool csv_cell(csv_cur *c, char *cell, size_t cap, bool *end_row, bool *too_long) {
    size_t k = 0;
    *too_long = false;
    while (c->pos < c->n && (c->buf[c->pos] == ' ' || c->buf[c->pos] == '\t')) c->pos++;
    bool quoted = c->pos < c->n && c->buf[c->pos] == '"';
    if (quoted) {
        c->pos++;
        for (;;) {
            if (c->pos >= c->n || c->buf[c->pos] == '\n') return false;
            char ch = c->buf[c->pos++];
            if (ch == '"') {
                if (c->pos < c->n && c->buf[c->pos] == '"') c->pos++;
                else break;
            }
            if (k + 1 < cap) cell[k++] = ch;
            else *too_long = true;
        }
        while (c->pos < c->n && (c->buf[c->pos] == ' ' || c->buf[c->pos] == '\t' || c->buf[c->pos] == '\r')) c->pos++;
    } else {
        while (c->pos < c->n && c->buf[c->pos] != ',' && c->buf[c->pos] != '\n') {
            if (k + 1 < cap) cell[k++] = c->buf[c->pos];
            else *too_long = true;
            c->pos++;
        }
        while (k > 0 && (cell[k - 1] == ' ' || cell[k - 1] == '\t' || cell[k - 1] == '\r')) k--;
    }
    cell[k] = '\0';
    *end_row = c->pos >= c->n || c->buf[c->pos] == '\n';
    if (c->pos < c->n && c->buf[c->pos] == ',') c->pos++;
    else if (quoted && !*end_row) return false; /* text after a closing quote */
    return true;
}

/* Skips blank lines; false at the end of the file. */
static bool csv_next_row(csv_cur *c) {
    for (;;) {
        size_t p = c->pos;
        while (p < c->n && (c->buf[p] == ' ' || c->buf[p] == '\t' || c->buf[p] == '\r')) p++;
        if (p >= c->n) return false;
        if (c->buf[p] != '\n') return true;
        c->pos = p + 1;
        c->line++;
    }
}

/* Moves past the '\n' ending the row. */
static void csv_end_row(csv_cur *c) {
    if (c->pos < c->n && c->buf[c->pos] == '\n') c->pos++;
    c->line++;
}

/* The header: the number of columns and the target's index. */
static dt_status csv_header(csv_cur *c, const char *target, int *ncols, int *tcol) {
    char cell[CSV_CELL_MAX], list[512] = "";
    size_t used = 0;
    *ncols = 0;
    *tcol = -1;
    if (c->n >= 3 && !memcmp(c->buf, "\xEF\xBB\xBF", 3)) c->pos = 3; /* a UTF-8 byte-order mark */
    if (!csv_next_row(c)) return dt_errorf(DT_ERR_FORMAT, "%s: empty file; a CSV needs a header row of column names", c->path);
    for (bool end = false; !end;) {
        bool too_long;
        if (!csv_cell(c, cell, sizeof cell, &end, &too_long))
            return dt_errorf(DT_ERR_FORMAT, "%s:%lld: unterminated quote in the header", c->path, (long long)c->line);
        if (*ncols == CSV_MAX_COLS) return dt_errorf(DT_ERR_FORMAT, "%s: more than %d columns", c->path, CSV_MAX_COLS);
        char **nm = dt_realloc_array(c->names, (size_t)*ncols + 1, sizeof *nm);
        if (!nm) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory reading the header", c->path);
        c->names = nm;
        if (!(nm[*ncols] = dt_strdup(cell))) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory reading the header", c->path);
        int k = (*ncols)++;
        if (target && !strcmp(cell, target)) {
            if (*tcol >= 0) return dt_errorf(DT_ERR_FORMAT, "%s: two columns are named '%s'; rename one", c->path, target);
            *tcol = k;
        }
        if (used < sizeof list - 8) {
            int w = snprintf(list + used, sizeof list - used, "%s'%s'", k ? ", " : "", CS(cell));
            used = w < 0 ? used : used + (size_t)w;
            if (used >= sizeof list - 8) {
                used = sizeof list - 8;
                snprintf(list + used, 8, ", ...");
            }
        }
    }
    csv_end_row(c);
    if (!c->names) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory reading the header", c->path);
    if (!target)
        return dt_errorf(DT_ERR_INVALID, "%s: a CSV needs --target COLUMN naming the column to predict (columns: %s)", c->path, list);
    if (*tcol < 0)
        return dt_errorf(DT_ERR_INVALID, "%s: no column named '%s' for --target (columns: %s)", c->path, target, list);
    if (*ncols < 2) return dt_errorf(DT_ERR_FORMAT, "%s: only the target column; a CSV needs at least one input column", c->path);
    return DT_OK;
}

/* Grows x (rows of ncols-1 floats) and y to hold `need` rows. */
static dt_status csv_grow(dt_csv *o, int64_t *cap, int64_t need, const char *path) {
    if (need <= *cap) return DT_OK;
    int64_t ncap = *cap ? *cap * 2 : 1024;
    float *x = dt_realloc_array(o->x, (size_t)ncap * (size_t)o->cols, sizeof(float));
    if (!x) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory at row %lld", path, (long long)need);
    o->x = x;
    float *y = dt_realloc_array(o->y, (size_t)ncap, sizeof(float));
    if (!y) return dt_errorf(DT_ERR_NOMEM, "%s: out of memory at row %lld", path, (long long)need);
    o->y = y;
    *cap = ncap;
    return DT_OK;
}

static dt_status csv_rows(csv_cur *c, int ncols, int tcol, dt_csv *o) {
    char cell[CSV_CELL_MAX];
    int64_t cap = 0;
    while (csv_next_row(c)) {
        dt_status st = csv_grow(o, &cap, o->rows + 1, c->path);
        if (st) return st;
        float *xr = o->x + (size_t)o->rows * (size_t)o->cols;
        int k = 0;
        for (bool end = false; !end; k++) {
            bool too_long;
            if (!csv_cell(c, cell, sizeof cell, &end, &too_long))
                return dt_errorf(DT_ERR_FORMAT, "%s:%lld: column %d: unterminated quote", c->path, (long long)c->line, k + 1);
            if (k >= ncols) continue; /* counted below */
            if (!cell[0])
                return dt_errorf(DT_ERR_FORMAT, "%s:%lld: column %d ('%s'): missing value; fill or drop the rows with missing values",
                                 c->path, (long long)c->line, k + 1, CS(c->names[k]));
            char *e;
            errno = 0;
            double v = too_long ? 0 : strtod(cell, &e);
            if (too_long || e == cell || *e)
                return dt_errorf(DT_ERR_FORMAT, "%s:%lld: column %d ('%s'): '%s' is not a number; encode text columns as numbers first",
                                 c->path, (long long)c->line, k + 1, CS(c->names[k]), CS(cell));
            if (!isfinite(v) || fabs(v) > 3.4e38)
                return dt_errorf(DT_ERR_FORMAT, "%s:%lld: column %d ('%s'): '%s' is %s; fill or drop the rows with missing values",
                                 c->path, (long long)c->line, k + 1, CS(c->names[k]), CS(cell), isnan(v) ? "a missing value (NaN)" : "not a finite float");
            if (k == tcol) o->y[o->rows] = (float)v;
            else *xr++ = (float)v;
        }
        if (k != ncols)
            return dt_errorf(DT_ERR_FORMAT, "%s:%lld: %d cells but the header has %d columns", c->path, (long long)c->line, k, ncols);
        csv_end_row(c);
        o->rows++;
    }
    if (o->rows == 0) return dt_errorf(DT_ERR_FORMAT, "%s: no data rows after the header", c->path);
    return DT_OK;
}

dt_status dt_csv_read(const char *path, const char *target, dt_csv *out) {
    DT_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    csv_cur c = {.path = path, .line = 1};
    int ncols = 0, tcol = -1;
    dt_status st = csv_slurp(path, &c);
    if (!st) st = csv_header(&c, target, &ncols, &tcol);
    if (!st) {
        out->cols = ncols - 1;
        st = csv_rows(&c, ncols, tcol, out);
    }
    dt_free(c.buf);
    for (int i = 0; c.names && i < ncols; i++) dt_free(c.names[i]);
    dt_free(c.names);
    if (st) dt_csv_free(out);
    return st;
}

void dt_csv_free(dt_csv *c) {
    if (!c) return;
    dt_free(c->x);
    dt_free(c->y);
    memset(c, 0, sizeof *c);
}
