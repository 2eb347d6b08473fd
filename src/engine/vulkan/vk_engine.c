/* The vulkan engine's operations: buffers (recycled through a small pool), compute pipelines built on
 * first use from the committed SPIR-V, and run() / run_download(), which record the queued uploads, a
 * whole op sequence (a barrier between consecutive ops) and the downloads into one command buffer and
 * submit it once.
 *
 * Memory, two modes fixed at init (tb_vk.staging):
 *  - mapped (no memory type is device-local without being host-visible: integrated GPUs, lavapipe):
 *    buffers take HOST_VISIBLE + HOST_COHERENT memory, preferring DEVICE_LOCAL, mapped once, so uploads
 *    and downloads are memcpy;
 *  - staging (a discrete GPU: some DEVICE_LOCAL type the host cannot map; or forced with
 *    TORCHBURN_VULKAN_FORCE_STAGING=1, how lavapipe tests it): buffers take device-local memory and
 *    every copy goes through the staging buffer (vk_staging.c): uploads are queued into the next run's
 *    submission, run_download's downloads are recorded after the ops of the same submission.
 * Limits honoured: every bound operand must fit maxStorageBufferRange (larger ones are refused by
 * supports_op; the LLM splits its weights to fit); dispatch sizes are capped at
 * maxComputeWorkGroupCount and the shaders loop over the rest (grid-stride). */
#ifdef TB_HAVE_VULKAN_HEADERS
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/vulkan/spirv_shaders.h"
#include "engine/vulkan/vk_internal.h"
#include "kernels/elementwise.h"

enum { POOL_MAX_BYTES = 256 << 20 };
/* matmuls with at most this many rows (decode-time GEMV) take shaders/gemv.comp: a 64x64 tile would
 * leave most of its threads idle */
enum { GEMV_MAX_ROWS = 4 };

void tb_vk_record_destroy(tb_vk_record *record) {
    if (record->vk.memory) {
        if (record->header.host)
            tb_vk.UnmapMemory(tb_vk.device, record->vk.memory);
        tb_vk.FreeMemory(tb_vk.device, record->vk.memory, NULL);
    }
    if (record->vk.buffer)
        tb_vk.DestroyBuffer(tb_vk.device, record->vk.buffer, NULL);
    free(record);
}

void tb_vk_pool_drain_locked(void) {
    for (int i = 0; i < tb_vk.pool_count; i++)
        tb_vk_record_destroy((tb_vk_record *)tb_vk.pool[i]);
    tb_vk.pool_count = 0;
    tb_vk.pool_bytes = 0;
    tb_vk_staging_release();
}

static bool pick_memory_type(uint32_t allowed, tb_vk_memory_use use, uint32_t *out) {
    VkPhysicalDeviceMemoryProperties memory;
    tb_vk.GetPhysicalDeviceMemoryProperties(tb_vk.physical, &memory);
    const VkMemoryPropertyFlags mapped = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const VkMemoryPropertyFlags need = use == TB_VK_MEMORY_DEVICE ? 0 : mapped;
    int best = -1, best_score = -1;
    for (uint32_t t = 0; t < memory.memoryTypeCount; t++) {
        VkMemoryPropertyFlags flags = memory.memoryTypes[t].propertyFlags;
        if (!(allowed & (1u << t)) || (flags & need) != need)
            continue;
        const bool local = flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, visible = flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
        int score = 1;
        if (use == TB_VK_MEMORY_DEVICE)
            score = local ? (visible ? 2 : 3) : 1; /* VRAM the host cannot map first (not the small BAR window) */
        else if (use == TB_VK_MEMORY_MAPPED)
            score = local ? 2 : 1;
        else
            score = (flags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 2 : 1;
        if (score > best_score) {
            best = (int)t;
            best_score = score;
        }
    }
    if (best < 0)
        return false;
    *out = (uint32_t)best;
    return true;
}

tb_status tb_vk_record_create(VkDeviceSize capacity, tb_vk_memory_use use, tb_vk_record **out) {
    tb_vk_record *record = calloc(1, sizeof *record);
    if (!record)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "vulkan: out of memory for a buffer record");
    VkBufferCreateInfo create = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = capacity,
                                 .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                          VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                 .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult result = tb_vk.CreateBuffer(tb_vk.device, &create, NULL, &record->vk.buffer);
    if (result != VK_SUCCESS) {
        free(record);
        return tb_vk_fail(result, "vkCreateBuffer");
    }
    VkMemoryRequirements requirements;
    tb_vk.GetBufferMemoryRequirements(tb_vk.device, record->vk.buffer, &requirements);
    uint32_t type;
    if (!pick_memory_type(requirements.memoryTypeBits, use, &type)) {
        tb_vk_record_destroy(record);
        return tb_error_set(TB_ERR_UNSUPPORTED, "vulkan: the device has no %s memory for buffers",
                            use == TB_VK_MEMORY_DEVICE ? "usable" : "host-visible coherent");
    }
    VkMemoryAllocateInfo allocate = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                     .allocationSize = requirements.size, .memoryTypeIndex = type};
    result = tb_vk.AllocateMemory(tb_vk.device, &allocate, NULL, &record->vk.memory);
    if (result != VK_SUCCESS) {
        record->vk.memory = VK_NULL_HANDLE;
        tb_vk_record_destroy(record);
        return tb_vk_fail(result, "vkAllocateMemory");
    }
    if ((result = tb_vk.BindBufferMemory(tb_vk.device, record->vk.buffer, record->vk.memory, 0)) != VK_SUCCESS ||
        (use != TB_VK_MEMORY_DEVICE &&
         (result = tb_vk.MapMemory(tb_vk.device, record->vk.memory, 0, VK_WHOLE_SIZE, 0, &record->header.host)) !=
             VK_SUCCESS)) {
        tb_vk.FreeMemory(tb_vk.device, record->vk.memory, NULL);
        record->vk.memory = VK_NULL_HANDLE;
        record->header.host = NULL;
        tb_vk_record_destroy(record);
        return tb_vk_fail(result, "binding or mapping buffer memory");
    }
    record->vk.capacity = capacity;
    *out = record;
    return TB_OK;
}

static tb_status vk_init(void) {
    pthread_mutex_lock(&tb_vk_lock);
    tb_status status = tb_vk_init_locked();
    pthread_mutex_unlock(&tb_vk_lock);
    return status;
}

static void vk_device_info(tb_engine_device_info *out) {
    pthread_mutex_lock(&tb_vk_lock);
    if (!tb_vk.attempted) {
        tb_vk_init_locked();
        tb_error_clear();
    }
    *out = tb_vk.info;
    pthread_mutex_unlock(&tb_vk_lock);
}

static tb_status vk_alloc(size_t bytes, tb_engine_buffer **out) {
    *out = NULL;
    pthread_mutex_lock(&tb_vk_lock);
    tb_status status = tb_vk_init_locked();
    tb_vk_record *record = NULL;
    if (status == TB_OK) {
        VkDeviceSize capacity = ((VkDeviceSize)(bytes < 16 ? 16 : bytes) + 255) & ~(VkDeviceSize)255;
        int best = -1;
        for (int i = 0; i < tb_vk.pool_count; i++) {
            VkDeviceSize have = ((tb_vk_record *)tb_vk.pool[i])->vk.capacity;
            if (have >= capacity && have <= 2 * capacity + 4096 &&
                (best < 0 || have < ((tb_vk_record *)tb_vk.pool[best])->vk.capacity))
                best = i;
        }
        if (best >= 0) {
            record = (tb_vk_record *)tb_vk.pool[best];
            tb_vk.pool_bytes -= record->vk.capacity;
            tb_vk.pool[best] = tb_vk.pool[--tb_vk.pool_count];
        } else {
            status = tb_vk_record_create(capacity, tb_vk.staging ? TB_VK_MEMORY_DEVICE : TB_VK_MEMORY_MAPPED, &record);
        }
    }
    if (status == TB_OK) {
        record->header.engine = &tb_engine_vulkan;
        record->header.bytes = bytes;
        record->header.backend = &record->vk;
        tb_vk.live_buffers++;
        *out = &record->header;
    }
    pthread_mutex_unlock(&tb_vk_lock);
    return status;
}

static void vk_free(tb_engine_buffer *buffer) {
    if (!buffer)
        return;
    tb_vk_record *record = (tb_vk_record *)buffer;
    pthread_mutex_lock(&tb_vk_lock);
    if (tb_vk_pending_targets(record) && tb_vk_flush_uploads() != TB_OK)
        tb_error_clear(); /* the device is lost; the buffer goes all the same */
    tb_vk.live_buffers--;
    if (tb_vk.pool_count < TB_VK_POOL_SLOTS && tb_vk.pool_bytes + record->vk.capacity <= POOL_MAX_BYTES) {
        tb_vk.pool[tb_vk.pool_count++] = buffer;
        tb_vk.pool_bytes += record->vk.capacity;
    } else {
        tb_vk_record_destroy(record);
    }
    pthread_mutex_unlock(&tb_vk_lock);
}

/* Submits the recorded command buffer and waits for it. */
static tb_status submit_and_wait(void) {
    VkSubmitInfo submit = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                           .pCommandBuffers = &tb_vk.command_buffer};
    VkResult result = tb_vk.QueueSubmit(tb_vk.queue, 1, &submit, tb_vk.fence);
    if (result != VK_SUCCESS)
        return tb_vk_fail(result, "vkQueueSubmit");
    result = tb_vk.WaitForFences(tb_vk.device, 1, &tb_vk.fence, VK_TRUE, UINT64_MAX);
    tb_vk.ResetFences(tb_vk.device, 1, &tb_vk.fence);
    return result == VK_SUCCESS ? TB_OK : tb_vk_fail(result, "vkWaitForFences");
}

tb_status tb_vk_begin_commands(void) {
    tb_vk.ResetCommandPool(tb_vk.device, tb_vk.command_pool, 0);
    VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                      .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult result = tb_vk.BeginCommandBuffer(tb_vk.command_buffer, &begin);
    return result == VK_SUCCESS ? TB_OK : tb_vk_fail(result, "vkBeginCommandBuffer");
}

tb_status tb_vk_end_and_submit(void) {
    VkResult result = tb_vk.EndCommandBuffer(tb_vk.command_buffer);
    if (result != VK_SUCCESS)
        return tb_vk_fail(result, "vkEndCommandBuffer");
    return submit_and_wait();
}

void tb_vk_barrier(VkPipelineStageFlags src_stage, VkAccessFlags src_access, VkPipelineStageFlags dst_stage,
                   VkAccessFlags dst_access) {
    VkMemoryBarrier memory = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src_access,
                              .dstAccessMask = dst_access};
    tb_vk.CmdPipelineBarrier(tb_vk.command_buffer, src_stage, dst_stage, 0, 1, &memory, 0, NULL, 0, NULL);
}

static tb_status vk_upload(tb_engine_buffer *buffer, size_t offset, const void *src, size_t bytes) {
    if (offset > buffer->bytes || bytes > buffer->bytes - offset)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "vulkan: upload of %zu bytes at %zu overruns a %zu-byte buffer",
                            bytes, offset, buffer->bytes);
    if (bytes == 0)
        return TB_OK;
    pthread_mutex_lock(&tb_vk_lock);
    tb_vk.info.upload_bytes += bytes;
    tb_status status = TB_OK;
    if (buffer->host) /* mapped, coherent memory; run() waits, so nothing is in flight */
        memcpy((char *)buffer->host + offset, src, bytes);
    else
        status = tb_vk_staged_upload((const tb_vk_record *)buffer, offset, src, bytes);
    pthread_mutex_unlock(&tb_vk_lock);
    return status == TB_OK ? TB_OK : tb_error_prefix(status, "vulkan: uploading %zu bytes", bytes);
}

static tb_status vk_download(const tb_engine_buffer *buffer, size_t offset, void *dst, size_t bytes) {
    if (offset > buffer->bytes || bytes > buffer->bytes - offset)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "vulkan: download of %zu bytes at %zu overruns a %zu-byte buffer",
                            bytes, offset, buffer->bytes);
    if (bytes == 0)
        return TB_OK;
    pthread_mutex_lock(&tb_vk_lock);
    tb_vk.info.download_bytes += bytes;
    tb_status status = TB_OK;
    if (buffer->host)
        memcpy(dst, (const char *)buffer->host + offset, bytes);
    else
        status = tb_vk_staged_download((const tb_vk_record *)buffer, offset, dst, bytes);
    pthread_mutex_unlock(&tb_vk_lock);
    return status == TB_OK ? TB_OK : tb_error_prefix(status, "vulkan: downloading %zu bytes", bytes);
}

/* ---- ops ---- */

static tb_vk_kernel kernel_of(tb_engine_op_kind kind) {
    switch (kind) {
    case TB_ENGINE_OP_UNARY: return TB_VK_KERNEL_UNARY;
    case TB_ENGINE_OP_BINARY: return TB_VK_KERNEL_BINARY;
    case TB_ENGINE_OP_MATMUL: return TB_VK_KERNEL_MATMUL;
    case TB_ENGINE_OP_SOFTMAX: return TB_VK_KERNEL_SOFTMAX;
    case TB_ENGINE_OP_RMS_NORM: return TB_VK_KERNEL_RMS_NORM;
    case TB_ENGINE_OP_QMATMUL: return TB_VK_KERNEL_QMATMUL;
    case TB_ENGINE_OP_LLM_ROPE: return TB_VK_KERNEL_LLM_ROPE;
    case TB_ENGINE_OP_LLM_ATTENTION: return TB_VK_KERNEL_LLM_ATTENTION;
    case TB_ENGINE_OP_SILU_MUL: return TB_VK_KERNEL_SILU_MUL;
    case TB_ENGINE_OP_CONVERT16: return TB_VK_KERNEL_CONVERT16;
    case TB_ENGINE_OP_REDUCE: return TB_VK_KERNEL_REDUCE;
    case TB_ENGINE_OP_STRIDED_COPY: return TB_VK_KERNEL_STRIDED_COPY;
    case TB_ENGINE_OP_ATTENTION: return TB_VK_KERNEL_ATTENTION;
    default: return TB_VK_KERNEL_LAYER_NORM;
    }
}

/* Why the engine does not take `op` (sizes within device limits, features), or NULL. */
static const char *refusal_locked(const tb_engine_op *op) {
    if (!tb_vk.ready || (unsigned)op->kind >= TB_ENGINE_OP_COUNT)
        return "the engine is not ready, or the op kind is unknown";
    if (op->b_format != TB_ENGINE_WEIGHT_F32 && (op->kind != TB_ENGINE_OP_MATMUL || !tb_vk.info.storage_16bit))
        return "16-bit weights need storageBuffer16BitAccess"; /* matmul b only */
    if (op->kind == TB_ENGINE_OP_CONVERT16 && !tb_vk.info.storage_16bit)
        return "16-bit values need storageBuffer16BitAccess";
    if (op->kind == TB_ENGINE_OP_REDUCE && op->code == TB_REDUCE_LOGSUMEXP)
        return "there is no logsumexp reduction shader";
    size_t extents[5];
    tb_engine_op_extents(op, &extents[0], &extents[1], &extents[2], &extents[3]);
    extents[4] = tb_engine_op_d_extent(op);
    for (int i = 0; i < 5; i++)
        if (extents[i] > tb_vk.info.max_storage_buffer_range || extents[i] / sizeof(float) >= ((size_t)1 << 31))
            return "an operand exceeds the device's maxStorageBufferRange or 2^31 elements; splitting large tensors "
                   "is not implemented"; /* shaders index with 32-bit unsigned integers */
    return NULL;
}

static bool supports_locked(const tb_engine_op *op) { return refusal_locked(op) == NULL; }

static bool vk_supports(const tb_engine_op *op) {
    pthread_mutex_lock(&tb_vk_lock);
    if (!tb_vk.attempted) {
        tb_vk_init_locked();
        tb_error_clear();
    }
    bool ok = supports_locked(op);
    pthread_mutex_unlock(&tb_vk_lock);
    return ok;
}

const tb_spirv_shader *tb_vk_find_shader(const char *name) {
    char variant[48];
    snprintf(variant, sizeof variant, "%s_subgroup", name);
    for (int pass = tb_vk.info.subgroup_reductions ? 0 : 1; pass < 2; pass++)
        for (int i = 0; i < tb_spirv_shader_count; i++)
            if (strcmp(tb_spirv_shaders[i].name, pass == 0 ? variant : name) == 0)
                return &tb_spirv_shaders[i];
    return NULL;
}

tb_status tb_vk_create_pipeline(const uint32_t *words, size_t bytes, const VkSpecializationInfo *special, VkPipeline *out) {
    VkShaderModuleCreateInfo module_create = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                              .codeSize = bytes, .pCode = words};
    VkShaderModule module;
    VkResult result = tb_vk.CreateShaderModule(tb_vk.device, &module_create, NULL, &module);
    if (result != VK_SUCCESS)
        return tb_vk_fail(result, "vkCreateShaderModule");
    VkComputePipelineCreateInfo create = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = module, .pName = "main", .pSpecializationInfo = special},
        .layout = tb_vk.pipeline_layout,
    };
    *out = VK_NULL_HANDLE;
    result = tb_vk.CreateComputePipelines(tb_vk.device, VK_NULL_HANDLE, 1, &create, NULL, out);
    tb_vk.DestroyShaderModule(tb_vk.device, module, NULL);
    if (result != VK_SUCCESS) {
        *out = VK_NULL_HANDLE;
        return tb_vk_fail(result, "vkCreateComputePipelines");
    }
    return TB_OK;
}

static tb_status pipeline_for(tb_vk_kernel kernel, VkPipeline *out) {
    if (tb_vk.pipelines[kernel]) {
        *out = tb_vk.pipelines[kernel];
        return TB_OK;
    }
    static const char *const names[TB_VK_KERNEL_COUNT] = {"binary",   "gemv",     "layer_norm",    "matmul",
                                                          "rms_norm", "softmax",  "unary",         "qmatmul",
                                                          "llm_rope", "llm_attention", "silu_mul",
                                                          "matmul_w16", "gemv_w16", "convert16_w16", "reduce",
                                                          "strided_copy", "attention"};
    /* the subgroup-reduction variant where the device has it (and the kernel reduces), else the plain one */
    const tb_spirv_shader *shader = tb_vk_find_shader(names[kernel]);
    if (!shader)
        return tb_error_set(TB_ERR_INTERNAL, "vulkan: no SPIR-V for kernel '%s'", names[kernel]);
    TB_TRY(tb_vk_create_pipeline(shader->words, shader->bytes, NULL, &tb_vk.pipelines[kernel]));
    *out = tb_vk.pipelines[kernel];
    return TB_OK;
}

static tb_status ensure_descriptor_pool(uint32_t sets) {
    if (tb_vk.descriptor_pool && tb_vk.descriptor_pool_sets >= sets) {
        tb_vk.ResetDescriptorPool(tb_vk.device, tb_vk.descriptor_pool, 0);
        return TB_OK;
    }
    if (tb_vk.descriptor_pool)
        tb_vk.DestroyDescriptorPool(tb_vk.device, tb_vk.descriptor_pool, NULL);
    tb_vk.descriptor_pool = VK_NULL_HANDLE;
    uint32_t capacity = sets < 64 ? 64 : sets;
    VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = TB_VK_BINDINGS * capacity};
    VkDescriptorPoolCreateInfo create = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = capacity,
                                         .poolSizeCount = 1, .pPoolSizes = &size};
    VkResult result = tb_vk.CreateDescriptorPool(tb_vk.device, &create, NULL, &tb_vk.descriptor_pool);
    if (result != VK_SUCCESS) {
        tb_vk.descriptor_pool = VK_NULL_HANDLE;
        return tb_vk_fail(result, "vkCreateDescriptorPool");
    }
    tb_vk.descriptor_pool_sets = capacity;
    return TB_OK;
}

static bool op_is_empty(const tb_engine_op *op) {
    switch (op->kind) {
    case TB_ENGINE_OP_UNARY:
    case TB_ENGINE_OP_BINARY:
    case TB_ENGINE_OP_FUSED:
    case TB_ENGINE_OP_STRIDED_COPY: return op->n == 0;
    case TB_ENGINE_OP_ATTENTION: return op->attention.batch * op->attention.q_heads * op->attention.q_len == 0;
    case TB_ENGINE_OP_MATMUL:
    case TB_ENGINE_OP_QMATMUL: return op->m == 0 || op->n == 0;
    case TB_ENGINE_OP_LLM_ROPE:
    case TB_ENGINE_OP_LLM_ATTENTION: return op->llm.tokens == 0;
    case TB_ENGINE_OP_COPY:
    case TB_ENGINE_OP_CONVERT16: return op->n == 0;
    default: return op->rows == 0;
    }
}

static uint32_t groups(int64_t items, int64_t per_group, uint32_t limit) {
    int64_t count = (items + per_group - 1) / per_group;
    return count > (int64_t)limit ? limit : (uint32_t)(count < 1 ? 1 : count);
}

/* Records one op: descriptors, push constants, dispatch. */
static tb_status record_op(const tb_engine_op *op) {
    VkPipeline pipeline = VK_NULL_HANDLE;
    const bool gemv = op->kind == TB_ENGINE_OP_MATMUL && op->m <= GEMV_MAX_ROWS;
    const bool w16 = op->kind == TB_ENGINE_OP_MATMUL && op->b_format != TB_ENGINE_WEIGHT_F32;
    tb_vk_kernel kernel = gemv ? TB_VK_KERNEL_GEMV : kernel_of(op->kind);
    if (w16)
        kernel = gemv ? TB_VK_KERNEL_GEMV_W16 : TB_VK_KERNEL_MATMUL_W16;
    if (op->kind == TB_ENGINE_OP_FUSED)
        TB_TRY(tb_vk_fused_pipeline_for(op, &pipeline));
    else
        TB_TRY(pipeline_for(kernel, &pipeline));
    VkDescriptorSet set;
    VkDescriptorSetAllocateInfo allocate = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                            .descriptorPool = tb_vk.descriptor_pool, .descriptorSetCount = 1,
                                            .pSetLayouts = &tb_vk.set_layout};
    VkResult result = tb_vk.AllocateDescriptorSets(tb_vk.device, &allocate, &set);
    if (result != VK_SUCCESS)
        return tb_vk_fail(result, "vkAllocateDescriptorSets");
    /* absent operands are bound to y, which the shader then never reads */
    const tb_engine_buffer *operands[TB_VK_BINDINGS] = {op->a, op->b ? op->b : op->y, op->c ? op->c : op->y, op->y,
                                                        op->d ? op->d : op->y};
    if (op->kind == TB_ENGINE_OP_CONVERT16) { /* shaders/convert16.comp: 16-bit words in at 1, out at 4 */
        operands[0] = op->code == 0 ? op->y : op->a;
        operands[1] = op->code == 0 ? op->a : op->y;
        operands[4] = op->y;
    }
    VkDescriptorBufferInfo infos[TB_VK_BINDINGS];
    VkWriteDescriptorSet writes[TB_VK_BINDINGS];
    for (int i = 0; i < TB_VK_BINDINGS; i++) {
        infos[i] = (VkDescriptorBufferInfo){.buffer = ((const tb_vk_buffer *)operands[i]->backend)->buffer, .offset = 0,
                                            .range = VK_WHOLE_SIZE};
        writes[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                           .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                           .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &infos[i]};
    }
    tb_vk.UpdateDescriptorSets(tb_vk.device, TB_VK_BINDINGS, writes, 0, NULL);
    uint32_t push[TB_VK_PUSH_BYTES / 4] = {0};
    uint32_t gx = 1, gy = 1, gz = 1;
    const uint32_t *limit = tb_vk.info.max_workgroup_count;
    switch (op->kind) {
    case TB_ENGINE_OP_UNARY:
    case TB_ENGINE_OP_BINARY: {
        push[0] = (uint32_t)op->n;
        push[1] = (uint32_t)op->code;
        push[2] = (uint32_t)(op->kind == TB_ENGINE_OP_BINARY ? op->b_len : 1);
        memcpy(&push[3], &op->alpha, 4);
        memcpy(&push[4], &op->lo, 4);
        memcpy(&push[5], &op->hi, 4);
        gx = groups(op->n, 256, limit[0]);
        break;
    }
    case TB_ENGINE_OP_MATMUL:
        push[0] = (uint32_t)op->m;
        push[1] = (uint32_t)op->n;
        push[2] = (uint32_t)op->k;
        push[3] = op->trans_b ? 1u : 0u;
        push[4] = op->c ? 1u : 0u;
        push[5] = (uint32_t)tb_engine_op_y_stride(op);
        push[6] = (uint32_t)op->y_col0;
        push[7] = (uint32_t)op->b_format;
        push[8] = (uint32_t)op->batch;
        push[9] = (uint32_t)op->a_batch;
        push[10] = (uint32_t)op->b_batch;
        gz = groups(op->batch > 1 ? op->batch : 1, 1, limit[2]);
        if (gemv) { /* shaders/gemv.comp: a workgroup per column (trans_b) or per 64 columns */
            gx = groups(op->n, op->trans_b ? 1 : 64, limit[0]);
        } else { /* 64x64 tiles (shaders/matmul.comp) */
            gx = groups(op->n, 64, limit[0]);
            gy = groups(op->m, 64, limit[1]);
        }
        break;
    case TB_ENGINE_OP_QMATMUL: /* shaders/qmatmul.comp: a workgroup per column */
        push[0] = (uint32_t)op->m;
        push[1] = (uint32_t)op->n;
        push[2] = (uint32_t)op->k;
        push[3] = (uint32_t)op->code;
        push[4] = op->c ? 1u : 0u;
        push[5] = (uint32_t)op->llm.group;
        push[6] = (uint32_t)tb_engine_op_y_stride(op);
        push[7] = (uint32_t)op->y_col0;
        gx = groups(op->n, 1, limit[0]);
        break;
    case TB_ENGINE_OP_LLM_ROPE:
    case TB_ENGINE_OP_LLM_ATTENTION: { /* a workgroup per (row, head) */
        const bool rope = op->kind == TB_ENGINE_OP_LLM_ROPE;
        push[0] = (uint32_t)op->llm.tokens;
        push[1] = (uint32_t)op->llm.heads;
        push[2] = (uint32_t)op->llm.kv_heads;
        push[3] = (uint32_t)op->llm.head_dim;
        push[4] = (uint32_t)op->llm.capacity;
        push[5] = (uint32_t)op->llm.pos0;
        if (rope) {
            push[6] = op->d ? 1u : 0u;
            memcpy(&push[7], &op->eps, 4);
        } else {
            const float scale = (float)(1.0 / sqrt((double)op->llm.head_dim));
            push[6] = (uint32_t)op->llm.window;
            memcpy(&push[7], &scale, 4);
        }
        push[8] = (uint32_t)op->llm.stride;
        const int64_t heads = rope ? op->llm.heads + 2 * op->llm.kv_heads : op->llm.heads;
        gx = groups(op->llm.tokens * heads, 1, limit[0]);
        break;
    }
    case TB_ENGINE_OP_SILU_MUL:
        push[0] = (uint32_t)op->rows;
        push[1] = (uint32_t)op->len;
        gx = groups(op->rows * op->len, 256, limit[0]);
        break;
    case TB_ENGINE_OP_CONVERT16:
        push[0] = (uint32_t)op->n;
        push[1] = (uint32_t)op->code;
        push[2] = (uint32_t)op->format;
        gx = groups(op->n, 256, limit[0]);
        break;
    case TB_ENGINE_OP_FUSED: /* shaders/fused.comp: n, then (len, inner) per input (1, 1 when absent) */
        push[0] = (uint32_t)op->n;
        for (int k = 0; k < TB_ENGINE_FUSED_INPUTS; k++) {
            push[1 + 2 * k] = k < op->fused->ninputs ? (uint32_t)op->fused->len[k] : 1u;
            push[2 + 2 * k] = k < op->fused->ninputs ? (uint32_t)op->fused->inner[k] : 1u;
        }
        gx = groups(op->n, 256, limit[0]);
        break;
    case TB_ENGINE_OP_REDUCE: /* shaders/reduce.comp: a workgroup per row, or a thread per output */
        push[0] = (uint32_t)op->rows;
        push[1] = (uint32_t)op->len;
        push[2] = (uint32_t)op->inner;
        push[3] = (uint32_t)op->code;
        gx = op->inner == 1 ? groups(op->rows, 1, limit[0]) : groups(op->rows * op->inner, 256, limit[0]);
        break;
    case TB_ENGINE_OP_STRIDED_COPY: /* shaders/strided_copy.comp: n, offset, ndim, shape[5], strides[5], row,
                                     * y_stride, y_col0 */
        push[0] = (uint32_t)op->n;
        push[1] = (uint32_t)op->a_offset;
        push[2] = (uint32_t)op->strided.ndim;
        for (int d = 0; d < TB_ENGINE_STRIDED_DIMS; d++) {
            push[3 + d] = d < op->strided.ndim ? (uint32_t)op->strided.shape[d] : 1u;
            push[8 + d] = d < op->strided.ndim ? (uint32_t)op->strided.strides[d] : 0u;
        }
        push[13] = (uint32_t)op->strided.row;
        push[14] = (uint32_t)op->y_stride;
        push[15] = (uint32_t)op->y_col0;
        gx = groups(op->n, 256, limit[0]);
        break;
    case TB_ENGINE_OP_ATTENTION: { /* shaders/attention.comp: a workgroup per query row */
        const tb_engine_attention *at = &op->attention;
        const int64_t sizes[7] = {at->batch, at->q_heads, at->kv_heads, at->q_len, at->kv_len, at->head_dim, at->value_dim};
        for (int i = 0; i < 7; i++)
            push[i] = (uint32_t)sizes[i];
        push[7] = (at->causal ? 1u : 0u) | (op->d ? 2u : 0u);
        memcpy(&push[8], &at->scale, 4);
        for (int i = 0; i < 4; i++)
            push[9 + i] = (uint32_t)at->mask_strides[i];
        gx = groups(at->batch * at->q_heads * at->q_len, 1, limit[0]);
        break;
    }
    default:
        push[0] = (uint32_t)op->rows;
        push[1] = (uint32_t)op->len;
        push[2] = op->kind == TB_ENGINE_OP_SOFTMAX ? (op->log ? 1u : 0u) : ((op->b ? 1u : 0u) | (op->c ? 2u : 0u));
        memcpy(&push[3], &op->eps, 4);
        gx = groups(op->rows, 1, limit[0]);
        break;
    }
    tb_vk.CmdBindPipeline(tb_vk.command_buffer, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    tb_vk.CmdBindDescriptorSets(tb_vk.command_buffer, VK_PIPELINE_BIND_POINT_COMPUTE, tb_vk.pipeline_layout, 0, 1, &set,
                                0, NULL);
    tb_vk.CmdPushConstants(tb_vk.command_buffer, tb_vk.pipeline_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push, push);
    tb_vk.CmdDispatch(tb_vk.command_buffer, gx, gy, gz);
    return TB_OK;
}

static void barrier(VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    tb_vk_barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, dst_stage, dst_access);
}

/* A copy op: vkCmdCopyBuffer after earlier shaders' writes (and reads of y), before later shaders. */
static void record_copy(const tb_engine_op *op) {
    const VkAccessFlags shader = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    tb_vk_barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, shader, VK_PIPELINE_STAGE_TRANSFER_BIT,
                  VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    VkBufferCopy region = {.srcOffset = (VkDeviceSize)op->a_offset * sizeof(float),
                           .dstOffset = (VkDeviceSize)op->y_col0 * sizeof(float),
                           .size = (VkDeviceSize)op->n * sizeof(float)};
    tb_vk.CmdCopyBuffer(tb_vk.command_buffer, ((const tb_vk_buffer *)op->a->backend)->buffer,
                        ((const tb_vk_buffer *)op->y->backend)->buffer, 1, &region);
    tb_vk_barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                  shader);
}

/* Which downloads go into the run's own submission (staging mode: copies into the staging buffer after
 * the queued uploads, in order while they fit beside those; offsets[i] = NOT_IN_RUN for the others and
 * in mapped mode, where a memcpy after the run reads them). Returns how many are in the run. */
static const VkDeviceSize NOT_IN_RUN = ~(VkDeviceSize)0;

static int downloads_in_run(const tb_engine_download *downloads, int count, VkDeviceSize *offsets) {
    int taken = 0;
    for (int i = 0; i < count; i++) {
        offsets[i] = NOT_IN_RUN;
        VkDeviceSize at;
        if (tb_vk.staging && downloads[i].bytes > 0 && downloads[i].bytes <= TB_VK_STAGING_MAX &&
            tb_vk_staging_reserve(downloads[i].bytes, &at)) {
            offsets[i] = at;
            tb_vk.staging_used = at + downloads[i].bytes; /* reserved until the run's submit completes */
            taken++;
        }
    }
    return taken;
}

/* One submission: queued uploads, the ops (a barrier between consecutive ones), the downloads. */
static tb_status run_locked(const tb_engine_op *ops, int count, const tb_engine_download *downloads, int ndownloads) {
    TB_TRY(tb_vk_init_locked());
    if (tb_vk.fused_count >= TB_VK_FUSED_CACHE_MAX)
        tb_vk_fused_release(); /* nothing is recorded between runs, so no command buffer uses them */
    int dispatches = 0;
    for (int i = 0; i < count; i++) {
        tb_status status = tb_engine_op_validate(&tb_engine_vulkan, &ops[i]);
        const char *why = status == TB_OK ? refusal_locked(&ops[i]) : NULL;
        if (why)
            status = tb_error_set(TB_ERR_UNSUPPORTED, "%s (maxStorageBufferRange %llu bytes)", why,
                                  (unsigned long long)tb_vk.info.max_storage_buffer_range);
        if (status != TB_OK)
            return tb_error_prefix(status, "vulkan: op %d (%s)", i, tb_engine_op_kind_name(ops[i].kind));
        dispatches += !op_is_empty(&ops[i]);
    }
    for (int i = 0; i < ndownloads; i++) {
        const tb_engine_download *down = &downloads[i];
        if (!down->buffer || down->buffer->engine != &tb_engine_vulkan || down->offset > down->buffer->bytes ||
            down->bytes > down->buffer->bytes - down->offset)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "vulkan: download %d is not within a vulkan buffer", i);
    }
    VkDeviceSize offsets_small[16], *offsets = offsets_small;
    if (ndownloads > 16 && !(offsets = malloc(sizeof *offsets * (size_t)ndownloads)))
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    const VkDeviceSize queued = tb_vk.staging_used;
    const int batched_downloads = downloads_in_run(downloads, ndownloads, offsets);
    tb_vk.staging_used = queued; /* the queued uploads' end: recording them resets it */
    tb_status status = TB_OK;
    int recorded = 0;
    if (dispatches > 0 || tb_vk.pending_count > 0 || batched_downloads) {
        status = ensure_descriptor_pool((uint32_t)(dispatches > 0 ? dispatches : 1));
        if (status == TB_OK)
            status = tb_vk_begin_commands();
        if (status == TB_OK) {
            const int uploads = tb_vk_record_pending_uploads(); /* before the ops, in the same submit */
            for (int i = 0; i < count && status == TB_OK; i++) {
                if (op_is_empty(&ops[i]))
                    continue;
                if (ops[i].kind == TB_ENGINE_OP_COPY) { /* a transfer between the shaders around it */
                    record_copy(&ops[i]);
                    continue;
                }
                if (recorded > 0) /* each op sees the previous ones' writes */
                    barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
                status = record_op(&ops[i]);
                if (status != TB_OK)
                    status = tb_error_prefix(status, "vulkan: op %d (%s)", i, tb_engine_op_kind_name(ops[i].kind));
                recorded++;
            }
            if (batched_downloads) { /* the results, into the staging buffer, for the host */
                barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
                for (int i = 0; i < ndownloads; i++) {
                    VkBufferCopy region = {.srcOffset = downloads[i].offset, .dstOffset = offsets[i],
                                           .size = downloads[i].bytes};
                    if (offsets[i] != NOT_IN_RUN)
                        tb_vk.CmdCopyBuffer(tb_vk.command_buffer, ((const tb_vk_buffer *)downloads[i].buffer->backend)->buffer,
                                            tb_vk.staging_buffer->vk.buffer, 1, &region);
                }
                tb_vk_barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                              VK_ACCESS_HOST_READ_BIT);
            } else {
                barrier(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT); /* results visible to the mapped pointers */
            }
            if (status == TB_OK) {
                status = tb_vk_end_and_submit();
            } else {
                tb_vk.EndCommandBuffer(tb_vk.command_buffer);
            }
            if (status == TB_OK) {
                tb_vk.info.submits++;
                tb_vk.info.dispatches += (uint64_t)recorded;
                tb_vk.info.batched_copies += (uint64_t)uploads + (uint64_t)batched_downloads;
            }
        }
    }
    /* first the results in the staging buffer, then the others (whose chunks reuse it) */
    for (int i = 0; status == TB_OK && i < ndownloads; i++) {
        const tb_engine_download *down = &downloads[i];
        tb_vk.info.download_bytes += down->bytes;
        if (offsets[i] != NOT_IN_RUN)
            memcpy(down->dst, (const char *)tb_vk.staging_buffer->header.host + offsets[i], down->bytes);
        else if (down->buffer->host)
            memcpy(down->dst, (const char *)down->buffer->host + down->offset, down->bytes);
    }
    for (int i = 0; status == TB_OK && i < ndownloads; i++)
        if (offsets[i] == NOT_IN_RUN && !downloads[i].buffer->host && downloads[i].bytes)
            status = tb_vk_staged_download((const tb_vk_record *)downloads[i].buffer, downloads[i].offset,
                                           downloads[i].dst, downloads[i].bytes);
    if (offsets != offsets_small)
        free(offsets);
    return status;
}

static tb_status vk_run(const tb_engine_op *ops, int count) {
    pthread_mutex_lock(&tb_vk_lock);
    tb_status status = run_locked(ops, count, NULL, 0);
    pthread_mutex_unlock(&tb_vk_lock);
    return status;
}

static tb_status vk_run_download(const tb_engine_op *ops, int count, const tb_engine_download *downloads,
                                 int ndownloads) {
    pthread_mutex_lock(&tb_vk_lock);
    tb_status status = run_locked(ops, count, downloads, ndownloads);
    pthread_mutex_unlock(&tb_vk_lock);
    return status;
}

static tb_status vk_synchronize(void) {
    pthread_mutex_lock(&tb_vk_lock);
    tb_status status = tb_vk.device ? tb_vk_flush_uploads() : TB_OK;
    if (tb_vk.device)
        tb_vk.DeviceWaitIdle(tb_vk.device);
    pthread_mutex_unlock(&tb_vk_lock);
    return status;
}

tb_status tb_engine_vulkan_reset(void) {
    pthread_mutex_lock(&tb_vk_lock);
    tb_status status = tb_vk_shutdown_locked();
    pthread_mutex_unlock(&tb_vk_lock);
    return status;
}

const tb_engine tb_engine_vulkan = {
    .name = "vulkan", .init = vk_init, .device_info = vk_device_info, .supports_op = vk_supports,
    .buffer_alloc = vk_alloc, .buffer_free = vk_free, .buffer_upload = vk_upload, .buffer_download = vk_download,
    .run = vk_run, .run_download = vk_run_download, .synchronize = vk_synchronize,
};
#endif
