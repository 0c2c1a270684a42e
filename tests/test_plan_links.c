/* The planner's links across hosts (issue 16): the cross link's rate measured
 * by message size (dt_plan_cross_beta: interpolated in log size, the ends
 * held), read from 'dtrain bench allreduce --fit''s line and from a cluster
 * description and written back; bad curves refused in one line; a pipeline
 * boundary across hosts carries the next stage's input and nothing more; the
 * dp groups of a tensor-parallel stage share their host's link; a shaped
 * link's burst; and a pipeline no shorter than its busiest link. */
#include "dtrain/plan.h"
#include "plan/plan_internal.h"
#include "plan_testhelp.h"
#include "testhelp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/dt_plan_links_XXXXXX";

static const char *put(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

static bool near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b) + 1e-18; }

static void curve(void) {
    dt_plan_cluster c;
    memset(&c, 0, sizeof c);
    c.links.cross = (dt_link_cost){1e-5, 5e-9};
    test_cond("no curve: the link's beta", dt_plan_cross_beta(&c, 12345) == 5e-9);
    const char *fit = put("fit.json", "{\"local\": {\"alpha\": 1e-06, \"beta\": 2e-10}, \"cross\": {\"alpha\": 3e-05, "
                                      "\"beta\": 1e-07, \"measured_beta\": [[1024, 8e-08], [4096, 1.2e-07], [65536, 1.6e-07]]}, "
                                      "\"gamma\": 1.5e-10}\n");
    test_cond("fit line read", dt_plan_fit_read(fit, &c) == DT_OK);
    test_cond("fit line: alpha and beta", c.links.cross.alpha == 3e-5 && c.links.cross.beta == 1e-7 &&
                                              c.links.local.beta == 2e-10 && c.links.gamma == 1.5e-10);
    test_cond("fit line: three sizes", c.cross_n == 3);
    test_cond("curve: below the first size, the first", dt_plan_cross_beta(&c, 10) == 8e-8);
    test_cond("curve: at a size, its beta", near(dt_plan_cross_beta(&c, 4096), 1.2e-7, 1e-12));
    test_cond("curve: halfway in log size, halfway", near(dt_plan_cross_beta(&c, 2048), 1e-7, 1e-9));
    test_cond("curve: halfway in log size again (16 KiB of 4-64 KiB)", near(dt_plan_cross_beta(&c, 16384), 1.4e-7, 1e-9));
    test_cond("curve: a quarter of the way in log size (8 KiB of 4-64 KiB)",
              near(dt_plan_cross_beta(&c, 8192), 1.3e-7, 1e-9));
    test_cond("curve: above the last size, the last", dt_plan_cross_beta(&c, 1e9) == 1.6e-7);

    /* written into a description and read back */
    c.hosts = 2, c.per_host = 2, c.cores = 2, c.shared_cores = 2, c.flops = 1e10, c.memory = 1e9;
    c.speed[0] = c.speed[1] = 1;
    char path[256];
    snprintf(path, sizeof path, "%s/c.json", dir);
    dt_plan_cluster r;
    test_cond("description written", dt_plan_cluster_write(path, &c) == DT_OK);
    test_cond("description read back", dt_plan_cluster_read(path, &r) == DT_OK);
    test_cond("the curve round-trips", r.cross_n == 3 && near(r.cross_msg[1], 4096, 1e-12) &&
                                           near(r.cross_beta[2], 1.6e-7, 1e-9));
    test_cond("shared cores round-trip", r.shared_cores == 2);

    /* one line for each bad curve */
    static const struct { const char *json, *want; } bad[] = {
        {"[[4096, 1], [1024, 1]]", "sizes ascending"},
        {"[[4096, 0]]", "must be [bytes, Gbit/s]"},
        {"[[4096]]", "must be [bytes, Gbit/s]"},
        {"[[4096, 1.2e-07]]", "the rate in [1e-06, 1e+06]"}, /* a fit line's s/byte pasted in */
        {"[]", "1 to 16"},
        {"{\"a\": 1}", "1 to 16"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char text[512];
        snprintf(text, sizeof text, "{\"hosts\": 2, \"ranks_per_host\": 1, \"gflops\": 10, \"memory_gb\": 1, "
                                    "\"local\": {\"latency_us\": 1, \"bandwidth_gbit\": 40}, \"cross\": {\"latency_us\": "
                                    "50, \"bandwidth_gbit\": 1, \"measured\": %s}}", bad[k].json);
        dt_status st = dt_plan_cluster_read(put("bad.json", text), &r);
        printf("bad curve %s: %s\n", bad[k].json, st ? dt_error_msg() : "(accepted)");
        test_cond("bad curve refused, named", st == DT_ERR_INVALID && strstr(dt_error_msg(), "cross.measured") &&
                                                  strstr(dt_error_msg(), bad[k].want));
    }
    test_cond("not a fit line refused", dt_plan_fit_read(put("nf.json", "{\"hosts\": 1}"), &r) == DT_ERR_FORMAT &&
                                            strstr(dt_error_msg(), "bench allreduce --fit"));
    r.cross_n = 3;
    const char *badfit = put("bf.json", "{\"local\": {\"alpha\": 1e-06, \"beta\": 2e-10}, \"cross\": {\"alpha\": 3e-05, "
                                        "\"beta\": 1e-07, \"measured_beta\": [[1024, 8e-08], [512, 9e-08]]}, \"gamma\": 0}\n");
    test_cond("a fit line's bad curve refused, no curve left", dt_plan_fit_read(badfit, &r) == DT_ERR_INVALID &&
                                                                  r.cross_n == 0 && strstr(dt_error_msg(), "measured_beta[1]"));
}

/* 2 hosts x per ranks with spare cores, the cross link at cross_beta s/byte. */
static dt_plan_cluster *two_hosts(int per, double cross_beta) {
    dt_plan_cluster *c = cluster(2, per, 8);
    c->links.cross.beta = cross_beta;
    return c;
}

/* Two stages on two hosts, one micro-batch: the step is f0 + p2p + f1 + b1 +
 * p2p + b0, so slowing the link adds two boundary transfers of the second
 * stage's input (its first block's in_dim floats a sample) and nothing else. */
static void boundary(void) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_MLP);
    dt_plan_layout l = {.dp = 1, .tp = 1, .pp = 2, .micro = 1, .sched = DT_PLAN_1F1B};
    dt_plan_in in = {.model = &mc, .batch = 64, .adam = true, .cluster = two_hosts(1, 8e-9)};
    dt_plan_pred fast, slow;
    test_cond("boundary: predicted", dt_plan_predict(&in, &l, &fast) == DT_OK);
    in.cluster = two_hosts(1, 8e-7);
    test_cond("boundary: predicted, slow link", dt_plan_predict(&in, &l, &slow) == DT_OK);
    dt_model *m = NULL;
    test_cond("boundary: probe", dt_model_probe(&mc, &m) == DT_OK && m);
    int first1 = atoi(fast.partition); /* "k,rest": stage 1 starts at block k */
    double bytes = m ? (double)m->blocks[first1].in_dim * 4 * 64 : 0;
    dt_model_destroy(m);
    double want = 2 * bytes * (8e-7 - 8e-9);
    printf("boundary: partition %s, %.0f bytes a transfer; slower link +%.3f ms (want +%.3f)\n", fast.partition, bytes,
           (slow.step_s - fast.step_s) * 1e3, want * 1e3);
    test_cond("boundary: two transfers of the next stage's input", near(slow.step_s - fast.step_s, want, 1e-6));

    /* four stages on 2 hosts x 2: only the boundary between stages 1 and 2 crosses */
    dt_model_cfg gc;
    dt_model_cfg_default(&gc, DT_MODEL_GPT);
    l.pp = 4;
    in.model = &gc;
    in.batch = 8;
    in.cluster = two_hosts(2, 8e-9);
    test_cond("boundary, 4 stages: predicted", dt_plan_predict(&in, &l, &fast) == DT_OK);
    in.cluster = two_hosts(2, 8e-7);
    test_cond("boundary, 4 stages: predicted, slow link", dt_plan_predict(&in, &l, &slow) == DT_OK);
    m = NULL;
    test_cond("boundary, 4 stages: probe", dt_model_probe(&gc, &m) == DT_OK && m);
    int b0 = 0, b1 = 0;
    sscanf(fast.partition, "%d,%d", &b0, &b1);
    bytes = m ? (double)m->blocks[b0 + b1].in_dim * 4 * 8 : 0;
    dt_model_destroy(m);
    want = 2 * bytes * (8e-7 - 8e-9);
    printf("boundary, 4 stages: partition %s, stage 2's input %.0f bytes; slower link +%.3f ms (want +%.3f)\n",
           fast.partition, bytes, (slow.step_s - fast.step_s) * 1e3, want * 1e3);
    test_cond("boundary, 4 stages: the one crossing boundary, twice", near(slow.step_s - fast.step_s, want, 1e-6));

    /* interleaved, 2 stages on 2 hosts, 2 chunks each of the mlp's 4 blocks,
     * M = 2 (the least multiple of pp) of 32 samples: chunks 0, 2 on host 0,
     * 1 and 3 on host 1, so all P V - 1 = 3 boundaries cross: t for the two
     * 1024-wide ones (1, 2), s for the 10-wide one (3). Each direction's
     * messages queue on its link; on a slow link (compute ~0), by hand:
     * link 0->1 carries A0 [0,t] A1 [t,2t] (boundary 1), S0 [2t,2t+s], S1
     * [3t,3t+s] (3), G0 [3t+s,4t+s] G1 [4t+s,5t+s] (2, backward); link 1->0
     * C0 [t,2t] C1 [2t,3t] (2), R0 [3t,3t+s] R1 [3t+s,3t+2s] (3, backward),
     * D0 [4t+s,5t+s] D1 [5t+s,6t+s] (1, backward): the slow step is 6t + s
     * and at most the fast step's compute more (where transfers that did not
     * queue would give 4t + 2s and that compute). */
    dt_model_cfg mc2;
    dt_model_cfg_default(&mc2, DT_MODEL_MLP);
    dt_plan_layout il = {.dp = 1, .tp = 1, .pp = 2, .micro = 2, .sched = DT_PLAN_INTERLEAVED, .virt = 2};
    in.model = &mc2;
    in.batch = 64;
    in.cluster = two_hosts(1, 8e-9);
    test_cond("interleaved boundaries: predicted", dt_plan_predict(&in, &il, &fast) == DT_OK);
    in.cluster = two_hosts(1, 8e-7);
    test_cond("interleaved boundaries: predicted, slow link", dt_plan_predict(&in, &il, &slow) == DT_OK);
    m = NULL;
    test_cond("interleaved boundaries: probe", dt_model_probe(&mc2, &m) == DT_OK && m);
    int k[4] = {0};
    sscanf(fast.partition, "%d,%d,%d,%d", &k[0], &k[1], &k[2], &k[3]);
    double in_b[4] = {0}; /* boundary c's bytes a micro-batch: the input of chunk c */
    for (int c = 1, b = k[0]; c < 4 && m; b += k[c], c++) in_b[c] = (double)m->blocks[b].in_dim * 4 * 32;
    dt_model_destroy(m);
    double one = (3 * (in_b[1] + in_b[2]) + in_b[3]) * 8e-7;
    printf("interleaved boundaries: partition %s; slow link %.3f ms (by hand, queued: %.3f, + at most %.3f)\n",
           fast.partition, slow.step_s * 1e3, one * 1e3, fast.step_s * 1e3);
    test_cond("interleaved boundaries: 4 chunks", k[0] == 1 && k[1] == 1 && k[2] == 1 && k[3] == 1);
    test_cond("interleaved boundaries: the two big ones equal", in_b[1] == in_b[2] && in_b[3] < in_b[1]);
    test_cond("interleaved boundaries: 6t + s, queued on the links",
              slow.step_s >= one && slow.step_s <= one + fast.step_s);
}

/* dp 2 x tp 2 on 2 hosts x 2: the two dp groups (one per tp rank) cross the
 * same host link at once, each with half the parameters; on a slow link that
 * is one group of all of them, as 2 x 1 x 1 on 2 hosts x 1 reduces. */
static void shared_link(void) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_MLP);
    dt_plan_layout l4 = {.dp = 2, .tp = 2, .pp = 1, .micro = 1}, l2 = {.dp = 2, .tp = 1, .pp = 1, .micro = 1};
    dt_plan_in in = {.model = &mc, .batch = 64, .adam = true, .cluster = two_hosts(2, 8e-6)};
    dt_plan_pred p4, p2;
    test_cond("shared link: 2 x 2 x 1 predicted", dt_plan_predict(&in, &l4, &p4) == DT_OK);
    in.cluster = two_hosts(1, 8e-6);
    test_cond("shared link: 2 x 1 x 1 predicted", dt_plan_predict(&in, &l2, &p2) == DT_OK);
    printf("shared link: dp exposed %.1f ms (2 groups of P/2) vs %.1f ms (1 group of P)\n", p4.dp_s * 1e3, p2.dp_s * 1e3);
    test_cond("shared link: two groups of half the bytes take as long as one of all", near(p4.dp_s, p2.dp_s, 0.03));
}

/* GPipe against 1F1B on a slow boundary: GPipe's M forward messages queue on
 * one direction's link, then its M backward ones on the other's, so the step
 * is at least 2 M transfers; 1F1B sends both ways at once and is faster. With
 * more ranks than cores GPipe is also taken as no faster. */
static void gpipe_sliced(void) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_MLP);
    dt_plan_layout g = {.dp = 1, .tp = 1, .pp = 2, .micro = 8, .sched = DT_PLAN_GPIPE}, f = g;
    f.sched = DT_PLAN_1F1B;
    dt_plan_in in = {.model = &mc, .batch = 64, .adam = true, .cluster = two_hosts(1, 8e-7)};
    dt_plan_pred pg, pf;
    test_cond("gpipe: predicted with cores to spare", dt_plan_predict(&in, &g, &pg) == DT_OK &&
                                                          dt_plan_predict(&in, &f, &pf) == DT_OK);
    dt_model *m = NULL;
    test_cond("gpipe: probe", dt_model_probe(&mc, &m) == DT_OK && m);
    int b0 = 0;
    sscanf(pg.partition, "%d", &b0);
    double t = m ? (double)m->blocks[b0].in_dim * 4 * 8 * 8e-7 : 0; /* a micro-batch of 8 rows */
    dt_model_destroy(m);
    printf("gpipe, 8 cores a host: gpipe %.3f ms (2 M transfers: %.3f), 1f1b %.3f ms\n", pg.step_s * 1e3,
           16 * t * 1e3, pf.step_s * 1e3);
    test_cond("gpipe: its transfers queue, one direction at a time", pg.step_s >= 16 * t);
    test_cond("gpipe: slower than 1f1b on a slow link", pg.step_s > pf.step_s);
    dt_plan_cluster *sliced = two_hosts(1, 8e-7);
    sliced->cores = 1;
    sliced->shared_cores = 1; /* 2 ranks on 1 shared core */
    in.cluster = sliced;
    test_cond("gpipe: predicted time-sliced", dt_plan_predict(&in, &g, &pg) == DT_OK &&
                                                  dt_plan_predict(&in, &f, &pf) == DT_OK);
    printf("gpipe, 2 ranks on 1 core: gpipe %.3f ms, 1f1b %.3f ms\n", pg.step_s * 1e3, pf.step_s * 1e3);
    test_cond("gpipe: time-sliced, no faster than 1f1b", pg.step_s >= pf.step_s);
}

/* The profile's line t = t0 + c b: exact on a line, one bad point (a step the
 * scheduler stretched) moves neither t0 nor c, refusals for nonsense. */
static void affine(void) {
    double x[6] = {64, 32, 16, 8, 4, 2}, t[6], t0 = -1, c = -1;
    for (int i = 0; i < 6; i++) t[i] = 5e-3 + 2e-4 * x[i];
    test_cond("affine: exact line", dt_plan_fit_affine(x, t, 6, &t0, &c) == DT_OK && near(t0, 5e-3, 1e-9) &&
                                        near(c, 2e-4, 1e-9));
    t[4] += 40e-3; /* b = 4 eight times its time */
    test_cond("affine: one outlier leaves the line", dt_plan_fit_affine(x, t, 6, &t0, &c) == DT_OK &&
                                                         near(t0, 5e-3, 1e-9) && near(c, 2e-4, 1e-9));
    test_cond("affine: one point is all slope", dt_plan_fit_affine(x, t, 1, &t0, &c) == DT_OK && t0 == 0 &&
                                                    near(c, t[0] / 64, 1e-12));
    test_cond("affine: no points refused", dt_plan_fit_affine(x, t, 0, &t0, &c) == DT_ERR_INVALID);
    test_cond("affine: too many points refused", dt_plan_fit_affine(x, t, DT_PLAN_FIT_MAX + 1, &t0, &c) == DT_ERR_INVALID);
    x[0] = 0;
    test_cond("affine: x <= 0 refused", dt_plan_fit_affine(x, t, 6, &t0, &c) == DT_ERR_INVALID);
}

/* A shaped link's burst (a token bucket refilled at the link's rate): a
 * message after an idle spell passes up to the refilled bytes at the local
 * rate, the rest at the link's; read from the fit line and a description,
 * written back, refused when negative; a pipeline across hosts gains at most
 * its two boundary transfers' link time. */
static void burst(void) {
    dt_plan_cluster *c = two_hosts(1, 8e-9);
    const double a = c->links.cross.alpha, lb = c->links.local.beta, S = 131072;
    test_cond("no burst: alpha + bytes x beta", near(plan_p2p(c, true, S, 1, 1.0, 4), a + S * 8e-9, 1e-12));
    c->cross_burst = 250e3;
    test_cond("a refilled burst passes a message at the local rate",
              near(plan_p2p(c, true, S, 1, 1.0, 4), a + S * lb, 1e-12));
    test_cond("a step's one message finds the bucket full", near(plan_p2p(c, true, S, 1, 0, 1), a + S * lb, 1e-12));
    /* two messages of 400 KB 0.5 ms apart: the full bucket, then 0.5 ms at
     * 8 ns/B refills 62500 bytes; each passes half of that at once */
    test_cond("half a millisecond refills 62500 bytes",
              near(plan_p2p(c, true, 400e3, 1, 5e-4, 2), a + (400e3 - 156250) * 8e-9 + 156250 * lb, 1e-12));
    test_cond("two senders share one bucket",
              near(plan_p2p(c, true, 200e3, 2, 1.0, 4), a + 150e3 * 8e-9 + 250e3 * lb, 1e-12));
    test_cond("inside a host no burst", near(plan_p2p(c, false, S, 1, 1.0, 4), c->links.local.alpha + S * lb, 1e-12));

    const char *fit = put("fit.json", "{\"local\": {\"alpha\": 1e-06, \"beta\": 2e-10}, \"cross\": {\"alpha\": 3e-05, "
                                      "\"beta\": 8e-09, \"measured_beta\": [[1024, 8e-09]], \"burst_bytes\": 227507}, "
                                      "\"gamma\": 1.5e-10}\n");
    dt_plan_cluster f, r;
    memset(&f, 0, sizeof f);
    test_cond("fit line with a burst read", dt_plan_fit_read(fit, &f) == DT_OK && f.cross_burst == 227507);
    f.hosts = 2, f.per_host = 1, f.cores = 2, f.flops = 1e10, f.memory = 1e9, f.speed[0] = f.speed[1] = 1;
    char path[256];
    snprintf(path, sizeof path, "%s/c.json", dir);
    test_cond("the burst round-trips a description", dt_plan_cluster_write(path, &f) == DT_OK &&
                                                         dt_plan_cluster_read(path, &r) == DT_OK &&
                                                         near(r.cross_burst, 227507, 1e-9));
    dt_status st = dt_plan_cluster_read(put("bad.json", "{\"hosts\": 2, \"ranks_per_host\": 1, \"gflops\": 10, "
                                                        "\"memory_gb\": 1, \"local\": {\"latency_us\": 1, \"bandwidth_gbit\": "
                                                        "40}, \"cross\": {\"latency_us\": 50, \"bandwidth_gbit\": 1, "
                                                        "\"burst_kb\": -1}}"), &r);
    printf("burst_kb -1: %s\n", st ? dt_error_msg() : "(accepted)");
    test_cond("a negative burst refused, named", st == DT_ERR_INVALID && strstr(dt_error_msg(), "cross.burst_kb"));

    /* two stages on two hosts at 0.8 us/B: the burst saves at most the two
     * boundary transfers' link time */
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_MLP);
    dt_plan_layout l = {.dp = 1, .tp = 1, .pp = 2, .micro = 4, .sched = DT_PLAN_1F1B};
    dt_plan_cluster *slow = two_hosts(1, 8e-7);
    dt_plan_in in = {.model = &mc, .batch = 64, .adam = true, .cluster = slow};
    dt_plan_pred plain, bursty;
    test_cond("burst: predicted without", dt_plan_predict(&in, &l, &plain) == DT_OK);
    slow->cross_burst = 1e6;
    test_cond("burst: predicted with", dt_plan_predict(&in, &l, &bursty) == DT_OK);
    dt_model *m = NULL;
    test_cond("burst: probe", dt_model_probe(&mc, &m) == DT_OK && m);
    /* 4 micro-batches of 16 samples of the second stage's input, both ways */
    double most = m ? 2 * 4 * 16.0 * 4 * (double)m->blocks[atoi(plain.partition)].in_dim * 8e-7 : 0;
    dt_model_destroy(m);
    printf("burst: pipeline across hosts %.3f ms without, %.3f ms with a 1 MB burst (at most %.3f ms less)\n",
           plain.step_s * 1e3, bursty.step_s * 1e3, most * 1e3);
    test_cond("burst: the pipeline is faster, by no more than its transfers",
              bursty.step_s < plain.step_s && plain.step_s - bursty.step_s <= most * 1.0001);
}

/* The interleaved schedule on two hosts: each micro-batch crosses the link
 * from the first host three times (chunk 0 -> 1 and 2 -> 3 forward, 2 <- 1's
 * gradient back), so the span is at least 3 M messages on it. */
static void busiest_link(void) {
    dt_model_cfg mc;
    dt_model_cfg_default(&mc, DT_MODEL_GPT);
    dt_plan_cluster *c = two_hosts(1, 8e-7);
    dt_plan_in in = {.model = &mc, .batch = 8, .adam = true, .cluster = c};
    dt_plan_layout l = {.dp = 1, .tp = 1, .pp = 2, .micro = 4, .sched = DT_PLAN_INTERLEAVED, .virt = 2};
    dt_plan_pred p;
    test_cond("busiest link: predicted", dt_plan_predict(&in, &l, &p) == DT_OK);
    dt_model *m = NULL;
    test_cond("busiest link: probe", dt_model_probe(&mc, &m) == DT_OK && m);
    double bytes = m ? (double)m->blocks[atoi(p.partition)].in_dim * 4 * 2 : 0; /* micro-batches of 2 */
    dt_model_destroy(m);
    double span = p.compute_s + p.tp_s + p.bubble_s, link = 3 * 4 * plan_p2p(c, true, bytes, 1, 0, 8);
    printf("busiest link: span %.2f ms, 12 messages of %.0f bytes %.2f ms\n", span * 1e3, bytes, link * 1e3);
    test_cond("busiest link: the span is no shorter than its messages", span >= link * (1 - 1e-9));
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    burst();
    busiest_link();
    affine();
    gpipe_sliced();
    curve();
    boundary();
    shared_link();
    static const char *made[] = {"fit.json", "c.json", "bad.json", "nf.json", "bf.json"};
    for (size_t k = 0; k < sizeof made / sizeof made[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, made[k]);
        unlink(path);
    }
    rmdir(dir);
    return test_report();
}
