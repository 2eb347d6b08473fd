/* Frees the LLM layer's per-thread scratch buffers (prepared activations, attention scores, unpacked GEMM
 * weights) when their thread exits, through one pthread key destructor per thread. Pool threads live for
 * the process, but the batching engine's thread ends with its engine; without this each engine would leave
 * its thread's buffers behind. */
#include <pthread.h>
#include <stdbool.h>

#include "llm/llm_internal.h"
#include "torchburn/alloc.h"

enum { MAX_TRACKED = 8 };

typedef struct tracked_buffers {
    void **buffers[MAX_TRACKED];
    int count;
} tracked_buffers;

static _Thread_local tracked_buffers tracked;
static pthread_key_t release_key;
static pthread_once_t release_key_once = PTHREAD_ONCE_INIT;
static bool release_key_ok;

static void release_tracked(void *pointer) {
    tracked_buffers *t = pointer;
    for (int i = 0; i < t->count; i++) {
        tb_free(*t->buffers[i]);
        *t->buffers[i] = NULL;
    }
    t->count = 0;
}

static void create_release_key(void) { release_key_ok = pthread_key_create(&release_key, release_tracked) == 0; }

void tb_llm_thread_scratch_track(void **buffer) {
    for (int i = 0; i < tracked.count; i++)
        if (tracked.buffers[i] == buffer)
            return;
    pthread_once(&release_key_once, create_release_key);
    if (!release_key_ok || tracked.count == MAX_TRACKED)
        return; /* the buffer then lives as long as the process, as before */
    tracked.buffers[tracked.count++] = buffer;
    pthread_setspecific(release_key, &tracked);
}

tb_status tb_llm_thread_scratch_reserve(unsigned char **buffer, size_t *capacity, size_t needed) {
    if (needed <= *capacity)
        return TB_OK;
    void *grown = NULL;
    TB_TRY(tb_alloc(needed + needed / 4, TB_ALLOC_DEFAULT, &grown));
    tb_free(*buffer);
    *buffer = grown;
    *capacity = needed + needed / 4;
    tb_llm_thread_scratch_track((void **)buffer);
    return TB_OK;
}
