/* Optimizer steps of turbo_torch.optim: one call updates every parameter of a param group in place
 * ("foreach"), with PyTorch's single-tensor update formulas evaluated in double per element and
 * stored in each tensor's dtype (float32 or float64, contiguous). */
#ifndef TORCHBURN_EAGER_OPTIM_H
#define TORCHBURN_EAGER_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "torchburn/status.h"
#include "torchburn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tb_optim_kind {
    TB_OPTIM_SGD,
    TB_OPTIM_ADAM,    /* Adam and AdamW (decoupled_weight_decay) */
    TB_OPTIM_RMSPROP,
    TB_OPTIM_ADAGRAD,
    TB_OPTIM_COUNT
} tb_optim_kind;

/* The hyperparameters of one param group; each kind reads only its own. */
typedef struct tb_optim_options {
    double lr, weight_decay;
    double momentum, dampening; /* SGD; RMSprop reads momentum */
    double beta1, beta2;        /* Adam */
    double eps;                 /* Adam, RMSprop, Adagrad */
    double alpha;               /* RMSprop */
    double lr_decay;            /* Adagrad */
    bool nesterov, maximize, amsgrad, decoupled_weight_decay, centered;
} tb_optim_options;

enum { TB_OPTIM_MAX_STATE = 3 };

/* One parameter's tensors, all of the parameter's dtype and shape. state[] by kind (NULL where the
 * options do not use it):
 *   SGD      [0] momentum buffer (momentum != 0); `fresh`: the buffer is new and takes the gradient
 *   Adam     [0] exp_avg, [1] exp_avg_sq, [2] max_exp_avg_sq (amsgrad)
 *   RMSprop  [0] square_avg, [1] momentum buffer (momentum > 0), [2] grad_avg (centered)
 *   Adagrad  [0] sum
 * step: a 0-dim float32/float64 counter the step increments before using it (NULL for SGD). */
typedef struct tb_optim_slot {
    tb_tensor *param;
    const tb_tensor *grad;
    tb_tensor *state[TB_OPTIM_MAX_STATE];
    tb_tensor *step;
    bool fresh;
} tb_optim_slot;

/* Runs one step of `kind` over count slots. Every slot is checked before any tensor is written, so
 * an error (TB_ERR_DTYPE, TB_ERR_SHAPE, TB_ERR_INVALID_ARGUMENT, TB_ERR_READ_ONLY) leaves all
 * tensors unchanged. Bumps the storage version of every tensor it writes. */
TB_API TB_NODISCARD tb_status tb_optim_step(tb_optim_kind kind, const tb_optim_options *options, tb_optim_slot *slots,
                                            int64_t count);

#ifdef __cplusplus
}
#endif

#endif
