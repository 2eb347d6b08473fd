/* The canonical serialization of a graph and its BLAKE3 structural hash. The byte format is explicit
 * (little-endian fixed-width integers, doubles as their IEEE bits, params field by field in their
 * declared order), so it depends neither on struct padding nor on labels, and it never includes
 * tensor data: only ops, params, edges, layouts and outputs. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

typedef struct byte_writer {
    uint8_t *data;
    size_t size, capacity;
    bool failed;
} byte_writer;

static void put(byte_writer *w, const void *bytes, size_t n) {
    if (w->failed)
        return;
    if (w->size + n > w->capacity) {
        size_t capacity = w->capacity ? w->capacity * 2 : 1024;
        while (capacity < w->size + n)
            capacity *= 2;
        uint8_t *grown = realloc(w->data, capacity);
        if (!grown) {
            w->failed = true;
            return;
        }
        w->data = grown;
        w->capacity = capacity;
    }
    memcpy(w->data + w->size, bytes, n);
    w->size += n;
}

static void put_u32(byte_writer *w, uint32_t x) {
    uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    put(w, b, 4);
}

static void put_u64(byte_writer *w, uint64_t x) {
    put_u32(w, (uint32_t)x);
    put_u32(w, (uint32_t)(x >> 32));
}

static void put_f64(byte_writer *w, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    put_u64(w, bits);
}

static void put_info(byte_writer *w, const tb_value_info *info) {
    put_u32(w, (uint32_t)info->dtype);
    put_u32(w, (uint32_t)info->ndim);
    for (int d = 0; d < info->ndim; d++)
        put_u64(w, (uint64_t)info->shape[d]);
    for (int d = 0; d < info->ndim; d++)
        put_u64(w, (uint64_t)(info->shape[d] == 1 ? 0 : info->strides[d]));
}

static void put_params(byte_writer *w, const tb_node *node) {
    int count;
    const tb_param_field *fields = tb_graph_op_fields(node->op, &count);
    const char *base = (const char *)&node->params;
    for (int f = 0; f < count; f++) {
        for (int i = 0; i < fields[f].count; i++) {
            if (fields[f].kind == TB_PARAM_INT) {
                int64_t v;
                memcpy(&v, base + fields[f].offset + (size_t)i * sizeof v, sizeof v);
                put_u64(w, (uint64_t)v);
            } else {
                double v;
                memcpy(&v, base + fields[f].offset + (size_t)i * sizeof v, sizeof v);
                put_f64(w, v);
            }
        }
    }
}

static void put_program(byte_writer *w, const tb_ew_program *program) {
    put_u32(w, (uint32_t)program->ninstr);
    for (int i = 0; i < program->ninstr; i++) {
        const tb_ew_instr *in = &program->instr[i];
        put_u32(w, in->kind | (uint32_t)in->op << 8 | (uint32_t)in->reverse << 16);
        put_u32(w, (uint32_t)(uint16_t)in->dst | (uint32_t)(uint16_t)in->a << 16);
        put_u32(w, (uint32_t)(uint16_t)in->b | (uint32_t)(uint16_t)in->c << 16);
        put_f64(w, in->scalar);
        put_f64(w, in->alpha);
        put_f64(w, in->lo);
        put_f64(w, in->hi);
    }
}

tb_status tb_graph_serialize(const tb_graph *graph, uint8_t **bytes, size_t *size) {
    byte_writer w = {0};
    put(&w, "tbgraph1", 8);
    put_u32(&w, (uint32_t)graph->nnodes);
    put_u32(&w, (uint32_t)graph->nvalues);
    for (int n = 0; n < graph->nnodes; n++) {
        const tb_node *node = &graph->nodes[n];
        put_u32(&w, (uint32_t)node->op);
        put_u32(&w, (uint32_t)node->ninputs);
        for (int i = 0; i < node->ninputs; i++)
            put_u32(&w, (uint32_t)node->inputs[i]);
        put_params(&w, node);
        if (node->op == TB_OP_FUSED_ELEMENTWISE)
            put_program(&w, &graph->programs[node->params.fused.program]);
        put_u32(&w, (uint32_t)node->noutputs);
        for (int o = 0; o < node->noutputs; o++)
            put_info(&w, &graph->values[node->first_output + o].info);
    }
    put_u32(&w, (uint32_t)graph->noutputs);
    for (int o = 0; o < graph->noutputs; o++)
        put_u32(&w, (uint32_t)graph->outputs[o]);
    if (w.failed) {
        free(w.data);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "graph: out of memory serializing a graph");
    }
    *bytes = w.data;
    *size = w.size;
    return TB_OK;
}

tb_status tb_graph_hash(const tb_graph *graph, uint8_t out[32]) {
    uint8_t *bytes;
    size_t size;
    TB_TRY(tb_graph_serialize(graph, &bytes, &size));
    tb_blake3_hash(bytes, size, out);
    free(bytes);
    return TB_OK;
}
