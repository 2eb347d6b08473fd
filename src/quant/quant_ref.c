/* Scalar reference kernels of the quantized matmul, written straight from the definitions in
 * include/torchburn/quant.h. Always compiled; the SIMD kernels are tested against them, and they run
 * when TORCHBURN_ISA=scalar.
 *   A32: y[m, n] = bias[n] + sum_k x[m, k] * (q[n, k] * s[n, group(k)])   (f32, in k order)
 *   A8:  int8: y = (sx[m] * s[n]) * float(sum_k xq[m, k] * q[n, k]) + bias[n]   (exact integer dot)
 *        int4: y = sx[m] * (sum_g s[n, g] * float(sum_{k in g} xq[m, k] * q[n, k])) + bias[n]
 * Prepared A8 row: tb_quant_act_header, then xq int8[K] in natural order. */
#include <string.h>

#include "quant/quant_kernels.h"

static inline int int4_at(const uint8_t *row, int64_t k) {
    uint8_t byte = row[k >> 1];
    return (int)((k & 1) ? (byte >> 4) : (byte & 15)) - 8;
}

static void a32_rows(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    const int64_t k_count = w->k;
    const int shift = w->type == TB_QUANT_INT4 ? __builtin_ctzll((unsigned long long)w->group_size) : 0;
    for (int64_t n = n_begin; n < n_end; n++) {
        const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
        const float *scales = w->scales + n * w->scales_per_row;
        const float bias = run->bias ? run->bias[n] : 0.0f;
        for (int64_t m = 0; m < run->m; m++) {
            const float *x = run->x + m * run->x_row_stride;
            float acc = 0.0f;
            if (w->type == TB_QUANT_INT8) {
                const int8_t *q = (const int8_t *)row;
                for (int64_t k = 0; k < k_count; k++)
                    acc += x[k] * ((float)q[k] * scales[0]);
            } else {
                for (int64_t k = 0; k < k_count; k++)
                    acc += x[k] * ((float)int4_at(row, k) * scales[k >> shift]); /* group = 2^shift */
            }
            run->y[m * run->y_row_stride + n] = acc + bias;
        }
    }
}

static int64_t a8_act_row_bytes(const tb_quant_weight *w) {
    return TB_QUANT_ACT_HEADER_BYTES + tb_quant_round_up(w->k, 64);
}

static void a8_act_prepare(const tb_quant_weight *w, const float *x, unsigned char *dst) {
    int8_t *xq = (int8_t *)(dst + TB_QUANT_ACT_HEADER_BYTES);
    tb_quant_act_header header = {.scale = tb_quant_act_quantize_row(x, w->k, xq)};
    memcpy(dst, &header, sizeof header);
}

static void a8_rows(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    const int64_t k_count = w->k, group = w->group_size;
    for (int64_t n = n_begin; n < n_end; n++) {
        const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
        const float *scales = w->scales + n * w->scales_per_row;
        const float bias = run->bias ? run->bias[n] : 0.0f;
        for (int64_t m = 0; m < run->m; m++) {
            const unsigned char *act = run->act + m * run->act_row_bytes;
            tb_quant_act_header header;
            memcpy(&header, act, sizeof header);
            const int8_t *xq = (const int8_t *)(act + TB_QUANT_ACT_HEADER_BYTES);
            float out;
            if (w->type == TB_QUANT_INT8) {
                const int8_t *q = (const int8_t *)row;
                int64_t dot = 0;
                for (int64_t k = 0; k < k_count; k++)
                    dot += (int32_t)xq[k] * q[k];
                out = (header.scale * scales[0]) * (float)dot;
            } else {
                float acc = 0.0f;
                for (int64_t g = 0; g < k_count / group; g++) {
                    int32_t dot = 0;
                    for (int64_t k = g * group; k < (g + 1) * group; k++)
                        dot += (int32_t)xq[k] * int4_at(row, k);
                    acc += scales[g] * (float)dot;
                }
                out = header.scale * acc;
            }
            run->y[m * run->y_row_stride + n] = out + bias;
        }
    }
}

static int64_t no_act(const tb_quant_weight *w) {
    (void)w;
    return 0;
}

static const tb_quant_impl scalar_a32 = {.act_row_bytes = no_act, .act_prepare = NULL, .rows = a32_rows};
static const tb_quant_impl scalar_a8 = {
    .act_row_bytes = a8_act_row_bytes, .act_prepare = a8_act_prepare, .rows = a8_rows};

const tb_quant_impl *tb_quant_impl_scalar(tb_quant_type type, tb_quant_act act) {
    (void)type;
    return act == TB_QUANT_ACT_INT8 ? &scalar_a8 : &scalar_a32;
}
