/* The vulkan engine of a build without <vulkan/vulkan.h>: registered, never available, every
 * operation refused with the reason (so gpu_available() is simply False). */
#ifndef TB_HAVE_VULKAN_HEADERS
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"

static const char *const reason = "this build of torchburn has no Vulkan engine (the Vulkan headers were absent at build time)";

static tb_status refuse(void) { return tb_error_set(TB_ERR_UNSUPPORTED, "vulkan: %s", reason); }
static tb_status stub_init(void) { return refuse(); }
static void stub_info(tb_engine_device_info *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->reason, sizeof out->reason, "%s", reason);
    snprintf(out->backend, sizeof out->backend, "Vulkan");
}
static bool stub_supports(const tb_engine_op *op) { return false; }
static tb_status stub_alloc(size_t bytes, tb_engine_buffer **out) { *out = NULL; return refuse(); }
static void stub_free(tb_engine_buffer *buffer) {}
static tb_status stub_upload(tb_engine_buffer *buffer, size_t offset, const void *src, size_t bytes) { return refuse(); }
static tb_status stub_download(const tb_engine_buffer *buffer, size_t offset, void *dst, size_t bytes) { return refuse(); }
static tb_status stub_run(const tb_engine_op *ops, int count) { return refuse(); }
static tb_status stub_synchronize(void) { return TB_OK; }

tb_status tb_engine_vulkan_reset(void) { return TB_OK; }

const tb_engine tb_engine_vulkan = {
    .name = "vulkan", .init = stub_init, .device_info = stub_info, .supports_op = stub_supports,
    .buffer_alloc = stub_alloc, .buffer_free = stub_free, .buffer_upload = stub_upload,
    .buffer_download = stub_download, .run = stub_run, .synchronize = stub_synchronize,
};
#endif
