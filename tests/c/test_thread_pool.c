/* C tests of the thread pool: coverage of every index exactly once, nesting, concurrent callers,
 * fork safety, and fan-out latency (printed, not asserted). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tb_test.h"
#include "torchburn/thread_pool.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct counts {
    atomic_int *hits;
    atomic_int max_thread;
} counts;

static void mark(void *context, int64_t begin, int64_t end, int thread_index) {
    counts *c = context;
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&c->hits[i], 1);
    int seen = atomic_load(&c->max_thread);
    while (thread_index > seen && !atomic_compare_exchange_weak(&c->max_thread, &seen, thread_index)) {
    }
}

static int coverage_ok(int64_t n, int64_t grain) {
    atomic_int *hits = calloc((size_t)(n ? n : 1), sizeof *hits);
    counts c = {.hits = hits};
    tb_parallel_for(n, grain, mark, &c);
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= atomic_load(&hits[i]) == 1;
    ok &= atomic_load(&c.max_thread) < tb_num_threads();
    free(hits);
    return ok;
}

static void nested_body(void *context, int64_t begin, int64_t end, int thread_index) {
    atomic_int *total = context;
    for (int64_t i = begin; i < end; i++) {
        TB_CHECK(tb_in_parallel_region());
        atomic_int inner[10] = {0};
        counts c = {.hits = inner};
        tb_parallel_for(10, 1, mark, &c); /* runs inline */
        for (int j = 0; j < 10; j++)
            atomic_fetch_add(total, atomic_load(&inner[j]));
    }
}

static void *concurrent_caller(void *arg) {
    int *ok = arg;
    for (int round = 0; round < 200; round++)
        *ok &= coverage_ok(1000, 7);
    return NULL;
}

/* Each of the two chunks waits (bounded) until both have started: the loop measures a real fan-out
 * to two threads rather than the caller running both chunks itself. */
static void rendezvous(void *context, int64_t begin, int64_t end, int thread_index) {
    atomic_int *arrived = context;
    atomic_fetch_add(arrived, (int)(end - begin));
    double deadline = now_seconds() + 1e-3;
    while (atomic_load(arrived) % 2 != 0 && now_seconds() < deadline) {
    }
}

/* The host OpenMP team mode: refused while no OpenMP runtime is loaded; with libgomp loaded the
 * loops run inside its parallel regions (omp_in_parallel is true in the body), cover every index
 * once with indices below tb_num_threads(), nest inline, and a forked child returns to the pool. */
static int (*omp_in_parallel_fn)(void);
static atomic_int bodies_in_omp_region;

static void mark_in_omp(void *context, int64_t begin, int64_t end, int thread_index) {
    mark(context, begin, end, thread_index);
    if (omp_in_parallel_fn && omp_in_parallel_fn())
        atomic_fetch_add(&bodies_in_omp_region, 1);
}

static void check_host_openmp(void) {
    TB_CHECK(tb_get_parallel_runtime() == TB_PARALLEL_POOL);
    TB_CHECK(tb_host_openmp_library() == NULL);
    TB_CHECK(tb_set_parallel_runtime(TB_PARALLEL_HOST_OPENMP) == TB_ERR_UNSUPPORTED);
    TB_CHECK(tb_set_parallel_runtime((tb_parallel_runtime)7) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_get_parallel_runtime() == TB_PARALLEL_POOL);
    void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!gomp) {
        printf("SKIP host OpenMP team: libgomp.so.1 not found (%s)\n", dlerror());
        return;
    }
    *(void **)&omp_in_parallel_fn = dlsym(gomp, "omp_in_parallel");
    TB_CHECK(omp_in_parallel_fn != NULL);
    TB_CHECK(tb_host_openmp_library() != NULL); /* found although the first lookup failed */
    TB_CHECK(tb_set_parallel_runtime(TB_PARALLEL_HOST_OPENMP) == TB_OK);
    TB_CHECK(tb_get_parallel_runtime() == TB_PARALLEL_HOST_OPENMP);
    TB_CHECK(tb_set_num_threads(3) == TB_OK && tb_num_threads() == 3);
    int64_t sizes[] = {1, 2, 3, 7, 64, 1000, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int64_t grain = 1; grain <= 1000; grain *= 10)
            TB_CHECK_MSG(coverage_ok(sizes[i], grain), "host team: n=%lld grain=%lld", (long long)sizes[i],
                         (long long)grain);
    atomic_int hits[600] = {0};
    counts c = {.hits = hits};
    tb_parallel_for(600, 1, mark_in_omp, &c);
    TB_CHECK_MSG(atomic_load(&bodies_in_omp_region) > 0, "no chunk ran inside an OpenMP parallel region");
    for (int i = 0; i < 600; i++)
        TB_CHECK(atomic_load(&hits[i]) == 1);
    atomic_int total = 0;
    tb_parallel_for(16, 1, nested_body, &total);
    TB_CHECK(atomic_load(&total) == 160);
    pthread_t threads[3];
    int ok[3] = {1, 1, 1};
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, concurrent_caller, &ok[i]);
    for (int i = 0; i < 3; i++) {
        pthread_join(threads[i], NULL);
        TB_CHECK(ok[i]);
    }
    pid_t child = fork();
    if (child == 0)
        _exit(tb_get_parallel_runtime() == TB_PARALLEL_POOL && coverage_ok(100003, 16) ? 0 : 1);
    int status = 0;
    waitpid(child, &status, 0);
    TB_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    TB_CHECK(tb_get_parallel_runtime() == TB_PARALLEL_HOST_OPENMP);
    TB_CHECK(tb_set_parallel_runtime(TB_PARALLEL_POOL) == TB_OK);
    TB_CHECK(coverage_ok(5000, 3));
}

int main(void) {
    check_host_openmp();
    TB_CHECK(tb_set_num_threads(0) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_set_num_threads(4) == TB_OK && tb_num_threads() == 4);
    int64_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int64_t grain = 1; grain <= 1000; grain *= 10)
            TB_CHECK_MSG(coverage_ok(sizes[i], grain), "n=%lld grain=%lld", (long long)sizes[i], (long long)grain);

    atomic_int total = 0;
    tb_parallel_for(16, 1, nested_body, &total);
    TB_CHECK(atomic_load(&total) == 160);

    /* several application threads sharing the pool */
    pthread_t threads[4];
    int ok[4] = {1, 1, 1, 1};
    for (int i = 0; i < 4; i++)
        pthread_create(&threads[i], NULL, concurrent_caller, &ok[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        TB_CHECK(ok[i]);
    }

    /* fork: the child builds its own pool and still covers everything */
    pid_t child = fork();
    if (child == 0)
        _exit(coverage_ok(100003, 16) && coverage_ok(77, 1) ? 0 : 1);
    int status = 0;
    waitpid(child, &status, 0);
    TB_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    TB_CHECK(coverage_ok(5000, 3)); /* the parent's pool is unaffected */

    /* thread count changes rebuild the pool */
    TB_CHECK(tb_set_num_threads(2) == TB_OK);
    TB_CHECK(coverage_ok(1000, 1));
    TB_CHECK(tb_physical_cores() >= 1);

    /* fan-out latency with 2 threads: a warm pool should take a few microseconds */
    atomic_int arrived = 0;
    for (int i = 0; i < 1000; i++)
        tb_parallel_for(2, 1, rendezvous, &arrived);
    int rounds = 20000;
    double start = now_seconds();
    for (int i = 0; i < rounds; i++)
        tb_parallel_for(2, 1, rendezvous, &arrived);
    double per_call_us = (now_seconds() - start) / rounds * 1e6;
    printf("parallel_for fan-out + join, 2 threads: %.2f us per call (target < 5 us)\n", per_call_us);
    return tb_test_finish("test_thread_pool");
}
