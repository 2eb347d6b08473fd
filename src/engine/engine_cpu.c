/* The two CPU engines. native_cpu runs the kernel table of the active ISA (and the threaded GEMM
 * driver); reference runs the scalar reference table and the scalar GEMM, row by row on the calling
 * thread's kernels, so it is the golden result other engines are compared with. Buffers are host
 * memory from tb_alloc; upload/download are copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/thread_pool.h"

static tb_status cpu_init(void) { return TB_OK; }

static void fill_info(tb_engine_device_info *out, const char *isa) {
    memset(out, 0, sizeof *out);
    out->available = true;
    strcpy(out->backend, "cpu");
    strcpy(out->device_type, "cpu");
    const tb_cpu_features *f = tb_cpu_get_features();
    snprintf(out->adapter_name, sizeof out->adapter_name, "%s", f->brand[0] ? f->brand : f->vendor);
    snprintf(out->driver_name, sizeof out->driver_name, "torchburn kernels (%s)", isa);
    out->device_count = 1;
}

static void native_info(tb_engine_device_info *out) { fill_info(out, tb_isa_name(tb_isa_active())); }
static void reference_info(tb_engine_device_info *out) { fill_info(out, "scalar"); }

/* 16-bit matmul weights are a GPU storage format: the CPU engines refuse them */
static bool cpu_supports(const tb_engine_op *op) {
    return (unsigned)op->kind < TB_ENGINE_OP_CPU_KINDS && op->b_format == TB_ENGINE_WEIGHT_F32;
}

static tb_status cpu_alloc(const tb_engine *engine, size_t bytes, tb_engine_buffer **out) {
    *out = NULL;
    tb_engine_buffer *buffer = calloc(1, sizeof *buffer);
    if (!buffer)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for a buffer record", engine->name);
    tb_status status = tb_alloc(bytes ? bytes : 1, TB_ALLOC_DEFAULT, &buffer->host);
    if (status != TB_OK) {
        free(buffer);
        return status;
    }
    buffer->engine = engine;
    buffer->bytes = bytes;
    *out = buffer;
    return TB_OK;
}

static tb_status native_alloc(size_t bytes, tb_engine_buffer **out) { return cpu_alloc(&tb_engine_native_cpu, bytes, out); }
static tb_status reference_alloc(size_t bytes, tb_engine_buffer **out) { return cpu_alloc(&tb_engine_reference, bytes, out); }

static void cpu_free(tb_engine_buffer *buffer) {
    if (!buffer)
        return;
    tb_free(buffer->host);
    free(buffer);
}

static tb_status cpu_upload(tb_engine_buffer *buffer, size_t offset, const void *src, size_t bytes) {
    if (offset > buffer->bytes || bytes > buffer->bytes - offset)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: upload of %zu bytes at %zu overruns a %zu-byte buffer",
                            buffer->engine->name, bytes, offset, buffer->bytes);
    if (bytes)
        memcpy((char *)buffer->host + offset, src, bytes);
    return TB_OK;
}

static tb_status cpu_download(const tb_engine_buffer *buffer, size_t offset, void *dst, size_t bytes) {
    if (offset > buffer->bytes || bytes > buffer->bytes - offset)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: download of %zu bytes at %zu overruns a %zu-byte buffer",
                            buffer->engine->name, bytes, offset, buffer->bytes);
    if (bytes)
        memcpy(dst, (const char *)buffer->host + offset, bytes);
    return TB_OK;
}

static float *data(const tb_engine_buffer *buffer) { return buffer ? (float *)buffer->host : NULL; }

/* A fused chain on the host: blocks of BLOCK elements, each step one kernel call over the block's
 * registers (the table's unary and binary kernels: the same values as the unfused ops). */
enum { BLOCK = 256, REGISTERS = TB_ENGINE_FUSED_INPUTS + TB_ENGINE_FUSED_STEPS };

static tb_status run_fused(const tb_engine_op *op, const tb_elementwise_kernels *kernels) {
    const tb_engine_fused *f = op->fused;
    const float *in[TB_ENGINE_FUSED_INPUTS] = {data(op->a), data(op->b), data(op->c), data(op->d)};
    float *y = data(op->y);
    float(*r)[BLOCK] = malloc(sizeof(float) * BLOCK * REGISTERS);
    if (!r)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "fused op: out of memory for registers");
    for (int64_t start = 0; start < op->n; start += BLOCK) {
        const int64_t count = op->n - start < BLOCK ? op->n - start : BLOCK;
        for (int k = 0; k < f->ninputs; k++)
            for (int64_t i = 0; i < count; i++)
                r[k][i] = in[k][((start + i) / f->inner[k]) % f->len[k]];
        for (int s = 0; s < f->nsteps; s++) {
            const tb_engine_fused_step *st = &f->steps[s];
            float *out = r[TB_ENGINE_FUSED_INPUTS + s];
            if (st->kind == TB_ENGINE_STEP_UNARY) {
                tb_unary_params params = {.alpha = st->alpha, .lo = st->lo, .hi = st->hi};
                kernels->unary[st->code](r[st->lhs], out, count, &params);
            } else if (st->kind == TB_ENGINE_STEP_BINARY) {
                kernels->binary[st->code](r[st->lhs], 1, r[st->rhs], 1, out, count);
            } else if (st->kind == TB_ENGINE_STEP_SCALAR) {
                kernels->binary[st->code](r[st->lhs], 1, &st->scalar, 0, out, count);
            } else {
                kernels->binary[st->code](&st->scalar, 0, r[st->lhs], 1, out, count);
            }
        }
        memcpy(y + start, r[TB_ENGINE_FUSED_INPUTS + f->nsteps - 1], sizeof(float) * (size_t)count);
    }
    free(r);
    return TB_OK;
}

static void run_reduce(const tb_engine_op *op, const tb_elementwise_kernels *kernels) {
    if (op->rows == 0)
        return;
    const float *a = data(op->a);
    float *y = data(op->y);
    const bool mean = op->code == 4;
    kernels->reduce[mean ? TB_REDUCE_SUM : op->code](a, op->rows, op->len, op->inner, y);
    if (mean)
        for (int64_t i = 0; i < op->rows * op->inner; i++)
            y[i] = y[i] / (float)op->len;
}

static void run_strided_copy(const tb_engine_op *op) {
    const tb_engine_strided *st = &op->strided;
    const float *a = data(op->a);
    float *y = data(op->y);
    int64_t index[TB_ENGINE_STRIDED_DIMS] = {0};
    int64_t at = op->a_offset;
    const int64_t row = st->row;
    for (int64_t i = 0; i < op->n; i++) {
        y[row > 0 ? (i / row) * op->y_stride + op->y_col0 + i % row : i] = a[at];
        for (int d = st->ndim - 1; d >= 0; d--) { /* odometer: the last dim fastest */
            at += st->strides[d];
            if (++index[d] < st->shape[d])
                break;
            at -= st->strides[d] * st->shape[d];
            index[d] = 0;
        }
    }
}

/* The kernel library's attention over contiguous [B, H, T, D] operands. */
static tb_status run_attention(const tb_engine_op *op, tb_isa isa) {
    const tb_engine_attention *at = &op->attention;
    tb_attention_desc desc = {.batch = at->batch, .q_heads = at->q_heads, .kv_heads = at->kv_heads, .q_len = at->q_len,
                              .kv_len = at->kv_len, .head_dim = at->head_dim, .value_dim = at->value_dim,
                              .q = data(op->a), .k = data(op->b), .v = data(op->c), .out = data(op->y),
                              .float_mask = data(op->d), .causal = at->causal, .scale = at->scale};
    const int64_t q_rows[2] = {at->q_heads, at->q_len}, kv_rows[2] = {at->kv_heads, at->kv_len};
    int64_t *strides[4] = {desc.q_strides, desc.k_strides, desc.v_strides, desc.out_strides};
    const int64_t widths[4] = {at->head_dim, at->head_dim, at->value_dim, at->value_dim};
    for (int t = 0; t < 4; t++) {
        const int64_t *rows = t == 1 || t == 2 ? kv_rows : q_rows;
        strides[t][3] = 1;
        strides[t][2] = widths[t];
        strides[t][1] = rows[1] * widths[t];
        strides[t][0] = rows[0] * rows[1] * widths[t];
    }
    memcpy(desc.float_mask_strides, at->mask_strides, sizeof desc.float_mask_strides);
    if (at->batch == 0 || at->q_len == 0)
        return TB_OK;
    return tb_attention_f32_isa(&desc, isa);
}

/* One op on host memory with the given kernel table and GEMM level. */
static tb_status run_one(const tb_engine_op *op, const tb_elementwise_kernels *kernels, tb_isa gemm_isa) {
    float *a = data(op->a), *b = data(op->b), *c = data(op->c), *y = data(op->y);
    switch (op->kind) {
    case TB_ENGINE_OP_UNARY: {
        tb_unary_params params = {.alpha = op->alpha, .lo = op->lo, .hi = op->hi};
        kernels->unary[op->code](a, y, op->n, &params);
        return TB_OK;
    }
    case TB_ENGINE_OP_BINARY:
        if (op->b_len == op->n || op->b_len == 1) {
            kernels->binary[op->code](a, 1, b, op->b_len == op->n ? 1 : 0, y, op->n);
        } else {
            for (int64_t start = 0; start < op->n; start += op->b_len)
                kernels->binary[op->code](a + start, 1, b, 1, y + start, op->b_len);
        }
        return TB_OK;
    case TB_ENGINE_OP_MATMUL: {
        tb_gemm_desc desc = {
            .m = op->m, .n = op->n, .k = op->k, .a = a, .a_row_stride = op->k, .a_col_stride = 1, .b = b,
            .b_row_stride = op->trans_b ? 1 : op->n, .b_col_stride = op->trans_b ? op->k : 1, .c = y + op->y_col0,
            .c_row_stride = tb_engine_op_y_stride(op), .alpha = 1.0f, .beta = 0.0f, .bias_kind = c ? TB_BIAS_PER_COLUMN : TB_BIAS_NONE,
            .bias = c, .activation = TB_ACTIVATION_NONE, .batch = 1,
        };
        if (op->m == 0 || op->n == 0)
            return TB_OK;
        const int64_t products = op->batch > 1 ? op->batch : 1;
        for (int64_t z = 0; z < products; z++) {
            desc.a = a + z * op->a_batch;
            desc.b = b + z * op->b_batch;
            desc.c = y + op->y_col0 + z * op->m * tb_engine_op_y_stride(op);
            TB_TRY(tb_gemm_f32_isa(&desc, gemm_isa));
        }
        return TB_OK;
    }
    case TB_ENGINE_OP_SOFTMAX:
        if (op->rows > 0)
            kernels->softmax(a, y, op->rows, op->len, 1, op->log);
        return TB_OK;
    case TB_ENGINE_OP_RMS_NORM:
        if (op->rows > 0)
            kernels->rms_norm(a, b, y, op->rows, op->len, op->eps);
        return TB_OK;
    case TB_ENGINE_OP_LAYER_NORM:
        if (op->rows > 0)
            kernels->layer_norm(a, b, c, y, op->rows, op->len, op->eps, NULL, NULL);
        return TB_OK;
    case TB_ENGINE_OP_FUSED:
        return run_fused(op, kernels);
    case TB_ENGINE_OP_REDUCE:
        run_reduce(op, kernels);
        return TB_OK;
    case TB_ENGINE_OP_STRIDED_COPY:
        run_strided_copy(op);
        return TB_OK;
    case TB_ENGINE_OP_ATTENTION:
        return run_attention(op, gemm_isa);
    default:
        return tb_error_set(TB_ERR_INTERNAL, "cpu engine: unhandled op kind %d", (int)op->kind);
    }
}

static tb_status cpu_run(const tb_engine *engine, const tb_engine_op *ops, int count,
                         const tb_elementwise_kernels *kernels, tb_isa gemm_isa) {
    for (int i = 0; i < count; i++) {
        tb_status status = tb_engine_check_op(engine, &ops[i]);
        if (status == TB_OK)
            status = run_one(&ops[i], kernels, gemm_isa);
        if (status != TB_OK)
            return tb_error_prefix(status, "%s: op %d (%s)", engine->name, i, tb_engine_op_kind_name(ops[i].kind));
    }
    return TB_OK;
}

static tb_status native_run(const tb_engine_op *ops, int count) {
    return cpu_run(&tb_engine_native_cpu, ops, count, tb_elementwise_kernels_active(), tb_isa_active());
}

static tb_status reference_run(const tb_engine_op *ops, int count) {
    return cpu_run(&tb_engine_reference, ops, count, tb_elementwise_kernels_for(TB_ISA_SCALAR), TB_ISA_SCALAR);
}

static tb_status cpu_synchronize(void) { return TB_OK; }

const tb_engine tb_engine_native_cpu = {
    .name = "native_cpu", .init = cpu_init, .device_info = native_info, .supports_op = cpu_supports,
    .buffer_alloc = native_alloc, .buffer_free = cpu_free, .buffer_upload = cpu_upload,
    .buffer_download = cpu_download, .run = native_run, .synchronize = cpu_synchronize,
};

const tb_engine tb_engine_reference = {
    .name = "reference", .init = cpu_init, .device_info = reference_info, .supports_op = cpu_supports,
    .buffer_alloc = reference_alloc, .buffer_free = cpu_free, .buffer_upload = cpu_upload,
    .buffer_download = cpu_download, .run = reference_run, .synchronize = cpu_synchronize,
};
