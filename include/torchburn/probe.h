/* Machine probes for benchmarks' roofline columns: sustained FMA throughput and memory read
 * bandwidth, measured on this machine with the thread pool. */
#ifndef TORCHBURN_PROBE_H
#define TORCHBURN_PROBE_H

#include <stddef.h>

#include "torchburn/cpu.h"
#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Peak f32 GFLOP/s (an FMA counts 2) of register-only FMA chains at `isa`, on every pool thread for
 * about `seconds`. */
TB_API TB_NODISCARD tb_status tb_probe_peak_gflops(tb_isa isa, double seconds, double *gflops);

/* Read bandwidth in GB/s (1e9 bytes/s): the best of `repeats` parallel sweeps summing a buffer of
 * `nbytes` (use one much larger than the last-level cache). */
TB_API TB_NODISCARD tb_status tb_probe_read_bandwidth(size_t nbytes, int repeats, double *gbps);

#ifdef __cplusplus
}
#endif
#endif
