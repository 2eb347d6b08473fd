/* The op-name tables of kernels/elementwise.h, generated from its X-macro lists. */
#include "kernels/elementwise.h"

const char *const tb_unary_op_names[TB_UNARY_COUNT] = {
#define TB_UNARY_NAME(id, name) [TB_UNARY_##id] = name,
    TB_UNARY_OP_LIST(TB_UNARY_NAME)
#undef TB_UNARY_NAME
};

const char *const tb_binary_op_names[TB_BINARY_COUNT] = {
#define TB_BINARY_NAME(id, name) [TB_BINARY_##id] = name,
    TB_BINARY_OP_LIST(TB_BINARY_NAME)
#undef TB_BINARY_NAME
};

const char *const tb_compare_op_names[TB_COMPARE_COUNT] = {
#define TB_COMPARE_NAME(id, name) [TB_COMPARE_##id] = name,
    TB_COMPARE_OP_LIST(TB_COMPARE_NAME)
#undef TB_COMPARE_NAME
};

const char *const tb_reduce_op_names[TB_REDUCE_COUNT] = {
#define TB_REDUCE_NAME(id, name) [TB_REDUCE_##id] = name,
    TB_REDUCE_OP_LIST(TB_REDUCE_NAME)
#undef TB_REDUCE_NAME
};
