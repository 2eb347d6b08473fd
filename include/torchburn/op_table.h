/* The pointwise op table: every elementwise op of the eager API (turbo_torch) is declared here once,
 * and its enum, name, dtype rule, kernels (all dtypes, every ISA), backward formula and Python binding
 * are derived from that declaration (see docs/adding_an_op.md).
 *
 * Each list entry is X(ID, name, simd) — `name` is the torch spelling as a token — where `simd` names the f32 SIMD kernel of
 * kernels/elementwise.h (TB_UNARY_<simd>) that serves contiguous float32 data, or NONE when the op
 * runs on the portable loop only. The scalar formula of op ID is tb_pw_<id> in
 * src/eager/pointwise_math.h (double for the float domain, int64 for integer dtypes), and its
 * derivative is tb_pw_grad_<id>; a missing formula is a compile error, so the table cannot drift.
 *
 * Dtype rules (PyTorch's):
 *   FLOAT  unary: computed in the input's float dtype; integer and bool inputs give the default float
 *          dtype (sqrt(int tensor) is float32).
 *   SAME   unary: the input's dtype is kept; integers are computed exactly in int64 (abs, neg, ...).
 *   TEST   unary: a bool result (isnan, ...).
 *   ARITH  binary: the promoted dtype of both operands (result_type), integers exact.
 *   FDIV   binary: the promoted dtype, or the default float dtype when both are integral (true divide,
 *          atan2, ...).
 *   CMP    binary: a bool result, computed in the promoted dtype.
 *   LOGIC  binary: a bool result of the operands' truth values.
 *   BITS   binary: integral and bool operands only (bitwise and/or/xor, shifts). */
#ifndef TORCHBURN_OP_TABLE_H
#define TORCHBURN_OP_TABLE_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- unary ---- */
#define TB_PW_UNARY_FLOAT_LIST(X)      \
    X(EXP, exp, EXP)                 \
    X(EXP2, exp2, NONE)              \
    X(EXPM1, expm1, NONE)            \
    X(LOG, log, LOG)                 \
    X(LOG2, log2, NONE)              \
    X(LOG10, log10, NONE)            \
    X(LOG1P, log1p, NONE)            \
    X(SQRT, sqrt, SQRT)              \
    X(RSQRT, rsqrt, RSQRT)           \
    X(SIN, sin, SIN)                 \
    X(COS, cos, COS)                 \
    X(TAN, tan, NONE)                \
    X(ASIN, asin, NONE)              \
    X(ACOS, acos, NONE)              \
    X(ATAN, atan, NONE)              \
    X(SINH, sinh, NONE)              \
    X(COSH, cosh, NONE)              \
    X(TANH, tanh, TANH)              \
    X(ASINH, asinh, NONE)            \
    X(ACOSH, acosh, NONE)            \
    X(ATANH, atanh, NONE)            \
    X(SIGMOID, sigmoid, SIGMOID)     \
    X(LOGIT, logit, NONE)            \
    X(ERF, erf, NONE)                \
    X(ERFC, erfc, NONE)              \
    X(ERFINV, erfinv, NONE)          \
    X(LGAMMA, lgamma, NONE)          \
    X(DIGAMMA, digamma, NONE)        \
    X(RECIPROCAL, reciprocal, NONE)  \
    X(GELU, gelu, GELU)              /* exact erf form */ \
    X(GELU_TANH, gelu_tanh, GELU_TANH) \
    X(SILU, silu, SILU)              \
    X(MISH, mish, NONE)              \
    X(SOFTPLUS, softplus, NONE)      /* alpha = beta, hi = threshold */ \
    X(ELU, elu, NONE)                /* alpha */ \
    X(CELU, celu, NONE)              /* alpha */ \
    X(SELU, selu, NONE)              \
    X(LEAKY_RELU, leaky_relu, NONE)  /* alpha = negative slope */ \
    X(HARDTANH, hardtanh, NONE)      /* lo, hi */ \
    X(HARDSIGMOID, hardsigmoid, NONE) \
    X(HARDSWISH, hardswish, NONE)    \
    X(SINC, sinc, NONE)              \
    X(FRAC, frac, NONE)              \
    X(LOGSIGMOID, logsigmoid, NONE)  \
    X(POW_SCALAR, pow_scalar, NONE)  /* x ** alpha with a float exponent */ \
    X(SOFTSIGN, softsign, NONE)      \
    X(TANHSHRINK, tanhshrink, NONE)

#define TB_PW_UNARY_SAME_LIST(X)       \
    X(NEG, neg, NEG)                 \
    X(ABS, abs, ABS)                 \
    X(SIGN, sign, NONE)              \
    X(SGN, sgn, NONE)                \
    X(FLOOR, floor, NONE)            \
    X(CEIL, ceil, NONE)              \
    X(ROUND, round, NONE)            /* half to even; alpha = decimals */ \
    X(TRUNC, trunc, NONE)            \
    X(RELU, relu, RELU)              \
    X(SQUARE, square, NONE)          \
    X(CLAMP, clamp, NONE)            /* lo, hi (+-inf or the int range when absent) */ \
    X(POSITIVE, positive, NONE)      \
    X(BITWISE_NOT, bitwise_not, NONE) /* integral and bool only */ \
    X(NAN_TO_NUM, nan_to_num, NONE)  /* alpha = nan, lo = neginf, hi = posinf */

#define TB_PW_UNARY_TEST_LIST(X)       \
    X(ISNAN, isnan, NONE)            \
    X(ISINF, isinf, NONE)            \
    X(ISFINITE, isfinite, NONE)      \
    X(ISPOSINF, isposinf, NONE)      \
    X(ISNEGINF, isneginf, NONE)      \
    X(SIGNBIT, signbit, NONE)        \
    X(LOGICAL_NOT, logical_not, NONE)

#define TB_PW_UNARY_LIST(X) TB_PW_UNARY_FLOAT_LIST(X) TB_PW_UNARY_SAME_LIST(X) TB_PW_UNARY_TEST_LIST(X)

/* Unary ops whose derivative reads only their result (autograd saves y, not x, as PyTorch does: an
 * in-place change of the input after the op is then not an error). All others save only x. */
#define TB_PW_GRAD_FROM_RESULT_LIST(X) X(EXP) X(EXP2) X(EXPM1) X(SQRT) X(RSQRT) X(TANH) X(SIGMOID) X(RECIPROCAL) \
    X(RELU) X(TAN) X(ERFINV)

typedef enum tb_pw_unary {
#define TB_PW_UNARY_ENUM(id, name, simd) TB_PW_##id,
    TB_PW_UNARY_LIST(TB_PW_UNARY_ENUM)
#undef TB_PW_UNARY_ENUM
    TB_PW_UNARY_COUNT
} tb_pw_unary;

/* ---- binary ---- */
#define TB_PW_BINARY_ARITH_LIST(X)     \
    X(ADD, add, ADD)                 /* a + alpha * b */ \
    X(SUB, sub, SUB)                 /* a - alpha * b */ \
    X(MUL, mul, MUL)                 \
    X(MAXIMUM, maximum, MAXIMUM)     \
    X(MINIMUM, minimum, MINIMUM)     \
    X(FMAX, fmax, NONE)              /* NaN-ignoring */ \
    X(FMIN, fmin, NONE)              \
    X(FLOOR_DIVIDE, floor_divide, NONE) \
    X(REMAINDER, remainder, NONE)    /* sign of the divisor (Python's %) */ \
    X(FMOD, fmod, NONE)              /* sign of the dividend (C's fmod) */ \
    X(POW, pow, POW)

#define TB_PW_BINARY_FDIV_LIST(X)      \
    X(DIV, div, DIV)                 \
    X(ATAN2, atan2, NONE)            \
    X(HYPOT, hypot, NONE)            \
    X(COPYSIGN, copysign, NONE)      \
    X(XLOGY, xlogy, NONE)            \
    X(LOGADDEXP, logaddexp, NONE)    \
    X(NEXTAFTER, nextafter, NONE)

#define TB_PW_BINARY_CMP_LIST(X) \
    X(EQ, eq, NONE) X(NE, ne, NONE) X(LT, lt, NONE) X(LE, le, NONE) X(GT, gt, NONE) X(GE, ge, NONE)

#define TB_PW_BINARY_LOGIC_LIST(X) \
    X(LOGICAL_AND, logical_and, NONE) X(LOGICAL_OR, logical_or, NONE) X(LOGICAL_XOR, logical_xor, NONE)

#define TB_PW_BINARY_BITS_LIST(X)      \
    X(BITWISE_AND, bitwise_and, NONE) \
    X(BITWISE_OR, bitwise_or, NONE)  \
    X(BITWISE_XOR, bitwise_xor, NONE) \
    X(LSHIFT, bitwise_left_shift, NONE) \
    X(RSHIFT, bitwise_right_shift, NONE)

#define TB_PW_BINARY_LIST(X) TB_PW_BINARY_ARITH_LIST(X) TB_PW_BINARY_FDIV_LIST(X) TB_PW_BINARY_CMP_LIST(X) \
    TB_PW_BINARY_LOGIC_LIST(X) TB_PW_BINARY_BITS_LIST(X)

typedef enum tb_pw_binary {
#define TB_PW_BINARY_ENUM(id, name, simd) TB_PWB_##id,
    TB_PW_BINARY_LIST(TB_PW_BINARY_ENUM)
#undef TB_PW_BINARY_ENUM
    TB_PW_BINARY_COUNT
} tb_pw_binary;

typedef enum tb_pw_kind {
    TB_PW_KIND_FLOAT, TB_PW_KIND_SAME, TB_PW_KIND_TEST,
    TB_PW_KIND_ARITH, TB_PW_KIND_FDIV, TB_PW_KIND_CMP, TB_PW_KIND_LOGIC, TB_PW_KIND_BITS,
} tb_pw_kind;

/* Per-call scalars of an op (unused fields are ignored): alpha (add/sub scale, slopes, exponents),
 * lo/hi (clamp bounds, thresholds). */
typedef struct tb_pw_params {
    double alpha, lo, hi;
} tb_pw_params;

/* Name, kind and f32 SIMD kernel id (-1 for none) of each op, indexed by enum. */
typedef struct tb_pw_info {
    const char *name;
    tb_pw_kind kind;
    int simd; /* a tb_unary_op / tb_binary_op of kernels/elementwise.h, or -1 */
} tb_pw_info;

extern const tb_pw_info tb_pw_unary_info[TB_PW_UNARY_COUNT];
extern const tb_pw_info tb_pw_binary_info[TB_PW_BINARY_COUNT];

#ifdef __cplusplus
}
#endif
#endif
