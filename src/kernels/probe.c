/* Machine probes (see torchburn/probe.h): peak FMA throughput per ISA and memory read bandwidth. */
#include <math.h>
#include <time.h>

#include "kernels/probe_kernels.h"
#include "torchburn/alloc.h"
#include "torchburn/probe.h"
#include "torchburn/thread_pool.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double tb_fma_loop_scalar(int64_t iterations, float *sink) {
    float acc[8];
    for (int i = 0; i < 8; i++)
        acc[i] = (float)i * 1e-3f;
    for (int64_t it = 0; it < iterations; it++)
        for (int i = 0; i < 8; i++)
            acc[i] = fmaf(acc[i], 0.999999f, 1e-7f);
    for (int i = 0; i < 8; i++)
        *sink += acc[i];
    return (double)iterations * 8 * 2;
}

typedef double (*fma_loop)(int64_t, float *);

typedef struct peak_job {
    fma_loop loop;
    int64_t iterations;
    float sinks[64];
} peak_job;

static void peak_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    peak_job *job = context;
    for (int64_t i = begin; i < end; i++)
        job->loop(job->iterations, &job->sinks[i & 63]);
}

tb_status tb_probe_peak_gflops(tb_isa isa, double seconds, double *gflops) {
    *gflops = 0;
    if (!tb_isa_supported(isa))
        return tb_error_set(TB_ERR_UNSUPPORTED, "probe: ISA '%s' is not supported here", tb_isa_name(isa));
    fma_loop loop = tb_fma_loop_scalar;
#ifdef TB_HAVE_X86
    if (isa == TB_ISA_AVX512)
        loop = tb_fma_loop_avx512;
    else if (isa == TB_ISA_AVX2)
        loop = tb_fma_loop_avx2;
#endif
    int threads = tb_num_threads();
    float sink = 0;
    /* calibrate one thread's iteration count for ~seconds */
    int64_t iterations = 1 << 16;
    double start = now_seconds();
    loop(iterations, &sink);
    double elapsed = now_seconds() - start;
    if (elapsed > 0)
        iterations = (int64_t)((double)iterations * seconds / elapsed);
    if (iterations < 1024)
        iterations = 1024;
    double flops_per_call = loop(1, &sink) / 1.0;
    /* best of several short rounds: on a shared machine the peak is what an undisturbed round shows */
    enum { ROUNDS = 5 };
    peak_job job = {.loop = loop, .iterations = iterations / ROUNDS > 1024 ? iterations / ROUNDS : 1024};
    double best = 0;
    for (int round = 0; round < ROUNDS; round++) {
        start = now_seconds();
        tb_parallel_for(threads, 1, peak_chunk, &job);
        elapsed = now_seconds() - start;
        double rate = flops_per_call * (double)job.iterations * threads / elapsed * 1e-9;
        if (rate > best)
            best = rate;
    }
    *gflops = best;
    return TB_OK;
}

float tb_read_sum_scalar(const float *x, int64_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
    }
    for (; i < n; i++)
        s0 += x[i];
    return s0 + s1 + s2 + s3;
}

typedef struct bandwidth_job {
    float (*read_sum)(const float *x, int64_t n); /* widest loads of the active ISA */
    const float *data;
    int64_t count, pieces;
    float partial[256];
} bandwidth_job;

static void bandwidth_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    bandwidth_job *job = context;
    for (int64_t piece = begin; piece < end; piece++) {
        int64_t first = job->count * piece / job->pieces, last = job->count * (piece + 1) / job->pieces;
        job->partial[piece & 255] += job->read_sum(job->data + first, last - first);
    }
}

tb_status tb_probe_read_bandwidth(size_t nbytes, int repeats, double *gbps) {
    *gbps = 0;
    float *data = NULL;
    TB_TRY(tb_alloc(nbytes, TB_ALLOC_ZERO, (void **)&data)); /* zero-fill also faults every page in */
    bandwidth_job job = {.read_sum = tb_read_sum_scalar, .data = data, .count = (int64_t)(nbytes / sizeof(float))};
#ifdef TB_HAVE_X86
    if (tb_isa_active() == TB_ISA_AVX512)
        job.read_sum = tb_read_sum_avx512;
    else if (tb_isa_active() == TB_ISA_AVX2)
        job.read_sum = tb_read_sum_avx2;
#endif
    job.pieces = tb_num_threads();
    double best = 0;
    for (int r = 0; r < (repeats < 1 ? 1 : repeats); r++) {
        double start = now_seconds();
        tb_parallel_for(job.pieces, 1, bandwidth_chunk, &job);
        double elapsed = now_seconds() - start;
        double rate = (double)nbytes / elapsed * 1e-9;
        if (rate > best)
            best = rate;
    }
    tb_free(data);
    *gbps = best;
    return TB_OK;
}
