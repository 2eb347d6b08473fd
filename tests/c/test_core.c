/* C tests of the core: dtype conversions (f16/bf16 rounding, NaN/inf), allocator (alignment, pool
 * reuse, stats, fault injection), tensor views and strides, copies, and CPU/ISA selection. */
#include <math.h>
#include <string.h>

#include "kernels/probe_kernels.h"
#include "tb_test.h"
#include "torchburn/probe.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/dtype.h"
#include "torchburn/tensor.h"
#include "torchburn/thread_pool.h"

/* Reference round-to-nearest-even of an f32 to bf16, deciding with exact double arithmetic. */
static uint16_t bf16_reference(float value) {
    uint32_t bits = tb_f32_to_bits(value);
    uint32_t low = bits & 0xffff0000u;
    if (low == bits)
        return (uint16_t)(low >> 16);
    int exponent = (int)((bits >> 23) & 0xffu);
    double step = ldexp(1.0, (exponent ? exponent : 1) - 127 - 7); /* one bf16 ulp in this binade */
    double remainder = fabs((double)value) - fabs((double)tb_f32_from_bits(low));
    if (remainder * 2 < step)
        return (uint16_t)(low >> 16);
    if (remainder * 2 > step || ((low >> 16) & 1u))
        return (uint16_t)((low + 0x10000u) >> 16);
    return (uint16_t)(low >> 16);
}

static void test_half_conversions(void) {
    /* f16 against the compiler's IEEE _Float16 conversion (round to nearest even) */
    uint64_t state = 12345;
    int f16_mismatch = 0, bf16_mismatch = 0;
    for (int i = 0; i < 2000000; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t bits = (uint32_t)(state >> 32);
        if (i < 65536)
            bits = (uint32_t)i << 13 | ((uint32_t)i & 1u) << 12; /* halfway patterns around f16 */
        float value = tb_f32_from_bits(bits);
#if defined(__FLT16_MAX__)
        _Float16 expected = (_Float16)value;
        uint16_t expected_bits;
        memcpy(&expected_bits, &expected, 2);
        uint16_t got = tb_f32_to_f16(value);
        if (isnan(value) ? !((got & 0x7c00) == 0x7c00 && (got & 0x3ff)) : got != expected_bits)
            f16_mismatch++;
        if (!isnan(value) && tb_f16_to_f32(got) != (float)expected)
            f16_mismatch++;
#endif
        if (!isnan(value) && tb_f32_to_bf16(value) != bf16_reference(value))
            bf16_mismatch++;
    }
    TB_CHECK_MSG(f16_mismatch == 0, "%d f16 mismatches", f16_mismatch);
    TB_CHECK_MSG(bf16_mismatch == 0, "%d bf16 mismatches", bf16_mismatch);
    /* every f16 bit pattern round-trips */
    int roundtrip = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float value = tb_f16_to_f32((uint16_t)h);
        if (!isnan(value) && tb_f32_to_f16(value) != h)
            roundtrip++;
    }
    TB_CHECK(roundtrip == 0);
    TB_CHECK(tb_f32_to_f16(INFINITY) == 0x7c00);
    TB_CHECK(tb_f32_to_f16(-INFINITY) == 0xfc00);
    TB_CHECK(tb_f32_to_f16(65520.0f) == 0x7c00);
    TB_CHECK(tb_f32_to_f16(65519.0f) == 0x7bff);
    TB_CHECK(tb_f32_to_f16(-0.0f) == 0x8000);
    TB_CHECK(isnan(tb_f16_to_f32(tb_f32_to_f16(NAN))));
    TB_CHECK(isnan(tb_bf16_to_f32(tb_f32_to_bf16(NAN))));
    TB_CHECK(tb_f32_to_bf16(INFINITY) == 0x7f80);
    TB_CHECK(tb_f32_to_bf16(3.4028235e38f) == 0x7f80); /* FLT_MAX rounds up to inf */
    /* dtype table basics */
    TB_CHECK(tb_dtype_size(TB_BF16) == 2 && tb_dtype_size(TB_I64) == 8 && tb_dtype_size(TB_BOOL) == 1);
    tb_dtype d;
    TB_CHECK(tb_dtype_from_name("bfloat16", &d) == TB_OK && d == TB_BF16);
    TB_CHECK(tb_dtype_from_name("complex64", &d) == TB_ERR_DTYPE);
    float values[4] = {NAN, 1e10f, -1e10f, -3.7f};
    int32_t ints[4];
    uint8_t bytes[4];
    tb_dtype_table[TB_I32].from_f32(values, ints, 4);
    TB_CHECK(ints[0] == INT32_MIN && ints[1] == INT32_MIN && ints[2] == INT32_MIN && ints[3] == -3);
    tb_dtype_table[TB_U8].from_f32(values, bytes, 4);
    TB_CHECK(bytes[0] == 0 && bytes[3] == 253);
}

static void test_allocator(void) {
    tb_alloc_stats before, after;
    tb_alloc_get_stats(&before);
    void *blocks[32];
    for (int i = 0; i < 32; i++) {
        TB_CHECK(tb_alloc((size_t)i * 1000 + 1, TB_ALLOC_ZERO, &blocks[i]) == TB_OK);
        TB_CHECK(((uintptr_t)blocks[i] % 64) == 0);
        unsigned char *bytes = blocks[i];
        int zero = 1;
        for (int j = 0; j < i * 1000 + 1; j++)
            zero &= bytes[j] == 0;
        TB_CHECK(zero);
        memset(blocks[i], 0xff, (size_t)i * 1000 + 1);
    }
    for (int i = 0; i < 32; i++)
        tb_free(blocks[i]);
    /* same sizes again: served from the pool, and zero-filled on request even though recycled */
    for (int i = 0; i < 32; i++) {
        TB_CHECK(tb_alloc((size_t)i * 1000 + 1, TB_ALLOC_ZERO, &blocks[i]) == TB_OK);
        TB_CHECK(((unsigned char *)blocks[i])[0] == 0);
    }
    tb_alloc_get_stats(&after);
    TB_CHECK(after.reuse_hits >= before.reuse_hits + 32);
    TB_CHECK(after.bytes_peak >= after.bytes_live);
    for (int i = 0; i < 32; i++)
        tb_free(blocks[i]);
    void *zero_size = NULL;
    TB_CHECK(tb_alloc(0, 0, &zero_size) == TB_OK && zero_size != NULL);
    tb_free(zero_size);
    tb_free(NULL);
    void *huge = (void *)1;
    TB_CHECK(tb_alloc((size_t)1 << 60, 0, &huge) == TB_ERR_OUT_OF_MEMORY && huge == NULL);
    TB_CHECK(strstr(tb_error_message(), "bytes") != NULL);
    /* fault injection: the second allocation fails with a status, nothing crashes */
    tb_alloc_fail_after(1);
    void *a = NULL, *b = NULL;
    TB_CHECK(tb_alloc(100, 0, &a) == TB_OK);
    TB_CHECK(tb_alloc(100, 0, &b) == TB_ERR_OUT_OF_MEMORY && b == NULL);
    tb_alloc_fail_after(-1);
    tb_free(a);
    tb_tensor t;
    tb_alloc_fail_after(0);
    TB_CHECK(tb_tensor_empty(TB_F32, 2, (int64_t[]){4, 4}, 0, &t) == TB_ERR_OUT_OF_MEMORY);
    tb_alloc_fail_after(-1);
    tb_alloc_trim();
    tb_alloc_get_stats(&after);
    TB_CHECK(after.bytes_cached == 0);
}

static float at(const tb_tensor *t, const int64_t *index) {
    int64_t offset = t->offset;
    for (int d = 0; d < t->ndim; d++)
        offset += index[d] * t->strides[d];
    return ((float *)t->storage->data)[offset];
}

static void test_views(void) {
    tb_tensor t;
    int64_t shape[3] = {2, 3, 4};
    TB_CHECK(tb_tensor_empty(TB_F32, 3, shape, 0, &t) == TB_OK);
    float *data = tb_tensor_data(&t);
    for (int i = 0; i < 24; i++)
        data[i] = (float)i;
    TB_CHECK(tb_tensor_is_contiguous(&t) && tb_tensor_numel(&t) == 24);
    TB_CHECK(t.strides[0] == 12 && t.strides[1] == 4 && t.strides[2] == 1);

    tb_tensor tr;
    TB_CHECK(tb_tensor_transpose(&t, 0, 2, &tr) == TB_OK);
    TB_CHECK(tr.shape[0] == 4 && tr.shape[2] == 2 && !tb_tensor_is_contiguous(&tr));
    TB_CHECK(at(&tr, (int64_t[]){3, 1, 1}) == 12 + 4 + 3);
    TB_CHECK(atomic_load(&t.storage->refcount) == 2);

    tb_tensor sliced;
    TB_CHECK(tb_tensor_slice(&t, 2, 1, 4, 2, &sliced) == TB_OK);
    TB_CHECK(sliced.shape[2] == 2 && sliced.strides[2] == 2 && at(&sliced, (int64_t[]){1, 2, 1}) == 12 + 8 + 3);
    tb_tensor selected;
    TB_CHECK(tb_tensor_select(&t, 1, -1, &selected) == TB_OK);
    TB_CHECK(selected.ndim == 2 && at(&selected, (int64_t[]){1, 3}) == 12 + 8 + 3);
    tb_tensor_release(&selected);
    TB_CHECK(tb_tensor_select(&t, 1, 3, &selected) == TB_ERR_INVALID_ARGUMENT);

    tb_tensor permuted;
    TB_CHECK(tb_tensor_permute(&t, 3, (int64_t[]){2, 0, 1}, &permuted) == TB_OK);
    TB_CHECK(permuted.shape[0] == 4 && at(&permuted, (int64_t[]){2, 1, 0}) == 12 + 2);
    TB_CHECK(tb_tensor_permute(&t, 3, (int64_t[]){0, 0, 1}, &selected) == TB_ERR_INVALID_ARGUMENT);

    /* view: contiguous reshape works; a transposed one does not, reshape copies */
    tb_tensor viewed;
    TB_CHECK(tb_tensor_view(&t, 2, (int64_t[]){6, -1}, &viewed) == TB_OK && viewed.shape[1] == 4);
    tb_tensor_release(&viewed);
    TB_CHECK(tb_tensor_view(&tr, 1, (int64_t[]){24}, &viewed) == TB_ERR_UNSUPPORTED);
    /* merging dims that stay adjacent in memory works on a non-contiguous view */
    TB_CHECK(tb_tensor_view(&sliced, 3, (int64_t[]){2, 3, 2}, &viewed) == TB_OK);
    tb_tensor_release(&viewed);
    tb_tensor reshaped;
    TB_CHECK(tb_tensor_reshape(&tr, 1, (int64_t[]){24}, &reshaped) == TB_OK);
    TB_CHECK(tb_tensor_is_contiguous(&reshaped) && ((float *)tb_tensor_data(&reshaped))[1] == 12.0f);
    TB_CHECK(reshaped.storage != t.storage);
    TB_CHECK(tb_tensor_view(&t, 2, (int64_t[]){5, -1}, &viewed) == TB_ERR_SHAPE);

    /* expand and broadcast copies */
    tb_tensor row, expanded;
    TB_CHECK(tb_tensor_select(&t, 0, 0, &row) == TB_OK);
    tb_tensor row1;
    TB_CHECK(tb_tensor_select(&row, 0, 1, &row1) == TB_OK); /* [4] = 4..7 */
    TB_CHECK(tb_tensor_expand(&row1, 2, (int64_t[]){3, -1}, &expanded) == TB_OK);
    TB_CHECK(expanded.strides[0] == 0 && at(&expanded, (int64_t[]){2, 3}) == 7.0f);
    TB_CHECK(tb_tensor_expand(&row1, 2, (int64_t[]){3, 5}, &selected) == TB_ERR_SHAPE);
    tb_tensor dst;
    TB_CHECK(tb_tensor_empty(TB_F16, 2, (int64_t[]){3, 4}, 0, &dst) == TB_OK);
    TB_CHECK(tb_tensor_copy(&dst, &row1) == TB_OK);
    TB_CHECK(tb_f16_to_f32(((uint16_t *)tb_tensor_data(&dst))[9]) == 5.0f);

    /* unsqueeze/squeeze, zero-size and 0-dim */
    tb_tensor unsqueezed, squeezed;
    TB_CHECK(tb_tensor_unsqueeze(&t, -1, &unsqueezed) == TB_OK && unsqueezed.ndim == 4 && unsqueezed.shape[3] == 1);
    TB_CHECK(tb_tensor_squeeze(&unsqueezed, 0, true, &squeezed) == TB_OK && squeezed.ndim == 3);
    tb_tensor empty, scalar;
    TB_CHECK(tb_tensor_empty(TB_F32, 2, (int64_t[]){0, 5}, 0, &empty) == TB_OK && tb_tensor_numel(&empty) == 0);
    TB_CHECK(tb_tensor_empty(TB_F64, 0, NULL, 0, &scalar) == TB_OK && tb_tensor_numel(&scalar) == 1);
    TB_CHECK(tb_tensor_is_contiguous(&empty) && tb_tensor_is_contiguous(&scalar));
    TB_CHECK(tb_tensor_empty(TB_F32, 2, (int64_t[]){-1, 5}, 0, &selected) == TB_ERR_SHAPE);
    TB_CHECK(tb_tensor_empty(TB_F32, 2, (int64_t[]){INT64_MAX / 2, 5}, 0, &selected) == TB_ERR_SHAPE);
    TB_CHECK(tb_tensor_empty(TB_F32, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, &selected) == TB_ERR_SHAPE);

    /* a view outside its storage is refused */
    tb_tensor outside;
    TB_CHECK(tb_tensor_from_storage(t.storage, TB_F32, 1, (int64_t[]){25}, NULL, 0, &outside) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_tensor_from_storage(t.storage, TB_F32, 1, (int64_t[]){12}, (int64_t[]){2}, 2, &outside) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_tensor_from_storage(t.storage, TB_F32, 1, (int64_t[]){12}, (int64_t[]){2}, 0, &outside) == TB_OK);
    tb_tensor_release(&outside);

    /* read-only storage refuses writes through copy */
    tb_storage *readonly;
    float constant[4] = {1, 2, 3, 4};
    TB_CHECK(tb_storage_wrap(constant, sizeof constant, true, NULL, NULL, &readonly) == TB_OK);
    tb_tensor ro;
    TB_CHECK(tb_tensor_from_storage(readonly, TB_F32, 1, (int64_t[]){4}, NULL, 0, &ro) == TB_OK);
    tb_storage_release(readonly);
    TB_CHECK(tb_tensor_copy(&ro, &row1) == TB_ERR_READ_ONLY && constant[0] == 1.0f);

    int64_t bshape[TB_MAX_DIMS];
    int bndim;
    TB_CHECK(tb_broadcast_shapes(2, (int64_t[]){3, 1}, 1, (int64_t[]){4}, &bndim, bshape) == TB_OK && bndim == 2 &&
             bshape[0] == 3 && bshape[1] == 4);
    TB_CHECK(tb_broadcast_shapes(1, (int64_t[]){3}, 1, (int64_t[]){4}, &bndim, bshape) == TB_ERR_SHAPE);
    TB_CHECK(strstr(tb_error_message(), "[3]") != NULL);

    tb_tensor *all[] = {&tr, &sliced, &permuted, &reshaped, &row, &row1, &expanded, &dst, &unsqueezed, &squeezed,
                        &empty, &scalar, &ro, &t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tb_tensor_release(all[i]);
}

static void test_isa(void) {
    TB_CHECK(tb_isa_supported(TB_ISA_SCALAR));
    TB_CHECK(tb_isa_set(TB_ISA_SCALAR) == TB_OK && tb_isa_active() == TB_ISA_SCALAR);
    TB_CHECK(tb_isa_set(tb_isa_best()) == TB_OK);
#if defined(__x86_64__)
    TB_CHECK(tb_isa_set(TB_ISA_NEON) == TB_ERR_UNSUPPORTED);
    TB_CHECK(strstr(tb_error_message(), "not supported") != NULL);
#endif
    tb_isa isa;
    TB_CHECK(tb_isa_from_name("avx9000", &isa) == TB_ERR_INVALID_ARGUMENT);
    printf("cpu: %s (%s), best ISA %s\n", tb_cpu_get_features()->brand, tb_cpu_get_features()->vendor,
           tb_isa_name(tb_isa_best()));
}

/* The bandwidth probe's wide-load read sweeps agree with the scalar sum, and the probes run. */
static void test_probes(void) {
    float data[1000];
    for (int i = 0; i < 1000; i++)
        data[i] = (float)(i % 7) - 3.0f;
    int sizes[] = {0, 1, 15, 16, 63, 64, 65, 1000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        float expected = tb_read_sum_scalar(data, sizes[s]);
#ifdef TB_HAVE_X86
        if (tb_isa_supported(TB_ISA_AVX2))
            TB_CHECK_MSG(fabsf(tb_read_sum_avx2(data, sizes[s]) - expected) < 1e-3f, "avx2 read sum n=%d", sizes[s]);
        if (tb_isa_supported(TB_ISA_AVX512))
            TB_CHECK_MSG(fabsf(tb_read_sum_avx512(data, sizes[s]) - expected) < 1e-3f, "avx512 read sum n=%d", sizes[s]);
#endif
    }
    double gbps = 0, gflops = 0;
    TB_CHECK(tb_probe_read_bandwidth(1 << 20, 1, &gbps) == TB_OK && gbps > 0);
    TB_CHECK(tb_probe_peak_gflops(TB_ISA_SCALAR, 0.01, &gflops) == TB_OK && gflops > 0);
    TB_CHECK(tb_probe_peak_gflops(TB_ISA_COUNT, 0.01, &gflops) == TB_ERR_UNSUPPORTED);
}

/* Which storages may cache derived data: torchburn's own, and wrapped memory whose owner versions it;
 * not other wrapped memory, and none once exported (its cache is dropped then). */
static int frees;
static void count_free(tb_storage_derived *self) {
    (void)self;
    frees++;
}

static void test_cacheable_storages(void) {
    static float memory[16];
    tb_storage *own = NULL, *wrapped = NULL, *versioned = NULL;
    TB_CHECK(tb_storage_new(64, 0, &own) == TB_OK);
    TB_CHECK(tb_storage_wrap(memory, sizeof memory, false, NULL, NULL, &wrapped) == TB_OK);
    TB_CHECK(tb_storage_wrap_versioned(memory, sizeof memory, NULL, NULL, &versioned) == TB_OK);
    TB_CHECK(tb_storage_cacheable(own) && !tb_storage_cacheable(wrapped) && tb_storage_cacheable(versioned));
    TB_CHECK(versioned->read_only && versioned->version == 0);
    static tb_storage_derived derived = {.free = count_free};
    tb_storage_derived_put(wrapped, &derived); /* not cacheable: freed at once */
    TB_CHECK(frees == 1 && tb_storage_derived_take(wrapped) == NULL);
    tb_storage_derived_put(versioned, &derived); /* kept */
    TB_CHECK(frees == 1);
    tb_storage_mark_exported(versioned); /* dropped, and no caching from now on */
    TB_CHECK(frees == 2 && !tb_storage_cacheable(versioned));
    tb_storage_derived_put(versioned, &derived);
    TB_CHECK(frees == 3);
    tb_storage_release(own);
    tb_storage_release(wrapped);
    tb_storage_release(versioned);
}

/* Copies of rows long enough to be cut into pieces shared by threads (about 64 KiB of output each):
 * f32 -> bf16 / f16 / f64 and back, a strided source, a row length that is no multiple of the piece,
 * several thread counts; every element against the scalar conversion, nothing past the end written. */
static void test_long_row_copies(void) {
    const int64_t n = 200003; /* > 2 pieces at every element size, with a short last piece */
    tb_tensor source, strided_source;
    TB_CHECK(tb_tensor_empty(TB_F32, 1, (int64_t[]){2 * n}, 0, &source) == TB_OK);
    float *x = tb_tensor_data(&source);
    for (int64_t i = 0; i < 2 * n; i++)
        x[i] = (float)(i % 1999) * 0.37f - 300.0f + (float)i * 1e-4f;
    TB_CHECK(tb_tensor_from_storage(source.storage, TB_F32, 1, (int64_t[]){n}, (int64_t[]){2}, 1, &strided_source) ==
             TB_OK);
    static const tb_dtype targets[] = {TB_BF16, TB_F16, TB_F64};
    for (int threads = 1; threads <= 3; threads += 2) {
        TB_CHECK(tb_set_num_threads(threads) == TB_OK);
        for (int t = 0; t < 3; t++)
            for (int strided = 0; strided < 2; strided++) {
                tb_tensor converted, back;
                const tb_tensor *from = strided ? &strided_source : &source;
                int64_t count = strided ? n : 2 * n;
                TB_CHECK(tb_tensor_contiguous(from, targets[t], &converted) == TB_OK);
                TB_CHECK(tb_tensor_contiguous(&converted, TB_F32, &back) == TB_OK);
                const float *y = tb_tensor_data(&back);
                int64_t bad = 0;
                for (int64_t i = 0; i < count; i++) {
                    float v = x[strided ? 2 * i + 1 : i];
                    float expected = targets[t] == TB_BF16  ? tb_bf16_to_f32(tb_f32_to_bf16(v))
                                     : targets[t] == TB_F16 ? tb_f16_to_f32(tb_f32_to_f16(v))
                                                            : v;
                    bad += memcmp(&y[i], &expected, sizeof expected) != 0;
                }
                TB_CHECK_MSG(bad == 0, "%lld wrong elements (%s, strided %d, %d threads)", (long long)bad,
                             tb_dtype_name(targets[t]), strided, threads);
                TB_CHECK(tb_tensor_numel(&back) == count);
                tb_tensor_release(&converted);
                tb_tensor_release(&back);
            }
    }
    TB_CHECK(tb_set_num_threads(tb_physical_cores()) == TB_OK);
    tb_tensor_release(&strided_source);
    tb_tensor_release(&source);
}

int main(void) {
    test_probes();
    test_cacheable_storages();
    test_half_conversions();
    test_allocator();
    test_views();
    test_long_row_copies();
    test_isa();
    return tb_test_finish("test_core");
}
