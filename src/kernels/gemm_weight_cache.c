/* Prepacked B operands cached on the storage of the tensor they come from (nn.Linear weights):
 * contract in gemm.h (tb_gemm_f32_cached_b).
 *
 * Validity: an entry is used only while the storage's version (bumped by every in-place write the
 * eager layer and the optimizers make), the view it packed (offset, shape, strides), the ISA,
 * the precision and the blocking are all what they were at packing time. Storages whose memory can
 * change behind the version counter (wrapped from numpy/DLPack/torch, or exported) are never cached
 * (tb_storage_cacheable). Packing happens on the second product at the same version, so a training
 * loop, whose weights change every step, never pays for a pack it cannot reuse. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/env_switch.h"
#include "kernels/gemm_internal.h"
#include "torchburn/alloc.h"
#include "torchburn/tensor.h"

typedef struct packed_weight {
    tb_storage_derived base; /* first: the storage frees us through it */
    uint64_t version;
    const float *b;
    int64_t k, n, b_row_stride, b_col_stride;
    tb_isa isa;
    tb_gemm_precision precision;
    int uses; /* products seen at this version */
    tb_gemm_packed_b *packed;
} packed_weight;

static void packed_weight_free(tb_storage_derived *base) {
    packed_weight *entry = (packed_weight *)base;
    tb_gemm_packed_b_free(entry->packed);
    tb_free(entry);
}

static atomic_llong pack_count, hit_count;

void tb_gemm_cached_b_counts(int64_t *packs, int64_t *hits) {
    *packs = atomic_load_explicit(&pack_count, memory_order_relaxed);
    *hits = atomic_load_explicit(&hit_count, memory_order_relaxed);
}

static tb_env_switch prepack_switch = TB_ENV_SWITCH("TORCHBURN_PREPACK");

bool tb_gemm_prepack_enabled(void) { return tb_env_switch_on(&prepack_switch); }

void tb_gemm_set_prepack(bool enabled) { tb_env_switch_set(&prepack_switch, enabled); }

static bool same_key(const packed_weight *e, const tb_gemm_desc *d, uint64_t version, tb_isa isa,
                     tb_gemm_precision precision) {
    return e->version == version && e->b == d->b && e->k == d->k && e->n == d->n && e->b_row_stride == d->b_row_stride &&
           e->b_col_stride == d->b_col_stride && e->isa == isa && e->precision == precision;
}

tb_status tb_gemm_f32_cached_b(const tb_gemm_desc *desc, tb_storage *b_storage) {
    /* only single products whose B would be packed (small-m products read B in place) */
    if (!tb_gemm_prepack_enabled() || !desc || desc->b_packed || desc->batch != 1 || desc->k < 1 || desc->n < 1 ||
        desc->m <= TB_GEMM_SMALL_M_MAX || desc->alpha == 0.0f || !desc->b || !tb_storage_cacheable(b_storage))
        return tb_gemm_f32(desc);
    tb_isa isa = tb_isa_active();
    tb_gemm_precision precision = desc->precision == TB_GEMM_PRECISION_DEFAULT ? tb_gemm_default_precision()
                                                                                 : desc->precision;
    uint64_t version = b_storage->version;
    packed_weight *entry = (packed_weight *)tb_storage_derived_take(b_storage);
    if (entry && entry->base.free != packed_weight_free) { /* another kind of derived data: leave it */
        tb_storage_derived_put(b_storage, &entry->base);
        return tb_gemm_f32(desc);
    }
    if (entry && (!same_key(entry, desc, version, isa, precision) ||
                  (entry->packed && !tb_gemm_packed_b_matches(entry->packed, desc->k, desc->n, isa, precision)))) {
        tb_gemm_packed_b_free(entry->packed); /* B changed (or the blocking did): start over */
        entry->packed = NULL;
        entry->uses = 0;
    }
    if (!entry) {
        if (tb_alloc(sizeof *entry, TB_ALLOC_DEFAULT, (void **)&entry) != TB_OK) {
            tb_error_clear();
            return tb_gemm_f32(desc); /* no cache, same product */
        }
        memset(entry, 0, sizeof *entry);
        entry->base.free = packed_weight_free;
    }
    entry->version = version;
    entry->b = desc->b;
    entry->k = desc->k;
    entry->n = desc->n;
    entry->b_row_stride = desc->b_row_stride;
    entry->b_col_stride = desc->b_col_stride;
    entry->isa = isa;
    entry->precision = precision;
    entry->uses++;
    if (entry->packed) {
        atomic_fetch_add_explicit(&hit_count, 1, memory_order_relaxed);
    } else if (entry->uses >= 2) {
        if (tb_gemm_pack_b(desc->k, desc->n, desc->b, desc->b_row_stride, desc->b_col_stride, isa, precision,
                           &entry->packed) != TB_OK) {
            tb_error_clear(); /* out of memory for the copy: run unpacked */
            entry->packed = NULL;
        } else {
            atomic_fetch_add_explicit(&pack_count, 1, memory_order_relaxed);
        }
    }
    tb_gemm_desc d = *desc;
    d.b_packed = entry->packed;
    d.precision = precision;
    tb_status status = tb_gemm_f32_isa(&d, isa);
    tb_storage_derived_put(b_storage, &entry->base);
    return status;
}

size_t tb_gemm_cached_b_bytes(struct tb_storage *storage) {
    tb_storage_derived *derived = tb_storage_derived_take(storage);
    size_t bytes = 0;
    if (derived && derived->free == packed_weight_free)
        bytes = tb_gemm_packed_b_bytes(((packed_weight *)derived)->packed);
    tb_storage_derived_put(storage, derived);
    return bytes;
}
