/* An on/off setting read once from an environment variable ("0" turns it off; unset or anything else
 * leaves it on) and overridable at run time (tests, the Python API): TORCHBURN_PREPACK,
 * TORCHBURN_CONV_WINOGRAD. Thread-safe; a race between the first readers only reads the variable twice. */
#ifndef TORCHBURN_CORE_ENV_SWITCH_H
#define TORCHBURN_CORE_ENV_SWITCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct tb_env_switch {
    const char *name;
    atomic_int mode; /* -1: not read yet; 0: off; 1: on */
} tb_env_switch;

#define TB_ENV_SWITCH(variable) {.name = (variable), .mode = -1}

static inline bool tb_env_switch_on(tb_env_switch *s) {
    int mode = atomic_load_explicit(&s->mode, memory_order_relaxed);
    if (mode < 0) {
        const char *text = getenv(s->name);
        mode = text && strcmp(text, "0") == 0 ? 0 : 1;
        atomic_store_explicit(&s->mode, mode, memory_order_relaxed);
    }
    return mode == 1;
}

static inline void tb_env_switch_set(tb_env_switch *s, bool on) {
    atomic_store_explicit(&s->mode, on ? 1 : 0, memory_order_relaxed);
}

#endif
