/* The int8-per-row and grouped-int4 weight formats: quantize, dequantize, dimension checks, the
 * weight view, and the activation quantizer shared by the A8 kernels. The formulas are written out in
 * include/torchburn/quant.h and docs/quantization.md; the Python tests check them bit for bit against
 * the same formulas in PyTorch. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "quant/quant_kernels.h"
#include "torchburn/thread_pool.h"

enum { ABS_MASK = 0x7fffffffu, INF_BITS = 0x7f800000u };

static inline uint32_t abs_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits & ABS_MASK;
}

static inline float float_from_bits(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* Round half to even for |v| < 2^22 (all callers stay within +-128): adding 1.5 * 2^23 pushes the
 * fraction bits out under the default rounding mode, subtracting brings the integer back. Matches
 * torch.round and rintf, and unlike rintf it vectorizes without SSE4.1. */
static inline float round_half_even(float v) {
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    return (v + magic) - magic;
}

static inline float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

tb_status tb_quant_check_dims(tb_quant_type type, int64_t n, int64_t k, int64_t group_size) {
    if (type != TB_QUANT_INT8 && type != TB_QUANT_INT4)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant: unknown weight type %d", (int)type);
    if (n < 0 || k < 0)
        return tb_error_set(TB_ERR_SHAPE, "quant: weight shape [%lld, %lld] has a negative dim", (long long)n,
                            (long long)k);
    if (k > 0 && n > INT64_MAX / k)
        return tb_error_set(TB_ERR_SHAPE, "quant: weight shape [%lld, %lld] is too large", (long long)n,
                            (long long)k);
    if (type == TB_QUANT_INT4) {
        if (group_size != 32 && group_size != 64 && group_size != 128 && group_size != 256)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "int4: group_size must be 32, 64, 128 or 256, got %lld",
                                (long long)group_size);
        if (k % group_size != 0)
            return tb_error_set(TB_ERR_SHAPE,
                                "int4: K = %lld is not a multiple of group_size = %lld (pad the input features "
                                "to a multiple of the group size, or pick a group size that divides K)",
                                (long long)k, (long long)group_size);
    }
    return TB_OK;
}

tb_status tb_quant_weight_init(tb_quant_type type, int64_t n, int64_t k, int64_t group_size, const void *data,
                               const float *scales, tb_quant_weight *out) {
    if (!out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant_weight_init: out is NULL");
    TB_TRY(tb_quant_check_dims(type, n, k, group_size));
    if (n * k > 0 && (!data || !scales))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant_weight_init: %s is NULL", data ? "scales" : "data");
    memset(out, 0, sizeof *out);
    out->type = type;
    out->n = n;
    out->k = k;
    out->group_size = type == TB_QUANT_INT4 ? group_size : k;
    out->row_bytes = type == TB_QUANT_INT4 ? k / 2 : k;
    out->scales_per_row = type == TB_QUANT_INT4 ? k / group_size : 1;
    out->data = data;
    out->scales = scales;
    return TB_OK;
}

int64_t tb_quant_weight_bytes(const tb_quant_weight *w) {
    return w->n * w->row_bytes + w->n * w->scales_per_row * (int64_t)sizeof(float);
}

/* ---- quantize ---- */

typedef struct quantize_job {
    const float *w;
    int64_t k, group_size; /* group_size == k for int8 */
    int qmax;              /* 127 or 7 */
    int8_t *q;             /* int8 output, or NULL */
    uint8_t *packed;       /* int4 output, or NULL */
    float *scales;
    atomic_llong first_bad_row; /* smallest row holding an inf; INT64_MAX when none */
} quantize_job;

/* Quantizes one group of `count` weights to integers in [-qmax-1, qmax] (as floats) in out, returns
 * the scale; sets *has_inf when an inf is present (the caller reports it). */
static float quantize_group(const float *w, int64_t count, int qmax, float *out, bool *has_inf) {
    uint32_t amax_bits = 0;
    bool inf = false;
    for (int64_t i = 0; i < count; i++) {
        uint32_t bits = abs_bits(w[i]);
        amax_bits = bits > amax_bits ? bits : amax_bits;
        inf |= bits == INF_BITS;
    }
    if (inf) {
        *has_inf = true;
        for (int64_t i = 0; i < count; i++)
            out[i] = 0.0f;
        return 0.0f;
    }
    float scale = amax_bits > INF_BITS ? NAN : float_from_bits(amax_bits) / (float)qmax;
    if (!(scale > 0.0f)) { /* 0 (all zero, or a subnormal max that underflowed) or NaN: q = 0 */
        for (int64_t i = 0; i < count; i++)
            out[i] = 0.0f;
        return amax_bits > INF_BITS ? NAN : 0.0f;
    }
    const float lo = (float)(-qmax - 1), hi = (float)qmax;
    for (int64_t i = 0; i < count; i++)
        out[i] = clampf(round_half_even(w[i] / scale), lo, hi);
    return scale;
}

static void quantize_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    quantize_job *job = context;
    float values[256];
    const int64_t k = job->k;
    const int64_t chunk = job->packed ? job->group_size : 256; /* int8: one scale, values in chunks */
    for (int64_t row = begin; row < end; row++) {
        const float *w = job->w + row * k;
        bool has_inf = false;
        if (job->packed) {
            const int64_t groups = k / job->group_size;
            uint8_t *packed = job->packed + row * (k / 2);
            for (int64_t g = 0; g < groups; g++) {
                float scale = quantize_group(w + g * chunk, chunk, job->qmax, values, &has_inf);
                job->scales[row * groups + g] = scale;
                for (int64_t i = 0; i < chunk; i += 2) {
                    unsigned lo = (unsigned)((int)values[i] + 8), hi = (unsigned)((int)values[i + 1] + 8);
                    packed[(g * chunk + i) / 2] = (uint8_t)(lo | (hi << 4));
                }
            }
        } else {
            /* int8: the scale needs the whole row first. */
            uint32_t amax_bits = 0;
            for (int64_t i = 0; i < k; i++) {
                uint32_t bits = abs_bits(w[i]);
                amax_bits = bits > amax_bits ? bits : amax_bits;
                has_inf |= bits == INF_BITS;
            }
            int8_t *q = job->q + row * k;
            float scale = amax_bits > INF_BITS ? NAN : float_from_bits(amax_bits) / 127.0f;
            job->scales[row] = scale > 0.0f ? scale : (amax_bits > INF_BITS ? NAN : 0.0f);
            if (!has_inf) {
                for (int64_t i = 0; i < k; i++)
                    q[i] = scale > 0.0f ? (int8_t)clampf(round_half_even(w[i] / scale), -127.0f, 127.0f) : 0;
            }
        }
        if (has_inf) {
            long long expected = atomic_load(&job->first_bad_row);
            while ((long long)row < expected && !atomic_compare_exchange_weak(&job->first_bad_row, &expected, row)) {
            }
        }
    }
}

static tb_status report_inf(const char *what, const float *w, int64_t k, int64_t row) {
    int64_t col = 0;
    while (col < k && abs_bits(w[row * k + col]) != INF_BITS)
        col++;
    return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                        "%s: weight[%lld, %lld] is %s; infinite weights cannot be quantized (no finite scale "
                        "represents them): clamp or fix the weights first",
                        what, (long long)row, (long long)col, w[row * k + col] > 0 ? "inf" : "-inf");
}

static int64_t rows_grain(int64_t k) { return k > 0 ? (65536 + k - 1) / k : 1; }

tb_status tb_quantize_int8(const float *w, int64_t n, int64_t k, int8_t *q, float *scales) {
    TB_TRY(tb_quant_check_dims(TB_QUANT_INT8, n, k, 0));
    if (n == 0)
        return TB_OK;
    if ((k > 0 && (!w || !q)) || !scales)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quantize_weight_int8: NULL buffer");
    quantize_job job = {.w = w, .k = k, .group_size = k, .qmax = 127, .q = q, .scales = scales};
    atomic_init(&job.first_bad_row, INT64_MAX);
    tb_parallel_for(n, rows_grain(k), quantize_rows, &job);
    long long bad = atomic_load(&job.first_bad_row);
    if (bad != INT64_MAX)
        return report_inf("quantize_weight_int8", w, k, bad);
    return TB_OK;
}

tb_status tb_quantize_int4_grouped(const float *w, int64_t n, int64_t k, int64_t group_size, uint8_t *packed,
                                   float *scales) {
    TB_TRY(tb_quant_check_dims(TB_QUANT_INT4, n, k, group_size));
    if (n == 0 || k == 0)
        return TB_OK;
    if (!w || !packed || !scales)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quantize_weight_int4_grouped: NULL buffer");
    quantize_job job = {.w = w, .k = k, .group_size = group_size, .qmax = 7, .packed = packed, .scales = scales};
    atomic_init(&job.first_bad_row, INT64_MAX);
    tb_parallel_for(n, rows_grain(k), quantize_rows, &job);
    long long bad = atomic_load(&job.first_bad_row);
    if (bad != INT64_MAX)
        return report_inf("quantize_weight_int4_grouped", w, k, bad);
    return TB_OK;
}

/* ---- dequantize ---- */

typedef struct dequantize_job {
    const void *data;
    const float *scales;
    int64_t k, group_size;
    bool int4;
    float *w;
} dequantize_job;

static void dequantize_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const dequantize_job *job = context;
    const int64_t k = job->k;
    for (int64_t row = begin; row < end; row++) {
        float *w = job->w + row * k;
        if (job->int4) {
            const uint8_t *packed = (const uint8_t *)job->data + row * (k / 2);
            const float *scales = job->scales + row * (k / job->group_size);
            for (int64_t i = 0; i < k; i += 2) {
                float scale = scales[i / job->group_size];
                w[i] = (float)((int)(packed[i / 2] & 15) - 8) * scale;
                w[i + 1] = (float)((int)(packed[i / 2] >> 4) - 8) * scale;
            }
        } else {
            const int8_t *q = (const int8_t *)job->data + row * k;
            float scale = job->scales[row];
            for (int64_t i = 0; i < k; i++)
                w[i] = (float)q[i] * scale;
        }
    }
}

tb_status tb_dequantize_int8(const int8_t *q, const float *scales, int64_t n, int64_t k, float *w) {
    TB_TRY(tb_quant_check_dims(TB_QUANT_INT8, n, k, 0));
    if (n == 0 || k == 0)
        return TB_OK;
    if (!q || !scales || !w)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "dequantize_weight_int8: NULL buffer");
    dequantize_job job = {.data = q, .scales = scales, .k = k, .group_size = k, .int4 = false, .w = w};
    tb_parallel_for(n, rows_grain(k), dequantize_rows, &job);
    return TB_OK;
}

tb_status tb_dequantize_int4_grouped(const uint8_t *packed, const float *scales, int64_t n, int64_t k,
                                     int64_t group_size, float *w) {
    TB_TRY(tb_quant_check_dims(TB_QUANT_INT4, n, k, group_size));
    if (n == 0 || k == 0)
        return TB_OK;
    if (!packed || !scales || !w)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "dequantize_weight_int4_grouped: NULL buffer");
    dequantize_job job = {.data = packed, .scales = scales, .k = k, .group_size = group_size, .int4 = true, .w = w};
    tb_parallel_for(n, rows_grain(k), dequantize_rows, &job);
    return TB_OK;
}

/* ---- activations (A8 kernels) ---- */

void tb_quant_act_quantize_span(const float *x, int64_t count, float inverse, int8_t *xq) {
    for (int64_t i = 0; i < count; i++)
        xq[i] = (int8_t)clampf(round_half_even(x[i] * inverse), -127.0f, 127.0f);
}

float tb_quant_act_finish_scale(uint32_t amax_bits, const float *x, int64_t k, int8_t *xq, bool *done) {
    *done = true;
    if (amax_bits >= INF_BITS || amax_bits == 0) {
        if (k > 0)
            memset(xq, 0, (size_t)k);
        return amax_bits == 0 ? 0.0f : NAN;
    }
    const float amax = float_from_bits(amax_bits);
    if (!(127.0f / amax < INFINITY)) { /* amax so small that 127/amax overflows: divide instead */
        for (int64_t i = 0; i < k; i++)
            xq[i] = (int8_t)clampf(round_half_even(x[i] / (amax / 127.0f)), -127.0f, 127.0f);
        return amax / 127.0f;
    }
    *done = false;
    return amax / 127.0f;
}

float tb_quant_act_quantize_row(const float *x, int64_t k, int8_t *xq) {
    uint32_t amax_bits = 0;
    for (int64_t i = 0; i < k; i++) {
        uint32_t bits = abs_bits(x[i]);
        amax_bits = bits > amax_bits ? bits : amax_bits;
    }
    bool done;
    const float scale = tb_quant_act_finish_scale(amax_bits, x, k, xq, &done);
    if (!done)
        tb_quant_act_quantize_span(x, k, 127.0f / float_from_bits(amax_bits), xq);
    return scale;
}
