/* Element types and their trait table (size, name, conversion to and from f32). Compute in torchburn is
 * f32; every other type is converted at load and store through these traits. */
#ifndef TORCHBURN_DTYPE_H
#define TORCHBURN_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The numbering is part of the ABI (Python sees it); append only. */
#define TB_DTYPE_LIST(X)   \
    X(F32, "float32", 4)   \
    X(F64, "float64", 8)   \
    X(F16, "float16", 2)   \
    X(BF16, "bfloat16", 2) \
    X(I8, "int8", 1)       \
    X(U8, "uint8", 1)      \
    X(I16, "int16", 2)     \
    X(I32, "int32", 4)     \
    X(I64, "int64", 8)     \
    X(BOOL, "bool", 1)

typedef enum tb_dtype {
#define TB_DTYPE_ENUM(id, name, size) TB_##id,
    TB_DTYPE_LIST(TB_DTYPE_ENUM)
#undef TB_DTYPE_ENUM
    TB_DTYPE_COUNT
} tb_dtype;

/* Converts `count` elements from `src` (of the trait's type) to f32, and back. Contiguous only. */
typedef void (*tb_to_f32_fn)(const void *src, float *dst, int64_t count);
typedef void (*tb_from_f32_fn)(const float *src, void *dst, int64_t count);

typedef struct tb_dtype_traits {
    const char *name;  /* PyTorch's spelling: "float32", "bfloat16", ... */
    size_t size;       /* bytes per element */
    bool is_floating;
    bool is_signed;
    tb_to_f32_fn to_f32;
    tb_from_f32_fn from_f32; /* floats round to nearest even; ints as tb_float_to_int_like_torch;
                                bool is x != 0 (NaN is true) */
} tb_dtype_traits;

/* The trait table, indexed by tb_dtype. */
TB_API extern const tb_dtype_traits tb_dtype_table[TB_DTYPE_COUNT];

static inline bool tb_dtype_valid(int dtype) { return dtype >= 0 && dtype < TB_DTYPE_COUNT; }
static inline size_t tb_dtype_size(tb_dtype dtype) { return tb_dtype_table[dtype].size; }
static inline const char *tb_dtype_name(tb_dtype dtype) {
    return tb_dtype_valid((int)dtype) ? tb_dtype_table[dtype].name : "invalid";
}

/* Float -> integer conversion matching PyTorch's CPU casts on x86-64: truncation toward zero through
 * int32 (int64 for TB_I64); NaN and out-of-range values give INT32_MIN / INT64_MIN; narrower targets
 * keep the low bits of the int32 (so -3.0 -> uint8 is 253). Returns the value to store after
 * narrowing with a plain integer cast. */
TB_API int64_t tb_float_to_int_like_torch(double value, tb_dtype dtype);

/* Looks a dtype up by name ("float32", "f32", "bfloat16", ...). */
TB_API tb_status tb_dtype_from_name(const char *name, tb_dtype *out);

/* Scalar IEEE half and bfloat16 conversions: round to nearest even, NaN stays NaN (quiet), overflow
 * goes to infinity, subnormals are exact. */
static inline float tb_f32_from_bits(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}
static inline uint32_t tb_f32_to_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static inline float tb_bf16_to_f32(uint16_t h) { return tb_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t tb_f32_to_bf16(float value) {
    uint32_t bits = tb_f32_to_bits(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x0040u); /* quiet NaN, sign kept */
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

static inline float tb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f)
        return tb_f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        /* zero or subnormal: mantissa * 2^-24, exact in f32 */
        float magnitude = (float)mantissa * 5.9604644775390625e-8f;
        return sign ? -magnitude : magnitude;
    }
    return tb_f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

static inline uint16_t tb_f32_to_f16(float value) {
    uint32_t bits = tb_f32_to_bits(value);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
    if (magnitude >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (magnitude < 0x38800000u) {
        /* result is subnormal or zero: scale so that the f16 subnormal unit (2^-24) becomes 1.0 and
         * let f32 addition round to nearest even. */
        float scaled = tb_f32_from_bits(magnitude) + 0.5f;
        return (uint16_t)(sign | (uint16_t)(tb_f32_to_bits(scaled) - 0x3f000000u));
    }
    uint32_t rounding = 0xfffu + ((magnitude >> 13) & 1u);
    magnitude += rounding;
    return (uint16_t)(sign | (uint16_t)((magnitude - 0x38000000u) >> 13));
}

#ifdef __cplusplus
}
#endif
#endif
