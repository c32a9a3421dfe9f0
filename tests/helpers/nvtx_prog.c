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
 */
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
        } else if (strcmp(argv[i], "--cuda-init") == 0) {
            printf("InitializeInjection %d\n", cuda_init());
        } else {
            fprintf(stderr, "usage: nvtx_prog [--fork] [--cuda-init] [--forms] [--domains]\n");
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
