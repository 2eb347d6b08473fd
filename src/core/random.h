/* The small PRNGs of the C core, one definition for every user: SplitMix64 (a Weyl sequence through a
 * 64-bit finalizer: seeding, and counter-based draws such as the graph layer's dropout masks) and
 * xoshiro256** (the stateful streams of the LLM sampler and turbo_torch's generator). Internal header. */
#ifndef TORCHBURN_CORE_RANDOM_H
#define TORCHBURN_CORE_RANDOM_H

#include <stdint.h>

#define TB_SPLITMIX64_GOLDEN 0x9e3779b97f4a7c15ull

/* SplitMix64's output function: a bijection of 64-bit words. Draw k of the stream keyed by s is
 * tb_splitmix64_mix(s + (k + 1) * TB_SPLITMIX64_GOLDEN). */
static inline uint64_t tb_splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The next SplitMix64 draw of the stream whose state is *state. */
static inline uint64_t tb_splitmix64_next(uint64_t *state) { return tb_splitmix64_mix(*state += TB_SPLITMIX64_GOLDEN); }

static inline uint64_t tb_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** state from a 64-bit seed (four SplitMix64 draws). */
static inline void tb_xoshiro256ss_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++)
        s[i] = tb_splitmix64_next(&seed);
}

static inline uint64_t tb_xoshiro256ss_next(uint64_t s[4]) {
    const uint64_t result = tb_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = tb_rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double tb_xoshiro256ss_unit(uint64_t s[4]) { return (double)(tb_xoshiro256ss_next(s) >> 11) * 0x1.0p-53; }

#endif
