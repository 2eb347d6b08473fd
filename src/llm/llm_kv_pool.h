/* The KV block pool of the continuous-batching engine (llm_kv_pool.c): one pool of blocks, each holding
 * TB_LLM_KEY_BLOCK (16) positions of keys and values for every (layer, KV head), shared by all slots.
 *
 * Block layout: [layer][kv head][keys D x 16 | values 16 x D] (f32 or IEEE half), so a block's key piece is
 * exactly one key block of the contiguous session cache (d-major, TB_LLM_KEY_BLOCK lanes) and attn_scores
 * runs on it unchanged. Blocks are allocated lazily in chunks (memory follows use) up to the pool's bound.
 *
 * Ownership: a block in use has a reference count (one per session block table holding it). A block whose
 * 16 positions were computed by a canonical prefill chunk may be published under the key (parent block,
 * parent generation, its 16 token ids): a later request with the same leading tokens finds the chain of
 * blocks and maps them (refcount++, no copy). A published block is immutable: a session about to write into
 * it (or into any block held by another table) copies it first (copy-on-write). At refcount 0 a published
 * block stays cached, least recently released first to be evicted when the pool needs a block; its
 * generation then changes, so children published under the old content are never found again.
 *
 * Single-threaded: only the engine thread calls these (the forward's worker threads only read and write
 * block memory already in a table). */
#ifndef TORCHBURN_LLM_KV_POOL_H
#define TORCHBURN_LLM_KV_POOL_H

#include "llm/llm_internal.h"

typedef struct tb_llm_kv_pool tb_llm_kv_pool;

typedef struct tb_llm_kv_pool_stats {
    int64_t blocks;    /* the bound */
    int64_t allocated; /* blocks whose memory exists (whole chunks) */
    int64_t in_use;    /* refcount > 0 */
    int64_t shared;    /* refcount > 1 */
    int64_t cached;    /* refcount 0, published: a reusable prefix block, evictable */
    int64_t evictions; /* cached blocks reused for other content so far */
    int64_t bytes;     /* allocated block memory */
} tb_llm_kv_pool_stats;

/* A pool of at most `blocks` blocks for `model` (CPU models only), allocated `chunk_blocks` at a time
 * (0: 16). Errors: TB_ERR_INVALID_ARGUMENT (bad counts, a GPU model), TB_ERR_OUT_OF_MEMORY. */
tb_status tb_llm_kv_pool_new(const tb_llm_model *model, bool kv_f16, int64_t blocks, int64_t chunk_blocks,
                             tb_llm_kv_pool **out);
void tb_llm_kv_pool_free(tb_llm_kv_pool *pool);
bool tb_llm_kv_pool_kv_f16(const tb_llm_kv_pool *pool);

/* A private block (refcount 1): a free one, else a newly allocated chunk's, else the least recently
 * released cached one (evicted). TB_ERR_OUT_OF_MEMORY when every block is in use ("the KV cache is full")
 * or a chunk cannot be allocated. The block's previous contents are left (a key block's lanes past the
 * positions written are read by the score kernel but never used). */
tb_status tb_llm_kv_pool_take(tb_llm_kv_pool *pool, int32_t *block);
void tb_llm_kv_pool_ref(tb_llm_kv_pool *pool, int32_t block);
/* refcount--; at 0 a published block becomes cached (most recently released), another one free. */
void tb_llm_kv_pool_release(tb_llm_kv_pool *pool, int32_t block);
/* Whether a session holding `block` may write into it: refcount 1 and not published. */
bool tb_llm_kv_pool_writable(const tb_llm_kv_pool *pool, int32_t block);
/* Copy-on-write: a new private block holding a copy of `block` (keys and values of every layer and head);
 * the caller then releases `block`. */
tb_status tb_llm_kv_pool_copy(tb_llm_kv_pool *pool, int32_t block, int32_t *out);

/* Publishes `block` (full, computed by a canonical prefill chunk) as the child of `parent` (-1: the first
 * block of a sequence) holding tokens[0..16). Returns the block published under that key: `block`, or an
 * equal one published before (then the caller may map that one instead; `block` stays private). */
int32_t tb_llm_kv_pool_publish(tb_llm_kv_pool *pool, int32_t block, int32_t parent, const int32_t *tokens);
/* The published child of `parent` (-1: first block) holding tokens[0..16), or -1. Does not take a reference. */
int32_t tb_llm_kv_pool_find(const tb_llm_kv_pool *pool, int32_t parent, const int32_t *tokens);

/* Keys (D x 16, d-major) and values (16 x D) of (layer, kv head) in `block`. */
void *tb_llm_kv_pool_keys(const tb_llm_kv_pool *pool, int32_t block, int64_t layer, int64_t head);
void *tb_llm_kv_pool_values(const tb_llm_kv_pool *pool, int32_t block, int64_t layer, int64_t head);
int32_t tb_llm_kv_pool_refcount(const tb_llm_kv_pool *pool, int32_t block);

void tb_llm_kv_pool_get_stats(const tb_llm_kv_pool *pool, tb_llm_kv_pool_stats *out);

/* Sessions whose KV cache is a block table into a pool (llm_forward.c): the same forward, prepare_row and
 * attend_row numbers as a contiguous session (attention walks the table in order; see llm_forward.c).
 * share appends `count` whole blocks (holding tokens[0..16 count)) with a reference each after the
 * session's positions (their count a multiple of 16, no partial block held); table exposes the block table (entries may be replaced by an equal block: the
 * caller moves the references). Releasing happens through truncate and free. */
tb_status tb_llm_session_new_pooled(const tb_llm_model *model, int64_t max_seq_len, tb_llm_kv_pool *pool,
                                    tb_llm_session **out);
tb_status tb_llm_session_share(tb_llm_session *session, const int32_t *blocks, int64_t count, const int32_t *tokens);
int32_t *tb_llm_session_table(tb_llm_session *session, int64_t *count);

#endif
