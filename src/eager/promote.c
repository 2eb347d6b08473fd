/* PyTorch's type promotion: promote_types between two dtypes and result_type over operands with the
 * three priority tiers (tensors with dims, 0-dim tensors, Python scalars). */
#include "torchburn/eager.h"

tb_dtype_category tb_dtype_category_of(tb_dtype dtype) {
    switch (dtype) {
    case TB_BOOL: return TB_CATEGORY_BOOL;
    case TB_F32: case TB_F64: case TB_F16: case TB_BF16: return TB_CATEGORY_FLOATING;
    default: return TB_CATEGORY_INTEGRAL;
    }
}

/* Width rank among floats (f16 and bf16 share a rank and promote to f32 together). */
static int float_rank(tb_dtype d) { return d == TB_F64 ? 3 : d == TB_F32 ? 2 : 1; }
static int int_bits(tb_dtype d) {
    switch (d) {
    case TB_I8: case TB_U8: return 8;
    case TB_I16: return 16;
    case TB_I32: return 32;
    default: return 64;
    }
}

tb_dtype tb_promote_types(tb_dtype a, tb_dtype b) {
    if (a == b)
        return a;
    if (a == TB_BOOL)
        return b;
    if (b == TB_BOOL)
        return a;
    tb_dtype_category ca = tb_dtype_category_of(a), cb = tb_dtype_category_of(b);
    if (ca == TB_CATEGORY_FLOATING && cb == TB_CATEGORY_FLOATING) {
        int ra = float_rank(a), rb = float_rank(b);
        if (ra == rb) /* f16 with bf16 */
            return TB_F32;
        return ra > rb ? a : b;
    }
    if (ca == TB_CATEGORY_FLOATING)
        return a;
    if (cb == TB_CATEGORY_FLOATING)
        return b;
    /* both integral and different */
    if (a == TB_U8 || b == TB_U8) {
        tb_dtype other = a == TB_U8 ? b : a;
        return other == TB_I8 ? TB_I16 : other;
    }
    return int_bits(a) >= int_bits(b) ? a : b;
}

void tb_result_type_init(tb_result_type_state *state) {
    state->dim_result = state->zero_result = state->scalar_result = -1;
}

static int promote_tier(int current, tb_dtype dtype) {
    return current < 0 ? (int)dtype : (int)tb_promote_types((tb_dtype)current, dtype);
}

void tb_result_type_add(tb_result_type_state *state, tb_dtype dtype, int ndim, bool is_scalar, tb_dtype default_float) {
    if (is_scalar) {
        tb_dtype kind = tb_dtype_category_of(dtype) == TB_CATEGORY_FLOATING ? default_float : dtype;
        state->scalar_result = promote_tier(state->scalar_result, kind);
    } else if (ndim == 0) {
        state->zero_result = promote_tier(state->zero_result, dtype);
    } else {
        state->dim_result = promote_tier(state->dim_result, dtype);
    }
}

/* A lower tier only wins when it is of a higher category (bool < integral < floating). */
static int combine(int higher, int lower) {
    if (higher < 0)
        return lower;
    if (lower < 0)
        return higher;
    tb_dtype_category ch = tb_dtype_category_of((tb_dtype)higher), cl = tb_dtype_category_of((tb_dtype)lower);
    if (ch == TB_CATEGORY_FLOATING)
        return higher;
    if (ch == TB_CATEGORY_BOOL || cl == TB_CATEGORY_FLOATING)
        return (int)tb_promote_types((tb_dtype)higher, (tb_dtype)lower);
    return higher;
}

tb_dtype tb_result_type_finish(const tb_result_type_state *state) {
    int result = combine(state->dim_result, combine(state->zero_result, state->scalar_result));
    return result < 0 ? TB_F32 : (tb_dtype)result;
}
