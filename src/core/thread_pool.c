/* Persistent pthread pool behind tb_parallel_for.
 *
 * One job at a time. Chunks are claimed from `claim`, a 64-bit word holding (job tag << 32 | chunk
 * count << 16 | next chunk index): a claim succeeds only for the current job's tag and an index below its
 * count, so a worker that wakes late can never take a chunk of a later job nor read a finished job's
 * fields (ThreadSanitizer found the earlier over-claim that did), and the caller waits only for chunks actually claimed (counted in
 * `done`), not for every worker to check in — a descheduled worker costs nothing. The caller closes
 * the claim word while it writes a job's fields and opens it (release) afterwards; a worker reads the
 * fields only after a successful claim (acquire). Workers spin on `generation` for a short while
 * after each job (back-to-back loops fan out in about a microsecond) and then sleep on a condition
 * variable. A caller that finds the pool busy runs its loop inline. After fork() the child abandons
 * the parent's pool (its threads do not exist there) and builds a new one.
 *
 * Host OpenMP team: inside a process whose other library (PyTorch) already runs an OpenMP team, two
 * sets of busy threads on the same cores slow each other down: the OpenMP runtime's threads spin for
 * a while after each of its parallel regions, exactly when our pool starts the next kernel. With
 * tb_set_parallel_runtime(TB_PARALLEL_HOST_OPENMP) a parallel_for runs on the host's team instead
 * (GOMP_parallel, looked up in the OpenMP library already loaded in the process, never loaded by us),
 * so one set of threads serves both libraries. Chunks are claimed from a counter as in the pool; the
 * thread count is torchburn's explicit setting if there is one, else the host runtime's
 * (omp_get_max_threads, which torch.set_num_threads sets). A forked child goes back to the pool
 * (OpenMP runtimes do not survive fork). */
#include "torchburn/thread_pool.h"

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define tb_cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define tb_cpu_relax() __asm__ __volatile__("yield")
#else
#define tb_cpu_relax() ((void)0)
#endif

enum { TB_MAX_THREADS = 1024, TB_SPIN_ITERATIONS = 20000 };

typedef struct pool {
    int thread_count;                 /* including the caller */
    pthread_t *workers;               /* thread_count - 1 of them */
    pthread_mutex_t submit_lock;      /* held by the caller for the duration of a job */
    pthread_mutex_t sleep_lock;
    pthread_cond_t wake;
    atomic_uint_fast64_t generation;  /* bumped to publish a job */
    atomic_int sleepers;
    atomic_bool shutting_down;
    /* the current job: fields written while `claim` is closed */
    tb_parallel_fn fn;
    void *context;
    int64_t count, chunk_size, chunk_count;
    uint32_t tag;
    _Atomic uint64_t claim;   /* tag << 32 | chunk count << 16 | next chunk index (count 0 while writing) */
    atomic_int_fast64_t done; /* chunks finished */
} pool;

#define TB_CLAIM_MAX_CHUNKS 0xffffu /* chunk count and index are 16-bit fields of the claim word */

typedef struct worker_start {
    pool *owner;
    int index;
} worker_start;

static pthread_mutex_t pool_create_lock = PTHREAD_MUTEX_INITIALIZER;
static pool *the_pool;
static atomic_int requested_threads; /* 0: from the environment */
static _Thread_local int in_parallel_region;
static _Thread_local int current_thread_index;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The host OpenMP runtime's entry points (libgomp's ABI, which LLVM's and Intel's runtimes export
 * too), found once in the libraries already loaded. */
typedef struct host_openmp {
    void (*parallel)(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
    int (*thread_num)(void);
    int (*max_threads)(void);
    char library[512];
} host_openmp;
static host_openmp host_omp;
static pthread_mutex_t host_omp_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int parallel_runtime = TB_PARALLEL_POOL;

/* Claims and runs chunks of the job tagged `tag` until none are left. */
static void run_chunks(pool *p, uint32_t tag, int thread_index) {
    int previous_region = in_parallel_region;
    in_parallel_region = 1;
    current_thread_index = thread_index;
    for (;;) {
        uint64_t word = atomic_load_explicit(&p->claim, memory_order_acquire);
        const uint32_t index = (uint32_t)word & 0xffffu, chunks = (uint32_t)(word >> 16) & 0xffffu;
        /* the chunk count travels in the word itself: a worker never reads a job's fields unless it
         * owns one of its chunks (which keeps the job, and so its fields, alive until it is done) */
        if ((uint32_t)(word >> 32) != tag || index >= chunks)
            break;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &word, word + 1, memory_order_acquire,
                                                   memory_order_relaxed))
            continue;
        int64_t begin = (int64_t)index * p->chunk_size;
        int64_t end = begin + p->chunk_size < p->count ? begin + p->chunk_size : p->count;
        p->fn(p->context, begin, end, thread_index);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
    in_parallel_region = previous_region;
}

static void *worker_main(void *arg) {
    worker_start start = *(worker_start *)arg;
    free(arg);
    pool *p = start.owner;
    uint_fast64_t seen = 0; /* the generation at creation: a job published before this thread
                               started running is still seen as new */
    for (;;) {
        int spins = 0;
        uint_fast64_t now;
        while ((now = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->shutting_down, memory_order_relaxed))
                return NULL;
            if (++spins < TB_SPIN_ITERATIONS) {
                tb_cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->sleep_lock);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->shutting_down))
                pthread_cond_wait(&p->wake, &p->sleep_lock);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->sleep_lock);
            spins = 0;
        }
        if (atomic_load(&p->shutting_down))
            return NULL;
        seen = now;
        uint32_t tag = (uint32_t)(atomic_load_explicit(&p->claim, memory_order_acquire) >> 32);
        run_chunks(p, tag, start.index);
    }
}

static int parse_thread_env(const char *name) {
    const char *value = getenv(name);
    if (!value || !value[0])
        return 0;
    char *end = NULL;
    long n = strtol(value, &end, 10);
    if (*end != '\0' || n < 1)
        return 0; /* ignored; documented: invalid values fall through to the next source */
    return n > TB_MAX_THREADS ? TB_MAX_THREADS : (int)n;
}

int tb_physical_cores(void) {
    static atomic_int cached;
    int known = atomic_load(&cached);
    if (known > 0)
        return known;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    int logical = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        logical = CPU_COUNT(&allowed);
    /* Count distinct (package, core) pairs among allowed CPUs. */
    enum { MAX_CORE_KEYS = 4096 };
    static long keys[MAX_CORE_KEYS];
    int distinct = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && distinct < MAX_CORE_KEYS; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        char path[128];
        long core = -1, package = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        FILE *f = fopen(path, "r");
        if (!f) {
            distinct = 0;
            break;
        }
        if (fscanf(f, "%ld", &core) != 1)
            core = -1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%ld", &package) != 1)
                package = 0;
            fclose(f);
        }
        if (core < 0) {
            distinct = 0;
            break;
        }
        long key = package * 1000003L + core;
        bool seen = false;
        for (int i = 0; i < distinct; i++)
            seen |= keys[i] == key;
        if (!seen)
            keys[distinct++] = key;
    }
    int cores = distinct > 0 ? distinct : logical;
    if (cores < 1)
        cores = 1;
    atomic_store(&cached, cores);
    return cores;
}

/* An explicit thread count (tb_set_num_threads, then the environment), or 0. */
static int explicit_threads(void) {
    int n = atomic_load(&requested_threads);
    if (n > 0)
        return n;
    n = parse_thread_env("TORCHBURN_NUM_THREADS");
    if (n > 0)
        return n;
    return parse_thread_env("RAYON_NUM_THREADS");
}

static int configured_threads(void) {
    int n = explicit_threads();
    if (n > 0)
        return n;
    if (atomic_load_explicit(&parallel_runtime, memory_order_acquire) == TB_PARALLEL_HOST_OPENMP) {
        n = host_omp.max_threads();
        return n < 1 ? 1 : n > TB_MAX_THREADS ? TB_MAX_THREADS : n;
    }
    return tb_physical_cores();
}

static int find_openmp_library(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    const char *name = info->dlpi_name;
    if (!name || !name[0])
        return 0;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "libgomp", 7) != 0 && strncmp(base, "libiomp", 7) != 0 && strncmp(base, "libomp", 6) != 0)
        return 0;
    /* RTLD_NOLOAD: a handle to the loaded copy only; nothing is loaded (or unloaded: the reference
     * taken here is kept, as the entry points are used for the life of the process) */
    void *handle = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (!handle)
        return 0;
    void *parallel = dlsym(handle, "GOMP_parallel");
    void *thread_num = dlsym(handle, "omp_get_thread_num");
    void *max_threads = dlsym(handle, "omp_get_max_threads");
    if (!parallel || !thread_num || !max_threads) {
        dlclose(handle);
        return 0;
    }
    *(void **)&host_omp.parallel = parallel;
    *(void **)&host_omp.thread_num = thread_num;
    *(void **)&host_omp.max_threads = max_threads;
    snprintf(host_omp.library, sizeof host_omp.library, "%s", name);
    return 1;
}

static void register_atfork(void);

const char *tb_host_openmp_library(void) {
    /* looked up again until found: a runtime may be loaded after the first question */
    pthread_mutex_lock(&host_omp_lock);
    if (!host_omp.parallel)
        dl_iterate_phdr(find_openmp_library, NULL);
    const char *library = host_omp.parallel ? host_omp.library : NULL;
    pthread_mutex_unlock(&host_omp_lock);
    return library;
}

tb_status tb_set_parallel_runtime(tb_parallel_runtime runtime) {
    if (runtime != TB_PARALLEL_POOL && runtime != TB_PARALLEL_HOST_OPENMP)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "set_parallel_runtime: unknown runtime %d", (int)runtime);
    if (runtime == TB_PARALLEL_HOST_OPENMP && !tb_host_openmp_library())
        return tb_error_set(TB_ERR_UNSUPPORTED,
                            "set_parallel_runtime: no OpenMP runtime (libgomp, libiomp, libomp with GOMP_parallel) "
                            "is loaded in this process");
    pthread_once(&atfork_once, register_atfork); /* a forked child must return to the pool */
    atomic_store(&parallel_runtime, (int)runtime);
    return TB_OK;
}

tb_parallel_runtime tb_get_parallel_runtime(void) { return (tb_parallel_runtime)atomic_load(&parallel_runtime); }

static void after_fork_in_child(void) {
    /* The parent's workers do not exist here; abandon that pool (leaking it is the only safe
     * option, as its mutexes may be held) and let the next parallel_for build a new one. */
    the_pool = NULL;
    pthread_mutex_init(&pool_create_lock, NULL);
    in_parallel_region = 0;
    atomic_store(&parallel_runtime, TB_PARALLEL_POOL);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

static void pool_destroy(pool *p) {
    if (!p)
        return;
    atomic_store(&p->shutting_down, true);
    pthread_mutex_lock(&p->sleep_lock);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->sleep_lock);
    for (int i = 0; i < p->thread_count - 1; i++)
        pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_mutex_destroy(&p->submit_lock);
    pthread_mutex_destroy(&p->sleep_lock);
    pthread_cond_destroy(&p->wake);
    free(p);
}

/* Builds a pool of `threads`; on any failure returns a pool with however many workers started. */
static pool *pool_create(int threads) {
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->submit_lock, NULL);
    pthread_mutex_init(&p->sleep_lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->thread_count = 1;
    p->workers = calloc((size_t)(threads > 1 ? threads - 1 : 1), sizeof(pthread_t));
    if (!p->workers)
        return p;
    for (int i = 1; i < threads; i++) {
        worker_start *start = malloc(sizeof *start);
        if (!start)
            break;
        start->owner = p;
        start->index = i;
        if (pthread_create(&p->workers[i - 1], NULL, worker_main, start) != 0) {
            free(start);
            break;
        }
        char name[16]; /* shown by top -H, perf and /proc/PID/task/TID/comm */
        snprintf(name, sizeof name, "torchburn-%u", (unsigned)i % 10000u); /* i < TB_MAX_THREADS */
        pthread_setname_np(p->workers[i - 1], name);
        p->thread_count++;
    }
    return p;
}

static pool *get_pool(void) {
    pthread_once(&atfork_once, register_atfork);
    pool *p = __atomic_load_n(&the_pool, __ATOMIC_ACQUIRE);
    int wanted = configured_threads();
    if (p && p->thread_count == wanted)
        return p;
    pthread_mutex_lock(&pool_create_lock);
    p = the_pool;
    if (!p || p->thread_count != wanted) {
        if (p) {
            pthread_mutex_lock(&p->submit_lock); /* wait for a running job to finish */
            pthread_mutex_unlock(&p->submit_lock);
            pool_destroy(p);
        }
        p = pool_create(wanted);
        __atomic_store_n(&the_pool, p, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pool_create_lock);
    return p;
}

int tb_num_threads(void) { return configured_threads(); }

tb_status tb_set_num_threads(int n) {
    if (n < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "set_num_threads: n must be >= 1, got %d", n);
    atomic_store(&requested_threads, n > TB_MAX_THREADS ? TB_MAX_THREADS : n);
    return TB_OK;
}

int tb_in_parallel_region(void) { return in_parallel_region; }

static void run_inline(int64_t count, tb_parallel_fn fn, void *context) {
    int previous = in_parallel_region;
    in_parallel_region = 1;
    fn(context, 0, count, previous ? current_thread_index : 0);
    in_parallel_region = previous;
}

/* Aims for a few chunks per thread for balance, but never below the grain (pool and host team). */
static void split_into_chunks(int64_t count, int64_t grain, int threads, int64_t *chunk_size, int64_t *chunk_count) {
    const int64_t target_chunks = (int64_t)threads * 4;
    *chunk_size = (count + target_chunks - 1) / target_chunks;
    if (*chunk_size < grain)
        *chunk_size = grain;
    *chunk_count = (count + *chunk_size - 1) / *chunk_size;
}

/* A parallel_for on the host OpenMP team: every team thread claims chunks from `next`. */
typedef struct host_job {
    tb_parallel_fn fn;
    void *context;
    int64_t count, chunk_size, chunk_count;
    atomic_int_fast64_t next;
    /* Release/acquire pairs around the region. The OpenMP runtime already orders the job's writes
     * before its threads and their work before GOMP_parallel returns, but inside a runtime built
     * without ThreadSanitizer that ordering is invisible to it; these make it visible, at one atomic
     * per thread per loop. */
    atomic_int published, finished;
} host_job;

static void host_team_body(void *data) {
    host_job *job = data;
    (void)atomic_load_explicit(&job->published, memory_order_acquire);
    int previous_region = in_parallel_region, previous_index = current_thread_index;
    const int thread_index = host_omp.thread_num();
    in_parallel_region = 1;
    current_thread_index = thread_index;
    for (;;) {
        int64_t chunk = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (chunk >= job->chunk_count)
            break;
        int64_t begin = chunk * job->chunk_size;
        int64_t end = begin + job->chunk_size < job->count ? begin + job->chunk_size : job->count;
        job->fn(job->context, begin, end, thread_index);
    }
    in_parallel_region = previous_region;
    current_thread_index = previous_index;
    atomic_fetch_add_explicit(&job->finished, 1, memory_order_release);
}

static void run_on_host_team(int64_t count, int64_t grain, tb_parallel_fn fn, void *context) {
    const int threads = configured_threads();
    if (threads < 2) {
        run_inline(count, fn, context);
        return;
    }
    host_job job = {.fn = fn, .context = context, .count = count};
    split_into_chunks(count, grain, threads, &job.chunk_size, &job.chunk_count);
    atomic_init(&job.next, 0);
    atomic_init(&job.finished, 0);
    atomic_store_explicit(&job.published, 1, memory_order_release);
    int64_t team = job.chunk_count < threads ? job.chunk_count : threads;
    host_omp.parallel(host_team_body, &job, (unsigned)team, 0); /* the caller is the team's thread 0 */
    (void)atomic_load_explicit(&job.finished, memory_order_acquire);
}

void tb_parallel_for(int64_t count, int64_t grain, tb_parallel_fn fn, void *context) {
    if (count <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (count <= grain || in_parallel_region) {
        run_inline(count, fn, context);
        return;
    }
    if (atomic_load_explicit(&parallel_runtime, memory_order_acquire) == TB_PARALLEL_HOST_OPENMP) {
        run_on_host_team(count, grain, fn, context);
        return;
    }
    pool *p = get_pool();
    if (!p || p->thread_count < 2 || pthread_mutex_trylock(&p->submit_lock) != 0) {
        run_inline(count, fn, context);
        return;
    }
    int64_t chunk_size, chunk_count;
    split_into_chunks(count, grain, p->thread_count, &chunk_size, &chunk_count);
    if (chunk_count > (int64_t)TB_CLAIM_MAX_CHUNKS) { /* more chunks than the claim word can count */
        chunk_size = (count + TB_CLAIM_MAX_CHUNKS - 1) / TB_CLAIM_MAX_CHUNKS;
        chunk_count = (count + chunk_size - 1) / chunk_size;
    }
    uint32_t tag = ++p->tag;
    atomic_store_explicit(&p->claim, (uint64_t)tag << 32, memory_order_release); /* closed: no chunks */
    p->fn = fn;
    p->context = context;
    p->count = count;
    p->chunk_size = chunk_size;
    p->chunk_count = chunk_count;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->claim, (uint64_t)tag << 32 | (uint64_t)chunk_count << 16, memory_order_release); /* open */
    atomic_fetch_add(&p->generation, 1); /* seq_cst: pairs with the sleepers count */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->sleep_lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->sleep_lock);
    }
    run_chunks(p, tag, 0);
    while (atomic_load_explicit(&p->done, memory_order_acquire) < chunk_count)
        tb_cpu_relax();
    pthread_mutex_unlock(&p->submit_lock);
}
