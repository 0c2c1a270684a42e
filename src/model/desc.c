/* A model from its description (docs/MODELS.md): JSON (jansson) with
 *   "vars"   {name: number | [numbers] | string}  sizes the flags may override,
 *   "input"  {"features": D} | {"image": [C, H, W]} | {"tokens": T, "vocab": V},
 *   "loss"   "cross_entropy" | "mse",
 *   "layers" [layer...]  each top-level entry one block (a `repeat` one per copy).
 * A layer is {"type": ..., "name": ..., attributes}; containers `sequential`,
 * `residual` and `repeat` hold "layers". Names join their container's with '.',
 * as PyTorch's state_dict keys do. Every error is one line naming the layer by
 * its place (0-based indices through the containers), name and type. Cost: one
 * pass over the description; shapes are checked as layers chain. */
#include "lsetup.h"

#include "dtrain/nn.h"

#include "expr.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* ---- walking the description --------------------------------------------------- */

typedef struct walk {
    dt_builder *bd;
    dt_vars vars;
    const char *what;
    int n_cap;
    int n_leaves;
    int depth;
    int sp;          /* --sequence-parallel: the tp size (0: off) */
    int n_inserted;  /* layers the compiler added (sequence-parallel transitions) */
    int leave_at;    /* > 0: the region ends before that child of the block's top container */
} walk;

static int new_layer(walk *w, dt_status *st) {
    dt_model *m = w->bd->m;
    if (m->n_layers == w->n_cap) {
        int cap = w->n_cap ? 2 * w->n_cap : 32;
        dt_layer *nl = dt_realloc_array(m->layers, (size_t)cap, sizeof *nl);
        if (!nl) {
            *st = dt_errorf(DT_ERR_NOMEM, "out of memory building the model");
            return -1;
        }
        m->layers = nl;
        w->n_cap = cap;
    }
    dt_layer *l = &m->layers[m->n_layers];
    memset(l, 0, sizeof *l);
    l->first = l->next = -1;
    l->index = m->n_layers - w->n_inserted;
    return m->n_layers++;
}

static size_t numel(const dt_shape *sh) {
    size_t n = 1;
    for (int i = 0; i < sh->nd; i++) n *= (size_t)sh->d[i];
    return n;
}

/* ---- sequence parallelism's region (seq_parallel.c decides, this places) --------- */

/* Adds the layer that enters the region (whole rows -> this rank's) or leaves
 * it (-> whole); sh becomes its output. Its index, or -1 with *st set. */
static int sp_layer(walk *w, bool enter, dt_shape *sh, dt_status *st) {
    int k = new_layer(w, st);
    if (k < 0) return -1;
    w->n_inserted++;
    dt_sp_layer_init(&w->bd->m->layers[k], &w->bd->m->blocks[w->bd->m->n_blocks - 1], enter, w->sp, sh);
    return k;
}

static dt_status layer(walk *w, const json_t *j, const char *where, const char *prefix, dt_shape *sh, int *out,
                       bool top);

/* The children of a container (list "layers"), chained as siblings. */
static dt_status children(walk *w, const json_t *list, const char *where, const char *prefix, dt_shape *sh,
                          int parent) {
    dt_layer *L = w->bd->m->layers;
    if (!json_is_array(list) || json_array_size(list) == 0)
        return dt_errorf(DT_ERR_INVALID, "%s: layer %s: \"layers\" must be a non-empty list", w->what, where);
    /* seq.c walks a container's children on the stack: bound both ways */
    if (++w->depth > DT_LAYER_MAX_DEPTH)
        return dt_errorf(DT_ERR_INVALID, "%s: layer %s: containers nest deeper than %d", w->what, where, DT_LAYER_MAX_DEPTH);
    int prev = -1, n = 0;
    size_t i;
    const json_t *c;
    json_array_foreach((json_t *)list, i, c) {
        char wh[64];
        snprintf(wh, sizeof wh, "%s%s%zu", where, where[0] ? "." : "", i);
        int k;
        dt_status st = DT_OK;
        if (w->depth == 1 && w->leave_at > 0 && (size_t)w->leave_at == i) { /* sp_transition deferred it here */
            w->leave_at = 0;
            if ((k = sp_layer(w, false, sh, &st)) < 0) return st;
            L = w->bd->m->layers;
            if (prev < 0) L[parent].first = k;
            else L[prev].next = k;
            prev = k;
            n++;
        }
        st = layer(w, c, wh, prefix, sh, &k, false);
        if (st) return st;
        L = w->bd->m->layers;
        if (k < 0) continue; /* a repeat of nothing */
        if (prev < 0) L[parent].first = k;
        else L[prev].next = k;
        n++;
        while (L[k].next >= 0) k = L[k].next, n++; /* a repeat returns a chain */
        prev = k;
        if (n > DT_LAYER_MAX_CHILDREN)
            return dt_errorf(DT_ERR_INVALID, "%s: layer %s: a container holds more than %d layers (repeats counted): "
                             "nest them in sequentials", w->what, where, DT_LAYER_MAX_CHILDREN);
    }
    w->depth--;
    return DT_OK;
}

static void join(char *out, size_t cap, const char *prefix, const char *name) {
    snprintf(out, cap, "%s%s%s", prefix, prefix[0] && name[0] ? "." : "", name);
}

static size_t numel_of(const dt_shape *sh) { return sh->tokens ? 0 : numel(sh); }

/* At the start of top-level block `name` (description j, input shape sh): under
 * --sequence-parallel, a block with tensor-parallel layers whose input is
 * whole enters the region, a block without them whose input is split along
 * the sequence leaves it (after its leading row-wise layers: children() adds
 * the layer there, w->leave_at). *t: the transition layer added here (-1:
 * none); sh becomes its output. */
static dt_status sp_transition(walk *w, const json_t *j, const char *name, dt_shape *sh, int *t) {
    *t = -1;
    w->leave_at = 0;
    if (!w->sp) return DT_OK;
    bool enter = dt_sp_marked(j);
    if (enter == sh->seq) return DT_OK;
    dt_status st = enter ? dt_sp_enter_check(sh, w->sp, w->what, name) : DT_OK;
    if (st) return st;
    if (!enter && (w->leave_at = dt_sp_leave_at(j)) > 0) return DT_OK;
    *t = sp_layer(w, enter, sh, &st);
    return st;
}

/* A repeat's copies, chained; copy i sees variable `i`, names PREFIX.NAME.i.
 * At the top level each copy is a block of its own. */
static dt_status repeat(walk *w, dt_lsetup *s, const char *where, const char *prefix, dt_shape *sh, int *out,
                        bool top) {
    int64_t n;
    bool optional = false;
    char name[64] = "";
    dt_ls_int(s, "count", DT_LS_REQUIRED, 0, 4096, &n);
    dt_ls_bool(s, "optional", false, &optional);
    dt_ls_text(s, "name", name, sizeof name);
    dt_ls_mark(s, "layers");
    dt_ls_mark(s, "type");
    if (s->st) return s->st;
    if (n == 0 && !optional) return dt_ls_fail(s, "'count' is 0 (say \"optional\": true to allow none)");
    *out = -1;
    int prev = -1;
    for (int64_t i = 0; i < n; i++) {
        dt_value v = {.t = DT_V_INT, .i = i};
        dt_vars saved = w->vars;
        dt_vars_set(&w->vars, "i", &v);
        char base[64], pre[96], idx[24];
        snprintf(idx, sizeof idx, "%lld", (long long)i);
        join(base, sizeof base, prefix, name);
        snprintf(pre, sizeof pre, "%s", base);
        if (name[0]) join(pre, sizeof pre, base, idx);
        size_t in_dim = numel_of(sh);
        if (top && !dt_builder_block(w->bd, &dt_block_layers_ops, "", in_dim, 0)) return w->bd->st;
        int seq = new_layer(w, &s->st);
        if (seq < 0) return s->st;
        w->bd->m->layers[seq].container = DT_LAYER_SEQ;
        w->bd->m->layers[seq].in_dim = in_dim;
        char wh[64];
        snprintf(wh, sizeof wh, "%s[%lld]", where, (long long)i);
        int t = -1;
        dt_status st = top ? sp_transition(w, s->obj, pre[0] ? pre : s->type, sh, &t) : DT_OK;
        if (!st) st = children(w, json_object_get(s->obj, "layers"), wh, pre, sh, seq);
        w->vars = saved;
        if (st) return st;
        dt_layer *L = w->bd->m->layers;
        if (t >= 0) { /* the transition first */
            L[t].next = L[seq].first;
            L[seq].first = t;
        }
        L[seq].out_dim = numel(sh);
        if (top) {
            dt_block *b = &w->bd->m->blocks[w->bd->m->n_blocks - 1];
            b->root = seq;
            b->out_dim = L[seq].out_dim;
            snprintf(b->name, sizeof b->name, "%.47s", pre[0] ? pre : s->type);
        }
        if (prev < 0) *out = seq;
        else L[prev].next = seq;
        prev = seq;
    }
    return DT_OK;
}


static dt_status layer(walk *w, const json_t *j, const char *where, const char *prefix, dt_shape *sh, int *out,
                       bool top) {
    dt_lsetup s = {.bd = w->bd, .vars = &w->vars, .obj = j, .what = w->what, .type = "?"};
    snprintf(s.where, sizeof s.where, "%s", where);
    *out = -1;
    if (!json_is_object(j)) return dt_ls_fail(&s, "must be an object with a \"type\"");
    const json_t *t = json_object_get(j, "type");
    if (!json_is_string(t)) return dt_ls_fail(&s, "needs a \"type\"");
    s.type = json_string_value(t);
    dt_ls_mark(&s, "type");
    char nm[64] = "";
    if (strcmp(s.type, "repeat") == 0) {
        dt_status st = repeat(w, &s, where, prefix, sh, out, top);
        return st ? st : dt_ls_check_keys(&s);
    }
    if (dt_ls_text(&s, "name", nm, sizeof nm)) join(s.name, sizeof s.name, prefix, nm);
    if (s.st) return s.st;
    if (strcmp(s.type, "sequential") == 0 || strcmp(s.type, "residual") == 0) {
        bool res = s.type[0] == 'r';
        dt_ls_mark(&s, "layers");
        if (dt_ls_check_keys(&s)) return s.st;
        int k = new_layer(w, &s.st);
        if (k < 0) return s.st;
        w->bd->m->layers[k].container = res ? DT_LAYER_RESIDUAL : DT_LAYER_SEQ;
        dt_shape in = *sh;
        dt_status st = children(w, json_object_get(j, "layers"), where, s.name[0] ? s.name : prefix, sh, k);
        if (st) return st;
        dt_layer *l = &w->bd->m->layers[k];
        l->in_dim = numel(&in);
        l->out_dim = numel(sh);
        if (res && (in.nd != sh->nd || memcmp(in.d, sh->d, sizeof in.d) || in.split != sh->split || in.seq != sh->seq ||
                    in.tokens))
            return dt_ls_fail(&s, "its layers change the shape (%zu floats in, %zu out): a residual must keep it",
                              l->in_dim, l->out_dim);
        *out = k;
        return DT_OK;
    }
    const dt_layer_type *ty = dt_layer_find(s.type);
    if (!ty) {
        char names[400];
        dt_layer_names(names, sizeof names);
        return dt_ls_fail(&s, "unknown type; known: %s, sequential, residual, repeat", names);
    }
    int k = new_layer(w, &s.st);
    if (k < 0) return s.st;
    dt_layer *l = &w->bd->m->layers[k];
    l->ops = ty->ops;
    l->reads_batch = w->n_leaves++ == 0; /* the model's first leaf: no input gradient */
    const int prec = w->bd->m->cfg.precision;
    l->lowp = prec == DT_PRECISION_FP32                               ? DT_LOWP_OFF
              : prec == DT_PRECISION_FP16                             ? DT_LOWP_FP16
              : prec == DT_PRECISION_BF16 && dt_gemm_bf16_available() ? DT_LOWP_BF16_NATIVE
                                                                      : DT_LOWP_BF16_EMULATED;
    l->in_dim = sh->tokens ? 0 : numel(sh);
    l->rows = 1;
    for (int i = 0; i + 1 < sh->nd; i++) l->rows *= sh->d[i];
    dt_shape o = *sh;
    dt_status st = ty->setup(l, &s, sh, &o);
    if (!st) st = s.st ? s.st : dt_ls_check_keys(&s);
    if (st) return st;
    l = &w->bd->m->layers[k];
    *sh = o;
    l->out_dim = numel(sh);
    *out = k;
    return DT_OK;
}

/* ---- the whole description ------------------------------------------------------- */

static dt_status read_vars(walk *w, const json_t *vars, const dt_vars *over) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)vars, k, v) {
        dt_value x = {0};
        if (json_is_integer(v)) x = (dt_value){.t = DT_V_INT, .i = json_integer_value(v)};
        else if (json_is_real(v)) x = (dt_value){.t = DT_V_FLOAT, .f = (float)json_real_value(v)};
        else if (json_is_string(v)) {
            x.t = DT_V_STR;
            snprintf(x.s, sizeof x.s, "%s", json_string_value(v));
        } else if (json_is_array(v) && json_array_size(v) <= DT_EXPR_MAX_LIST) {
            x.t = DT_V_LIST;
            size_t i;
            const json_t *e;
            json_array_foreach((json_t *)v, i, e) {
                if (!json_is_integer(e)) return dt_errorf(DT_ERR_INVALID, "%s: vars.%s: a list holds integers only", w->what, k);
                x.list[x.n++] = json_integer_value(e);
            }
        } else return dt_errorf(DT_ERR_INVALID, "%s: vars.%s must be a number, a string or a list of integers", w->what, k);
        if (!dt_vars_set(&w->vars, k, &x)) return dt_errorf(DT_ERR_INVALID, "%s: too many vars", w->what);
    }
    for (int i = 0; over && i < over->n; i++) {
        if (!dt_vars_get(&w->vars, over->name[i]))
            return dt_errorf(DT_ERR_INVALID, "%s has no variable '%s' to set", w->what, over->name[i]);
        dt_vars_set(&w->vars, over->name[i], &over->v[i]);
    }
    return DT_OK;
}

static dt_status read_input(walk *w, const json_t *in, dt_shape *sh) {
    dt_lsetup s = {.bd = w->bd, .vars = &w->vars, .obj = in, .what = w->what, .type = "input"};
    snprintf(s.where, sizeof s.where, "input");
    dt_model *m = w->bd->m;
    memset(sh, 0, sizeof *sh);
    if (!json_is_object(in)) return dt_errorf(DT_ERR_INVALID, "%s: needs an \"input\" object", w->what);
    int64_t v;
    if (json_object_get(in, "tokens")) {
        int64_t V;
        if (dt_ls_int(&s, "tokens", DT_LS_REQUIRED, 1, 1 << 20, &v) || dt_ls_int(&s, "vocab", DT_LS_REQUIRED, 2, 1 << 24, &V))
            return s.st;
        *sh = (dt_shape){.nd = 1, .d = {v}, .tokens = true};
        m->input = DT_INPUT_TOKENS;
        m->seq_len = (int)v;
        m->vocab = (int)V;
    } else if (json_object_get(in, "features")) {
        if (dt_ls_int(&s, "features", DT_LS_REQUIRED, 1, 1 << 26, &v)) return s.st;
        *sh = (dt_shape){.nd = 1, .d = {v}};
        m->input = DT_INPUT_FEATURES;
    } else if (json_object_get(in, "image")) {
        dt_ls_mark(&s, "image");
        const json_t *a = json_object_get(in, "image");
        if (!json_is_array(a) || json_array_size(a) != 3)
            return dt_ls_fail(&s, "'image' must be [channels, height, width]");
        sh->nd = 3;
        for (int i = 0; i < 3; i++) {
            dt_value x;
            if (dt_ls_value(&s, "image", json_array_get(a, (size_t)i), &x)) return s.st;
            if (x.t != DT_V_INT || x.i < 1 || x.i > 1 << 16) return dt_ls_fail(&s, "'image' sizes must be integers in [1, 65536]");
            sh->d[i] = x.i;
        }
        m->input = DT_INPUT_FEATURES;
    } else return dt_ls_fail(&s, "must be {\"features\": D}, {\"image\": [C, H, W]} or {\"tokens\": T, \"vocab\": V}");
    if (s.st || dt_ls_check_keys(&s)) return s.st;
    m->in_floats = sh->tokens ? 0 : (int)numel(sh);
    return DT_OK;
}

/* The loss block: cross-entropy over the last dimension (one term per row:
 * per sample, or per token), or mean squared error against float targets. */
static dt_status add_loss(walk *w, const json_t *j, const dt_shape *sh) {
    dt_model *m = w->bd->m;
    const char *loss = json_is_string(j) ? json_string_value(j) : NULL;
    if (sh->split) return dt_errorf(DT_ERR_INVALID, "%s: the last layer's output is split across the tp group; end with a row-parallel linear", w->what);
    if (sh->seq)
        return dt_errorf(DT_ERR_INVALID, "%s: under --sequence-parallel the last block (it has tensor-parallel layers) ends "
                         "with this rank's part of the sequence: end the model with a block without them (the head)", w->what);
    if (sh->tokens) return dt_errorf(DT_ERR_INVALID, "%s: the model has no layers that turn tokens into floats", w->what);
    int64_t rows = 1;
    for (int i = 0; i + 1 < sh->nd; i++) rows *= sh->d[i];
    int V = (int)sh->d[sh->nd - 1];
    if (loss && strcmp(loss, "cross_entropy") == 0) {
        if (V < 2) return dt_errorf(DT_ERR_INVALID, "%s: cross_entropy needs at least 2 classes, the last layer gives %d", w->what, V);
        m->loss_kind = DT_LOSS_XENT;
        m->loss_terms = (int)rows;
        m->n_classes = V;
        dt_add_xent(w->bd, V, (int)rows);
    } else if (loss && strcmp(loss, "mse") == 0) {
        m->loss_kind = DT_LOSS_MSE;
        m->loss_terms = 1;
        m->y_dim = (int)numel(sh);
        dt_add_mse(w->bd, m->y_dim);
    } else return dt_errorf(DT_ERR_INVALID, "%s: \"loss\" must be \"cross_entropy\" or \"mse\"", w->what);
    if (m->input == DT_INPUT_TOKENS && m->loss_kind == DT_LOSS_XENT && rows != m->seq_len)
        return dt_errorf(DT_ERR_INVALID, "%s: a token model's cross_entropy needs one row per position (%d), got %lld",
                         w->what, m->seq_len, (long long)rows);
    return w->bd->st;
}

/* One block per top-level layer (per copy of a top-level repeat), created
 * before its layers so their tensors belong to it. */
static dt_status blocks(walk *w, const json_t *list, dt_shape *sh) {
    if (!json_is_array(list) || json_array_size(list) == 0)
        return dt_errorf(DT_ERR_INVALID, "%s: needs a non-empty \"layers\" list", w->what);
    dt_model *m = w->bd->m;
    size_t i;
    const json_t *c;
    json_array_foreach((json_t *)list, i, c) {
        char wh[24];
        snprintf(wh, sizeof wh, "%zu", i);
        const json_t *t = json_is_object(c) ? json_object_get(c, "type") : NULL;
        bool rep = json_is_string(t) && strcmp(json_string_value(t), "repeat") == 0;
        int k;
        if (rep) {
            dt_status st = layer(w, c, wh, "", sh, &k, true);
            if (st) return st;
            continue;
        }
        if (!dt_builder_block(w->bd, &dt_block_layers_ops, "", numel_of(sh), 0)) return w->bd->st;
        int bi = m->n_blocks - 1, tr;
        const json_t *nm = json_object_get(c, "name");
        dt_status st = sp_transition(w, c, json_is_string(nm) ? json_string_value(nm) : wh, sh, &tr);
        if (!st) st = layer(w, c, wh, "", sh, &k, true);
        if (st) return st;
        if (tr >= 0) { /* a sequence of the transition and the layer */
            int q = new_layer(w, &st);
            if (q < 0) return st;
            w->n_inserted++;
            dt_layer *L = m->layers;
            L[q].container = DT_LAYER_SEQ;
            L[q].first = tr;
            L[tr].next = k;
            L[q].in_dim = L[tr].in_dim;
            L[q].out_dim = L[k].out_dim;
            k = q;
        }
        dt_layer *l = &m->layers[k];
        m->blocks[bi].root = k;
        m->blocks[bi].out_dim = l->out_dim;
        /* The name as its tensors have it ("fc{len(hidden) + 1}" -> "fc3"); layer() checked the template. */
        if (!json_is_string(nm) ||
            dt_expr_template(json_string_value(nm), &w->vars, m->blocks[bi].name, sizeof m->blocks[bi].name))
            snprintf(m->blocks[bi].name, sizeof m->blocks[bi].name, "%s", json_string_value(t));
    }
    if (m->n_blocks == 0) return dt_errorf(DT_ERR_INVALID, "%s: the description has no layers", w->what);
    return DT_OK;
}

dt_status dt_desc_build(dt_builder *bd, const char *text, const char *what, const dt_vars *over) {
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    if (!root) return dt_errorf(DT_ERR_FORMAT, "%s: not valid JSON at line %d: %s", what, err.line, err.text);
    walk w = {.bd = bd, .what = what, .sp = bd->m->cfg.seq_parallel && bd->m->cfg.tp_size > 1 ? bd->m->cfg.tp_size : 0};
    dt_status st = DT_OK;
    dt_shape sh;
    const char *k;
    const json_t *v;
    if (!json_is_object(root)) {
        st = dt_errorf(DT_ERR_FORMAT, "%s: a model description is a JSON object", what);
        goto done;
    }
    json_object_foreach(root, k, v) {
        if (strcmp(k, "name") && strcmp(k, "vars") && strcmp(k, "input") && strcmp(k, "loss") && strcmp(k, "layers") &&
            strcmp(k, "comment")) {
            st = dt_errorf(DT_ERR_INVALID, "%s: unknown key '%s' (a description has name, vars, input, loss, layers)", what, k);
            goto done;
        }
    }
    const json_t *vars = json_object_get(root, "vars");
    if (vars && !json_is_object(vars)) {
        st = dt_errorf(DT_ERR_INVALID, "%s: \"vars\" must be an object", what);
        goto done;
    }
    if ((st = read_vars(&w, vars, over))) goto done;
    if ((st = read_input(&w, json_object_get(root, "input"), &sh))) goto done;
    if ((st = blocks(&w, json_object_get(root, "layers"), &sh))) goto done;
    if ((st = add_loss(&w, json_object_get(root, "loss"), &sh))) goto done;
    for (int b = 0; b < bd->m->n_blocks; b++) bd->m->blocks[b].layers = bd->m->layers;
    if (bd->m->cfg.tp_size > 1) {
        bool any = false;
        for (int i = 0; i < bd->m->n_layers; i++) any |= bd->m->layers[i].tp != DT_TP_NONE;
        if (!any)
            st = dt_errorf(DT_ERR_INVALID, "%s: --tp %d%s, but the description marks no tensor-parallel layers (\"tp\": "
                           "\"column\" and \"row\" on linears, \"pair\" on swiglu; docs/MODELS.md)", what, bd->m->cfg.tp_size,
                           w.sp ? " --sequence-parallel" : "");
    }
done:
    json_decref(root);
    if (!st && bd->st) st = bd->st;
    return st;
}
