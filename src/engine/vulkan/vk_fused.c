/* Fused elementwise chains on the vulkan engine: shaders/fused.comp is one SPIR-V module whose chain
 * (step kinds, op codes, registers, constants) comes in as specialization constants, so each distinct
 * chain gets its own pipeline, compiled by the driver for that chain alone (no shader compiler at run
 * time, and the chain's numerics are the unary and binary kernels' own GLSL). Pipelines are cached by
 * their specialization words. */
#ifdef TB_HAVE_VULKAN_HEADERS
#include <stdlib.h>
#include <string.h>

#include "engine/vulkan/spirv_shaders.h"
#include "engine/vulkan/vk_internal.h"

static void specialization_words(const tb_engine_fused *f, uint32_t words[TB_VK_FUSED_WORDS]) {
    memset(words, 0, sizeof(uint32_t) * TB_VK_FUSED_WORDS);
    words[0] = (uint32_t)f->nsteps;
    words[1] = (uint32_t)f->ninputs;
    for (int s = 0; s < f->nsteps; s++) {
        const tb_engine_fused_step *st = &f->steps[s];
        uint32_t *w = &words[8 + 8 * s];
        w[0] = (uint32_t)st->kind;
        w[1] = (uint32_t)st->code;
        w[2] = (uint32_t)st->lhs;
        w[3] = (uint32_t)st->rhs;
        memcpy(&w[4], &st->alpha, 4);
        memcpy(&w[5], &st->lo, 4);
        memcpy(&w[6], &st->hi, 4);
        memcpy(&w[7], &st->scalar, 4);
    }
}

void tb_vk_fused_release(void) {
    for (int i = 0; i < tb_vk.fused_count; i++)
        tb_vk.DestroyPipeline(tb_vk.device, tb_vk.fused[i].pipeline, NULL);
    free(tb_vk.fused);
    tb_vk.fused = NULL;
    tb_vk.fused_count = 0;
}

tb_status tb_vk_fused_pipeline_for(const tb_engine_op *op, VkPipeline *out) {
    uint32_t words[TB_VK_FUSED_WORDS];
    specialization_words(op->fused, words);
    for (int i = 0; i < tb_vk.fused_count; i++)
        if (memcmp(tb_vk.fused[i].words, words, sizeof words) == 0) {
            *out = tb_vk.fused[i].pipeline;
            return TB_OK;
        }
    const tb_spirv_shader *shader = tb_vk_find_shader("fused");
    if (!shader)
        return tb_error_set(TB_ERR_INTERNAL, "vulkan: no SPIR-V for kernel 'fused'");
    /* one entry per constant id: 0, 1, then 8 + 8 s + j for the steps (the unused steps' zeros too) */
    VkSpecializationMapEntry entries[2 + 8 * TB_ENGINE_FUSED_STEPS];
    uint32_t count = 0;
    for (uint32_t id = 0; id < TB_VK_FUSED_WORDS; id++)
        if (id < 2 || id >= 8)
            entries[count++] = (VkSpecializationMapEntry){.constantID = id, .offset = id * 4, .size = 4};
    VkSpecializationInfo special = {.mapEntryCount = count, .pMapEntries = entries, .dataSize = sizeof words,
                                    .pData = words};
    /* the cache grows past TB_VK_FUSED_CACHE_MAX within a run (run_locked empties it between runs) */
    tb_vk_fused_pipeline *grown = realloc(tb_vk.fused, sizeof *grown * (size_t)(tb_vk.fused_count + 1));
    if (!grown)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "vulkan: out of memory for the fused pipeline cache");
    tb_vk.fused = grown;
    VkPipeline pipeline;
    TB_TRY(tb_vk_create_pipeline(shader->words, shader->bytes, &special, &pipeline));
    tb_vk_fused_pipeline *entry = &tb_vk.fused[tb_vk.fused_count++];
    memcpy(entry->words, words, sizeof words);
    entry->pipeline = pipeline;
    tb_vk.info.specialized_pipelines++;
    *out = pipeline;
    return TB_OK;
}
#endif
