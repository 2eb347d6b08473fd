/* Packed convolution GEMM: for one image and one group,
 *     Y[M, j] = epilogue(sum_p W[M, p] * im2col(x)[p, j])      M = C_out / groups, p < K, j a column range
 * with im2col written straight into the GEMM micro-kernel's B panels (no intermediate column matrix,
 * no second packing pass) and the GEMM epilogue (per-row bias, activation, residual) applied while
 * each tile is in L1. Weights are packed once per call into the micro-kernel's A panels.
 *
 * tb_conv_gemm_run is single-threaded; weight packing uses the thread pool for large weights (inline
 * inside a parallel region). Never allocates (the caller sizes and owns the packed weights and scratch). */
#ifndef TORCHBURN_KERNELS_CONV_GEMM_H
#define TORCHBURN_KERNELS_CONV_GEMM_H

#include <stdint.h>

#include "kernels/gemm.h"
#include "kernels/nn_kernels.h"
#include "torchburn/cpu.h"

typedef struct tb_conv_gemm {
    const void *microkernel; /* the ISA's tb_gemm_microkernel (kernels/gemm_internal.h) */
    int mr, nr;              /* its register tile */
    int64_t kc;              /* its k block */
    int64_t m, k;            /* per-group output channels and GEMM depth */
    int64_t m_panels;        /* ceil(m / mr) */
    tb_im2col_panel_fn im2col_panel; /* the same ISA's panel im2col */
} tb_conv_gemm;

/* Chooses the micro-kernel of `isa` (the reference one when not compiled in) for an m x k weight. */
void tb_conv_gemm_init(tb_conv_gemm *plan, tb_isa isa, int64_t m, int64_t k);

/* Floats of one group's packed weights, and of the per-thread B-panel scratch (a group of up to 8
 * NR x K panels, at most 4 MiB unless one panel is larger). */
int64_t tb_conv_gemm_weight_floats(const tb_conv_gemm *plan);
int64_t tb_conv_gemm_scratch_floats(const tb_conv_gemm *plan);

/* Packs one group's weights w[m, k] (row-major) into `packed` (tb_conv_gemm_weight_floats floats), each
 * row multiplied by row_scale[row] when row_scale is non-NULL (a folded eval BatchNorm: the same single
 * f32 product per weight as folding first). */
void tb_conv_gemm_pack_weight(const tb_conv_gemm *plan, const float *w, const float *row_scale, float *packed);

/* Computes output columns [col_begin, col_end) of one image and group. x: the group's input planes
 * (g->channels of them); y: output row 0 of the group (row stride ldy, columns contiguous); bias: the
 * group's m row biases or NULL; residual: laid out like y or NULL. scratch: at least
 * tb_conv_gemm_scratch_floats(plan) floats, 64-byte aligned (the micro-kernels load B panels aligned). */
void tb_conv_gemm_run(const tb_conv_gemm *plan, const float *packed_weight, const tb_window_geometry *g,
                      const float *x, int64_t col_begin, int64_t col_end, float *scratch, float *y, int64_t ldy,
                      const float *bias, tb_activation activation, const float *residual);

/* Columns [col_begin, col_end) of the batch's concatenated output columns (image n's output column j
 * is n * spatial + j), for planes too small to fill the micro-kernel's NR-wide panels one image at a
 * time (a 7x7 plane is 49 columns: two 32-wide panels, 23% padding). x: image 0's group input planes,
 * images x_image_stride floats apart; y / residual: image 0's output row 0 of the group, images
 * y_image_stride apart, rows `spatial` apart. scratch: tb_conv_gemm_images_scratch_floats(plan) floats
 * (64-byte aligned); c: tb_conv_gemm_images_c_floats(plan) floats, where C is accumulated before it is
 * copied to each image's planes and the epilogue applied there. Same sums as tb_conv_gemm_run. */
int64_t tb_conv_gemm_images_scratch_floats(const tb_conv_gemm *plan);
int64_t tb_conv_gemm_images_c_floats(const tb_conv_gemm *plan);
void tb_conv_gemm_run_images(const tb_conv_gemm *plan, const float *packed_weight, const tb_window_geometry *g,
                             const float *x, int64_t x_image_stride, int64_t spatial, int64_t col_begin,
                             int64_t col_end, float *scratch, float *c, float *y, int64_t y_image_stride,
                             const float *bias, tb_activation activation, const float *residual);

#endif
