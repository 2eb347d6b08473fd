/* The autograd node kinds of turbo_torch's nn bindings (eager_nn*.c): one numbering for the node's
 * `op`, so that tt_nn_backward can route each node to the file that made it. */
#ifndef TB_PYEXT_EAGER_NN_H
#define TB_PYEXT_EAGER_NN_H

#include "eager.h"

typedef enum tt_nn_op {
    TT_NN_CONV2D,
    TT_NN_MAX_POOL2D,
    TT_NN_AVG_POOL2D,
    TT_NN_ADAPTIVE_AVG_POOL2D,
    TT_NN_LINEAR,
    TT_NN_CONV_TRANSPOSE2D,
    TT_NN_RESIZE,
    TT_NN_OP_COUNT
} tt_nn_op;

/* eager_nn_resize.c: backward of _tt_interpolate's node; registers _tt_interpolate. */
tb_status tt_nn_resize_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads);
int tt_register_nn_resize(PyObject *module);

#endif
