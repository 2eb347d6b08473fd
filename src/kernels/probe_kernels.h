/* Per-ISA loops behind the machine probes. FMA loops behind tb_probe_peak_gflops: each runs `iterations` rounds of independent FMA
 * chains on registers and returns the flops done (and a value that keeps the work alive). */
#ifndef TORCHBURN_PROBE_KERNELS_H
#define TORCHBURN_PROBE_KERNELS_H

#include <stdint.h>

double tb_fma_loop_scalar(int64_t iterations, float *sink);
double tb_fma_loop_avx2(int64_t iterations, float *sink);
double tb_fma_loop_avx512(int64_t iterations, float *sink);

/* Sum of x[0..n) with the ISA's widest loads and four independent accumulators: a read sweep that
 * runs at memory speed (the bandwidth probe's inner loop). */
float tb_read_sum_scalar(const float *x, int64_t n);
float tb_read_sum_avx2(const float *x, int64_t n);
float tb_read_sum_avx512(const float *x, int64_t n);

#endif
