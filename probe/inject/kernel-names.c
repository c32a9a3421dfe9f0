/*
 * kernel-names.c — demangled kernel names for the KERNEL rows (capture.h).
 *
 * A training run launches a few hundred distinct kernels millions of times, so each name is
 * demangled once and kept in a hash table keyed by the mangled text. The demangler is the C++
 * runtime's __cxa_demangle: the program's own when it has one (PyTorch, anything nvcc linked),
 * else libstdc++ loaded for the purpose; without either, names stay mangled (the collector then
 * stores the name as given).
 */
#define _GNU_SOURCE
#include "capture.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef char *(*demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

typedef struct entry {
    uint64_t hash; // 0: empty slot
    char *mangled;
    char *demangled; // NULL: could not be demangled
} entry;

static struct {
    pthread_mutex_t lock;
    entry *v;
    size_t cap, n; // cap is a power of two
    demangle_fn fn;
    bool looked_up;
} names = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

static demangle_fn find_demangler(void) {
    void *fn = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!fn) {
        void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL); // kept for the process
        if (lib) fn = dlsym(lib, "__cxa_demangle");
    }
    demangle_fn d;
    memcpy(&d, &fn, sizeof d); // object pointer to function pointer, as dlsym intends
    return d;
}

// Doubles the table (lock held). False when out of memory.
static bool grow(void) {
    size_t cap = names.cap ? 2 * names.cap : 256;
    entry *v = calloc(cap, sizeof *v);
    if (!v) return false;
    for (size_t i = 0; i < names.cap; i++) {
        if (!names.v[i].hash) continue;
        size_t j = names.v[i].hash & (cap - 1);
        while (v[j].hash)
            j = (j + 1) & (cap - 1);
        v[j] = names.v[i];
    }
    free(names.v);
    names.v = v;
    names.cap = cap;
    return true;
}

const char *amp_capture_demangle(const char *mangled) {
    if (strncmp(mangled, "_Z", 2) != 0) return NULL;
    uint64_t h = hash_str(mangled);
    pthread_mutex_lock(&names.lock);
    if (!names.looked_up) {
        names.fn = find_demangler();
        names.looked_up = true;
    }
    const char *result = NULL;
    if (names.fn && (2 * (names.n + 1) <= names.cap || grow())) {
        size_t j = h & (names.cap - 1);
        while (names.v[j].hash && (names.v[j].hash != h || strcmp(names.v[j].mangled, mangled)))
            j = (j + 1) & (names.cap - 1);
        entry *e = &names.v[j];
        if (!e->hash) {
            int status = -1;
            e->mangled = strdup(mangled);
            e->demangled = names.fn(mangled, NULL, NULL, &status);
            if (status != 0) {
                free(e->demangled);
                e->demangled = NULL;
            }
            if (e->mangled) {
                e->hash = h;
                names.n++;
            } else {
                free(e->demangled);
                e->demangled = NULL;
            }
        }
        result = e->demangled;
    }
    pthread_mutex_unlock(&names.lock);
    return result;
}
