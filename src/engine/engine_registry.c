/* The engine registry, the selection from TORCHBURN_ENGINE / TORCHBURN_DEVICE, and the validation of
 * ops that every engine shares. */
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/engine_internal.h"
#include "kernels/elementwise.h"
#include "torchburn/cpu.h"
#include "torchburn/thread_pool.h"

static const tb_engine *const engines[] = {&tb_engine_native_cpu, &tb_engine_reference, &tb_engine_vulkan};
enum { ENGINE_COUNT = sizeof engines / sizeof engines[0] };

int tb_engine_count(void) { return ENGINE_COUNT; }

const tb_engine *tb_engine_at(int index) { return index >= 0 && index < ENGINE_COUNT ? engines[index] : NULL; }

const tb_engine *tb_engine_find(const char *name) {
    static const struct { const char *alias; const tb_engine *engine; } aliases[] = {
        {"native_cpu", &tb_engine_native_cpu}, {"cpu", &tb_engine_native_cpu}, {"native", &tb_engine_native_cpu},
        {"reference", &tb_engine_reference},   {"burn", &tb_engine_reference}, {"vulkan", &tb_engine_vulkan},
        {"gpu", &tb_engine_vulkan},
    };
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0)
            return aliases[i].engine;
    return NULL;
}

const char *tb_engine_op_kind_name(tb_engine_op_kind kind) {
    static const char *const names[TB_ENGINE_OP_COUNT] = {"unary",   "binary",         "matmul",        "softmax",
                                                                  "rms_norm", "layer_norm", "fused", "reduce", "strided_copy", "attention", "qmatmul",       "llm_rope",
                                                                  "llm_attention", "silu_mul", "copy", "convert16"};
    return (unsigned)kind < TB_ENGINE_OP_COUNT ? names[kind] : "invalid";
}

/* ---- selection ---- */

typedef enum request { REQUEST_ENGINE, REQUEST_GPU, REQUEST_AUTO } request;

static pthread_mutex_t selection_lock = PTHREAD_MUTEX_INITIALIZER;
static bool selected;
static const tb_engine *chosen = &tb_engine_native_cpu;
static request chosen_request = REQUEST_ENGINE;
static char chosen_source[64] = "default";

static bool env_is(const char *value, const char *word) { return value && strcasecmp(value, word) == 0; }

tb_status tb_engine_select_from_env(void) {
    pthread_mutex_lock(&selection_lock);
    selected = true;
    chosen = &tb_engine_native_cpu;
    chosen_request = REQUEST_ENGINE;
    snprintf(chosen_source, sizeof chosen_source, "default");
    const char *engine_name = getenv("TORCHBURN_ENGINE");
    const char *device = getenv("TORCHBURN_DEVICE");
    tb_status status = TB_OK;
    if (device && device[0] && !env_is(device, "cpu") && !env_is(device, "auto") && !env_is(device, "gpu")) {
        status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "TORCHBURN_DEVICE='%s' is not one of cpu, auto, gpu", device);
    } else if (engine_name && engine_name[0]) {
        const tb_engine *engine = tb_engine_find(engine_name);
        if (!engine) {
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                  "TORCHBURN_ENGINE='%s' is not an engine of this build (native_cpu, reference "
                                  "(alias burn), vulkan (alias gpu))",
                                  engine_name);
        } else if (engine == &tb_engine_vulkan && env_is(device, "cpu")) {
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "TORCHBURN_ENGINE='%s' contradicts TORCHBURN_DEVICE=cpu",
                                  engine_name);
        } else if (engine != &tb_engine_vulkan && env_is(device, "gpu")) {
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "TORCHBURN_ENGINE='%s' contradicts TORCHBURN_DEVICE=gpu",
                                  engine_name);
        } else {
            chosen = engine;
            chosen_request = engine == &tb_engine_vulkan ? REQUEST_GPU : REQUEST_ENGINE;
            snprintf(chosen_source, sizeof chosen_source, "TORCHBURN_ENGINE=%.40s", engine_name);
        }
    } else if (env_is(device, "gpu")) {
        chosen = &tb_engine_vulkan;
        chosen_request = REQUEST_GPU;
        snprintf(chosen_source, sizeof chosen_source, "TORCHBURN_DEVICE=gpu");
    } else if (env_is(device, "auto")) {
        chosen_request = REQUEST_AUTO; /* resolved on first tb_engine_active: probing a GPU is not free */
        snprintf(chosen_source, sizeof chosen_source, "TORCHBURN_DEVICE=auto");
    }
    if (status == TB_OK && chosen == &tb_engine_reference) {
        /* the golden path: scalar kernels everywhere, one thread */
        const char *isa = getenv("TORCHBURN_ISA");
        if (isa && isa[0] && !env_is(isa, "scalar") && !env_is(isa, "auto"))
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                  "TORCHBURN_ENGINE=reference runs the scalar kernels; TORCHBURN_ISA='%s' contradicts it", isa);
        else if ((status = tb_isa_set(TB_ISA_SCALAR)) == TB_OK)
            status = tb_set_num_threads(1);
    }
    if (status != TB_OK) {
        chosen = &tb_engine_native_cpu;
        chosen_request = REQUEST_ENGINE;
    }
    pthread_mutex_unlock(&selection_lock);
    return status;
}

tb_status tb_engine_active(const tb_engine **out) {
    *out = NULL;
    pthread_mutex_lock(&selection_lock);
    bool was_selected = selected;
    pthread_mutex_unlock(&selection_lock);
    if (!was_selected) {
        tb_status status = tb_engine_select_from_env();
        if (status != TB_OK)
            return status;
    }
    pthread_mutex_lock(&selection_lock);
    const tb_engine *engine = chosen;
    request kind = chosen_request;
    char source[64];
    memcpy(source, chosen_source, sizeof source);
    pthread_mutex_unlock(&selection_lock);
    if (kind == REQUEST_ENGINE) {
        *out = engine;
        return TB_OK;
    }
    /* a GPU was asked for (gpu) or is welcome (auto): the vulkan engine decides */
    tb_status status = tb_engine_vulkan.init();
    if (status == TB_OK) {
        tb_engine_device_info info;
        tb_engine_vulkan.device_info(&info);
        if (kind == REQUEST_AUTO && strcmp(info.device_type, "cpu") == 0) {
            *out = &tb_engine_native_cpu; /* auto never trades the CPU engine for a software Vulkan device */
            return TB_OK;
        }
        *out = &tb_engine_vulkan;
        return TB_OK;
    }
    if (kind == REQUEST_AUTO) {
        tb_error_clear();
        *out = &tb_engine_native_cpu;
        return TB_OK;
    }
    return tb_error_prefix(TB_ERR_UNSUPPORTED, "%s asks for a GPU, but there is none usable", source);
}

tb_status tb_engine_run_download(const tb_engine *engine, const tb_engine_op *ops, int count,
                                 const tb_engine_download *downloads, int ndownloads) {
    if (engine->run_download)
        return engine->run_download(ops, count, downloads, ndownloads);
    TB_TRY(engine->run(ops, count));
    for (int i = 0; i < ndownloads; i++)
        TB_TRY(engine->buffer_download(downloads[i].buffer, downloads[i].offset, downloads[i].dst, downloads[i].bytes));
    return TB_OK;
}

tb_status tb_engine_check_op(const tb_engine *engine, const tb_engine_op *op) {
    tb_status status = tb_engine_op_validate(engine, op);
    if (status != TB_OK)
        return status;
    if (!engine->supports_op(op))
        return tb_error_set(TB_ERR_UNSUPPORTED, "engine %s does not run this %s op (code %d)", engine->name,
                            tb_engine_op_kind_name(op->kind), op->code);
    return TB_OK;
}

/* ---- validation ---- */

int64_t tb_engine_op_y_stride(const tb_engine_op *op) { return op->y_stride > 0 ? op->y_stride : op->n; }

/* Bytes a (q)matmul's output spans: the last row ends at column y_col0 + n of row stride y_stride. */
static size_t output_extent(const tb_engine_op *op) {
    if (op->m <= 0 || op->n <= 0)
        return 0;
    const int64_t batches = op->batch > 1 ? op->batch : 1;
    return (size_t)(((batches - 1) * op->m + op->m - 1) * tb_engine_op_y_stride(op) + op->y_col0 + op->n) * sizeof(float);
}

/* Products of a (batched) matmul. */
static int64_t batches(const tb_engine_op *op) { return op->batch > 1 ? op->batch : 1; }

/* The output block's geometry: y_col0 >= 0, y_col0 + n <= the row stride, and the 32-bit shader indices hold. */
static tb_status validate_output_block(const tb_engine_op *op) {
    const int64_t stride = tb_engine_op_y_stride(op);
    if (op->y_stride < 0 || op->y_col0 < 0 || (op->y_stride == 0 && op->y_col0 != 0) || op->y_col0 + op->n > stride ||
        (op->m > 0 && (op->m - 1) * stride + op->y_col0 + op->n >= ((int64_t)1 << 31)))
        return tb_error_set(TB_ERR_SHAPE, "%s op: output columns [%lld, %lld) do not fit rows of y_stride %lld",
                            tb_engine_op_kind_name(op->kind), (long long)op->y_col0, (long long)(op->y_col0 + op->n),
                            (long long)op->y_stride);
    return TB_OK;
}

void tb_engine_op_extents(const tb_engine_op *op, size_t *a_bytes, size_t *b_bytes, size_t *c_bytes, size_t *y_bytes) {
    size_t f = sizeof(float);
    *a_bytes = *b_bytes = *c_bytes = *y_bytes = 0;
    switch (op->kind) {
    case TB_ENGINE_OP_UNARY:
        *a_bytes = *y_bytes = (size_t)op->n * f;
        break;
    case TB_ENGINE_OP_BINARY:
        *a_bytes = *y_bytes = (size_t)op->n * f;
        *b_bytes = (size_t)op->b_len * f;
        break;
    case TB_ENGINE_OP_MATMUL:
        *a_bytes = (size_t)((batches(op) - 1) * op->a_batch + op->m * op->k) * f;
        *b_bytes = (size_t)((batches(op) - 1) * op->b_batch + op->k * op->n) * (op->b_format != TB_ENGINE_WEIGHT_F32 ? 2 : f);
        *c_bytes = op->c ? (size_t)op->n * f : 0;
        *y_bytes = output_extent(op);
        break;
    case TB_ENGINE_OP_SOFTMAX:
    case TB_ENGINE_OP_RMS_NORM:
    case TB_ENGINE_OP_LAYER_NORM:
        *a_bytes = *y_bytes = (size_t)(op->rows * op->len) * f;
        *b_bytes = op->b ? (size_t)op->len * f : 0;
        *c_bytes = op->c ? (size_t)op->len * f : 0;
        break;
    case TB_ENGINE_OP_QMATMUL:
        *a_bytes = (size_t)(op->m * op->k) * f;
        *b_bytes = (size_t)(op->code == 4 ? op->n * (op->k / 2) : op->n * op->k);
        *c_bytes = op->c ? (size_t)op->n * f : 0;
        *y_bytes = output_extent(op);
        break;
    case TB_ENGINE_OP_LLM_ROPE:
    case TB_ENGINE_OP_LLM_ATTENTION: {
        const size_t cache = (size_t)(op->llm.kv_heads * op->llm.capacity * op->llm.head_dim) * f;
        const size_t qkv = (size_t)(op->llm.tokens * op->llm.stride) * f;
        *b_bytes = *c_bytes = cache;
        if (op->kind == TB_ENGINE_OP_LLM_ROPE) {
            *a_bytes = (size_t)(op->llm.tokens * op->llm.head_dim) * f;
            *y_bytes = qkv;
        } else {
            *a_bytes = qkv;
            *y_bytes = (size_t)(op->llm.tokens * op->llm.heads * op->llm.head_dim) * f;
        }
        break;
    }
    case TB_ENGINE_OP_SILU_MUL:
        *a_bytes = (size_t)(op->rows * 2 * op->len) * f;
        *y_bytes = (size_t)(op->rows * op->len) * f;
        break;
    case TB_ENGINE_OP_COPY:
        *a_bytes = (size_t)(op->a_offset + op->n) * f;
        *y_bytes = (size_t)(op->y_col0 + op->n) * f;
        break;
    case TB_ENGINE_OP_FUSED: {
        size_t *in[3] = {a_bytes, b_bytes, c_bytes};
        for (int k = 0; op->fused && k < 3 && k < op->fused->ninputs; k++)
            *in[k] = (size_t)op->fused->len[k] * f;
        *y_bytes = (size_t)op->n * f;
        break;
    }
    case TB_ENGINE_OP_REDUCE:
        *a_bytes = (size_t)(op->rows * op->len * op->inner) * f;
        *y_bytes = (size_t)(op->rows * op->inner) * f;
        break;
    case TB_ENGINE_OP_STRIDED_COPY: {
        int64_t last = op->a_offset; /* the furthest element read */
        for (int d = 0; d < op->strided.ndim; d++)
            last += (op->strided.shape[d] - 1) * op->strided.strides[d];
        *a_bytes = op->n > 0 ? (size_t)(last + 1) * f : 0;
        *y_bytes = op->strided.row > 0 && op->n > 0
                       ? (size_t)((op->n / op->strided.row - 1) * op->y_stride + op->y_col0 + op->strided.row) * f
                       : (size_t)op->n * f;
        break;
    }
    case TB_ENGINE_OP_ATTENTION: {
        const tb_engine_attention *at = &op->attention;
        *a_bytes = (size_t)(at->batch * at->q_heads * at->q_len * at->head_dim) * f;
        *b_bytes = (size_t)(at->batch * at->kv_heads * at->kv_len * at->head_dim) * f;
        *c_bytes = (size_t)(at->batch * at->kv_heads * at->kv_len * at->value_dim) * f;
        *y_bytes = (size_t)(at->batch * at->q_heads * at->q_len * at->value_dim) * f;
        break;
    }
    case TB_ENGINE_OP_CONVERT16:
        *a_bytes = (size_t)op->n * (op->code == 0 ? 2 : f);
        *y_bytes = (size_t)op->n * (op->code == 1 ? 2 : f);
        break;
    default:
        break;
    }
}

size_t tb_engine_op_d_extent(const tb_engine_op *op) {
    if (op->kind == TB_ENGINE_OP_QMATMUL)
        return (size_t)(op->code == 4 && op->llm.group > 0 ? op->n * (op->k / op->llm.group) : op->n) * sizeof(float);
    if (op->kind == TB_ENGINE_OP_LLM_ROPE && op->d)
        return (size_t)(2 * op->llm.head_dim) * sizeof(float);
    if (op->kind == TB_ENGINE_OP_FUSED && op->fused && op->fused->ninputs > 3)
        return (size_t)op->fused->len[3] * sizeof(float);
    if (op->kind == TB_ENGINE_OP_ATTENTION && op->d) { /* the furthest mask element read */
        const tb_engine_attention *at = &op->attention;
        const int64_t sizes[4] = {at->batch, at->q_heads, at->q_len, at->kv_len};
        int64_t last = 0;
        for (int d = 0; d < 4; d++)
            last += (sizes[d] > 0 ? sizes[d] - 1 : 0) * at->mask_strides[d];
        return (size_t)(last + 1) * sizeof(float);
    }
    return 0;
}

/* The LLM ops' shape rules (sizes below 2^31 so the shaders' 32-bit indices hold). */
static tb_status validate_llm(const tb_engine_op *op) {
    const int64_t limit = (int64_t)1 << 31;
    const char *kind = tb_engine_op_kind_name(op->kind);
    if (op->kind == TB_ENGINE_OP_QMATMUL) {
        if (op->code != 8 && op->code != 4)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "qmatmul op: code must be 8 (int8) or 4 (int4), got %d", op->code);
        if (op->m < 0 || op->n < 0 || op->k < 1 || op->m * op->k >= limit || op->n * op->k >= limit ||
            op->m * op->n >= limit || (op->code == 4 && (op->llm.group < 2 || op->llm.group % 2 || op->k % op->llm.group)))
            return tb_error_set(TB_ERR_SHAPE, "qmatmul op: M=%lld N=%lld K=%lld group=%lld are out of range",
                                (long long)op->m, (long long)op->n, (long long)op->k, (long long)op->llm.group);
        if (op->y == op->a || op->y == op->b || op->y == op->d || (op->c && op->y == op->c))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "qmatmul op: the output must not alias an input");
        if (!op->d)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "qmatmul op: operand d (scales) is missing");
        return validate_output_block(op);
    }
    if (op->kind == TB_ENGINE_OP_SILU_MUL) {
        if (op->rows < 0 || op->len < 1 || op->rows * op->len >= limit)
            return tb_error_set(TB_ERR_SHAPE, "silu_mul op: rows=%lld len=%lld", (long long)op->rows, (long long)op->len);
        if (op->y == op->a)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "silu_mul op: the output must not alias the input");
        return TB_OK;
    }
    const int64_t hq = op->llm.heads, hkv = op->llm.kv_heads, d = op->llm.head_dim;
    if (hq < 1 || hkv < 1 || hq % hkv || d < 2 || d % 2 || d > 512 || op->llm.stride != (hq + 2 * hkv) * d ||
        op->llm.tokens < 0 || op->llm.pos0 < 0 || op->llm.window < 0 || op->llm.capacity < op->llm.pos0 + op->llm.tokens ||
        op->llm.capacity * hkv * d >= limit || op->llm.tokens * op->llm.stride >= limit)
        return tb_error_set(TB_ERR_SHAPE, "%s op: heads=%lld kv_heads=%lld head_dim=%lld stride=%lld tokens=%lld pos0=%lld "
                            "capacity=%lld do not fit (head_dim even and <= 512, stride (heads + 2 kv_heads) head_dim)",
                            kind, (long long)hq, (long long)hkv, (long long)d, (long long)op->llm.stride,
                            (long long)op->llm.tokens, (long long)op->llm.pos0, (long long)op->llm.capacity);
    if (!op->b || !op->c)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s op: the key and value caches (b, c) are required", kind);
    if (op->y == op->b || op->y == op->c || op->y == op->a)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s op: the output must not alias an input", kind);
    if (op->kind == TB_ENGINE_OP_LLM_ROPE && !(op->eps >= 0.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm_rope op: eps must be >= 0");
    return TB_OK;
}

/* A fused chain's structure: inputs that tile n, steps reading only inputs and earlier steps. */
static tb_status validate_fused(const tb_engine_op *op) {
    const tb_engine_fused *f = op->fused;
    if (!f)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "fused op: the chain (op->fused) is missing");
    if (op->n < 0 || op->n > ((int64_t)1 << 40))
        return tb_error_set(TB_ERR_SHAPE, "fused op: n=%lld is out of range", (long long)op->n);
    if (f->ninputs < 1 || f->ninputs > TB_ENGINE_FUSED_INPUTS || f->nsteps < 1 || f->nsteps > TB_ENGINE_FUSED_STEPS)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "fused op: %d inputs and %d steps (1 to %d inputs, 1 to %d steps)",
                            f->ninputs, f->nsteps, TB_ENGINE_FUSED_INPUTS, TB_ENGINE_FUSED_STEPS);
    const tb_engine_buffer *inputs[TB_ENGINE_FUSED_INPUTS] = {op->a, op->b, op->c, op->d};
    for (int k = 0; k < TB_ENGINE_FUSED_INPUTS; k++) {
        if (k >= f->ninputs) {
            if (inputs[k])
                return tb_error_set(TB_ERR_INVALID_ARGUMENT, "fused op: operand %d is given beyond its %d inputs", k,
                                    f->ninputs);
            continue;
        }
        const int64_t len = f->len[k], inner = f->inner[k];
        if (len < 1 || inner < 1 || len > ((int64_t)1 << 31) || inner > ((int64_t)1 << 31) || (op->n > 0 && op->n % (len * inner) != 0))
            return tb_error_set(TB_ERR_SHAPE, "fused op: input %d (len %lld, inner %lld) does not tile n=%lld", k,
                                (long long)len, (long long)inner, (long long)op->n);
        if (inputs[k] == op->y && (len != op->n || inner != 1))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "fused op: the output may alias input %d only when it is full size", k);
    }
    for (int s = 0; s < f->nsteps; s++) {
        const tb_engine_fused_step *st = &f->steps[s];
        const int registers = TB_ENGINE_FUSED_INPUTS + s;
        const bool binary = st->kind != TB_ENGINE_STEP_UNARY;
        if (st->kind < TB_ENGINE_STEP_UNARY || st->kind > TB_ENGINE_STEP_SCALAR_FIRST ||
            st->code < 0 || st->code >= (binary ? TB_BINARY_COUNT : TB_UNARY_COUNT))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "fused op: step %d has kind %d and code %d", s, st->kind, st->code);
        const int reads[2] = {st->lhs, st->kind == TB_ENGINE_STEP_BINARY ? st->rhs : st->lhs};
        for (int r = 0; r < 2; r++)
            if (reads[r] < 0 || reads[r] >= registers || (reads[r] < TB_ENGINE_FUSED_INPUTS && reads[r] >= f->ninputs))
                return tb_error_set(TB_ERR_INVALID_ARGUMENT, "fused op: step %d reads register %d, which holds nothing yet",
                                    s, reads[r]);
        if (st->kind != TB_ENGINE_STEP_BINARY && st->rhs != 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "fused op: step %d has one operand, rhs must be 0", s);
    }
    return TB_OK;
}

static tb_status check_buffer(const tb_engine *engine, const tb_engine_op *op, const char *role,
                              const tb_engine_buffer *buffer, size_t need) {
    if (!buffer)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s op: operand %s is missing", tb_engine_op_kind_name(op->kind), role);
    if (buffer->engine != engine)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s op: operand %s belongs to engine %s, not %s",
                            tb_engine_op_kind_name(op->kind), role, buffer->engine->name, engine->name);
    if (buffer->bytes < need)
        return tb_error_set(TB_ERR_SHAPE, "%s op: operand %s needs %zu bytes, its buffer has %zu",
                            tb_engine_op_kind_name(op->kind), role, need, buffer->bytes);
    return TB_OK;
}

tb_status tb_engine_op_validate(const tb_engine *engine, const tb_engine_op *op) {
    const char *kind = tb_engine_op_kind_name(op->kind);
    const int64_t limit = (int64_t)1 << 40; /* keeps every byte count below in range */
    switch (op->kind) {
    case TB_ENGINE_OP_UNARY:
        if (op->code < 0 || op->code >= TB_UNARY_COUNT)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unary op: unknown code %d", op->code);
        if (op->n < 0 || op->n > limit)
            return tb_error_set(TB_ERR_SHAPE, "unary op: n=%lld is out of range", (long long)op->n);
        break;
    case TB_ENGINE_OP_BINARY:
        if (op->code < 0 || op->code >= TB_BINARY_COUNT)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "binary op: unknown code %d", op->code);
        if (op->n < 0 || op->n > limit || op->b_len < 1 || op->b_len > limit || (op->n > 0 && op->n % op->b_len != 0))
            return tb_error_set(TB_ERR_SHAPE, "binary op: b has %lld elements, which must be >= 1 and divide n=%lld",
                                (long long)op->b_len, (long long)op->n);
        break;
    case TB_ENGINE_OP_MATMUL:
        if (op->m < 0 || op->n < 0 || op->k < 0 || op->m > limit || op->n > limit || op->k > limit ||
            op->m * op->n > limit || op->m * op->k > limit || op->k * op->n > limit)
            return tb_error_set(TB_ERR_SHAPE, "matmul op: sizes M=%lld N=%lld K=%lld are out of range", (long long)op->m,
                                (long long)op->n, (long long)op->k);
        if (op->y == op->a || op->y == op->b || (op->c && op->y == op->c))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "matmul op: the output must not alias an input");
        if (op->batch < 0 || op->batch > ((int64_t)1 << 31) || op->a_batch < 0 || op->a_batch > limit ||
            op->b_batch < 0 || op->b_batch > limit || (op->batch > 1 && op->y_col0 != 0) ||
            batches(op) * op->m * tb_engine_op_y_stride(op) > limit)
            return tb_error_set(TB_ERR_SHAPE, "matmul op: batch=%lld a_batch=%lld b_batch=%lld are out of range (a "
                                "batched product writes whole rows)", (long long)op->batch, (long long)op->a_batch,
                                (long long)op->b_batch);
        if (op->b_format < TB_ENGINE_WEIGHT_F32 || op->b_format > TB_ENGINE_WEIGHT_F16)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "matmul op: b_format %d is not 0 (f32), 1 (bf16) or 2 (f16)",
                                op->b_format);
        TB_TRY(validate_output_block(op));
        break;
    case TB_ENGINE_OP_SOFTMAX:
    case TB_ENGINE_OP_RMS_NORM:
    case TB_ENGINE_OP_LAYER_NORM:
        if (op->rows < 0 || op->len < 1 || op->rows > limit || op->len > limit || op->rows * op->len > limit)
            return tb_error_set(TB_ERR_SHAPE, "%s op: rows=%lld len=%lld (len must be >= 1)", kind, (long long)op->rows,
                                (long long)op->len);
        if (op->kind == TB_ENGINE_OP_SOFTMAX && (op->b || op->c))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "softmax op takes one input");
        if (op->kind == TB_ENGINE_OP_RMS_NORM && op->c)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "rms_norm op has no bias");
        if (op->kind != TB_ENGINE_OP_SOFTMAX && !(op->eps >= 0.0f))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s op: eps must be >= 0", kind);
        break;
    case TB_ENGINE_OP_FUSED:
        TB_TRY(validate_fused(op));
        break;
    case TB_ENGINE_OP_REDUCE:
        if (op->code < 0 || op->code > 4)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "reduce op: code %d is not 0 (sum), 1 (max), 2 (min), "
                                "3 (logsumexp) or 4 (mean)", op->code);
        if (op->rows < 0 || op->len < 1 || op->inner < 1 || op->rows > limit || op->len > limit || op->inner > limit ||
            op->rows * op->len > limit || op->rows * op->len * op->inner > limit)
            return tb_error_set(TB_ERR_SHAPE, "reduce op: rows=%lld len=%lld inner=%lld (len and inner must be >= 1)",
                                (long long)op->rows, (long long)op->len, (long long)op->inner);
        if (op->y == op->a || op->b || op->c || op->d)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "reduce op takes one input and must not write it");
        break;
    case TB_ENGINE_OP_STRIDED_COPY: {
        const tb_engine_strided *st = &op->strided;
        int64_t count = 1;
        bool ok = st->ndim >= 0 && st->ndim <= TB_ENGINE_STRIDED_DIMS && op->a_offset >= 0 && op->a_offset <= limit;
        for (int d = 0; ok && d < st->ndim; d++) {
            ok = st->shape[d] >= 0 && st->shape[d] <= limit && st->strides[d] >= 0 && st->strides[d] <= limit;
            count = ok ? count * st->shape[d] : 0;
            ok = ok && count <= limit;
        }
        if (!ok || count != op->n)
            return tb_error_set(TB_ERR_SHAPE, "strided_copy op: %d dims (at most %d, sizes and strides >= 0) must "
                                "hold n=%lld elements", st->ndim, TB_ENGINE_STRIDED_DIMS, (long long)op->n);
        if (st->row < 0 || st->row > limit ||
            (st->row > 0 && (op->n % st->row != 0 || op->y_col0 < 0 || op->y_stride < op->y_col0 + st->row ||
                             op->y_stride > limit || op->y_col0 > limit)))
            return tb_error_set(TB_ERR_SHAPE, "strided_copy op: rows of %lld elements at column %lld do not fit rows of "
                                "%lld (and must divide n=%lld)", (long long)st->row, (long long)op->y_col0,
                                (long long)op->y_stride, (long long)op->n);
        if (op->y == op->a || op->b || op->c || op->d)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "strided_copy op takes one input and must not write it");
        break;
    }
    case TB_ENGINE_OP_ATTENTION: {
        const tb_engine_attention *at = &op->attention;
        const int64_t dims[7] = {at->batch, at->q_heads, at->kv_heads, at->q_len, at->kv_len, at->head_dim, at->value_dim};
        bool ok = at->q_heads >= 1 && at->kv_heads >= 1 && at->q_heads % at->kv_heads == 0 && at->head_dim >= 1 &&
                  at->value_dim >= 1 && at->head_dim <= 512 && at->value_dim <= 512 && isfinite(at->scale);
        for (int d = 0; d < 7; d++)
            ok = ok && dims[d] >= 0 && dims[d] <= ((int64_t)1 << 31);
        for (int d = 0; d < 4; d++)
            ok = ok && at->mask_strides[d] >= 0 && at->mask_strides[d] <= limit;
        if (!ok)
            return tb_error_set(TB_ERR_SHAPE, "attention op: B=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld D=%lld Dv=%lld "
                                "(Hq a multiple of Hkv, D and Dv in 1..512, a finite scale)", (long long)at->batch,
                                (long long)at->q_heads, (long long)at->kv_heads, (long long)at->q_len,
                                (long long)at->kv_len, (long long)at->head_dim, (long long)at->value_dim);
        if (!op->b || !op->c)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention op: k (b) and v (c) are required");
        if (op->y == op->a || op->y == op->b || op->y == op->c || (op->d && op->y == op->d))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention op: the output must not alias an input");
        break;
    }
    case TB_ENGINE_OP_QMATMUL:
    case TB_ENGINE_OP_LLM_ROPE:
    case TB_ENGINE_OP_LLM_ATTENTION:
    case TB_ENGINE_OP_SILU_MUL:
        TB_TRY(validate_llm(op));
        break;
    case TB_ENGINE_OP_COPY:
        if (op->n < 0 || op->n > limit || op->a_offset < 0 || op->a_offset > limit || op->y_col0 < 0 || op->y_col0 > limit)
            return tb_error_set(TB_ERR_SHAPE, "copy op: n=%lld a_offset=%lld y_col0=%lld are out of range",
                                (long long)op->n, (long long)op->a_offset, (long long)op->y_col0);
        if (op->y == op->a)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "copy op: the output must not be the input buffer");
        break;
    case TB_ENGINE_OP_CONVERT16:
        if (op->code < 0 || op->code > 2)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "convert16 op: code %d is not 0 (widen), 1 (narrow) or 2 (round)",
                                op->code);
        if (op->format != TB_ENGINE_WEIGHT_BF16 && op->format != TB_ENGINE_WEIGHT_F16)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "convert16 op: format %d is not 1 (bf16) or 2 (f16)", op->format);
        if (op->n < 0 || op->n > limit)
            return tb_error_set(TB_ERR_SHAPE, "convert16 op: n=%lld is out of range", (long long)op->n);
        if (op->y == op->a && op->code != 2)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "convert16 op: only rounding (code 2) may run in place");
        if (op->b || op->c || op->d)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "convert16 op takes one input");
        break;
    default:
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "engine op: unknown kind %d", (int)op->kind);
    }
    size_t a_bytes, b_bytes, c_bytes, y_bytes;
    tb_engine_op_extents(op, &a_bytes, &b_bytes, &c_bytes, &y_bytes);
    TB_TRY(check_buffer(engine, op, "a", op->a, a_bytes));
    TB_TRY(check_buffer(engine, op, "y", op->y, y_bytes));
    if (op->kind == TB_ENGINE_OP_FUSED) /* every input present: ninputs of them */
        for (int k = 1; k < op->fused->ninputs; k++)
            if (!(k == 1 ? op->b : k == 2 ? op->c : op->d))
                return tb_error_set(TB_ERR_INVALID_ARGUMENT, "fused op: input %d of %d is missing", k, op->fused->ninputs);
    if (op->kind == TB_ENGINE_OP_BINARY || op->kind == TB_ENGINE_OP_MATMUL || op->kind == TB_ENGINE_OP_QMATMUL || op->b)
        TB_TRY(check_buffer(engine, op, "b", op->b, b_bytes));
    if (op->c)
        TB_TRY(check_buffer(engine, op, "c", op->c, c_bytes));
    if (op->d)
        TB_TRY(check_buffer(engine, op, "d", op->d, tb_engine_op_d_extent(op)));
    if (op->b && op->y == op->b && op->kind != TB_ENGINE_OP_BINARY && op->kind != TB_ENGINE_OP_FUSED)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s op: the output must not alias the weight", kind);
    if (op->kind == TB_ENGINE_OP_BINARY && op->y == op->b && op->b_len != op->n)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "binary op: the output may alias b only when b is full size");
    return TB_OK;
}
