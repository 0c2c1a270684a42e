/* The compressor interface: parsing, sizes, dispatch, error feedback. */
#include "dtrain/compress.h"

#include "compress_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dt_status dt_comp_parse(const char *s, dt_comp_cfg *out) {
    memset(out, 0, sizeof *out);
    out->segment = 256;
    if (strcmp(s, "none") == 0) out->kind = DT_COMP_NONE;
    else if (strcmp(s, "fp16") == 0) out->kind = DT_COMP_FP16;
    else if (strcmp(s, "bf16") == 0) out->kind = DT_COMP_BF16;
    else if (strcmp(s, "int8") == 0) out->kind = DT_COMP_INT8;
    else if (strcmp(s, "sign") == 0) out->kind = DT_COMP_SIGN;
    else if (strncmp(s, "topk:", 5) == 0) {
        char *end;
        double r = strtod(s + 5, &end);
        if (end != s + 5 && strcmp(end, ":fp16") == 0) {
            out->fp16_values = true; /* topk:RATIO:fp16: the kept values as fp16 */
            end += 5;
        }
        if (end == s + 5 || *end || !(r > 0 && r <= 1))
            return dt_errorf(DT_ERR_INVALID, "--compress %s: topk:RATIO[:fp16] needs 0 < RATIO <= 1", s);
        out->kind = DT_COMP_TOPK;
        out->ratio = (float)r;
    } else if (strncmp(s, "powersgd:", 9) == 0) {
        char *end;
        long r = strtol(s + 9, &end, 10);
        if (end == s + 9 || *end || r < 1 || r > 256)
            return dt_errorf(DT_ERR_INVALID, "--compress %s: powersgd:RANK needs 1 <= RANK <= 256", s);
        out->kind = DT_COMP_POWERSGD;
        out->rank = (int)r;
    } else {
        return dt_errorf(DT_ERR_INVALID, "--compress must be none, fp16, bf16, int8, topk:RATIO, sign or powersgd:RANK, got '%s'", s);
    }
    return DT_OK;
}

void dt_comp_name(const dt_comp_cfg *c, char *buf, size_t n) {
    static const char *names[] = {"none", "fp16", "bf16", "int8", "topk", "sign", "powersgd"};
    if (c->kind == DT_COMP_TOPK) snprintf(buf, n, "topk:%g%s", (double)c->ratio, c->fp16_values ? ":fp16" : "");
    else if (c->kind == DT_COMP_POWERSGD) snprintf(buf, n, "powersgd:%d", c->rank);
    else snprintf(buf, n, "%s", c->kind < DT_COMP_COUNT ? names[c->kind] : "?");
}

size_t dt_comp_max_bytes(const dt_comp_cfg *c, size_t n) {
    switch (c->kind) {
    case DT_COMP_FP16:
    case DT_COMP_BF16: return 2 * n;
    case DT_COMP_INT8: return n + 4 * ((n + c->segment - 1) / (c->segment ? c->segment : 1));
    case DT_COMP_TOPK: {
        size_t k = dt_comp_topk_k(c, n);
        return 10 + 10 * k + (c->fp16_values ? 2 : 4) * k;
    }
    case DT_COMP_SIGN: return dt_comp_sign_bytes(c, n);
    default: return 4 * n;
    }
}

size_t dt_comp_encode(const dt_comp_cfg *c, const float *x, size_t n, uint8_t *out, dt_rng *rng) {
    switch (c->kind) {
    case DT_COMP_FP16: dt_f32_to_f16_n(x, out, n); return 2 * n;
    case DT_COMP_BF16: dt_f32_to_bf16_n(x, out, n); return 2 * n;
    case DT_COMP_INT8: return dt_comp_int8_encode(c, x, n, out, rng);
    case DT_COMP_TOPK: return dt_comp_topk_encode(c, x, n, out);
    case DT_COMP_SIGN: return dt_comp_sign_encode(c, x, n, out);
    default:
        memcpy(out, x, 4 * n);
        return 4 * n;
    }
}

dt_status dt_comp_decode(const dt_comp_cfg *c, const uint8_t *in, size_t bytes, float *y, size_t n) {
    switch (c->kind) {
    case DT_COMP_FP16:
    case DT_COMP_BF16:
        if (bytes != 2 * n) return dt_errorf(DT_ERR_FORMAT, "compressed gradient: %zu bytes for %zu fp16 values", bytes, n);
        if (c->kind == DT_COMP_FP16) dt_f16_to_f32_n(in, y, n);
        else dt_bf16_to_f32_n(in, y, n);
        return DT_OK;
    case DT_COMP_INT8: return dt_comp_int8_decode(c, in, bytes, y, n);
    case DT_COMP_TOPK: return dt_comp_topk_decode(c, in, bytes, y, n);
    case DT_COMP_SIGN: return dt_comp_sign_decode(c, in, bytes, y, n);
    default:
        if (bytes != 4 * n) return dt_errorf(DT_ERR_FORMAT, "gradient: %zu bytes for %zu values", bytes, n);
        memcpy(y, in, 4 * n);
        return DT_OK;
    }
}

size_t dt_comp_encode_ef(const dt_comp_cfg *c, const float *g, float *e, size_t n, uint8_t *out,
                         float *tmp, dt_rng *rng) {
    if (c->kind == DT_COMP_SIGN) return dt_comp_sign_encode_ef(c, g, e, n, out);
    if (c->kind == DT_COMP_INT8) return dt_comp_int8_encode_ef(c, g, e, n, out, rng);
    if (c->kind == DT_COMP_TOPK) return dt_comp_topk_encode_ef(c, g, e, n, out);
    for (size_t i = 0; i < n; i++) e[i] += g[i];
    size_t bytes = dt_comp_encode(c, e, n, out, rng);
    dt_status st = dt_comp_decode(c, out, bytes, tmp, n);
    DT_ASSERT(st == DT_OK); /* our own encoding always decodes */
    for (size_t i = 0; i < n; i++) e[i] -= tmp[i];
    return bytes;
}
