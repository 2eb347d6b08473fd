/* Selection of the elementwise kernel table per ISA: each table is completed once (NULL entries taken
 * from the scalar reference) and then handed out read-only. */
#include <pthread.h>

#include "kernels/elementwise.h"

static tb_elementwise_kernels complete_tables[TB_ISA_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* dst starts as a copy of the reference; every non-NULL entry of src replaces it */
static void merge_table(tb_elementwise_kernels *dst, const tb_elementwise_kernels *src) {
    if (src->isa_name)
        dst->isa_name = src->isa_name;
    for (int i = 0; i < TB_UNARY_COUNT; i++)
        if (src->unary[i])
            dst->unary[i] = src->unary[i];
    for (int i = 0; i < TB_BINARY_COUNT; i++)
        if (src->binary[i])
            dst->binary[i] = src->binary[i];
    for (int i = 0; i < TB_COMPARE_COUNT; i++)
        if (src->compare[i])
            dst->compare[i] = src->compare[i];
    for (int i = 0; i < TB_REDUCE_COUNT; i++)
        if (src->reduce[i])
            dst->reduce[i] = src->reduce[i];
    if (src->where)
        dst->where = src->where;
    if (src->argmax)
        dst->argmax = src->argmax;
    if (src->argmin)
        dst->argmin = src->argmin;
    if (src->var)
        dst->var = src->var;
    if (src->softmax)
        dst->softmax = src->softmax;
    if (src->layer_norm)
        dst->layer_norm = src->layer_norm;
    if (src->rms_norm)
        dst->rms_norm = src->rms_norm;
    if (src->rope)
        dst->rope = src->rope;
    if (src->f16_to_f32)
        dst->f16_to_f32 = src->f16_to_f32;
    if (src->bf16_to_f32)
        dst->bf16_to_f32 = src->bf16_to_f32;
    if (src->f32_to_f16)
        dst->f32_to_f16 = src->f32_to_f16;
    if (src->f32_to_bf16)
        dst->f32_to_bf16 = src->f32_to_bf16;
}

static void build_tables(void) {
    for (int isa = 0; isa < TB_ISA_COUNT; isa++)
        complete_tables[isa] = tb_elementwise_kernels_ref;
#ifdef TB_HAVE_X86
    /* a level the CPU lacks keeps the reference, so a forced or mistaken lookup can never fault */
    if (tb_isa_supported(TB_ISA_AVX2))
        merge_table(&complete_tables[TB_ISA_AVX2], &tb_elementwise_kernels_avx2);
    if (tb_isa_supported(TB_ISA_AVX512))
        merge_table(&complete_tables[TB_ISA_AVX512], &tb_elementwise_kernels_avx512);
#endif
}

const tb_elementwise_kernels *tb_elementwise_kernels_for(tb_isa isa) {
    pthread_once(&tables_once, build_tables);
    if ((int)isa < 0 || isa >= TB_ISA_COUNT)
        return &complete_tables[TB_ISA_SCALAR];
    return &complete_tables[isa];
}

const tb_elementwise_kernels *tb_elementwise_kernels_active(void) { return tb_elementwise_kernels_for(tb_isa_active()); }
