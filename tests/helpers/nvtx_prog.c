/*
 * nvtx_prog.c — an NVTX3 program for the `capture` suite (tests/test_capture.c): needs no GPU.
 *
 * Under `ampprobe run` (NVTX_INJECTION64_PATH set) it makes a known set of NVTX calls: default-
 * domain pushes (ASCII, with attributes, wide), a mark, a domain with a registered string, a
 * domain mark, a start/end range ended on another thread, a nested push on that thread, and a
 * pop without a push. It prints the depths the push/pop calls returned. Options:
 *   --fork        then forks, inside a range "around-fork", a child that pushes and pops "child"
 *                 and exits through exit()
 *   --cuda-init   first calls InitializeInjection from CUDA_INJECTION64_PATH, as the CUDA driver
 *                 would (on a machine without a driver: CUPTI must fail softly)
 *   --forms       instead, the other forms of the calls: wide strings beyond ASCII (and NULL),
 *                 start/end and marks in every form, each payload type, a wide domain name and
 *                 registered string
 *   --domains     instead, ranges of two domains that do not nest (a domain's push, a default
 *                 push, the domain's pop, the default pop: each pop ends its own domain's range),
 *                 printing the levels the calls returned; then exits with a push/pop range and a
 *                 start/end range still open
 *   --thread-exit instead, 2000 threads that each end with a range (a 4 KiB message) still open,
 *                 one of them also one in a domain; prints how many KiB the heap grew by
 *   --at-exit     instead, an exit handler registered before the first NVTX call that pops the
 *                 range main left open ("whole-run") and marks "shutdown"
 *   --crash segv|abort  instead, dies of that signal inside a push/pop range ("crashing", in
 *                 "outer") with a start/end range ("started") open
 *   --many N      instead, N start/end ranges (N/8 on each of 8 threads, each thread ending its
 *                 own in the order they started), then push/pop ranges nested N deep
 *   --shared-domain  instead, a range pushed in one nvtxDomainCreateA("shared") handle and popped
 *                 through another (and a wide one): prints whether the handles are one
 *   --edge-values instead, a message of 65534 'a's and an 'é' (65536 bytes), a u64 payload of
 *                 2^63 + 5, a mark in a domain created with a NULL name
 */
#include <dlfcn.h>
#include <malloc.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// Under AddressSanitizer, --crash segv must die of its SIGSEGV through the program's own (the
// record writer's) handler, not the sanitizer's report.
__attribute__((used)) const char *__asan_default_options(void) {
    return "handle_segv=0";
}

static nvtxRangeId_t async_id;

static void *worker(void *arg) {
    (void)arg;
    nvtxRangePushA("worker");
    nvtxRangeEnd(async_id); // started on the main thread
    nvtxRangePop();
    return NULL;
}

static nvtxEventAttributes_t attrs(void) {
    return (nvtxEventAttributes_t){.version = NVTX_VERSION, .size = NVTX_EVENT_ATTRIB_STRUCT_SIZE};
}

// Two domains' push/pop ranges that overlap without nesting, then ranges left open at exit.
static void domains(void) {
    nvtxDomainHandle_t dom = nvtxDomainCreateA("other");
    nvtxEventAttributes_t a = attrs();
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "d-outer";
    int d[5];
    d[0] = nvtxDomainRangePushEx(dom, &a); // 0: the domain's first
    d[1] = nvtxRangePushA("x-inner");      // 0: the default domain's first
    usleep(20000);
    d[2] = nvtxDomainRangePop(dom); // ends d-outer (level 0), not x-inner
    usleep(40000);
    d[3] = nvtxRangePop();          // ends x-inner
    d[4] = nvtxDomainRangePop(dom); // nothing open in the domain: -1
    nvtxDomainDestroy(dom);
    printf("levels %d %d %d %d %d\n", d[0], d[1], d[2], d[3], d[4]);
    fflush(stdout);
    nvtxRangePushA("open-at-exit");
    nvtxRangeStartA("started-at-exit");
}

// The forms main() leaves out; the `capture` suite checks each row they leave.
static void forms(void) {
    nvtxRangePushW(L"\u65e5\u672c-\U0001F600");               // 3- and 4-byte UTF-8
    nvtxRangePushW((const wchar_t[]){L'a', 0xD800, L'b', 0}); // a lone surrogate: U+FFFD
    nvtxRangePushW(NULL);
    nvtxRangePushA(NULL);
    for (int i = 0; i < 4; i++)
        nvtxRangePop();
    nvtxMarkW(L"mark-w");
    nvtxMarkA(NULL);
    nvtxRangeEnd(nvtxRangeStartW(L"start-w"));
    nvtxRangeEnd(12345); // no such range

    nvtxEventAttributes_t a = attrs();
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = 1ull << 40;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "u64";
    nvtxRangeEnd(nvtxRangeStartEx(&a));
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT32;
    a.payload.uiValue = 4000000000u;
    a.message.ascii = "u32";
    nvtxMarkEx(&a);
    a.payloadType = NVTX_PAYLOAD_TYPE_INT32;
    a.payload.iValue = -7;
    a.messageType = NVTX_MESSAGE_TYPE_UNICODE;
    a.message.unicode = L"i32-\u00e9";
    nvtxMarkEx(&a);
    a.payloadType = NVTX_PAYLOAD_TYPE_FLOAT;
    a.payload.fValue = 1.5f;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "f32";
    nvtxRangePushEx(&a);
    nvtxRangePop();

    nvtxDomainHandle_t dom = nvtxDomainCreateW(L"dom-\u00e9");
    nvtxEventAttributes_t r = attrs();
    r.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    r.message.registered = nvtxDomainRegisterStringW(dom, L"reg-w");
    nvtxDomainRangeEnd(dom, nvtxDomainRangeStartEx(dom, &r));
    nvtxDomainDestroy(dom);
}

// Threads that end inside a range: each a row with no end, nothing of theirs left on the heap.
static char message[4096];

static void *open_and_end(void *arg) {
    nvtxRangePushA(message);
    if (arg)
        nvtxDomainRangePushEx(arg,
                              &(nvtxEventAttributes_t){.version = NVTX_VERSION,
                                                       .size = NVTX_EVENT_ATTRIB_STRUCT_SIZE,
                                                       .messageType = NVTX_MESSAGE_TYPE_ASCII,
                                                       .message.ascii = "thread-open-in-domain"});
    return NULL;
}

static int thread_exit(void) {
    mallopt(M_ARENA_MAX, 1); // every thread's blocks in the arena mallinfo2 counts
    memset(message, 'm', sizeof message - 1);
    nvtxDomainHandle_t dom = nvtxDomainCreateA("threads");
    nvtxRangePushA("warm-up"); // loads the handler, opens the spool
    nvtxRangePop();
    const size_t before = mallinfo2().uordblks;
    for (int i = 0; i < 2000; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, open_and_end, i == 0 ? dom : NULL) != 0) return 1;
        pthread_join(t, NULL);
    }
    const size_t after = mallinfo2().uordblks;
    printf("grew %lld KiB\n", ((long long)after - (long long)before) / 1024);
    return 0;
}

// Registered before the program's first NVTX call (so before the handler is loaded).
static void shutdown_handler(void) {
    nvtxRangePop(); // ends "whole-run"
    nvtxMarkA("shutdown");
}

// (UBSan, in the sanitizer build, would stop at the store through NULL before it faults)
__attribute__((no_sanitize("undefined"))) static void crash(const char *how) {
    nvtxRangePushA("outer");
    nvtxRangeStartA("started");
    nvtxRangePushA("crashing");
    if (strcmp(how, "abort") == 0) abort();
    volatile int *nowhere = NULL;
    *nowhere = 1;
}

static int many_n;

static void *start_end_many(void *arg) {
    (void)arg;
    const int n = many_n / 8;
    nvtxRangeId_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return NULL;
    for (int i = 0; i < n; i++)
        ids[i] = nvtxRangeStartA("many");
    for (int i = 0; i < n; i++) // oldest first: the worst order for a list scanned backwards
        nvtxRangeEnd(ids[i]);
    free(ids);
    return NULL;
}

static int many(int n) {
    many_n = n;
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        if (pthread_create(&t[i], NULL, start_end_many, NULL) != 0) return 1;
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    int deepest = -1, last = -1;
    for (int i = 0; i < n; i++)
        deepest = nvtxRangePushA("deep");
    for (int i = 0; i < n; i++)
        last = nvtxRangePop();
    printf("deepest %d last %d\n", deepest, last);
    return 0;
}

static void shared_domain(void) {
    nvtxDomainHandle_t a = nvtxDomainCreateA("shared"), b = nvtxDomainCreateA("shared"),
                       w = nvtxDomainCreateW(L"shared");
    nvtxEventAttributes_t e = attrs();
    e.messageType = NVTX_MESSAGE_TYPE_ASCII;
    e.message.ascii = "pushed-in-a";
    int level = nvtxDomainRangePushEx(a, &e);
    e.message.ascii = "pushed-in-w";
    nvtxDomainRangePushEx(w, &e);
    int popped_w = nvtxDomainRangePop(b); // ends pushed-in-w
    int popped_a = nvtxDomainRangePop(b); // ends pushed-in-a
    nvtxDomainDestroy(a);                 // b and w stay usable
    e.message.ascii = "after-destroy";
    nvtxDomainMarkEx(b, &e);
    printf("same %d %d levels %d %d %d\n", a == b, a == w, level, popped_w, popped_a);
}

static void edge_values(void) {
    static char text[65537];
    memset(text, 'a', 65534);
    memcpy(text + 65534, "\xc3\xa9", 3); // é, cut in two at byte 65535
    nvtxRangePushA(text);
    nvtxRangePop();
    nvtxEventAttributes_t e = attrs();
    e.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    e.payload.ullValue = (1ull << 63) + 5;
    e.messageType = NVTX_MESSAGE_TYPE_ASCII;
    e.message.ascii = "u64-high";
    nvtxMarkEx(&e);
    nvtxDomainHandle_t unnamed = nvtxDomainCreateA(NULL);
    e = attrs();
    e.messageType = NVTX_MESSAGE_TYPE_ASCII;
    e.message.ascii = "in-unnamed";
    nvtxDomainMarkEx(unnamed, &e);
    nvtxDomainDestroy(unnamed);
}

static int cuda_init(void) {
    const char *path = getenv("CUDA_INJECTION64_PATH");
    void *lib = path ? dlopen(path, RTLD_NOW) : NULL;
    if (!lib) {
        fprintf(stderr, "nvtx_prog: cannot load CUDA_INJECTION64_PATH: %s\n",
                path ? dlerror() : "not set");
        return -1;
    }
    int (*init)(void);
    void *sym = dlsym(lib, "InitializeInjection");
    memcpy(&init, &sym, sizeof init);
    return init ? init() : -1;
}

int main(int argc, char **argv) {
    bool do_fork = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fork") == 0) {
            do_fork = true;
        } else if (strcmp(argv[i], "--forms") == 0) {
            forms();
            return 0;
        } else if (strcmp(argv[i], "--domains") == 0) {
            domains();
            return 0;
        } else if (strcmp(argv[i], "--thread-exit") == 0) {
            return thread_exit();
        } else if (strcmp(argv[i], "--at-exit") == 0) {
            atexit(shutdown_handler);
            nvtxRangePushA("whole-run");
            return 0;
        } else if (strcmp(argv[i], "--crash") == 0 && i + 1 < argc) {
            crash(argv[i + 1]);
            return 1;
        } else if (strcmp(argv[i], "--many") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            return many(atoi(argv[i + 1]));
        } else if (strcmp(argv[i], "--shared-domain") == 0) {
            shared_domain();
            return 0;
        } else if (strcmp(argv[i], "--edge-values") == 0) {
            edge_values();
            return 0;
        } else if (strcmp(argv[i], "--cuda-init") == 0) {
            printf("InitializeInjection %d\n", cuda_init());
        } else {
            fprintf(stderr, "usage: nvtx_prog [--fork] [--cuda-init] [--forms] [--domains] "
                            "[--thread-exit] [--at-exit] [--crash segv|abort] [--many N] "
                            "[--shared-domain] [--edge-values]\n");
            return 2;
        }
    }

    int d[5];
    d[0] = nvtxRangePushA("step");
    nvtxEventAttributes_t ev = {.version = NVTX_VERSION,
                                .size = NVTX_EVENT_ATTRIB_STRUCT_SIZE,
                                .category = 7,
                                .colorType = NVTX_COLOR_ARGB,
                                .color = 0xFF00FF00u,
                                .payloadType = NVTX_PAYLOAD_TYPE_INT64,
                                .payload.llValue = -5,
                                .messageType = NVTX_MESSAGE_TYPE_ASCII,
                                .message.ascii = "layer/op"};
    d[1] = nvtxRangePushEx(&ev);
    nvtxMarkA("mark-a");
    d[2] = nvtxRangePop();
    nvtxRangePushW(L"wide-\u00fc");
    nvtxRangePop();
    d[3] = nvtxRangePop();

    nvtxDomainHandle_t dom = nvtxDomainCreateA("ampcore");
    nvtxStringHandle_t s = nvtxDomainRegisterStringA(dom, "blocks.0/linear");
    nvtxEventAttributes_t reg = {.version = NVTX_VERSION,
                                 .size = NVTX_EVENT_ATTRIB_STRUCT_SIZE,
                                 .payloadType = NVTX_PAYLOAD_TYPE_DOUBLE,
                                 .payload.dValue = 2.5,
                                 .messageType = NVTX_MESSAGE_TYPE_REGISTERED,
                                 .message.registered = s};
    nvtxDomainRangePushEx(dom, &reg);
    nvtxEventAttributes_t dm = {.version = NVTX_VERSION,
                                .size = NVTX_EVENT_ATTRIB_STRUCT_SIZE,
                                .messageType = NVTX_MESSAGE_TYPE_ASCII,
                                .message.ascii = "dmark"};
    nvtxDomainMarkEx(dom, &dm);
    nvtxDomainRangePop(dom);

    async_id = nvtxRangeStartA("async");
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
    pthread_join(t, NULL);
    nvtxDomainDestroy(dom);
    d[4] = nvtxRangePop(); // nothing open
    printf("depths %d %d %d %d %d\n", d[0], d[1], d[2], d[3], d[4]);
    fflush(stdout);

    if (do_fork) {
        nvtxRangePushA("around-fork"); // open in the parent as it forks: the parent's to record
        pid_t pid = fork();
        if (pid == 0) {
            nvtxRangePushA("child");
            nvtxRangePop();
            exit(0); // runs the exit handlers inherited from the parent
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0) return 1;
        nvtxRangePop();
    }
    return 0;
}
