/* Memory read-bandwidth probe for the quantized-GEMV benchmark (python -m torchburn.bench quant): reads
 * slices of a large buffer on the thread pool and times each slice, so the kernels' GB/s can be put
 * next to what the machine delivers under the same conditions. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/quant_kernels.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/quant.h"
#include "torchburn/thread_pool.h"

typedef struct read_job {
    const uint64_t *base; /* slice start */
    int64_t words;        /* slice length in uint64 */
    int64_t parts;
    atomic_uint_fast64_t sink; /* keeps the reads from being optimized away */
} read_job;

/* Eight independent sums: the loop vectorizes and keeps enough loads in flight to stream. */
static uint64_t read_words(const uint64_t *p, int64_t count) {
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
        a0 += p[i];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
        a4 += p[i + 4];
        a5 += p[i + 5];
        a6 += p[i + 6];
        a7 += p[i + 7];
    }
    for (; i < count; i++)
        a0 += p[i];
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

/* Reads with the widest loads of the active ISA level (what the kernels use). */
static uint64_t read_span(const uint64_t *p, int64_t words) {
#ifdef TB_HAVE_X86
    switch (tb_isa_active()) {
    case TB_ISA_AVX512:
        return tb_quant_read_bytes_avx512(p, words / 8 * 64) + read_words(p + words / 8 * 8, words % 8);
    case TB_ISA_AVX2:
        return tb_quant_read_bytes_avx2(p, words / 8 * 64) + read_words(p + words / 8 * 8, words % 8);
    default:
        break;
    }
#endif
    return read_words(p, words);
}

static void read_parts(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    read_job *job = context;
    const int64_t per = job->words / job->parts;
    uint64_t sum = 0;
    for (int64_t part = begin; part < end; part++)
        sum += read_span(job->base + part * per, part == job->parts - 1 ? job->words - part * per : per);
    atomic_fetch_add(&job->sink, sum);
}

static volatile uint64_t read_sink; /* observed so the reads are not optimized away */

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

tb_status tb_quant_read_bandwidth(size_t buffer_bytes, size_t slice_bytes, int slices, double *best_gbps,
                                  double *median_gbps) {
    if (!best_gbps || !median_gbps || slices < 1 || slice_bytes < 4096 || buffer_bytes < slice_bytes)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "read_bandwidth: need slices >= 1, slice_bytes >= 4096, buffer_bytes >= slice_bytes");
    void *buffer = NULL;
    TB_TRY(tb_alloc(buffer_bytes, TB_ALLOC_DEFAULT, &buffer));
    double *rates = malloc(sizeof(double) * (size_t)slices);
    if (!rates) {
        tb_free(buffer);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "read_bandwidth: no memory for %d results", slices);
    }
    memset(buffer, 1, buffer_bytes); /* touch every page before timing */
    const size_t slice_count = buffer_bytes / slice_bytes;
    read_job job = {.words = (int64_t)(slice_bytes / 8), .parts = tb_num_threads()};
    atomic_init(&job.sink, 0);
    for (int s = 0; s < slices; s++) {
        job.base = (const uint64_t *)((const char *)buffer + (size_t)s % slice_count * slice_bytes);
        double start = now_seconds();
        tb_parallel_for(job.parts, 1, read_parts, &job);
        double seconds = now_seconds() - start;
        rates[s] = (double)slice_bytes / (seconds > 0 ? seconds : 1e-9) / 1e9;
    }
    qsort(rates, (size_t)slices, sizeof(double), compare_doubles);
    *best_gbps = rates[slices - 1];
    *median_gbps = rates[slices / 2];
    free(rates);
    tb_free(buffer);
    read_sink = atomic_load(&job.sink);
    return TB_OK;
}
