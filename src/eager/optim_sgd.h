/* float32 SGD of the optimizer step (optim.c): the constants of one update and the per-ISA bodies.
 * The operations and their float32 roundings are PyTorch's CPU SGD (see optim.c, sgd_f32_range). */
#ifndef TORCHBURN_EAGER_OPTIM_SGD_H
#define TORCHBURN_EAGER_OPTIM_SGD_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* One SGD update's options as float32 values, as PyTorch rounds its scalar alphas. */
typedef struct tb_sgd_f32 {
    float neg_lr, decay, momentum, keep; /* -lr, weight_decay, momentum, 1 - dampening */
    bool maximize, has_decay, has_momentum, nesterov, fresh; /* fresh: the momentum buffer takes d */
} tb_sgd_f32;

/* The scalar body, the reference every vector body must equal: updates p[0, n) (and buf[0, n) when
 * k->has_momentum) with gradient g. */
static inline void tb_sgd_f32_scalar(const tb_sgd_f32 *k, int64_t n, float *restrict p, const float *restrict g,
                                     float *restrict buf) {
    for (int64_t i = 0; i < n; i++) {
        float d = k->maximize ? -g[i] : g[i];
        if (k->has_decay) /* not g + 0 * p: an infinite parameter would make that NaN */
            d = fmaf(p[i], k->decay, d);
        if (k->has_momentum) {
            float b = k->fresh ? d : fmaf(d, k->keep, buf[i] * k->momentum);
            buf[i] = b;
            d = k->nesterov ? fmaf(b, k->momentum, d) : b;
        }
        p[i] = fmaf(d, k->neg_lr, p[i]);
    }
}

#ifdef TB_HAVE_X86
/* Updates p[0, n) (and buf[0, n) when k->has_momentum; buf may be NULL otherwise) with gradient g:
 * the AVX2 + FMA body (src/eager/x86_avx2/optim_sgd_avx2.c); call only when the CPU has AVX2 + FMA.
 * Bit-identical to the scalar body of optim.c. */
void tb_sgd_f32_avx2(const tb_sgd_f32 *k, int64_t n, float *p, const float *g, float *buf);
#endif

#endif
