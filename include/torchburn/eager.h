/* The eager layer under turbo_torch: dtype-generic tensor ops with PyTorch's semantics (type
 * promotion, broadcasting, exact float64 and integer math) over the op table of
 * torchburn/op_table.h. float32 contiguous data takes the SIMD kernels of the active ISA; every other
 * dtype and layout takes portable loops computed in double (floats) or int64 (integers and bool).
 *
 * Conventions: `out` either is zeroed (a new contiguous result is allocated into it) or already holds
 * a writable tensor of the result's shape (out= and in-place forms write into it, any strides, any
 * dtype the result can be cast to). Operands are described by tb_eager_operand so that a Python
 * scalar needs no tensor. */
#ifndef TORCHBURN_EAGER_H
#define TORCHBURN_EAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "torchburn/op_table.h"
#include "torchburn/status.h"
#include "torchburn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor, or a scalar (tensor NULL) held as double and int64 (both exact for its value). */
typedef struct tb_eager_operand {
    const tb_tensor *tensor;
    double f;
    int64_t i;
} tb_eager_operand;

/* ---- dtype rules ---- */
typedef enum tb_dtype_category { TB_CATEGORY_BOOL = 0, TB_CATEGORY_INTEGRAL = 1, TB_CATEGORY_FLOATING = 2 } tb_dtype_category;
TB_API tb_dtype_category tb_dtype_category_of(tb_dtype dtype);
/* torch.promote_types. */
TB_API tb_dtype tb_promote_types(tb_dtype a, tb_dtype b);

/* torch.result_type over a list of operands, with PyTorch's three priority tiers: tensors with
 * dims, 0-dim tensors, and Python scalars (bool/int/float; for those pass is_scalar and their kind
 * as dtype TB_BOOL, TB_I64 or TB_F64 — a float scalar counts as the default float dtype). */
typedef struct tb_result_type_state {
    int dim_result, zero_result, scalar_result; /* -1: none yet */
} tb_result_type_state;
TB_API void tb_result_type_init(tb_result_type_state *state);
TB_API void tb_result_type_add(tb_result_type_state *state, tb_dtype dtype, int ndim, bool is_scalar,
                               tb_dtype default_float);
TB_API tb_dtype tb_result_type_finish(const tb_result_type_state *state);

/* The result dtype of a unary / binary op given its input (or promoted) dtype. */
TB_API tb_dtype tb_pw_unary_result_dtype(tb_pw_unary op, tb_dtype input, tb_dtype default_float);
TB_API tb_dtype tb_pw_binary_result_dtype(tb_pw_binary op, tb_dtype promoted, tb_dtype default_float);
/* The dtype a binary op computes in (FDIV: float; CMP: the promoted dtype). */
TB_API tb_dtype tb_pw_binary_compute_dtype(tb_pw_binary op, tb_dtype promoted, tb_dtype default_float);

/* ---- pointwise ---- */

/* One element of a unary op in the float domain (the scalar formula of the table; TEST ops give 0/1). */
TB_API double tb_pw_eval_unary(tb_pw_unary op, double x, const tb_pw_params *params);
/* One element of a binary op in the float domain (bitwise ops: NaN), and of a unary op's derivative. */
TB_API double tb_pw_eval_binary(tb_pw_binary op, double a, double b, const tb_pw_params *params);
TB_API double tb_pw_eval_unary_grad(tb_pw_unary op, double x, double y, const tb_pw_params *params);

/* out = op(x) computed in compute_dtype's domain (see tb_pw_unary_result_dtype) and stored in out's
 * dtype (out_dtype when out is zeroed). Errors: TB_ERR_DTYPE for an op the dtype does not have
 * (bitwise_not of a float, neg of a bool). */
TB_API TB_NODISCARD tb_status tb_eager_unary(tb_pw_unary op, const tb_tensor *x, const tb_pw_params *params,
                                             tb_dtype compute_dtype, tb_dtype out_dtype, tb_tensor *out);
/* out = a op b with broadcasting, computed in compute_dtype, stored in out_dtype. Integer division
 * by zero is TB_ERR_INVALID_ARGUMENT ("ZeroDivisionError"). */
TB_API TB_NODISCARD tb_status tb_eager_binary(tb_pw_binary op, tb_eager_operand a, tb_eager_operand b,
                                              const tb_pw_params *params, tb_dtype compute_dtype,
                                              tb_dtype out_dtype, tb_tensor *out);
/* where(cond, a, b), broadcast, result in out_dtype. */
TB_API TB_NODISCARD tb_status tb_eager_where(const tb_tensor *cond, tb_eager_operand a, tb_eager_operand b,
                                             tb_dtype out_dtype, tb_tensor *out);

/* Backward of a unary op: out = grad * d op/dx (x, y: the forward input and output, same shape). */
TB_API TB_NODISCARD tb_status tb_eager_unary_backward(tb_pw_unary op, const tb_tensor *grad, const tb_tensor *x,
                                                      const tb_tensor *y, const tb_pw_params *params, tb_tensor *out);
/* Backward of a binary op w.r.t. operand `which` (0: a, 1: b), at the broadcast shape of grad:
 * out = grad * d(a op b)/d(which). y is the forward result. */
TB_API TB_NODISCARD tb_status tb_eager_binary_backward(tb_pw_binary op, int which, const tb_tensor *grad,
                                                       tb_eager_operand a, tb_eager_operand b, const tb_tensor *y,
                                                       const tb_pw_params *params, tb_tensor *out);

/* ---- reductions (their `out` is always a new tensor: any previous content is ignored) ---- */
#define TB_EAGER_REDUCE_LIST(X) \
    X(SUM, "sum") X(PROD, "prod") X(MEAN, "mean") X(AMAX, "amax") X(AMIN, "amin") X(ALL, "all") X(ANY, "any") \
    X(NANSUM, "nansum") X(LOGSUMEXP, "logsumexp") X(COUNT_NONZERO, "count_nonzero")

typedef enum tb_eager_reduce_op {
#define TB_EAGER_REDUCE_ENUM(id, name) TB_EAGER_REDUCE_##id,
    TB_EAGER_REDUCE_LIST(TB_EAGER_REDUCE_ENUM)
#undef TB_EAGER_REDUCE_ENUM
    TB_EAGER_REDUCE_COUNT
} tb_eager_reduce_op;
TB_API extern const char *const tb_eager_reduce_names[TB_EAGER_REDUCE_COUNT];

/* Reduces the dims in dim_mask (bit d; 0 = all dims) in out_dtype's domain (sums of floats
 * accumulate in double; integers in int64). amax/amin of an empty reduction is an error naming it. */
TB_API TB_NODISCARD tb_status tb_eager_reduce(tb_eager_reduce_op op, const tb_tensor *x, uint32_t dim_mask, bool keepdim,
                                              tb_dtype out_dtype, tb_tensor *out);
/* var/std with a (possibly fractional) correction; float results. */
TB_API TB_NODISCARD tb_status tb_eager_var(const tb_tensor *x, uint32_t dim_mask, double correction, bool keepdim,
                                           bool take_sqrt, tb_tensor *out);
/* Vector p-norm (p = inf, -inf, 0, or any positive/negative real). */
TB_API TB_NODISCARD tb_status tb_eager_norm(const tb_tensor *x, double p, uint32_t dim_mask, bool keepdim,
                                            tb_dtype out_dtype, tb_tensor *out);
/* max/min along one dim with the index of the first extreme (NaN counts as the extreme). dim < 0
 * with flatten: argmax over all elements (indices only). */
TB_API TB_NODISCARD tb_status tb_eager_max_dim(bool is_max, const tb_tensor *x, int64_t dim, bool keepdim,
                                               tb_tensor *values, tb_tensor *indices);
/* The gradient of prod over dim_mask (0: all) given g expanded to x's shape; exact with zeros. */
TB_API TB_NODISCARD tb_status tb_eager_prod_backward(const tb_tensor *x, uint32_t dim_mask, const tb_tensor *g,
                                                     tb_tensor *out);
/* cumsum / cumprod / logcumsumexp (floats only) along dim in out_dtype. */
typedef enum tb_eager_scan_op { TB_EAGER_SCAN_SUM = 0, TB_EAGER_SCAN_PROD = 1, TB_EAGER_SCAN_LOGSUMEXP = 2 } tb_eager_scan_op;
TB_API TB_NODISCARD tb_status tb_eager_cumulative(tb_eager_scan_op op, const tb_tensor *x, int64_t dim, tb_dtype out_dtype,
                                                  tb_tensor *out);

/* ---- linear algebra ---- */
/* torch.matmul for any float/integer dtype (float32 takes the GEMM; others a blocked loop). */
TB_API TB_NODISCARD tb_status tb_eager_matmul(const tb_tensor *a, const tb_tensor *b, tb_tensor *out);

/* ---- index ops (out is always a new tensor) ---- */
/* x.index_select(dim, index): index is a 0/1-D integer tensor; a bad index is an error naming it. */
TB_API TB_NODISCARD tb_status tb_eager_index_select(const tb_tensor *x, int64_t dim, const tb_tensor *index, tb_tensor *out);
/* x.index_add(dim, index, source, alpha) (out of place). */
TB_API TB_NODISCARD tb_status tb_eager_index_add(const tb_tensor *x, int64_t dim, const tb_tensor *index,
                                                 const tb_tensor *source, double alpha, tb_tensor *out);
/* torch.gather(x, dim, index). */
TB_API TB_NODISCARD tb_status tb_eager_gather(const tb_tensor *x, int64_t dim, const tb_tensor *index, tb_tensor *out);
/* x.scatter(dim, index, src) out of place; reduce: 0 replace, 1 add, 2 multiply, 3 amax, 4 amin. */
TB_API TB_NODISCARD tb_status tb_eager_scatter(const tb_tensor *x, int64_t dim, const tb_tensor *index,
                                               tb_eager_operand src, int reduce, tb_tensor *out);

/* x[indices]: advanced indexing with one entry per leading dim of x (nindices <= ndim; NULL: the whole
 * dim). Integer entries are broadcast together; a bool/uint8 entry stands for the coordinates of its
 * nonzero elements over as many dims as it has. The indexed dims are replaced by the broadcast shape
 * where the first of them was when they are adjacent, else moved to the front (PyTorch's rule). */
TB_API TB_NODISCARD tb_status tb_eager_index(const tb_tensor *x, int nindices, const tb_tensor *const *indices,
                                             tb_tensor *out);
/* x.index_put(indices, values, accumulate) out of place: values (broadcast to x[indices]'s shape) are
 * written (or added) at the indexed positions. With repeated positions and no accumulate the last wins. */
TB_API TB_NODISCARD tb_status tb_eager_index_put(const tb_tensor *x, int nindices, const tb_tensor *const *indices,
                                                 const tb_tensor *values, bool accumulate, tb_tensor *out);

/* ---- rearrangements (out is always a new contiguous tensor) ---- */
/* torch.flip over the dims in dim_mask. */
TB_API TB_NODISCARD tb_status tb_eager_flip(const tb_tensor *x, uint32_t dim_mask, tb_tensor *out);
/* torch.roll: shifts[d] (any sign) along each dim d of x (ndim entries). */
TB_API TB_NODISCARD tb_status tb_eager_roll(const tb_tensor *x, const int64_t *shifts, tb_tensor *out);
/* torch.tril (upper false) / torch.triu (upper true) over the last two dims (x has >= 2). */
TB_API TB_NODISCARD tb_status tb_eager_triangle(const tb_tensor *x, int64_t diagonal, bool upper, tb_tensor *out);

/* Stable sort along dim (NaN largest); values in x's dtype, int64 indices. */
TB_API TB_NODISCARD tb_status tb_eager_sort(const tb_tensor *x, int64_t dim, bool descending, tb_tensor *values,
                                            tb_tensor *indices);
/* Coordinates of the nonzero elements, [count, ndim] int64 in row-major order. */
TB_API TB_NODISCARD tb_status tb_eager_nonzero(const tb_tensor *x, tb_tensor *out);

/* ---- helpers shared by the bindings and autograd ---- */
/* Sums `grad` down to `shape` (undoing broadcasting). The result may be grad itself, retained. */
TB_API TB_NODISCARD tb_status tb_eager_sum_to(const tb_tensor *grad, int ndim, const int64_t *shape, tb_tensor *out);
/* A new contiguous tensor of shape filled with value, in dtype. */
TB_API TB_NODISCARD tb_status tb_eager_full(tb_dtype dtype, int ndim, const int64_t *shape, double value, tb_tensor *out);
/* Reads element `index` (flat, row-major over the view) as double / int64. */
TB_API double tb_eager_get_f(const tb_tensor *x, int64_t index);
TB_API int64_t tb_eager_get_i(const tb_tensor *x, int64_t index);

#ifdef __cplusplus
}
#endif
#endif
