/* The dtype trait table: names, sizes, and contiguous conversions to and from f32. */
#include "torchburn/dtype.h"

#include <math.h>

#define TB_DEFINE_FLOAT_TO_F32(suffix, type, expr)                               \
    static void to_f32_##suffix(const void *src, float *dst, int64_t count) {    \
        const type *in = (const type *)src;                                      \
        for (int64_t i = 0; i < count; i++)                                      \
            dst[i] = (expr);                                                     \
    }

TB_DEFINE_FLOAT_TO_F32(f32, float, in[i])
TB_DEFINE_FLOAT_TO_F32(f64, double, (float)in[i])
TB_DEFINE_FLOAT_TO_F32(f16, uint16_t, tb_f16_to_f32(in[i]))
TB_DEFINE_FLOAT_TO_F32(bf16, uint16_t, tb_bf16_to_f32(in[i]))
TB_DEFINE_FLOAT_TO_F32(i8, int8_t, (float)in[i])
TB_DEFINE_FLOAT_TO_F32(u8, uint8_t, (float)in[i])
TB_DEFINE_FLOAT_TO_F32(i16, int16_t, (float)in[i])
TB_DEFINE_FLOAT_TO_F32(i32, int32_t, (float)in[i])
TB_DEFINE_FLOAT_TO_F32(i64, int64_t, (float)in[i])
TB_DEFINE_FLOAT_TO_F32(bool, uint8_t, in[i] ? 1.0f : 0.0f)

static void from_f32_f32(const float *src, void *dst, int64_t count) {
    memcpy(dst, src, (size_t)count * sizeof(float));
}
static void from_f32_f64(const float *src, void *dst, int64_t count) {
    double *out = (double *)dst;
    for (int64_t i = 0; i < count; i++)
        out[i] = src[i];
}
static void from_f32_f16(const float *src, void *dst, int64_t count) {
    uint16_t *out = (uint16_t *)dst;
    for (int64_t i = 0; i < count; i++)
        out[i] = tb_f32_to_f16(src[i]);
}
static void from_f32_bf16(const float *src, void *dst, int64_t count) {
    uint16_t *out = (uint16_t *)dst;
    for (int64_t i = 0; i < count; i++)
        out[i] = tb_f32_to_bf16(src[i]);
}

/* float -> integer the way PyTorch's CPU casts behave on x86-64 (C leaves this undefined): truncate
 * toward zero into int32 (int64 for int64 targets); NaN and values outside that range give the
 * "integer indefinite" INT32_MIN / INT64_MIN; narrower types keep the low bits (wrap). */
int64_t tb_float_to_int_like_torch(double value, tb_dtype dtype) {
    if (dtype == TB_I64) {
        if (!(value > -9223372036854775808.0 - 1.0 && value < 9223372036854775808.0))
            return INT64_MIN;
        return (int64_t)value;
    }
    if (!(value > -2147483649.0 && value < 2147483648.0))
        return INT32_MIN;
    return (int32_t)value;
}

#define TB_DEFINE_F32_TO_INT(suffix, type, dtype)                                 \
    static void from_f32_##suffix(const float *src, void *dst, int64_t count) {   \
        type *out = (type *)dst;                                                  \
        for (int64_t i = 0; i < count; i++)                                       \
            out[i] = (type)(uint64_t)tb_float_to_int_like_torch(src[i], dtype);   \
    }

TB_DEFINE_F32_TO_INT(i8, int8_t, TB_I8)
TB_DEFINE_F32_TO_INT(u8, uint8_t, TB_U8)
TB_DEFINE_F32_TO_INT(i16, int16_t, TB_I16)
TB_DEFINE_F32_TO_INT(i32, int32_t, TB_I32)
TB_DEFINE_F32_TO_INT(i64, int64_t, TB_I64)

static void from_f32_bool(const float *src, void *dst, int64_t count) {
    uint8_t *out = (uint8_t *)dst;
    for (int64_t i = 0; i < count; i++)
        out[i] = src[i] != 0.0f; /* NaN is true, as in PyTorch */
}

const tb_dtype_traits tb_dtype_table[TB_DTYPE_COUNT] = {
    [TB_F32] = {"float32", 4, true, true, to_f32_f32, from_f32_f32},
    [TB_F64] = {"float64", 8, true, true, to_f32_f64, from_f32_f64},
    [TB_F16] = {"float16", 2, true, true, to_f32_f16, from_f32_f16},
    [TB_BF16] = {"bfloat16", 2, true, true, to_f32_bf16, from_f32_bf16},
    [TB_I8] = {"int8", 1, false, true, to_f32_i8, from_f32_i8},
    [TB_U8] = {"uint8", 1, false, false, to_f32_u8, from_f32_u8},
    [TB_I16] = {"int16", 2, false, true, to_f32_i16, from_f32_i16},
    [TB_I32] = {"int32", 4, false, true, to_f32_i32, from_f32_i32},
    [TB_I64] = {"int64", 8, false, true, to_f32_i64, from_f32_i64},
    [TB_BOOL] = {"bool", 1, false, false, to_f32_bool, from_f32_bool},
};

tb_status tb_dtype_from_name(const char *name, tb_dtype *out) {
    static const struct {
        const char *alias;
        tb_dtype dtype;
    } aliases[] = {
        {"f32", TB_F32}, {"float", TB_F32},  {"f64", TB_F64}, {"double", TB_F64}, {"f16", TB_F16},
        {"half", TB_F16}, {"bf16", TB_BF16}, {"long", TB_I64}, {"int", TB_I32},   {"short", TB_I16},
    };
    for (int d = 0; d < TB_DTYPE_COUNT; d++) {
        if (strcmp(name, tb_dtype_table[d].name) == 0) {
            *out = (tb_dtype)d;
            return TB_OK;
        }
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (strcmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].dtype;
            return TB_OK;
        }
    }
    return tb_error_set(TB_ERR_DTYPE, "unknown dtype name '%s'", name);
}
