/* The KV block pool (contract in llm_kv_pool.h): block memory in lazily allocated chunks, per-block
 * metadata (reference count, publication key, generation), a hash table of published blocks keyed by
 * (parent block, parent generation, 16 token ids) compared exactly (the hash only picks the bucket), a free
 * list and an LRU list of cached (refcount 0, published) blocks. */
#include <stdlib.h>
#include <string.h>

#include "llm/llm_kv_pool.h"
#include "torchburn/alloc.h"

enum { BLOCK = TB_LLM_KEY_BLOCK, DEFAULT_CHUNK_BLOCKS = 16, MAX_BLOCKS = 1 << 28 };

typedef struct block_info {
    int32_t refcount;
    uint32_t generation; /* bumped when a cached block is evicted: its children's keys no longer match */
    bool published;
    int32_t parent;
    uint32_t parent_generation;
    int32_t tokens[BLOCK];
    int32_t hash_next;  /* bucket chain of published blocks */
    int32_t prev, next; /* LRU links while cached; next is the free-list link while free */
} block_info;

struct tb_llm_kv_pool {
    int64_t layers, heads, piece_bytes, block_bytes;
    bool kv_f16;
    int64_t blocks, chunk_blocks, allocated;
    unsigned char **chunks; /* [ceil(blocks / chunk_blocks)], NULL until allocated */
    block_info *info;       /* [allocated] */
    int32_t *buckets;       /* [bucket_mask + 1] heads of the published chains, -1 empty */
    int64_t bucket_mask;
    int32_t free_head, lru_head, lru_tail;
    int64_t in_use, shared, cached, evictions;
};

static uint64_t key_hash(int32_t parent, uint32_t parent_generation, const int32_t *tokens) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)(uint32_t)parent << 32 | parent_generation);
    for (int i = 0; i < BLOCK; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xbf58476d1ce4e5b9ull;
    }
    return h ^ (h >> 31);
}

static uint32_t generation_of(const tb_llm_kv_pool *p, int32_t block) {
    return block >= 0 ? p->info[block].generation : 0;
}

tb_status tb_llm_kv_pool_new(const tb_llm_model *model, bool kv_f16, int64_t blocks, int64_t chunk_blocks,
                             tb_llm_kv_pool **out) {
    *out = NULL;
    if (!model || model->gpu)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm kv pool: needs a CPU model (GPU sessions keep their cache "
                            "on the device)");
    if (blocks < 1 || blocks > MAX_BLOCKS)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm kv pool: blocks must be in [1, %d], got %lld", MAX_BLOCKS,
                            (long long)blocks);
    if (chunk_blocks < 0 || chunk_blocks > MAX_BLOCKS)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm kv pool: bad chunk size %lld", (long long)chunk_blocks);
    tb_llm_kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm kv pool: out of memory");
    p->layers = model->n_layers;
    p->heads = model->n_kv_heads;
    p->kv_f16 = kv_f16;
    p->piece_bytes = BLOCK * model->head_dim * (kv_f16 ? 2 : 4);
    p->block_bytes = 2 * p->layers * p->heads * p->piece_bytes;
    p->blocks = blocks;
    p->chunk_blocks = chunk_blocks ? chunk_blocks : DEFAULT_CHUNK_BLOCKS;
    p->free_head = p->lru_head = p->lru_tail = -1;
    p->chunks = calloc((size_t)((blocks + p->chunk_blocks - 1) / p->chunk_blocks), sizeof *p->chunks);
    if (!p->chunks) {
        tb_llm_kv_pool_free(p);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm kv pool: out of memory");
    }
    *out = p;
    return TB_OK;
}

void tb_llm_kv_pool_free(tb_llm_kv_pool *p) {
    if (!p)
        return;
    for (int64_t c = 0; p->chunks && c * p->chunk_blocks < p->allocated; c++)
        tb_free(p->chunks[c]);
    free(p->chunks);
    free(p->info);
    free(p->buckets);
    free(p);
}

bool tb_llm_kv_pool_kv_f16(const tb_llm_kv_pool *p) { return p->kv_f16; }

/* Rebuilds the bucket array for `slots` buckets (a power of two) from the published blocks. */
static tb_status rehash(tb_llm_kv_pool *p, int64_t slots) {
    int32_t *buckets = malloc((size_t)slots * sizeof *buckets);
    if (!buckets)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm kv pool: out of memory for the prefix table");
    for (int64_t i = 0; i < slots; i++)
        buckets[i] = -1;
    for (int64_t b = 0; b < p->allocated; b++) {
        block_info *info = &p->info[b];
        if (!info->published)
            continue;
        const uint64_t at = key_hash(info->parent, info->parent_generation, info->tokens) & (uint64_t)(slots - 1);
        info->hash_next = buckets[at];
        buckets[at] = (int32_t)b;
    }
    free(p->buckets);
    p->buckets = buckets;
    p->bucket_mask = slots - 1;
    return TB_OK;
}

/* Allocates the next chunk of block memory (zeroed) and puts its blocks on the free list. */
static tb_status grow(tb_llm_kv_pool *p) {
    const int64_t first = p->allocated, n = p->blocks - first < p->chunk_blocks ? p->blocks - first : p->chunk_blocks;
    unsigned char *memory = NULL;
    tb_status status = tb_alloc((size_t)(n * p->block_bytes), TB_ALLOC_ZERO, (void **)&memory);
    if (status != TB_OK)
        return tb_error_prefix(status, "llm kv pool: allocating %lld more blocks (%lld bytes)", (long long)n,
                               (long long)(n * p->block_bytes));
    block_info *info = realloc(p->info, (size_t)(first + n) * sizeof *info);
    if (!info) {
        tb_free(memory);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm kv pool: out of memory for block metadata");
    }
    p->info = info;
    int64_t slots = p->bucket_mask + 1;
    while (slots < 2 * (first + n))
        slots *= 2;
    if (!p->buckets || slots != p->bucket_mask + 1) {
        p->allocated = first; /* rehash walks only the existing blocks */
        status = rehash(p, slots);
        if (status != TB_OK) {
            tb_free(memory);
            return status;
        }
    }
    p->chunks[first / p->chunk_blocks] = memory;
    memset(info + first, 0, (size_t)n * sizeof *info);
    for (int64_t b = first + n - 1; b >= first; b--) { /* lowest index on top */
        info[b].parent = -1;
        info[b].hash_next = info[b].prev = -1;
        info[b].next = p->free_head;
        p->free_head = (int32_t)b;
    }
    p->allocated = first + n;
    return TB_OK;
}

static void lru_remove(tb_llm_kv_pool *p, int32_t b) {
    block_info *info = &p->info[b];
    if (info->prev >= 0)
        p->info[info->prev].next = info->next;
    else
        p->lru_head = info->next;
    if (info->next >= 0)
        p->info[info->next].prev = info->prev;
    else
        p->lru_tail = info->prev;
    info->prev = info->next = -1;
}

static void unpublish(tb_llm_kv_pool *p, int32_t b) {
    block_info *info = &p->info[b];
    const uint64_t at = key_hash(info->parent, info->parent_generation, info->tokens) & (uint64_t)p->bucket_mask;
    for (int32_t *link = &p->buckets[at]; *link >= 0; link = &p->info[*link].hash_next)
        if (*link == b) {
            *link = info->hash_next;
            break;
        }
    info->published = false;
    info->hash_next = -1;
    info->generation++;
}

tb_status tb_llm_kv_pool_take(tb_llm_kv_pool *p, int32_t *block) {
    *block = -1;
    if (p->free_head < 0 && p->allocated < p->blocks)
        TB_TRY(grow(p));
    int32_t b = p->free_head;
    if (b >= 0) {
        p->free_head = p->info[b].next;
        p->info[b].next = -1;
    } else if (p->lru_head >= 0) { /* evict the least recently released cached block */
        b = p->lru_head;
        lru_remove(p, b);
        unpublish(p, b);
        p->cached--;
        p->evictions++;
    } else {
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "the KV cache is full: all %lld blocks (%lld positions) are in use "
                            "by running requests", (long long)p->blocks, (long long)(p->blocks * BLOCK));
    }
    p->info[b].refcount = 1;
    p->in_use++;
    *block = b;
    return TB_OK;
}

void tb_llm_kv_pool_ref(tb_llm_kv_pool *p, int32_t b) {
    block_info *info = &p->info[b];
    if (info->refcount == 0) { /* a cached block comes back into use */
        lru_remove(p, b);
        p->cached--;
        p->in_use++;
    }
    if (++info->refcount == 2)
        p->shared++;
}

void tb_llm_kv_pool_release(tb_llm_kv_pool *p, int32_t b) {
    block_info *info = &p->info[b];
    if (--info->refcount == 1)
        p->shared--;
    if (info->refcount > 0)
        return;
    p->in_use--;
    if (info->published) { /* cached, most recently released last */
        info->prev = p->lru_tail;
        info->next = -1;
        if (p->lru_tail >= 0)
            p->info[p->lru_tail].next = b;
        else
            p->lru_head = b;
        p->lru_tail = b;
        p->cached++;
    } else {
        info->next = p->free_head;
        p->free_head = b;
    }
}

bool tb_llm_kv_pool_writable(const tb_llm_kv_pool *p, int32_t b) {
    return p->info[b].refcount == 1 && !p->info[b].published;
}

static unsigned char *block_memory(const tb_llm_kv_pool *p, int32_t b) {
    return p->chunks[b / p->chunk_blocks] + (b % p->chunk_blocks) * p->block_bytes;
}

tb_status tb_llm_kv_pool_copy(tb_llm_kv_pool *p, int32_t block, int32_t *out) {
    TB_TRY(tb_llm_kv_pool_take(p, out)); /* never evicts `block`: the caller holds a reference */
    memcpy(block_memory(p, *out), block_memory(p, block), (size_t)p->block_bytes);
    return TB_OK;
}

static bool same_key(const tb_llm_kv_pool *p, int32_t b, int32_t parent, uint32_t parent_generation,
                     const int32_t *tokens) {
    const block_info *info = &p->info[b];
    return info->published && info->parent == parent && info->parent_generation == parent_generation &&
           memcmp(info->tokens, tokens, sizeof info->tokens) == 0;
}

int32_t tb_llm_kv_pool_find(const tb_llm_kv_pool *p, int32_t parent, const int32_t *tokens) {
    if (!p->buckets)
        return -1;
    const uint32_t generation = generation_of(p, parent);
    const uint64_t at = key_hash(parent, generation, tokens) & (uint64_t)p->bucket_mask;
    for (int32_t b = p->buckets[at]; b >= 0; b = p->info[b].hash_next)
        if (same_key(p, b, parent, generation, tokens))
            return b;
    return -1;
}

int32_t tb_llm_kv_pool_publish(tb_llm_kv_pool *p, int32_t block, int32_t parent, const int32_t *tokens) {
    const int32_t existing = tb_llm_kv_pool_find(p, parent, tokens);
    if (existing >= 0)
        return existing;
    block_info *info = &p->info[block];
    if (info->published) /* already published under another key: leave it */
        return block;
    info->published = true;
    info->parent = parent;
    info->parent_generation = generation_of(p, parent);
    memcpy(info->tokens, tokens, sizeof info->tokens);
    const uint64_t at = key_hash(parent, info->parent_generation, tokens) & (uint64_t)p->bucket_mask;
    info->hash_next = p->buckets[at];
    p->buckets[at] = block;
    return block;
}

void *tb_llm_kv_pool_keys(const tb_llm_kv_pool *p, int32_t block, int64_t layer, int64_t head) {
    return block_memory(p, block) + (layer * p->heads + head) * 2 * p->piece_bytes;
}

void *tb_llm_kv_pool_values(const tb_llm_kv_pool *p, int32_t block, int64_t layer, int64_t head) {
    return block_memory(p, block) + ((layer * p->heads + head) * 2 + 1) * p->piece_bytes;
}

int32_t tb_llm_kv_pool_refcount(const tb_llm_kv_pool *p, int32_t block) { return p->info[block].refcount; }

void tb_llm_kv_pool_get_stats(const tb_llm_kv_pool *p, tb_llm_kv_pool_stats *out) {
    *out = (tb_llm_kv_pool_stats){.blocks = p->blocks, .allocated = p->allocated, .in_use = p->in_use,
                                  .shared = p->shared, .cached = p->cached, .evictions = p->evictions,
                                  .bytes = p->allocated * p->block_bytes};
}
