/* libFuzzer harness for model.safetensors.index.json: arbitrary bytes become the index of a folder that
 * holds two small valid shards. Opening must succeed or fail with a status (never crash, never read
 * outside a shard); for an opened checkpoint every listed name must be found and its tensor's bytes lie
 * inside the mapping of its shard. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torchburn/safetensors.h"
#include "torchburn/tensor.h"

static char folder[64], index_path[128];

static void write_shard(const char *name, const char *tensor_a, const char *tensor_b) {
    static const float values[6] = {1, 2, 3, 4, 5, 6};
    tb_safetensors_entry entries[2] = {{.name = tensor_a, .dtype = TB_SAFETENSORS_F32, .ndim = 2, .shape = {2, 3},
                                        .data = values},
                                       {.name = tensor_b, .dtype = TB_SAFETENSORS_F32, .ndim = 1, .shape = {2},
                                        .data = values}};
    char path[160];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    if (tb_safetensors_write(path, entries, 2, NULL, NULL, 0) != TB_OK)
        __builtin_trap();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(folder, sizeof folder, "/tmp/tb-fuzz-index-XXXXXX");
    if (!mkdtemp(folder))
        __builtin_trap();
    write_shard("model-00001-of-00002.safetensors", "model.a.weight", "model.a.bias");
    write_shard("model-00002-of-00002.safetensors", "model.b.weight", "model.b.bias");
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", folder);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(index_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        __builtin_trap();
    tb_checkpoint_t *checkpoint = NULL;
    if (tb_checkpoint_open(index_path, &checkpoint) != TB_OK)
        return 0;
    for (size_t i = 0; i < tb_checkpoint_count(checkpoint); i++) {
        const char *name = tb_checkpoint_name_at(checkpoint, i);
        tb_tensor tensor;
        if (!name || tb_checkpoint_get(checkpoint, name, &tensor) != TB_OK)
            __builtin_trap(); /* a listed name must resolve */
        float sum = 0;
        const float *values = tb_tensor_data(&tensor);
        for (int64_t k = 0; k < tb_tensor_numel(&tensor); k++)
            sum += values[k]; /* ASan catches a view outside its shard */
        if (sum != sum && tb_tensor_numel(&tensor) < 0)
            __builtin_trap(); /* keeps the reads */
        tb_tensor_release(&tensor);
    }
    tb_checkpoint_close(checkpoint);
    return 0;
}
