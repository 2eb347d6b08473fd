/* Building a llama-family model from a HuggingFace folder: config.json gives the shapes, every checkpoint
 * tensor is checked against them, and the weights are converted once into their run format (f32, or
 * int8/int4 quantized in row chunks so that no full-size f32 copy of a large matrix ever exists). q/k/v
 * are fused into one [(Hq + 2 Hkv) D, C] matrix and gate/up into one [2 I, C] matrix, so a decode step
 * runs four matmuls per layer. The checkpoint is closed after loading: weights are held once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "llm/llm_internal.h"
#include "torchburn/engine.h"
#include "torchburn/alloc.h"
#include "torchburn/dtype.h"
#include "torchburn/tensor.h"

enum { CHUNK_ELEMENTS = 1 << 20 }; /* f32 elements converted per quantization step (4 MB) */

static const char *const quant_names[TB_LLM_QUANT_COUNT] = {"none", "int8", "int4"};

const char *tb_llm_quant_name(tb_llm_quant quant) {
    return (unsigned)quant < TB_LLM_QUANT_COUNT ? quant_names[quant] : "invalid";
}

tb_status tb_llm_quant_from_name(const char *name, tb_llm_quant *out) {
    for (int i = 0; name && i < TB_LLM_QUANT_COUNT; i++)
        if (strcmp(name, quant_names[i]) == 0) {
            *out = (tb_llm_quant)i;
            return TB_OK;
        }
    return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: unknown quant '%s' (expected 'int4', 'int8' or 'none')",
                        name ? name : "(null)");
}

static size_t round_up_size(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

tb_status tb_llm_model_alloc(tb_llm_model *model, int64_t bytes, void **out) {
    *out = NULL;
    const size_t size = round_up_size((size_t)(bytes > 0 ? bytes : 1), 64);
    if (model->arena && model->arena_size - model->arena_used >= size) {
        *out = model->arena + model->arena_used;
        model->arena_used += size;
        return TB_OK;
    }
    if (model->buffer_count == model->buffer_capacity) {
        int64_t capacity = model->buffer_capacity ? 2 * model->buffer_capacity : 64;
        llm_buffer *grown = realloc(model->buffers, (size_t)capacity * sizeof *grown);
        if (!grown)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory for the weight list");
        model->buffers = grown;
        model->buffer_capacity = capacity;
    }
    void *data = NULL;
    tb_status status = tb_alloc((size_t)(bytes > 0 ? bytes : 1), TB_ALLOC_DEFAULT, &data);
    if (status != TB_OK)
        return tb_error_prefix(status, "llm: weights (%lld bytes)", (long long)bytes);
    model->buffers[model->buffer_count++] = (llm_buffer){.data = data, .bytes = bytes};
    *out = data;
    return TB_OK;
}

int64_t tb_llm_matrix_bytes(const llm_matrix *m) {
    int64_t bytes = m->has_bias ? m->n * 4 : 0;
    if (m->format == TB_LLM_QUANT_NONE)
        return bytes + m->n * m->k * 4;
    return bytes + tb_quant_weight_bytes(&m->q);
}

tb_status tb_llm_matrix_bind(llm_matrix *m, const void *data, const float *scales, int64_t group_size) {
    tb_quant_type type = m->format == TB_LLM_QUANT_INT8 ? TB_QUANT_INT8 : TB_QUANT_INT4;
    return tb_quant_weight_init(type, m->n, m->k, type == TB_QUANT_INT8 ? m->k : group_size, data, scales, &m->q);
}

int64_t tb_llm_model_slots(tb_llm_model *model, llm_slot *slots) {
    int64_t count = 0;
#define ADD_MATRIX(m, ...)                                                   \
    do {                                                                     \
        if (slots) {                                                         \
            snprintf(slots[count].name, sizeof slots[count].name, __VA_ARGS__); \
            slots[count].matrix = (m);                                       \
            slots[count].vector = NULL;                                      \
        }                                                                    \
        count++;                                                             \
    } while (0)
#define ADD_VECTOR(v, len, ...)                                              \
    do {                                                                     \
        if (slots) {                                                         \
            snprintf(slots[count].name, sizeof slots[count].name, __VA_ARGS__); \
            slots[count].matrix = NULL;                                      \
            slots[count].vector = (v);                                       \
            slots[count].length = (len);                                     \
        }                                                                    \
        count++;                                                             \
    } while (0)
    ADD_MATRIX(&model->embed, "embed");
    for (int64_t i = 0; i < model->n_layers; i++) {
        llm_layer *layer = &model->layers[i];
        ADD_VECTOR(&layer->attn_norm, model->hidden, "layers.%lld.attn_norm", (long long)i);
        ADD_MATRIX(&layer->qkv, "layers.%lld.qkv", (long long)i);
        if (model->config.qk_norm) {
            ADD_VECTOR(&layer->q_norm, model->head_dim, "layers.%lld.q_norm", (long long)i);
            ADD_VECTOR(&layer->k_norm, model->head_dim, "layers.%lld.k_norm", (long long)i);
        }
        ADD_MATRIX(&layer->o, "layers.%lld.o", (long long)i);
        ADD_VECTOR(&layer->mlp_norm, model->hidden, "layers.%lld.mlp_norm", (long long)i);
        ADD_MATRIX(&layer->gate_up, "layers.%lld.gate_up", (long long)i);
        ADD_MATRIX(&layer->down, "layers.%lld.down", (long long)i);
    }
    ADD_VECTOR(&model->final_norm, model->hidden, "final_norm");
    if (!model->tied)
        ADD_MATRIX(&model->lm_head, "lm_head");
#undef ADD_MATRIX
#undef ADD_VECTOR
    return count;
}

/* Maps one region large enough for every weight of the model (slots known, nothing loaded yet). A failure
 * is not an error: allocations then come from tb_alloc. */
static void reserve_arena(tb_llm_model *model) {
    const int64_t count = tb_llm_model_slots(model, NULL);
    llm_slot *slots = calloc((size_t)count, sizeof *slots);
    if (!slots)
        return;
    tb_llm_model_slots(model, slots);
    size_t total = 0;
    for (int64_t i = 0; i < count; i++) {
        const llm_matrix *m = slots[i].matrix;
        if (!m) {
            total += round_up_size((size_t)slots[i].length * 4, 64);
            continue;
        }
        if (m->format == TB_LLM_QUANT_NONE) {
            total += round_up_size((size_t)(m->n * m->k) * 4, 64);
        } else {
            const bool int8 = m->format == TB_LLM_QUANT_INT8;
            total += round_up_size((size_t)(int8 ? m->n * m->k : m->n * m->k / 2), 64);
            total += round_up_size((size_t)(int8 ? m->n : m->n * (m->k / model->group_size)) * 4, 64);
        }
        if (m->has_bias)
            total += round_up_size((size_t)m->n * 4, 64);
    }
    free(slots);
    const size_t huge = (size_t)2 << 20;
    total = round_up_size(total, huge);
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return;
#ifdef MADV_HUGEPAGE
    (void)madvise(base, total, MADV_HUGEPAGE);
#endif
    model->arena = base;
    model->arena_size = total;
    model->arena_used = 0;
}

/* ---- shapes from the config ---- */

static void init_matrix(llm_matrix *m, int64_t n, int64_t k, tb_llm_quant format, bool has_bias) {
    memset(m, 0, sizeof *m);
    m->n = n;
    m->k = k;
    m->format = format;
    m->has_bias = has_bias;
}

static tb_status setup_model(tb_llm_model *model, tb_llm_quant quant, int64_t group_size) {
    const tb_hf_config *c = &model->config;
    model->quant = quant;
    model->group_size = quant == TB_LLM_QUANT_INT4 ? group_size : 0;
    model->n_layers = c->num_hidden_layers;
    model->hidden = c->hidden_size;
    model->n_heads = c->num_attention_heads;
    model->n_kv_heads = c->num_key_value_heads;
    model->head_dim = c->head_dim;
    model->intermediate = c->intermediate_size;
    model->vocab = c->vocab_size;
    model->norm_eps = (float)c->rms_norm_eps;
    model->tied = c->tie_word_embeddings;
    if (model->n_kv_heads < 1 || model->n_heads % model->n_kv_heads != 0)
        return tb_error_set(TB_ERR_FORMAT, "llm: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                            (long long)model->n_heads, (long long)model->n_kv_heads);
    const int64_t q_rows = model->n_heads * model->head_dim, kv_rows = model->n_kv_heads * model->head_dim;
    if (quant == TB_LLM_QUANT_INT4) {
        const int64_t ks[3] = {model->hidden, q_rows, model->intermediate};
        const char *names[3] = {"hidden_size", "num_attention_heads * head_dim", "intermediate_size"};
        for (int i = 0; i < 3; i++)
            if (ks[i] % group_size != 0)
                return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                    "llm: int4 with group_size %lld needs every input width to be a multiple of it, "
                                    "but %s is %lld (try group_size=32 or quant='int8')",
                                    (long long)group_size, names[i], (long long)ks[i]);
    }
    model->inv_freq = calloc((size_t)(model->head_dim / 2 + 1), sizeof(float));
    model->layers = calloc((size_t)model->n_layers, sizeof *model->layers);
    if (!model->inv_freq || !model->layers)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory");
    TB_TRY(tb_llm_rope_init(c, model->inv_freq, &model->rope_attention_factor));
    for (int64_t i = 0; i < model->n_layers; i++) {
        llm_layer *layer = &model->layers[i];
        init_matrix(&layer->qkv, q_rows + 2 * kv_rows, model->hidden, quant, c->attention_bias);
        init_matrix(&layer->o, model->hidden, q_rows, quant, c->attention_output_bias);
        init_matrix(&layer->gate_up, 2 * model->intermediate, model->hidden, quant, c->mlp_bias);
        init_matrix(&layer->down, model->hidden, model->intermediate, quant, c->mlp_bias);
        layer->window = c->sliding_window > 0 && i >= c->max_window_layers ? c->sliding_window : 0;
    }
    /* An untied embedding is only read one row per token, so int4 models keep it in int8: better inputs
     * for no decode bandwidth (the LM head, read every token, stays int4). */
    init_matrix(&model->embed, model->vocab, model->hidden,
                !model->tied && quant == TB_LLM_QUANT_INT4 ? TB_LLM_QUANT_INT8 : quant, false);
    init_matrix(&model->lm_head, model->vocab, model->hidden, quant, false);
    return TB_OK;
}

/* ---- loading from the checkpoint ---- */

typedef struct loader {
    tb_llm_model *model;
    tb_checkpoint_t *checkpoint;
    const tb_llm_load_options *options;
    int64_t done, total;
    float *chunk; /* CHUNK_ELEMENTS f32 (quantized formats only) */
} loader;

/* The checkpoint tensor `name` as a view, after checking it is a float tensor of the expected shape. */
static tb_status get_tensor(loader *l, const char *name, int ndim, const int64_t *shape, tb_tensor *out) {
    tb_safetensors_info info;
    if (tb_checkpoint_info(l->checkpoint, name, &info) != TB_OK)
        return tb_error_set(TB_ERR_FORMAT, "llm: the checkpoint has no tensor '%s' (needed by model_type '%s')", name,
                            tb_hf_model_type_name(l->model->config.model_type));
    bool same = info.ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = info.shape[d] == shape[d];
    if (!same) {
        char have[96], want[96];
        return tb_error_set(TB_ERR_SHAPE, "llm: checkpoint tensor '%s' has shape %s but config.json implies %s", name,
                            tb_shape_string(info.ndim, info.shape, have, sizeof have),
                            tb_shape_string(ndim, shape, want, sizeof want));
    }
    if (info.dtype != TB_SAFETENSORS_F32 && info.dtype != TB_SAFETENSORS_F16 && info.dtype != TB_SAFETENSORS_BF16)
        return tb_error_set(TB_ERR_FORMAT, "llm: checkpoint tensor '%s' has dtype %s (expected F32, F16 or BF16)", name,
                            tb_safetensors_dtype_name(info.dtype));
    return tb_checkpoint_get(l->checkpoint, name, out);
}

/* Progress, and the load's cancel point (one per chunk of a tensor). */
static tb_status report(loader *l, int64_t elements) {
    l->done += elements;
    if (l->options->progress)
        l->options->progress(l->options->progress_context, l->done, l->total);
    return tb_interrupt_check("llm: loading the model");
}

/* Rows [row0, row0 + rows) of a contiguous float tensor of width k, as f32 into dst. */
static void convert_rows(const tb_tensor *t, int64_t row0, int64_t rows, int64_t k, float *dst) {
    const size_t elem = tb_dtype_size(t->dtype);
    const char *src = (const char *)tb_tensor_data(t) + (size_t)(row0 * k) * elem;
    tb_dtype_table[t->dtype].to_f32(src, dst, rows * k);
}

/* One source tensor of a fused matrix. */
typedef struct matrix_part {
    char name[128];
    int64_t rows;
} matrix_part;

static tb_status load_matrix(loader *l, llm_matrix *m, const matrix_part *parts, int part_count, const char *const *bias_names) {
    tb_llm_model *model = l->model;
    void *data = NULL, *scales = NULL;
    const int64_t n = m->n, k = m->k, group = model->group_size;
    if (m->format == TB_LLM_QUANT_NONE) {
        TB_TRY(tb_llm_model_alloc(model, n * k * 4, &data));
        m->f32 = data;
    } else {
        const bool int8 = m->format == TB_LLM_QUANT_INT8;
        TB_TRY(tb_llm_model_alloc(model, int8 ? n * k : n * k / 2, &data));
        TB_TRY(tb_llm_model_alloc(model, int8 ? n * 4 : n * (k / group) * 4, &scales));
        TB_TRY(tb_llm_matrix_bind(m, data, scales, group));
    }
    int64_t row = 0;
    for (int p = 0; p < part_count; p++) {
        tb_tensor t = {0};
        const int64_t shape[2] = {parts[p].rows, k};
        TB_TRY(get_tensor(l, parts[p].name, 2, shape, &t));
        const int64_t chunk_rows = CHUNK_ELEMENTS / k > 0 ? CHUNK_ELEMENTS / k : 1;
        tb_status status = TB_OK;
        for (int64_t r = 0; r < parts[p].rows && status == TB_OK; r += chunk_rows) {
            const int64_t rows = parts[p].rows - r < chunk_rows ? parts[p].rows - r : chunk_rows;
            const int64_t out_row = row + r;
            if (m->format == TB_LLM_QUANT_NONE) {
                convert_rows(&t, r, rows, k, (float *)data + out_row * k);
            } else {
                if (k > CHUNK_ELEMENTS) { /* a single row wider than the chunk: convert it in place */
                    status = tb_error_set(TB_ERR_UNSUPPORTED, "llm: rows of %lld elements are too wide to quantize",
                                          (long long)k);
                    break;
                }
                convert_rows(&t, r, rows, k, l->chunk);
                if (m->format == TB_LLM_QUANT_INT8)
                    status = tb_quantize_int8(l->chunk, rows, k, (int8_t *)data + out_row * k, (float *)scales + out_row);
                else
                    status = tb_llm_quantize_int4(l->chunk, rows, k, group, (uint8_t *)data + out_row * k / 2,
                                                  (float *)scales + out_row * (k / group));
                if (status != TB_OK)
                    status = tb_error_prefix(status, "llm: quantizing '%s'", parts[p].name);
            }
            if (status == TB_OK)
                status = report(l, rows * k);
        }
        tb_tensor_release(&t);
        TB_TRY(status);
        row += parts[p].rows;
    }
    if (m->has_bias) {
        float *bias = NULL;
        TB_TRY(tb_llm_model_alloc(model, n * 4, (void **)&bias));
        int64_t offset = 0;
        for (int p = 0; p < part_count; p++) {
            tb_tensor t = {0};
            const int64_t shape[1] = {parts[p].rows};
            TB_TRY(get_tensor(l, bias_names[p], 1, shape, &t));
            convert_rows(&t, 0, 1, parts[p].rows, bias + offset);
            tb_tensor_release(&t);
            offset += parts[p].rows;
        }
        m->bias = bias;
    }
    return TB_OK;
}

static tb_status load_vector(loader *l, const char *name, int64_t length, const float **out) {
    tb_tensor t = {0};
    const int64_t shape[1] = {length};
    TB_TRY(get_tensor(l, name, 1, shape, &t));
    float *v = NULL;
    tb_status status = tb_llm_model_alloc(l->model, length * 4, (void **)&v);
    if (status == TB_OK)
        convert_rows(&t, 0, 1, length, v);
    tb_tensor_release(&t);
    *out = v;
    return status;
}

static tb_status load_from_checkpoint(tb_llm_model *model, const char *model_dir, const tb_llm_load_options *options) {
    loader l = {.model = model, .options = options};
    TB_TRY(tb_checkpoint_open(model_dir, &l.checkpoint));
    tb_status status = TB_OK;
    if (model->quant != TB_LLM_QUANT_NONE)
        status = tb_alloc((size_t)CHUNK_ELEMENTS * sizeof(float), TB_ALLOC_DEFAULT, (void **)&l.chunk);
    /* total elements, for progress */
    const int64_t layer_elements = model->layers[0].qkv.n * model->hidden + model->layers[0].o.n * model->layers[0].o.k +
                                   model->layers[0].gate_up.n * model->hidden + model->hidden * model->intermediate;
    l.total = model->n_layers * layer_elements + (model->tied ? 1 : 2) * model->vocab * model->hidden;
    const int64_t q_rows = model->n_heads * model->head_dim, kv_rows = model->n_kv_heads * model->head_dim;
    const char *lm = "lm_head.weight";
    if (status == TB_OK) {
        matrix_part part = {.name = "model.embed_tokens.weight", .rows = model->vocab};
        status = load_matrix(&l, &model->embed, &part, 1, NULL);
    }
    for (int64_t i = 0; i < model->n_layers && status == TB_OK; i++) {
        llm_layer *layer = &model->layers[i];
        char prefix[64], name[128], bias_q[128], bias_k[128], bias_v[128], bias_o[128];
        snprintf(prefix, sizeof prefix, "model.layers.%lld.", (long long)i);
        snprintf(name, sizeof name, "%sinput_layernorm.weight", prefix);
        status = load_vector(&l, name, model->hidden, &layer->attn_norm);
        if (status != TB_OK)
            break;
        matrix_part qkv[3] = {{.rows = q_rows}, {.rows = kv_rows}, {.rows = kv_rows}};
        snprintf(qkv[0].name, sizeof qkv[0].name, "%sself_attn.q_proj.weight", prefix);
        snprintf(qkv[1].name, sizeof qkv[1].name, "%sself_attn.k_proj.weight", prefix);
        snprintf(qkv[2].name, sizeof qkv[2].name, "%sself_attn.v_proj.weight", prefix);
        snprintf(bias_q, sizeof bias_q, "%sself_attn.q_proj.bias", prefix);
        snprintf(bias_k, sizeof bias_k, "%sself_attn.k_proj.bias", prefix);
        snprintf(bias_v, sizeof bias_v, "%sself_attn.v_proj.bias", prefix);
        const char *qkv_bias[3] = {bias_q, bias_k, bias_v};
        if ((status = load_matrix(&l, &layer->qkv, qkv, 3, qkv_bias)) != TB_OK)
            break;
        if (model->config.qk_norm) {
            snprintf(name, sizeof name, "%sself_attn.q_norm.weight", prefix);
            if ((status = load_vector(&l, name, model->head_dim, &layer->q_norm)) != TB_OK)
                break;
            snprintf(name, sizeof name, "%sself_attn.k_norm.weight", prefix);
            if ((status = load_vector(&l, name, model->head_dim, &layer->k_norm)) != TB_OK)
                break;
        }
        matrix_part o = {.rows = model->hidden};
        snprintf(o.name, sizeof o.name, "%sself_attn.o_proj.weight", prefix);
        snprintf(bias_o, sizeof bias_o, "%sself_attn.o_proj.bias", prefix);
        const char *o_bias[1] = {bias_o};
        if ((status = load_matrix(&l, &layer->o, &o, 1, o_bias)) != TB_OK)
            break;
        snprintf(name, sizeof name, "%spost_attention_layernorm.weight", prefix);
        if ((status = load_vector(&l, name, model->hidden, &layer->mlp_norm)) != TB_OK)
            break;
        matrix_part gate_up[2] = {{.rows = model->intermediate}, {.rows = model->intermediate}};
        snprintf(gate_up[0].name, sizeof gate_up[0].name, "%smlp.gate_proj.weight", prefix);
        snprintf(gate_up[1].name, sizeof gate_up[1].name, "%smlp.up_proj.weight", prefix);
        snprintf(bias_q, sizeof bias_q, "%smlp.gate_proj.bias", prefix);
        snprintf(bias_k, sizeof bias_k, "%smlp.up_proj.bias", prefix);
        const char *gate_up_bias[2] = {bias_q, bias_k};
        if ((status = load_matrix(&l, &layer->gate_up, gate_up, 2, gate_up_bias)) != TB_OK)
            break;
        matrix_part down = {.rows = model->hidden};
        snprintf(down.name, sizeof down.name, "%smlp.down_proj.weight", prefix);
        snprintf(bias_q, sizeof bias_q, "%smlp.down_proj.bias", prefix);
        const char *down_bias[1] = {bias_q};
        status = load_matrix(&l, &layer->down, &down, 1, down_bias);
    }
    if (status == TB_OK)
        status = load_vector(&l, "model.norm.weight", model->hidden, &model->final_norm);
    if (status == TB_OK && !model->tied) {
        matrix_part part = {.rows = model->vocab};
        snprintf(part.name, sizeof part.name, "%s", lm);
        status = load_matrix(&l, &model->lm_head, &part, 1, NULL);
    }
    tb_free(l.chunk);
    tb_checkpoint_close(l.checkpoint);
    return status;
}

/* ---- info ---- */

static void compute_info(tb_llm_model *model) {
    tb_llm_model_info *info = &model->info;
    info->quant = model->quant;
    info->group_size = model->group_size;
    int64_t parameters = 0, weight_bytes = 0, per_token = 0;
    llm_slot *slots = NULL;
    int64_t count = tb_llm_model_slots(model, NULL);
    slots = calloc((size_t)count, sizeof *slots);
    if (slots) {
        tb_llm_model_slots(model, slots);
        for (int64_t i = 0; i < count; i++) {
            if (slots[i].matrix) {
                const llm_matrix *m = slots[i].matrix;
                const int64_t bytes = tb_llm_matrix_bytes(m);
                parameters += m->n * m->k + (m->has_bias ? m->n : 0);
                weight_bytes += bytes;
                /* the embedding is read one row per token, unless it is also the LM head */
                per_token += m == &model->embed ? (model->tied ? bytes : bytes / m->n) : bytes;
            } else {
                parameters += slots[i].length;
                weight_bytes += slots[i].length * 4;
                per_token += slots[i].length * 4;
            }
        }
        free(slots);
    }
    info->parameters = parameters;
    info->weight_bytes = weight_bytes;
    info->decode_bytes_per_token = per_token;
}

/* ---- public ---- */

tb_status tb_llm_model_load(const char *model_dir, const tb_llm_load_options *options, tb_llm_model **out) {
    *out = NULL;
    if (!model_dir || !options)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: model_dir and options are required");
    if ((unsigned)options->quant >= TB_LLM_QUANT_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: unknown quant %d", (int)options->quant);
    int64_t group_size = options->group_size ? options->group_size : 64;
    if (options->quant == TB_LLM_QUANT_INT4 && group_size != 32 && group_size != 64 && group_size != 128 &&
        group_size != 256)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: group_size must be 32, 64, 128 or 256, got %lld",
                            (long long)group_size);
    tb_llm_model *model = calloc(1, sizeof *model);
    if (!model)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory");
    tb_status status = tb_hf_config_load(model_dir, &model->config);
    model->exact_activations = options->exact_activations;
    if (status == TB_OK)
        status = setup_model(model, options->quant, group_size);
    if (status == TB_OK)
        reserve_arena(model);
    llm_cache_result cached = LLM_CACHE_ABSENT;
    char why[192] = "";
    const bool use_cache = status == TB_OK && options->quant != TB_LLM_QUANT_NONE && options->cache_path &&
                           options->cache_path[0];
    if (use_cache)
        status = tb_llm_cache_try_load(model, options->cache_path, options->cache_key ? options->cache_key : "", &cached,
                                       why, sizeof why);
    const bool hit = cached == LLM_CACHE_LOADED;
    if (status == TB_OK && !hit)
        status = load_from_checkpoint(model, model_dir, options);
    if (status == TB_OK && model->tied)
        model->lm_head = model->embed;
    if (status == TB_OK && use_cache) {
        if (hit) {
            model->info.cache_state = TB_LLM_CACHE_HIT;
        } else if (tb_llm_cache_save(model, options->cache_path, options->cache_key ? options->cache_key : "") == TB_OK) {
            model->info.cache_state = cached == LLM_CACHE_DAMAGED ? TB_LLM_CACHE_REBUILT : TB_LLM_CACHE_WRITTEN;
            if (cached == LLM_CACHE_DAMAGED)
                snprintf(model->info.cache_message, sizeof model->info.cache_message, "%s was damaged (%s)",
                         options->cache_path, why);
        } else {
            model->info.cache_state = TB_LLM_CACHE_WRITE_FAILED;
            snprintf(model->info.cache_message, sizeof model->info.cache_message, "%s", tb_error_message());
            tb_error_clear();
        }
    }
    if (status != TB_OK) {
        tb_llm_model_free(model);
        return status;
    }
    compute_info(model);
    *out = model;
    return TB_OK;
}

void tb_llm_model_free(tb_llm_model *model) {
    if (!model)
        return;
    tb_llm_gpu_model_free(model->gpu);
    for (int64_t i = 0; i < model->buffer_count; i++)
        tb_free(model->buffers[i].data);
    free(model->buffers);
    if (model->arena)
        munmap(model->arena, model->arena_size);
    free(model->layers);
    free(model->inv_freq);
    free(model);
}

const tb_hf_config *tb_llm_model_config(const tb_llm_model *model) { return &model->config; }

void tb_llm_model_get_info(const tb_llm_model *model, tb_llm_model_info *out) { *out = model->info; }

tb_status tb_llm_model_to_engine(tb_llm_model *model, const char *engine_name) {
    const tb_engine *engine = tb_engine_find(engine_name ? engine_name : "");
    if (!engine || engine == &tb_engine_native_cpu || engine == &tb_engine_reference)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: the forward runs on the CPU or on 'vulkan', not on engine '%s'",
                            engine_name ? engine_name : "(null)");
    if (model->gpu)
        return TB_OK;
    return tb_llm_gpu_model_new(model, engine, &model->gpu);
}

bool tb_llm_model_on_gpu(const tb_llm_model *model) { return model->gpu != NULL; }

tb_status tb_llm_embed_row(const tb_llm_model *model, int32_t token, float *out) {
    const llm_matrix *e = &model->embed;
    if (token < 0 || token >= e->n)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: token id %d is outside the vocabulary [0, %lld)", (int)token,
                            (long long)e->n);
    if (e->format == TB_LLM_QUANT_NONE) {
        memcpy(out, e->f32 + (int64_t)token * e->k, (size_t)e->k * sizeof(float));
        return TB_OK;
    }
    const unsigned char *row = (const unsigned char *)e->q.data + (int64_t)token * e->q.row_bytes;
    const float *scales = e->q.scales + (int64_t)token * e->q.scales_per_row;
    if (e->format == TB_LLM_QUANT_INT8)
        return tb_dequantize_int8((const int8_t *)row, scales, 1, e->k, out);
    return tb_dequantize_int4_grouped(row, scales, 1, e->k, e->q.group_size, out);
}
