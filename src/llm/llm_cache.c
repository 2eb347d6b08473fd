/* The quantized-weight cache: after quantizing a checkpoint the model's run-format weights are saved as one
 * safetensors file, and a later load maps that file and copies its tensors into the model's huge-page
 * arena (a memcpy instead of a quantization; the mapping is dropped, so weights are held once).
 * A file of another format version or key is stale (rebuilt quietly). A file whose settings, dims, tensor
 * dtypes/shapes or per-tensor digests disagree is damaged: rebuilt, and the caller is told why.
 *
 * Digest of a tensor: BLAKE3 over the 32-byte BLAKE3 digests of its consecutive 1 MiB pieces, so that
 * the pieces of every tensor are hashed in parallel on the thread pool; stored as 32 hex characters
 * (the first 16 bytes) in the metadata entry "blake3:<tensor name>". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "files/file_io.h"
#include "llm/llm_internal.h"
#include "torchburn/alloc.h"
#include "torchburn/graph.h"
#include "torchburn/thread_pool.h"

enum { NAME_BYTES = 64, DIGEST_KEY_BYTES = NAME_BYTES + 8, DIGEST_HEX = 33, PIECE_BYTES = 1 << 20 };

/* ---- digests ---- */

typedef struct digest_job {
    const unsigned char **source; /* [tensors] bytes to hash (copied first to copy_to[t] when not NULL) */
    unsigned char **copy_to;      /* [tensors] or NULL */
    const int64_t *bytes;         /* [tensors] */
    const int64_t *first_piece;   /* [tensors + 1] prefix sums of the piece counts */
    int64_t tensors;
    uint8_t (*piece_digests)[32]; /* [total pieces] */
} digest_job;

static int64_t piece_count(int64_t bytes) { return bytes > 0 ? (bytes + PIECE_BYTES - 1) / PIECE_BYTES : 1; }

static void digest_pieces(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const digest_job *job = context;
    int64_t t = 0;
    for (int64_t p = begin; p < end; p++) {
        while (job->first_piece[t + 1] <= p)
            t++;
        const int64_t offset = (p - job->first_piece[t]) * PIECE_BYTES;
        const int64_t rest = job->bytes[t] - offset;
        const size_t length = (size_t)(rest < PIECE_BYTES ? (rest > 0 ? rest : 0) : PIECE_BYTES);
        const unsigned char *data = job->source[t] + offset;
        if (job->copy_to && length) { /* copy, then hash the destination while it is in cache */
            memcpy(job->copy_to[t] + offset, data, length);
            data = job->copy_to[t] + offset;
        }
        tb_blake3_hash(length ? data : (const void *)"", length, job->piece_digests[p]);
    }
}

/* Hex digests of `count` tensors (copying each to copy_to[t] first when copy_to is not NULL). */
static tb_status tensor_digests(const unsigned char **source, unsigned char **copy_to, const int64_t *bytes,
                                int64_t count, char (*hex)[DIGEST_HEX]) {
    int64_t *first_piece = malloc((size_t)(count + 1) * sizeof *first_piece);
    if (!first_piece)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm cache: out of memory");
    first_piece[0] = 0;
    for (int64_t t = 0; t < count; t++)
        first_piece[t + 1] = first_piece[t] + piece_count(bytes[t]);
    uint8_t (*pieces)[32] = malloc((size_t)first_piece[count] * 32);
    if (!pieces) {
        free(first_piece);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm cache: out of memory");
    }
    digest_job job = {source, copy_to, bytes, first_piece, count, pieces};
    tb_parallel_for(first_piece[count], 1, digest_pieces, &job);
    static const char digits[] = "0123456789abcdef";
    for (int64_t t = 0; t < count; t++) {
        uint8_t digest[32];
        tb_blake3_hash(pieces[first_piece[t]], (size_t)(first_piece[t + 1] - first_piece[t]) * 32, digest);
        for (int i = 0; i < 16; i++) {
            hex[t][2 * i] = digits[digest[i] >> 4];
            hex[t][2 * i + 1] = digits[digest[i] & 15];
        }
        hex[t][32] = '\0';
    }
    free(pieces);
    free(first_piece);
    return TB_OK;
}

typedef struct cache_names {
    char (*names)[NAME_BYTES];
    llm_slot *slots;
    int64_t slot_count;
} cache_names;

static void describe_dims(const tb_llm_model *model, char *buf, size_t size) {
    snprintf(buf, size, "type=%s layers=%lld hidden=%lld heads=%lld kv_heads=%lld head_dim=%lld intermediate=%lld "
             "vocab=%lld tied=%d qk_norm=%d",
             tb_hf_model_type_name(model->config.model_type), (long long)model->n_layers, (long long)model->hidden,
             (long long)model->n_heads, (long long)model->n_kv_heads, (long long)model->head_dim,
             (long long)model->intermediate, (long long)model->vocab, (int)model->tied, (int)model->config.qk_norm);
}

/* Expected tensors of a slot: count and (name, dtype, shape) of each. */
typedef struct expected_tensor {
    char name[NAME_BYTES];
    tb_safetensors_dtype dtype;
    int ndim;
    int64_t shape[2];
} expected_tensor;

static int slot_tensors(const tb_llm_model *model, const llm_slot *slot, expected_tensor out[3]) {
    if (slot->vector) {
        snprintf(out[0].name, NAME_BYTES, "%s", slot->name);
        out[0].dtype = TB_SAFETENSORS_F32;
        out[0].ndim = 1;
        out[0].shape[0] = slot->length;
        return 1;
    }
    const llm_matrix *m = slot->matrix;
    const bool int8 = m->format == TB_LLM_QUANT_INT8;
    int count = 0;
    snprintf(out[count].name, NAME_BYTES, "%s.weight", slot->name);
    out[count].dtype = int8 ? TB_SAFETENSORS_I8 : TB_SAFETENSORS_U8;
    out[count].ndim = 2;
    out[count].shape[0] = m->n;
    out[count++].shape[1] = int8 ? m->k : m->k / 2;
    snprintf(out[count].name, NAME_BYTES, "%s.scales", slot->name);
    out[count].dtype = TB_SAFETENSORS_F32;
    out[count].ndim = 2;
    out[count].shape[0] = m->n;
    out[count++].shape[1] = int8 ? 1 : m->k / model->group_size;
    if (m->has_bias) {
        snprintf(out[count].name, NAME_BYTES, "%s.bias", slot->name);
        out[count].dtype = TB_SAFETENSORS_F32;
        out[count].ndim = 1;
        out[count++].shape[0] = m->n;
    }
    return count;
}

tb_status tb_llm_cache_save(const tb_llm_model *model, const char *path, const char *key) {
    tb_llm_model *mutable_model = (tb_llm_model *)model; /* slots only read through here */
    const int64_t slot_count = tb_llm_model_slots(mutable_model, NULL);
    const size_t most = (size_t)slot_count * 3;
    llm_slot *slots = calloc((size_t)slot_count, sizeof *slots);
    tb_safetensors_entry *entries = calloc(most, sizeof *entries);
    expected_tensor *expected = calloc(most, sizeof *expected);
    const unsigned char **data = calloc(most, sizeof *data);
    int64_t *bytes = calloc(most, sizeof *bytes);
    char (*hex)[DIGEST_HEX] = calloc(most, DIGEST_HEX);
    char (*digest_keys)[DIGEST_KEY_BYTES] = calloc(most, DIGEST_KEY_BYTES);
    const char **keys = calloc(most + 5, sizeof *keys), **values = calloc(most + 5, sizeof *values);
    tb_status status = TB_OK;
    if (!slots || !entries || !expected || !data || !bytes || !hex || !digest_keys || !keys || !values)
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm cache: out of memory");
    size_t count = 0;
    if (status == TB_OK) {
        tb_llm_model_slots(mutable_model, slots);
        for (int64_t i = 0; i < slot_count; i++) {
            expected_tensor *e = expected + count;
            const int n = slot_tensors(model, &slots[i], e);
            const void *tensor_data[3];
            if (slots[i].vector) {
                tensor_data[0] = *slots[i].vector;
            } else {
                tensor_data[0] = slots[i].matrix->q.data;
                tensor_data[1] = slots[i].matrix->q.scales;
                tensor_data[2] = slots[i].matrix->bias;
            }
            for (int t = 0; t < n; t++, count++) {
                entries[count] = (tb_safetensors_entry){.name = e[t].name, .dtype = e[t].dtype, .ndim = e[t].ndim,
                                                        .data = tensor_data[t]};
                entries[count].shape[0] = e[t].shape[0];
                entries[count].shape[1] = e[t].shape[1];
                data[count] = tensor_data[t];
                bytes[count] = e[t].shape[0] * (e[t].ndim == 2 ? e[t].shape[1] : 1) *
                               (int64_t)tb_safetensors_dtype_size(e[t].dtype);
            }
        }
        status = tensor_digests(data, NULL, bytes, (int64_t)count, hex);
    }
    if (status == TB_OK) {
        char group[32], dims[512];
        snprintf(group, sizeof group, "%lld", (long long)model->group_size);
        describe_dims(model, dims, sizeof dims);
        const char *fixed_keys[5] = {"format", "key", "quant", "group_size", "dims"};
        const char *fixed_values[5] = {TB_LLM_CACHE_FORMAT, key, tb_llm_quant_name(model->quant), group, dims};
        for (int i = 0; i < 5; i++) {
            keys[i] = fixed_keys[i];
            values[i] = fixed_values[i];
        }
        for (size_t t = 0; t < count; t++) {
            snprintf(digest_keys[t], DIGEST_KEY_BYTES, "blake3:%s", entries[t].name);
            keys[5 + t] = digest_keys[t];
            values[5 + t] = hex[t];
        }
        status = tb_safetensors_write(path, entries, count, keys, values, 5 + count);
        if (status != TB_OK)
            status = tb_error_prefix(status, "llm cache: writing '%s'", path);
    }
    free(slots);
    free(entries);
    free(expected);
    free(data);
    free(bytes);
    free(hex);
    free(digest_keys);
    free(keys);
    free(values);
    return status;
}

static bool metadata_is(const tb_safetensors_t *file, const char *key, const char *value) {
    const char *stored = tb_safetensors_metadata_get(file, key);
    return stored && strcmp(stored, value) == 0;
}

/* Finds a tensor of exactly the expected dtype and shape; NULL when absent or different. */
static const void *find_tensor(const tb_safetensors_t *file, const expected_tensor *e) {
    size_t index;
    tb_safetensors_info info;
    if (tb_safetensors_find(file, e->name, &index) != TB_OK || tb_safetensors_info_at(file, index, &info) != TB_OK)
        return NULL;
    if (info.dtype != e->dtype || info.ndim != e->ndim)
        return NULL;
    for (int d = 0; d < e->ndim; d++)
        if (info.shape[d] != e->shape[d])
            return NULL;
    const void *data = tb_safetensors_data_at(file, index);
    if (e->dtype == TB_SAFETENSORS_F32 && ((uintptr_t)data % sizeof(float)) != 0)
        return NULL;
    /* ask the kernel to start reading the pages in before the copy (asynchronous; failure is harmless) */
    const long page = sysconf(_SC_PAGESIZE);
    if (page > 0 && info.nbytes > 0) {
        uintptr_t begin = (uintptr_t)data / (uintptr_t)page * (uintptr_t)page;
        (void)madvise((void *)begin, (size_t)((uintptr_t)data + info.nbytes - begin), MADV_WILLNEED);
    }
    return data;
}

/* Frees what tb_llm_model_alloc handed out since the marks (a rejected cache file's copies). */
static void release_since(tb_llm_model *model, size_t arena_mark, int64_t buffer_mark) {
    for (int64_t i = buffer_mark; i < model->buffer_count; i++)
        tb_free(model->buffers[i].data);
    model->buffer_count = buffer_mark;
    model->arena_used = arena_mark;
}

/* Copies every expected tensor of the file into model memory and checks its digest; binds the slots only
 * when all match. *damaged (with why) when a tensor is missing, of another dtype/shape, or its bytes differ. */
static tb_status load_tensors(tb_llm_model *model, const tb_safetensors_t *file, bool *damaged, char *why,
                              size_t why_size) {
    const int64_t slot_count = tb_llm_model_slots(model, NULL);
    const size_t most = (size_t)slot_count * 3;
    llm_slot *slots = calloc((size_t)slot_count, sizeof *slots);
    expected_tensor *expected = calloc(most, sizeof *expected);
    const unsigned char **found = calloc(most, sizeof *found);
    unsigned char **copies = calloc(most, sizeof *copies);
    int64_t *bytes = calloc(most, sizeof *bytes);
    char (*hex)[DIGEST_HEX] = calloc(most, DIGEST_HEX);
    tb_status status = TB_OK;
    if (!slots || !expected || !found || !copies || !bytes || !hex)
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm cache: out of memory");
    const size_t arena_mark = model->arena_used;
    const int64_t buffer_mark = model->buffer_count;
    size_t count = 0;
    if (status == TB_OK) {
        tb_llm_model_slots(model, slots);
        for (int64_t i = 0; i < slot_count && !*damaged; i++) {
            const int n = slot_tensors(model, &slots[i], expected + count);
            for (int t = 0; t < n && !*damaged; t++, count++) {
                const expected_tensor *e = &expected[count];
                found[count] = find_tensor(file, e);
                if (!found[count]) {
                    snprintf(why, why_size, "tensor '%s' is missing or has another dtype or shape", e->name);
                    *damaged = true;
                }
                bytes[count] = e->shape[0] * (e->ndim == 2 ? e->shape[1] : 1) *
                               (int64_t)tb_safetensors_dtype_size(e->dtype);
            }
        }
    }
    for (size_t t = 0; t < count && status == TB_OK && !*damaged; t++)
        status = tb_llm_model_alloc(model, bytes[t], (void **)&copies[t]);
    if (status == TB_OK && !*damaged)
        status = tensor_digests(found, copies, bytes, (int64_t)count, hex);
    for (size_t t = 0; t < count && status == TB_OK && !*damaged; t++) {
        char digest_key[DIGEST_KEY_BYTES];
        snprintf(digest_key, sizeof digest_key, "blake3:%s", expected[t].name);
        if (!metadata_is(file, digest_key, hex[t])) {
            snprintf(why, why_size, "the bytes of tensor '%s' do not match their digest", expected[t].name);
            *damaged = true;
        }
    }
    /* bind, in slot order, the verified copies */
    size_t next = 0;
    for (int64_t i = 0; i < slot_count && status == TB_OK && !*damaged; i++) {
        const int n = slot_tensors(model, &slots[i], expected + next);
        unsigned char **copy = copies + next;
        next += (size_t)n;
        if (slots[i].vector) {
            *slots[i].vector = (const float *)copy[0];
            continue;
        }
        llm_matrix *m = slots[i].matrix;
        status = tb_llm_matrix_bind(m, copy[0], (const float *)copy[1], model->group_size);
        m->bias = m->has_bias ? (const float *)copy[2] : NULL;
    }
    if (status != TB_OK || *damaged)
        release_since(model, arena_mark, buffer_mark);
    free(slots);
    free(expected);
    free(found);
    free(copies);
    free(bytes);
    free(hex);
    return status;
}

tb_status tb_llm_cache_try_load(tb_llm_model *model, const char *path, const char *key, llm_cache_result *result,
                                char *why, size_t why_size) {
    *result = LLM_CACHE_ABSENT;
    why[0] = '\0';
    if (!tb_path_exists(path))
        return TB_OK;
    tb_safetensors_t *file = NULL;
    if (tb_safetensors_open(path, &file) != TB_OK) { /* a damaged cache is rebuilt, not an error */
        snprintf(why, why_size, "%s", tb_error_message());
        tb_error_clear();
        *result = LLM_CACHE_DAMAGED;
        return TB_OK;
    }
    char group[32], dims[512];
    snprintf(group, sizeof group, "%lld", (long long)model->group_size);
    describe_dims(model, dims, sizeof dims);
    if (!metadata_is(file, "format", TB_LLM_CACHE_FORMAT) || !metadata_is(file, "key", key)) {
        tb_safetensors_close(file);
        *result = LLM_CACHE_STALE;
        return TB_OK;
    }
    if (!metadata_is(file, "quant", tb_llm_quant_name(model->quant)) || !metadata_is(file, "group_size", group) ||
        !metadata_is(file, "dims", dims)) {
        tb_safetensors_close(file);
        snprintf(why, why_size, "its quant, group size or dimensions disagree with its key");
        *result = LLM_CACHE_DAMAGED;
        return TB_OK;
    }
    bool damaged = false;
    tb_status status = load_tensors(model, file, &damaged, why, why_size);
    tb_safetensors_close(file);
    if (status != TB_OK)
        return tb_error_prefix(status, "llm cache: loading '%s'", path);
    *result = damaged ? LLM_CACHE_DAMAGED : LLM_CACHE_LOADED;
    return TB_OK;
}
