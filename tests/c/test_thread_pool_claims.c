/* The thread pool under back-to-back tiny jobs whose context lives on the caller's stack: every item of
 * every job runs exactly once and no chunk of a finished job runs after tb_parallel_for returned (a worker
 * that over-claimed past the end of one job must not take its index into the next job). */
#include <stdatomic.h>
#include <string.h>

#include "tb_test.h"
#include "torchburn/thread_pool.h"

typedef struct job {
    atomic_int hits[16];
    atomic_int *late; /* set when a chunk runs after its job returned */
    atomic_int returned;
} job;

static void body(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    job *j = context;
    if (atomic_load(&j->returned))
        atomic_fetch_add(j->late, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&j->hits[i], 1);
}

int main(void) {
    atomic_int late = 0;
    int wrong = 0;
    TB_CHECK(tb_set_num_threads(2) == TB_OK);
    for (int round = 0; round < 2000000; round++) {
        job j;
        memset(&j, 0, sizeof j);
        j.late = &late;
        const int64_t count = 2 + round % 14;
        tb_parallel_for(count, 1, body, &j);
        atomic_store(&j.returned, 1);
        for (int64_t i = 0; i < count; i++)
            wrong += atomic_load(&j.hits[i]) != 1;
    }
    TB_CHECK_MSG(wrong == 0, "%d items ran other than once", wrong);
    TB_CHECK_MSG(atomic_load(&late) == 0, "%d chunks ran after their job returned", (int)atomic_load(&late));
    return tb_test_finish("thread_pool_claims");
}
