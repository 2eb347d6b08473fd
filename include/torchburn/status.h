/* Error reporting for the whole runtime: a status code returned by every fallible function, plus a
 * thread-local message that says what went wrong and where. Nothing in torchburn calls exit() or
 * abort() on bad input. */
#ifndef TORCHBURN_STATUS_H
#define TORCHBURN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TB_API __attribute__((visibility("default")))
#define TB_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#define TB_NODISCARD __attribute__((warn_unused_result))
#else
#define TB_API
#define TB_PRINTF(fmt_index, first_arg)
#define TB_NODISCARD
#endif

typedef enum tb_status {
    TB_OK = 0,
    TB_ERR_INVALID_ARGUMENT, /* a value is out of range or inconsistent (Python: ValueError) */
    TB_ERR_SHAPE,            /* shapes do not match or cannot broadcast (ValueError) */
    TB_ERR_DTYPE,            /* a dtype is not supported here (TypeError) */
    TB_ERR_OUT_OF_MEMORY,    /* an allocation failed (MemoryError) */
    TB_ERR_IO,               /* a file could not be opened, read or mapped (OSError) */
    TB_ERR_FORMAT,           /* a file or text is malformed (ValueError) */
    TB_ERR_UNSUPPORTED,      /* valid but not implemented, or the CPU lacks a feature (RuntimeError) */
    TB_ERR_READ_ONLY,        /* a write was requested through a read-only buffer (ValueError) */
    TB_ERR_INTERNAL,         /* a broken invariant inside torchburn (RuntimeError) */
    TB_ERR_INTERRUPTED,      /* the caller's interrupt hook asked to stop (Python: KeyboardInterrupt) */
    TB_STATUS_COUNT
} tb_status;

/* Sets the calling thread's error message (printf-style) and returns `status`, so that error paths
 * read `return tb_error_set(TB_ERR_SHAPE, "matmul: ...");`. */
TB_API tb_status tb_error_set(tb_status status, const char *format, ...) TB_PRINTF(2, 3);

/* Prepends "prefix: " to the current message (for adding context while unwinding). Returns status. */
TB_API tb_status tb_error_prefix(tb_status status, const char *format, ...) TB_PRINTF(2, 3);

/* The calling thread's last error message; "" when none. Valid until the next tb_error_* call. */
TB_API const char *tb_error_message(void);

TB_API void tb_error_clear(void);

/* A short stable name for a status, e.g. "TB_ERR_SHAPE". */
TB_API const char *tb_status_name(tb_status status);

/* Cancel points. A long-running call (a model load, a prefill) polls the calling thread's interrupt hook
 * between units of work (a layer, a chunk of a tensor) and stops with TB_ERR_INTERRUPTED, leaving its
 * object as it was before the call. The hook is per thread, so worker threads and other callers are not
 * affected; polls are rate-limited to one per TB_INTERRUPT_POLL_NS so a hook may be expensive (the Python
 * binding takes the GIL back to check for signals). */
typedef int (*tb_interrupt_fn)(void *context); /* nonzero: stop */
#define TB_INTERRUPT_POLL_NS 50000000LL /* 50 ms */

/* Installs `fn` (NULL removes it) for the calling thread; returns the previous hook and its context. */
TB_API tb_interrupt_fn tb_interrupt_hook_set(tb_interrupt_fn fn, void *context, void **previous_context);

/* The calling thread's poll period in ns (0: poll at every cancel point, as the tests do; < 0: default). */
TB_API void tb_interrupt_poll_period_set(long long ns);

/* A cancel point: TB_ERR_INTERRUPTED with a message naming `where` when the hook asks to stop, else TB_OK. */
TB_API TB_NODISCARD tb_status tb_interrupt_check(const char *where);

/* Propagate a non-OK status from an expression. */
#define TB_TRY(expr)                       \
    do {                                   \
        tb_status tb_try_status_ = (expr); \
        if (tb_try_status_ != TB_OK)       \
            return tb_try_status_;         \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
