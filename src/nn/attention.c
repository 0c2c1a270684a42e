/* Causal multi-head self-attention over nanoGPT's c_attn layout: token t holds
 * [q | k | v] (3C floats), head h at offset h*HS inside each part. Every (b, h)
 * is three GEMMs reading Q, K, V in place with leading dimension 3C, so nothing
 * is transposed or copied:
 *   forward:  S = scale Q K^T;  att = softmax(S + causal mask);  out = att V
 *   backward: dV += att^T dout;  datt = dout V^T;
 *             dS = att * (datt - rowsum(att * datt));
 *             dQ += scale dS K;  dK += scale dS^T Q
 * The full T x T products are computed and the upper triangle discarded; att
 * holds exact zeros there, so att V and the softmax backward need no mask.
 * Backward scratch is one T x T buffer (datt, then dS in place), reused for
 * every (b, h): dt_attention_scratch_floats = T*T.
 * This is grouped-query attention with as many kv heads as query heads: the
 * same GEMMs and softmax, run by attention_gqa.c. */
#include "dtrain/nn.h"

size_t dt_attention_scratch_floats(int B, int T, int C, int NH) {
    return dt_attention_gqa_scratch_floats(B, T, NH, NH, C / NH);
}

void dt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    dt_attention_gqa_forward(out, att, qkv, B, T, NH, NH, C / NH);
}

void dt_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att, int B,
                           int T, int C, int NH) {
    dt_attention_gqa_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NH, C / NH);
}
