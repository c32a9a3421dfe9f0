/*
 * nvtx.c — NVTX ranges in the domain "ampcore" around libampcore's named layers (forward) and
 * backward nodes ("blocks.1.attn/linear"), so that a CUDA capture (ampprobe's injection library,
 * or Nsight Systems) attributes every kernel to the layer and op that launched it through the
 * innermost range around its launch. Only when an NVTX tool is injected
 * (NVTX_INJECTION64_PATH, read once per context); otherwise nothing is called. Built with the
 * header-only NVTX3 API where its headers exist (the CUDA toolkit), else without ranges.
 */
#include "amp-impl.h"

#include <string.h>

#ifdef AMP_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

static nvtxDomainHandle_t domain(void) {
    static _Thread_local nvtxDomainHandle_t d; // creating the domain twice returns the same one
    if (!d) d = nvtxDomainCreateA("ampcore");
    return d;
}

bool amp_nvtx_wanted(void) {
    return getenv("NVTX_INJECTION64_PATH") != NULL;
}

void amp_nvtx_push(const char *name) {
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    nvtxDomainRangePushEx(domain(), &a);
}

void amp_nvtx_pop(void) {
    nvtxDomainRangePop(domain());
}
#else
bool amp_nvtx_wanted(void) {
    return false;
}
void amp_nvtx_push(const char *name) {
    (void)name;
}
void amp_nvtx_pop(void) {}
#endif
