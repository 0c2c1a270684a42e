/* `dtrain train --help` and `dtrain eval --help`, printed from the flag
 * tables: every default is read from the defaults the library sets
 * (dt_train_cfg_default, dt_train_cfg_set_optim), per model or optimizer
 * where they differ: "[0.1; gpt 0.001; adamw 0.001]". */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HELP_COL 23   /* where the help text starts */
#define HELP_WIDTH 100 /* and where it wraps */

enum { N_VARIANTS = 4 };
static const char *variant_names[N_VARIANTS] = {"", "cnn", "gpt", "adamw"};

static void variants(dt_train_cfg v[N_VARIANTS]) {
    dt_train_cfg_default(&v[0], DT_MODEL_MLP);
    dt_train_cfg_default(&v[1], DT_MODEL_CNN);
    dt_train_cfg_default(&v[2], DT_MODEL_GPT);
    dt_train_cfg_default(&v[3], DT_MODEL_MLP);
    dt_train_cfg_set_optim(&v[3], DT_OPTIM_ADAMW);
}

/* Whether a default spelled `v` is a value the flag takes (0 for -n is "not
 * given", not a default worth showing). */
static bool shown(const dt_flag *f, const char *v) {
    if (f->type == DT_FLAG_SWITCH || (f->attr & DT_FLAG_MULTI) || !v[0]) return false;
    if (f->type == DT_FLAG_INT || f->type == DT_FLAG_I64 || f->type == DT_FLAG_U64) {
        long long x = strtoll(v, NULL, 10);
        return x >= f->ilo && x <= f->ihi;
    }
    if (f->type == DT_FLAG_FLOAT || f->type == DT_FLAG_DOUBLE) {
        double x = strtod(v, NULL);
        return x >= f->lo && x <= f->hi;
    }
    return true;
}

/* " [default; gpt its value; ...]" into buf, or "": the library's table reads
 * the variants v (one value per model kind / optimizer where they differ), the
 * program's its default struct `base`. */
static void default_text(const dt_flag *f, const void *base, const dt_train_cfg v[N_VARIANTS], char *buf, size_t n) {
    char first[256], other[256];
    buf[0] = '\0';
    if (f->default_text) {
        snprintf(buf, n, " [%s]", f->default_text);
        return;
    }
    dt_flag_format(f, v ? (const void *)&v[0] : base, first, sizeof first);
    if (!shown(f, first)) return;
    size_t k = (size_t)snprintf(buf, n, " [%s", first);
    for (int i = 1; v && i < N_VARIANTS && k < n; i++) {
        dt_flag_format(f, &v[i], other, sizeof other);
        /* not "[mlp; gpt gpt]" for --model itself */
        if (strcmp(other, first) != 0 && strcmp(other, variant_names[i]) != 0)
            k += (size_t)snprintf(buf + k, n - k, "; %s %s", variant_names[i], other);
    }
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* text from column HELP_COL, wrapped before HELP_WIDTH at spaces. */
static void print_wrapped(FILE *out, const char *text) {
    int col = HELP_COL;
    for (const char *p = text; *p;) {
        size_t word = strcspn(p, " ");
        if (col > HELP_COL && col + 1 + (int)word > HELP_WIDTH) {
            fprintf(out, "\n%*s", HELP_COL, "");
            col = HELP_COL;
        } else if (col > HELP_COL) {
            fputc(' ', out);
            col++;
        }
        fprintf(out, "%.*s", (int)word, p);
        col += (int)word;
        p += word;
        while (*p == ' ') p++;
    }
    fputc('\n', out);
}

static void print_flag(FILE *out, const dt_flag *f, const void *base, const dt_train_cfg v[N_VARIANTS]) {
    char left[256], text[1536], dflt[512];
    int w = f->alias ? snprintf(left, sizeof left, "  %s/--%s", f->alias, f->name)
                     : snprintf(left, sizeof left, "  --%s", f->name);
    if (f->arg) w += snprintf(left + w, sizeof left - (size_t)w, " %s", f->arg);
    fputs(left, out);
    if (w + 2 > HELP_COL) fprintf(out, "\n%*s", HELP_COL, "");
    else fprintf(out, "%*s", HELP_COL - w, "");
    default_text(f, base, v, dflt, sizeof dflt);
    snprintf(text, sizeof text, "%s%s", f->help, dflt);
    print_wrapped(out, text);
}

/* Whether `section` was printed by an earlier entry of the tables. */
static bool seen_before(const dt_flag_table *tabs, int t, int i, const char *section) {
    for (int a = 0; a <= t; a++)
        for (int b = 0; b < (a == t ? i : tabs[a].n); b++)
            if (strcmp(tabs[a].flags[b].section, section) == 0) return true;
    return false;
}

void dt_cli_print_help(FILE *out, const dt_flag_table *tabs, int ntabs, unsigned cmd) {
    dt_train_cfg v[N_VARIANTS];
    variants(v);
    for (int t = 0; t < ntabs; t++)
        for (int i = 0; i < tabs[t].n; i++) {
            const char *section = tabs[t].flags[i].section;
            if (seen_before(tabs, t, i, section)) continue;
            if (cmd == DT_FLAG_TRAIN) fprintf(out, "%s\n", section);
            /* every flag of this section, in table order */
            for (int a = 0; a < ntabs; a++)
                for (int b = 0; b < tabs[a].n; b++) {
                    const dt_flag *f = &tabs[a].flags[b];
                    if ((f->attr & cmd) && strcmp(f->section, section) == 0) print_flag(out, f, tabs[a].base, a == 0 ? v : NULL);
                }
        }
}
