/* The two LRU caches behind tb_graph_compile, keyed by the BLAKE3 structural hash and verified by a
 * full compare of the canonical serialization on a hash hit:
 *   graphs   (TORCHBURN_CACHE_SIZE):          key -> the optimized graph (after the passes);
 *   prepared (TORCHBURN_PREPARED_CACHE_SIZE): key -> the prepared plan (steps + memory plan).
 * Both default to 1024 entries. One mutex guards both; compiling is rare next to running. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

enum { DEFAULT_CAPACITY = 1024, BUCKETS = 4096 };

typedef struct cache_entry {
    uint8_t hash[32];
    uint8_t *key; /* canonical serialization */
    size_t key_size;
    void *value;
    struct cache_entry *newer, *older; /* LRU list */
    struct cache_entry *bucket_next;
} cache_entry;

typedef struct lru_cache {
    cache_entry *buckets[BUCKETS];
    cache_entry *newest, *oldest;
    size_t size, capacity;
    uint64_t hits, misses, evictions;
    void (*free_value)(void *value);
} lru_cache;

static void free_graph_value(void *value) { tb_graph_free(value); }
static void free_plan_value(void *value) { tb_plan_release(value); }

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static lru_cache graph_cache = {.free_value = free_graph_value};
static lru_cache plan_cache = {.free_value = free_plan_value};
static bool configured;

static size_t env_capacity(const char *name) {
    const char *text = getenv(name);
    if (!text || !*text)
        return DEFAULT_CAPACITY;
    char *end;
    long long value = strtoll(text, &end, 10);
    return (*end == '\0' && value >= 1) ? (size_t)value : DEFAULT_CAPACITY;
}

static void configure_once(void) {
    if (configured)
        return;
    graph_cache.capacity = env_capacity("TORCHBURN_CACHE_SIZE");
    plan_cache.capacity = env_capacity("TORCHBURN_PREPARED_CACHE_SIZE");
    configured = true;
}

static size_t bucket_of(const uint8_t hash[32]) {
    uint64_t h;
    memcpy(&h, hash, sizeof h);
    return (size_t)(h % BUCKETS);
}

static void unlink_lru(lru_cache *cache, cache_entry *e) {
    if (e->newer)
        e->newer->older = e->older;
    else
        cache->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        cache->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void push_newest(lru_cache *cache, cache_entry *e) {
    e->older = cache->newest;
    e->newer = NULL;
    if (cache->newest)
        cache->newest->newer = e;
    cache->newest = e;
    if (!cache->oldest)
        cache->oldest = e;
}

static void remove_entry(lru_cache *cache, cache_entry *e) {
    cache_entry **link = &cache->buckets[bucket_of(e->hash)];
    while (*link != e)
        link = &(*link)->bucket_next;
    *link = e->bucket_next;
    unlink_lru(cache, e);
    cache->free_value(e->value);
    free(e->key);
    free(e);
    cache->size--;
}

static void evict_to(lru_cache *cache, size_t capacity) {
    while (cache->size > capacity && cache->oldest) {
        remove_entry(cache, cache->oldest);
        cache->evictions++;
    }
}

/* The entry for (hash, key) or NULL; a hit becomes the newest. Counts hits and misses. */
static cache_entry *lookup(lru_cache *cache, const uint8_t hash[32], const uint8_t *key, size_t key_size) {
    for (cache_entry *e = cache->buckets[bucket_of(hash)]; e; e = e->bucket_next) {
        if (memcmp(e->hash, hash, 32) == 0 && e->key_size == key_size && memcmp(e->key, key, key_size) == 0) {
            unlink_lru(cache, e);
            push_newest(cache, e);
            cache->hits++;
            return e;
        }
    }
    cache->misses++;
    return NULL;
}

/* Inserts (takes ownership of value; copies key). On failure the value is freed. */
static tb_status insert(lru_cache *cache, const uint8_t hash[32], const uint8_t *key, size_t key_size, void *value) {
    cache_entry *e = calloc(1, sizeof *e);
    uint8_t *key_copy = malloc(key_size ? key_size : 1);
    if (!e || !key_copy) {
        free(e);
        free(key_copy);
        cache->free_value(value);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "plan cache: out of memory inserting an entry");
    }
    memcpy(e->hash, hash, 32);
    memcpy(key_copy, key, key_size);
    e->key = key_copy;
    e->key_size = key_size;
    e->value = value;
    size_t b = bucket_of(hash);
    e->bucket_next = cache->buckets[b];
    cache->buckets[b] = e;
    push_newest(cache, e);
    cache->size++;
    evict_to(cache, cache->capacity);
    return TB_OK;
}

static tb_status compile_locked(const tb_graph *graph, const uint8_t hash[32], const uint8_t *key, size_t key_size,
                                tb_plan **out, bool *cache_hit) {
    cache_entry *prepared = lookup(&plan_cache, hash, key, key_size);
    if (prepared) {
        tb_plan_retain(prepared->value);
        *out = prepared->value;
        *cache_hit = true;
        return TB_OK;
    }
    *cache_hit = false;
    cache_entry *optimized = lookup(&graph_cache, hash, key, key_size);
    tb_graph *optimized_graph;
    if (optimized) {
        optimized_graph = optimized->value;
    } else {
        TB_TRY(tb_graph_clone(graph, &optimized_graph));
        tb_status status = tb_graph_optimize(&optimized_graph);
        if (status != TB_OK) {
            tb_graph_free(optimized_graph);
            return status;
        }
    }
    tb_plan *plan;
    tb_status status = tb_plan_prepare(optimized_graph, hash, &plan);
    if (!optimized) {
        if (status == TB_OK)
            status = insert(&graph_cache, hash, key, key_size, optimized_graph); /* the graph was just used */
        else
            tb_graph_free(optimized_graph);
    }
    if (status != TB_OK)
        return status;
    tb_plan_retain(plan); /* one reference for the cache, one for the caller */
    status = insert(&plan_cache, hash, key, key_size, plan);
    if (status != TB_OK) {
        tb_plan_release(plan);
        return status;
    }
    *out = plan;
    return TB_OK;
}

tb_status tb_graph_compile(const tb_graph *graph, tb_plan **out, bool *cache_hit) {
    *out = NULL;
    if (graph->noutputs == 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: compile needs at least one output");
    uint8_t *key;
    size_t key_size;
    TB_TRY(tb_graph_serialize(graph, &key, &key_size));
    uint8_t hash[32];
    tb_blake3_hash(key, key_size, hash);
    bool hit_local = false;
    pthread_mutex_lock(&cache_lock);
    configure_once();
    tb_status status = compile_locked(graph, hash, key, key_size, out, &hit_local);
    pthread_mutex_unlock(&cache_lock);
    free(key);
    if (cache_hit)
        *cache_hit = hit_local;
    return status;
}

void tb_plan_cache_stats(tb_cache_stats *prepared, tb_cache_stats *graphs) {
    pthread_mutex_lock(&cache_lock);
    configure_once();
    if (prepared)
        *prepared = (tb_cache_stats){plan_cache.size, plan_cache.capacity, plan_cache.hits, plan_cache.misses,
                                     plan_cache.evictions};
    if (graphs)
        *graphs = (tb_cache_stats){graph_cache.size, graph_cache.capacity, graph_cache.hits, graph_cache.misses,
                                   graph_cache.evictions};
    pthread_mutex_unlock(&cache_lock);
}

void tb_plan_cache_clear(void) {
    pthread_mutex_lock(&cache_lock);
    configure_once();
    lru_cache *caches[2] = {&plan_cache, &graph_cache};
    for (int c = 0; c < 2; c++) {
        while (caches[c]->oldest)
            remove_entry(caches[c], caches[c]->oldest);
        caches[c]->hits = caches[c]->misses = caches[c]->evictions = 0;
    }
    pthread_mutex_unlock(&cache_lock);
}

tb_status tb_plan_cache_set_capacity(size_t graph_capacity, size_t prepared_capacity) {
    pthread_mutex_lock(&cache_lock);
    configure_once();
    if (graph_capacity) {
        graph_cache.capacity = graph_capacity;
        evict_to(&graph_cache, graph_capacity);
    }
    if (prepared_capacity) {
        plan_cache.capacity = prepared_capacity;
        evict_to(&plan_cache, prepared_capacity);
    }
    pthread_mutex_unlock(&cache_lock);
    return TB_OK;
}
