/* Per-ISA FMA loops behind tb_probe_peak_gflops: each runs `iterations` rounds of independent FMA
 * chains on registers and returns the flops done (and a value that keeps the work alive). */
#ifndef TORCHBURN_PROBE_KERNELS_H
#define TORCHBURN_PROBE_KERNELS_H

#include <stdint.h>

double tb_fma_loop_scalar(int64_t iterations, float *sink);
double tb_fma_loop_avx2(int64_t iterations, float *sink);
double tb_fma_loop_avx512(int64_t iterations, float *sink);

#endif
