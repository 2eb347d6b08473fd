/* Selection of the per-ISA convolution helpers (kernels/nn_kernels.h): the reference table, and the
 * AVX2 / AVX-512 ones when compiled in and supported by this CPU. */
#include <string.h>

#include "kernels/nn_kernels.h"
#include "torchburn/cpu.h"

static const tb_nn_kernels nn_kernels_ref = {
    .isa_name = "scalar",
    .im2col_panel = tb_im2col_panel_ref,
    .conv2d_plane = tb_conv2d_plane_f32,
    .max_pool2d_plane = tb_max_pool2d_plane_f32,
    .winograd_input = tb_winograd_input_ref,
    .winograd_output = tb_winograd_output_ref,
    .winograd_filters = tb_winograd_filters_ref,
};

#if defined(TB_HAVE_X86)
static const tb_nn_kernels nn_kernels_avx2 = {
    .isa_name = "avx2",
    .im2col_panel = tb_im2col_panel_avx2,
    .conv2d_plane = tb_conv2d_plane_avx2,
    .max_pool2d_plane = tb_max_pool2d_plane_avx2,
    .conv_direct = tb_conv_direct_avx2,
    .conv_direct_lanes = 8,
    .conv_direct_rows = 6,
    .conv_direct_max_stride = 1, /* stride 2 here (a deinterleave per 6-channel tile) lost to im2col panels */
    .winograd_input = tb_winograd_input_avx2,
    .winograd_output = tb_winograd_output_avx2,
    .winograd_filters = tb_winograd_filters_avx2,
};

static const tb_nn_kernels nn_kernels_avx512 = {
    .isa_name = "avx512",
    .im2col_panel = tb_im2col_panel_avx512,
    .conv2d_plane = tb_conv2d_plane_avx512,
    .max_pool2d_plane = tb_max_pool2d_plane_avx512,
    .conv_direct = tb_conv_direct_avx512,
    .conv_direct_lanes = 16,
    .conv_direct_rows = 14,
    .conv_direct_max_stride = 2,
    .winograd_input = tb_winograd_input_avx512,
    .winograd_output = tb_winograd_output_avx512,
    .winograd_filters = tb_winograd_filters_avx512,
};
#endif

const tb_nn_kernels *tb_nn_kernels_for(tb_isa isa) {
#if defined(TB_HAVE_X86)
    if (isa == TB_ISA_AVX512 && tb_isa_supported(TB_ISA_AVX512))
        return &nn_kernels_avx512;
    if (isa == TB_ISA_AVX2 && tb_isa_supported(TB_ISA_AVX2))
        return &nn_kernels_avx2;
#endif
    (void)isa;
    return &nn_kernels_ref;
}

/* Intel's AVX-512 cores (measured on a Xeon with AMX, family 6 model 167, docs/benchmarks.md
 * 2026-12-04): the im2col + GEMM path beat the direct one on every stride-2 row (3x3/2 1.40x, 7x7/2
 * 1.22x) and on 3x3/1 at 64 channels (1.15x); the direct path kept its lead only for shallow
 * convolutions (16 channels 3x3, K = 144: 1.19x). ResNet-18 batch 8 went from 1.02x to 1.22x eager.
 * AMD Zen 5 measured the direct path ahead, so other vendors take it wherever it handles the stride.
 * The AVX2 direct kernel (6 rows x 8 lanes) is taken up to K = 576 on every vendor: on Zen 3 (family 25
 * model 1, 2026-12-07) im2col + GEMM ran the 3x3/1 convolutions of 128 and 256 channels (K = 1152, 2304)
 * 1.5-1.9x faster, tied at 64 channels (K = 576), and lost at 16 (K = 144: 1.3 vs 0.7-0.9 ms). */
tb_conv_direct_choice tb_conv_direct_choice_for(const tb_nn_kernels *kernels) {
    tb_conv_direct_choice choice = {.max_stride = kernels->conv_direct_max_stride, .max_k = 0};
#if defined(TB_HAVE_X86)
    if (kernels == &nn_kernels_avx512 && strcmp(tb_cpu_get_features()->vendor, "GenuineIntel") == 0) {
        choice.max_stride = 1;
        choice.max_k = 256;
    }
    if (kernels == &nn_kernels_avx2)
        choice.max_k = 576;
#endif
    return choice;
}
