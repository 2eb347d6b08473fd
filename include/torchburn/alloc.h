/* The aligned allocator: 64-byte aligned blocks, a size-class recycling pool, statistics, optional
 * zero-fill, and fault injection for tests. Every failure is a returned status. */
#ifndef TORCHBURN_ALLOC_H
#define TORCHBURN_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TB_ALLOC_ALIGNMENT = 64 };

typedef enum tb_alloc_flags {
    TB_ALLOC_DEFAULT = 0,
    TB_ALLOC_ZERO = 1u << 0, /* the block is zero-filled */
} tb_alloc_flags;

typedef struct tb_alloc_stats {
    uint64_t bytes_live;     /* bytes handed out and not yet freed (requested sizes) */
    uint64_t bytes_peak;     /* high-water mark of bytes_live */
    uint64_t bytes_cached;   /* bytes held in the recycling pool, ready for reuse */
    uint64_t allocations;    /* successful tb_alloc calls */
    uint64_t frees;          /* tb_free calls on non-NULL pointers */
    uint64_t reuse_hits;     /* allocations served from the pool */
    uint64_t failures;       /* allocations that returned an error */
} tb_alloc_stats;

/* Allocates `nbytes` (0 allowed: returns a valid unique block) aligned to 64 bytes into *out.
 * Returns TB_ERR_OUT_OF_MEMORY with a message on failure, leaving *out NULL. Free with tb_free. */
TB_API TB_NODISCARD tb_status tb_alloc(size_t nbytes, unsigned flags, void **out);

/* Returns a block from tb_alloc to the pool (or the system). NULL is a no-op. */
TB_API void tb_free(void *ptr);

/* The usable size of a block from tb_alloc (at least the requested size). */
TB_API size_t tb_alloc_usable_size(const void *ptr);

TB_API void tb_alloc_get_stats(tb_alloc_stats *out);

/* Releases every cached block back to the system. */
TB_API void tb_alloc_trim(void);

/* When on, every block is zero-filled before it is handed out, pooled or not (default: off, or
 * TORCHBURN_ZERO_MEMORY=1). */
TB_API void tb_alloc_set_zero_fill(int enabled);

/* Maximum bytes the pool may hold (default 1 GiB); blocks beyond it go back to the system. */
TB_API void tb_alloc_set_pool_limit(size_t nbytes);

/* Test hook: after `count` more successful allocations, every allocation fails until reset with
 * count < 0. */
TB_API void tb_alloc_fail_after(int64_t count);

#ifdef __cplusplus
}
#endif
#endif
