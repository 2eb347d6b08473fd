/* float32 SGD of the optimizer step (optim.c): the constants of one update and the per-ISA bodies.
 * The operations and their float32 roundings are PyTorch's CPU SGD (see optim.c, sgd_f32_range). */
#ifndef TORCHBURN_EAGER_OPTIM_SGD_H
#define TORCHBURN_EAGER_OPTIM_SGD_H

#include <stdbool.h>
#include <stdint.h>

/* One SGD update's options as float32 values, as PyTorch rounds its scalar alphas. */
typedef struct tb_sgd_f32 {
    float neg_lr, decay, momentum, keep; /* -lr, weight_decay, momentum, 1 - dampening */
    bool maximize, has_decay, has_momentum, nesterov, fresh; /* fresh: the momentum buffer takes d */
} tb_sgd_f32;

#ifdef TB_HAVE_X86
/* Updates p[0, n) (and buf[0, n) when k->has_momentum; buf may be NULL otherwise) with gradient g:
 * the AVX2 + FMA body (src/eager/x86_avx2/optim_sgd_avx2.c); call only when the CPU has AVX2 + FMA.
 * Bit-identical to the scalar body of optim.c. */
void tb_sgd_f32_avx2(const tb_sgd_f32 *k, int64_t n, float *p, const float *g, float *buf);
#endif

#endif
