/* The expression language of model descriptions (see expr.h): a recursive-
 * descent parser that evaluates as it parses. Grammar, lowest precedence first:
 *   cond   := or ('?' cond ':' cond)?
 *   or     := and ('||' and)*        and := cmp ('&&' cmp)*
 *   cmp    := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
 *   sum    := prod (('+'|'-') prod)*  prod := unary (('*'|'/'|'%') unary)*
 *   unary  := '-' unary | '!' unary | atom ('[' cond ']')?
 *   atom   := number | 'string' | name | name '(' cond ')' | '(' cond ')'
 * Integer operands give integer results (C division); a float operand makes the
 * operation float32. Functions: sqrt, len, int, float. Both arms of '?' are
 * evaluated (no side effects exist), so an error in either is reported. */
#include "expr.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *src, *p;
    const dt_vars *vs;
    dt_status st;
} parser;

static dt_value vint(int64_t i) { dt_value v = {.t = DT_V_INT, .i = i}; return v; }
static dt_value vflt(float f) { dt_value v = {.t = DT_V_FLOAT, .f = f}; return v; }

static dt_value fail(parser *ps, const char *what) {
    if (!ps->st) ps->st = dt_errorf(DT_ERR_INVALID, "expression '%s': %s", ps->src, what);
    return vint(0);
}

static void skip(parser *ps) {
    while (isspace((unsigned char)*ps->p)) ps->p++;
}

static bool eat(parser *ps, const char *tok) {
    skip(ps);
    size_t n = strlen(tok);
    if (strncmp(ps->p, tok, n) != 0) return false;
    /* '<' must not match the start of '<=', nor '=' of '=='... */
    if (n == 1 && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!') && ps->p[1] == '=') return false;
    ps->p += n;
    return true;
}

static bool numeric(const dt_value *v) { return v->t == DT_V_INT || v->t == DT_V_FLOAT; }
static float as_f(const dt_value *v) { return v->t == DT_V_INT ? (float)v->i : v->f; }
static bool truthy(const dt_value *v) { return v->t == DT_V_INT ? v->i != 0 : v->t == DT_V_FLOAT ? v->f != 0 : true; }

static dt_value cond(parser *ps);

static dt_value call(parser *ps, const char *fn) {
    dt_value a = cond(ps);
    if (!eat(ps, ")")) return fail(ps, "missing ')'");
    if (strcmp(fn, "len") == 0) {
        if (a.t != DT_V_LIST) return fail(ps, "len() needs a list");
        return vint(a.n);
    }
    if (!numeric(&a)) return fail(ps, "a function of a number got a string or a list");
    if (strcmp(fn, "sqrt") == 0) {
        if (as_f(&a) < 0) return fail(ps, "sqrt of a negative number");
        return vflt(sqrtf(as_f(&a)));
    }
    if (strcmp(fn, "int") == 0) return vint(a.t == DT_V_INT ? a.i : (int64_t)a.f);
    if (strcmp(fn, "float") == 0) return vflt(as_f(&a));
    char m[128];
    snprintf(m, sizeof m, "unknown function '%s' (known: sqrt, len, int, float)", fn);
    return fail(ps, m);
}

static dt_value atom(parser *ps) {
    skip(ps);
    const char *p = ps->p;
    if (eat(ps, "(")) {
        dt_value v = cond(ps);
        if (!eat(ps, ")")) return fail(ps, "missing ')'");
        return v;
    }
    if (*p == '\'') {
        const char *e = strchr(p + 1, '\'');
        if (!e || e - p - 1 >= DT_EXPR_MAX_STR) return fail(ps, "unterminated or long string");
        dt_value v = {.t = DT_V_STR};
        memcpy(v.s, p + 1, (size_t)(e - p - 1));
        ps->p = e + 1;
        return v;
    }
    if (isdigit((unsigned char)*p) || *p == '.') {
        char *end;
        bool flt = false;
        for (const char *q = p; isalnum((unsigned char)*q) || *q == '.'; q++) flt |= *q == '.' || *q == 'e' || *q == 'E';
        if (flt) {
            float f = strtof(p, &end);
            ps->p = end;
            return vflt(f);
        }
        long long i = strtoll(p, &end, 10);
        ps->p = end;
        return vint(i);
    }
    if (isalpha((unsigned char)*p) || *p == '_') {
        char name[32];
        size_t n = 0;
        while ((isalnum((unsigned char)*ps->p) || *ps->p == '_') && n + 1 < sizeof name) name[n++] = *ps->p++;
        name[n] = 0;
        if (eat(ps, "(")) return call(ps, name);
        const dt_value *v = dt_vars_get(ps->vs, name);
        if (!v) {
            char m[96];
            snprintf(m, sizeof m, "unknown variable '%s'", name);
            return fail(ps, m);
        }
        return *v;
    }
    return fail(ps, *p ? "unexpected character" : "unexpected end");
}

static dt_value unary(parser *ps) {
    if (eat(ps, "-")) {
        dt_value v = unary(ps);
        if (!numeric(&v)) return fail(ps, "'-' of a string or a list");
        return v.t == DT_V_INT ? vint(-v.i) : vflt(-v.f);
    }
    if (eat(ps, "!")) {
        dt_value v = unary(ps);
        return vint(!truthy(&v));
    }
    dt_value v = atom(ps);
    if (eat(ps, "[")) {
        dt_value k = cond(ps);
        if (!eat(ps, "]")) return fail(ps, "missing ']'");
        if (v.t != DT_V_LIST || k.t != DT_V_INT) return fail(ps, "indexing needs a list and an integer");
        if (k.i < 0 || k.i >= v.n) return fail(ps, "index out of range");
        return vint(v.list[k.i]);
    }
    return v;
}

static dt_value arith(parser *ps, char op, dt_value a, dt_value b) {
    if (op == '+' && a.t == DT_V_STR && b.t == DT_V_STR) {
        dt_value v = a;
        if (strlen(a.s) + strlen(b.s) >= DT_EXPR_MAX_STR) return fail(ps, "string too long");
        strcat(v.s, b.s);
        return v;
    }
    if (!numeric(&a) || !numeric(&b)) return fail(ps, "arithmetic on a string or a list");
    if (a.t == DT_V_INT && b.t == DT_V_INT) {
        if ((op == '/' || op == '%') && b.i == 0) return fail(ps, "division by zero");
        switch (op) {
        case '+': return vint(a.i + b.i);
        case '-': return vint(a.i - b.i);
        case '*': return vint(a.i * b.i);
        case '/': return vint(a.i / b.i);
        default: return vint(a.i % b.i);
        }
    }
    float x = as_f(&a), y = as_f(&b);
    switch (op) {
    case '+': return vflt(x + y);
    case '-': return vflt(x - y);
    case '*': return vflt(x * y);
    case '/': return y == 0 ? fail(ps, "division by zero") : vflt(x / y);
    default: return fail(ps, "'%' needs integers");
    }
}

static dt_value prod(parser *ps) {
    dt_value v = unary(ps);
    for (;;) {
        char op = eat(ps, "*") ? '*' : eat(ps, "/") ? '/' : eat(ps, "%") ? '%' : 0;
        if (!op || ps->st) return v;
        v = arith(ps, op, v, unary(ps));
    }
}

static dt_value sum(parser *ps) {
    dt_value v = prod(ps);
    for (;;) {
        char op = eat(ps, "+") ? '+' : eat(ps, "-") ? '-' : 0;
        if (!op || ps->st) return v;
        v = arith(ps, op, v, prod(ps));
    }
}

static dt_value cmp(parser *ps) {
    dt_value a = sum(ps);
    static const char *ops[] = {"==", "!=", "<=", ">=", "<", ">"};
    for (int k = 0; k < 6; k++) {
        if (!eat(ps, ops[k])) continue;
        dt_value b = sum(ps);
        int c;
        if (a.t == DT_V_STR && b.t == DT_V_STR) c = strcmp(a.s, b.s);
        else if (numeric(&a) && numeric(&b)) {
            if (a.t == DT_V_INT && b.t == DT_V_INT) c = a.i < b.i ? -1 : a.i > b.i;
            else c = as_f(&a) < as_f(&b) ? -1 : as_f(&a) > as_f(&b);
        } else return fail(ps, "comparing values of different kinds");
        bool r = k == 0 ? c == 0 : k == 1 ? c != 0 : k == 2 ? c <= 0 : k == 3 ? c >= 0 : k == 4 ? c < 0 : c > 0;
        return vint(r);
    }
    return a;
}

static dt_value and_(parser *ps) {
    dt_value v = cmp(ps);
    while (eat(ps, "&&")) {
        dt_value b = cmp(ps);
        v = vint(truthy(&v) && truthy(&b));
    }
    return v;
}

static dt_value or_(parser *ps) {
    dt_value v = and_(ps);
    while (eat(ps, "||")) {
        dt_value b = and_(ps);
        v = vint(truthy(&v) || truthy(&b));
    }
    return v;
}

static dt_value cond(parser *ps) {
    dt_value c = or_(ps);
    if (!eat(ps, "?")) return c;
    dt_value a = cond(ps);
    if (!eat(ps, ":")) return fail(ps, "'?' without ':'");
    dt_value b = cond(ps);
    return truthy(&c) ? a : b;
}

dt_status dt_expr_eval(const char *src, const dt_vars *vs, dt_value *out) {
    parser ps = {.src = src, .p = src, .vs = vs};
    dt_value v = cond(&ps);
    skip(&ps);
    if (!ps.st && *ps.p) fail(&ps, "unexpected text after the expression");
    if (ps.st) return ps.st;
    *out = v;
    return DT_OK;
}

static int value_text(const dt_value *v, char *buf, size_t n) {
    switch (v->t) {
    case DT_V_INT: return snprintf(buf, n, "%lld", (long long)v->i);
    case DT_V_FLOAT: return snprintf(buf, n, "%.9g", (double)v->f);
    case DT_V_STR: return snprintf(buf, n, "%s", v->s);
    default: return snprintf(buf, n, "[list of %d]", v->n);
    }
}

dt_status dt_expr_template(const char *src, const dt_vars *vs, char *out, size_t cap) {
    size_t k = 0;
    for (const char *p = src; *p;) {
        if (*p != '{') {
            if (k + 1 >= cap) return dt_errorf(DT_ERR_INVALID, "'%s' is too long", src);
            out[k++] = *p++;
            continue;
        }
        const char *e = strchr(p, '}');
        if (!e || (size_t)(e - p) > 200) return dt_errorf(DT_ERR_INVALID, "'%s': '{' without '}'", src);
        char ex[208];
        memcpy(ex, p + 1, (size_t)(e - p - 1));
        ex[e - p - 1] = 0;
        dt_value v;
        dt_status st = dt_expr_eval(ex, vs, &v);
        if (st) return st;
        int w = value_text(&v, out + k, cap - k);
        if (w < 0 || (size_t)w >= cap - k) return dt_errorf(DT_ERR_INVALID, "'%s' is too long", src);
        k += (size_t)w;
        p = e + 1;
    }
    out[k] = 0;
    return DT_OK;
}

bool dt_vars_set(dt_vars *vs, const char *name, const dt_value *v) {
    for (int i = 0; i < vs->n; i++)
        if (strcmp(vs->name[i], name) == 0) {
            vs->v[i] = *v;
            return true;
        }
    if (vs->n == DT_EXPR_MAX_VARS || strlen(name) >= sizeof vs->name[0]) return false;
    snprintf(vs->name[vs->n], sizeof vs->name[0], "%s", name);
    vs->v[vs->n++] = *v;
    return true;
}

const dt_value *dt_vars_get(const dt_vars *vs, const char *name) {
    for (int i = vs->n - 1; i >= 0; i--)
        if (strcmp(vs->name[i], name) == 0) return &vs->v[i];
    return NULL;
}
