/* Memory read bandwidth as the LLM benchmark's roofline sees it: parallel sweeps over a buffer much larger
 * than the last-level cache with the widest vector loads of the active ISA (the same width the decode
 * kernels stream weights with), best of several repeats. */
#include <time.h>

#include "llm/llm_internal.h"
#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

typedef struct sweep_job {
    const tb_llm_kernels *kernels;
    const float *data;
    int64_t count, pieces;
    float sink[64];
} sweep_job;

static void sweep(void *context, int64_t begin, int64_t end, int thread_index) {
    sweep_job *job = context;
    for (int64_t piece = begin; piece < end; piece++) {
        const int64_t first = job->count * piece / job->pieces, last = job->count * (piece + 1) / job->pieces;
        job->sink[thread_index & 63] += job->kernels->read_sum(job->data + first, last - first);
    }
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

tb_status tb_llm_read_bandwidth(size_t nbytes, int repeats, double *gbps) {
    *gbps = 0.0;
    float *data = NULL;
    TB_TRY(tb_alloc(nbytes, TB_ALLOC_ZERO, (void **)&data)); /* zero-fill faults every page in */
    sweep_job job = {.kernels = tb_llm_kernels_active(), .data = data, .count = (int64_t)(nbytes / sizeof(float))};
    job.pieces = tb_num_threads();
    double best = 0.0;
    for (int r = 0; r < (repeats < 1 ? 1 : repeats); r++) {
        const double start = now_seconds();
        tb_parallel_for(job.pieces, 1, sweep, &job);
        const double rate = (double)nbytes / (now_seconds() - start) * 1e-9;
        best = rate > best ? rate : best;
    }
    tb_free(data);
    *gbps = best;
    return TB_OK;
}
