/* Compiled graphs on an engine: translates a tb_graph (as the compile backend built it) into a
 * sequence of engine ops over one buffer per value, and runs it as one batch (one GPU submission):
 * upload the inputs, run, download the outputs. A graph is taken whole or not at all; the first node
 * the engine does not take is named in the error, and the caller runs the CPU plan instead.
 *
 * Taken (f32, contiguous, offset 0): INPUT, FULL, VIEW and COPY of a contiguous value (aliases),
 * PERMUTE (an alias whose only use may be a 2-D matmul B in nn.Linear's [N, K] layout), UNARY, BINARY
 * and BINARY_SCALAR of the kernel-table ops as one-step fused ops (each operand broadcast over one
 * block of the output's dims; scalars on either side), REDUCE (sum, max, min, mean) over adjacent
 * dims, MATMUL with a 2-D B, bias, activation and residual, SOFTMAX over the last dim, LAYER_NORM
 * (statistics unused) and RMS_NORM without epilogues. Dead nodes are ignored. After lowering,
 * tb_engine_program_fuse_chains (engine_program.c) joins each fused op with the next when that is the only reader of its result: a chain
 * becomes one dispatch.
 *
 * 16-bit values (float16, bfloat16), where the engine has 16-bit storage (storage_16bit): a 16-bit graph
 * input is uploaded as its 16-bit words and widened (exactly) into an f32 buffer where an op reads it;
 * every op computes in f32 as for float32, and each 16-bit result is rounded in place through its format
 * (round to nearest even, a convert16 op), so the f32 buffer holds exactly what a 16-bit tensor would:
 * PyTorch's CPU kernels compute in float and round every op's result the same way. A matmul rounds after
 * the product (+ bias), after its activation and after its residual, as the separate ATen ops would.
 * A COPY between dtypes (to-dtype) is a rounding into the target format (or an alias, to float32). 16-bit
 * graph outputs are narrowed into 16-bit buffers and downloaded as such. Without 16-bit storage such
 * graphs are refused (they run on native_cpu).
 *
 * Device limits: a matmul whose [N, K] weight (a graph input, as nn.Linear's parameters are) exceeds
 * maxStorageBufferRange is split by rows into parts that fit, each its own buffer filled from a slice
 * of the input, one matmul op per part writing its columns of y; an input read only by such parts is
 * never made into a buffer. Any other operand over the limit refuses the graph, naming the sizes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/engine_program.h"
#include "graph/graph_internal.h"

typedef struct builder {
    const tb_graph *graph;
    tb_engine_program *p;
    int *value_buffer; /* per value: its f32 buffer, or -1 */
    int *value_buffer16; /* per value: a buffer of its 16-bit words (inputs, outputs), or -1 */
    int *words_format; /* per value with words: their format (a float32 copy of a 16-bit input keeps its
                        * source's words until an op needs f32: a matmul B reads them as they are) */
    bool storage16;    /* the engine has 16-bit storage: 16-bit values are taken */
    bool *live;
    /* per value: how its elements lie in its buffer (shape as the graph's, strides of the data), and the
     * element they start at. Views alias their input's buffer with a re-inferred layout; an op that
     * needs a contiguous operand materializes it first (a strided_copy op) */
    tb_value_info *layout;
    int64_t *offset;
    int op_capacity, fill_capacity;
    uint64_t buffer_range; /* the engine's maxStorageBufferRange (0: no limit) */
} builder;

static bool contiguous(const tb_value_info *info) {
    int64_t expected = 1;
    for (int d = info->ndim - 1; d >= 0; d--) {
        if (info->shape[d] != 1 && info->strides[d] != expected)
            return false;
        expected *= info->shape[d];
    }
    return true;
}

/* A permutation of a contiguous layout: its elements fill exactly numel consecutive slots (a transposed
 * activation handed to a region). */
static bool dense_permuted(const tb_value_info *info) {
    int order[TB_MAX_DIMS], count = 0;
    for (int d = 0; d < info->ndim; d++)
        if (info->shape[d] != 1)
            order[count++] = d;
    for (int i = 1; i < count; i++) /* by stride, innermost first */
        for (int j = i; j > 0 && info->strides[order[j]] < info->strides[order[j - 1]]; j--) {
            const int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t expected = 1;
    for (int i = 0; i < count; i++) {
        if (info->strides[order[i]] != expected)
            return false;
        expected *= info->shape[order[i]];
    }
    return true;
}

static int64_t numel(const tb_value_info *info) {
    int64_t n = 1;
    for (int d = 0; d < info->ndim; d++)
        n *= info->shape[d];
    return n;
}

static const tb_value_info *info_of(const builder *b, int value) { return &b->graph->values[value].info; }
static const tb_value_info *layout_of(const builder *b, int value) { return &b->layout[value]; }

/* The value's data is contiguous from the start of its buffer. */
static bool dense(const builder *b, int value) { return contiguous(&b->layout[value]) && b->offset[value] == 0; }

static void set_contiguous_layout(builder *b, int value) {
    const tb_value_info *info = info_of(b, value);
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, info->shape, sizeof shape);
    tb_info_contiguous(&b->layout[value], info->dtype, info->ndim, shape);
    b->offset[value] = 0;
}

static tb_status refuse(const builder *b, int node, const char *why) {
    const tb_node *n = &b->graph->nodes[node];
    return tb_error_set(TB_ERR_UNSUPPORTED, "engine %s does not take node %d (%s%s%s): %s", b->p->engine->name, node,
                        tb_graph_op_name(n->op), n->label ? " " : "", n->label ? n->label : "", why);
}

static tb_status new_buffer(builder *b, int value) {
    size_t *grown = realloc(b->p->buffer_bytes, sizeof *grown * (size_t)(b->p->nbuffers + 1));
    if (!grown)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    b->p->buffer_bytes = grown;
    grown[b->p->nbuffers] = (size_t)numel(info_of(b, value)) * sizeof(float);
    b->value_buffer[value] = b->p->nbuffers++;
    set_contiguous_layout(b, value);
    return TB_OK;
}

/* 0 for float32, the 16-bit format (TB_ENGINE_WEIGHT_BF16/F16) of a 16-bit dtype, -1 for others. */
static int format_of(tb_dtype dtype) {
    switch (dtype) {
    case TB_F32: return 0;
    case TB_BF16: return TB_ENGINE_WEIGHT_BF16;
    case TB_F16: return TB_ENGINE_WEIGHT_F16;
    default: return -1;
    }
}

/* A buffer of the 16-bit words of `value`. */
static tb_status new_buffer16(builder *b, int value) {
    size_t *grown = realloc(b->p->buffer_bytes, sizeof *grown * (size_t)(b->p->nbuffers + 1));
    if (!grown)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    b->p->buffer_bytes = grown;
    grown[b->p->nbuffers] = (size_t)numel(info_of(b, value)) * 2;
    b->value_buffer16[value] = b->p->nbuffers++;
    b->words_format[value] = format_of(info_of(b, value)->dtype);
    set_contiguous_layout(b, value);
    return TB_OK;
}

/* Why a value of this dtype is not taken, or NULL when it is. */
static const char *dtype_refusal(const builder *b, tb_dtype dtype) {
    const int format = format_of(dtype);
    if (format < 0)
        return "only float32, float16 and bfloat16 values are taken";
    if (format > 0 && !b->storage16)
        return "16-bit values need storageBuffer16BitAccess, which this device lacks (or TORCHBURN_VULKAN_NO_16BIT=1)";
    return NULL;
}

/* A buffer of `bytes` filled from graph input `input` at `offset` on each run. */
static tb_status slice_buffer(builder *b, int input, size_t offset, size_t bytes, int *out) {
    size_t *grown = realloc(b->p->buffer_bytes, sizeof *grown * (size_t)(b->p->nbuffers + 1));
    if (!grown)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    b->p->buffer_bytes = grown;
    grown[b->p->nbuffers] = bytes;
    *out = b->p->nbuffers++;
    program_slice *slices = realloc(b->p->slices, sizeof *slices * (size_t)(b->p->nslices + 1));
    if (!slices)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    b->p->slices = slices;
    slices[b->p->nslices++] = (program_slice){.buffer = *out, .input = input, .offset = offset, .bytes = bytes};
    return TB_OK;
}

/* The graph input whose buffer is `buffer`, or -1. */
static int input_of_buffer(const builder *b, int buffer) {
    for (int i = 0; i < b->p->ninputs; i++)
        if (b->p->input_buffers[i] == buffer)
            return i;
    return -1;
}

static tb_status add_op(builder *b, const tb_engine_op *op, int a, int bb, int c, int y);

/* The f32 buffer of `value`, made on first use for a 16-bit value that has only its words (an input):
 * an exact widening op. */
static tb_status ensure_f32(builder *b, int value) {
    if (b->value_buffer[value] >= 0)
        return TB_OK;
    const int words = b->value_buffer16[value];
    if (words < 0)
        return tb_error_set(TB_ERR_INTERNAL, "engine program: value %d has no buffer", value);
    const tb_value_info layout = b->layout[value]; /* widening keeps the words' memory order */
    const int64_t offset = b->offset[value];
    TB_TRY(new_buffer(b, value));
    b->layout[value] = layout;
    b->offset[value] = offset;
    tb_engine_op widen = {.kind = TB_ENGINE_OP_CONVERT16, .code = 0, .format = b->words_format[value],
                          .n = numel(info_of(b, value))};
    return add_op(b, &widen, words, -1, -1, b->value_buffer[value]);
}

/* A 16-bit result computed into its f32 buffer: rounded in place through its format (no-op for f32). */
static tb_status round_result(builder *b, int value) {
    const int format = format_of(info_of(b, value)->dtype);
    if (format <= 0)
        return TB_OK;
    tb_engine_op round = {.kind = TB_ENGINE_OP_CONVERT16, .code = 2, .format = format, .n = numel(info_of(b, value))};
    return add_op(b, &round, b->value_buffer[value], -1, -1, b->value_buffer[value]);
}

static tb_status add_op(builder *b, const tb_engine_op *op, int a, int bb, int c, int y) {
    if (b->p->nops == b->op_capacity) {
        int capacity = b->op_capacity ? 2 * b->op_capacity : 16;
        program_op *grown = realloc(b->p->ops, sizeof *grown * (size_t)capacity);
        if (!grown)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
        b->p->ops = grown;
        b->op_capacity = capacity;
    }
    b->p->ops[b->p->nops++] = (program_op){.op = *op, .a = a, .b = bb, .c = c, .y = y, .d = -1};
    return TB_OK;
}

/* A fused op running `chain` over buffers inputs[0 .. chain->ninputs) (a, b, c, d) into y. */
static tb_status add_fused(builder *b, const tb_engine_fused *chain, int64_t n, const int *inputs, int y) {
    const int k = chain->ninputs;
    tb_engine_op op = {.kind = TB_ENGINE_OP_FUSED, .n = n};
    TB_TRY(add_op(b, &op, inputs[0], k > 1 ? inputs[1] : -1, k > 2 ? inputs[2] : -1, y));
    b->p->ops[b->p->nops - 1].d = k > 3 ? inputs[3] : -1;
    b->p->ops[b->p->nops - 1].chain = *chain;
    return TB_OK;
}

/* A strided_copy reading `value` as it lies (size-1 dims dropped) into a contiguous y. Refuses more
 * than TB_ENGINE_STRIDED_DIMS other dims. */
static tb_status strided_read(const builder *b, int node, int value, tb_engine_op *copy) {
    const tb_value_info *l = &b->layout[value];
    *copy = (tb_engine_op){.kind = TB_ENGINE_OP_STRIDED_COPY, .n = numel(l), .a_offset = b->offset[value]};
    for (int d = 0; d < l->ndim; d++) {
        if (l->shape[d] == 1)
            continue;
        if (copy->strided.ndim == TB_ENGINE_STRIDED_DIMS)
            return refuse(b, node, "a strided view of more than 5 dims (other than 1)");
        copy->strided.shape[copy->strided.ndim] = l->shape[d];
        copy->strided.strides[copy->strided.ndim++] = l->strides[d];
    }
    return TB_OK;
}

/* Makes `value` dense (contiguous from offset 0): a strided_copy of its f32 data into a new buffer,
 * which later readers share. Size-1 dims are dropped; more than TB_ENGINE_STRIDED_DIMS others refuse. */
static tb_status materialize(builder *b, int node, int value) {
    if (dense(b, value))
        return TB_OK;
    if (b->value_buffer[value] < 0)
        return refuse(b, node, "a strided view of 16-bit words");
    tb_engine_op copy;
    TB_TRY(strided_read(b, node, value, &copy));
    const int source = b->value_buffer[value];
    TB_TRY(new_buffer(b, value));
    b->value_buffer16[value] = -1; /* the words (a view of them) no longer describe the value's buffer */
    return add_op(b, &copy, source, -1, -1, b->value_buffer[value]);
}

/* The value `out` as an alias of `in`'s buffers with the given layout and offset. */
static void alias_value(builder *b, int out, int in, const tb_value_info *layout, int64_t offset) {
    b->value_buffer[out] = b->value_buffer[in];
    b->value_buffer16[out] = b->value_buffer16[in];
    b->words_format[out] = b->words_format[in];
    b->layout[out] = *layout;
    b->offset[out] = offset;
}

/* VIEW, PERMUTE, EXPAND, SLICE: an alias of the input's buffer, the layout re-inferred from the
 * input's actual one (as the CPU planner does); a VIEW the layout cannot express materializes first. */
static tb_status lower_view(builder *b, int index, const tb_node *n) {
    const int in = n->inputs[0], out = n->first_output;
    const tb_value_info *want = info_of(b, out);
    const bool same_span = n->op == TB_OP_PERMUTE || n->op == TB_OP_VIEW; /* covers the input's elements exactly */
    if (!same_span || !dense(b, in)) /* offsets and strides address f32 data: widen 16-bit words first */
        TB_TRY(ensure_f32(b, in));
    tb_value_info layout;
    int64_t offset = b->offset[in];
    if (n->op == TB_OP_VIEW) {
        int64_t strides[TB_MAX_DIMS];
        if (!tb_view_strides(&b->layout[in], want->ndim, want->shape, strides)) {
            TB_TRY(ensure_f32(b, in));
            TB_TRY(materialize(b, index, in));
            offset = 0;
            TB_TRY(tb_view_strides(&b->layout[in], want->ndim, want->shape, strides) ? TB_OK
                   : refuse(b, index, "a view of a contiguous value failed"));
        }
        layout = *want;
        memcpy(layout.strides, strides, sizeof strides);
    } else {
        const tb_value_info *inputs[1] = {&b->layout[in]};
        TB_TRY(tb_graph_op_infer(n->op)(&n->params, 1, inputs, &layout));
        if (n->op == TB_OP_SLICE) {
            int dim;
            int64_t start, end;
            TB_TRY(tb_normalize_dim(n->params.slice.dim, b->layout[in].ndim, &dim));
            tb_slice_bounds(&n->params.slice, b->layout[in].shape[dim], &start, &end);
            offset += start * b->layout[in].strides[dim];
        }
    }
    alias_value(b, out, in, &layout, offset);
    return TB_OK;
}

/* A constant buffer of `count` copies of `value` (filled on the host at each run). */
static tb_status constant_buffer(builder *b, float value, int64_t count, int *out) {
    size_t *grown = realloc(b->p->buffer_bytes, sizeof *grown * (size_t)(b->p->nbuffers + 1));
    if (!grown)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    b->p->buffer_bytes = grown;
    grown[b->p->nbuffers] = (size_t)count * sizeof(float);
    *out = b->p->nbuffers++;
    if (b->p->nfills == b->fill_capacity) {
        int capacity = b->fill_capacity ? 2 * b->fill_capacity : 8;
        program_fill *fills = realloc(b->p->fills, sizeof *fills * (size_t)capacity);
        if (!fills)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
        b->p->fills = fills;
        b->fill_capacity = capacity;
    }
    b->p->fills[b->p->nfills++] = (program_fill){.buffer = *out, .value = value};
    return TB_OK;
}

/* How an operand of shape v broadcast to out is read by a fused op: at (i / inner) % len. Its dims
 * other than 1 must be one block of out's (right-aligned) dims with out's sizes: a bias [L] (inner 1),
 * a [B, 1] row statistic against [B, L] (inner L), a [C, 1, 1] channel against [N, C, H, W]. */
static bool broadcast_pattern(const tb_value_info *v, const tb_value_info *out, int64_t *len, int64_t *inner) {
    const int offset = out->ndim - v->ndim;
    if (offset < 0)
        return false;
    int lo = -1, hi = -1;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] != 1 && v->shape[d] != out->shape[offset + d])
            return false;
        if (v->shape[d] != 1) {
            lo = lo < 0 ? d : lo;
            hi = d + 1;
        }
    }
    *len = *inner = 1;
    if (lo < 0)
        return true;
    for (int d = lo; d < hi; d++) {
        if (v->shape[d] != out->shape[offset + d])
            return false; /* a 1 inside the block, where out is wider: two blocks */
        *len *= v->shape[d];
    }
    for (int d = offset + hi; d < out->ndim; d++)
        *inner *= out->shape[d];
    return true;
}

/* UNARY, BINARY, BINARY_SCALAR: a one-step fused op (tb_engine_program_fuse_chains (engine_program.c) joins neighbours later). */
static tb_status lower_elementwise(builder *b, int index, const tb_node *n) {
    const tb_value_info *out = info_of(b, n->first_output);
    if (!contiguous(out))
        return refuse(b, index, "not contiguous");
    tb_engine_fused chain = {.nsteps = 1};
    tb_engine_fused_step *step = &chain.steps[0];
    int inputs[2] = {-1, -1};
    if (n->op == TB_OP_UNARY) {
        const tb_params_unary *up = &n->params.unary;
        if (up->op < 0 || up->op >= TB_UNARY_COUNT)
            return refuse(b, index, "a unary op outside the kernel table");
        *step = (tb_engine_fused_step){.kind = TB_ENGINE_STEP_UNARY, .code = (int)up->op, .alpha = (float)up->alpha,
                                       .lo = (float)up->lo, .hi = (float)up->hi};
    } else {
        const int code = (int)(n->op == TB_OP_BINARY ? n->params.binary.op : n->params.scalar.op);
        if (code < 0 || code >= TB_BINARY_COUNT)
            return refuse(b, index, "a binary op outside the kernel table");
        if (n->op == TB_OP_BINARY_SCALAR)
            *step = (tb_engine_fused_step){.kind = n->params.scalar.reverse ? TB_ENGINE_STEP_SCALAR_FIRST : TB_ENGINE_STEP_SCALAR,
                                           .code = code, .scalar = (float)n->params.scalar.scalar};
        else
            *step = (tb_engine_fused_step){.kind = TB_ENGINE_STEP_BINARY, .code = code, .rhs = n->inputs[1] == n->inputs[0] ? 0 : 1};
    }
    const int operands = n->op == TB_OP_BINARY && n->inputs[1] != n->inputs[0] ? 2 : 1;
    for (int k = 0; k < operands; k++) {
        const tb_value_info *in = info_of(b, n->inputs[k]);
        if (!dense(b, n->inputs[k]) || !broadcast_pattern(in, out, &chain.len[k], &chain.inner[k]))
            return refuse(b, index, "an operand broadcast over more than one block of dims, or not contiguous");
        inputs[k] = b->value_buffer[n->inputs[k]];
    }
    chain.ninputs = operands;
    TB_TRY(new_buffer(b, n->first_output));
    TB_TRY(add_fused(b, &chain, numel(out), inputs, b->value_buffer[n->first_output]));
    return round_result(b, n->first_output);
}

/* REDUCE over one block of contiguous dims: [rows, len, inner]. */
static tb_status lower_reduce(builder *b, int index, const tb_node *n) {
    const tb_params_reduce *rp = &n->params.reduce;
    const tb_value_info *x = info_of(b, n->inputs[0]), *out = info_of(b, n->first_output);
    if (rp->op < 0 || rp->op > TB_GRAPH_REDUCE_MEAN)
        return refuse(b, index, "a reduction outside the kernel table");
    if (out->dtype != x->dtype)
        return refuse(b, index, "a reduction into another dtype");
    if (!dense(b, n->inputs[0]) || !contiguous(out))
        return refuse(b, index, "not contiguous");
    const uint64_t mask = rp->dim_mask ? (uint64_t)rp->dim_mask : (x->ndim > 0 ? (((uint64_t)1 << x->ndim) - 1) : 0);
    int lo = -1, hi = -1;
    for (int d = 0; d < x->ndim; d++)
        if (mask & ((uint64_t)1 << d)) {
            if (hi >= 0 && hi != d)
                return refuse(b, index, "reduced dims that are not adjacent");
            lo = lo < 0 ? d : lo;
            hi = d + 1;
        }
    int64_t rows = 1, len = 1, inner = 1;
    for (int d = 0; d < x->ndim; d++)
        *(d < lo || lo < 0 ? &rows : d < hi ? &len : &inner) *= x->shape[d];
    if (len == 0)
        return refuse(b, index, "an empty reduction");
    TB_TRY(new_buffer(b, n->first_output));
    tb_engine_op op = {.kind = TB_ENGINE_OP_REDUCE, .code = (int)rp->op, .rows = rows, .len = len, .inner = inner};
    TB_TRY(add_op(b, &op, b->value_buffer[n->inputs[0]], -1, -1, b->value_buffer[n->first_output]));
    return round_result(b, n->first_output);
}

static tb_status lower_matmul(builder *b, int index, const tb_node *n) {
    const tb_params_matmul *mp = &n->params.matmul;
    const tb_value_info *x = info_of(b, n->inputs[0]), *w = layout_of(b, n->inputs[1]), *out = info_of(b, n->first_output);
    if (w->ndim < 2 || x->ndim < 1)
        return refuse(b, index, "a B of fewer than 2 dims");
    if (!dense(b, n->inputs[0]))
        return refuse(b, index, "A is not contiguous");
    const int wd = w->ndim;
    int64_t k = w->shape[wd - 2], cols = w->shape[wd - 1];
    /* a batched B (bmm, q @ k^T): one [K, N] matrix per product, none broadcast */
    int64_t products = 1;
    for (int d = 0; d < wd - 2; d++)
        products *= w->shape[d];
    if (wd > 2 && (x->ndim < 2 || numel(x) != products * x->shape[x->ndim - 2] * k ||
                   numel(out) != products * x->shape[x->ndim - 2] * cols))
        return refuse(b, index, "a batched matmul whose operands broadcast over the batch");
    bool trans_b;
    bool batch_dense = true; /* B's matrices lie k * cols apart, in order */
    int64_t step = 1;
    for (int d = wd - 3; d >= 0; d--) {
        int64_t expected = k * cols * step;
        if (w->shape[d] != 1 && w->strides[d] != expected)
            batch_dense = false;
        step *= w->shape[d];
    }
    if (b->offset[n->inputs[1]] == 0 && batch_dense && w->shape[wd - 2] > 0 && w->strides[wd - 2] == 1 &&
        w->strides[wd - 1] == k && k != 1) {
        trans_b = true; /* [N, K] matrices seen through a transpose (nn.Linear's weight, k^T) */
    } else {
        TB_TRY(ensure_f32(b, n->inputs[1]));
        TB_TRY(materialize(b, index, n->inputs[1]));
        w = layout_of(b, n->inputs[1]);
        trans_b = false;
    }
    int next = 2;
    int bias = -1, residual = -1;
    if (mp->has_bias) {
        const tb_value_info *bi = info_of(b, n->inputs[next]);
        if (numel(bi) != cols || !dense(b, n->inputs[next]))
            return refuse(b, index, "the bias is not a contiguous [N]");
        bias = b->value_buffer[n->inputs[next++]];
    }
    if (mp->has_residual) {
        const tb_value_info *r = info_of(b, n->inputs[next]);
        if (numel(r) != numel(out) || !dense(b, n->inputs[next]))
            return refuse(b, index, "the residual is not a contiguous [..., M, N]");
        residual = b->value_buffer[n->inputs[next++]];
    }
    static const int activation_codes[TB_ACTIVATION_COUNT] = {-1, TB_UNARY_RELU, TB_UNARY_GELU, TB_UNARY_GELU_TANH,
                                                              TB_UNARY_SILU, TB_UNARY_SIGMOID, TB_UNARY_TANH};
    if (mp->activation < 0 || mp->activation >= TB_ACTIVATION_COUNT)
        return refuse(b, index, "unknown activation");
    TB_TRY(new_buffer(b, n->first_output));
    int y = b->value_buffer[n->first_output];
    int64_t rows = k > 0 ? numel(x) / k : 0;
    if (k == 0)
        rows = numel(out) / (cols > 0 ? cols : 1);
    tb_engine_op op = {.kind = TB_ENGINE_OP_MATMUL, .m = rows, .n = cols, .k = k, .trans_b = trans_b};
    if (wd > 2) {
        op.m = rows / (products > 0 ? products : 1);
        op.batch = products;
        op.a_batch = op.m * k;
        op.b_batch = k * cols;
    }
    /* B with only 16-bit words (a widened 16-bit weight input): the *_w16 kernels read the words */
    bool words = b->value_buffer[n->inputs[1]] < 0;
    size_t weight_bytes = (size_t)(k * cols) * (words ? 2 : sizeof(float));
    if (words && b->buffer_range && weight_bytes > b->buffer_range) {
        TB_TRY(ensure_f32(b, n->inputs[1])); /* too large for one binding: f32, split below (or refused) */
        words = false;
        weight_bytes = (size_t)(k * cols) * sizeof(float);
    }
    if (words)
        op.b_format = b->words_format[n->inputs[1]];
    weight_bytes *= (size_t)products;
    if (wd > 2 && b->buffer_range && weight_bytes > b->buffer_range)
        return refuse(b, index, "a batched B larger than maxStorageBufferRange");
    if (b->buffer_range && weight_bytes > b->buffer_range && k > 0) {
        /* Split like the LLM's weights: nn.Linear's [N, K] weight by rows (output columns) into parts
         * that fit, each uploaded from its slice of the graph input, one matmul per part writing its
         * columns of y (y_stride = N). Needs the weight (and the bias) to be graph inputs. */
        const int weight_input = input_of_buffer(b, b->value_buffer[n->inputs[1]]);
        const int bias_input = bias >= 0 ? input_of_buffer(b, bias) : -1;
        const int64_t rows_per_part = (int64_t)(b->buffer_range / ((uint64_t)k * sizeof(float)));
        if (!trans_b || weight_input < 0 || (bias >= 0 && bias_input < 0) || rows_per_part < 1) {
            char why[160];
            snprintf(why, sizeof why, "B takes %zu bytes, more than maxStorageBufferRange (%llu), and only an "
                     "[N, K] graph-input weight whose rows fit is split", weight_bytes, (unsigned long long)b->buffer_range);
            return refuse(b, index, why);
        }
        for (int64_t row0 = 0; row0 < cols; row0 += rows_per_part) {
            const int64_t part_rows = cols - row0 < rows_per_part ? cols - row0 : rows_per_part;
            int part_weight, part_bias = -1;
            TB_TRY(slice_buffer(b, weight_input, (size_t)(row0 * k) * sizeof(float),
                                (size_t)(part_rows * k) * sizeof(float), &part_weight));
            if (bias >= 0)
                TB_TRY(slice_buffer(b, bias_input, (size_t)row0 * sizeof(float), (size_t)part_rows * sizeof(float),
                                    &part_bias));
            tb_engine_op part = op;
            part.n = part_rows;
            part.y_stride = cols;
            part.y_col0 = row0;
            TB_TRY(add_op(b, &part, b->value_buffer[n->inputs[0]], part_weight, part_bias, y));
        }
    } else {
        const int weight = words ? b->value_buffer16[n->inputs[1]] : b->value_buffer[n->inputs[1]];
        TB_TRY(add_op(b, &op, b->value_buffer[n->inputs[0]], weight, bias, y));
    }
    /* the activation and the residual as one fused op in place on y; a 16-bit product is rounded after
     * each stage, as the separate ATen ops round their results, so there each stage is its own op */
    const bool rounds = format_of(out->dtype) > 0;
    tb_engine_fused epilogue = {0}, *f = &epilogue;
    int inputs[2] = {y, residual};
    f->ninputs = 1;
    f->len[0] = numel(out);
    f->inner[0] = 1;
    if (mp->activation > 0) {
        TB_TRY(round_result(b, n->first_output));
        f->steps[f->nsteps++] = (tb_engine_fused_step){.kind = TB_ENGINE_STEP_UNARY, .code = activation_codes[mp->activation]};
        if (rounds || residual < 0) {
            TB_TRY(add_fused(b, &epilogue, numel(out), inputs, y));
            f->nsteps = 0;
        }
    }
    if (residual >= 0) {
        TB_TRY(round_result(b, n->first_output));
        f->ninputs = 2;
        f->len[1] = numel(out);
        f->inner[1] = 1;
        const int last = f->nsteps > 0 ? TB_ENGINE_FUSED_INPUTS + f->nsteps - 1 : 0;
        f->steps[f->nsteps++] = (tb_engine_fused_step){.kind = TB_ENGINE_STEP_BINARY, .code = TB_BINARY_ADD, .lhs = last, .rhs = 1};
        TB_TRY(add_fused(b, &epilogue, numel(out), inputs, y));
    }
    return round_result(b, n->first_output);
}

/* ATTENTION (inference: its log-sum-exp unused) over dense q, k, v; an additive float mask read through
 * its strides (size-1 dims broadcast). The output is written contiguous [B, H, Tq, Dv] whatever layout
 * the graph gave it (readers re-infer their views from the buffer's layout). */
static tb_status lower_attention(builder *b, int index, const tb_node *n) {
    const tb_params_attention *ap = &n->params.attention;
    if (b->live[n->first_output + 1])
        return refuse(b, index, "its log-sum-exp output is used (a training graph)");
    const tb_value_info *q = info_of(b, n->inputs[0]), *k = info_of(b, n->inputs[1]), *v = info_of(b, n->inputs[2]);
    const int nd = q->ndim;
    for (int i = 0; i < 3; i++)
        if (!dense(b, n->inputs[i]))
            return refuse(b, index, "q, k and v must be contiguous");
    tb_engine_op op = {.kind = TB_ENGINE_OP_ATTENTION};
    tb_engine_attention *at = &op.attention;
    *at = (tb_engine_attention){.batch = q->shape[0], .q_heads = nd == 4 ? q->shape[1] : 1,
                                .kv_heads = nd == 4 ? k->shape[1] : 1, .q_len = q->shape[nd - 2],
                                .kv_len = k->shape[nd - 2], .head_dim = q->shape[nd - 1],
                                .value_dim = v->shape[nd - 1], .causal = ap->causal != 0, .scale = (float)ap->scale};
    if (!(at->scale > 0.0f) && !(at->scale < 0.0f))
        at->scale = 1.0f / sqrtf((float)at->head_dim);
    if (at->head_dim > 512 || at->value_dim > 512 || at->head_dim < 1 || at->value_dim < 1)
        return refuse(b, index, "a head dim outside 1..512");
    int mask = -1;
    if (ap->has_mask) {
        const tb_value_info *m = layout_of(b, n->inputs[3]);
        if (nd != 4 || m->ndim > 4)
            return refuse(b, index, "a mask on 3-D attention");
        for (int d = 0; d < m->ndim; d++)
            at->mask_strides[d + 4 - m->ndim] = m->shape[d] == 1 ? 0 : m->strides[d];
        mask = b->value_buffer[n->inputs[3]];
    }
    TB_TRY(new_buffer(b, n->first_output));
    TB_TRY(add_op(b, &op, b->value_buffer[n->inputs[0]], b->value_buffer[n->inputs[1]], b->value_buffer[n->inputs[2]],
                  b->value_buffer[n->first_output]));
    b->p->ops[b->p->nops - 1].d = mask;
    return round_result(b, n->first_output);
}

/* CAT: each input read through its layout straight into its block of the output (seen as [P, S, Q]
 * around the cat dim: input k fills rows of s_k Q elements at column c_k Q of rows of S Q). */
static tb_status lower_cat(builder *b, int index, const tb_node *n) {
    const tb_value_info *out = info_of(b, n->first_output);
    int dim;
    TB_TRY(tb_normalize_dim(n->params.cat.dim, out->ndim, &dim));
    int64_t q = 1;
    for (int d = dim + 1; d < out->ndim; d++)
        q *= out->shape[d];
    TB_TRY(new_buffer(b, n->first_output));
    int64_t column = 0;
    for (int i = 0; i < n->ninputs; i++) {
        const int in = n->inputs[i];
        TB_TRY(ensure_f32(b, in)); /* keeps the layout: a widening is elementwise in memory order */
        const int64_t size = layout_of(b, in)->shape[dim];
        tb_engine_op copy;
        TB_TRY(strided_read(b, index, in, &copy));
        copy.y_stride = out->shape[dim] * q;
        copy.y_col0 = column * q;
        copy.strided.row = size * q;
        column += size;
        if (copy.n == 0)
            continue;
        TB_TRY(add_op(b, &copy, b->value_buffer[in], -1, -1, b->value_buffer[n->first_output]));
    }
    return round_result(b, n->first_output);
}

static tb_status lower_norm(builder *b, int index, const tb_node *n) {
    const tb_params_norm *np = &n->params.norm;
    const tb_value_info *x = info_of(b, n->inputs[0]);
    if (np->epilogue)
        return refuse(b, index, "fused epilogues are not taken");
    if (n->op == TB_OP_LAYER_NORM && (b->live[n->first_output + 1] || b->live[n->first_output + 2]))
        return refuse(b, index, "its mean/rstd outputs are used");
    if (!dense(b, n->inputs[0]))
        return refuse(b, index, "x is not contiguous");
    int64_t len = 1;
    for (int d = x->ndim - (int)np->normalized_ndim; d < x->ndim; d++)
        len *= x->shape[d];
    int next = 1, weight = -1, bias = -1;
    if (np->has_weight)
        weight = b->value_buffer[n->inputs[next++]];
    if (np->has_bias)
        bias = b->value_buffer[n->inputs[next++]];
    if (next != n->ninputs)
        return refuse(b, index, "extra operands");
    TB_TRY(new_buffer(b, n->first_output));
    tb_engine_op op = {.kind = n->op == TB_OP_LAYER_NORM ? TB_ENGINE_OP_LAYER_NORM : TB_ENGINE_OP_RMS_NORM,
                       .rows = len > 0 ? numel(x) / len : 0, .len = len, .eps = (float)np->eps};
    TB_TRY(add_op(b, &op, b->value_buffer[n->inputs[0]], weight, bias, b->value_buffer[n->first_output]));
    return round_result(b, n->first_output);
}

static tb_status lower_node(builder *b, int index) {
    const tb_node *n = &b->graph->nodes[index];
    if (n->op == TB_OP_INPUT)
        return TB_OK; /* buffers made up front, in input order */
    for (int o = 0; o < n->noutputs; o++) {
        const char *why = b->live[n->first_output + o] ? dtype_refusal(b, info_of(b, n->first_output + o)->dtype) : NULL;
        if (why)
            return refuse(b, index, why);
    }
    const tb_value_info *out = info_of(b, n->first_output);
    /* views, permutes and same-dtype copies alias their input's buffers (f32 and/or 16-bit words);
     * every other op reads f32 buffers, widened from 16-bit words where needed */
    const int first_in = n->ninputs > 0 ? n->inputs[0] : -1;
    const bool same_dtype = first_in >= 0 && info_of(b, first_in)->dtype == out->dtype;
    const bool widening_copy = n->op == TB_OP_COPY && !same_dtype && format_of(out->dtype) == 0 &&
                               b->value_buffer[first_in] < 0 && b->value_buffer16[first_in] >= 0;
    const bool alias = n->op == TB_OP_VIEW || n->op == TB_OP_PERMUTE || n->op == TB_OP_EXPAND || n->op == TB_OP_SLICE ||
                       n->op == TB_OP_CAT || /* reads its inputs through their layouts */
                       widening_copy || (n->op == TB_OP_COPY && same_dtype);
    for (int i = 0; i < n->ninputs; i++) {
        const char *why = dtype_refusal(b, info_of(b, n->inputs[i])->dtype);
        if (why)
            return refuse(b, index, why);
        if (b->value_buffer[n->inputs[i]] < 0 && b->value_buffer16[n->inputs[i]] < 0)
            return refuse(b, index, "an operand has no buffer");
        if (!alias && !(n->op == TB_OP_MATMUL && i == 1)) { /* a matmul may read B's 16-bit words */
            TB_TRY(ensure_f32(b, n->inputs[i]));
            TB_TRY(materialize(b, index, n->inputs[i]));
        }
    }
    switch (n->op) {
    case TB_OP_FULL: {
        int constant = -1;
        TB_TRY(constant_buffer(b, (float)n->params.full.value, numel(out), &constant));
        b->value_buffer[n->first_output] = constant;
        return round_result(b, n->first_output);
    }
    case TB_OP_VIEW:
    case TB_OP_PERMUTE:
    case TB_OP_EXPAND:
    case TB_OP_SLICE:
        return lower_view(b, index, n);
    case TB_OP_COPY: {
        const int in = n->inputs[0];
        if (alias && !widening_copy) { /* same dtype: the value as it lies (readers materialize if needed) */
            alias_value(b, n->first_output, in, &b->layout[in], b->offset[in]);
            return TB_OK;
        }
        /* to another dtype: f32 aliases the f32 buffer or the words (the widening is exact), a 16-bit
         * target rounds into its format */
        if (format_of(out->dtype) == 0) {
            tb_value_info layout = b->layout[in];
            layout.dtype = out->dtype;
            alias_value(b, n->first_output, in, &layout, b->offset[in]);
            return TB_OK;
        }
        TB_TRY(new_buffer(b, n->first_output));
        tb_engine_op round = {.kind = TB_ENGINE_OP_CONVERT16, .code = 2, .format = format_of(out->dtype), .n = numel(out)};
        return add_op(b, &round, b->value_buffer[in], -1, -1, b->value_buffer[n->first_output]);
    }
    case TB_OP_UNARY:
    case TB_OP_BINARY:
    case TB_OP_BINARY_SCALAR:
        return lower_elementwise(b, index, n);
    case TB_OP_REDUCE:
        return lower_reduce(b, index, n);
    case TB_OP_SOFTMAX: {
        const tb_value_info *x = info_of(b, n->inputs[0]);
        int dim;
        TB_TRY(tb_normalize_dim(n->params.softmax.dim, x->ndim > 0 ? x->ndim : 1, &dim));
        if ((x->ndim > 0 && dim != x->ndim - 1) || !dense(b, n->inputs[0]))
            return refuse(b, index, "softmax over a dim other than the last, or not contiguous");
        int64_t len = x->ndim > 0 ? x->shape[x->ndim - 1] : 1;
        TB_TRY(new_buffer(b, n->first_output));
        tb_engine_op op = {.kind = TB_ENGINE_OP_SOFTMAX, .rows = len > 0 ? numel(x) / len : 0, .len = len,
                           .log = n->params.softmax.log != 0};
        if (len == 0)
            return refuse(b, index, "an empty softmax dim");
        TB_TRY(add_op(b, &op, b->value_buffer[n->inputs[0]], -1, -1, b->value_buffer[n->first_output]));
        return round_result(b, n->first_output);
    }
    case TB_OP_LAYER_NORM:
    case TB_OP_RMS_NORM:
        return lower_norm(b, index, n);
    case TB_OP_MATMUL:
        return lower_matmul(b, index, n);
    case TB_OP_ATTENTION:
        return lower_attention(b, index, n);
    case TB_OP_CAT:
        return lower_cat(b, index, n);
    default:
        return refuse(b, index, "no kernel for this op on the engine");
    }
}

/* Values some output depends on. */
static void mark_live(const tb_graph *graph, bool *live) {
    for (int o = 0; o < graph->noutputs; o++)
        live[graph->outputs[o]] = true;
    for (int i = graph->nnodes - 1; i >= 0; i--) {
        const tb_node *n = &graph->nodes[i];
        bool used = false;
        for (int o = 0; o < n->noutputs; o++)
            used = used || live[n->first_output + o];
        for (int k = 0; used && k < n->ninputs; k++)
            live[n->inputs[k]] = true;
    }
}

static tb_status build(builder *b) {
    const tb_graph *graph = b->graph;
    tb_engine_program *p = b->p;
    mark_live(graph, b->live);
    p->ninputs = graph->ninputs;
    p->noutputs = graph->noutputs;
    p->input_buffers = calloc((size_t)p->ninputs + 1, sizeof(int));
    p->input_bytes = calloc((size_t)p->ninputs + 1, sizeof(size_t));
    p->output_buffers = calloc((size_t)p->noutputs + 1, sizeof(int));
    p->output_bytes = calloc((size_t)p->noutputs + 1, sizeof(size_t));
    if (!p->input_buffers || !p->input_bytes || !p->output_buffers || !p->output_bytes)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    int input = 0;
    for (int i = 0; i < graph->nnodes; i++) {
        const tb_node *n = &graph->nodes[i];
        if (n->op != TB_OP_INPUT)
            continue;
        const tb_value_info *info = info_of(b, n->first_output);
        const char *why = dtype_refusal(b, info->dtype);
        if (why || !dense_permuted(info))
            return refuse(b, i, why ? why : "graph inputs must be contiguous (or a permutation of contiguous)");
        if (format_of(info->dtype) > 0) { /* uploaded as 16-bit words, widened where an op reads them */
            TB_TRY(new_buffer16(b, n->first_output));
            b->layout[n->first_output] = *info; /* as it lies in memory */
            p->input_buffers[input] = b->value_buffer16[n->first_output];
            p->input_bytes[input++] = (size_t)numel(info) * 2;
            continue;
        }
        TB_TRY(new_buffer(b, n->first_output));
        b->layout[n->first_output] = *info;
        p->input_buffers[input] = b->value_buffer[n->first_output];
        p->input_bytes[input++] = (size_t)numel(info) * sizeof(float);
    }
    for (int i = 0; i < graph->nnodes; i++) {
        bool used = false;
        for (int o = 0; o < graph->nodes[i].noutputs; o++)
            used = used || b->live[graph->nodes[i].first_output + o];
        if (used)
            TB_TRY(lower_node(b, i));
    }
    for (int o = 0; o < graph->noutputs; o++) {
        int value = graph->outputs[o];
        const tb_value_info *info = info_of(b, value);
        const int format = format_of(info->dtype);
        if (dtype_refusal(b, info->dtype) || (b->value_buffer[value] < 0 && b->value_buffer16[value] < 0))
            return refuse(b, graph->values[value].node, "graph outputs must be float32, float16 or bfloat16");
        if (!dense(b, value)) { /* a view: downloaded contiguous */
            TB_TRY(ensure_f32(b, value));
            TB_TRY(materialize(b, graph->values[value].node, value));
        }
        if (format > 0) { /* downloaded as 16-bit words: narrowed from the (already rounded) f32 buffer */
            if (b->value_buffer16[value] < 0) {
                TB_TRY(new_buffer16(b, value));
                tb_engine_op narrow = {.kind = TB_ENGINE_OP_CONVERT16, .code = 1, .format = format, .n = numel(info)};
                TB_TRY(add_op(b, &narrow, b->value_buffer[value], -1, -1, b->value_buffer16[value]));
            }
            p->output_buffers[o] = b->value_buffer16[value];
            p->output_bytes[o] = (size_t)numel(info) * 2;
            continue;
        }
        TB_TRY(ensure_f32(b, value)); /* a float32 copy of a 16-bit input has only the words */
        p->output_buffers[o] = b->value_buffer[value];
        p->output_bytes[o] = (size_t)numel(info) * sizeof(float);
    }
    TB_TRY(tb_engine_program_fuse_chains(p));
    /* every op must pass the engine's own checks (sizes, device limits) */
    for (int i = 0; i < p->nops; i++) {
        tb_engine_op probe = p->ops[i].op;
        probe.fused = probe.kind == TB_ENGINE_OP_FUSED ? &p->ops[i].chain : NULL;
        if (!p->engine->supports_op(&probe)) {
            size_t extent[4];
            tb_engine_op_extents(&probe, &extent[0], &extent[1], &extent[2], &extent[3]);
            size_t widest = 0;
            for (int e = 0; e < 4; e++)
                widest = extent[e] > widest ? extent[e] : widest;
            return tb_error_set(TB_ERR_UNSUPPORTED, "engine %s does not take op %d (%s) of the program (device limits: "
                                "its largest operand takes %zu bytes, maxStorageBufferRange is %llu)",
                                p->engine->name, i, tb_engine_op_kind_name(probe.kind), widest,
                                (unsigned long long)b->buffer_range);
        }
    }
    p->buffer_unused = calloc((size_t)p->nbuffers + 1, sizeof(bool));
    if (!p->buffer_unused)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    for (int i = 0; i < p->nbuffers; i++)
        p->buffer_unused[i] = true;
    for (int i = 0; i < p->nops; i++) {
        const int operands[5] = {p->ops[i].a, p->ops[i].b, p->ops[i].c, p->ops[i].y, p->ops[i].d};
        for (int r = 0; r < 5; r++)
            if (operands[r] >= 0)
                p->buffer_unused[operands[r]] = false;
    }
    for (int o = 0; o < p->noutputs; o++)
        p->buffer_unused[p->output_buffers[o]] = false;
    for (int f = 0; f < p->nfills; f++)
        p->buffer_unused[p->fills[f].buffer] = false;
    return TB_OK;
}

tb_status tb_engine_program_build(const tb_engine *engine, const tb_graph *graph, tb_engine_program **out) {
    *out = NULL;
    TB_TRY(engine->init());
    builder b = {.graph = graph};
    b.p = calloc(1, sizeof *b.p);
    b.value_buffer = malloc(sizeof(int) * (size_t)(graph->nvalues + 1));
    b.value_buffer16 = malloc(sizeof(int) * (size_t)(graph->nvalues + 1));
    b.words_format = calloc((size_t)graph->nvalues + 1, sizeof(int));
    b.live = calloc((size_t)graph->nvalues + 1, sizeof(bool));
    b.layout = calloc((size_t)graph->nvalues + 1, sizeof *b.layout);
    b.offset = calloc((size_t)graph->nvalues + 1, sizeof *b.offset);
    tb_status status = TB_OK;
    if (!b.p || !b.value_buffer || !b.value_buffer16 || !b.words_format || !b.live || !b.layout || !b.offset) {
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    } else {
        b.p->engine = engine;
        tb_engine_device_info info;
        engine->device_info(&info);
        b.buffer_range = info.max_storage_buffer_range;
        b.storage16 = info.storage_16bit;
        for (int v = 0; v < graph->nvalues; v++)
            b.value_buffer[v] = b.value_buffer16[v] = -1;
        status = build(&b);
    }
    free(b.value_buffer);
    free(b.value_buffer16);
    free(b.words_format);
    free(b.live);
    free(b.layout);
    free(b.offset);
    if (status != TB_OK) {
        tb_engine_program_free(b.p);
        return status;
    }
    *out = b.p;
    return TB_OK;
}
