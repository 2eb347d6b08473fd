/* UTF-8 handling (strict validation, lossy decoding like Rust's from_utf8_lossy) and Unicode
 * normalization (NFC/NFD/NFKC/NFKD: full decomposition, canonical ordering, canonical composition)
 * over the generated tables in unicode_tables.c. */
#include "tokenizer/unicode.h"

#include <stdlib.h>
#include <string.h>

tb_status tb_tok_buffer_reserve(tb_tok_buffer *buffer, size_t extra) {
    size_t need = buffer->length + extra + 1; /* +1 keeps room for the terminating NUL */
    if (need < buffer->length)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: buffer size overflow");
    if (need <= buffer->capacity)
        return TB_OK;
    size_t capacity = buffer->capacity ? buffer->capacity : 64;
    while (capacity < need) {
        if (capacity > SIZE_MAX / 2)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: buffer size overflow");
        capacity *= 2;
    }
    char *data = realloc(buffer->data, capacity);
    if (!data)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: cannot grow a buffer to %zu bytes", capacity);
    buffer->data = data;
    buffer->capacity = capacity;
    return TB_OK;
}

tb_status tb_tok_buffer_append(tb_tok_buffer *buffer, const void *bytes, size_t n) {
    TB_TRY(tb_tok_buffer_reserve(buffer, n));
    if (n)
        memcpy(buffer->data + buffer->length, bytes, n);
    buffer->length += n;
    buffer->data[buffer->length] = '\0';
    return TB_OK;
}

void tb_tok_buffer_free(tb_tok_buffer *buffer) {
    free(buffer->data);
    buffer->data = NULL;
    buffer->length = buffer->capacity = 0;
}

size_t tb_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence at s[0..n), or, when invalid, -(length of its maximal
 * invalid subpart) (at least 1), per Unicode's "U+FFFD substitution of maximal subparts". */
static long utf8_sequence(const uint8_t *s, size_t n) {
    uint8_t b = s[0];
    if (b < 0x80)
        return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else {
        return -1;
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n)
            return -(long)i;
        uint8_t c = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (c < l || c > h)
            return -(long)i;
    }
    return (long)need;
}

size_t tb_utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        long len = utf8_sequence(s + i, n - i);
        if (len < 0)
            return i;
        i += (size_t)len;
    }
    return n;
}

tb_status tb_utf8_append_lossy(tb_tok_buffer *out, const uint8_t *s, size_t n) {
    static const uint8_t replacement[3] = {0xEF, 0xBF, 0xBD};
    size_t i = 0;
    while (i < n) {
        size_t valid = tb_utf8_valid_prefix(s + i, n - i);
        TB_TRY(tb_tok_buffer_append(out, s + i, valid));
        i += valid;
        if (i >= n)
            break;
        long len = utf8_sequence(s + i, n - i);
        TB_TRY(tb_tok_buffer_append(out, replacement, 3));
        i += (size_t)(-len);
    }
    return TB_OK;
}

bool tb_unicode_is_nfc_inert(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp = tb_utf8_next(s, &i);
        if (!(tb_uc_flags(cp) & TB_UC_NFC_INERT))
            return false;
    }
    return true;
}

enum {
    HANGUL_S_BASE = 0xAC00,
    HANGUL_L_BASE = 0x1100,
    HANGUL_V_BASE = 0x1161,
    HANGUL_T_BASE = 0x11A7,
    HANGUL_L_COUNT = 19,
    HANGUL_V_COUNT = 21,
    HANGUL_T_COUNT = 28,
    HANGUL_N_COUNT = HANGUL_V_COUNT * HANGUL_T_COUNT,
    HANGUL_S_COUNT = HANGUL_L_COUNT * HANGUL_N_COUNT,
};

/* A growable array of code points used during normalization. */
typedef struct cp_array {
    uint32_t *data;
    size_t length, capacity;
} cp_array;

static tb_status cp_push(cp_array *a, uint32_t cp) {
    if (a->length == a->capacity) {
        size_t capacity = a->capacity ? a->capacity * 2 : 64;
        uint32_t *data = realloc(a->data, capacity * sizeof *data);
        if (!data)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: normalization buffer of %zu code points", capacity);
        a->data = data;
        a->capacity = capacity;
    }
    a->data[a->length++] = cp;
    return TB_OK;
}

static tb_status decompose_into(cp_array *a, uint32_t cp, bool compat) {
    if (cp >= HANGUL_S_BASE && cp < HANGUL_S_BASE + HANGUL_S_COUNT) {
        uint32_t s = cp - HANGUL_S_BASE;
        TB_TRY(cp_push(a, HANGUL_L_BASE + s / HANGUL_N_COUNT));
        TB_TRY(cp_push(a, HANGUL_V_BASE + (s % HANGUL_N_COUNT) / HANGUL_T_COUNT));
        if (s % HANGUL_T_COUNT)
            TB_TRY(cp_push(a, HANGUL_T_BASE + s % HANGUL_T_COUNT));
        return TB_OK;
    }
    if (cp < 0x110000) {
        uint16_t index = tb_uc_decomp_index_stage2[(size_t)tb_uc_decomp_index_stage1[cp >> 7] * 128 + (cp & 127)];
        if (index) {
            const tb_uc_decomposition *d = &tb_uc_decompositions[index];
            size_t offset = compat ? d->compat_offset : d->canonical_offset;
            size_t length = compat ? d->compat_length : d->canonical_length;
            if (length) {
                for (size_t k = 0; k < length; k++)
                    TB_TRY(cp_push(a, tb_uc_decomp_pool[offset + k]));
                return TB_OK;
            }
        }
    }
    return cp_push(a, cp);
}

/* Stable sort of a run of non-starters by combining class (counting sort for long runs). */
static tb_status sort_run(uint32_t *run, size_t n) {
    if (n < 2)
        return TB_OK;
    if (n <= 32) {
        for (size_t i = 1; i < n; i++) {
            uint32_t c = run[i];
            unsigned k = tb_uc_ccc(c);
            size_t j = i;
            while (j > 0 && tb_uc_ccc(run[j - 1]) > k) {
                run[j] = run[j - 1];
                j--;
            }
            run[j] = c;
        }
        return TB_OK;
    }
    uint32_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: normalization sort of %zu marks", n);
    size_t count[257] = {0};
    for (size_t i = 0; i < n; i++)
        count[tb_uc_ccc(run[i]) + 1]++;
    for (int c = 1; c < 257; c++)
        count[c] += count[c - 1];
    for (size_t i = 0; i < n; i++)
        tmp[count[tb_uc_ccc(run[i])]++] = run[i];
    memcpy(run, tmp, n * sizeof *tmp);
    free(tmp);
    return TB_OK;
}

/* The primary composite of (a, b), or 0 when they do not compose. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L_BASE && a < HANGUL_L_BASE + HANGUL_L_COUNT && b >= HANGUL_V_BASE &&
        b < HANGUL_V_BASE + HANGUL_V_COUNT)
        return HANGUL_S_BASE + ((a - HANGUL_L_BASE) * HANGUL_V_COUNT + (b - HANGUL_V_BASE)) * HANGUL_T_COUNT;
    if (a >= HANGUL_S_BASE && a < HANGUL_S_BASE + HANGUL_S_COUNT && (a - HANGUL_S_BASE) % HANGUL_T_COUNT == 0 &&
        b > HANGUL_T_BASE && b < HANGUL_T_BASE + HANGUL_T_COUNT)
        return a + (b - HANGUL_T_BASE);
    uint64_t key = ((uint64_t)a << 21) | b;
    size_t lo = 0, hi = tb_uc_composition_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tb_uc_composition_keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < tb_uc_composition_count && tb_uc_composition_keys[lo] == key)
        return tb_uc_composition_values[lo];
    return 0;
}

static size_t compose(uint32_t *cps, size_t n) {
    size_t out = 0;
    long starter = -1;
    unsigned last_class = 256;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cps[i];
        unsigned cls = tb_uc_ccc(c);
        if (starter >= 0 && (last_class < cls || last_class == 0)) {
            uint32_t composite = compose_pair(cps[starter], c);
            if (composite) {
                cps[starter] = composite;
                continue;
            }
        }
        if (cls == 0)
            starter = (long)out;
        last_class = cls;
        cps[out++] = c;
    }
    return out;
}

tb_status tb_unicode_normalize(tb_normal_form form, const uint8_t *s, size_t n, tb_tok_buffer *out) {
    bool compat = form == TB_NF_NFKC || form == TB_NF_NFKD;
    bool composing = form == TB_NF_NFC || form == TB_NF_NFKC;
    cp_array a = {0};
    tb_status st = TB_OK;
    size_t i = 0;
    while (i < n && st == TB_OK) {
        uint32_t cp = tb_utf8_next(s, &i);
        st = decompose_into(&a, cp, compat);
    }
    /* canonical ordering of every run of non-starters */
    for (size_t k = 0; k < a.length && st == TB_OK;) {
        if (tb_uc_ccc(a.data[k]) == 0) {
            k++;
            continue;
        }
        size_t end = k;
        while (end < a.length && tb_uc_ccc(a.data[end]) != 0)
            end++;
        st = sort_run(a.data + k, end - k);
        k = end;
    }
    size_t count = a.length;
    if (st == TB_OK && composing)
        count = compose(a.data, a.length);
    if (st == TB_OK)
        st = tb_tok_buffer_reserve(out, count * 4);
    if (st == TB_OK) {
        for (size_t k = 0; k < count; k++)
            out->length += tb_utf8_encode(a.data[k], (uint8_t *)out->data + out->length);
        out->data[out->length] = '\0';
    }
    free(a.data);
    return st;
}
