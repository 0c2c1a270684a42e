/* Private: the small expression language of model descriptions (expr.c).
 *
 * A description's sizes may be numbers or strings holding an expression over
 * the description's variables: "4 * n_embd", "hidden[i]", "len(hidden) + 1",
 * "0.02 / sqrt(2 * n_layer)", "i % 2 == 0 ? 'column' : 'row'". Values are
 * integers (int64), floats (float32, so a scale computed here equals the one C
 * code computes in float), strings, or lists of integers. A string field may
 * also embed expressions in braces: "fc{i + 1}". */
#ifndef DT_MODEL_EXPR_H
#define DT_MODEL_EXPR_H

#include "dtrain/core.h"

#include <stdbool.h>
#include <stdint.h>

#define DT_EXPR_MAX_LIST 64
#define DT_EXPR_MAX_STR 96
#define DT_EXPR_MAX_VARS 48

typedef enum { DT_V_INT, DT_V_FLOAT, DT_V_STR, DT_V_LIST } dt_vtype;

typedef struct dt_value {
    dt_vtype t;
    int64_t i;
    float f;
    int n;                        /* list length */
    int64_t list[DT_EXPR_MAX_LIST];
    char s[DT_EXPR_MAX_STR];
} dt_value;

typedef struct dt_vars {
    int n;
    char name[DT_EXPR_MAX_VARS][32];
    dt_value v[DT_EXPR_MAX_VARS];
} dt_vars;

/* Sets (adds or replaces) a variable; false when the table is full. */
bool dt_vars_set(dt_vars *vs, const char *name, const dt_value *v);
const dt_value *dt_vars_get(const dt_vars *vs, const char *name);

/* Evaluates src. On error returns DT_ERR_INVALID with a message naming the
 * expression and what is wrong (caller prefixes where it came from). */
dt_status dt_expr_eval(const char *src, const dt_vars *vs, dt_value *out);
/* Replaces every {expr} in src by its value's text; out has cap bytes. */
dt_status dt_expr_template(const char *src, const dt_vars *vs, char *out, size_t cap);

#endif
