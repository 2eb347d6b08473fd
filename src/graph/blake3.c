/* BLAKE3 (hash, keyed hash, key derivation, extendable output), written from the BLAKE3 specification
 * (Aumasson, Neves, O'Connor, Wilcox-O'Hearn, 2020). Portable scalar C: the graph layer hashes a few
 * kilobytes per compiled region, so simplicity wins over SIMD here. Checked against the official test
 * vectors (tests/c/test_blake3.c) and the `blake3` Python package (tests/python/test_backend.py). */
#include <string.h>

#include "torchburn/graph.h"

enum {
    BLOCK_LEN = 64,
    CHUNK_LEN = 1024,
    FLAG_CHUNK_START = 1 << 0,
    FLAG_CHUNK_END = 1 << 1,
    FLAG_PARENT = 1 << 2,
    FLAG_ROOT = 1 << 3,
    FLAG_KEYED_HASH = 1 << 4,
    FLAG_DERIVE_KEY_CONTEXT = 1 << 5,
    FLAG_DERIVE_KEY_MATERIAL = 1 << 6,
};

/* The initialization vector is SHA-256's. */
static const uint32_t IV[8] = {0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
                               0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};

/* The message word permutation applied between rounds. */
static const uint8_t PERMUTATION[16] = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};

static inline uint32_t rotr32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t load32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void store32(uint8_t *p, uint32_t x) {
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
}

static inline void mix(uint32_t *s, int a, int b, int c, int d, uint32_t mx, uint32_t my) {
    s[a] = s[a] + s[b] + mx;
    s[d] = rotr32(s[d] ^ s[a], 16);
    s[c] = s[c] + s[d];
    s[b] = rotr32(s[b] ^ s[c], 12);
    s[a] = s[a] + s[b] + my;
    s[d] = rotr32(s[d] ^ s[a], 8);
    s[c] = s[c] + s[d];
    s[b] = rotr32(s[b] ^ s[c], 7);
}

/* The compression function: 16 output words (the first 8 are the new chaining value). */
static void compress(const uint32_t cv[8], const uint32_t block[16], uint64_t counter, uint32_t block_len,
                     uint32_t flags, uint32_t out[16]) {
    uint32_t s[16] = {cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7],
                      IV[0], IV[1], IV[2], IV[3], (uint32_t)counter, (uint32_t)(counter >> 32), block_len, flags};
    uint32_t m[16], permuted[16];
    memcpy(m, block, sizeof m);
    for (int round = 0; round < 7; round++) {
        mix(s, 0, 4, 8, 12, m[0], m[1]);
        mix(s, 1, 5, 9, 13, m[2], m[3]);
        mix(s, 2, 6, 10, 14, m[4], m[5]);
        mix(s, 3, 7, 11, 15, m[6], m[7]);
        mix(s, 0, 5, 10, 15, m[8], m[9]);
        mix(s, 1, 6, 11, 12, m[10], m[11]);
        mix(s, 2, 7, 8, 13, m[12], m[13]);
        mix(s, 3, 4, 9, 14, m[14], m[15]);
        if (round < 6) {
            for (int i = 0; i < 16; i++)
                permuted[i] = m[PERMUTATION[i]];
            memcpy(m, permuted, sizeof m);
        }
    }
    for (int i = 0; i < 8; i++) {
        out[i] = s[i] ^ s[i + 8];
        out[i + 8] = s[i + 8] ^ cv[i];
    }
}

static void block_words(const uint8_t block[BLOCK_LEN], uint32_t words[16]) {
    for (int i = 0; i < 16; i++)
        words[i] = load32(block + 4 * i);
}

/* The inputs of a compression whose output is not yet decided (chaining value or root output). */
typedef struct pending_output {
    uint32_t cv[8];
    uint32_t block[16];
    uint64_t counter;
    uint32_t block_len;
    uint32_t flags;
} pending_output;

static void output_chaining_value(const pending_output *o, uint32_t cv[8]) {
    uint32_t out[16];
    compress(o->cv, o->block, o->counter, o->block_len, o->flags, out);
    memcpy(cv, out, 8 * sizeof(uint32_t));
}

static void chunk_output(const tb_blake3 *h, pending_output *o) {
    uint8_t padded[BLOCK_LEN] = {0};
    memcpy(padded, h->block, h->block_len);
    memcpy(o->cv, h->chunk_cv, sizeof o->cv);
    block_words(padded, o->block);
    o->counter = h->chunk_counter;
    o->block_len = h->block_len;
    o->flags = h->flags | FLAG_CHUNK_END | (h->blocks_compressed == 0 ? FLAG_CHUNK_START : 0);
}

static void parent_output(const uint32_t left[8], const uint32_t right[8], const uint32_t key[8], uint32_t flags,
                          pending_output *o) {
    memcpy(o->cv, key, sizeof o->cv);
    memcpy(o->block, left, 8 * sizeof(uint32_t));
    memcpy(o->block + 8, right, 8 * sizeof(uint32_t));
    o->counter = 0;
    o->block_len = BLOCK_LEN;
    o->flags = FLAG_PARENT | flags;
}

static void init_with(tb_blake3 *h, const uint32_t key[8], uint32_t flags) {
    memset(h, 0, sizeof *h);
    memcpy(h->key, key, sizeof h->key);
    memcpy(h->chunk_cv, key, sizeof h->chunk_cv);
    h->flags = flags;
}

void tb_blake3_init(tb_blake3 *h) { init_with(h, IV, 0); }

void tb_blake3_init_keyed(tb_blake3 *h, const uint8_t key[32]) {
    uint32_t words[8];
    for (int i = 0; i < 8; i++)
        words[i] = load32(key + 4 * i);
    init_with(h, words, FLAG_KEYED_HASH);
}

void tb_blake3_init_derive_key(tb_blake3 *h, const char *context) {
    tb_blake3 context_hasher;
    init_with(&context_hasher, IV, FLAG_DERIVE_KEY_CONTEXT);
    tb_blake3_update(&context_hasher, context, strlen(context));
    uint8_t context_key[32];
    tb_blake3_finalize(&context_hasher, context_key, sizeof context_key);
    uint32_t words[8];
    for (int i = 0; i < 8; i++)
        words[i] = load32(context_key + 4 * i);
    init_with(h, words, FLAG_DERIVE_KEY_MATERIAL);
}

/* Pushes a finished chunk's chaining value, merging complete subtrees: after `total_chunks` chunks
 * the stack holds one entry per 1 bit of total_chunks (the lazy merge of the specification). */
static void push_chunk_cv(tb_blake3 *h, uint32_t cv[8], uint64_t total_chunks) {
    while ((total_chunks & 1) == 0) {
        pending_output parent;
        h->cv_stack_len--;
        parent_output(h->cv_stack[h->cv_stack_len], cv, h->key, h->flags, &parent);
        output_chaining_value(&parent, cv);
        total_chunks >>= 1;
    }
    memcpy(h->cv_stack[h->cv_stack_len], cv, 8 * sizeof(uint32_t));
    h->cv_stack_len++;
}

void tb_blake3_update(tb_blake3 *h, const void *data, size_t len) {
    const uint8_t *input = data;
    while (len > 0) {
        /* A full chunk is finalized only once more input arrives: the last chunk is the root's. */
        if (h->blocks_compressed * BLOCK_LEN + h->block_len == CHUNK_LEN) {
            pending_output o;
            uint32_t cv[8];
            chunk_output(h, &o);
            output_chaining_value(&o, cv);
            uint64_t total_chunks = h->chunk_counter + 1;
            push_chunk_cv(h, cv, total_chunks);
            memcpy(h->chunk_cv, h->key, sizeof h->chunk_cv);
            h->chunk_counter = total_chunks;
            h->blocks_compressed = 0;
            h->block_len = 0;
        }
        if (h->block_len == BLOCK_LEN) {
            /* The buffered block is not the chunk's last one (more input follows): compress it. */
            uint32_t words[16], out[16];
            block_words(h->block, words);
            compress(h->chunk_cv, words, h->chunk_counter, BLOCK_LEN,
                     h->flags | (h->blocks_compressed == 0 ? FLAG_CHUNK_START : 0), out);
            memcpy(h->chunk_cv, out, 8 * sizeof(uint32_t));
            h->blocks_compressed++;
            h->block_len = 0;
        }
        size_t take = BLOCK_LEN - h->block_len;
        if (take > len)
            take = len;
        memcpy(h->block + h->block_len, input, take);
        h->block_len += (uint32_t)take;
        input += take;
        len -= take;
    }
}

void tb_blake3_finalize(const tb_blake3 *h, uint8_t *out, size_t out_len) {
    pending_output o;
    chunk_output(h, &o);
    for (int i = (int)h->cv_stack_len - 1; i >= 0; i--) {
        uint32_t right[8];
        output_chaining_value(&o, right);
        parent_output(h->cv_stack[i], right, h->key, h->flags, &o);
    }
    /* Root output: compress the root node again with increasing counters (extendable output). */
    uint64_t counter = 0;
    while (out_len > 0) {
        uint32_t words[16];
        uint8_t bytes[64];
        compress(o.cv, o.block, counter, o.block_len, o.flags | FLAG_ROOT, words);
        for (int i = 0; i < 16; i++)
            store32(bytes + 4 * i, words[i]);
        size_t take = out_len < sizeof bytes ? out_len : sizeof bytes;
        memcpy(out, bytes, take);
        out += take;
        out_len -= take;
        counter++;
    }
}

void tb_blake3_hash(const void *data, size_t len, uint8_t out[32]) {
    tb_blake3 h;
    tb_blake3_init(&h);
    tb_blake3_update(&h, data, len);
    tb_blake3_finalize(&h, out, 32);
}
