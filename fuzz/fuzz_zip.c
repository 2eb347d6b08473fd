/* libFuzzer harness for the checkpoint zip index (src/files/zip_read.c): arbitrary bytes are an archive.
 * Indexing must succeed or fail with a status (never crash, never read outside the input); every entry
 * it hands out must lie inside the input, and its bytes are read so ASan sees any overrun. */
#include <stdint.h>
#include <stdlib.h>

#include "files/zip_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tb_zip_entry *entries = NULL;
    size_t count = 0;
    if (tb_zip_index(data, size, &entries, &count) != TB_OK)
        return 0;
    unsigned sum = 0;
    for (size_t i = 0; i < count; i++) {
        const tb_zip_entry *e = &entries[i];
        if (e->data_offset > size || e->size > size - e->data_offset)
            __builtin_trap(); /* an entry outside the archive */
        if ((const uint8_t *)e->name < data || (const uint8_t *)e->name + e->name_length > data + size)
            __builtin_trap();
        for (uint64_t k = 0; k < e->size; k++)
            sum += data[e->data_offset + k];
        for (size_t k = 0; k < e->name_length; k++)
            sum += (unsigned char)e->name[k];
    }
    free(entries);
    if (sum == 0xFFFFFFFFu && count == 0)
        __builtin_trap(); /* keeps the reads */
    return 0;
}
