/* Helpers shared by the ops layer: dtype checks, f32 staging of inputs, and the broadcast iterator. */
#ifndef TORCHBURN_OPS_INTERNAL_H
#define TORCHBURN_OPS_INTERNAL_H

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "torchburn/alloc.h"
#include "torchburn/ops.h"
#include "torchburn/thread_pool.h"

/* Elements per parallel task for memory-bound loops (~64 KiB of f32). */
enum { TB_OPS_GRAIN = 16384, TB_OPS_MAX_OPERANDS = 4 };

/* TB_ERR_DTYPE unless dtype is f32, f16 or bf16; `what` names the op and argument. */
tb_status tb_ops_require_float(tb_dtype dtype, const char *what);

/* A contiguous f32 version of x (x itself, retained, if it already is one; else a counted copy). */
tb_status tb_ops_as_f32(const tb_tensor *x, tb_tensor *out);

/* Converts an f32 result into `dtype` (a no-op retain for f32). Releases *f32 result. */
tb_status tb_ops_finish_dtype(tb_tensor *f32_result, tb_dtype dtype, tb_tensor *out);

/* Iteration over a broadcast shape for up to 4 operands whose element strides are given per dim
 * (0 for broadcast dims). Dims are merged where every operand allows it and the last dim is the
 * "row" handed to kernels. */
typedef struct tb_broadcast_iter {
    int ndim;
    int operands;
    int64_t shape[TB_MAX_DIMS];
    int64_t strides[TB_OPS_MAX_OPERANDS][TB_MAX_DIMS];
    int64_t rows;      /* product of shape[0 .. ndim-2] */
    int64_t row_len;   /* shape[ndim-1] */
} tb_broadcast_iter;

void tb_broadcast_iter_init(tb_broadcast_iter *it, int ndim, const int64_t *shape, int operands,
                            const int64_t strides[][TB_MAX_DIMS]);
/* Element offsets of row `row` for each operand. */
void tb_broadcast_iter_offsets(const tb_broadcast_iter *it, int64_t row, int64_t *offsets);

/* Strides of x expanded to a broadcast shape (0 on broadcast dims). */
void tb_ops_expanded_strides(const tb_tensor *x, int ndim, const int64_t *shape, int64_t *strides);

/* A per-thread f32 scratch buffer of at least n floats (grown with tb_alloc; NULL on failure). */
float *tb_ops_scratch(int slot, int64_t n);

/* Checks a per-feature parameter (weight/bias of a norm) has x's trailing `normalized_ndim` dims and
 * stages it as contiguous f32; NULL param gives a zeroed *out. `what` names it in errors. */
tb_status tb_ops_stage_normalized_param(const tb_tensor *param, const tb_tensor *x, int normalized_ndim,
                                        const char *what, tb_tensor *out);

/* dtype promotion for binary float ops: f32 if either is f32 or they differ, else the shared dtype. */
tb_dtype tb_ops_promote(tb_dtype a, tb_dtype b);

#endif
