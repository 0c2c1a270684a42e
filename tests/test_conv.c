/* The two convolution algorithms (src/nn/conv2d_impl.h) against each other
 * and against a double-precision loop, on the shapes where the direct kernel
 * runs (stride 1, pad < kernel, not 1x1): 1x2, 3x3, 5x5 and rectangular kernels, pad
 * 0/1/2, channel counts that are not multiples of the kernel's 16-wide tiles
 * (1, 3, 17, 33), pixel counts that are not multiples of its 6-row tiles, batch
 * 1 and the W3 CNN's second layer; the direct kernel on 3 threads gives what
 * it gives on one, bit for bit. Forward overwrites (outputs start as NaN),
 * backward adds (gradients start non-zero), a NULL input gradient leaves the
 * weight gradient as it was; scratch starts as NaN so a read of unwritten
 * scratch shows. The gradchecks in test_nn_gradcheck and the PyTorch
 * fixtures in test_reference cover the public entry points on top of this. */
#include "dtrain/nn.h"
#include "nn/conv2d_impl.h"
#include "testhelp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_s = 0x2545F4914F6CDD1Dull;
static float frand(void) {
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return (float)((double)(rng_s >> 11) / 4503599627370496.0 - 1.0);
}
static float *rnd(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = frand();
    return x;
}
static float *nans(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}
static float *dup(const float *a, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    memcpy(x, a, n * sizeof(float));
    return x;
}

/* Forward in double, the definition. */
static void conv_ref(float *y, const float *x, const float *w, const float *b,
                     const dt_conv2d_dims *d) {
    const int OH = dt_conv2d_out_h(d), OW = dt_conv2d_out_w(d);
    for (int n = 0; n < d->B; n++)
        for (int o = 0; o < d->OC; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double s = b ? b[o] : 0;
                    for (int i = 0; i < d->IC; i++)
                        for (int kh = 0; kh < d->KH; kh++)
                            for (int kw = 0; kw < d->KW; kw++) {
                                int ih = oh * d->stride - d->pad + kh, iw = ow * d->stride - d->pad + kw;
                                if (ih < 0 || ih >= d->H || iw < 0 || iw >= d->W) continue;
                                s += (double)x[(((size_t)n * d->IC + i) * d->H + ih) * d->W + iw] *
                                     w[(((size_t)o * d->IC + i) * d->KH + kh) * d->KW + kw];
                            }
                    y[(((size_t)n * d->OC + o) * OH + oh) * OW + ow] = (float)s;
                }
}

static void compare(dt_conv2d_dims d, int bias) {
    char tag[128], nm[192];
    snprintf(tag, sizeof tag, "B%d IC%d %dx%d OC%d k%dx%d p%d%s", d.B, d.IC, d.H, d.W, d.OC, d.KH,
             d.KW, d.pad, bias ? "" : " nobias");
    test_cond(tag, dt_conv2d_direct_ok(&d));
    const size_t OP = (size_t)dt_conv2d_out_h(&d) * dt_conv2d_out_w(&d);
    const size_t nx = (size_t)d.B * d.IC * d.H * d.W, nw = (size_t)d.OC * d.IC * d.KH * d.KW;
    const size_t ny = (size_t)d.B * d.OC * OP;
    float *x = rnd(nx), *w = rnd(nw), *b = bias ? rnd(d.OC) : NULL, *g = rnd(ny);
    float *sd = nans(dt_conv2d_direct_scratch_floats(&d, 3)), *si = nans(dt_conv2d_im2col_scratch_floats(&d));
    float *yd = nans(ny), *yi = nans(ny), *yr = nans(ny), *y3 = nans(ny);
    dt_conv2d_direct_forward(yd, sd, x, w, b, &d, 1);
    dt_conv2d_direct_forward(y3, sd, x, w, b, &d, 3);
    snprintf(nm, sizeof nm, "direct fwd, 3 threads = 1 thread, bitwise %s", tag);
    test_close(nm, y3, yd, ny, 0, 0);
    dt_conv2d_im2col_forward(yi, si, x, w, b, &d);
    conv_ref(yr, x, w, b, &d);
    snprintf(nm, sizeof nm, "direct fwd vs double %s", tag);
    test_close(nm, yd, yr, ny, 1e-5, 1e-4);
    /* Both in float, summed in different orders: sums of K = IC*KH*KW products
     * of O(1) terms differ by up to ~sqrt(K) * 1e-7 * |terms|, hence atol 1e-4. */
    snprintf(nm, sizeof nm, "direct fwd vs im2col %s", tag);
    test_close(nm, yd, yi, ny, 1e-4, 1e-4);

    /* Gradients start non-zero: both must add the same amounts. */
    float *gx0 = rnd(nx), *gw0 = rnd(nw), *gb0 = rnd(d.OC);
    float *dxd = dup(gx0, nx), *dxi = dup(gx0, nx), *dwd = dup(gw0, nw), *dwi = dup(gw0, nw);
    float *dbd = dup(gb0, d.OC), *dbi = dup(gb0, d.OC);
    float *dx3 = dup(gx0, nx), *dw3 = dup(gw0, nw), *db3 = dup(gb0, d.OC);
    dt_conv2d_direct_backward(dxd, dwd, bias ? dbd : NULL, sd, g, x, w, &d, 1);
    dt_conv2d_direct_backward(dx3, dw3, bias ? db3 : NULL, sd, g, x, w, &d, 3);
    dt_conv2d_im2col_backward(dxi, dwi, bias ? dbi : NULL, si, g, x, w, &d);
    snprintf(nm, sizeof nm, "direct backward, 3 threads = 1 thread, bitwise %s", tag);
    test_close(nm, dx3, dxd, nx, 0, 0);
    test_close(nm, dw3, dwd, nw, 0, 0);
    test_close(nm, db3, dbd, d.OC, 0, 0);
    snprintf(nm, sizeof nm, "direct dinp vs im2col %s", tag);
    test_close(nm, dxd, dxi, nx, 1e-4, 1e-4);
    snprintf(nm, sizeof nm, "direct dw vs im2col %s", tag);
    test_close(nm, dwd, dwi, nw, 1e-3, 1e-4);
    if (bias) {
        snprintf(nm, sizeof nm, "direct db vs im2col %s", tag);
        test_close(nm, dbd, dbi, d.OC, 1e-3, 1e-4);
    } else {
        snprintf(nm, sizeof nm, "direct db untouched without bias %s", tag);
        test_close(nm, dbd, gb0, d.OC, 0, 0);
    }
    /* No input gradient: the weight gradient is the same as with one. */
    float *dw2 = dup(gw0, nw);
    dt_conv2d_direct_backward(NULL, dw2, NULL, sd, g, x, w, &d, 2);
    snprintf(nm, sizeof nm, "direct dw without dinp %s", tag);
    test_close(nm, dw2, dwd, nw, 0, 0);

    free(x); free(w); free(b); free(g); free(sd); free(si); free(yd); free(yi); free(yr);
    free(gx0); free(gw0); free(gb0); free(dxd); free(dxi); free(dwd); free(dwi); free(dbd);
    free(dbi); free(dw2); free(y3); free(dx3); free(dw3); free(db3);
}

int main(void) {
    /* {B, IC, H, W, OC, KH, KW, stride, pad} */
    compare((dt_conv2d_dims){1, 1, 5, 5, 1, 2, 1, 1, 0}, 1);     /* the smallest */
    compare((dt_conv2d_dims){1, 5, 7, 9, 17, 1, 2, 1, 0}, 1);    /* 1x2, OC past a tile */
    compare((dt_conv2d_dims){3, 19, 6, 7, 33, 3, 3, 1, 1}, 1);   /* 3x3 pad 1, odd channels */
    compare((dt_conv2d_dims){2, 3, 8, 8, 16, 3, 3, 1, 0}, 0);    /* 3x3 pad 0, exact tile */
    compare((dt_conv2d_dims){2, 2, 9, 10, 5, 5, 5, 1, 2}, 1);    /* 5x5 pad 2 */
    compare((dt_conv2d_dims){1, 4, 7, 6, 3, 5, 5, 1, 4}, 1);     /* pad = kernel - 1 */
    compare((dt_conv2d_dims){2, 3, 6, 9, 7, 2, 4, 1, 1}, 1);     /* rectangular kernel */
    compare((dt_conv2d_dims){1, 1, 28, 28, 32, 5, 5, 1, 2}, 1);  /* W3's first layer */
    compare((dt_conv2d_dims){2, 32, 14, 14, 64, 5, 5, 1, 2}, 1); /* W3's second layer */
    /* Where the direct kernel does not apply, dispatch keeps im2col. */
    dt_conv2d_dims s2 = {1, 2, 9, 9, 3, 3, 3, 2, 1}, p3 = {1, 2, 9, 9, 3, 3, 3, 1, 3};
    dt_conv2d_dims k1 = {1, 5, 7, 9, 17, 1, 1, 1, 0}, w3 = {64, 32, 14, 14, 64, 5, 5, 1, 2};
    test_cond("stride 2 goes to im2col", !dt_conv2d_direct_ok(&s2));
    test_cond("pad >= kernel goes to im2col", !dt_conv2d_direct_ok(&p3));
    test_cond("1x1 goes to im2col", !dt_conv2d_direct_ok(&k1));
    test_cond("public scratch: im2col's where direct does not apply, direct's where it does",
              dt_conv2d_scratch_floats(&s2) == dt_conv2d_im2col_scratch_floats(&s2) &&
                  dt_conv2d_scratch_floats(&k1) == dt_conv2d_im2col_scratch_floats(&k1) &&
                  dt_conv2d_scratch_floats(&w3) >= dt_conv2d_direct_scratch_floats(&w3, 1));
    return test_report();
}
