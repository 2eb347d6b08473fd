/* Thread-local error message storage behind tb_error_set / tb_error_message. */
#include "torchburn/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Messages are truncated on purpose when they would exceed the buffer. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

enum { TB_ERROR_MESSAGE_CAPACITY = 1024 };

static _Thread_local char error_message[TB_ERROR_MESSAGE_CAPACITY];

tb_status tb_error_set(tb_status status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(error_message, sizeof error_message, format, args);
    va_end(args);
    return status;
}

tb_status tb_error_prefix(tb_status status, const char *format, ...) {
    char prefix[256];
    char previous[TB_ERROR_MESSAGE_CAPACITY];
    va_list args;
    va_start(args, format);
    vsnprintf(prefix, sizeof prefix, format, args);
    va_end(args);
    memcpy(previous, error_message, sizeof previous);
    snprintf(error_message, sizeof error_message, "%s: %s", prefix, previous);
    return status;
}

const char *tb_error_message(void) { return error_message; }

void tb_error_clear(void) { error_message[0] = '\0'; }

const char *tb_status_name(tb_status status) {
    static const char *const names[TB_STATUS_COUNT] = {
        [TB_OK] = "TB_OK",
        [TB_ERR_INVALID_ARGUMENT] = "TB_ERR_INVALID_ARGUMENT",
        [TB_ERR_SHAPE] = "TB_ERR_SHAPE",
        [TB_ERR_DTYPE] = "TB_ERR_DTYPE",
        [TB_ERR_OUT_OF_MEMORY] = "TB_ERR_OUT_OF_MEMORY",
        [TB_ERR_IO] = "TB_ERR_IO",
        [TB_ERR_FORMAT] = "TB_ERR_FORMAT",
        [TB_ERR_UNSUPPORTED] = "TB_ERR_UNSUPPORTED",
        [TB_ERR_READ_ONLY] = "TB_ERR_READ_ONLY",
        [TB_ERR_INTERNAL] = "TB_ERR_INTERNAL",
        [TB_ERR_INTERRUPTED] = "TB_ERR_INTERRUPTED",
    };
    if ((unsigned)status >= TB_STATUS_COUNT)
        return "TB_ERR_UNKNOWN";
    return names[status];
}
