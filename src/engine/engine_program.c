/* Engine programs after their build (engine_graph.c): the fusion of elementwise chains, then running a
 * program as one batch (upload the inputs, run every op, download the outputs: one GPU submission). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/engine_program.h"

/* Where a fused op reads buffer `buffer` elementwise (len n, inner 1): its input slot, or -1. */
static int full_input_slot(const program_op *po, int buffer) {
    const int slots[TB_ENGINE_FUSED_INPUTS] = {po->a, po->b, po->c, po->d};
    for (int k = 0; k < po->chain.ninputs; k++)
        if (slots[k] == buffer && po->chain.len[k] == po->op.n && po->chain.inner[k] == 1)
            return k;
    return -1;
}

/* Appends op `e` to the chain `g` when it fits (registers, steps, inputs): e's reads of g's result
 * become reads of g's last register, its other inputs join g's (shared where equal). */
static bool append_to_chain(program_op *g, const program_op *e) {
    tb_engine_fused merged = g->chain;
    int slots[TB_ENGINE_FUSED_INPUTS] = {g->a, g->b, g->c, g->d};
    const int e_slots[TB_ENGINE_FUSED_INPUTS] = {e->a, e->b, e->c, e->d};
    const tb_engine_fused *ef = &e->chain;
    if (merged.nsteps + ef->nsteps > TB_ENGINE_FUSED_STEPS)
        return false;
    int reg_of[TB_ENGINE_FUSED_INPUTS + TB_ENGINE_FUSED_STEPS];
    const int g_result = TB_ENGINE_FUSED_INPUTS + merged.nsteps - 1;
    for (int k = 0; k < ef->ninputs; k++) {
        if (e_slots[k] == g->y) { /* g's result, read elementwise (checked by the caller) */
            reg_of[k] = g_result;
            continue;
        }
        int found = -1;
        for (int j = 0; j < merged.ninputs && found < 0; j++)
            if (slots[j] == e_slots[k] && merged.len[j] == ef->len[k] && merged.inner[j] == ef->inner[k])
                found = j;
        if (found < 0) {
            if (merged.ninputs == TB_ENGINE_FUSED_INPUTS)
                return false;
            found = merged.ninputs++;
            slots[found] = e_slots[k];
            merged.len[found] = ef->len[k];
            merged.inner[found] = ef->inner[k];
        }
        reg_of[k] = found;
    }
    for (int s = 0; s < ef->nsteps; s++)
        reg_of[TB_ENGINE_FUSED_INPUTS + s] = TB_ENGINE_FUSED_INPUTS + merged.nsteps + s;
    for (int s = 0; s < ef->nsteps; s++) {
        tb_engine_fused_step st = ef->steps[s];
        st.lhs = reg_of[st.lhs];
        if (st.kind == TB_ENGINE_STEP_BINARY)
            st.rhs = reg_of[st.rhs];
        merged.steps[merged.nsteps + s] = st;
    }
    merged.nsteps += ef->nsteps;
    g->chain = merged;
    g->a = slots[0];
    g->b = merged.ninputs > 1 ? slots[1] : -1;
    g->c = merged.ninputs > 2 ? slots[2] : -1;
    g->d = merged.ninputs > 3 ? slots[3] : -1;
    g->y = e->y;
    return true;
}

/* Joins each fused op with the fused op right after it when that one is the only reader of its
 * result, reads it elementwise and covers the same n: the result then stays in a register (no buffer,
 * no dispatch). Graph outputs, inputs and constants are never folded away. */
tb_status tb_engine_program_fuse_chains(tb_engine_program *p) {
    int *readers = calloc((size_t)p->nbuffers + 1, sizeof(int));
    if (!readers)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    for (int i = 0; i < p->nops; i++) {
        const int operands[4] = {p->ops[i].a, p->ops[i].b, p->ops[i].c, p->ops[i].d};
        for (int r = 0; r < 4; r++)
            if (operands[r] >= 0)
                readers[operands[r]]++;
    }
    for (int o = 0; o < p->noutputs; o++)
        readers[p->output_buffers[o]] += 1 << 20;
    for (int i = 0; i < p->ninputs; i++)
        readers[p->input_buffers[i]] += 1 << 20;
    for (int f = 0; f < p->nfills; f++)
        readers[p->fills[f].buffer] += 1 << 20;
    for (int s = 0; s < p->nslices; s++)
        readers[p->slices[s].buffer] += 1 << 20;
    int kept = 0;
    for (int i = 0; i < p->nops; i++) {
        program_op *e = &p->ops[i];
        if (kept > 0) {
            program_op *g = &p->ops[kept - 1];
            int reads = 0;
            const int e_slots[4] = {e->a, e->b, e->c, e->d};
            for (int r = 0; r < 4; r++)
                reads += e_slots[r] == g->y;
            if (g->op.kind == TB_ENGINE_OP_FUSED && e->op.kind == TB_ENGINE_OP_FUSED && e->op.n == g->op.n && reads > 0 &&
                readers[g->y] == reads && full_input_slot(e, g->y) >= 0 && e->y != g->a && e->y != g->b &&
                e->y != g->c && e->y != g->d) {
                bool elementwise = true; /* every read of g's result is at the element's own index */
                for (int k = 0; k < e->chain.ninputs; k++)
                    if (e_slots[k] == g->y && (e->chain.len[k] != e->op.n || e->chain.inner[k] != 1))
                        elementwise = false;
                program_op joined = *g;
                if (elementwise && append_to_chain(&joined, e)) {
                    /* the chain's new inputs are now read by it, and g's result by nobody */
                    *g = joined;
                    continue;
                }
            }
        }
        p->ops[kept++] = *e;
    }
    p->nops = kept;
    free(readers);
    return TB_OK;
}

void tb_engine_program_free(tb_engine_program *p) {
    if (!p)
        return;
    free(p->buffer_bytes);
    free(p->input_buffers);
    free(p->output_buffers);
    free(p->input_bytes);
    free(p->output_bytes);
    free(p->ops);
    free(p->fills);
    free(p->slices);
    free(p->buffer_unused);
    free(p);
}

int tb_engine_program_num_ops(const tb_engine_program *program) { return program->nops; }

void tb_engine_program_copy_bytes(const tb_engine_program *program, size_t *to_engine, size_t *from_engine) {
    *to_engine = *from_engine = 0;
    for (int i = 0; i < program->ninputs; i++)
        *to_engine += program->buffer_unused[program->input_buffers[i]] ? 0 : program->input_bytes[i];
    for (int s = 0; s < program->nslices; s++)
        *to_engine += program->slices[s].bytes;
    for (int f = 0; f < program->nfills; f++)
        *to_engine += program->buffer_bytes[program->fills[f].buffer];
    for (int o = 0; o < program->noutputs; o++)
        *from_engine += program->output_bytes[o];
}

tb_status tb_engine_program_run(const tb_engine_program *p, void *const *inputs, void *const *outputs) {
    const tb_engine *engine = p->engine;
    tb_engine_buffer **buffers = calloc((size_t)p->nbuffers + 1, sizeof *buffers);
    tb_engine_op *ops = malloc(sizeof *ops * (size_t)(p->nops + 1));
    tb_engine_download *downloads = malloc(sizeof *downloads * (size_t)(p->noutputs + 1));
    tb_status status = (buffers && ops && downloads) ? TB_OK : tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
    for (int i = 0; status == TB_OK && i < p->nbuffers; i++)
        if (!p->buffer_unused[i])
            status = engine->buffer_alloc(p->buffer_bytes[i], &buffers[i]);
    for (int i = 0; status == TB_OK && i < p->ninputs; i++)
        if (!p->buffer_unused[p->input_buffers[i]])
            status = engine->buffer_upload(buffers[p->input_buffers[i]], 0, inputs[i], p->input_bytes[i]);
    for (int s = 0; status == TB_OK && s < p->nslices; s++)
        status = engine->buffer_upload(buffers[p->slices[s].buffer], 0, (const char *)inputs[p->slices[s].input] +
                                       p->slices[s].offset, p->slices[s].bytes);
    for (int f = 0; status == TB_OK && f < p->nfills; f++) {
        tb_engine_buffer *buffer = buffers[p->fills[f].buffer];
        size_t count = buffer->bytes / sizeof(float);
        float *host = malloc(sizeof(float) * (count ? count : 1));
        if (!host) {
            status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "engine program: out of memory");
            break;
        }
        for (size_t e = 0; e < count; e++)
            host[e] = p->fills[f].value;
        status = engine->buffer_upload(buffer, 0, host, count * sizeof(float));
        free(host);
    }
    if (status == TB_OK) {
        for (int i = 0; i < p->nops; i++) {
            const program_op *po = &p->ops[i];
            ops[i] = po->op;
            ops[i].a = po->a >= 0 ? buffers[po->a] : NULL;
            ops[i].b = po->b >= 0 ? buffers[po->b] : NULL;
            ops[i].c = po->c >= 0 ? buffers[po->c] : NULL;
            ops[i].d = po->d >= 0 ? buffers[po->d] : NULL;
            ops[i].fused = po->op.kind == TB_ENGINE_OP_FUSED ? &po->chain : NULL;
            ops[i].y = buffers[po->y];
        }
        for (int o = 0; o < p->noutputs; o++)
            downloads[o] = (tb_engine_download){.buffer = buffers[p->output_buffers[o]], .bytes = p->output_bytes[o],
                                                .dst = outputs[o]};
        /* inputs, ops and outputs: one submission on an engine that batches */
        status = tb_engine_run_download(engine, ops, p->nops, downloads, p->noutputs);
    }
    for (int i = 0; buffers && i < p->nbuffers; i++)
        engine->buffer_free(buffers[i]);
    free(buffers);
    free(ops);
    free(downloads);
    return status;
}
