/* The thread pool: persistent pthreads that spin briefly and then sleep, a parallel_for whose caller
 * takes part as thread 0, and fork safety (a child process builds a fresh pool on first use).
 * Thread count: tb_set_num_threads, else TORCHBURN_NUM_THREADS, else RAYON_NUM_THREADS, else the
 * number of physical cores available to the process. */
#ifndef TORCHBURN_THREAD_POOL_H
#define TORCHBURN_THREAD_POOL_H

#include <stdint.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Body of a parallel loop: handles items [begin, end). thread_index is in [0, tb_num_threads()) and
 * is unique among the threads of one tb_parallel_for. It is not unique across concurrent callers (a
 * loop started while the pool is busy runs inline as thread 0), so per-thread scratch must be
 * _Thread_local storage, not a global array indexed by thread_index. */
typedef void (*tb_parallel_fn)(void *context, int64_t begin, int64_t end, int thread_index);

/* Runs fn over [0, count) split into chunks of at least `grain` items (grain <= 0 means 1), spread
 * over the pool, and returns when every chunk is done. Runs inline on the calling thread when the
 * range is a single chunk, when called from inside a parallel region, or when another thread holds
 * the pool. fn must not fail: collect errors in the context. */
TB_API void tb_parallel_for(int64_t count, int64_t grain, tb_parallel_fn fn, void *context);

/* Threads a parallel_for may use (>= 1). */
TB_API int tb_num_threads(void);

/* Sets the thread count (n >= 1; n is capped at 1024). Takes effect on the next parallel_for. */
TB_API tb_status tb_set_num_threads(int n);

/* Physical cores available to this process (>= 1). */
TB_API int tb_physical_cores(void);

/* Where parallel_for runs its chunks: torchburn's own pool (the default), or the team of the OpenMP
 * runtime another library in the process already loaded (PyTorch's libgomp): one set of threads for
 * both, so neither library's idle spinning slows the other's kernels. In the host mode the thread
 * count is tb_set_num_threads / TORCHBURN_NUM_THREADS when set, else the host's omp_get_max_threads()
 * (what torch.set_num_threads sets). A forked child returns to the pool. */
typedef enum tb_parallel_runtime { TB_PARALLEL_POOL = 0, TB_PARALLEL_HOST_OPENMP = 1 } tb_parallel_runtime;

/* TB_ERR_UNSUPPORTED for TB_PARALLEL_HOST_OPENMP when no OpenMP runtime is loaded in the process
 * (this never loads one). */
TB_API TB_NODISCARD tb_status tb_set_parallel_runtime(tb_parallel_runtime runtime);
TB_API tb_parallel_runtime tb_get_parallel_runtime(void);

/* The path of the loaded OpenMP runtime the host mode would use, or NULL when there is none. */
TB_API const char *tb_host_openmp_library(void);

/* Nonzero while the calling thread is inside a tb_parallel_for body. */
TB_API int tb_in_parallel_region(void);

#ifdef __cplusplus
}
#endif
#endif
