/* Staging mode of the vulkan engine (device-local buffers the host cannot map: a discrete GPU's VRAM,
 * or TORCHBURN_VULKAN_FORCE_STAGING=1): every host <-> device copy goes through one mapped staging
 * buffer (host-cached memory preferred, at most TB_VK_STAGING_MAX bytes).
 *
 * Uploads are queued: the bytes are copied into the staging buffer at once and the vkCmdCopyBuffer is
 * recorded into the next run's command buffer, before its ops, so a compiled plan's inputs or an LLM
 * step's embedding and RoPE rows travel in the same submit as the compute work. A queue that would
 * outgrow the staging buffer, a download outside a run, a free of a target, or synchronize flushes it
 * as a transfer submit of its own. Uploads larger than the staging buffer, and downloads outside a
 * run, are chunked transfers, one submit per chunk (info.transfers).
 *
 * Barriers of a run that carries queued uploads: shader reads/writes of earlier submits -> transfer
 * writes (the copies), transfer -> transfer between copies whose ranges overlap (the later wins), and
 * transfer writes -> shader reads/writes and transfer reads after the last copy. The host's writes
 * into the coherent staging memory are published by the submit itself. */
#ifdef TB_HAVE_VULKAN_HEADERS
#include <string.h>

#include "engine/vulkan/vk_internal.h"

static const VkAccessFlags shader_access = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;

static VkDeviceSize align16(VkDeviceSize bytes) { return (bytes + 15) & ~(VkDeviceSize)15; }

/* Makes the staging buffer hold at least `needed` bytes (<= TB_VK_STAGING_MAX), keeping its first
 * staging_used bytes (queued uploads). */
static tb_status staging_ensure(VkDeviceSize needed) {
    const VkDeviceSize have = tb_vk.staging_buffer ? tb_vk.staging_buffer->vk.capacity : 0;
    if (needed <= have)
        return TB_OK;
    VkDeviceSize capacity = have * 2 > needed ? have * 2 : needed;
    capacity = capacity < TB_VK_STAGING_MAX ? capacity : TB_VK_STAGING_MAX;
    capacity = (capacity + 255) & ~(VkDeviceSize)255;
    tb_vk_record *fresh = NULL;
    tb_status status = tb_vk_record_create(capacity, TB_VK_MEMORY_STAGING, &fresh);
    if (status != TB_OK)
        return tb_error_prefix(status, "vulkan: the staging buffer");
    fresh->header.engine = &tb_engine_vulkan;
    fresh->header.bytes = (size_t)capacity;
    fresh->header.backend = &fresh->vk;
    if (tb_vk.staging_buffer) { /* nothing is in flight: every submit is waited for */
        memcpy(fresh->header.host, tb_vk.staging_buffer->header.host, (size_t)tb_vk.staging_used);
        tb_vk_record_destroy(tb_vk.staging_buffer);
    }
    tb_vk.staging_buffer = fresh;
    return TB_OK;
}

bool tb_vk_staging_reserve(size_t bytes, VkDeviceSize *offset) {
    const VkDeviceSize start = align16(tb_vk.staging_used);
    if (start + bytes > TB_VK_STAGING_MAX || staging_ensure(start + bytes) != TB_OK) {
        tb_error_clear();
        return false;
    }
    *offset = start;
    return true;
}

static bool ranges_overlap(const tb_vk_pending_copy *x, const tb_vk_pending_copy *y) {
    return x->target == y->target && x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes;
}

int tb_vk_record_pending_uploads(void) {
    const int count = tb_vk.pending_count;
    if (count == 0)
        return 0;
    /* earlier submits' shader accesses of the targets are done (and their writes visible) first */
    tb_vk_barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, shader_access, VK_PIPELINE_STAGE_TRANSFER_BIT,
                  VK_ACCESS_TRANSFER_WRITE_BIT);
    const VkBuffer staging = tb_vk.staging_buffer->vk.buffer;
    int since_barrier = 0; /* copies [since_barrier, i) are unordered among themselves */
    for (int i = 0; i < count; i++) {
        const tb_vk_pending_copy *copy = &tb_vk.pending[i];
        for (int j = since_barrier; j < i; j++) {
            if (ranges_overlap(copy, &tb_vk.pending[j])) { /* write after write: the later upload wins */
                tb_vk_barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                              VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
                since_barrier = i;
                break;
            }
        }
        VkBufferCopy region = {.srcOffset = copy->staging_offset, .dstOffset = copy->offset, .size = copy->bytes};
        tb_vk.CmdCopyBuffer(tb_vk.command_buffer, staging, copy->target->vk.buffer, 1, &region);
    }
    /* the run's shaders, and downloads recorded after them, see the copied bytes */
    tb_vk_barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                  VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                  shader_access | VK_ACCESS_TRANSFER_READ_BIT);
    tb_vk.pending_count = 0;
    tb_vk.staging_used = 0;
    return count;
}

/* One transfer submit: the queued uploads, then (when `source` is set) a copy of `bytes` at `offset`
 * of `source` into the staging buffer at `staging_offset`, visible to the host on return. */
static tb_status transfer_submit(const tb_vk_record *source, size_t offset, size_t bytes, VkDeviceSize staging_offset) {
    TB_TRY(tb_vk_begin_commands());
    tb_vk_record_pending_uploads();
    if (source) {
        tb_vk_barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, shader_access, VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_TRANSFER_READ_BIT);
        VkBufferCopy region = {.srcOffset = offset, .dstOffset = staging_offset, .size = bytes};
        tb_vk.CmdCopyBuffer(tb_vk.command_buffer, source->vk.buffer, tb_vk.staging_buffer->vk.buffer, 1, &region);
        tb_vk_barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                      VK_ACCESS_HOST_READ_BIT);
    }
    TB_TRY(tb_vk_end_and_submit());
    tb_vk.info.transfers++;
    return TB_OK;
}

tb_status tb_vk_flush_uploads(void) {
    return tb_vk.pending_count ? transfer_submit(NULL, 0, 0, 0) : TB_OK;
}

bool tb_vk_pending_targets(const tb_vk_record *record) {
    for (int i = 0; i < tb_vk.pending_count; i++)
        if (tb_vk.pending[i].target == record)
            return true;
    return false;
}

static void enqueue(const tb_vk_record *target, size_t offset, const void *src, size_t bytes, VkDeviceSize at) {
    memcpy((char *)tb_vk.staging_buffer->header.host + at, src, bytes);
    tb_vk.pending[tb_vk.pending_count++] =
        (tb_vk_pending_copy){.target = target, .staging_offset = at, .offset = offset, .bytes = bytes};
    tb_vk.staging_used = at + bytes;
}

tb_status tb_vk_staged_upload(const tb_vk_record *target, size_t offset, const void *src, size_t bytes) {
    VkDeviceSize at;
    if (bytes <= TB_VK_STAGING_MAX) {
        if (tb_vk.pending_count < TB_VK_PENDING_MAX && tb_vk_staging_reserve(bytes, &at)) {
            enqueue(target, offset, src, bytes, at);
            return TB_OK;
        }
        TB_TRY(tb_vk_flush_uploads()); /* the queue is full: send it, then start a new one */
        TB_TRY(staging_ensure(bytes));
        enqueue(target, offset, src, bytes, 0);
        return TB_OK;
    }
    /* larger than the staging buffer: chunks, each its own submit */
    TB_TRY(tb_vk_flush_uploads());
    TB_TRY(staging_ensure(TB_VK_STAGING_MAX));
    for (size_t done = 0; done < bytes;) {
        const size_t n = bytes - done < TB_VK_STAGING_MAX ? bytes - done : TB_VK_STAGING_MAX;
        enqueue(target, offset + done, (const char *)src + done, n, 0);
        TB_TRY(tb_vk_flush_uploads());
        done += n;
    }
    return TB_OK;
}

tb_status tb_vk_staged_download(const tb_vk_record *source, size_t offset, void *dst, size_t bytes) {
    for (size_t done = 0; done < bytes;) {
        VkDeviceSize at = 0;
        size_t n = bytes - done;
        /* the first chunk rides with the queued uploads when it fits beside them */
        if (!(tb_vk.pending_count && n <= TB_VK_STAGING_MAX && tb_vk_staging_reserve(n, &at))) {
            TB_TRY(tb_vk_flush_uploads());
            n = n < TB_VK_STAGING_MAX ? n : TB_VK_STAGING_MAX;
            TB_TRY(staging_ensure(n));
            at = 0;
        }
        TB_TRY(transfer_submit(source, offset + done, n, at));
        memcpy((char *)dst + done, (const char *)tb_vk.staging_buffer->header.host + at, n);
        done += n;
    }
    return TB_OK;
}

void tb_vk_staging_release(void) {
    tb_vk.pending_count = 0;
    tb_vk.staging_used = 0;
    if (tb_vk.staging_buffer)
        tb_vk_record_destroy(tb_vk.staging_buffer);
    tb_vk.staging_buffer = NULL;
}
#endif
