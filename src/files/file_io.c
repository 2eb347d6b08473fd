/* Bounded file reads, refcounted read-only mappings and path helpers for the model-files layer. */
#include "files/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens path for reading only if it is a regular file. O_NONBLOCK keeps open() from waiting for a writer
 * when path is a FIFO (or a device that blocks on open); the type is checked on the descriptor (no race
 * with a rename) before any read, and blocking mode is restored for the regular file. */
static tb_status open_regular(const char *path, int *fd_out, size_t *size_out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return tb_error_set(TB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return tb_error_set(TB_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tb_error_set(TB_ERR_IO, "%s: not a regular file (%s)", path, S_ISFIFO(st.st_mode) ? "a FIFO"
                            : S_ISDIR(st.st_mode) ? "a directory" : S_ISSOCK(st.st_mode) ? "a socket"
                            : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a special file");
    }
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        return tb_error_set(TB_ERR_IO, "%s: cannot set blocking mode: %s", path, strerror(err));
    }
    if (st.st_size < 0 || (unsigned long long)st.st_size > (unsigned long long)SIZE_MAX) {
        close(fd);
        return tb_error_set(TB_ERR_IO, "%s: file size %lld is not addressable", path, (long long)st.st_size);
    }
    *fd_out = fd;
    *size_out = (size_t)st.st_size;
    return TB_OK;
}

bool tb_path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 || errno != ENOENT;
}

tb_status tb_files_read_all(const char *path, size_t max_bytes, char **data, size_t *size) {
    *data = NULL;
    *size = 0;
    int fd = -1;
    size_t file_size = 0;
    TB_TRY(open_regular(path, &fd, &file_size));
    if (file_size > max_bytes) {
        close(fd);
        return tb_error_set(TB_ERR_FORMAT, "%s: %zu bytes is more than the limit of %zu bytes", path, file_size,
                            max_bytes);
    }
    char *buffer = malloc(file_size + 1);
    if (!buffer) {
        close(fd);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, file_size);
    }
    size_t done = 0;
    while (done < file_size) {
        ssize_t got = read(fd, buffer + done, file_size - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) { /* error, or the file shrank while reading */
            int err = got < 0 ? errno : 0;
            free(buffer);
            close(fd);
            return tb_error_set(TB_ERR_IO, "%s: read failed after %zu of %zu bytes%s%s", path, done, file_size,
                                err ? ": " : "", err ? strerror(err) : "");
        }
        done += (size_t)got;
    }
    close(fd);
    buffer[file_size] = '\0';
    *data = buffer;
    *size = file_size;
    return TB_OK;
}

tb_status tb_mapping_open(const char *path, tb_mapping **out) {
    *out = NULL;
    int fd = -1;
    size_t file_size = 0;
    TB_TRY(open_regular(path, &fd, &file_size));
    tb_mapping *mapping = calloc(1, sizeof *mapping);
    if (!mapping) {
        close(fd);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    atomic_init(&mapping->refcount, 1);
    mapping->size = file_size;
    if (file_size > 0) {
        void *data = mmap(NULL, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (data == MAP_FAILED) {
            int err = errno;
            close(fd);
            free(mapping);
            return tb_error_set(TB_ERR_IO, "%s: cannot map %zu bytes: %s", path, file_size, strerror(err));
        }
        mapping->data = data;
        mapping->owned = true;
    } else {
        static const unsigned char empty[1];
        mapping->data = empty;
    }
    close(fd);
    *out = mapping;
    return TB_OK;
}

tb_status tb_mapping_borrow(const void *data, size_t size, tb_mapping **out) {
    *out = NULL;
    tb_mapping *mapping = calloc(1, sizeof *mapping);
    if (!mapping)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "out of memory");
    static const unsigned char empty[1];
    atomic_init(&mapping->refcount, 1);
    mapping->data = data ? data : empty;
    mapping->size = size;
    *out = mapping;
    return TB_OK;
}

void tb_mapping_retain(tb_mapping *mapping) {
    if (mapping)
        atomic_fetch_add_explicit(&mapping->refcount, 1, memory_order_relaxed);
}

void tb_mapping_release(tb_mapping *mapping) {
    if (!mapping || atomic_fetch_sub_explicit(&mapping->refcount, 1, memory_order_acq_rel) != 1)
        return;
    if (mapping->owned)
        munmap((void *)mapping->data, mapping->size);
    free(mapping);
}

void tb_mapping_storage_release(void *context, void *data, size_t nbytes) {
    (void)data;
    (void)nbytes;
    tb_mapping_release(context);
}

bool tb_path_is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *tb_path_join(const char *dir, const char *name) {
    size_t dir_length = strlen(dir), name_length = strlen(name);
    bool slash = dir_length > 0 && dir[dir_length - 1] != '/';
    char *joined = malloc(dir_length + slash + name_length + 1);
    if (!joined)
        return NULL;
    memcpy(joined, dir, dir_length);
    if (slash)
        joined[dir_length] = '/';
    memcpy(joined + dir_length + slash, name, name_length + 1);
    return joined;
}

char *tb_path_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    size_t length = slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(length + 1);
    if (!dir)
        return NULL;
    memcpy(dir, path, length);
    dir[length] = '\0';
    return dir;
}

const char *tb_path_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}
