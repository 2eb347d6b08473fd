/* Neural-network ops beyond ops.h: 2-D convolution (with a fused bias/batch-norm/activation/residual
 * epilogue), pooling, batch/group/layer normalization with their saved statistics, losses, and the
 * backward ops that aot_autograd emits for them. Each mirrors one ATen op (named in its comment) so
 * the torch.compile backend can map graph nodes 1:1.
 *
 * Conventions are those of ops.h: outputs are fresh contiguous tensors the caller releases; float
 * inputs (f32, f16, bf16) are computed in f32 and rounded once into the result dtype; float64 is
 * refused with TB_ERR_DTYPE. Images are NCHW; a 3-D [C, H, W] input is accepted where torch accepts
 * one (conv2d, pooling) and gives a 3-D result. An output argument documented "may be NULL" is
 * skipped; an output not requested through an output_mask is left zeroed (storage NULL), which the
 * bindings turn into None. Integer targets/indices may be int64 or int32.
 *
 * Dropout in evaluation mode is the identity and needs no op here. */
#ifndef TORCHBURN_OPS_NN_H
#define TORCHBURN_OPS_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "torchburn/status.h"
#include "torchburn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- convolution ---- */

/* Geometry of a 2-D convolution; index 0 is H, index 1 is W. padding is added on both sides and
 * extra_padding adds more zeros at the bottom/right only (torch's padding="same" with an even
 * effective kernel); both >= 0. stride and dilation >= 1, groups >= 1. */
typedef struct tb_conv2d_params {
    int64_t stride[2];
    int64_t padding[2];
    int64_t extra_padding[2];
    int64_t dilation[2];
    int64_t groups;
} tb_conv2d_params;

/* Optional fused epilogue of a convolution, applied per output channel c:
 *     y = activation((conv(x) + bias[c]) * scale[c] + shift[c]) + residual
 * scale/shift are 1-D [C_out] (NULL: 1 / 0); activation is a tb_activation (kernels/gemm.h numbering:
 * none, relu, gelu, gelu_tanh, silu, sigmoid, tanh); residual has the output's shape (or broadcasts
 * to it) or is NULL. An eval-mode batch_norm after the convolution folds into scale/shift (see
 * tb_op_batch_norm_fold). */
typedef struct tb_conv2d_epilogue {
    const tb_tensor *scale;
    const tb_tensor *shift;
    int activation;
    const tb_tensor *residual;
    /* The storage holding weight's memory when the caller knows it better than weight->storage (a plan's
     * input) or NULL. When it (else weight->storage) is cacheable, the packed weights are kept on it and
     * reused while its version, the weight view, the scale and the kernel choice stay the same (packed on
     * the second call at one version, so weights that change every step never pay for a pack). */
    struct tb_storage *weight_storage;
} tb_conv2d_epilogue;

/* aten::convolution (2-D, not transposed): x [N, C_in, H, W], weight [C_out, C_in / groups, KH, KW],
 * bias [C_out] or NULL -> [N, C_out, OH, OW] with OH = (H + pad - dilation * (KH - 1) - 1) / stride + 1.
 * Runs as im2col + packed GEMM per group with the bias in the GEMM epilogue (1x1 stride-1 kernels skip
 * im2col; groups with one input channel, e.g. depthwise, use a direct kernel). */
TB_API TB_NODISCARD tb_status tb_op_conv2d(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                                           const tb_conv2d_params *params, tb_tensor *out);
/* The same with a fused epilogue (epilogue may be NULL). */
TB_API TB_NODISCARD tb_status tb_op_conv2d_fused(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                                                 const tb_conv2d_params *params, const tb_conv2d_epilogue *epilogue,
                                                 tb_tensor *out);
/* The same writing the result into caller memory y: contiguous [N, C_out, OH, OW] (no batch dim for
 * an unbatched x), not overlapping any input. x and weight must be float32 (else TB_ERR_DTYPE). */
TB_API TB_NODISCARD tb_status tb_op_conv2d_fused_into(const tb_tensor *x, const tb_tensor *weight,
                                                      const tb_tensor *bias, const tb_conv2d_params *params,
                                                      const tb_conv2d_epilogue *epilogue, float *y);
/* Process-wide counts of the packed-weight caches (tb_gemm_f32_cached_b for matmul weights, the
 * convolution's above): weights packed into a cache, and calls that reused a cached pack. */
typedef struct tb_weight_cache_counts {
    int64_t gemm_packs, gemm_hits, conv_packs, conv_hits;
} tb_weight_cache_counts;
TB_API void tb_weight_cache_counts_get(tb_weight_cache_counts *out);
/* aten::convolution_backward (2-D, not transposed). grad_output [N, C_out, OH, OW], x and weight as in
 * the forward. output_mask selects grad_input [like x], grad_weight [like weight] and grad_bias
 * [C_out]; unselected outputs stay zeroed. */
TB_API TB_NODISCARD tb_status tb_op_conv2d_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                    const tb_tensor *weight, const tb_conv2d_params *params,
                                                    const bool output_mask[3], tb_tensor *grad_input,
                                                    tb_tensor *grad_weight, tb_tensor *grad_bias);

/* ---- pooling ---- */

/* Geometry of a 2-D pooling window (index 0 H, 1 W): kernel >= 1, stride >= 1, 0 <= padding <=
 * kernel / 2, dilation >= 1 (max pooling only; must be 1 for average pooling). ceil_mode rounds the
 * output size up, dropping a last window that would start in the bottom/right padding.
 * count_include_pad and divisor_override (0 = none) are for average pooling. */
typedef struct tb_pool2d_params {
    int64_t kernel[2];
    int64_t stride[2];
    int64_t padding[2];
    int64_t dilation[2];
    bool ceil_mode;
    bool count_include_pad;
    int64_t divisor_override;
} tb_pool2d_params;

/* aten::max_pool2d_with_indices: x [N, C, H, W] or [C, H, W] -> values and int64 indices (h * W + w
 * within the input plane). A NaN in a window wins (the last one); indices may be NULL. */
TB_API TB_NODISCARD tb_status tb_op_max_pool2d(const tb_tensor *x, const tb_pool2d_params *params, tb_tensor *out,
                                               tb_tensor *indices);
/* The same writing into caller memory: values y in x's dtype (float32 or float64, else TB_ERR_DTYPE),
 * contiguous [N, C, OH, OW] (no batch dim for an unbatched x), and int64 indices likewise (may be
 * NULL); neither may overlap x. */
TB_API TB_NODISCARD tb_status tb_op_max_pool2d_into(const tb_tensor *x, const tb_pool2d_params *params, void *y,
                                                    int64_t *indices);
/* aten::max_pool2d_with_indices_backward and aten::adaptive_max_pool2d_backward: scatters grad_output
 * into a zero tensor shaped like x at `indices` (as produced by the forward). */
TB_API TB_NODISCARD tb_status tb_op_max_pool2d_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                        const tb_tensor *indices, tb_tensor *out);
/* aten::avg_pool2d / aten::avg_pool2d_backward (dilation must be 1). */
TB_API TB_NODISCARD tb_status tb_op_avg_pool2d(const tb_tensor *x, const tb_pool2d_params *params, tb_tensor *out);
/* avg_pool2d into caller memory, on the terms of tb_op_max_pool2d_into. */
TB_API TB_NODISCARD tb_status tb_op_avg_pool2d_into(const tb_tensor *x, const tb_pool2d_params *params, void *y);
TB_API TB_NODISCARD tb_status tb_op_avg_pool2d_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                        const tb_pool2d_params *params, tb_tensor *out);
/* aten::_adaptive_avg_pool2d / its backward; aten::adaptive_max_pool2d (indices may be NULL). Window
 * i spans [floor(i * H / OH), ceil((i + 1) * H / OH)). output sizes >= 1 (0 only for an empty input). */
TB_API TB_NODISCARD tb_status tb_op_adaptive_avg_pool2d(const tb_tensor *x, int64_t out_h, int64_t out_w,
                                                        tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_adaptive_avg_pool2d_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                                 tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_adaptive_max_pool2d(const tb_tensor *x, int64_t out_h, int64_t out_w,
                                                        tb_tensor *out, tb_tensor *indices);

/* ---- normalization ---- */

/* Batch norm over x [N, C, *] per channel C (aten::native_batch_norm and
 * aten::_native_batch_norm_legit_functional). weight/bias [C] or NULL; running_mean/running_var [C]
 * or NULL (required when !training).
 *   training: batch statistics; save_mean = mean and save_invstd = 1/sqrt(var_biased + eps), [C];
 *     new_running_mean/var = (1 - momentum) * running + momentum * batch statistic (variance unbiased),
 *     when running stats are given.
 *   eval: running statistics; save_mean/save_invstd are empty [0] tensors and new_running_* are
 *     copies of the inputs.
 * The statistics take the parameters' dtype (weight's, else running_mean's, else the input's), as
 * ATen does for a bf16 input with f32 parameters. y = x * alpha + beta with alpha = invstd * weight,
 * beta = bias - mean * alpha (PyTorch's CPU form).
 * Every output pointer except out may be NULL. */
TB_API TB_NODISCARD tb_status tb_op_batch_norm(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                                               const tb_tensor *running_mean, const tb_tensor *running_var,
                                               bool training, float momentum, float eps, tb_tensor *out,
                                               tb_tensor *save_mean, tb_tensor *save_invstd,
                                               tb_tensor *new_running_mean, tb_tensor *new_running_var);
/* Per-channel scale = weight / sqrt(running_var + eps) and shift = bias - running_mean * scale (f32
 * [C]), so that an eval batch_norm is y = x * scale + shift (feed to tb_conv2d_epilogue). */
TB_API TB_NODISCARD tb_status tb_op_batch_norm_fold(const tb_tensor *weight, const tb_tensor *bias,
                                                    const tb_tensor *running_mean, const tb_tensor *running_var,
                                                    float eps, tb_tensor *scale, tb_tensor *shift);
/* aten::native_batch_norm_backward. train: save_mean/save_invstd are the forward's; eval: the running
 * stats are used. weight may be NULL (ones). */
TB_API TB_NODISCARD tb_status tb_op_batch_norm_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                        const tb_tensor *weight, const tb_tensor *running_mean,
                                                        const tb_tensor *running_var, const tb_tensor *save_mean,
                                                        const tb_tensor *save_invstd, bool train, float eps,
                                                        const bool output_mask[3], tb_tensor *grad_input,
                                                        tb_tensor *grad_weight, tb_tensor *grad_bias);

/* aten::native_group_norm: x [N, C, *], `groups` divides C; weight/bias [C] or NULL -> out, mean and
 * rstd [N, groups] (mean/rstd may be NULL). */
TB_API TB_NODISCARD tb_status tb_op_group_norm(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                                               int64_t groups, float eps, tb_tensor *out, tb_tensor *mean,
                                               tb_tensor *rstd);
/* aten::native_group_norm_backward. */
TB_API TB_NODISCARD tb_status tb_op_group_norm_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                        const tb_tensor *mean, const tb_tensor *rstd,
                                                        const tb_tensor *weight, int64_t groups,
                                                        const bool output_mask[3], tb_tensor *grad_input,
                                                        tb_tensor *grad_weight, tb_tensor *grad_bias);

/* aten::native_layer_norm: normalizes over the last normalized_ndim dims; mean/rstd are shaped
 * x.shape[:-normalized_ndim] + [1] * normalized_ndim (may be NULL). */
TB_API TB_NODISCARD tb_status tb_op_native_layer_norm(const tb_tensor *x, int normalized_ndim,
                                                      const tb_tensor *weight, const tb_tensor *bias, float eps,
                                                      tb_tensor *out, tb_tensor *mean, tb_tensor *rstd);
/* aten::native_layer_norm_backward. */
TB_API TB_NODISCARD tb_status tb_op_layer_norm_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                        int normalized_ndim, const tb_tensor *mean,
                                                        const tb_tensor *rstd, const tb_tensor *weight,
                                                        const tb_tensor *bias, const bool output_mask[3],
                                                        tb_tensor *grad_input, tb_tensor *grad_weight,
                                                        tb_tensor *grad_bias);

/* ---- activation and softmax backward ---- */

/* aten::threshold_backward: grad where x > threshold, else 0 (NaN x passes grad through).
 * grad and x broadcast. */
TB_API TB_NODISCARD tb_status tb_op_threshold_backward(const tb_tensor *grad, const tb_tensor *x, float threshold,
                                                       tb_tensor *out);
/* Backward of an activation (a tb_activation): relu, gelu (aten::gelu_backward approximate="none"),
 * gelu_tanh ("tanh"), silu (aten::silu_backward) take the forward INPUT in `saved`; sigmoid and tanh
 * (aten::sigmoid_backward / tanh_backward) take the forward OUTPUT, as ATen does. */
TB_API TB_NODISCARD tb_status tb_op_activation_backward(int activation, const tb_tensor *grad, const tb_tensor *saved,
                                                        tb_tensor *out);
/* aten::_softmax_backward_data / aten::_log_softmax_backward_data: output is the forward result;
 * the result has out_dtype (ATen's input_dtype). */
TB_API TB_NODISCARD tb_status tb_op_softmax_backward(const tb_tensor *grad, const tb_tensor *output, int64_t dim,
                                                     bool log, tb_dtype out_dtype, tb_tensor *out);
/* aten::embedding_dense_backward: grad [..., E], indices [...] -> [num_weights, E]; rows of
 * padding_idx (negative: none) get no gradient; scale_grad_by_freq divides by each index's count. */
TB_API TB_NODISCARD tb_status tb_op_embedding_backward(const tb_tensor *grad, const tb_tensor *indices,
                                                       int64_t num_weights, int64_t padding_idx,
                                                       bool scale_grad_by_freq, tb_tensor *out);

/* ---- losses ---- */

/* ATen's reduction numbering. */
typedef enum tb_reduction { TB_REDUCTION_NONE = 0, TB_REDUCTION_MEAN = 1, TB_REDUCTION_SUM = 2 } tb_reduction;

/* aten::nll_loss_forward / nll_loss2d_forward / nll_loss_nd: x [N, C, d1, ...] or [C] log-probabilities,
 * target [N, d1, ...] or [] class indices in [0, C) or == ignore_index, weight [C] or NULL.
 * out: per element for NONE, else a 0-dim tensor (mean divides by total_weight, the summed weights of
 * non-ignored targets; all ignored gives NaN). total_weight (0-dim, may be NULL) is 0 for NONE. */
TB_API TB_NODISCARD tb_status tb_op_nll_loss(const tb_tensor *x, const tb_tensor *target, const tb_tensor *weight,
                                             int reduction, int64_t ignore_index, tb_tensor *out,
                                             tb_tensor *total_weight);
/* aten::nll_loss_backward: the gradient w.r.t. x (shaped like x). */
TB_API TB_NODISCARD tb_status tb_op_nll_loss_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                      const tb_tensor *target, const tb_tensor *weight, int reduction,
                                                      int64_t ignore_index, const tb_tensor *total_weight,
                                                      tb_tensor *out);
/* torch.nn.functional.cross_entropy: x [N, C, ...] or [C] logits; target holds class indices (an
 * integer tensor, as nll_loss, with label smoothing) or class probabilities (a float tensor shaped
 * like x). */
TB_API TB_NODISCARD tb_status tb_op_cross_entropy(const tb_tensor *x, const tb_tensor *target,
                                                  const tb_tensor *weight, int reduction, int64_t ignore_index,
                                                  float label_smoothing, tb_tensor *out);
/* aten::mse_loss / mse_loss_backward: x and target broadcast. */
TB_API TB_NODISCARD tb_status tb_op_mse_loss(const tb_tensor *x, const tb_tensor *target, int reduction,
                                             tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_mse_loss_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                      const tb_tensor *target, int reduction, tb_tensor *out);
/* aten::smooth_l1_loss / backward (beta >= 0; beta == 0 is the L1 loss). */
TB_API TB_NODISCARD tb_status tb_op_smooth_l1_loss(const tb_tensor *x, const tb_tensor *target, int reduction,
                                                   float beta, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_smooth_l1_loss_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                            const tb_tensor *target, int reduction, float beta,
                                                            tb_tensor *out);
/* aten::binary_cross_entropy / backward: x probabilities in [0, 1] (values outside are an error, as
 * torch), target like x, weight broadcastable to x or NULL; logs are clamped at -100. */
TB_API TB_NODISCARD tb_status tb_op_binary_cross_entropy(const tb_tensor *x, const tb_tensor *target,
                                                         const tb_tensor *weight, int reduction, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_op_binary_cross_entropy_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                                                  const tb_tensor *target, const tb_tensor *weight,
                                                                  int reduction, tb_tensor *out);
/* aten::binary_cross_entropy_with_logits: x logits; weight broadcastable to x; pos_weight broadcastable
 * to x (usually [C] along the last dim), or NULL. */
TB_API TB_NODISCARD tb_status tb_op_binary_cross_entropy_with_logits(const tb_tensor *x, const tb_tensor *target,
                                                                     const tb_tensor *weight,
                                                                     const tb_tensor *pos_weight, int reduction,
                                                                     tb_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
