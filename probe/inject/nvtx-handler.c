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
 * Push/pop ranges live on a per-thread stack, one per domain as NVTX keeps them (a pop ends the
 * innermost range of its own domain), in one array per thread (freed whenever it empties, so
 * threads that end leak nothing); start/end ranges, which may end on another thread, in one
 * table under a mutex. At exit the ranges still open (the exiting thread's and every start/end
 * one) become rows with no end: a program that exits inside a range shows which.
 * Unset slots (NameOsThread, NameCategory, resources) become no-ops in NVTX.
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
#include <unistd.h>
#include <wchar.h>

struct nvtxDomainRegistration_st {
    uint64_t name_id; // amp_rec_string id of the domain's name
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

static void pending_emit(pending *p) {
    p->rec.text = p->text;
    amp_record_nvtx(&p->rec);
    free(p->text);
}

// A range still open at exit: a row with no end (emit; its end_ns still -1: NULL), or dropped.
static void pending_close(pending *p, bool emit) {
    if (emit)
        pending_emit(p);
    else
        free(p->text);
}

// ---------------------------------------------------------------------------------------------
// Push/pop: a stack per thread and domain

typedef struct pushed {
    pending p;
    const nvtxDomainRegistration *domain; // NULL: the default domain
} pushed;

// The thread's open push/pop ranges of every domain, in the order they were pushed.
static __thread struct {
    pushed *v;
    int n, cap;
} stack;

// How many of the thread's open ranges belong to domain d.
static int depth_of(const nvtxDomainRegistration *d) {
    int depth = 0;
    for (int i = 0; i < stack.n; i++)
        depth += stack.v[i].domain == d;
    return depth;
}

static int range_push(const nvtxDomainRegistration *d, const nvtxEventAttributes_t *a,
                      const char *ascii) {
    if (stack.n == stack.cap) {
        int cap = stack.cap ? 2 * stack.cap : 16;
        pushed *v = realloc(stack.v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        stack.v = v;
        stack.cap = cap;
    }
    const int depth = depth_of(d); // (NVTX's level of the new range: 0 for a domain's first)
    pushed *e = &stack.v[stack.n++];
    e->domain = d;
    pending_init(&e->p, AMP_NVTX_PUSH_POP, d, a, ascii);
    e->p.rec.range_id = (int64_t)__atomic_fetch_add(&next_range_id, 1, __ATOMIC_RELAXED);
    return depth;
}

// Ends domain d's innermost open range of this thread; its level, or -1 when none is open.
static int range_pop(const nvtxDomainRegistration *d) {
    int i = stack.n;
    while (i-- > 0 && stack.v[i].domain != d) {
    }
    if (i < 0) return -1; // a pop without a push: nothing to end
    pending p = stack.v[i].p;
    memmove(&stack.v[i], &stack.v[i + 1], (size_t)(stack.n - i - 1) * sizeof *stack.v);
    stack.n--;
    p.rec.end_ns = amp_record_now_ns();
    pending_emit(&p);
    if (stack.n == 0) {
        free(stack.v);
        stack.v = NULL;
        stack.cap = 0;
    }
    return depth_of(d);
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

static struct {
    pthread_mutex_t lock;
    pending *v;
    size_t n, cap;
} open_ranges = {.lock = PTHREAD_MUTEX_INITIALIZER};

static nvtxRangeId_t range_start(const nvtxDomainRegistration *d, const nvtxEventAttributes_t *a,
                                 const char *ascii) {
    pending p;
    pending_init(&p, AMP_NVTX_START_END, d, a, ascii);
    uint64_t id = __atomic_fetch_add(&next_range_id, 1, __ATOMIC_RELAXED);
    p.rec.range_id = (int64_t)id;
    pthread_mutex_lock(&open_ranges.lock);
    if (open_ranges.n == open_ranges.cap) {
        size_t cap = open_ranges.cap ? 2 * open_ranges.cap : 16;
        pending *v = realloc(open_ranges.v, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&open_ranges.lock);
            free(p.text);
            return 0;
        }
        open_ranges.v = v;
        open_ranges.cap = cap;
    }
    open_ranges.v[open_ranges.n++] = p;
    pthread_mutex_unlock(&open_ranges.lock);
    return id;
}

static void NVTX_API range_end(nvtxRangeId_t id) {
    pending p = {.rec.range_id = -1};
    pthread_mutex_lock(&open_ranges.lock);
    for (size_t i = open_ranges.n; i-- > 0;) {
        if ((uint64_t)open_ranges.v[i].rec.range_id != id) continue;
        p = open_ranges.v[i];
        open_ranges.v[i] = open_ranges.v[--open_ranges.n];
        break;
    }
    if (open_ranges.n == 0) {
        free(open_ranges.v);
        open_ranges.v = NULL;
        open_ranges.cap = 0;
    }
    pthread_mutex_unlock(&open_ranges.lock);
    if (p.rec.range_id < 0) return; // unknown id
    p.rec.end_ns = amp_record_now_ns();
    if (this_tid() != p.rec.tid) p.rec.end_tid = this_tid();
    pending_emit(&p);
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

static nvtxDomainHandle_t NVTX_API domain_create_a(const char *name) {
    nvtxDomainRegistration *d = malloc(sizeof *d);
    if (d) d->name_id = new_string(name ? name : "");
    return d;
}
static nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t *name) {
    char *s = utf8_from_wide(name);
    nvtxDomainHandle_t d = domain_create_a(s);
    free(s);
    return d;
}
static void NVTX_API domain_destroy(nvtxDomainHandle_t d) {
    free(d); // records of its ranges refer to its name's id, not to the handle
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

// The ranges still open, this thread's and every start/end one: recorded with no end (emit) or
// dropped; the tables emptied.
static void end_open(bool emit) {
    for (int i = stack.n; i-- > 0;) // innermost first
        pending_close(&stack.v[i].p, emit);
    free(stack.v);
    stack.v = NULL;
    stack.n = stack.cap = 0;
    pthread_mutex_lock(&open_ranges.lock);
    for (size_t i = 0; i < open_ranges.n; i++)
        pending_close(&open_ranges.v[i], emit);
    free(open_ranges.v);
    open_ranges.v = NULL;
    open_ranges.n = open_ranges.cap = 0;
    pthread_mutex_unlock(&open_ranges.lock);
}

// At exit the ranges still open are rows with no end. Registered after the record stream's own
// exit handler, so it runs before the stream ends.
static void open_at_exit(void) {
    end_open(true);
}

// A forked child's only thread is a copy of the forking one, cached tid included; the ranges it
// inherited open are the parent's to end and record, not the child's (at its exit).
static void in_child(void) {
    cached_tid = 0;
    pthread_mutex_init(&open_ranges.lock, NULL); // (another thread may have held it at the fork)
    end_open(false);
}

static void first_call(void) {
    pthread_atfork(NULL, NULL, in_child);
    atexit(open_at_exit);
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
