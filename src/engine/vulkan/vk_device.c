/* Bringing up the vulkan engine: dlopen the loader, create an instance, pick a physical device with a
 * compute queue, create the logical device and the shared objects, and record the device's facts.
 * Every failure is a quiet "not available" with a reason (no loader, no driver, no device, only a
 * CPU-type device, bad settings); nothing is printed.
 *
 * Settings (read at the first init):
 *   TORCHBURN_VULKAN_LOADER      library to dlopen (default libvulkan.so.1; tests point it elsewhere)
 *   TORCHBURN_GPU_INDEX          use physical device N of the enumeration (any type, CPU ones too)
 *   TORCHBURN_VULKAN_ALLOW_CPU=1 let the automatic pick take a CPU-type device (Mesa's lavapipe)
 *   TORCHBURN_WGPU_BACKEND       accepted for the seed's spelling: vulkan, auto or empty
 *   TORCHBURN_VULKAN_MAX_WORKGROUPS  caps dispatch sizes below the device's (tests of grid-stride loops)
 *   TORCHBURN_VULKAN_MAX_BUFFER_RANGE  lowers maxStorageBufferRange (bytes; tests of weight splitting)
 *   TORCHBURN_VULKAN_FORCE_STAGING=1  device-local buffers + staging copies even where memory is mappable
 *   TORCHBURN_VULKAN_NO_SUBGROUP=1  shared-memory reductions even where subgroup operations exist
 *   TORCHBURN_VULKAN_NO_16BIT=1  no 16-bit storage even where the device has it (bf16/f16 weights f32) */
#ifdef TB_HAVE_VULKAN_HEADERS
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/vulkan/vk_internal.h"

tb_vk_state tb_vk;
pthread_mutex_t tb_vk_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *result_name(VkResult result) {
    switch (result) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
    }
}

tb_status tb_vk_fail(VkResult result, const char *what) {
    tb_status status = (result == VK_ERROR_OUT_OF_HOST_MEMORY || result == VK_ERROR_OUT_OF_DEVICE_MEMORY)
                           ? TB_ERR_OUT_OF_MEMORY
                           : TB_ERR_UNSUPPORTED;
    return tb_error_set(status, "vulkan: %s failed: %s (%d)", what, result_name(result), (int)result);
}

/* Records why the engine is unavailable; always returns TB_ERR_UNSUPPORTED with that message. */
static tb_status unavailable(const char *format, const char *detail) {
    snprintf(tb_vk.info.reason, sizeof tb_vk.info.reason, format, detail ? detail : "");
    return tb_error_set(TB_ERR_UNSUPPORTED, "vulkan: %s", tb_vk.info.reason);
}

static const char *type_name(VkPhysicalDeviceType type) {
    switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

/* Preference of the automatic pick; CPU-type devices only when allowed. */
static int type_rank(VkPhysicalDeviceType type) {
    switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 0;
    default: return 1;
    }
}

static bool compute_family(VkPhysicalDevice device, uint32_t *family) {
    uint32_t count = 0;
    tb_vk.GetPhysicalDeviceQueueFamilyProperties(device, &count, NULL);
    VkQueueFamilyProperties families[32];
    if (count > 32)
        count = 32;
    tb_vk.GetPhysicalDeviceQueueFamilyProperties(device, &count, families);
    for (uint32_t i = 0; i < count; i++) {
        if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && families[i].queueCount > 0) {
            *family = i;
            return true;
        }
    }
    return false;
}

static bool env_flag(const char *name) {
    const char *value = getenv(name);
    return value && (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0 || strcasecmp(value, "yes") == 0);
}

static tb_status load_functions(void) {
    const char *library = getenv("TORCHBURN_VULKAN_LOADER");
    if (!library || !library[0])
        library = "libvulkan.so.1";
    tb_vk.library = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!tb_vk.library)
        return unavailable("the Vulkan loader %s could not be loaded (install libvulkan1 and a driver)", library);
    tb_vk.GetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(tb_vk.library, "vkGetInstanceProcAddr");
    if (!tb_vk.GetInstanceProcAddr)
        return unavailable("%s has no vkGetInstanceProcAddr; it is not a Vulkan loader", library);
#define TB_VK_LOAD_GLOBAL(name) tb_vk.name = (PFN_vk##name)tb_vk.GetInstanceProcAddr(NULL, "vk" #name);
    TB_VK_GLOBAL_FUNCTIONS(TB_VK_LOAD_GLOBAL)
#undef TB_VK_LOAD_GLOBAL
    if (!tb_vk.CreateInstance)
        return unavailable("%s gives no vkCreateInstance", library);
    return TB_OK;
}

static tb_status create_instance(void) {
    uint32_t version = VK_API_VERSION_1_0;
    if (tb_vk.EnumerateInstanceVersion && tb_vk.EnumerateInstanceVersion(&version) != VK_SUCCESS)
        version = VK_API_VERSION_1_0;
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "torchburn", .pEngineName = "torchburn",
        .apiVersion = version >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2 : version,
    };
    tb_vk.instance_version = app.apiVersion;
    VkInstanceCreateInfo create = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkResult result = tb_vk.CreateInstance(&create, NULL, &tb_vk.instance);
    if (result == VK_ERROR_INCOMPATIBLE_DRIVER)
        return unavailable("no Vulkan driver is installed (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER)%s", NULL);
    if (result != VK_SUCCESS) {
        tb_vk.instance = VK_NULL_HANDLE;
        return unavailable("vkCreateInstance failed: %s", result_name(result));
    }
#define TB_VK_LOAD_INSTANCE(name) tb_vk.name = (PFN_vk##name)tb_vk.GetInstanceProcAddr(tb_vk.instance, "vk" #name);
    TB_VK_INSTANCE_FUNCTIONS(TB_VK_LOAD_INSTANCE)
#undef TB_VK_LOAD_INSTANCE
    if (!tb_vk.EnumeratePhysicalDevices || !tb_vk.CreateDevice || !tb_vk.GetDeviceProcAddr)
        return unavailable("the loader lacks core instance functions%s", NULL);
    return TB_OK;
}

/* Chooses tb_vk.physical (and its compute family) by the settings. */
static tb_status pick_device(void) {
    VkPhysicalDevice devices[16];
    uint32_t count = 16;
    VkResult result = tb_vk.EnumeratePhysicalDevices(tb_vk.instance, &count, devices);
    if (result != VK_SUCCESS && result != VK_INCOMPLETE)
        return unavailable("vkEnumeratePhysicalDevices failed: %s", result_name(result));
    tb_vk.info.device_count = (int)count;
    if (count == 0)
        return unavailable("the Vulkan loader found no device%s", NULL);
    const char *index_text = getenv("TORCHBURN_GPU_INDEX");
    if (index_text && index_text[0]) {
        char *end;
        long index = strtol(index_text, &end, 10);
        if (*end || index < 0 || index >= (long)count) {
            char detail[96];
            snprintf(detail, sizeof detail, "'%s' (this machine has %u Vulkan device%s)", index_text, count,
                     count == 1 ? "" : "s");
            return unavailable("TORCHBURN_GPU_INDEX=%s is not a device index", detail);
        }
        VkPhysicalDeviceProperties properties;
        tb_vk.GetPhysicalDeviceProperties(devices[index], &properties);
        if (!compute_family(devices[index], &tb_vk.queue_family))
            return unavailable("Vulkan device %.200s has no compute queue", properties.deviceName);
        tb_vk.physical = devices[index];
        tb_vk.info.device_index = (int)index;
        return TB_OK;
    }
    bool allow_cpu = env_flag("TORCHBURN_VULKAN_ALLOW_CPU");
    int best = -1, best_rank = -1;
    char cpu_name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE] = "";
    for (uint32_t i = 0; i < count; i++) {
        VkPhysicalDeviceProperties properties;
        tb_vk.GetPhysicalDeviceProperties(devices[i], &properties);
        uint32_t family;
        if (!compute_family(devices[i], &family))
            continue;
        if (properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && !allow_cpu) {
            snprintf(cpu_name, sizeof cpu_name, "%s", properties.deviceName);
            continue;
        }
        int rank = type_rank(properties.deviceType);
        if (rank > best_rank) {
            best = (int)i;
            best_rank = rank;
            tb_vk.queue_family = family;
        }
    }
    if (best < 0) {
        if (cpu_name[0])
            return unavailable("the only Vulkan device is the CPU-type %.100s (a software renderer, not a GPU); "
                               "TORCHBURN_VULKAN_ALLOW_CPU=1 lets torchburn use it",
                               cpu_name);
        return unavailable("no Vulkan device has a compute queue%s", NULL);
    }
    tb_vk.physical = devices[best];
    tb_vk.info.device_index = best;
    return TB_OK;
}

static void record_facts(void) {
    tb_engine_device_info *info = &tb_vk.info;
    VkPhysicalDeviceProperties properties;
    tb_vk.GetPhysicalDeviceProperties(tb_vk.physical, &properties);
    snprintf(info->backend, sizeof info->backend, "Vulkan");
    snprintf(info->adapter_name, sizeof info->adapter_name, "%s", properties.deviceName);
    snprintf(info->device_type, sizeof info->device_type, "%s", type_name(properties.deviceType));
    info->api_version = properties.apiVersion;
    info->driver_version = properties.driverVersion;
    info->vendor_id = properties.vendorID;
    info->device_id = properties.deviceID;
    /* TORCHBURN_VULKAN_MAX_BUFFER_RANGE=N (tests) lowers maxStorageBufferRange to N bytes (at least 4096),
     * so small models exercise the splitting of large weights and the chunking by buffer size */
    info->max_storage_buffer_range = properties.limits.maxStorageBufferRange;
    const char *range_text = getenv("TORCHBURN_VULKAN_MAX_BUFFER_RANGE");
    long long range = range_text && range_text[0] ? strtoll(range_text, NULL, 10) : 0;
    if (range >= 4096 && (unsigned long long)range < info->max_storage_buffer_range)
        info->max_storage_buffer_range = (uint64_t)range & ~(uint64_t)3;
    /* TORCHBURN_VULKAN_MAX_WORKGROUPS=N (tests) caps the dispatch size so every grid-stride loop runs
     * several rounds on small inputs, without dispatching 65,536 real workgroups */
    const char *cap_text = getenv("TORCHBURN_VULKAN_MAX_WORKGROUPS");
    long cap = cap_text && cap_text[0] ? strtol(cap_text, NULL, 10) : 0;
    for (int d = 0; d < 3; d++) {
        uint32_t limit = properties.limits.maxComputeWorkGroupCount[d];
        info->max_workgroup_count[d] = (cap >= 1 && (unsigned long)cap < limit) ? (uint32_t)cap : limit;
    }
    info->max_workgroup_invocations = properties.limits.maxComputeWorkGroupInvocations;
    info->max_shared_memory_bytes = properties.limits.maxComputeSharedMemorySize;
    if (tb_vk.GetPhysicalDeviceProperties2 && properties.apiVersion >= VK_API_VERSION_1_1) {
        VkPhysicalDeviceDriverProperties driver = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
        VkPhysicalDeviceSubgroupProperties subgroup = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
        if (properties.apiVersion >= VK_API_VERSION_1_2)
            subgroup.pNext = &driver;
        VkPhysicalDeviceProperties2 properties2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                                   .pNext = &subgroup};
        tb_vk.GetPhysicalDeviceProperties2(tb_vk.physical, &properties2);
        info->subgroup_size = subgroup.subgroupSize;
        /* the *_subgroup shaders need Vulkan 1.1 SPIR-V and subgroup basic, vote and arithmetic in compute */
        const VkSubgroupFeatureFlags needed =
            VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
        info->subgroup_reductions = tb_vk.instance_version >= VK_API_VERSION_1_1 &&
                                    (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                                    (subgroup.supportedOperations & needed) == needed &&
                                    !env_flag("TORCHBURN_VULKAN_NO_SUBGROUP");
        /* 16-bit storage buffers (core in 1.1): the *_w16 matmul kernels read bf16/f16 weights as they are */
        VkPhysicalDevice16BitStorageFeatures storage16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
        VkPhysicalDeviceFeatures2 features = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &storage16};
        if (tb_vk.GetPhysicalDeviceFeatures2 && tb_vk.instance_version >= VK_API_VERSION_1_1) {
            tb_vk.GetPhysicalDeviceFeatures2(tb_vk.physical, &features);
            info->storage_16bit = storage16.storageBuffer16BitAccess && !env_flag("TORCHBURN_VULKAN_NO_16BIT");
        }
        if (properties.apiVersion >= VK_API_VERSION_1_2) {
            snprintf(info->driver_name, sizeof info->driver_name, "%s", driver.driverName);
            snprintf(info->driver_info, sizeof info->driver_info, "%s", driver.driverInfo);
        }
    }
    VkPhysicalDeviceMemoryProperties memory;
    tb_vk.GetPhysicalDeviceMemoryProperties(tb_vk.physical, &memory);
    for (uint32_t h = 0; h < memory.memoryHeapCount; h++)
        if (memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            info->vram_bytes += memory.memoryHeaps[h].size;
    /* staging mode when the device has memory the host cannot map (a discrete GPU's VRAM), or on request */
    tb_vk.staging = env_flag("TORCHBURN_VULKAN_FORCE_STAGING");
    for (uint32_t t = 0; t < memory.memoryTypeCount; t++) {
        VkMemoryPropertyFlags flags = memory.memoryTypes[t].propertyFlags;
        if ((flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !(flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
            tb_vk.staging = true;
    }
    info->staging = tb_vk.staging;
}

static tb_status create_device(void) {
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                     .queueFamilyIndex = tb_vk.queue_family, .queueCount = 1,
                                     .pQueuePriorities = &priority};
    VkPhysicalDevice16BitStorageFeatures storage16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                      .storageBuffer16BitAccess = VK_TRUE};
    VkDeviceCreateInfo create = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1,
                                 .pQueueCreateInfos = &queue, .pNext = tb_vk.info.storage_16bit ? &storage16 : NULL};
    VkResult result = tb_vk.CreateDevice(tb_vk.physical, &create, NULL, &tb_vk.device);
    if (result != VK_SUCCESS) {
        tb_vk.device = VK_NULL_HANDLE;
        return unavailable("vkCreateDevice failed: %s", result_name(result));
    }
#define TB_VK_LOAD_DEVICE(name)                                                       \
    tb_vk.name = (PFN_vk##name)tb_vk.GetDeviceProcAddr(tb_vk.device, "vk" #name); \
    if (!tb_vk.name)                                                                  \
        return unavailable("the driver lacks %s", "vk" #name);
    TB_VK_DEVICE_FUNCTIONS(TB_VK_LOAD_DEVICE)
#undef TB_VK_LOAD_DEVICE
    tb_vk.GetDeviceQueue(tb_vk.device, tb_vk.queue_family, 0, &tb_vk.queue);

    /* one layout for every kernel: bindings 0..4 = a, b, c, y, d; TB_VK_PUSH_BYTES of push constants */
    VkDescriptorSetLayoutBinding bindings[TB_VK_BINDINGS];
    for (uint32_t i = 0; i < TB_VK_BINDINGS; i++)
        bindings[i] = (VkDescriptorSetLayoutBinding){.binding = i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                     .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo set_create = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                                  .bindingCount = TB_VK_BINDINGS, .pBindings = bindings};
    if ((result = tb_vk.CreateDescriptorSetLayout(tb_vk.device, &set_create, NULL, &tb_vk.set_layout)) != VK_SUCCESS)
        return unavailable("vkCreateDescriptorSetLayout failed: %s", result_name(result));
    VkPushConstantRange push = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = TB_VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo layout_create = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                                .setLayoutCount = 1, .pSetLayouts = &tb_vk.set_layout,
                                                .pushConstantRangeCount = 1, .pPushConstantRanges = &push};
    if ((result = tb_vk.CreatePipelineLayout(tb_vk.device, &layout_create, NULL, &tb_vk.pipeline_layout)) != VK_SUCCESS)
        return unavailable("vkCreatePipelineLayout failed: %s", result_name(result));
    VkCommandPoolCreateInfo pool_create = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                           .flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
                                           .queueFamilyIndex = tb_vk.queue_family};
    if ((result = tb_vk.CreateCommandPool(tb_vk.device, &pool_create, NULL, &tb_vk.command_pool)) != VK_SUCCESS)
        return unavailable("vkCreateCommandPool failed: %s", result_name(result));
    VkCommandBufferAllocateInfo allocate = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                            .commandPool = tb_vk.command_pool,
                                            .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    if ((result = tb_vk.AllocateCommandBuffers(tb_vk.device, &allocate, &tb_vk.command_buffer)) != VK_SUCCESS)
        return unavailable("vkAllocateCommandBuffers failed: %s", result_name(result));
    VkFenceCreateInfo fence_create = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((result = tb_vk.CreateFence(tb_vk.device, &fence_create, NULL, &tb_vk.fence)) != VK_SUCCESS)
        return unavailable("vkCreateFence failed: %s", result_name(result));
    return TB_OK;
}

static tb_status settings_check(void) {
    const char *backend = getenv("TORCHBURN_WGPU_BACKEND");
    if (backend && backend[0] && strcasecmp(backend, "vulkan") != 0 && strcasecmp(backend, "auto") != 0)
        return unavailable("TORCHBURN_WGPU_BACKEND='%s': this build's only GPU backend is vulkan", backend);
    return TB_OK;
}

tb_status tb_vk_init_locked(void) {
    if (tb_vk.attempted)
        return tb_vk.ready ? TB_OK : tb_error_set(TB_ERR_UNSUPPORTED, "vulkan: %s", tb_vk.info.reason);
    tb_vk.attempted = true;
    memset(&tb_vk.info, 0, sizeof tb_vk.info);
    snprintf(tb_vk.info.backend, sizeof tb_vk.info.backend, "Vulkan");
    tb_status status = settings_check();
    if (status == TB_OK)
        status = load_functions();
    if (status == TB_OK)
        status = create_instance();
    if (status == TB_OK)
        status = pick_device();
    if (status == TB_OK) {
        record_facts();
        status = create_device();
    }
    if (status != TB_OK) {
        char reason[sizeof tb_vk.info.reason];
        memcpy(reason, tb_vk.info.reason, sizeof reason);
        int device_count = tb_vk.info.device_count;
        tb_vk_shutdown_locked();
        tb_vk.attempted = true; /* remember the outcome */
        memcpy(tb_vk.info.reason, reason, sizeof reason);
        tb_vk.info.device_count = device_count;
        snprintf(tb_vk.info.backend, sizeof tb_vk.info.backend, "Vulkan");
        return tb_error_set(TB_ERR_UNSUPPORTED, "vulkan: %s", reason);
    }
    tb_vk.ready = true;
    tb_vk.info.available = true;
    return TB_OK;
}

tb_status tb_vk_shutdown_locked(void) {
    if (tb_vk.live_buffers > 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "vulkan: cannot reset the engine while %lld buffers are alive",
                            (long long)tb_vk.live_buffers);
    if (tb_vk.device) {
        tb_vk.DeviceWaitIdle(tb_vk.device);
        tb_vk_pool_drain_locked();
        for (int k = 0; k < TB_VK_KERNEL_COUNT; k++)
            if (tb_vk.pipelines[k])
                tb_vk.DestroyPipeline(tb_vk.device, tb_vk.pipelines[k], NULL);
        tb_vk_fused_release();
        if (tb_vk.descriptor_pool)
            tb_vk.DestroyDescriptorPool(tb_vk.device, tb_vk.descriptor_pool, NULL);
        if (tb_vk.fence)
            tb_vk.DestroyFence(tb_vk.device, tb_vk.fence, NULL);
        if (tb_vk.command_pool)
            tb_vk.DestroyCommandPool(tb_vk.device, tb_vk.command_pool, NULL);
        if (tb_vk.pipeline_layout)
            tb_vk.DestroyPipelineLayout(tb_vk.device, tb_vk.pipeline_layout, NULL);
        if (tb_vk.set_layout)
            tb_vk.DestroyDescriptorSetLayout(tb_vk.device, tb_vk.set_layout, NULL);
        tb_vk.DestroyDevice(tb_vk.device, NULL);
    }
    if (tb_vk.instance && tb_vk.DestroyInstance)
        tb_vk.DestroyInstance(tb_vk.instance, NULL);
    /* the loader stays mapped (no dlclose): drivers keep process-wide state and atexit handlers in it,
     * and unloading them is a known source of crashes at exit; a later dlopen finds it again */
    memset(&tb_vk, 0, sizeof tb_vk);
    return TB_OK;
}
#endif
