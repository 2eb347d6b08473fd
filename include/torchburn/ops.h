/* Tensor-level operations: validate arguments, broadcast, handle strides and dtypes, split work over
 * the thread pool, and call the kernels of the active ISA. This is what the Python `torchburn.ops`
 * module, the compile backend and the eager API call.
 *
 * Conventions: `out` is an uninitialized tb_tensor that receives a new contiguous tensor (the caller
 * releases it). Floating inputs (f32, f16, bf16) are computed in f32 and stored in the result dtype;
 * float64 and integer inputs are refused with TB_ERR_DTYPE (torchburn computes in f32 and never
 * silently narrows f64) except where an op says otherwise. Non-contiguous or non-f32 inputs may be
 * converted into a temporary (a counted copy, see tb_tensor_copy_count). */
#ifndef TORCHBURN_OPS_H
#define TORCHBURN_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "torchburn/status.h"
#include "torchburn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Op identifiers are the kernel enums (tb_unary_op, ...) from src/kernels/elementwise.h; their
 * numbering is exposed to Python through the name tables. */
TB_API TB_NODISCARD tb_status tb_op_unary(int op, const tb_tensor *x, float alpha, float lo, float hi, tb_tensor *out);
/* a op b with broadcasting; result dtype out_dtype (a float dtype). */
TB_API TB_NODISCARD tb_status tb_op_binary(int op, const tb_tensor *a, const tb_tensor *b, tb_dtype out_dtype, tb_tensor *out);
/* Comparison with broadcasting -> bool tensor. */
TB_API TB_NODISCARD tb_status tb_op_compare(int op, const tb_tensor *a, const tb_tensor *b, tb_tensor *out);
/* where(cond, a, b) with broadcasting of all three; cond must be bool. */
TB_API TB_NODISCARD tb_status tb_op_where(const tb_tensor *cond, const tb_tensor *a, const tb_tensor *b,
                                          tb_dtype out_dtype, tb_tensor *out);

/* Reductions over the dims set in `dim_mask` (bit d = reduce dim d; 0 = all dims). */
TB_API TB_NODISCARD tb_status tb_op_reduce(int op, const tb_tensor *x, uint32_t dim_mask, bool keepdim, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_mean(const tb_tensor *x, uint32_t dim_mask, bool keepdim, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_var(const tb_tensor *x, uint32_t dim_mask, int64_t correction, bool keepdim,
                                        bool take_sqrt, tb_tensor *out);
/* argmax/argmin over one dim, or over the flattened tensor when has_dim is false -> int64. */
TB_API TB_NODISCARD tb_status tb_op_arg_reduce(bool is_max, const tb_tensor *x, bool has_dim, int64_t dim, bool keepdim,
                                               tb_tensor *out);

TB_API TB_NODISCARD tb_status tb_op_softmax(const tb_tensor *x, int64_t dim, bool log, tb_tensor *out);
/* Normalizes over the last `normalized_ndim` dims; weight/bias (may be NULL) have that trailing shape. */
TB_API TB_NODISCARD tb_status tb_op_layer_norm(const tb_tensor *x, int normalized_ndim, const tb_tensor *weight,
                                               const tb_tensor *bias, float eps, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_rms_norm(const tb_tensor *x, int normalized_ndim, const tb_tensor *weight,
                                             float eps, tb_tensor *out);

/* torch.matmul semantics (1-D, 2-D, batched with broadcasting). */
TB_API TB_NODISCARD tb_status tb_op_matmul(const tb_tensor *a, const tb_tensor *b, tb_tensor *out);
/* y = activation(x @ weight^T + bias) + residual; x [..., K], weight [N, K], bias [N] or NULL,
 * residual broadcastable to [..., N] or NULL. activation is a tb_activation. */
TB_API TB_NODISCARD tb_status tb_op_linear(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                                           int activation, const tb_tensor *residual, tb_tensor *out);
/* torch.nn.functional.scaled_dot_product_attention on [..., H, T, D] (3-D or 4-D). mask: bool (True =
 * attend) or float (added), broadcastable to [B, Hq, Tq, Tk]; NULL for none. scale NaN means
 * 1/sqrt(D). GQA (Hq a multiple of Hkv) only when enable_gqa. */
TB_API TB_NODISCARD tb_status tb_op_attention(const tb_tensor *q, const tb_tensor *k, const tb_tensor *v,
                                              const tb_tensor *mask, bool causal, float scale, bool enable_gqa,
                                              tb_tensor *out);

/* Rotary embedding: x [..., T, D] (rotary over the first 2*half = D... see docs), cos/sin broadcastable
 * to [..., T, D/2]. */
TB_API TB_NODISCARD tb_status tb_op_rope(const tb_tensor *x, const tb_tensor *cos, const tb_tensor *sin, bool interleaved,
                                         tb_tensor *out);
/* Rows of weight [V, E] picked by integer indices (any shape) -> [..., E]; an index out of range is an
 * error naming it. */
TB_API TB_NODISCARD tb_status tb_op_embedding(const tb_tensor *weight, const tb_tensor *indices, tb_tensor *out);

/* Concatenation along dim (stack: along a new dim). Inputs share dtype and all other dims. */
TB_API TB_NODISCARD tb_status tb_op_cat(int count, const tb_tensor *const *tensors, int64_t dim, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_stack(int count, const tb_tensor *const *tensors, int64_t dim, tb_tensor *out);
/* A contiguous copy in dtype (any dtype to any dtype). */
TB_API TB_NODISCARD tb_status tb_op_cast(const tb_tensor *x, tb_dtype dtype, tb_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
