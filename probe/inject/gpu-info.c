/*
 * gpu-info.c — TARGET_INFO_GPU from the CUDA driver, when a context is created on a device
 * (capture.h). The driver is the one that loaded this library: its functions are looked up in
 * the libcuda.so.1 already in the process (RTLD_NOLOAD), never linked. CUPTI's DEVICE activity
 * record says less (no bus location, no opt-in shared memory): it is used only where this fails
 * (inject.c: describe_device).
 */
#define _GNU_SOURCE
#include "capture.h"
#include "cupti-decode.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*get_fn)(CUdevice *, int);
typedef CUresult (*attr_fn)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*name_fn)(char *, int, CUdevice);
typedef CUresult (*mem_fn)(size_t *, CUdevice);
typedef CUresult (*uuid_fn)(CUuuid *, CUdevice);

#define LOOKUP(lib, var, name) memcpy(&(var), &(void *){dlsym(lib, name)}, sizeof(var))

bool amp_capture_gpu_info_emit(uint32_t ordinal) {
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) return false;
    get_fn get;
    attr_fn attr;
    name_fn get_name;
    mem_fn total_mem;
    uuid_fn get_uuid;
    LOOKUP(lib, get, "cuDeviceGet");
    LOOKUP(lib, attr, "cuDeviceGetAttribute");
    LOOKUP(lib, get_name, "cuDeviceGetName");
    LOOKUP(lib, total_mem, "cuDeviceTotalMem_v2");
    LOOKUP(lib, get_uuid, "cuDeviceGetUuid_v2");
    CUdevice dev;
    if (!get || !attr || get(&dev, (int)ordinal) != CUDA_SUCCESS) {
        dlclose(lib);
        return false;
    }
    // -1 when the driver does not say
#define ATTR(a)                                                                                    \
    ({                                                                                             \
        int v_;                                                                                    \
        attr(&v_, (a), dev) == CUDA_SUCCESS ? (int64_t)v_ : -1;                                    \
    })
    char name[256] = "", uuid[AMP_CAPTURE_UUID_LEN] = "", bus[32] = "";
    if (get_name) get_name(name, sizeof name, dev);
    CUuuid u;
    if (get_uuid && get_uuid(&u, dev) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(uuid, sizeof uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                 b[14], b[15]);
    }
    int64_t domain = ATTR(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            pci_bus = ATTR(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            pci_dev = ATTR(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
    if (domain >= 0 && pci_bus >= 0 && pci_dev >= 0)
        snprintf(bus, sizeof bus, "%04llx:%02llx:%02llx.0", (long long)domain, (long long)pci_bus,
                 (long long)pci_dev);
    size_t mem = 0;
    int64_t mem_khz = ATTR(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            bus_bits = ATTR(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
            integrated = ATTR(CU_DEVICE_ATTRIBUTE_INTEGRATED),
            clock_khz = ATTR(CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            threads_per_sm = ATTR(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
            warp = ATTR(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    amp_rec_gpu_info r = {
        .id = (int32_t)ordinal,
        .cu_device = (int32_t)ordinal,
        .name = name[0] ? name : NULL,
        .bus_location = bus[0] ? bus : NULL,
        .uuid = uuid[0] ? uuid : NULL,
        .is_discrete = integrated < 0 ? -1 : !integrated,
        .l2_cache_size = ATTR(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        .total_memory = total_mem && total_mem(&mem, dev) == CUDA_SUCCESS ? (int64_t)mem : -1,
        // double data rate: two transfers per memory clock
        .memory_bandwidth = mem_khz > 0 && bus_bits > 0 ? 2 * mem_khz * 1000 * bus_bits / 8 : -1,
        .clock_rate = clock_khz > 0 ? clock_khz * 1000 : -1,
        .sm_count = (int32_t)ATTR(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        .compute_major = (int32_t)ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        .compute_minor = (int32_t)ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        .max_threads_per_block = (int32_t)ATTR(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        .max_registers_per_block = (int32_t)ATTR(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
        .max_registers_per_sm = (int32_t)ATTR(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
        .max_shmem_per_block = ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
        .max_shmem_per_block_optin = ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        .max_shmem_per_sm = ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        .threads_per_warp = (int32_t)warp,
        .async_engines = (int32_t)ATTR(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT),
        .max_warps_per_sm = threads_per_sm > 0 && warp > 0 ? (int32_t)(threads_per_sm / warp) : -1,
        .max_blocks_per_sm = (int32_t)ATTR(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
    };
#undef ATTR
    amp_record_gpu_info(&r);
    dlclose(lib); // drops our reference only: the program still holds the driver
    return true;
}
