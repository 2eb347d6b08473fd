/* Helpers shared by the nn ops (ops_conv*.c, ops_pool.c, ops_norm_nn*.c, ops_loss*.c,
 * ops_backward.c): argument staging with messages that name the argument, NCHW views, and the
 * convolution shape check used by forward and backward. */
#ifndef TORCHBURN_OPS_NN_INTERNAL_H
#define TORCHBURN_OPS_NN_INTERNAL_H

#include <stdatomic.h>

#include "kernels/nn_kernels.h"
#include "ops/ops_internal.h"
#include "torchburn/ops_nn.h"

/* A contiguous f32 copy (or retained reference) of a float tensor; TB_ERR_DTYPE naming `what`. */
tb_status tb_nn_stage(const tb_tensor *x, const char *what, tb_tensor *out);

/* tb_ops_require_float for the ops that also compute in double (convolution, pooling): float64 passes. */
static inline tb_status tb_nn_require_float(tb_dtype dtype, const char *what) {
    return dtype == TB_F64 ? TB_OK : tb_ops_require_float(dtype, what);
}

/* A contiguous copy (or retained reference) of a float tensor in `compute` (TB_F32 or TB_F64). */
tb_status tb_nn_stage_compute(const tb_tensor *x, tb_dtype compute, const char *what, tb_tensor *out);

/* Stages an optional per-channel parameter: NULL leaves *out zeroed; otherwise it must be 1-D of
 * length `length` (TB_ERR_SHAPE naming `what`). */
tb_status tb_nn_stage_vector(const tb_tensor *x, int64_t length, const char *what, tb_tensor *out);

/* A contiguous int64 copy (or reference) of an integer tensor (int64 or int32; TB_ERR_DTYPE else). */
tb_status tb_nn_stage_index(const tb_tensor *x, const char *what, tb_tensor *out);

/* Stages `x` broadcast to shape (ndim, shape) as contiguous f32 (TB_ERR_SHAPE naming what). */
tb_status tb_nn_stage_expanded(const tb_tensor *x, int ndim, const int64_t *shape, const char *what, tb_tensor *out);

/* Data pointer of a staged tensor, or NULL for a zeroed (absent) one. */
static inline float *tb_nn_data(const tb_tensor *t) { return t->storage ? (float *)tb_tensor_data(t) : NULL; }

/* A 4-D [N, C, H, W] view of a 3-D [C, H, W] or 4-D input (*unbatched tells which); `name` is
 * "op: argument" for messages. */
tb_status tb_nn_view_4d(const tb_tensor *x, const char *name, tb_tensor *out, bool *unbatched);

/* Drops the leading batch dim of a result computed for an unbatched input (no-op when !unbatched). */
tb_status tb_nn_drop_batch(tb_tensor *result, bool unbatched);

/* Releases every tensor of an array (zeroed entries are fine). */
void tb_nn_release_all(tb_tensor *tensors, int count);

/* Sets *out to a new tensor of `dtype` holding the f32 values of *f32_result (released). Like
 * tb_ops_finish_dtype but tolerates a zeroed (absent) result. */
tb_status tb_nn_finish(tb_tensor *f32_result, tb_dtype dtype, tb_tensor *out);

/* First error of a parallel loop (workers cannot set the caller's thread-local message). */
typedef struct tb_nn_failure {
    atomic_int status;
} tb_nn_failure;
static inline void tb_nn_fail(tb_nn_failure *f, tb_status status) {
    int expected = TB_OK;
    atomic_compare_exchange_strong(&f->status, &expected, (int)status);
}

/* Vectorizable reductions for the norms and biases: 16 float lanes per block of at most 1024
 * elements, blocks combined in double (accurate, and independent of thread scheduling).
 *   tb_nn_sum:      sum x[i]
 *   tb_nn_sum_sq:   sum (x[i] - mean)^2
 *   tb_nn_sums_dy:  *sum_g = sum g[i], *sum_gx = sum g[i] * (x[i] - mean) with g = dy * w (w NULL: 1) */
double tb_nn_sum(const float *x, int64_t n);
double tb_nn_sum_sq(const float *x, int64_t n, float mean);
void tb_nn_sums_dy(const float *dy, const float *x, const float *w, int64_t n, float mean, double *sum_g,
                   double *sum_gx);

/* Convolution geometry after validation. */
typedef struct tb_conv_shape {
    int64_t batch, in_channels, in_h, in_w;
    int64_t out_channels, out_h, out_w;
    int64_t kernel_h, kernel_w, groups, in_per_group, out_per_group;
    int64_t k;        /* in_per_group * kernel_h * kernel_w: the GEMM depth */
    tb_window_geometry geometry; /* channels = in_per_group */
} tb_conv_shape;

/* Validates 4-D x [N, C, H, W] and weight [C_out, C / groups, KH, KW] against params and fills shape.
 * `name` prefixes messages ("conv2d", "convolution_backward"). */
tb_status tb_conv_check(const char *name, const tb_tensor *x, const tb_tensor *weight, const tb_conv2d_params *params,
                        tb_conv_shape *shape);

/* dst[i] = the sum over slots of partial[slot * count + i], added in slot order (deterministic for a
 * given thread count); T is the element type of both. */
#define TB_NN_SUM_SLOT_PARTIALS(T, dst, partial, count, slots)                    \
    do {                                                                          \
        memcpy((dst), (partial), (size_t)(count) * sizeof(T));                    \
        for (int64_t slot_ = 1; slot_ < (slots); slot_++)                         \
            for (int64_t i_ = 0; i_ < (count); i_++)                              \
                (dst)[i_] += (partial)[slot_ * (count) + i_];                     \
    } while (0)

/* The views and checks both convolution backwards start with: 4-D views of grad_output and x (the caller
 * releases them, also on error), x's batching, the validated shape, and grad_output's shape equal to
 * the convolution's output (TB_ERR_SHAPE naming both). */
tb_status tb_conv_backward_views(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *weight,
                                 const tb_conv2d_params *params, tb_tensor *dy4, tb_tensor *x4, bool *unbatched,
                                 tb_conv_shape *s);

/* ops_conv_f64.c: tb_op_conv2d / tb_op_conv2d_backward for float64 operands (computed in double;
 * results are float64). Same contracts as the ops; no fused epilogue. */
tb_status tb_conv2d_f64(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                        const tb_conv2d_params *params, tb_tensor *out);
tb_status tb_conv2d_backward_f64(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *weight,
                                 const tb_conv2d_params *params, const bool output_mask[3], tb_tensor *grad_input,
                                 tb_tensor *grad_weight, tb_tensor *grad_bias);

#endif
