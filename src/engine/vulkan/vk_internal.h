/* Internal state of the vulkan engine: the entry points loaded from the dlopen'd loader, the chosen
 * device and the objects every dispatch shares. Built only when <vulkan/vulkan.h> was found at build
 * time (TB_HAVE_VULKAN_HEADERS); the headers declare types only, nothing is linked (VK_NO_PROTOTYPES).
 *
 * Threading: one mutex (tb_vk_lock) serializes every engine call; the engine is a process-wide
 * singleton brought up by tb_vk_init and torn down by tb_vk_shutdown. */
#ifndef TORCHBURN_ENGINE_VULKAN_VK_INTERNAL_H
#define TORCHBURN_ENGINE_VULKAN_VK_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <pthread.h>
#include <vulkan/vulkan.h>

#include "engine/engine_internal.h"

/* Entry points by scope: global (from vkGetInstanceProcAddr(NULL, ...)), instance, device. */
#define TB_VK_GLOBAL_FUNCTIONS(X) X(CreateInstance) X(EnumerateInstanceVersion)
#define TB_VK_INSTANCE_FUNCTIONS(X)                                                                      \
    X(DestroyInstance) X(EnumeratePhysicalDevices) X(GetPhysicalDeviceProperties)                        \
    X(GetPhysicalDeviceProperties2) X(GetPhysicalDeviceFeatures2) X(GetPhysicalDeviceQueueFamilyProperties)  \
    X(GetPhysicalDeviceMemoryProperties) X(CreateDevice) X(GetDeviceProcAddr)
#define TB_VK_DEVICE_FUNCTIONS(X)                                                                        \
    X(DestroyDevice) X(GetDeviceQueue) X(CreateBuffer) X(DestroyBuffer) X(GetBufferMemoryRequirements)   \
    X(AllocateMemory) X(FreeMemory) X(BindBufferMemory) X(MapMemory) X(UnmapMemory) X(CreateShaderModule) \
    X(DestroyShaderModule) X(CreateDescriptorSetLayout) X(DestroyDescriptorSetLayout)                      \
    X(CreatePipelineLayout) X(DestroyPipelineLayout) X(CreateComputePipelines) X(DestroyPipeline)          \
    X(CreateDescriptorPool) X(DestroyDescriptorPool) X(ResetDescriptorPool) X(AllocateDescriptorSets)      \
    X(UpdateDescriptorSets) X(CreateCommandPool) X(DestroyCommandPool) X(AllocateCommandBuffers)           \
    X(ResetCommandPool) X(BeginCommandBuffer) X(EndCommandBuffer) X(CmdBindPipeline)                      \
    X(CmdBindDescriptorSets) X(CmdPushConstants) X(CmdDispatch) X(CmdPipelineBarrier) X(CmdCopyBuffer) X(QueueSubmit)        \
    X(CreateFence) X(DestroyFence) X(WaitForFences) X(ResetFences) X(DeviceWaitIdle)

/* The shaders (looked up by name in tb_spirv_shaders when their pipeline is first built). */
typedef enum tb_vk_kernel {
    TB_VK_KERNEL_BINARY = 0,
    TB_VK_KERNEL_GEMV,
    TB_VK_KERNEL_LAYER_NORM,
    TB_VK_KERNEL_MATMUL,
    TB_VK_KERNEL_RMS_NORM,
    TB_VK_KERNEL_SOFTMAX,
    TB_VK_KERNEL_UNARY,
    TB_VK_KERNEL_QMATMUL,
    TB_VK_KERNEL_LLM_ROPE,
    TB_VK_KERNEL_LLM_ATTENTION,
    TB_VK_KERNEL_SILU_MUL,
    TB_VK_KERNEL_MATMUL_W16, /* matmul / gemv with 16-bit b (the *_w16 SPIR-V) */
    TB_VK_KERNEL_GEMV_W16,
    TB_VK_KERNEL_CONVERT16, /* f32 <-> bf16/f16 (convert16_w16 SPIR-V) */
    TB_VK_KERNEL_REDUCE,
    TB_VK_KERNEL_STRIDED_COPY,
    TB_VK_KERNEL_ATTENTION,
    TB_VK_KERNEL_COUNT
} tb_vk_kernel;

/* A device buffer: host-visible, host-coherent memory mapped for its whole life, or (staging mode)
 * device-local memory the host reaches only through the staging buffer. */
typedef struct tb_vk_buffer {
    VkBuffer buffer;
    VkDeviceMemory memory;
    VkDeviceSize capacity;
} tb_vk_buffer;

/* What the engine hands out: the shared header first (a tb_engine_buffer * is a tb_vk_record *). */
typedef struct tb_vk_record {
    tb_engine_buffer header;
    tb_vk_buffer vk;
} tb_vk_record;

/* How buffers use memory: engine buffers in staging mode (device-local, unmapped), engine buffers
 * otherwise (mapped, device-local preferred), the staging buffer (mapped, host-cached preferred for
 * reading results back). */
typedef enum tb_vk_memory_use { TB_VK_MEMORY_DEVICE, TB_VK_MEMORY_MAPPED, TB_VK_MEMORY_STAGING } tb_vk_memory_use;

enum { TB_VK_POOL_SLOTS = 64, TB_VK_BINDINGS = 5, TB_VK_PUSH_BYTES = 64, TB_VK_STAGING_MAX = 16 << 20,
       TB_VK_PENDING_MAX = 256 };

/* A staged upload not yet copied: `bytes` at `staging_offset` of the staging buffer go to `offset` of
 * `target` when the next run (or a flush) records the copy. */
typedef struct tb_vk_pending_copy {
    const tb_vk_record *target;
    VkDeviceSize staging_offset, offset, bytes;
} tb_vk_pending_copy;

/* Specialization data of a fused chain (shaders/fused.comp): constant 0 the step count, 1 the input
 * count, 8 + 8 s + {0..7} step s's kind, code, lhs, rhs, alpha, lo, hi, scalar (bit patterns). Unused
 * steps are zero, so equal chains have equal words: the words are the pipeline cache's key. */
enum { TB_VK_FUSED_WORDS = 8 + 8 * TB_ENGINE_FUSED_STEPS, TB_VK_FUSED_CACHE_MAX = 256 };

typedef struct tb_vk_fused_pipeline {
    uint32_t words[TB_VK_FUSED_WORDS];
    VkPipeline pipeline;
} tb_vk_fused_pipeline;

typedef struct tb_vk_state {
    bool attempted, ready;
    tb_engine_device_info info; /* also holds the reason when not ready */
    void *library;
#define TB_VK_DECLARE(name) PFN_vk##name name;
    PFN_vkGetInstanceProcAddr GetInstanceProcAddr;
    TB_VK_GLOBAL_FUNCTIONS(TB_VK_DECLARE)
    TB_VK_INSTANCE_FUNCTIONS(TB_VK_DECLARE)
    TB_VK_DEVICE_FUNCTIONS(TB_VK_DECLARE)
#undef TB_VK_DECLARE
    VkInstance instance;
    uint32_t instance_version; /* the API version the instance was created for */
    VkPhysicalDevice physical;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    /* staging mode (discrete GPUs, or TORCHBURN_VULKAN_FORCE_STAGING=1): buffers are device-local and
     * uploads/downloads go through `staging` (host-visible, mapped), one transfer submit per chunk */
    bool staging;
    tb_vk_record *staging_buffer; /* created on first transfer, grown up to TB_VK_STAGING_MAX bytes */
    /* uploads queued in the staging buffer's first staging_used bytes, recorded into the next run's
     * command buffer before its ops (so a plan or an LLM step is one submit), or flushed alone */
    tb_vk_pending_copy pending[TB_VK_PENDING_MAX];
    int pending_count;
    VkDeviceSize staging_used;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout pipeline_layout;
    VkPipeline pipelines[TB_VK_KERNEL_COUNT]; /* created on first use */
    /* fused chains: one specialized pipeline per distinct chain, created on first use; emptied between
     * runs when full (no recorded command buffer refers to them then) */
    tb_vk_fused_pipeline *fused;
    int fused_count;
    VkCommandPool command_pool;
    VkCommandBuffer command_buffer;
    VkFence fence;
    VkDescriptorPool descriptor_pool;
    uint32_t descriptor_pool_sets;
    /* freed buffers kept for reuse, and their total */
    tb_engine_buffer *pool[TB_VK_POOL_SLOTS];
    int pool_count;
    VkDeviceSize pool_bytes;
    int64_t live_buffers;
} tb_vk_state;

extern tb_vk_state tb_vk;
extern pthread_mutex_t tb_vk_lock;

/* Loads the library, creates the instance and device (once; later calls return the first outcome).
 * Caller holds tb_vk_lock. */
tb_status tb_vk_init_locked(void);
/* Destroys everything (buffers must all be freed) so the next init probes again. Caller holds the lock. */
tb_status tb_vk_shutdown_locked(void);
/* Releases the pooled free buffers. Caller holds the lock. */
void tb_vk_pool_drain_locked(void);

/* Buffers and command recording (vk_engine.c); callers hold the lock. */
tb_status tb_vk_record_create(VkDeviceSize capacity, tb_vk_memory_use use, tb_vk_record **out);
void tb_vk_record_destroy(tb_vk_record *record);
tb_status tb_vk_begin_commands(void);
tb_status tb_vk_end_and_submit(void); /* ends the command buffer, submits it and waits on the fence */
void tb_vk_barrier(VkPipelineStageFlags src_stage, VkAccessFlags src_access, VkPipelineStageFlags dst_stage,
                   VkAccessFlags dst_access);

/* Staging mode (vk_staging.c); callers hold the lock. Uploads of at most TB_VK_STAGING_MAX bytes are
 * queued (src is copied at once); larger ones, and downloads outside a run, are chunked transfers of
 * their own (each a submit counted in info.transfers). */
tb_status tb_vk_staged_upload(const tb_vk_record *target, size_t offset, const void *src, size_t bytes);
tb_status tb_vk_staged_download(const tb_vk_record *source, size_t offset, void *dst, size_t bytes);
/* Submits the queued uploads alone (no-op when none). */
tb_status tb_vk_flush_uploads(void);
/* Whether a queued upload targets `record` (freeing it must flush first). */
bool tb_vk_pending_targets(const tb_vk_record *record);
/* Into the command buffer being recorded: the queued uploads with their barriers (earlier shader work ->
 * copies -> later shaders and transfers). Returns how many; the queue is empty afterwards. */
int tb_vk_record_pending_uploads(void);
/* Room for `bytes` after the queued uploads in the staging buffer (grown up to TB_VK_STAGING_MAX,
 * keeping the queued bytes): its offset in *offset, or false when it does not fit. */
bool tb_vk_staging_reserve(size_t bytes, VkDeviceSize *offset);
/* Drops the queue and the staging buffer (engine shutdown). */
void tb_vk_staging_release(void);

/* Fused chains (vk_fused.c); callers hold the lock. The pipeline specialized to op->fused, created
 * and cached on first use (counted in info.specialized_pipelines). */
tb_status tb_vk_fused_pipeline_for(const tb_engine_op *op, VkPipeline *out);
/* Destroys the cached fused pipelines (between runs when the cache is full; at shutdown). */
void tb_vk_fused_release(void);
/* A compute pipeline from SPIR-V words, with optional specialization (vk_engine.c). */
tb_status tb_vk_create_pipeline(const uint32_t *words, size_t bytes, const VkSpecializationInfo *special, VkPipeline *out);
/* The committed SPIR-V of a kernel by name: the _subgroup variant where the device reduces in
 * subgroups and the shader has one, else the plain one; NULL when absent. */
const struct tb_spirv_shader *tb_vk_find_shader(const char *name);

/* "vkCreateBuffer failed: VK_ERROR_OUT_OF_DEVICE_MEMORY" and the matching status. */
tb_status tb_vk_fail(VkResult result, const char *what);

#endif
