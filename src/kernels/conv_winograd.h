/* Winograd F(2x2, 3x3) convolution (3x3 kernels, stride 1, dilation 1, one group), after Lavin & Gray
 * (2015): every 2x2 block of outputs (a "tile") is
 *     Y = A^T [ sum_c (G g_c G^T) .* (B^T d_c B) ] A
 * where d_c is the tile's 4x4 input patch of channel c and g_c the 3x3 filter. Per tile and output
 * channel that is 16 products per input channel instead of 36 (2.25x fewer), and the 16 element-wise
 * products summed over channels are 16 GEMMs
 *     M_xi[co, t] = sum_c U_xi[co, c] V_xi[c, t]      xi < 16, U = G g G^T, V = B^T d B
 * run on the f32 GEMM micro-kernels (kernels/gemm_internal.h): U_xi as packed A panels (transformed
 * once, in double, rounded once; cached with the other packed convolution weights), V_xi as B panels
 * written straight by the input transform, M in a per-thread buffer that stays in L2, and the output
 * transform writes Y with the convolution epilogue (bias, activation, residual).
 *
 * Numerics: the transforms' coefficients (0, +-1, +-1/2) are exact in binary, so the error over a
 * direct convolution is a few more roundings of additions per output (measured against float64 in
 * tests/python/test_kernels_conv.py and docs/kernels.md); TORCHBURN_CONV_WINOGRAD=0 turns the path off.
 *
 * Tiles are numbered over the whole batch, t = (n * tiles_h + ty) * tiles_w + tx, so small late-stage
 * planes still fill whole B panels. A task is one block of tiles against one part of the output
 * channels; tb_winograd_run is single-threaded and never allocates. */
#ifndef TORCHBURN_KERNELS_CONV_WINOGRAD_H
#define TORCHBURN_KERNELS_CONV_WINOGRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/gemm_internal.h"
#include "torchburn/cpu.h"

/* The 16 transformed positions xi = 4 * row + column of the 4x4 transform domain. */
enum { TB_WINOGRAD_POSITIONS = 16 };

/* Where tiles are: input [N, C_in, in_h, in_w] and output [N, C_out, out_h, out_w], contiguous. Tile
 * (ty, tx) of image n covers output rows 2ty, 2ty + 1 and columns 2tx, 2tx + 1 (those inside the
 * plane), and reads input rows 2ty - pad_top .. + 3 and columns 2tx - pad_left .. + 3 (zero outside). */
typedef struct tb_winograd_geometry {
    int64_t in_h, in_w, out_h, out_w;
    int64_t pad_top, pad_left;
    int64_t tiles_h, tiles_w;          /* ceil(out_h / 2), ceil(out_w / 2) */
    int64_t x_image_stride, y_image_stride; /* floats between images */
} tb_winograd_geometry;

/* Input transform of tiles [t0, t1) for `channels` input planes starting at x (image 0's first
 * channel of the chunk; planes in_h * in_w apart) into 16 B-panel sets: V_xi at v + xi * v_xi_stride,
 * element (c, t) at ((t - t0) / nr) * channels * nr + c * nr + (t - t0) % nr. Lanes of the last
 * panel past t1 are zeroed. work: 16 (max(tiles_w, t1 - t0) + 2 rounded up to 16) floats. */
typedef void (*tb_winograd_input_fn)(const tb_winograd_geometry *geo, const float *x, int64_t t0, int64_t t1,
                                     int64_t channels, int nr, float *v, int64_t v_xi_stride, float *work);

/* Output transform of tiles [t0, t1) for `rows` output channels: M_xi at m + xi * m_xi_stride, row i
 * (output channel i of y) at i * ldm, column t - t0. y(n, i, 2ty + a, 2tx + b) = (A^T M A)[a, b] +
 * bias[i] (bias NULL: 0), then `activation`, then + residual at the same position (residual NULL:
 * none); activations other than none and relu through `epilogue` (the micro-kernel table's). y /
 * residual: image 0's output channel 0. work: as for the input transform. Returns whether any output
 * it wrote is NaN or infinite (tb_winograd_run then recomputes those directly). */
typedef bool (*tb_winograd_output_fn)(const tb_winograd_geometry *geo, const float *m, int64_t m_xi_stride,
                                      int64_t ldm, int rows, int64_t t0, int64_t t1, const float *bias,
                                      tb_activation activation, const float *residual, float *y,
                                      tb_gemm_epilogue_fn epilogue, float *work);

/* The weight transform U = G g G^T of `count` <= 64 filters g[c * 9 + a] (times *scale when scale is
 * non-NULL) into u[xi * u_stride + c] (kernels/simd/winograd_body.h); the same bits at every ISA. */
typedef void (*tb_winograd_filters_fn)(const float *g, int64_t count, const float *scale, float *u, int64_t u_stride);

void tb_winograd_filters_ref(const float *g, int64_t count, const float *scale, float *u, int64_t u_stride);
void tb_winograd_filters_avx2(const float *g, int64_t count, const float *scale, float *u, int64_t u_stride);
void tb_winograd_filters_avx512(const float *g, int64_t count, const float *scale, float *u, int64_t u_stride);
void tb_winograd_input_ref(const tb_winograd_geometry *geo, const float *x, int64_t t0, int64_t t1, int64_t channels,
                           int nr, float *v, int64_t v_xi_stride, float *work);
bool tb_winograd_output_ref(const tb_winograd_geometry *geo, const float *m, int64_t m_xi_stride, int64_t ldm,
                            int rows, int64_t t0, int64_t t1, const float *bias, tb_activation activation,
                            const float *residual, float *y, tb_gemm_epilogue_fn epilogue,
                            float *work);
void tb_winograd_input_avx2(const tb_winograd_geometry *geo, const float *x, int64_t t0, int64_t t1,
                            int64_t channels, int nr, float *v, int64_t v_xi_stride, float *work);
bool tb_winograd_output_avx2(const tb_winograd_geometry *geo, const float *m, int64_t m_xi_stride, int64_t ldm,
                             int rows, int64_t t0, int64_t t1, const float *bias, tb_activation activation,
                             const float *residual, float *y,
                             tb_gemm_epilogue_fn epilogue, float *work);
void tb_winograd_input_avx512(const tb_winograd_geometry *geo, const float *x, int64_t t0, int64_t t1,
                              int64_t channels, int nr, float *v, int64_t v_xi_stride, float *work);
bool tb_winograd_output_avx512(const tb_winograd_geometry *geo, const float *m, int64_t m_xi_stride, int64_t ldm,
                               int rows, int64_t t0, int64_t t1, const float *bias, tb_activation activation,
                               const float *residual, float *y,
                               tb_gemm_epilogue_fn epilogue, float *work);


typedef struct tb_winograd_plan {
    const void *microkernel; /* the ISA's tb_gemm_microkernel */
    int mr, nr;
    int64_t kc;              /* input channels per k block */
    int64_t in_channels, out_channels, m_panels;
    tb_winograd_geometry geo;
    int64_t tiles;           /* over the batch */
    int64_t block_tiles;     /* tiles per task (a multiple of nr) */
    int64_t part_rows;       /* output channels per task (a multiple of mr) */
    tb_winograd_input_fn input;
    tb_winograd_output_fn output;
    tb_winograd_filters_fn filters;
} tb_winograd_plan;

/* Whether the path is on: TORCHBURN_CONV_WINOGRAD (unset or anything but "0": yes) until
 * tb_winograd_set_enabled says otherwise (the Python tests run both paths in one process). */
bool tb_winograd_enabled(void);
TB_API void tb_winograd_set_enabled(bool enabled);

/* Convolutions the ops layer has run on this path since the process started (tests assert with it
 * which path ran). */
TB_API int64_t tb_winograd_calls(void);
void tb_winograd_count_call(void);

/* Plans a 3x3 stride-1 convolution of in_channels -> out_channels over `batch` images at `isa`, with
 * the task blocks sized from the L2 CPUID reports and `threads`. */
void tb_winograd_init(tb_winograd_plan *plan, tb_isa isa, int64_t batch, int64_t in_channels, int64_t out_channels,
                      int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, int64_t pad_top, int64_t pad_left,
                      int64_t threads);

/* Packed weights: 16 sets of out_channels (padded to whole mr panels) x in_channels A panels. */
int64_t tb_winograd_weight_floats(const tb_winograd_plan *plan);

/* U = G (w * row_scale) G^T for w [out_channels, in_channels, 3, 3] (row_scale NULL: 1; the product
 * w * scale is one f32 rounding, as folding first; the transform is summed in double and rounded
 * once), into `packed`. */
void tb_winograd_pack_weight(const tb_winograd_plan *plan, const float *w, const float *row_scale, float *packed);

/* Per-thread scratch of one task: V (64-byte aligned), M, and the transforms' work. */
int64_t tb_winograd_v_floats(const tb_winograd_plan *plan);
int64_t tb_winograd_m_floats(const tb_winograd_plan *plan);
int64_t tb_winograd_work_floats(const tb_winograd_plan *plan);

/* Tasks: blocks x parts; task = part + parts * block. */
int64_t tb_winograd_blocks(const tb_winograd_plan *plan);
int64_t tb_winograd_parts(const tb_winograd_plan *plan);

/* What a task reads and writes. */
typedef struct tb_winograd_args {
    const float *packed;    /* tb_winograd_pack_weight of w and row_scale */
    const float *w;         /* [C_out, C_in, 3, 3] */
    const float *row_scale; /* [C_out] or NULL */
    const float *x;         /* [N, C_in, H, W] */
    float *y;               /* [N, C_out, OH, OW] */
    const float *bias;      /* [C_out] or NULL */
    tb_activation activation;
    const float *residual;  /* like y, or NULL */
} tb_winograd_args;

/* One task: tiles of `block`, output channels of `part`.
 *
 * Special values: an output whose window holds a NaN or an infinity, or whose transform overflowed,
 * comes out of the transform non-finite (the NaN or infinity reaches every output whose window it
 * lies in, and possibly the other outputs of its tile). Each non-finite output is recomputed as a
 * direct convolution (double sum of w * scale * x, then the epilogue), so NaN and infinity land
 * exactly where the direct convolution puts them; finite outputs are the transform's. */
void tb_winograd_run(const tb_winograd_plan *plan, const tb_winograd_args *args, int64_t block, int64_t part, float *v,
                     float *m, float *work);

#endif
