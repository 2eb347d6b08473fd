/* The quantized-weight cache: after quantizing a checkpoint the model's run-format weights are saved as one
 * safetensors file, and a later load maps that file and copies its tensors into the model's huge-page
 * arena (a memcpy instead of a quantization; the mapping is dropped, so weights are held once). Metadata (format version, the caller's key, quant, group size, dims) and every
 * tensor's dtype and shape must match, otherwise the file is treated as stale and rebuilt. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "llm/llm_internal.h"

enum { NAME_BYTES = 64 };

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
    llm_slot *slots = calloc((size_t)slot_count, sizeof *slots);
    tb_safetensors_entry *entries = calloc((size_t)slot_count * 3, sizeof *entries);
    expected_tensor *expected = calloc((size_t)slot_count * 3, sizeof *expected);
    if (!slots || !entries || !expected) {
        free(slots);
        free(entries);
        free(expected);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm cache: out of memory");
    }
    tb_llm_model_slots(mutable_model, slots);
    size_t count = 0;
    for (int64_t i = 0; i < slot_count; i++) {
        expected_tensor *e = expected + count;
        const int n = slot_tensors(model, &slots[i], e);
        const void *data[3];
        if (slots[i].vector) {
            data[0] = *slots[i].vector;
        } else {
            data[0] = slots[i].matrix->q.data;
            data[1] = slots[i].matrix->q.scales;
            data[2] = slots[i].matrix->bias;
        }
        for (int t = 0; t < n; t++, count++) {
            entries[count].name = e[t].name;
            entries[count].dtype = e[t].dtype;
            entries[count].ndim = e[t].ndim;
            entries[count].shape[0] = e[t].shape[0];
            entries[count].shape[1] = e[t].shape[1];
            entries[count].data = data[t];
        }
    }
    char group[32], dims[512];
    snprintf(group, sizeof group, "%lld", (long long)model->group_size);
    describe_dims(model, dims, sizeof dims);
    const char *keys[5] = {"format", "key", "quant", "group_size", "dims"};
    const char *values[5] = {TB_LLM_CACHE_FORMAT, key, tb_llm_quant_name(model->quant), group, dims};
    tb_status status = tb_safetensors_write(path, entries, count, keys, values, 5);
    free(slots);
    free(entries);
    free(expected);
    if (status != TB_OK)
        return tb_error_prefix(status, "llm cache: writing '%s'", path);
    return TB_OK;
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

tb_status tb_llm_cache_try_load(tb_llm_model *model, const char *path, const char *key, bool *hit) {
    *hit = false;
    if (access(path, R_OK) != 0)
        return TB_OK;
    tb_safetensors_t *file = NULL;
    if (tb_safetensors_open(path, &file) != TB_OK) {
        tb_error_clear(); /* a corrupt cache is rebuilt, not an error */
        return TB_OK;
    }
    char group[32], dims[512];
    snprintf(group, sizeof group, "%lld", (long long)model->group_size);
    describe_dims(model, dims, sizeof dims);
    if (!metadata_is(file, "format", TB_LLM_CACHE_FORMAT) || !metadata_is(file, "key", key) ||
        !metadata_is(file, "quant", tb_llm_quant_name(model->quant)) || !metadata_is(file, "group_size", group) ||
        !metadata_is(file, "dims", dims)) {
        tb_safetensors_close(file);
        return TB_OK;
    }
    const int64_t slot_count = tb_llm_model_slots(model, NULL);
    llm_slot *slots = calloc((size_t)slot_count, sizeof *slots);
    const void **found = calloc((size_t)slot_count * 3, sizeof *found);
    if (!slots || !found) {
        free(slots);
        free(found);
        tb_safetensors_close(file);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm cache: out of memory");
    }
    tb_llm_model_slots(model, slots);
    bool complete = true;
    for (int64_t i = 0; i < slot_count && complete; i++) {
        expected_tensor e[3];
        const int n = slot_tensors(model, &slots[i], e);
        for (int t = 0; t < n && complete; t++) {
            found[3 * i + t] = find_tensor(file, &e[t]);
            complete = found[3 * i + t] != NULL;
        }
    }
    /* copy into the model's own (huge-page) memory; the mapping is dropped afterwards */
    tb_status status = TB_OK;
    for (int64_t i = 0; i < slot_count && complete && status == TB_OK; i++) {
        expected_tensor e[3];
        const int n = slot_tensors(model, &slots[i], e);
        void *copies[3] = {NULL, NULL, NULL};
        for (int t = 0; t < n && status == TB_OK; t++) {
            const int64_t bytes = e[t].shape[0] * (e[t].ndim == 2 ? e[t].shape[1] : 1) *
                                  (int64_t)tb_safetensors_dtype_size(e[t].dtype);
            status = tb_llm_model_alloc(model, bytes, &copies[t]);
            if (status == TB_OK)
                memcpy(copies[t], found[3 * i + t], (size_t)bytes);
        }
        if (status != TB_OK)
            break;
        if (slots[i].vector) {
            *slots[i].vector = copies[0];
            continue;
        }
        llm_matrix *m = slots[i].matrix;
        status = tb_llm_matrix_bind(m, copies[0], copies[1], model->group_size);
        m->bias = m->has_bias ? copies[2] : NULL;
    }
    free(slots);
    free(found);
    tb_safetensors_close(file);
    if (!complete)
        return TB_OK;
    if (status != TB_OK)
        return tb_error_prefix(status, "llm cache: loading '%s'", path);
    *hit = true;
    return TB_OK;
}
