/* Aligned allocator with size-class recycling. Each block carries a 64-byte header (so the payload
 * stays 64-byte aligned) recording its size class; freed blocks go onto a per-class free list guarded
 * by one mutex, up to a byte limit. Sizes above the largest class bypass the pool. */
#include "torchburn/alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Classes: 64 B .. 256 MiB, four steps per power of two (waste <= 25%). */
enum { TB_CLASS_MIN_SHIFT = 6, TB_CLASS_MAX_SHIFT = 28, TB_CLASS_STEPS = 4 };
enum { TB_CLASS_COUNT = (TB_CLASS_MAX_SHIFT - TB_CLASS_MIN_SHIFT) * TB_CLASS_STEPS + 1 };
enum { TB_HEADER_MAGIC = 0x7442414c }; /* "tBAL" */
#define TB_UNPOOLED_CLASS (-1)

typedef struct block_header {
    struct block_header *next_free; /* free-list link while pooled */
    size_t capacity;                /* payload bytes this block can hold */
    size_t requested;               /* bytes asked for by the current owner */
    int32_t size_class;             /* index into the pool, or TB_UNPOOLED_CLASS */
    uint32_t magic;
    char padding[TB_ALLOC_ALIGNMENT - 2 * sizeof(void *) - sizeof(size_t) - 8];
} block_header;

_Static_assert(sizeof(block_header) == TB_ALLOC_ALIGNMENT, "header must keep payload alignment");

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static block_header *free_lists[TB_CLASS_COUNT];
static tb_alloc_stats stats;
static size_t pool_limit = (size_t)1 << 30;
static atomic_int zero_fill_mode = -1; /* -1: not yet read from the environment */
static int64_t fail_countdown = -1;

static size_t class_capacity(int size_class) {
    int shift = TB_CLASS_MIN_SHIFT + size_class / TB_CLASS_STEPS;
    int step = size_class % TB_CLASS_STEPS;
    size_t base = (size_t)1 << shift;
    return base + (base / TB_CLASS_STEPS) * (size_t)step;
}

/* The smallest class that holds nbytes, or TB_UNPOOLED_CLASS when it is too large. */
static int class_for_size(size_t nbytes) {
    if (nbytes <= ((size_t)1 << TB_CLASS_MIN_SHIFT))
        return 0;
    if (nbytes > ((size_t)1 << TB_CLASS_MAX_SHIFT))
        return TB_UNPOOLED_CLASS;
    int shift = 63 - __builtin_clzll((unsigned long long)(nbytes - 1)); /* floor(log2(nbytes-1)) */
    int size_class = (shift - TB_CLASS_MIN_SHIFT) * TB_CLASS_STEPS;
    while (class_capacity(size_class) < nbytes)
        size_class++;
    return size_class;
}

static bool zero_fill_enabled(void) {
    int mode = atomic_load_explicit(&zero_fill_mode, memory_order_relaxed);
    if (mode < 0) {
        const char *env = getenv("TORCHBURN_ZERO_MEMORY");
        mode = env && env[0] && strcmp(env, "0") != 0;
        atomic_store(&zero_fill_mode, mode);
    }
    return mode != 0;
}

void tb_alloc_set_zero_fill(int enabled) { atomic_store(&zero_fill_mode, enabled ? 1 : 0); }

void tb_alloc_set_pool_limit(size_t nbytes) {
    pthread_mutex_lock(&pool_lock);
    pool_limit = nbytes;
    pthread_mutex_unlock(&pool_lock);
}

void tb_alloc_fail_after(int64_t count) {
    pthread_mutex_lock(&pool_lock);
    fail_countdown = count;
    pthread_mutex_unlock(&pool_lock);
}

static void note_allocation(size_t nbytes, bool reused) {
    stats.allocations++;
    stats.reuse_hits += reused;
    stats.bytes_live += nbytes;
    if (stats.bytes_live > stats.bytes_peak)
        stats.bytes_peak = stats.bytes_live;
}

tb_status tb_alloc(size_t nbytes, unsigned flags, void **out) {
    *out = NULL;
    if (nbytes > ((size_t)1 << 46))
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "allocation of %zu bytes is beyond any machine", nbytes);
    int size_class = class_for_size(nbytes);
    size_t capacity = size_class == TB_UNPOOLED_CLASS
                          ? (nbytes + TB_ALLOC_ALIGNMENT - 1) / TB_ALLOC_ALIGNMENT * TB_ALLOC_ALIGNMENT
                          : class_capacity(size_class);
    block_header *block = NULL;

    pthread_mutex_lock(&pool_lock);
    if (fail_countdown == 0) {
        stats.failures++;
        pthread_mutex_unlock(&pool_lock);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "allocation of %zu bytes failed (injected fault)", nbytes);
    }
    if (fail_countdown > 0)
        fail_countdown--;
    if (size_class != TB_UNPOOLED_CLASS && free_lists[size_class]) {
        block = free_lists[size_class];
        free_lists[size_class] = block->next_free;
        stats.bytes_cached -= block->capacity;
        block->requested = nbytes;
        note_allocation(nbytes, true);
    }
    pthread_mutex_unlock(&pool_lock);

    if (!block) {
        void *raw = NULL;
        if (posix_memalign(&raw, TB_ALLOC_ALIGNMENT, sizeof(block_header) + capacity) != 0 || !raw) {
            pthread_mutex_lock(&pool_lock);
            stats.failures++;
            pthread_mutex_unlock(&pool_lock);
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", nbytes);
        }
        block = (block_header *)raw;
        block->next_free = NULL;
        block->capacity = capacity;
        block->requested = nbytes;
        block->size_class = size_class;
        block->magic = TB_HEADER_MAGIC;
        pthread_mutex_lock(&pool_lock);
        note_allocation(nbytes, false);
        pthread_mutex_unlock(&pool_lock);
    }
    void *payload = block + 1;
    if ((flags & TB_ALLOC_ZERO) || zero_fill_enabled())
        memset(payload, 0, nbytes);
    *out = payload;
    return TB_OK;
}

void tb_free(void *ptr) {
    if (!ptr)
        return;
    block_header *block = (block_header *)ptr - 1;
    pthread_mutex_lock(&pool_lock);
    stats.frees++;
    stats.bytes_live -= block->requested;
    if (block->size_class != TB_UNPOOLED_CLASS && stats.bytes_cached + block->capacity <= pool_limit) {
        block->next_free = free_lists[block->size_class];
        free_lists[block->size_class] = block;
        stats.bytes_cached += block->capacity;
        block = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    free(block);
}

size_t tb_alloc_usable_size(const void *ptr) {
    return ptr ? ((const block_header *)ptr - 1)->capacity : 0;
}

void tb_alloc_get_stats(tb_alloc_stats *out) {
    pthread_mutex_lock(&pool_lock);
    *out = stats;
    pthread_mutex_unlock(&pool_lock);
}

void tb_alloc_trim(void) {
    block_header *to_release[TB_CLASS_COUNT];
    pthread_mutex_lock(&pool_lock);
    for (int c = 0; c < TB_CLASS_COUNT; c++) {
        to_release[c] = free_lists[c];
        free_lists[c] = NULL;
    }
    stats.bytes_cached = 0;
    pthread_mutex_unlock(&pool_lock);
    for (int c = 0; c < TB_CLASS_COUNT; c++) {
        while (to_release[c]) {
            block_header *next = to_release[c]->next_free;
            free(to_release[c]);
            to_release[c] = next;
        }
    }
}
