/* Shared pieces of the engines: the buffer header every engine's buffers start with, and the
 * engine-independent validation of an op against the buffers it names. */
#ifndef TORCHBURN_ENGINE_INTERNAL_H
#define TORCHBURN_ENGINE_INTERNAL_H

#include "torchburn/engine.h"

struct tb_engine_buffer {
    const tb_engine *engine; /* the owner: buffers never cross engines */
    size_t bytes;
    void *host;              /* CPU engines: the memory; vulkan: the persistent host mapping */
    void *backend;           /* engine-private (vulkan: its buffer record) */
};

/* Checks what every engine needs: known kind and code, positive sizes, the buffers present and large
 * enough, all owned by `engine`. Returns TB_ERR_INVALID_ARGUMENT / TB_ERR_SHAPE with a message. */
tb_status tb_engine_op_validate(const tb_engine *engine, const tb_engine_op *op);

/* Bytes each operand of `op` spans (0 for an absent one). */
void tb_engine_op_extents(const tb_engine_op *op, size_t *a_bytes, size_t *b_bytes, size_t *c_bytes, size_t *y_bytes);

/* Floats between rows of a (q)matmul's y (y_stride, or n when 0). */
int64_t tb_engine_op_y_stride(const tb_engine_op *op);

/* Bytes operand d spans (qmatmul scales, llm_rope norm weights; 0 otherwise). */
size_t tb_engine_op_d_extent(const tb_engine_op *op);

/* Op kinds the CPU engines run (the LLM ops after them are GPU-only). */
enum { TB_ENGINE_OP_CPU_KINDS = TB_ENGINE_OP_QMATMUL };

#endif
