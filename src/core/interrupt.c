/* The per-thread interrupt hook behind the cancel points (see status.h): long calls poll it between units
 * of work, at most once per TB_INTERRUPT_POLL_NS of the monotonic clock, so a cancel point costs one clock
 * read when no poll is due. */
#define _POSIX_C_SOURCE 200809L
#include "torchburn/status.h"

#include <stddef.h>
#include <time.h>

static _Thread_local tb_interrupt_fn hook;
static _Thread_local void *hook_context;
static _Thread_local long long last_poll_ns;
static _Thread_local long long period_ns = TB_INTERRUPT_POLL_NS;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

tb_interrupt_fn tb_interrupt_hook_set(tb_interrupt_fn fn, void *context, void **previous_context) {
    tb_interrupt_fn previous = hook;
    if (previous_context)
        *previous_context = hook_context;
    hook = fn;
    hook_context = context;
    last_poll_ns = now_ns(); /* the first poll comes one period after the call starts */
    return previous;
}

void tb_interrupt_poll_period_set(long long ns) { period_ns = ns < 0 ? TB_INTERRUPT_POLL_NS : ns; }

tb_status tb_interrupt_check(const char *where) {
    if (!hook)
        return TB_OK;
    const long long now = now_ns();
    if (now - last_poll_ns < period_ns)
        return TB_OK;
    last_poll_ns = now;
    if (!hook(hook_context))
        return TB_OK;
    return tb_error_set(TB_ERR_INTERRUPTED, "%s: interrupted", where);
}
