/* A compiled graph translated for an engine (engine_graph.c builds it, engine_program.c runs it): one
 * buffer per value, ops whose operands are buffer indices, the host-side fills and input slices. */
#ifndef TORCHBURN_ENGINE_PROGRAM_H
#define TORCHBURN_ENGINE_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>

#include "torchburn/engine.h"

typedef struct program_fill {
    int buffer;
    float value;
} program_fill;

/* bytes [offset, offset + bytes) of graph input `input` uploaded into `buffer` at each run: the parts
 * of a weight split to fit maxStorageBufferRange */
typedef struct program_slice {
    int buffer, input;
    size_t offset, bytes;
} program_slice;

/* an op whose operands are buffer indices (-1: absent), resolved to buffers at run time */
typedef struct program_op {
    tb_engine_op op;
    int a, b, c, y, d;
    tb_engine_fused chain; /* fused: the chain op.fused points at when the program runs */
} program_op;

struct tb_engine_program {
    const tb_engine *engine;
    int nbuffers;
    size_t *buffer_bytes;
    int ninputs, noutputs;
    int *input_buffers, *output_buffers;
    size_t *input_bytes, *output_bytes;
    int nops, nfills, nslices;
    program_op *ops;
    program_fill *fills;
    program_slice *slices;
    bool *buffer_unused; /* no op or output reads it (an input that only split parts use): never made */
};

/* Joins each fused op with the fused op right after it when that one is the only reader of its
 * result, reads it elementwise and covers the same n: a chain becomes one dispatch. */
tb_status tb_engine_program_fuse_chains(tb_engine_program *p);

#endif
