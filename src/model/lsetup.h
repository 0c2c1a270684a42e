/* Private to the description compiler: a leaf layer's setup state, whose
 * attribute readers (layer.h's dt_ls_* calls) are in lsetup.c and whose walk
 * is desc.c's. */
#ifndef DT_MODEL_LSETUP_H
#define DT_MODEL_LSETUP_H

#include "layer.h"

#include "expr.h"

#include <jansson.h>

struct dt_lsetup {
    dt_builder *bd;
    dt_vars *vars;
    const json_t *obj;
    const char *what;        /* the description's file or name */
    char where[64];          /* "3.1.0" */
    char name[64];           /* the layer's full name ("" when unnamed) */
    const char *type;
    char read[32][24];       /* attributes read (others are typos) */
    int n_read;
    dt_status st;
};

/* Marks attribute key as read. */
void dt_ls_mark(dt_lsetup *s, const char *key);
/* Attribute key, a string with {expr} templates expanded, into out (marked
 * read); false when absent or bad (then an error is set on s). */
bool dt_ls_text(dt_lsetup *s, const char *key, char *out, size_t cap);
/* A JSON value as an expression's value: numbers as they are, strings evaluated. */
dt_status dt_ls_value(dt_lsetup *s, const char *key, const json_t *j, dt_value *v);
/* One line naming the first attribute of s's layer that no reader asked for
 * (a typo), or DT_OK. */
dt_status dt_ls_check_keys(dt_lsetup *s);

#endif
