/* libFuzzer harness for the safetensors reader and writer: validates arbitrary bytes as an in-memory
 * file; for an accepted file, reads every tensor's bytes, then writes the same tensors back with the
 * writer and checks that the result is accepted again with identical entries. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "torchburn/safetensors.h"

static void check_round_trip(const tb_safetensors_t *file) {
    size_t count = tb_safetensors_count(file);
    tb_safetensors_entry *entries = calloc(count ? count : 1, sizeof *entries);
    const char **keys = calloc(tb_safetensors_metadata_count(file) + 1, sizeof *keys);
    const char **values = calloc(tb_safetensors_metadata_count(file) + 1, sizeof *values);
    if (!entries || !keys || !values)
        goto done;
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        tb_safetensors_info info;
        if (tb_safetensors_info_at(file, i, &info) != TB_OK)
            __builtin_trap();
        entries[i] = (tb_safetensors_entry){.name = info.name, .dtype = info.dtype, .ndim = info.ndim,
                                            .data = tb_safetensors_data_at(file, i)};
        memcpy(entries[i].shape, info.shape, sizeof info.shape);
        total += info.nbytes;
    }
    for (size_t i = 0; i < tb_safetensors_metadata_count(file); i++)
        if (tb_safetensors_metadata_at(file, i, &keys[i], &values[i]) != TB_OK)
            __builtin_trap();
    char *header;
    size_t header_size;
    uint64_t data_size;
    if (tb_safetensors_serialize_header(entries, count, tb_safetensors_metadata_count(file) ? keys : NULL, values,
                                        tb_safetensors_metadata_count(file), &header, &header_size,
                                        &data_size) != TB_OK)
        __builtin_trap(); /* whatever the reader accepts, the writer can write */
    if (data_size != total)
        __builtin_trap();
    char *copy = malloc(header_size + data_size + 1);
    if (copy) {
        memcpy(copy, header, header_size);
        /* data in the writer's order is not needed for validation; zeros tile the same section */
        memset(copy + header_size, 0, data_size);
        tb_safetensors_t *again = NULL;
        if (tb_safetensors_open_memory(copy, header_size + data_size, "rewritten", &again) != TB_OK)
            __builtin_trap();
        if (tb_safetensors_count(again) != count ||
            tb_safetensors_metadata_count(again) != tb_safetensors_metadata_count(file))
            __builtin_trap();
        for (size_t i = 0; i < count; i++) {
            size_t index;
            tb_safetensors_info a, b;
            if (tb_safetensors_find(again, entries[i].name, &index) != TB_OK ||
                tb_safetensors_info_at(again, index, &b) != TB_OK || tb_safetensors_info_at(file, i, &a) != TB_OK ||
                a.dtype != b.dtype || a.ndim != b.ndim || a.nbytes != b.nbytes ||
                memcmp(a.shape, b.shape, sizeof a.shape) != 0)
                __builtin_trap();
        }
        tb_safetensors_close(again);
        free(copy);
    }
    free(header);
done:
    free(entries);
    free(keys);
    free(values);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tb_safetensors_t *file = NULL;
    if (tb_safetensors_open_memory(data, size, "fuzz.safetensors", &file) != TB_OK)
        return 0;
    volatile unsigned sum = 0;
    for (size_t i = 0; i < tb_safetensors_count(file); i++) {
        tb_tensor tensor;
        if (tb_safetensors_get_at(file, i, &tensor) == TB_OK) {
            const unsigned char *bytes = tb_tensor_data(&tensor);
            size_t nbytes = (size_t)tb_tensor_numel(&tensor) * tb_dtype_size(tensor.dtype);
            for (size_t k = 0; k < nbytes; k++)
                sum += bytes[k];
            tb_tensor_release(&tensor);
        }
        tb_safetensors_info info;
        if (tb_safetensors_info_at(file, i, &info) != TB_OK)
            __builtin_trap();
        size_t index;
        if (tb_safetensors_find(file, info.name, &index) != TB_OK || index != i)
            __builtin_trap();
    }
    (void)sum;
    check_round_trip(file);
    tb_safetensors_close(file);
    return 0;
}
