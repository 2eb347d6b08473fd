/* HuggingFace checkpoint folders: a single model.safetensors or shards listed by
 * model.safetensors.index.json ("weight_map": tensor name -> shard file), every shard validated, tensors
 * looked up by name across shards. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files/file_io.h"
#include "torchburn/json.h"
#include "torchburn/safetensors.h"

static const size_t MAX_INDEX_BYTES = (size_t)64 << 20;

typedef struct checkpoint_entry {
    const char *name;
    size_t shard, index;
} checkpoint_entry;

struct tb_checkpoint {
    char *source;
    tb_safetensors_t **shards;
    size_t shard_count;
    checkpoint_entry *entries; /* sorted by name */
    size_t count;
    tb_json_document *index; /* owns the names when opened from an index */
};

static int compare_entries(const void *a, const void *b) {
    return strcmp(((const checkpoint_entry *)a)->name, ((const checkpoint_entry *)b)->name);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static tb_status add_shard(tb_checkpoint_t *ckpt, tb_safetensors_t *shard) {
    tb_safetensors_t **grown = realloc(ckpt->shards, (ckpt->shard_count + 1) * sizeof *grown);
    if (!grown) {
        tb_safetensors_close(shard);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", ckpt->source);
    }
    ckpt->shards = grown;
    ckpt->shards[ckpt->shard_count++] = shard;
    return TB_OK;
}

static tb_status open_single(tb_checkpoint_t *ckpt, const char *path) {
    tb_safetensors_t *file;
    TB_TRY(tb_safetensors_open(path, &file));
    TB_TRY(add_shard(ckpt, file));
    size_t n = tb_safetensors_count(file);
    ckpt->entries = calloc(n ? n : 1, sizeof *ckpt->entries);
    if (!ckpt->entries)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        tb_safetensors_info info;
        TB_TRY(tb_safetensors_info_at(file, i, &info));
        ckpt->entries[i] = (checkpoint_entry){.name = info.name, .shard = 0, .index = i};
    }
    ckpt->count = n;
    return TB_OK;
}

/* A shard name from the index must be a plain file name in the index's folder. */
static tb_status check_shard_name(const char *index_path, const char *tensor, const char *shard, size_t length) {
    if (length == 0 || memchr(shard, '/', length) || memchr(shard, '\\', length) || memchr(shard, 0, length) ||
        strcmp(shard, ".") == 0 || strcmp(shard, "..") == 0)
        return tb_error_set(TB_ERR_FORMAT,
                            "%s: weight_map entry '%.120s' names shard '%.120s', which is not a plain file name "
                            "in the checkpoint folder",
                            index_path, tensor, shard);
    return TB_OK;
}

static tb_status open_index(tb_checkpoint_t *ckpt, const char *index_path) {
    char *text;
    size_t size;
    TB_TRY(tb_files_read_all(index_path, MAX_INDEX_BYTES, &text, &size));
    tb_json_limits limits = {.max_bytes = MAX_INDEX_BYTES, .max_depth = 32};
    tb_status status = tb_json_parse(text, size, &limits, index_path, &ckpt->index);
    free(text);
    TB_TRY(status);
    const tb_json_value *root = tb_json_root(ckpt->index);
    if (tb_json_type_of(root) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "%s: must be a JSON object, got %s", index_path,
                            tb_json_type_name(tb_json_type_of(root)));
    const tb_json_value *map = tb_json_object_get(root, "weight_map");
    if (tb_json_type_of(map) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "%s: 'weight_map' must be an object of tensor name -> shard file, got %s",
                            index_path, map ? tb_json_type_name(tb_json_type_of(map)) : "nothing");
    const tb_json_value *metadata = tb_json_object_get(root, "metadata");
    if (metadata && tb_json_type_of(metadata) != TB_JSON_OBJECT && tb_json_type_of(metadata) != TB_JSON_NULL)
        return tb_error_set(TB_ERR_FORMAT, "%s: 'metadata' must be an object, got %s", index_path,
                            tb_json_type_name(tb_json_type_of(metadata)));

    char *folder = tb_path_dirname(index_path);
    if (!folder)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
    size_t n = tb_json_length(map);
    const char **shard_names = calloc(n ? n : 1, sizeof *shard_names);
    ckpt->entries = calloc(n ? n : 1, sizeof *ckpt->entries);
    if (!shard_names || !ckpt->entries) {
        free(folder);
        free(shard_names);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
    }
    status = TB_OK;
    for (size_t i = 0; i < n && status == TB_OK; i++) {
        const char *tensor, *shard;
        size_t tensor_length, shard_length;
        const tb_json_value *value;
        status = tb_json_object_entry(map, i, &tensor, &tensor_length, &value);
        if (status != TB_OK)
            break;
        if (tb_json_get_string(value, &shard, &shard_length) != TB_OK) {
            status = tb_error_set(TB_ERR_FORMAT, "%s: weight_map entry '%.120s' must be a shard file name, got %s",
                                  index_path, tensor, tb_json_type_name(tb_json_type_of(value)));
            break;
        }
        if (memchr(tensor, 0, tensor_length)) {
            status = tb_error_set(TB_ERR_FORMAT, "%s: weight_map name '%.120s' contains a NUL character", index_path,
                                  tensor);
            break;
        }
        status = check_shard_name(index_path, tensor, shard, shard_length);
        if (status != TB_OK)
            break;
        size_t s = 0;
        while (s < ckpt->shard_count && strcmp(shard_names[s], shard) != 0)
            s++;
        if (s == ckpt->shard_count) { /* first mention: open and validate the shard */
            char *shard_path = tb_path_join(folder, shard);
            tb_safetensors_t *file = NULL;
            if (!shard_path) {
                status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
                break;
            }
            status = tb_safetensors_open(shard_path, &file);
            free(shard_path);
            if (status != TB_OK) {
                tb_error_prefix(status, "%s: shard of tensor '%.120s'", index_path, tensor);
                break;
            }
            shard_names[s] = shard;
            status = add_shard(ckpt, file);
            if (status != TB_OK)
                break;
        }
        size_t index;
        if (tb_safetensors_find(ckpt->shards[s], tensor, &index) != TB_OK) {
            status = tb_error_set(TB_ERR_FORMAT, "%s: weight_map puts tensor '%.120s' in '%.120s', which has no such tensor",
                                  index_path, tensor, shard);
            break;
        }
        ckpt->entries[ckpt->count++] = (checkpoint_entry){.name = tensor, .shard = s, .index = index};
    }
    free(folder);
    free(shard_names);
    return status;
}

tb_status tb_checkpoint_open(const char *path, tb_checkpoint_t **out) {
    if (!path || !out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_checkpoint_open: NULL argument");
    *out = NULL;
    tb_checkpoint_t *ckpt = calloc(1, sizeof *ckpt);
    if (!ckpt || !(ckpt->source = strdup(path))) {
        free(ckpt);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    tb_status status;
    if (tb_path_is_directory(path)) {
        char *index_path = tb_path_join(path, "model.safetensors.index.json");
        char *single_path = tb_path_join(path, "model.safetensors");
        if (!index_path || !single_path)
            status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        else if (access(index_path, F_OK) == 0)
            status = open_index(ckpt, index_path);
        else if (access(single_path, F_OK) == 0)
            status = open_single(ckpt, single_path);
        else
            status = tb_error_set(TB_ERR_IO, "%s: no model.safetensors.index.json or model.safetensors in this folder",
                                  path);
        free(index_path);
        free(single_path);
    } else if (ends_with(path, ".json")) {
        status = open_index(ckpt, path);
    } else {
        status = open_single(ckpt, path);
    }
    if (status != TB_OK) {
        tb_checkpoint_close(ckpt);
        return status;
    }
    qsort(ckpt->entries, ckpt->count, sizeof *ckpt->entries, compare_entries);
    *out = ckpt;
    return TB_OK;
}

void tb_checkpoint_close(tb_checkpoint_t *checkpoint) {
    if (!checkpoint)
        return;
    for (size_t i = 0; i < checkpoint->shard_count; i++)
        tb_safetensors_close(checkpoint->shards[i]);
    free(checkpoint->shards);
    free(checkpoint->entries);
    tb_json_free(checkpoint->index);
    free(checkpoint->source);
    free(checkpoint);
}

size_t tb_checkpoint_count(const tb_checkpoint_t *checkpoint) { return checkpoint ? checkpoint->count : 0; }

const char *tb_checkpoint_name_at(const tb_checkpoint_t *checkpoint, size_t index) {
    if (!checkpoint || index >= checkpoint->count)
        return NULL;
    return checkpoint->entries[index].name;
}

tb_status tb_checkpoint_locate(const tb_checkpoint_t *checkpoint, const char *name, const tb_safetensors_t **shard,
                               size_t *index) {
    if (!checkpoint || !name)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_checkpoint_locate: NULL argument");
    checkpoint_entry key = {.name = name};
    const checkpoint_entry *found =
        bsearch(&key, checkpoint->entries, checkpoint->count, sizeof key, compare_entries);
    if (!found)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: no tensor named '%.120s'", checkpoint->source, name);
    if (shard)
        *shard = checkpoint->shards[found->shard];
    if (index)
        *index = found->index;
    return TB_OK;
}

tb_status tb_checkpoint_get(const tb_checkpoint_t *checkpoint, const char *name, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const tb_safetensors_t *shard;
    size_t index;
    TB_TRY(tb_checkpoint_locate(checkpoint, name, &shard, &index));
    return tb_safetensors_get_at(shard, index, out);
}

tb_status tb_checkpoint_info(const tb_checkpoint_t *checkpoint, const char *name, tb_safetensors_info *out) {
    const tb_safetensors_t *shard;
    size_t index;
    TB_TRY(tb_checkpoint_locate(checkpoint, name, &shard, &index));
    return tb_safetensors_info_at(shard, index, out);
}

size_t tb_checkpoint_shard_count(const tb_checkpoint_t *checkpoint) {
    return checkpoint ? checkpoint->shard_count : 0;
}

const tb_safetensors_t *tb_checkpoint_shard_at(const tb_checkpoint_t *checkpoint, size_t index) {
    if (!checkpoint || index >= checkpoint->shard_count)
        return NULL;
    return checkpoint->shards[index];
}
