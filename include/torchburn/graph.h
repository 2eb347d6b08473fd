/* The graph layer: a typed op IR built node by node (by the torch.compile backend or by C callers),
 * its canonical serialization and BLAKE3 structural hash, the two-level plan cache, the passes (dead
 * code elimination, fusion, memory planning) and the executor of prepared plans.
 *
 * Model: a graph is a list of nodes in topological order. Each node has an op, typed params and up to
 * TB_GRAPH_MAX_INPUTS input values; it defines 1..TB_GRAPH_MAX_OUTPUTS output values (consecutive
 * value ids). Every value has a static dtype, shape and stride layout, inferred when its node is
 * added. Inputs are INPUT nodes (their layout is part of the key); tensor data never is. Scalars are
 * params. A compiled plan runs the graph on input data pointers and writes the outputs into
 * caller-provided contiguous buffers; everything else lives in one planned arena per plan. */
#ifndef TORCHBURN_GRAPH_H
#define TORCHBURN_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/dtype.h"
#include "torchburn/status.h"
#include "torchburn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TB_GRAPH_MAX_INPUTS = 64, TB_GRAPH_MAX_OUTPUTS = 5 };

/* ---- typed params ----
 * Each param set lists its fields once: I(name) is an int64, IA(name, n) an int64[n], F(name) a
 * double. The structs, the by-name field table (used by the Python builder), and the canonical
 * serialization are all derived from these lists. Unset fields are 0. */
#define TB_PARAMS_none(I, IA, F) I(unused)
#define TB_PARAMS_input(I, IA, F) I(dtype) I(ndim) IA(shape, 8) IA(strides, 8)
#define TB_PARAMS_full(I, IA, F) I(dtype) I(ndim) IA(shape, 8) F(value)
#define TB_PARAMS_shape(I, IA, F) I(ndim) IA(shape, 8)
#define TB_PARAMS_permute(I, IA, F) I(ndim) IA(dims, 8)
#define TB_PARAMS_slice(I, IA, F) I(dim) I(start) I(end) I(step)
/* op: index into tb_graph_unary_names (torch spelling); alpha: leaky_relu slope / elu alpha /
 * softplus beta; lo/hi: clamp bounds (use +-inf for none) / softplus threshold (hi). */
#define TB_PARAMS_unary(I, IA, F) I(op) I(dtype) F(alpha) F(lo) F(hi)
/* op: index into tb_graph_binary_names; alpha: threshold of threshold_backward. */
#define TB_PARAMS_binary(I, IA, F) I(op) I(dtype) F(alpha)
/* x op scalar, or scalar op x when reverse. */
#define TB_PARAMS_scalar(I, IA, F) I(op) I(dtype) I(reverse) F(scalar) F(alpha)
/* op: index into tb_graph_compare_names; scalar/reverse for COMPARE_SCALAR only. */
#define TB_PARAMS_compare(I, IA, F) I(op) I(reverse) F(scalar)
#define TB_PARAMS_dtype(I, IA, F) I(dtype)
/* op: index into tb_graph_reduce_names; dim_mask bit d reduces dim d (0: all dims). */
#define TB_PARAMS_reduce(I, IA, F) I(op) I(dim_mask) I(keepdim) I(dtype)
#define TB_PARAMS_var(I, IA, F) I(dim_mask) I(correction) I(keepdim) I(take_sqrt)
#define TB_PARAMS_softmax(I, IA, F) I(dim) I(log) I(dtype)
/* epilogue: made by the fusion pass, 1 + index of an elementwise program applied to the normalized rows
 * while they are in cache (its input 0 is the normalized value; the node's inputs after x, weight and
 * bias are its other inputs, broadcast to x). */
#define TB_PARAMS_norm(I, IA, F) I(normalized_ndim) I(has_weight) I(has_bias) I(epilogue) F(eps)
#define TB_PARAMS_group_norm(I, IA, F) I(groups) I(has_weight) I(has_bias) F(eps)
#define TB_PARAMS_batch_norm(I, IA, F) I(has_weight) I(has_bias) F(eps)
#define TB_PARAMS_batch_norm_train(I, IA, F) I(has_weight) I(has_bias) I(has_running) F(momentum) F(eps)
/* activation: tb_activation numbering (none, relu, gelu, gelu_tanh, silu, sigmoid, tanh). */
#define TB_PARAMS_matmul(I, IA, F) I(activation) I(has_bias) I(has_residual)
#define TB_PARAMS_conv2d(I, IA, F)                                                                     \
    IA(stride, 2) IA(padding, 2) IA(dilation, 2) I(groups) I(activation) I(has_bias) I(has_bn) \
        I(has_residual) F(bn_eps)
#define TB_PARAMS_pool(I, IA, F)                                                                      \
    IA(kernel, 2) IA(stride, 2) IA(padding, 2) IA(dilation, 2) I(ceil_mode) I(count_include_pad) \
        I(divisor_override)
#define TB_PARAMS_adaptive_pool(I, IA, F) IA(output_size, 2)
/* layout: physical order of the output dims, outermost first (all zero: contiguous). */
#define TB_PARAMS_attention(I, IA, F) I(causal) I(has_mask) I(enable_gqa) IA(layout, 4) F(scale)
#define TB_PARAMS_cat(I, IA, F) I(dim)
/* program: index of the graph's elementwise program; dtype: the result's */
#define TB_PARAMS_fused(I, IA, F) I(program) I(dtype)
#define TB_PARAMS_conv2d_backward(I, IA, F) IA(stride, 2) IA(padding, 2) IA(dilation, 2) I(groups) IA(output_mask, 3)
#define TB_PARAMS_batch_norm_backward(I, IA, F) I(train) I(has_weight) I(has_running) I(has_save) IA(output_mask, 3) F(eps)
#define TB_PARAMS_layer_norm_backward(I, IA, F) I(normalized_ndim) I(has_weight) I(has_bias) IA(output_mask, 3)
#define TB_PARAMS_group_norm_backward(I, IA, F) I(groups) I(has_weight) IA(output_mask, 3)
#define TB_PARAMS_embedding_backward(I, IA, F) I(num_weights) I(padding_idx) I(scale_grad_by_freq)
/* reduction: 0 none, 1 mean, 2 sum (ATen's numbering). */
#define TB_PARAMS_loss(I, IA, F) I(reduction) I(ignore_index) I(has_weight) F(beta)
/* ops computed by the eager core (eager.h), see src/graph/exec_eager.c */
#define TB_PARAMS_max_dim(I, IA, F) I(dim) I(keepdim) I(is_max)
#define TB_PARAMS_sort(I, IA, F) I(dim) I(descending)
/* op: tb_eager_scan_op (0 cumsum, 1 cumprod, 2 logcumsumexp) */
#define TB_PARAMS_scan(I, IA, F) I(dim) I(op) I(dtype)
/* op: index into tb_eager_reduce_names (EAGER_REDUCE); p: the norm's order (VECTOR_NORM) */
#define TB_PARAMS_eager_reduce(I, IA, F) I(op) I(dim_mask) I(keepdim) I(dtype) F(p)
/* reduce: scatter's (0 replace, 1 add, 2 multiply, 3 amax, 4 amin); has_src 0: scatter `value`;
 * alpha: index_add's */
#define TB_PARAMS_index(I, IA, F) I(dim) I(reduce) I(has_src) F(value) F(alpha)
/* flip: the dims in dim_mask; roll: shifts[d] along each dim d */
#define TB_PARAMS_rearrange(I, IA, F) I(dim_mask) IA(shifts, 8)
/* tril (upper 0) / triu (upper 1) */
#define TB_PARAMS_triangle(I, IA, F) I(diagonal) I(upper)
/* p: the probability of zeroing an element */
#define TB_PARAMS_dropout(I, IA, F) F(p)
/* index_mask bit d: dim d is indexed by the next index input (in dim order) */
#define TB_PARAMS_advanced_index(I, IA, F) I(index_mask) I(accumulate)
/* op: a tb_pw_unary (binary 0) or tb_pw_binary (binary 1); scalar_side 1: b is `scalar`, 2: a is;
 * compute_dtype / dtype: the domain and the result's (tb_eager_unary / tb_eager_binary); alpha, lo, hi:
 * the op's tb_pw_params */
#define TB_PARAMS_pointwise(I, IA, F) \
    I(op) I(binary) I(scalar_side) I(compute_dtype) I(dtype) F(scalar) F(alpha) F(lo) F(hi)

#define TB_GRAPH_PARAM_SET_LIST(P) \
    P(none) P(input) P(full) P(shape) P(permute) P(slice) P(unary) P(binary) P(scalar) P(compare) P(dtype) \
    P(reduce) P(var) P(softmax) P(norm) P(group_norm) P(batch_norm) P(batch_norm_train) P(matmul) P(conv2d) \
    P(pool) P(adaptive_pool) P(attention) P(cat) P(fused) P(conv2d_backward) P(batch_norm_backward) \
    P(layer_norm_backward) P(group_norm_backward) P(embedding_backward) P(loss) P(max_dim) P(sort) \
    P(scan) P(eager_reduce) P(index) P(rearrange) P(triangle) P(advanced_index) P(pointwise) P(dropout)

#define TB_PARAM_FIELD_I(name) int64_t name;
#define TB_PARAM_FIELD_IA(name, n) int64_t name[n];
#define TB_PARAM_FIELD_F(name) double name;
#define TB_PARAM_STRUCT(set) \
    typedef struct tb_params_##set { TB_PARAMS_##set(TB_PARAM_FIELD_I, TB_PARAM_FIELD_IA, TB_PARAM_FIELD_F) } tb_params_##set;
TB_GRAPH_PARAM_SET_LIST(TB_PARAM_STRUCT)
#undef TB_PARAM_STRUCT

typedef union tb_graph_params {
#define TB_PARAM_MEMBER(set) tb_params_##set set;
    TB_GRAPH_PARAM_SET_LIST(TB_PARAM_MEMBER)
#undef TB_PARAM_MEMBER
} tb_graph_params;

/* ---- the op table ----
 * X(ID, "name", min inputs, max inputs, outputs, param set, shape inference, lowering)
 * Inputs in brackets are optional and present when the matching has_* param is 1. Shapes use the
 * letters of tensor.h. The inference and lowering functions live in src/graph/. */
#define TB_GRAPH_OP_LIST(X)                                                                                  \
    /* a graph input with the given dtype, shape and strides (elements) */                                  \
    X(INPUT, "input", 0, 0, 1, input, tb_infer_input, tb_lower_none)                                         \
    /* a constant-filled tensor */                                                                           \
    X(FULL, "full", 0, 0, 1, full, tb_infer_full, tb_lower_full)                                             \
    /* views (no compute; a reshape that cannot be a view becomes a copy) */                                 \
    X(VIEW, "view", 1, 1, 1, shape, tb_infer_view, tb_lower_view)                                            \
    X(PERMUTE, "permute", 1, 1, 1, permute, tb_infer_permute, tb_lower_view)                                 \
    X(EXPAND, "expand", 1, 1, 1, shape, tb_infer_expand, tb_lower_view)                                      \
    X(SLICE, "slice", 1, 1, 1, slice, tb_infer_slice, tb_lower_view)                                         \
    /* elementwise with broadcasting; computed in f32, stored in dtype */                                    \
    X(UNARY, "unary", 1, 1, 1, unary, tb_infer_unary, tb_lower_elementwise)                                  \
    X(BINARY, "binary", 2, 2, 1, binary, tb_infer_binary, tb_lower_elementwise)                              \
    X(BINARY_SCALAR, "binary_scalar", 1, 1, 1, scalar, tb_infer_unary_like, tb_lower_elementwise)            \
    X(COMPARE, "compare", 2, 2, 1, compare, tb_infer_compare, tb_lower_elementwise)                          \
    X(COMPARE_SCALAR, "compare_scalar", 1, 1, 1, compare, tb_infer_compare, tb_lower_elementwise)            \
    /* where(cond bool, a, b) */                                                                             \
    X(WHERE, "where", 3, 3, 1, dtype, tb_infer_where, tb_lower_elementwise)                                  \
    /* a contiguous copy in dtype (clone, to-dtype) */                                                       \
    X(COPY, "copy", 1, 1, 1, dtype, tb_infer_copy, tb_lower_elementwise)                                     \
    X(REDUCE, "reduce", 1, 1, 1, reduce, tb_infer_reduce, tb_lower_reduce)                                   \
    X(VAR, "var", 1, 1, 1, var, tb_infer_var, tb_lower_var)                                                  \
    X(SOFTMAX, "softmax", 1, 1, 1, softmax, tb_infer_softmax, tb_lower_softmax)                              \
    /* x [..., *normalized], [weight], [bias], [epilogue operands] -> out, mean, rstd (stats shaped        \
     * x[:-n] + [1]*n) */                                                                                   \
    X(LAYER_NORM, "layer_norm", 1, TB_GRAPH_MAX_INPUTS, 3, norm, tb_infer_layer_norm, tb_lower_norm)         \
    X(RMS_NORM, "rms_norm", 1, TB_GRAPH_MAX_INPUTS, 1, norm, tb_infer_rms_norm, tb_lower_norm)               \
    /* x [N, C, *], [weight], [bias] -> out, mean [N, G], rstd [N, G] */                                     \
    X(GROUP_NORM, "group_norm", 1, 3, 3, group_norm, tb_infer_group_norm, tb_lower_nn)                       \
    /* eval: x [N, C, *], running mean [C], running var [C], [weight], [bias] */                            \
    X(BATCH_NORM, "batch_norm", 3, 5, 1, batch_norm, tb_infer_batch_norm, tb_lower_batch_norm)               \
    /* training: x, [weight], [bias], [running mean, running var] -> out, save_mean, save_invstd,          \
     * new running mean, new running var (the last two are empty [0] without running stats) */             \
    X(BATCH_NORM_TRAIN, "batch_norm_train", 1, 5, 5, batch_norm_train, tb_infer_batch_norm_train, tb_lower_nn) \
    /* a [..., M, K] @ b [..., K, N] (+ bias [N]) -> activation -> (+ residual [..., M, N]) */              \
    X(MATMUL, "matmul", 2, 4, 1, matmul, tb_infer_matmul, tb_lower_matmul)                                   \
    /* x [N, C, H, W], w [O, C/g, KH, KW], [bias [O]], [bn mean, var, weight, bias [O]], [residual] */     \
    X(CONV2D, "conv2d", 2, 8, 1, conv2d, tb_infer_conv2d, tb_lower_conv2d)                                   \
    /* -> values, int64 indices */                                                                           \
    X(MAX_POOL2D, "max_pool2d", 1, 1, 2, pool, tb_infer_max_pool2d, tb_lower_nn)                             \
    X(AVG_POOL2D, "avg_pool2d", 1, 1, 1, pool, tb_infer_avg_pool2d, tb_lower_nn)                             \
    X(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d", 1, 1, 1, adaptive_pool, tb_infer_adaptive_pool, tb_lower_nn) \
    /* weight [V, E], integer indices [...] -> [..., E] */                                                   \
    X(EMBEDDING, "embedding", 2, 2, 1, none, tb_infer_embedding, tb_lower_nn)                                \
    /* q [B, H, T, D] (or 3-D), k, v, [mask] (bool: attend, or additive float) -> out, log-sum-exp of     \
     * each row's scores [B, H, T] (or [B, T]; computed only when used, for the backward) */               \
    X(ATTENTION, "attention", 3, 4, 2, attention, tb_infer_attention, tb_lower_attention)                    \
    X(CAT, "cat", 1, TB_GRAPH_MAX_INPUTS, 1, cat, tb_infer_cat, tb_lower_cat)                                \
    /* x (for its shape), int64 seed (one element) -> bool keep mask shaped like x, each element kept     \
     * with probability 1 - p; element i depends only on (seed, i) (src/graph/exec_random.c) */           \
    X(DROPOUT_MASK, "dropout_mask", 2, 2, 1, dropout, tb_infer_dropout_mask, tb_lower_dropout_mask)         \
    /* made by the fusion pass: an elementwise program over broadcast inputs */                             \
    X(FUSED_ELEMENTWISE, "fused_elementwise", 1, TB_GRAPH_MAX_INPUTS, 1, fused, tb_infer_fused, tb_lower_elementwise) \
    /* training ops (aten backward ops and losses), one to one with ops_nn.h */                             \
    X(CONV2D_BACKWARD, "conv2d_backward", 3, 3, 3, conv2d_backward, tb_infer_conv2d_backward, tb_lower_nn)   \
    /* grad, x, indices */                                                                                   \
    X(MAX_POOL2D_BACKWARD, "max_pool2d_backward", 3, 3, 1, pool, tb_infer_like_input1, tb_lower_nn)         \
    X(AVG_POOL2D_BACKWARD, "avg_pool2d_backward", 2, 2, 1, pool, tb_infer_like_input1, tb_lower_nn)         \
    X(ADAPTIVE_AVG_POOL2D_BACKWARD, "adaptive_avg_pool2d_backward", 2, 2, 1, none, tb_infer_like_input1, tb_lower_nn) \
    /* grad, x, [weight], [running mean, running var], [save mean, save invstd] */                          \
    X(BATCH_NORM_BACKWARD, "batch_norm_backward", 2, 7, 3, batch_norm_backward, tb_infer_batch_norm_backward, tb_lower_nn) \
    /* grad, x, mean, rstd, [weight], [bias] */                                                              \
    X(LAYER_NORM_BACKWARD, "layer_norm_backward", 4, 6, 3, layer_norm_backward, tb_infer_layer_norm_backward, tb_lower_nn) \
    /* grad, x, mean, rstd, [weight] */                                                                      \
    X(GROUP_NORM_BACKWARD, "group_norm_backward", 4, 5, 3, group_norm_backward, tb_infer_group_norm_backward, tb_lower_nn) \
    /* grad_out, q, k, v, out, lse, [mask] (as ATTENTION's; layout unused) -> grad q, grad k, grad v */     \
    X(ATTENTION_BACKWARD, "attention_backward", 6, 7, 3, attention, tb_infer_attention_backward,             \
      tb_lower_attention_backward)                                                                           \
    /* grad, forward output */                                                                               \
    X(SOFTMAX_BACKWARD, "softmax_backward", 2, 2, 1, softmax, tb_infer_softmax_backward, tb_lower_nn)        \
    /* grad [..., E], indices [...] -> [num_weights, E] */                                                  \
    X(EMBEDDING_BACKWARD, "embedding_backward", 2, 2, 1, embedding_backward, tb_infer_embedding_backward, tb_lower_nn) \
    /* x, target, [weight] -> loss, total_weight */                                                          \
    X(NLL_LOSS, "nll_loss", 2, 3, 2, loss, tb_infer_nll_loss, tb_lower_nn)                                   \
    /* grad, x, target, total_weight, [weight] -> grad x */                                                  \
    X(NLL_LOSS_BACKWARD, "nll_loss_backward", 4, 5, 1, loss, tb_infer_like_input1, tb_lower_nn)             \
    X(MSE_LOSS, "mse_loss", 2, 2, 1, loss, tb_infer_loss, tb_lower_nn)                                       \
    X(MSE_LOSS_BACKWARD, "mse_loss_backward", 3, 3, 1, loss, tb_infer_like_input1, tb_lower_nn)             \
    X(SMOOTH_L1_LOSS, "smooth_l1_loss", 2, 2, 1, loss, tb_infer_loss, tb_lower_nn)                           \
    X(SMOOTH_L1_LOSS_BACKWARD, "smooth_l1_loss_backward", 3, 3, 1, loss, tb_infer_like_input1, tb_lower_nn) \
    X(BCE_LOSS, "binary_cross_entropy", 2, 3, 1, loss, tb_infer_loss, tb_lower_nn)                           \
    X(BCE_LOSS_BACKWARD, "binary_cross_entropy_backward", 3, 4, 1, loss, tb_infer_like_input1, tb_lower_nn) \
    /* computed by the eager core (exec_eager.c): x -> values, int64 indices of max/min along dim */        \
    X(MAX_DIM, "max_dim", 1, 1, 2, max_dim, tb_infer_max_dim, tb_lower_eager)                                \
    /* stable sort along dim (NaN largest) -> values, int64 indices */                                     \
    X(SORT, "sort", 1, 1, 2, sort, tb_infer_sort, tb_lower_eager)                                            \
    /* cumsum / cumprod / logcumsumexp along dim in dtype */                                                \
    X(SCAN, "scan", 1, 1, 1, scan, tb_infer_scan, tb_lower_eager)                                            \
    /* prod, all, any, nansum, count_nonzero... (tb_eager_reduce) over dim_mask in dtype */                 \
    X(EAGER_REDUCE, "eager_reduce", 1, 1, 1, eager_reduce, tb_infer_eager_reduce, tb_lower_eager)            \
    X(VECTOR_NORM, "vector_norm", 1, 1, 1, eager_reduce, tb_infer_eager_reduce, tb_lower_eager)              \
    /* x, integer index (x's rank) -> x gathered along dim, index's shape */                               \
    X(GATHER, "gather", 2, 2, 1, index, tb_infer_gather, tb_lower_eager)                                     \
    /* x, integer index, [src] -> a copy of x with src (or value) scattered along dim */                   \
    X(SCATTER, "scatter", 2, 3, 1, index, tb_infer_scatter, tb_lower_eager)                                  \
    /* x, 0/1-D integer index -> x's rows along dim picked by index */                                      \
    X(INDEX_SELECT, "index_select", 2, 2, 1, index, tb_infer_index_select, tb_lower_eager)                   \
    /* x, 0/1-D integer index, source -> x + alpha * source added at index along dim */                     \
    X(INDEX_ADD, "index_add", 3, 3, 1, index, tb_infer_index_add, tb_lower_eager)                         \
    /* x -> x reversed along the dims of dim_mask / rolled by shifts (contiguous copies) */                  \
    X(FLIP, "flip", 1, 1, 1, rearrange, tb_infer_rearrange, tb_lower_eager)                                  \
    X(ROLL, "roll", 1, 1, 1, rearrange, tb_infer_rearrange, tb_lower_eager)                                  \
    /* x [..., M, N] -> its lower (upper) triangle from diagonal, zeros elsewhere */                         \
    X(TRIANGLE, "triangle", 1, 1, 1, triangle, tb_infer_triangle, tb_lower_eager)                            \
    /* x, one integer index per indexed dim (broadcast together) -> x[indices] (PyTorch's placement) */      \
    X(INDEX, "index", 2, 9, 1, advanced_index, tb_infer_index, tb_lower_eager)                      \
    /* x, values, one integer index per indexed dim -> x with values written (added) at x[indices] */        \
    X(INDEX_PUT, "index_put", 3, 10, 1, advanced_index, tb_infer_index_put, tb_lower_eager)              \
    /* a pointwise op of the op table on any dtype, exact (integers in int64): x [, y] -> broadcast */     \
    X(EAGER_POINTWISE, "eager_pointwise", 1, 2, 1, pointwise, tb_infer_eager_pointwise, tb_lower_eager)

typedef enum tb_graph_op {
#define TB_GRAPH_OP_ENUM(id, name, min_in, max_in, n_out, params, infer, lower) TB_OP_##id,
    TB_GRAPH_OP_LIST(TB_GRAPH_OP_ENUM)
#undef TB_GRAPH_OP_ENUM
    TB_OP_COUNT
} tb_graph_op;

/* Names of the elementwise sub-ops (the `op` param of UNARY, BINARY, BINARY_SCALAR, COMPARE, REDUCE),
 * in index order, NULL-terminated. The first entries of the unary and binary lists follow the kernel
 * tables (kernels/elementwise.h); the rest are evaluated by the graph layer itself. */
TB_API extern const char *const tb_graph_unary_names[];
TB_API extern const char *const tb_graph_binary_names[];
TB_API extern const char *const tb_graph_compare_names[];
TB_API extern const char *const tb_graph_reduce_names[];

typedef enum tb_param_kind { TB_PARAM_INT = 0, TB_PARAM_FLOAT = 1 } tb_param_kind;

/* One field of a param set: `count` int64 or double values at byte `offset` of tb_graph_params. */
typedef struct tb_param_field {
    const char *name;
    tb_param_kind kind;
    int count;
    size_t offset;
} tb_param_field;

TB_API const char *tb_graph_op_name(tb_graph_op op);
TB_API tb_status tb_graph_op_from_name(const char *name, tb_graph_op *out);
/* The fields of op's param set (*count of them). */
TB_API const tb_param_field *tb_graph_op_fields(tb_graph_op op, int *count);
TB_API void tb_graph_op_arity(tb_graph_op op, int *min_inputs, int *max_inputs, int *outputs);

/* ---- building ---- */

typedef struct tb_graph tb_graph;

/* The static description of a value. Strides are in elements; a value of a compute node is
 * contiguous unless its op says otherwise (views, attention with a layout). */
typedef struct tb_value_info {
    tb_dtype dtype;
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    int64_t strides[TB_MAX_DIMS];
} tb_value_info;

TB_API TB_NODISCARD tb_status tb_graph_new(tb_graph **out);
TB_API void tb_graph_free(tb_graph *graph);

/* Adds an input (strides NULL: contiguous). Strides of size-1 dims are canonicalized (they address
 * nothing), so layouts that differ only there share a key. *value receives the value id. */
TB_API TB_NODISCARD tb_status tb_graph_add_input(tb_graph *graph, tb_dtype dtype, int ndim, const int64_t *shape,
                                                 const int64_t *strides, int *value);

/* Adds a node: validates the arity, the input ids (earlier values only) and the params, infers the
 * outputs' dtypes and shapes (TB_ERR_SHAPE / TB_ERR_DTYPE / TB_ERR_UNSUPPORTED with a message naming
 * the op). *first_output receives the id of output 0 (outputs are consecutive ids), *outputs their
 * count (may be NULL). params NULL means all zero. The graph is unchanged on error. */
TB_API TB_NODISCARD tb_status tb_graph_add_node(tb_graph *graph, tb_graph_op op, const tb_graph_params *params,
                                                int ninputs, const int *inputs, int *first_output, int *outputs);

/* Marks a value as the next graph output (the same value may be listed twice). */
TB_API TB_NODISCARD tb_status tb_graph_add_output(tb_graph *graph, int value);

/* A label for the node defining `value` (e.g. the FX node name), shown by tb_plan_describe. Not part
 * of the key. */
TB_API TB_NODISCARD tb_status tb_graph_set_label(tb_graph *graph, int value, const char *label);

TB_API int tb_graph_num_values(const tb_graph *graph);
TB_API TB_NODISCARD tb_status tb_graph_value_info(const tb_graph *graph, int value, tb_value_info *out);

/* The canonical serialization (little-endian, independent of struct padding and of labels): ops,
 * params, edges, input layouts, every value's dtype and shape, outputs. *bytes is malloc'ed (free
 * with free()). */
TB_API TB_NODISCARD tb_status tb_graph_serialize(const tb_graph *graph, uint8_t **bytes, size_t *size);
/* BLAKE3 of the canonical serialization: the structural key. */
TB_API TB_NODISCARD tb_status tb_graph_hash(const tb_graph *graph, uint8_t out[32]);

/* ---- plans ---- */

typedef struct tb_plan tb_plan;

/* Compiles a graph through the caches: prepared-plan cache hit -> that plan; else graph cache hit ->
 * prepare it; else run the passes (dead code elimination, fusion), cache, prepare (memory planning),
 * cache. Both caches verify the full key on a hash hit. *out gets a new reference; *cache_hit (may be
 * NULL) tells whether the prepared cache hit. The graph is not modified and can be freed after. */
TB_API TB_NODISCARD tb_status tb_graph_compile(const tb_graph *graph, tb_plan **out, bool *cache_hit);

TB_API void tb_plan_retain(tb_plan *plan);
TB_API void tb_plan_release(tb_plan *plan);

TB_API int tb_plan_num_inputs(const tb_plan *plan);
TB_API int tb_plan_num_outputs(const tb_plan *plan);
/* The layout an input must have, and the dtype/shape of an output (contiguous). */
TB_API const tb_value_info *tb_plan_input_info(const tb_plan *plan, int index);
TB_API const tb_value_info *tb_plan_output_info(const tb_plan *plan, int index);
/* An earlier output that output `index` is the same value as (a graph returning a value and its
 * detach alias), or -1. Runs write only the earlier output: an alias output's pointer is not used
 * (tb_plan_run_tensors and the Python Plan return the earlier output's tensor again). */
TB_API int tb_plan_output_alias(const tb_plan *plan, int index);
TB_API void tb_plan_key(const tb_plan *plan, uint8_t out[32]);
/* Whether a tensor with this dtype/shape/strides (elements; NULL: contiguous) can be input `index`
 * (strides of size-1 dims are ignored). */
TB_API bool tb_plan_input_matches(const tb_plan *plan, int index, tb_dtype dtype, int ndim, const int64_t *shape,
                                  const int64_t *strides);
TB_API size_t tb_plan_arena_bytes(const tb_plan *plan);
TB_API int tb_plan_num_steps(const tb_plan *plan);

/* Runs the plan. inputs[i] points at input i's element 0 laid out as tb_plan_input_info(i) says (the
 * caller checked); outputs[j] at a contiguous buffer of output j's dtype and shape (written, never
 * read). Thread-safe: a plan may run on several threads at once. Must not hold the GIL (it may call
 * no Python). Errors (e.g. an index out of range) leave the outputs unspecified. */
TB_API TB_NODISCARD tb_status tb_plan_run(const tb_plan *plan, void *const *inputs, void *const *outputs);

/* tb_plan_run with the storage each input lives in (input_storages may be NULL, or hold NULL for
 * inputs whose storage is not known): steps may then cache data derived from an input on its
 * storage, validated by the storage's version (the GEMM keeps a packed copy of a weight). */
struct tb_storage;
TB_API TB_NODISCARD tb_status tb_plan_run_storages(const tb_plan *plan, void *const *inputs,
                                                   struct tb_storage *const *input_storages, void *const *outputs);

/* tb_plan_run that also adds each step's wall time in seconds to step_seconds[s] (tb_plan_num_steps
 * entries): profiling. */
TB_API TB_NODISCARD tb_status tb_plan_run_profiled(const tb_plan *plan, void *const *inputs, void *const *outputs,
                                                   double *step_seconds);
/* The description line of step s (kernel and covered nodes), valid while the plan lives. */
TB_API const char *tb_plan_step_kernel(const tb_plan *plan, int step);

/* Convenience for C callers: checks tensors against the plan's inputs (dtype, shape, strides of dims
 * > 1) and allocates the outputs as new contiguous tensors. */
TB_API TB_NODISCARD tb_status tb_plan_run_tensors(const tb_plan *plan, const tb_tensor *inputs, tb_tensor *outputs);

/* A human-readable listing of the plan's steps, fusions and memory plan (malloc'ed; free()). One
 * line per step: "<kernel> <- <labels of the graph nodes it covers>". */
TB_API TB_NODISCARD tb_status tb_plan_describe(const tb_plan *plan, char **text);

/* ---- caches ---- */

typedef struct tb_cache_stats {
    size_t size, capacity;
    uint64_t hits, misses, evictions;
} tb_cache_stats;

/* Statistics of the prepared-plan cache (TORCHBURN_PREPARED_CACHE_SIZE) and of the optimized-graph
 * cache (TORCHBURN_CACHE_SIZE); either pointer may be NULL. */
TB_API void tb_plan_cache_stats(tb_cache_stats *prepared, tb_cache_stats *graphs);
/* Empties both caches and zeroes their counters (plans still referenced elsewhere stay valid). */
TB_API void tb_plan_cache_clear(void);
/* Sets the capacities (>= 1; 0 keeps the current one), evicting least recently used entries. */
TB_API TB_NODISCARD tb_status tb_plan_cache_set_capacity(size_t graph_capacity, size_t prepared_capacity);

/* ---- BLAKE3 (src/graph/blake3.c) ---- */

typedef struct tb_blake3 {
    uint32_t key[8];
    uint32_t chunk_cv[8];
    uint64_t chunk_counter;
    uint8_t block[64];
    uint32_t block_len;
    uint32_t blocks_compressed;
    uint32_t flags;
    uint32_t cv_stack_len;
    uint32_t cv_stack[54][8]; /* one entry per level of a tree of up to 2^54 chunks */
} tb_blake3;

TB_API void tb_blake3_init(tb_blake3 *hasher);
TB_API void tb_blake3_init_keyed(tb_blake3 *hasher, const uint8_t key[32]);
TB_API void tb_blake3_init_derive_key(tb_blake3 *hasher, const char *context);
TB_API void tb_blake3_update(tb_blake3 *hasher, const void *data, size_t size);
/* Writes out_size bytes of output (any length: extendable output); the hasher stays usable. */
TB_API void tb_blake3_finalize(const tb_blake3 *hasher, uint8_t *out, size_t out_size);
TB_API void tb_blake3_hash(const void *data, size_t size, uint8_t out[32]);

#ifdef __cplusplus
}
#endif
#endif
