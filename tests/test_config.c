/* The flag table (dtrain/config.h): every flag of the table with a good value,
 * a bad one and the --flag=value form; the optimizer switch's defaults;
 * --config FILE (precedence, unknown keys, bad values, malformed files); and
 * the round trip dt_config_write_json -> --config -> the same cfg, bitwise. */
#include "dtrain/config.h"

#include "testhelp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One row per flag of the table: a good value (NULL: a bare switch), what it
 * must read back as, a bad value and a piece of the message it must give. */
typedef struct row {
    const char *name, *good, *back, *bad, *msg;
} row;

static const row rows[] = {
    {"data", "/tmp/d", "/tmp/d", NULL, NULL},
    {"target", "price", "price", NULL, NULL},
    {"prefetch", "off", "off", "maybe", "--prefetch must be on or off, got 'maybe'"},
    {"epochs", "3", "3", "1.5", "--epochs expects an integer, got '1.5'"},
    {"steps", "7", "7", "-1", "--steps -1 is out of range [0, "},
    {"batch", "64", "64", "0", "--batch 0 is out of range [1, 1048576]"},
    {"val-frac", "0.25", "0.25", "1", "--val-frac 1 is out of range"},
    {"optim", "adamw", "adamw", "rmsprop", "--optim must be sgd or adamw, got 'rmsprop'"},
    {"lr", "0.0123", "0.0123", "fast", "--lr expects a number, got 'fast'"},
    {"min-lr", "0.001", "0.001", "-1", "--min-lr -1 is out of range"},
    {"warmup", "5", "5", "x", "--warmup expects an integer"},
    {"lr-schedule", "constant", "constant", "linear", "--lr-schedule must be cosine or constant"},
    {"momentum", "0.5", "0.5", "1.5", "--momentum 1.5 is out of range"},
    {"nesterov", NULL, "true", "maybe", "--nesterov takes no value, or true or false"},
    {"weight-decay", "0.02", "0.02", "11", "--weight-decay 11 is out of range"},
    {"beta1", "0.8", "0.8", "1", "--beta1 1 is out of range"},
    {"beta2", "0.95", "0.95", "nan", "--beta2 expects a number"},
    {"eps", "1e-06", "1e-06", "0", "--eps 0 is out of range"},
    {"clip", "2.5", "2.5", "-3", "--clip -3 is out of range"},
    {"model", "cnn", "cnn", "vgg", "unknown model 'vgg'"},
    {"hidden", "7,9", "7,9", "10,x", "--hidden expects"},
    {"set", "w=8,blocks=2", "w=8,blocks=2", "w", "--set: 'w' is not NAME=VALUE"},
    {"precision", "fp16", "fp16", "fp8", "--precision must be fp32, bf16, bf16-emulated or fp16, got 'fp8'"},
    {"loss-scale", "1024", "1024", "0.5", "--loss-scale 0.5 is out of range"},
    {"loss-scale-window", "0", "0", "-1", "--loss-scale-window -1 is out of range"},
    {"n-layer", "2", "2", "0", "--n-layer 0 is out of range [1, 256]"},
    {"n-head", "2", "2", "257", "--n-head 257 is out of range"},
    {"n-embd", "64", "64", "a", "--n-embd expects an integer"},
    {"block-size", "32", "32", "9000", "--block-size 9000 is out of range"},
    {"init", "w.safetensors", "w.safetensors", NULL, NULL},
    {"seed", "12345678901", "12345678901", "-2", "--seed -2 is out of range"},
    {"out", "/tmp/o", "/tmp/o", NULL, NULL},
    {"eval-every", "10", "10", "-1", "--eval-every -1 is out of range"},
    {"eval-max", "0", "0", "-5", "--eval-max -5 is out of range"},
    {"log-every", "1", "1", "0", "--log-every 0 is out of range"},
    {"quiet", NULL, "true", "2", "--quiet takes no value"},
    {"trace", "t.json", "t.json", NULL, NULL},
    {"zero", "3", "3", "4", "--zero 4 is out of range [0, 3]"},
    {"zero3-keep", NULL, "true", "x", "--zero3-keep takes no value"},
    {"max-memory", "16G", "17179869184", "10Q", "--max-memory expects bytes, or a number with K, M, G or T"},
    {"allreduce", "rhd", "rhd", "butterfly", "--allreduce must be ring, rhd, rd, shm, hier, native or auto, got 'butterfly'"},
    {"bucket-mb", "0.25", "0.25", "0", "--bucket-mb 0 is out of range"},
    {"no-overlap", NULL, "true", "x", "--no-overlap takes no value"},
    {"compress", "topk:0.0123:fp16", "topk:0.0123:fp16", "zip", "must be none, fp16, bf16, int8, topk:RATIO, sign or powersgd:RANK"},
    {"error-feedback", "off", "off", "maybe", "--error-feedback must be on or off, got 'maybe'"},
    {"compress-warmup", "4", "4", "-4", "--compress-warmup -4 is out of range"},
    {"accum", "2", "2", "0", "--accum 0 is out of range"},
    {"tp", "2", "2", "0", "--tp 0 is out of range [1, 256]"},
    {"pp", "3", "3", "300", "--pp 300 is out of range [1, 256]"},
    {"micro-batches", "4", "4", "0", "--micro-batches 0 is out of range"},
    {"schedule", "gpipe", "gpipe", "zigzag", "--schedule must be gpipe, 1f1b or interleaved (pipeline), or cosine or constant (lr)"},
    {"virtual-stages", "2", "2", "17", "--virtual-stages 17 is out of range [1, 16]"},
    {"pp-partition", "2,1", "2,1", NULL, NULL},
    {"recompute", NULL, "true", "yes", "--recompute takes no value"},
    {"sequence-parallel", NULL, "true", "yes", "--sequence-parallel takes no value"},
    {"pp-stage-cost-us", "150", "150", "-1", "--pp-stage-cost-us -1 is out of range"},
    {"timeout", "7.5", "7.5", "0", "--timeout 0 is out of range"},
    {"inject", "byzantine:rank=1:mode=alie:1.5", "byzantine:rank=1:mode=alie:1.5", "crash:rank=1",
     "--inject 'crash:rank=1': needs step=S"},
    {"strategy", "localsgd:4", "localsgd:4", "localsgd:0", "--strategy localsgd:H 0 is out of range [1, 1000000]"},
    {"servers", "2", "2", "0", "--servers 0 is out of range [1, 1024]"},
    {"consistency", "ssp:3", "ssp:3", "ssp:x", "ssp:K needs"},
    {"aggregate", "krum:1:2", "krum:1:2", "avg", "must be mean, median"},
    {"pre-aggregate", "nnm:2", "nnm:2", "knn", "must be none, nnm or nnm:F"},
    {"worker-momentum", "on", "on", "sometimes", "--worker-momentum must be auto, on or off"},
    {"balance", "dynamic", "dynamic", "fair", "--balance must be static or dynamic"},
    {"ckpt-dir", "/tmp/c", "/tmp/c", NULL, NULL},
    {"ckpt-every", "5", "5", "-5", "--ckpt-every -5 is out of range"},
    {"ckpt-keep", "0", "0", "x", "--ckpt-keep expects an integer"},
    {"ckpt-replicas", "2", "2", "8", "--ckpt-replicas 8 is out of range [0, 7]"},
    {"staleness-lr", NULL, "true", "maybe", "--staleness-lr takes no value, or true or false"},
    {"dc-asgd", "0.5", "0.5", "-1", "--dc-asgd -1 is out of range"},
    {"elastic", "4", "4", "-1", "--elastic -1 is out of range [0, 1024]"},
    {"join", "/tmp/run", "/tmp/run", NULL, NULL},
    {"resume", "auto", "auto", NULL, NULL},
    {"on-divergence", "rewind:50", "rewind:50:200", "rewind:0", "K (steps back) must be a whole number >= 1"},
    {"spike-z", "4.5", "4.5", "-1", "--spike-z -1 is out of range"},
    {"spike-window", "20", "20", "1", "--spike-window 1 is out of range [2, 100000]"},
    {"max-rewinds", "0", "0", "-1", "--max-rewinds -1 is out of range"},
    {"skip-batches", "150:50,400:10", "150:50,400:10", "150", "expected STEP:COUNT"},
};
enum { N_ROWS = sizeof rows / sizeof rows[0] };

static dt_flag_table train_table(dt_train_cfg *c) {
    dt_flag_table t;
    t.flags = dt_train_flags(&t.n);
    t.base = c;
    return t;
}

/* args[0..n) through the whole parser (defaults, --config, the command line). */
static dt_status parse(dt_train_cfg *c, int n, const char **args, dt_config_src *src) {
    dt_flag_table t = train_table(c);
    bool given;
    return dt_train_cfg_parse(&t, 1, DT_FLAG_TRAIN, DT_MODEL_MLP, n, (char **)args, src, &given);
}

static bool has(const char *s, const char *piece) { return piece && strstr(s, piece) != NULL; }

/* How the table spells flag `name`'s value in c. */
static const char *value_of(const dt_train_cfg *c, const char *name) {
    static char buf[2048];
    dt_flag_table t = train_table((dt_train_cfg *)c);
    const dt_flag *f = dt_flag_find(&t, 1, name, NULL);
    dt_flag_format(f, c, buf, sizeof buf);
    return buf;
}

/* One flag: good value as `--x v` and `--x=v`, bad value with its message. */
static void check_row(const row *r) {
    char eq[256], what[6000];
    dt_train_cfg c;
    dt_config_src src;
    const char *two[2] = {eq, r->good};
    snprintf(eq, sizeof eq, "--%s", r->name);
    dt_status st = parse(&c, r->good ? 2 : 1, two, &src);
    snprintf(what, sizeof what, "--%s %s reads back as %s (got %s: %s)", r->name, r->good ? r->good : "",
             r->back, st ? "error" : value_of(&c, r->name), st ? dt_error_msg() : "ok");
    test_cond(what, !st && strcmp(value_of(&c, r->name), r->back) == 0);
    snprintf(eq, sizeof eq, "--%s=%s", r->name, r->good ? r->good : "true");
    st = parse(&c, 1, two, &src);
    snprintf(what, sizeof what, "%s reads back as %s (got %s: %s)", eq, r->back, st ? "error" : value_of(&c, r->name),
             st ? dt_error_msg() : "ok");
    test_cond(what, !st && strcmp(value_of(&c, r->name), r->back) == 0);
    if (!r->bad) return;
    snprintf(eq, sizeof eq, "--%s=%s", r->name, r->bad);
    st = parse(&c, 1, two, &src);
    snprintf(what, sizeof what, "%s refused with '%s' (got: %s)", eq, r->msg, st ? dt_error_msg() : "accepted");
    test_cond(what, st == DT_ERR_INVALID && has(dt_error_msg(), r->msg));
}

static void check_table(void) {
    int n;
    const dt_flag *t = dt_train_flags(&n);
    for (int i = 0; i < n; i++) {
        const row *r = NULL;
        for (int k = 0; k < N_ROWS; k++)
            if (strcmp(rows[k].name, t[i].name) == 0) r = &rows[k];
        char what[200];
        snprintf(what, sizeof what, "flag --%s has a row in this test", t[i].name);
        test_cond(what, r != NULL);
        if (r) check_row(r);
    }
    printf("checked %d flags of the table\n", n);
}

static void check_errors(void) {
    dt_train_cfg c;
    dt_config_src src;
    const char *a1[] = {"--bogus=1"};
    test_cond("unknown flag '--bogus'", parse(&c, 1, a1, &src) && has(dt_error_msg(), "unknown flag '--bogus'"));
    printf("  %s\n", dt_error_msg());
    const char *a2[] = {"--steps"};
    test_cond("--steps needs a value", parse(&c, 1, a2, &src) && has(dt_error_msg(), "--steps needs a value"));
    const char *a3[] = {"stray"};
    test_cond("a stray word is an unknown flag", parse(&c, 1, a3, &src) && has(dt_error_msg(), "unknown flag 'stray'"));
}

/* --optim switches lr and momentum wherever it stands; --model decides first. */
static void check_optim_defaults(void) {
    dt_train_cfg c;
    dt_config_src src;
    const char *a1[] = {"--optim", "adamw"};
    test_cond("mlp --optim adamw: lr 1e-3", !parse(&c, 2, a1, &src) && c.lr == 1e-3f && c.optim.momentum == 0.0f);
    const char *a2[] = {"--lr", "0.05", "--optim", "sgd", "--model", "gpt"};
    test_cond("gpt --lr 0.05 --optim sgd: lr 0.05, momentum 0.9, batch 16",
              !parse(&c, 6, a2, &src) && c.lr == 0.05f && c.optim.momentum == 0.9f && c.batch == 16);
    printf("  gpt --lr 0.05 --optim sgd: lr %g momentum %g batch %d\n", (double)c.lr, (double)c.optim.momentum, c.batch);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void check_file(const char *dir) {
    char path[512], bad[512], what[1200];
    dt_train_cfg c;
    dt_config_src src;
    snprintf(path, sizeof path, "%s/run.json", dir);
    write_file(path, "{\"model\":\"gpt\",\"steps\":300,\"lr\":0.002,\"compress\":\"topk:0.01\",\"recompute\":true,"
                     "\"inject\":[\"crash:rank=1:step=3\",\"slow:rank=0:factor=2\"],\"seed\":9}");
    const char *a1[] = {"--lr=0.004", "--config", path, "--seed", "4"};
    dt_status st = parse(&c, 5, a1, &src);
    snprintf(what, sizeof what, "--config: gpt defaults, the file's values, the command line's win (%s; lr %g seed %llu batch %d n_inject %d)",
             st ? dt_error_msg() : "ok", (double)c.lr, (unsigned long long)c.seed, c.batch, c.n_inject);
    test_cond(what, !st && c.model.kind == DT_MODEL_GPT && c.steps == 300 && c.lr == 0.004f && c.seed == 4 &&
                        c.batch == 16 && c.pipe.recompute && c.dp.comp.comp.kind == DT_COMP_TOPK && c.n_inject == 2);
    printf("  %s\n", what);
    dt_config_src_free(&src);
    const char *a2[] = {"--config", path, "--inject", "hang:rank=0:step=2"};
    test_cond("an --inject on the command line replaces the file's",
              !parse(&c, 4, a2, &src) && c.n_inject == 1 && c.inject[0].kind == DT_INJECT_HANG);
    dt_config_src_free(&src);

    static const struct { const char *text, *msg; } bads[] = {
        {"{\"lrr\": 1}", ": unknown key 'lrr'"},
        {"{\"lr\": \"x\"}", ": --lr expects a number, got 'x'"},
        {"{\"batch\": 0}", ": --batch 0 is out of range"},
        {"{\"lr\": {\"a\": 1}}", ": key 'lr' expects a number, a string or a boolean"},
        {"{\"recompute\": 3}", ": --recompute takes no value, or true or false, got '3'"},
        {"[1, 2]", ": expects a JSON object of flags"},
        {"{\"lr\": ", "run-bad.json:1"},
        {"{\"model\": \"vgg\"}", ": unknown model 'vgg'"},
    };
    snprintf(bad, sizeof bad, "%s/run-bad.json", dir);
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        write_file(bad, bads[i].text);
        const char *a3[] = {"--config", bad};
        st = parse(&c, 2, a3, &src);
        snprintf(what, sizeof what, "--config %s refused naming the file with '%s' (got: %s)", bads[i].text, bads[i].msg,
                 st ? dt_error_msg() : "accepted");
        test_cond(what, st && has(dt_error_msg(), "--config ") && has(dt_error_msg(), "run-bad.json") &&
                            has(dt_error_msg(), bads[i].msg));
        printf("  %s\n", dt_error_msg());
        dt_config_src_free(&src);
    }
    const char *a4[] = {"--config", "/nonexistent/x.json"};
    test_cond("a missing --config file is named", parse(&c, 2, a4, &src) && has(dt_error_msg(), "/nonexistent/x.json"));
}

/* Every saved flag reads back to the same bits: write -> --config -> equal. */
static void check_round_trip(const char *dir) {
    char path[512], what[600];
    dt_train_cfg a, b;
    dt_config_src src;
    const char *args[] = {"--model=gpt", "--optim", "sgd", "--lr=0.0123", "--min-lr=1e-7", "--compress=topk:0.0123:fp16",
                          "--aggregate=krum:1:2", "--pre-aggregate=nnm:2", "--strategy=localsgd:4", "--hidden=7,9",
                          "--inject=byzantine:rank=1:mode=alie", "--inject=slow:rank=2:factor=1.7", "--bucket-mb=0.3",
                          "--val-frac=0.123456789", "--timeout=7.25", "--seed=12345678901", "--no-overlap",
                          "--error-feedback=off", "--consistency=ssp:3", "--schedule=gpipe", "--recompute",
                          "--init=w a\"b.safetensors", "--out=/tmp/not-saved", "--ckpt-dir=/tmp/not-saved"};
    int n = (int)(sizeof args / sizeof args[0]);
    dt_status st = parse(&a, n, args, &src);
    test_cond("round trip: the flags parse", !st);
    if (st) printf("  %s\n", dt_error_msg());
    snprintf(path, sizeof path, "%s/config.json", dir);
    st = dt_config_write_json(&a, path);
    test_cond("dt_config_write_json", !st);
    const char *again[] = {"--config", path};
    dt_config_src src2;
    st = parse(&b, 2, again, &src2);
    snprintf(what, sizeof what, "round trip: --config %s parses (%s)", path, st ? dt_error_msg() : "ok");
    test_cond(what, !st);
    int n_flags, diffs = 0;
    const dt_flag *t = dt_train_flags(&n_flags);
    for (int i = 0; i < n_flags; i++) {
        if (t[i].attr & DT_FLAG_NOSAVE) continue;
        char va[2048], vb[2048];
        dt_flag_format(&t[i], &a, va, sizeof va);
        dt_flag_format(&t[i], &b, vb, sizeof vb);
        if (strcmp(va, vb) != 0) {
            printf("  --%s: wrote %s, read back %s\n", t[i].name, va, vb);
            diffs++;
        }
    }
    test_cond("round trip: every saved flag reads back the same", diffs == 0);
    test_cond("round trip: model, optimizer, compression, aggregation, injections bitwise",
              memcmp(&a.model, &b.model, sizeof a.model) == 0 && memcmp(&a.optim, &b.optim, sizeof a.optim) == 0 &&
                  memcmp(&a.dp.comp, &b.dp.comp, sizeof a.dp.comp) == 0 && memcmp(&a.agg, &b.agg, sizeof a.agg) == 0 &&
                  memcmp(a.inject, b.inject, sizeof a.inject) == 0 && a.lr == b.lr && a.min_lr == b.min_lr &&
                  a.val_frac == b.val_frac && a.timeout == b.timeout && a.seed == b.seed &&
                  a.dp.bucket_bytes == b.dp.bucket_bytes && a.local_h == b.local_h && strcmp(a.init, b.init) == 0);
    test_cond("round trip: --out and --ckpt-dir are not saved", b.out_dir == NULL && b.ckpt_dir == NULL);
    char *text = dt_config_dump_json(&a);
    printf("%s", text ? text : "(null)\n");
    free(text);
    dt_config_src_free(&src);
    dt_config_src_free(&src2);
}

int main(void) {
    char dir[] = "/tmp/test_config.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    check_table();
    check_errors();
    check_optim_defaults();
    check_file(dir);
    check_round_trip(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_report();
}
