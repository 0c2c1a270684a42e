/* dtrain flags as data: one table entry per flag (name, type, bounds, help,
 * the field it sets), in the style of redis' config table. The same engine
 * reads the command line (`--lr 0.1`, `--lr=0.1`), a JSON file of the same
 * flags (`--config FILE`, keys without the dashes) and writes the resolved
 * configuration back as such a file (OUT/config.json).
 *
 * Defaults live in one place, dt_train_cfg_default() (and, for the optimizer
 * switch, dt_train_cfg_set_optim()); the table holds no default values. The
 * library never prints: parse errors are one line in dt_error_msg(). */
#ifndef DTRAIN_CONFIG_H
#define DTRAIN_CONFIG_H

#include "dtrain/train.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DT_FLAG_INT,      /* int, bounds ilo..ihi */
    DT_FLAG_I64,      /* int64_t, bounds ilo..ihi */
    DT_FLAG_U64,      /* uint64_t read as a non-negative int64, bounds ilo..ihi */
    DT_FLAG_FLOAT,    /* float, bounds lo..hi */
    DT_FLAG_DOUBLE,   /* double, bounds lo..hi */
    DT_FLAG_SWITCH,   /* bool, no value (`--x`, or `--x=true|false`); stores !negate */
    DT_FLAG_STRING,   /* const char *, points into the argument (not copied) */
    DT_FLAG_CHOICE,   /* parse/format functions (enums and specs like topk:0.01) */
    DT_FLAG_TYPE_COUNT
} dt_flag_type;

/* attr bits */
#define DT_FLAG_TRAIN  1u  /* `dtrain train` takes it */
#define DT_FLAG_EVAL   2u  /* `dtrain eval` takes it */
#define DT_FLAG_NOSAVE 4u  /* not written to config.json (where to write, per attempt) */
#define DT_FLAG_MULTI  8u  /* may repeat (a JSON array in a file) */

typedef struct dt_flag {
    const char *name;         /* "lr": spelled --lr, a JSON key "lr" */
    const char *alias;        /* another spelling with its dashes ("-n"), or NULL */
    dt_flag_type type;
    size_t off;               /* offsetof the target field in the table's base struct */
    int64_t ilo, ihi;         /* integer bounds */
    double lo, hi;            /* float bounds */
    bool negate;              /* switch: stores false (--no-overlap) */
    unsigned attr;            /* DT_FLAG_TRAIN | ... */
    /* choice: parse s into the base struct (messages name `flag` as spelled);
     * format writes the value back in the spelling parse reads. */
    dt_status (*parse)(void *base, const char *flag, const char *s);
    void (*format)(const void *base, char *buf, size_t n);
    const char *section;      /* help: the heading it is listed under */
    const char *arg;          /* help: the value's name ("LR"), NULL for switches */
    const char *help;         /* help: one line or more ("\n" continues it) */
    const char *default_text; /* help: shown instead of the default's value, or NULL */
} dt_flag;

/* A table and the struct its offsets point into. */
typedef struct dt_flag_table {
    const dt_flag *flags;
    int n;
    void *base;
} dt_flag_table;

/* The library's flags; their base is a dt_train_cfg. */
const dt_flag *dt_train_flags(int *n);

/* The entry named `name` (without dashes, or its alias as spelled), or NULL;
 * *tab (may be NULL) receives the index of the table that holds it. */
const dt_flag *dt_flag_find(const dt_flag_table *tabs, int ntabs, const char *name, int *tab);
/* Parses `value` (NULL for a switch given bare) into base. `flag` is the
 * spelling messages name ("--lr"). Errors: DT_ERR_INVALID, e.g.
 * "--lr expects a number, got 'x'", "--lr -1 is out of range [1e-12, 100]". */
dt_status dt_flag_set(const dt_flag *f, void *base, const char *flag, const char *value);
/* The value in base in the spelling dt_flag_set reads ("0.1", "true", "topk:0.01");
 * "" for an unset string. Numbers are the shortest that read back bitwise. */
void dt_flag_format(const dt_flag *f, const void *base, char *buf, size_t n);

/* Applies argv (flags only) to the tables, in order: `--x v`, `--x=v`, bare
 * switches. `cmd` (DT_FLAG_TRAIN or DT_FLAG_EVAL) selects the flags taken.
 * `--config FILE` is skipped (dt_train_cfg_parse reads it). file: when the
 * args came from that config file, errors name it ("--config F: unknown key 'k'"). */
dt_status dt_flags_apply(const dt_flag_table *tabs, int ntabs, unsigned cmd, int argc, char **argv,
                         const char *file);

/* A --config file as `--key=value` arguments. Owns every string; cfg fields
 * set from it point into it, so it outlives the run. */
typedef struct dt_config_src {
    char *path;
    int argc;
    char **argv;
} dt_config_src;

/* Reads a JSON object of flags: numbers, booleans and strings become
 * `--key=value`, an array repeats the key. Errors name the file. */
dt_status dt_config_read(const char *path, dt_config_src *out);
void dt_config_src_free(dt_config_src *s); /* NULL and a zeroed src ok */

/* The whole command line of `cmd` into tabs[0].base (a dt_train_cfg) and the
 * other tables: the defaults of the model kind and optimizer named on the
 * command line, else in --config FILE, else `kind`; then the file's flags (of
 * tabs[0] only: a file describes the run, not how to start it),
 * then the command line's (which win whatever their position; an --inject on
 * the command line replaces the file's). src receives the file (free it with
 * dt_config_src_free after the run). *model_given: --model was named. */
dt_status dt_train_cfg_parse(const dt_flag_table *tabs, int ntabs, unsigned cmd, dt_model_kind kind,
                             int argc, char **argv, dt_config_src *src, bool *model_given);

/* Every saved flag of the table (not out, trace, checkpoints, resume) with its
 * value in c, as a JSON object text; the caller frees it. NULL: out of memory. */
char *dt_config_dump_json(const dt_train_cfg *c);
/* The same, written to path (atomically: a temporary file renamed). */
dt_status dt_config_write_json(const dt_train_cfg *c, const char *path);

/* dt_train_cfg_default(c, kind) (train.h, defined in config.c) sets every default
 * for a model kind; this switches the optimizer after it, to that optimizer's
 * defaults (lr, momentum, weight decay, betas); nothing when it is already `kind`. */
void dt_train_cfg_set_optim(dt_train_cfg *c, dt_optim_kind kind);

#ifdef __cplusplus
}
#endif
#endif
