/* Shared internals of the eager layer: compute domains and operand staging. */
#ifndef TORCHBURN_EAGER_INTERNAL_H
#define TORCHBURN_EAGER_INTERNAL_H

#include "torchburn/eager.h"

/* The array type a dtype computes in: float (f32, f16, bf16), double (f64), or int64 (integers, bool). */
typedef enum tb_domain { TB_DOMAIN_F32, TB_DOMAIN_F64, TB_DOMAIN_I64 } tb_domain;

static inline tb_domain tb_domain_of(tb_dtype dtype) {
    switch (dtype) {
    case TB_F32: case TB_F16: case TB_BF16: return TB_DOMAIN_F32;
    case TB_F64: return TB_DOMAIN_F64;
    default: return TB_DOMAIN_I64;
    }
}
static inline tb_dtype tb_domain_dtype(tb_domain domain) {
    return domain == TB_DOMAIN_F32 ? TB_F32 : domain == TB_DOMAIN_F64 ? TB_F64 : TB_I64;
}

/* An operand staged as a contiguous array of the domain type, broadcast to the output: step 1 over
 * numel elements, or step 0 for a single value. `owned` holds a temporary when one was needed. */
typedef struct tb_staged {
    const void *data;
    int64_t step;
    tb_tensor owned;
    union { float f32; double f64; int64_t i64; } scalar;
} tb_staged;

tb_status tb_eager_stage(tb_eager_operand operand, tb_domain domain, int ndim, const int64_t *shape, tb_staged *out);
void tb_eager_unstage(tb_staged *staged);

/* Prepares `out` for a result of (dtype, shape): allocates it when zeroed, else checks its shape.
 * *direct is set to a pointer the kernel may write into (out's data when it is contiguous and of
 * write_dtype), or NULL when the caller must write a temporary and copy it into out. */
tb_status tb_eager_prepare_out(tb_tensor *out, tb_dtype dtype, int ndim, const int64_t *shape, tb_dtype write_dtype,
                               void **direct);

/* Copies src into out (dtype conversion) and releases src. */
tb_status tb_eager_finish_out(tb_tensor *out, tb_tensor *src);

/* Whether grain-sized chunks of n elements are worth threads. */
enum { TB_EAGER_PARALLEL_MIN = 1 << 16 };

#endif
