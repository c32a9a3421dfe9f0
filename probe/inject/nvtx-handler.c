/*
 * nvtx-handler.c — ampprobe's NVTX tool: NVTX_INJECTION64_PATH names libampprobe_inject.so, and
 * each module of the process that uses NVTX3 (the program, libtorch, ...) calls
 * InitializeInjectionNvtx2 on its first NVTX call; we fill that module's CORE and CORE2 callback
 * tables. Ranges become NVTX_EVENTS rows (amp_record_nvtx) when they end, marks at once;
 * domain names and registered strings become amp_record_string records with ids of our own.
 *
 * Needs only the NVTX3 headers: no CUDA, no driver, no GPU. Times are CLOCK_REALTIME
 * (amp_record_now_ns), the clock CUPTI stamps GPU activity with; thread ids are Linux tids, as
 * CUPTI's API records carry them (THREAD_ID_TYPE_SYSTEM), so a kernel's launch call can be
 * placed inside the innermost range of its thread (capture.h: AMP_CAPTURE_KERNEL_RANGES_SQL).
 *
 * Push/pop ranges live on per-thread stacks, one per domain as NVTX keeps them (a pop ends the
 * innermost range of its own domain), so a push or a pop costs the same at any depth. A thread's
 * stacks are kept while it lives and freed when it ends (a pthread key's destructor), its ranges
 * still open then becoming rows with no end: threads that end leak nothing. Start/end ranges,
 * which may end on another thread, live in one hash table by id under a mutex. Domains are
 * interned by name, as NVTX names a domain by a unique string: every module that creates
 * "shared" gets the one handle, its one stack per thread and its one name.
 *
 * When the process ends, the record writer (record.c) calls finish() before its last flush: the
 * ranges still open (the ending thread's and every start/end one) become rows with no end, so a
 * program that exits inside a range shows which. It does so after every exit handler of the
 * program (which may still pop and mark), and also on a fatal signal (SIGSEGV, abort), so that a
 * crash shows the ranges it happened in. Unset slots (NameOsThread, NameCategory, resources)
 * become no-ops in NVTX.
 */
#define _GNU_SOURCE
#define NVTX_NO_IMPL
#include "capture.h"

#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

// A domain, for as long as the process lives: handles are shared by every module that creates
// the name, so none is ever freed (nvtxDomainDestroy keeps it).
struct nvtxDomainRegistration_st {
    uint64_t name_id; // amp_rec_string id of the domain's name
    int index;        // of its push/pop stack in each thread's stacks (0: the default domain)
    char *name;       // UTF-8
    struct nvtxDomainRegistration_st *next;
};
struct nvtxStringRegistration_st {
    uint64_t id; // amp_rec_string id
    struct nvtxStringRegistration_st *next;
};

static uint64_t next_string_id = 1; // atomic
static uint64_t next_range_id = 1;  // atomic

static __thread int32_t cached_tid;

static int32_t this_tid(void) {
    if (!cached_tid) cached_tid = (int32_t)syscall(SYS_gettid);
    return cached_tid;
}

static uint64_t new_string(const char *value) {
    uint64_t id = __atomic_fetch_add(&next_string_id, 1, __ATOMIC_RELAXED);
    amp_record_string(&(amp_rec_string){.id = id, .value = value});
    return id;
}

// ---------------------------------------------------------------------------------------------
// Messages and attributes

// wchar_t (UTF-32 on Linux) to a malloc'd UTF-8 string; NULL for NULL (a message-less call,
// which NVTX itself lets through).
static char *utf8_from_wide(const wchar_t *w) {
    if (!w) return NULL;
    size_t n = wcslen(w);
    char *out = malloc(4 * n + 1), *p = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = (uint32_t)w[i];
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
        if (c < 0x80) {
            *p++ = (char)c;
        } else if (c < 0x800) {
            *p++ = (char)(0xC0 | c >> 6);
            *p++ = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            *p++ = (char)(0xE0 | c >> 12);
            *p++ = (char)(0x80 | (c >> 6 & 0x3F));
            *p++ = (char)(0x80 | (c & 0x3F));
        } else {
            *p++ = (char)(0xF0 | c >> 18);
            *p++ = (char)(0x80 | (c >> 12 & 0x3F));
            *p++ = (char)(0x80 | (c >> 6 & 0x3F));
            *p++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *p = 0;
    return out;
}

// An event not yet emitted: the record and the copy of its text (rec.text is pointed at it when
// the record is emitted: the tables move their structs).
typedef struct pending {
    amp_rec_nvtx rec;
    char *text; // owned
} pending;

// Fills p from the event attributes of domain d (NULL: the default domain) and an ASCII message
// (used when attrs is NULL); copies the text, as the caller's string may not outlive the call.
static void pending_init(pending *p, amp_nvtx_type type, const nvtxDomainRegistration *d,
                         const nvtxEventAttributes_t *a, const char *ascii) {
    *p = (pending){.rec = {.start_ns = amp_record_now_ns(),
                           .end_ns = -1,
                           .type = type,
                           .range_id = -1,
                           .category = -1,
                           .color = -1,
                           .domain_id = d ? d->name_id : 0,
                           .tid = this_tid(),
                           .end_tid = -1}};
    if (ascii) p->text = strdup(ascii);
    size_t need = offsetof(nvtxEventAttributes_t, message) + sizeof a->message;
    if (a && a->size >= need) {
        if (a->category != 0) p->rec.category = a->category;
        if (a->colorType == NVTX_COLOR_ARGB) p->rec.color = a->color;
        switch (a->payloadType) {
        case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64:
            p->rec.payload_type = AMP_NVTX_PAYLOAD_U64;
            p->rec.payload.u64 = a->payload.ullValue;
            break;
        case NVTX_PAYLOAD_TYPE_INT64:
            p->rec.payload_type = AMP_NVTX_PAYLOAD_I64;
            p->rec.payload.i64 = a->payload.llValue;
            break;
        case NVTX_PAYLOAD_TYPE_DOUBLE:
            p->rec.payload_type = AMP_NVTX_PAYLOAD_DOUBLE;
            p->rec.payload.f64 = a->payload.dValue;
            break;
        case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32:
            p->rec.payload_type = AMP_NVTX_PAYLOAD_U32;
            p->rec.payload.u64 = a->payload.uiValue;
            break;
        case NVTX_PAYLOAD_TYPE_INT32:
            p->rec.payload_type = AMP_NVTX_PAYLOAD_I32;
            p->rec.payload.i64 = a->payload.iValue;
            break;
        case NVTX_PAYLOAD_TYPE_FLOAT:
            p->rec.payload_type = AMP_NVTX_PAYLOAD_FLOAT;
            p->rec.payload.f64 = a->payload.fValue;
            break;
        default:
            break;
        }
        if (a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii)
            p->text = strdup(a->message.ascii);
        else if (a->messageType == NVTX_MESSAGE_TYPE_UNICODE && a->message.unicode)
            p->text = utf8_from_wide(a->message.unicode);
        else if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED && a->message.registered)
            p->rec.text_id = a->message.registered->id;
    }
}

// Records the event (its text stays p's).
static void pending_record(pending *p) {
    p->rec.text = p->text;
    amp_record_nvtx(&p->rec);
}

static void pending_emit(pending *p) {
    pending_record(p);
    free(p->text);
}

// A range still open at the end: a row with no end (emit; its end_ns still -1: NULL), or dropped.
static void pending_close(pending *p, bool emit) {
    if (emit)
        pending_emit(p);
    else
        free(p->text);
}

// ---------------------------------------------------------------------------------------------
// Push/pop: a stack per thread and domain

// One domain's open push/pop ranges on one thread, innermost last. An entry is counted in n only
// once it is whole, so that the fatal-signal path may read the stack whenever it comes.
typedef struct range_stack {
    pending *v;
    int n, cap;
} range_stack;

// The thread's push/pop stacks by domain index: kept while the thread lives (a push after the
// stack emptied allocates nothing), freed by thread_end when it ends.
static __thread struct {
    range_stack *v;
    int n; // domains this thread has a stack for: indexes below n
} stacks;

static pthread_key_t thread_key; // its value: the thread's stacks once it has any
static bool thread_key_made;     // (false: no key was left; threads that end leak their stacks)

// Domain index i's stack of this thread, created as needed; NULL when out of memory.
static range_stack *stack_of(const nvtxDomainRegistration *d) {
    const int i = d ? d->index : 0;
    if (i >= stacks.n) {
        int n = i + 1 > 2 * stacks.n ? i + 1 : 2 * stacks.n;
        range_stack *v = realloc(stacks.v, (size_t)n * sizeof *v);
        if (!v) return NULL;
        memset(v + stacks.n, 0, (size_t)(n - stacks.n) * sizeof *v);
        if (!stacks.v && thread_key_made) pthread_setspecific(thread_key, &stacks); // thread_end
        stacks.v = v;
        stacks.n = n;
    }
    return &stacks.v[i];
}

static int range_push(const nvtxDomainRegistration *d, const nvtxEventAttributes_t *a,
                      const char *ascii) {
    range_stack *s = stack_of(d);
    if (!s) return -1;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        pending *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    pending *p = &s->v[s->n];
    pending_init(p, AMP_NVTX_PUSH_POP, d, a, ascii);
    p->rec.range_id = (int64_t)__atomic_fetch_add(&next_range_id, 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_RELEASE); // (p whole before n counts it: finish on a crash)
    return s->n++; // NVTX's level of the new range: 0 for a domain's first
}

// Ends domain d's innermost open range of this thread; its level, or -1 when none is open.
static int range_pop(const nvtxDomainRegistration *d) {
    const int i = d ? d->index : 0;
    if (i >= stacks.n || stacks.v[i].n == 0) return -1; // a pop without a push: nothing to end
    range_stack *s = &stacks.v[i];
    pending p = s->v[--s->n];
    p.rec.end_ns = amp_record_now_ns();
    pending_emit(&p);
    return s->n;
}

// This thread's open push/pop ranges, innermost first: rows with no end (emit) or dropped; its
// stacks freed. (Each entry uncounted before it goes: a crash in here finds none twice.)
static void stacks_end(bool emit) {
    for (int i = 0; i < stacks.n; i++) {
        range_stack *s = &stacks.v[i];
        while (s->n > 0)
            pending_close(&s->v[--s->n], emit);
        free(s->v);
    }
    range_stack *v = stacks.v;
    stacks.v = NULL;
    stacks.n = 0;
    free(v);
}

// A thread ends (thread_key's destructor, in that thread): the ranges it leaves open are rows
// with no end, as the exiting thread's are at exit.
static void thread_end(void *arg) {
    (void)arg;
    stacks_end(true);
}

static int NVTX_API push_a(const char *message) {
    return range_push(NULL, NULL, message);
}
static int NVTX_API push_w(const wchar_t *message) {
    char *s = utf8_from_wide(message);
    int depth = range_push(NULL, NULL, s);
    free(s);
    return depth;
}
static int NVTX_API push_ex(const nvtxEventAttributes_t *a) {
    return range_push(NULL, a, NULL);
}
static int NVTX_API domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    return range_push(d, a, NULL);
}
static int NVTX_API pop(void) {
    return range_pop(NULL);
}
static int NVTX_API domain_pop(nvtxDomainHandle_t d) {
    return range_pop(d);
}

// ---------------------------------------------------------------------------------------------
// Start/end: one table, as a range may end on another thread

// The open start/end ranges in a hash table by id (open addressing, linear probing), so that
// ending one costs the same however many are open; freed whenever it empties.
static struct {
    pthread_mutex_t lock;
    pending **slots; // NULL: an empty slot
    size_t n, cap;   // cap: 0 or a power of two, at least twice n
} open_ranges = {.lock = PTHREAD_MUTEX_INITIALIZER};

// Where the probe for id starts (MurmurHash3's finaliser: ids are consecutive numbers).
static size_t home_slot(uint64_t id, size_t cap) {
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)id & (cap - 1);
}

// Puts p into slots (cap of them, with a free one) at the first free slot from its home.
static void slot_put(pending **slots, size_t cap, pending *p) {
    size_t i = home_slot((uint64_t)p->rec.range_id, cap);
    while (slots[i])
        i = (i + 1) & (cap - 1);
    slots[i] = p;
}

// Adds p to the table (lock held), doubling it when it would be more than half full; false when
// out of memory.
static bool table_add(pending *p) {
    if (2 * (open_ranges.n + 1) > open_ranges.cap) {
        size_t cap = open_ranges.cap ? 2 * open_ranges.cap : 16;
        pending **slots = calloc(cap, sizeof *slots);
        if (!slots) return false;
        for (size_t i = 0; i < open_ranges.cap; i++)
            if (open_ranges.slots[i]) slot_put(slots, cap, open_ranges.slots[i]);
        free(open_ranges.slots);
        open_ranges.slots = slots;
        open_ranges.cap = cap;
    }
    slot_put(open_ranges.slots, open_ranges.cap, p);
    open_ranges.n++;
    return true;
}

// Takes range id out of the table (lock held): the range, or NULL when it is not open. The
// entries after it in its run move back to keep every probe unbroken (no tombstones).
static pending *table_take(uint64_t id) {
    if (open_ranges.n == 0) return NULL;
    const size_t mask = open_ranges.cap - 1;
    pending **slots = open_ranges.slots;
    size_t i = home_slot(id, open_ranges.cap);
    while (slots[i] && (uint64_t)slots[i]->rec.range_id != id)
        i = (i + 1) & mask;
    pending *p = slots[i];
    if (!p) return NULL;
    for (size_t j = (i + 1) & mask; slots[j]; j = (j + 1) & mask) {
        // slots[j] may fill the hole at i when its home is not between i (excluded) and j
        size_t home = home_slot((uint64_t)slots[j]->rec.range_id, open_ranges.cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            slots[i] = slots[j];
            i = j;
        }
    }
    slots[i] = NULL;
    if (--open_ranges.n == 0) {
        free(open_ranges.slots);
        open_ranges.slots = NULL;
        open_ranges.cap = 0;
    }
    return p;
}

static nvtxRangeId_t range_start(const nvtxDomainRegistration *d, const nvtxEventAttributes_t *a,
                                 const char *ascii) {
    pending *p = malloc(sizeof *p);
    if (!p) return 0;
    pending_init(p, AMP_NVTX_START_END, d, a, ascii);
    uint64_t id = __atomic_fetch_add(&next_range_id, 1, __ATOMIC_RELAXED);
    p->rec.range_id = (int64_t)id;
    pthread_mutex_lock(&open_ranges.lock);
    bool added = table_add(p);
    pthread_mutex_unlock(&open_ranges.lock);
    if (added) return id;
    free(p->text);
    free(p);
    return 0;
}

static void NVTX_API range_end(nvtxRangeId_t id) {
    pthread_mutex_lock(&open_ranges.lock);
    pending *p = table_take(id);
    pthread_mutex_unlock(&open_ranges.lock);
    if (!p) return; // unknown id
    p->rec.end_ns = amp_record_now_ns();
    if (this_tid() != p->rec.tid) p->rec.end_tid = this_tid();
    pending_emit(p);
    free(p);
}

// Every open start/end range: rows with no end (emit) or dropped; the table emptied.
static void table_end(bool emit) {
    pthread_mutex_lock(&open_ranges.lock);
    for (size_t i = 0; i < open_ranges.cap; i++) {
        if (!open_ranges.slots[i]) continue;
        pending_close(open_ranges.slots[i], emit);
        free(open_ranges.slots[i]);
    }
    free(open_ranges.slots);
    open_ranges.slots = NULL;
    open_ranges.n = open_ranges.cap = 0;
    pthread_mutex_unlock(&open_ranges.lock);
}

static nvtxRangeId_t NVTX_API start_a(const char *message) {
    return range_start(NULL, NULL, message);
}
static nvtxRangeId_t NVTX_API start_w(const wchar_t *message) {
    char *s = utf8_from_wide(message);
    nvtxRangeId_t id = range_start(NULL, NULL, s);
    free(s);
    return id;
}
static nvtxRangeId_t NVTX_API start_ex(const nvtxEventAttributes_t *a) {
    return range_start(NULL, a, NULL);
}
static nvtxRangeId_t NVTX_API domain_start_ex(nvtxDomainHandle_t d,
                                              const nvtxEventAttributes_t *a) {
    return range_start(d, a, NULL);
}
static void NVTX_API domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id) {
    (void)d;
    range_end(id);
}

// ---------------------------------------------------------------------------------------------
// Marks, domains, registered strings

static void mark(const nvtxDomainRegistration *d, const nvtxEventAttributes_t *a,
                 const char *ascii) {
    pending p;
    pending_init(&p, AMP_NVTX_MARK, d, a, ascii);
    pending_emit(&p);
}
static void NVTX_API mark_a(const char *message) {
    mark(NULL, NULL, message);
}
static void NVTX_API mark_w(const wchar_t *message) {
    char *s = utf8_from_wide(message);
    mark(NULL, NULL, s);
    free(s);
}
static void NVTX_API mark_ex(const nvtxEventAttributes_t *a) {
    mark(NULL, a, NULL);
}
static void NVTX_API domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    mark(d, a, NULL);
}

// Every domain created, by name (a list: a process has a handful).
static struct {
    pthread_mutex_t lock;
    nvtxDomainRegistration *list;
    int n;
} domains = {.lock = PTHREAD_MUTEX_INITIALIZER};

// A new domain named name, added to the list (lock held); NULL when out of memory.
static nvtxDomainRegistration *domain_new(const char *name) {
    nvtxDomainRegistration *d = malloc(sizeof *d);
    char *copy = strdup(name);
    if (!d || !copy) {
        free(d);
        free(copy);
        return NULL;
    }
    *d = (nvtxDomainRegistration){
        .name_id = new_string(name), .index = ++domains.n, .name = copy, .next = domains.list};
    domains.list = d;
    return d;
}

// The domain named name, created on its first call. No name (NULL) is the default domain, the
// one NVTX scopes NULL handles to: its rows have no domainId. NULL as well when out of memory
// (the events then go to the default domain).
static nvtxDomainHandle_t NVTX_API domain_create_a(const char *name) {
    if (!name) return NULL;
    pthread_mutex_lock(&domains.lock);
    nvtxDomainRegistration *d = domains.list;
    while (d && strcmp(d->name, name) != 0)
        d = d->next;
    if (!d) d = domain_new(name);
    pthread_mutex_unlock(&domains.lock);
    return d;
}
static nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t *name) {
    char *s = utf8_from_wide(name);
    nvtxDomainHandle_t d = domain_create_a(s);
    free(s);
    return d;
}
// The handle stays valid: other modules may hold the same one (records of its ranges refer to its
// name's id, not to the handle).
static void NVTX_API domain_destroy(nvtxDomainHandle_t d) {
    (void)d;
}

// Registered strings live as long as the process (NVTX has no call to release one): a list
// holds them all.
static nvtxStringRegistration *registered; // atomic head

static nvtxStringHandle_t NVTX_API register_string_a(nvtxDomainHandle_t d, const char *s) {
    (void)d;
    nvtxStringRegistration *h = malloc(sizeof *h);
    if (!h) return NULL;
    h->id = new_string(s ? s : "");
    h->next = __atomic_load_n(&registered, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&registered, &h->next, h, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
    }
    return h;
}
static nvtxStringHandle_t NVTX_API register_string_w(nvtxDomainHandle_t d, const wchar_t *s) {
    char *u = utf8_from_wide(s);
    nvtxStringHandle_t h = register_string_a(d, u);
    free(u);
    return h;
}

// ---------------------------------------------------------------------------------------------
// The entry point NVTX looks up

typedef struct slot {
    unsigned id;
    NvtxFunctionPointer fn;
} slot;

#define SLOT(id, fn)                                                                               \
    { id, (NvtxFunctionPointer)(fn) }

static const slot core_slots[] = {
    SLOT(NVTX_CBID_CORE_MarkEx, mark_ex),      SLOT(NVTX_CBID_CORE_MarkA, mark_a),
    SLOT(NVTX_CBID_CORE_MarkW, mark_w),        SLOT(NVTX_CBID_CORE_RangeStartEx, start_ex),
    SLOT(NVTX_CBID_CORE_RangeStartA, start_a), SLOT(NVTX_CBID_CORE_RangeStartW, start_w),
    SLOT(NVTX_CBID_CORE_RangeEnd, range_end),  SLOT(NVTX_CBID_CORE_RangePushEx, push_ex),
    SLOT(NVTX_CBID_CORE_RangePushA, push_a),   SLOT(NVTX_CBID_CORE_RangePushW, push_w),
    SLOT(NVTX_CBID_CORE_RangePop, pop),
};

static const slot core2_slots[] = {
    SLOT(NVTX_CBID_CORE2_DomainMarkEx, domain_mark_ex),
    SLOT(NVTX_CBID_CORE2_DomainRangeStartEx, domain_start_ex),
    SLOT(NVTX_CBID_CORE2_DomainRangeEnd, domain_end),
    SLOT(NVTX_CBID_CORE2_DomainRangePushEx, domain_push_ex),
    SLOT(NVTX_CBID_CORE2_DomainRangePop, domain_pop),
    SLOT(NVTX_CBID_CORE2_DomainRegisterStringA, register_string_a),
    SLOT(NVTX_CBID_CORE2_DomainRegisterStringW, register_string_w),
    SLOT(NVTX_CBID_CORE2_DomainCreateA, domain_create_a),
    SLOT(NVTX_CBID_CORE2_DomainCreateW, domain_create_w),
    SLOT(NVTX_CBID_CORE2_DomainDestroy, domain_destroy),
};

// Stores the slots into the module's table, each index checked against the table's size.
static bool install(const NvtxExportTableCallbacks *cb, NvtxCallbackModule module,
                    const slot *slots, size_t n) {
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    if (!cb->GetModuleFunctionTable(module, &table, &size) || !table) return false;
    for (size_t i = 0; i < n; i++)
        if (slots[i].id < size && table[slots[i].id]) *table[slots[i].id] = slots[i].fn;
    return true;
}

// The process ends (record.c calls this before its last flush): the ranges still open, the
// ending thread's and every start/end one, become rows with no end.
//
// At exit (crashed false) this runs after every exit handler of the program and frees the
// tables. On a fatal signal (crashed true), in the crashing thread, it only emits: it frees
// nothing and waits on no lock for long (the heap, or a lock, may be what broke). It relies on
// what the signal handler that calls it relies on (record.c: on_fatal_signal skips the whole
// path when the crash is inside the record writer), on a stack entry being counted only once it
// is whole (range_push), and on the table's lock: tried for up to 100 ms (its holder, another
// thread, lets go within microseconds; this thread, crashed inside range_start or range_end,
// never does), then the start/end ranges are left out.
static void finish(bool crashed) {
    if (!crashed) {
        stacks_end(true);
        table_end(true);
        return;
    }
    for (int i = 0; i < stacks.n; i++)
        for (int j = stacks.v[i].n; j-- > 0;)
            pending_record(&stacks.v[i].v[j]);
    for (int tries = 0; pthread_mutex_trylock(&open_ranges.lock) != 0; tries++) {
        if (tries == 1000) return;
        nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    }
    for (size_t i = 0; i < open_ranges.cap; i++)
        if (open_ranges.slots[i]) pending_record(open_ranges.slots[i]);
    pthread_mutex_unlock(&open_ranges.lock);
}

// A forked child's only thread is a copy of the forking one, cached tid included; the ranges it
// inherited open are the parent's to end and record, not the child's (at its exit).
static void in_child(void) {
    cached_tid = 0;
    // (another thread may have held them at the fork)
    pthread_mutex_init(&open_ranges.lock, NULL);
    pthread_mutex_init(&domains.lock, NULL);
    stacks_end(false);
    table_end(false);
}

static void first_call(void) {
    thread_key_made = pthread_key_create(&thread_key, thread_end) == 0;
    pthread_atfork(NULL, NULL, in_child);
    amp_record_set_finish_hook(finish);
}

// Called once per module that uses NVTX (libtorch and the program each have their own tables),
// possibly from several threads: it only writes into the calling module's tables. Returns 1
// even when NVTX is not traced: the slots stay unset, and NVTX turns them into no-ops.
AMP_CAPTURE_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    if (!amp_capture_wanted(AMP_TRACE_NVTX)) return 1;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, first_call);
    const NvtxExportTableCallbacks *cb = get_export_table(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb) return 0;
    if (!install(cb, NVTX_CB_MODULE_CORE, core_slots, sizeof core_slots / sizeof *core_slots))
        return 0;
    install(cb, NVTX_CB_MODULE_CORE2, core2_slots, sizeof core2_slots / sizeof *core2_slots);
    return 1;
}
