/* Average pooling, NCHW, as torch.nn.AvgPool2d(K, stride, pad) with
 * count_include_pad=True and ceil_mode=False: every window divides by K*K, the
 * zero padding counting as elements. (PyTorch divides by the window clipped to
 * the padded input, but without ceil_mode a window never leaves it: the last
 * one starts at (OH-1)*stride - pad <= H + pad - K.)
 *
 * The window's valid rows and columns are clipped once per output, so the
 * inner loops carry no bounds tests. Backward spreads dout / (K*K) over the
 * same windows; overlapping windows (stride < K) add. */
#include "core/cpu.h"
#include "dtrain/core.h"
#include "dtrain/nn.h"

static int avgpool_out(int H, int K, int stride, int pad) { return (H + 2 * pad - K) / stride + 1; }

/* [*lo, *hi): the input rows (or columns) window o covers, clipped to [0, H). */
static void window(int o, int K, int stride, int pad, int H, int *lo, int *hi) {
    int a = o * stride - pad, b = a + K;
    *lo = a < 0 ? 0 : a;
    *hi = b > H ? H : b;
}

static void check_dims(int H, int W, int K, int stride, int pad) {
    /* PyTorch's own limits; a larger pad could make a window all padding. */
    DT_ASSERT(K >= 1 && stride >= 1 && pad >= 0 && 2 * pad <= K);
    DT_ASSERT(H + 2 * pad >= K && W + 2 * pad >= K);
}

DT_HOT void dt_avgpool2d_forward(float *out, const float *inp, int B, int C, int H, int W, int K,
                                 int stride, int pad) {
    check_dims(H, W, K, stride, pad);
    const int OH = avgpool_out(H, K, stride, pad), OW = avgpool_out(W, K, stride, pad);
    const float inv = 1.0f / (float)(K * K);
    for (size_t p = 0; p < (size_t)B * C; p++) {
        const float *x = inp + p * H * W;
        float *o = out + p * OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            int h0, h1;
            window(oh, K, stride, pad, H, &h0, &h1);
            for (int ow = 0; ow < OW; ow++) {
                int w0, w1;
                window(ow, K, stride, pad, W, &w0, &w1);
                float s = 0.0f;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) s += x[(size_t)ih * W + iw];
                o[(size_t)oh * OW + ow] = s * inv;
            }
        }
    }
}

DT_HOT void dt_avgpool2d_backward(float *dinp, const float *dout, int B, int C, int H, int W,
                                  int K, int stride, int pad) {
    if (!dinp) return;
    check_dims(H, W, K, stride, pad);
    const int OH = avgpool_out(H, K, stride, pad), OW = avgpool_out(W, K, stride, pad);
    const float inv = 1.0f / (float)(K * K);
    for (size_t p = 0; p < (size_t)B * C; p++) {
        float *d = dinp + p * H * W;
        const float *g = dout + p * OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            int h0, h1;
            window(oh, K, stride, pad, H, &h0, &h1);
            for (int ow = 0; ow < OW; ow++) {
                int w0, w1;
                window(ow, K, stride, pad, W, &w0, &w1);
                const float v = g[(size_t)oh * OW + ow] * inv;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) d[(size_t)ih * W + iw] += v;
            }
        }
    }
}
