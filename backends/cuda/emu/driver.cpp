// libcuda_emu.so: the subset of the CUDA driver API that candle-backend-cuda
// calls, implemented on the host, with every kernel of csrc/ compiled in
// (see emu.h). Point the plugin at it with CANDLE_CUDA_DRIVER=/path/to/it.
//
// Device memory is host memory; streams run their work when it is queued;
// a module "loads" any fatbin or cubin image (it checks the image's magic)
// and its functions are the registered kernels. Environment:
//   CANDLE_CUDA_EMU_CC       compute capability reported ("9.0")
//   CANDLE_CUDA_EMU_DEVICES  number of devices (1)
//   CANDLE_CUDA_EMU_MEMORY   bytes of memory per device (4 GiB): allocations
//                            beyond it fail with CUDA_ERROR_OUT_OF_MEMORY
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "emu.h"

#define API extern "C" __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, INVALID_DEVICE = 101,
    INVALID_IMAGE = 200, INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500,
    LAUNCH_OUT_OF_RESOURCES = 701, LAUNCH_FAILED = 719, NOT_SUPPORTED = 801,
};

namespace emu {

// ---- kernels -------------------------------------------------------------------------------------
static std::map<std::string, KernelEntry>& registry() {
    static std::map<std::string, KernelEntry> table;
    return table;
}

void register_kernel(const char* name, KernelEntry entry) { registry()[name] = entry; }

// ---- fibers ------------------------------------------------------------------------------------
// A context switch: the callee-saved registers, the SSE and x87 control words
// and the stack pointer (System V x86-64). ucontext's swapcontext would do,
// but it also saves the signal mask, a system call per switch.
extern "C" void candle_emu_switch(void** save, void* next);
asm(R"(
    .text
    .globl candle_emu_switch
    .type candle_emu_switch, @function
candle_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size candle_emu_switch, .-candle_emu_switch
)");

const size_t STACK = 256 * 1024;

struct Fiber {
    void* sp = nullptr;  // its saved stack pointer while switched out
    dim3 tid;
    int linear = 0;
    bool done = false;
    unsigned long long* wait_gen = nullptr;  // the generation of the barrier it waits on
    unsigned long long wait_for = 0;
    unsigned long long slot = 0;             // the value it posts in a warp exchange
    char* stack = nullptr;
};

struct Barrier {
    unsigned long long gen = 0;
    int arrived = 0;
};

struct Block {
    std::vector<Fiber> fibers;
    Barrier block;
    std::vector<Barrier> warps;
    int live = 0;
    void* sched = nullptr;  // the scheduler's saved stack pointer
    KernelEntry entry;
    const char* params = nullptr;
    std::vector<char> shared;
    bool deadlock = false;
};

Fiber* current = nullptr;
dim3 block_idx, block_dim, grid_dim;
static Block* block = nullptr;

const dim3& thread_idx() { return current->tid; }
int lane() { return current->linear & 31; }
void* dynamic_shared() { return block->shared.data(); }

static void yield_until(unsigned long long* gen, unsigned long long value) {
    current->wait_gen = gen;
    current->wait_for = value;
    candle_emu_switch(&current->sp, block->sched);
}

// Arrive at a barrier of `expected` fibers: the last to arrive releases the others.
static void arrive(Barrier& b, int expected) {
    unsigned long long gen = b.gen;
    if (++b.arrived >= expected) {
        b.arrived = 0;
        ++b.gen;
        return;
    }
    yield_until(&b.gen, gen);
}

void sync_block() { arrive(block->block, block->live); }

static unsigned live_lanes(int warp) {
    unsigned mask = 0;
    for (int l = 0; l < 32; ++l) {
        size_t k = (size_t)warp * 32 + l;
        if (k < block->fibers.size() && !block->fibers[k].done) mask |= 1u << l;
    }
    return mask;
}

unsigned long long exchange(unsigned mask, unsigned long long value, int src) {
    int warp = current->linear >> 5;
    int expected = __builtin_popcount(mask & live_lanes(warp));
    current->slot = value;
    arrive(block->warps[warp], expected);
    size_t k = (size_t)warp * 32 + (src & 31);
    unsigned long long got = k < block->fibers.size() ? block->fibers[k].slot : value;
    arrive(block->warps[warp], expected);  // nobody posts again before everyone has read
    return got;
}

[[noreturn]] static void fiber_main() {
    Fiber& f = *current;
    block->entry.invoke(block->entry.fn, block->params);
    f.done = true;
    --block->live;
    // a barrier that waited only on fibers that have now exited opens
    Barrier& b = block->block;
    if (b.arrived > 0 && b.arrived >= block->live) {
        b.arrived = 0;
        ++b.gen;
    }
    for (size_t w = 0; w < block->warps.size(); ++w) {
        Barrier& wb = block->warps[w];
        if (wb.arrived > 0 && wb.arrived >= __builtin_popcount(live_lanes((int)w))) {
            wb.arrived = 0;
            ++wb.gen;
        }
    }
    candle_emu_switch(&f.sp, block->sched);
    __builtin_unreachable();  // a finished fiber is never switched back to
}

// A new fiber's stack, as candle_emu_switch leaves a switched-out one: the saved
// control words and registers, then fiber_main as the return address (entered as
// if called: the stack 16-byte aligned below a dummy return address).
static void* start_stack(char* stack) {
    uintptr_t top = ((uintptr_t)stack + STACK) & ~(uintptr_t)15;
    void** sp = (void**)top;
    *--sp = nullptr;              // fiber_main's own return address: never used
    *--sp = (void*)&fiber_main;
    for (int r = 0; r < 6; ++r) *--sp = nullptr;  // rbp rbx r12-r15
    unsigned words[2];
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(words[0]), "=m"(words[1]));
    --sp;
    std::memcpy(sp, words, 8);
    return sp;
}

static std::vector<char*> stacks;

static char* stack_for(size_t i) {
    while (stacks.size() <= i) {
        void* p = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        stacks.push_back((char*)p);
    }
    return stacks[i];
}

// Runs one block to completion; false on a deadlock (a barrier not every thread reaches).
static bool run_block(Block& b, const dim3& bd) {
    size_t n = (size_t)bd.x * bd.y * bd.z;
    b.fibers.assign(n, Fiber());
    b.warps.assign((n + 31) / 32, Barrier());
    b.block = Barrier();
    b.live = (int)n;
    for (size_t i = 0; i < n; ++i) {
        Fiber& f = b.fibers[i];
        f.linear = (int)i;
        f.tid = dim3((unsigned)(i % bd.x), (unsigned)(i / bd.x % bd.y), (unsigned)(i / ((size_t)bd.x * bd.y)));
        f.stack = stack_for(i);
        if (!f.stack) return false;
        f.sp = start_stack(f.stack);
    }
    while (b.live > 0) {
        bool progress = false;
        for (size_t i = 0; i < n; ++i) {
            Fiber& f = b.fibers[i];
            if (f.done || (f.wait_gen && *f.wait_gen == f.wait_for)) continue;
            f.wait_gen = nullptr;
            current = &f;
            candle_emu_switch(&b.sched, f.sp);
            progress = true;
        }
        if (!progress) return false;
    }
    return true;
}

}  // namespace emu

// ---- driver state ------------------------------------------------------------------------------------
struct Function {
    std::string name;
    emu::KernelEntry entry;
    int max_dynamic_shared = 48 * 1024;
};

static std::mutex lock;  // one launch or call at a time
static bool initialized = false;
static CUresult sticky = OK;
static std::map<CUdeviceptr, size_t> allocations;
static size_t allocated = 0;
static int images_fatbin = 0, images_cubin = 0;
static std::map<std::string, Function*> functions;
static int current_device = 0;
static int contexts[16];

static int env_int(const char* name, int fallback) {
    const char* v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}
static int device_count() { return env_int("CANDLE_CUDA_EMU_DEVICES", 1); }
static size_t memory_bytes() {
    const char* v = getenv("CANDLE_CUDA_EMU_MEMORY");
    return v && *v ? strtoull(v, nullptr, 10) : (4ull << 30);
}
static void capability(int* major, int* minor) {
    const char* v = getenv("CANDLE_CUDA_EMU_CC");
    *major = 9;
    *minor = 0;
    if (v && *v) sscanf(v, "%d.%d", major, minor);
}

#define GUARD std::lock_guard<std::mutex> guard(lock)
#define NEED_INIT if (!initialized) return NOT_INITIALIZED
#define CHECK_STICKY if (sticky != OK) return sticky

static const std::map<int, std::pair<const char*, const char*>> ERRORS = {
    {OK, {"CUDA_SUCCESS", "no error"}},
    {INVALID_VALUE, {"CUDA_ERROR_INVALID_VALUE", "invalid argument"}},
    {OUT_OF_MEMORY, {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"}},
    {NOT_INITIALIZED, {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"}},
    {INVALID_DEVICE, {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"}},
    {INVALID_IMAGE, {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"}},
    {INVALID_CONTEXT, {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"}},
    {INVALID_HANDLE, {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"}},
    {NOT_FOUND, {"CUDA_ERROR_NOT_FOUND", "named symbol not found"}},
    {LAUNCH_OUT_OF_RESOURCES, {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"}},
    {LAUNCH_FAILED, {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"}},
    {NOT_SUPPORTED, {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"}},
};

API CUresult cuGetErrorName(CUresult code, const char** out) {
    auto it = ERRORS.find(code);
    if (it == ERRORS.end()) return INVALID_VALUE;
    *out = it->second.first;
    return OK;
}

API CUresult cuGetErrorString(CUresult code, const char** out) {
    auto it = ERRORS.find(code);
    if (it == ERRORS.end()) return INVALID_VALUE;
    *out = it->second.second;
    return OK;
}

API CUresult cuInit(unsigned flags) {
    GUARD;
    if (flags != 0) return INVALID_VALUE;
    initialized = true;
    return OK;
}

API CUresult cuDriverGetVersion(int* v) {
    *v = 13000;
    return OK;
}

API CUresult cuDeviceGetCount(int* n) {
    NEED_INIT;
    *n = device_count();
    return OK;
}

API CUresult cuDeviceGet(int* dev, int ordinal) {
    NEED_INIT;
    if (ordinal < 0 || ordinal >= device_count()) return INVALID_DEVICE;
    *dev = ordinal;
    return OK;
}

API CUresult cuDeviceGetName(char* name, int len, int dev) {
    NEED_INIT;
    if (dev < 0 || dev >= device_count()) return INVALID_DEVICE;
    snprintf(name, len, "candle-api CUDA emulation on the CPU");
    return OK;
}

API CUresult cuDeviceGetAttribute(int* value, int attribute, int dev) {
    NEED_INIT;
    if (dev < 0 || dev >= device_count()) return INVALID_DEVICE;
    int major, minor;
    capability(&major, &minor);
    switch (attribute) {
        case 1: *value = 1024; break;           // max threads per block
        case 8: *value = 48 * 1024; break;      // shared memory per block
        case 16: *value = 2; break;             // multiprocessors
        case 75: *value = major; break;
        case 76: *value = minor; break;
        case 97: *value = 227 * 1024; break;    // shared memory per block, opt-in
        default: *value = 0;
    }
    return OK;
}

API CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) {
    NEED_INIT;
    if (dev < 0 || dev >= device_count()) return INVALID_DEVICE;
    *bytes = memory_bytes();
    return OK;
}

API CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
    NEED_INIT;
    if (dev < 0 || dev >= device_count() || dev >= 16) return INVALID_DEVICE;
    *ctx = &contexts[dev];
    return OK;
}

API CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return dev < 0 || dev >= device_count() ? INVALID_DEVICE : OK; }

API CUresult cuCtxSetCurrent(void* ctx) {
    if (ctx) current_device = (int)((int*)ctx - contexts);
    return OK;
}

API CUresult cuCtxSynchronize() {
    GUARD;
    CHECK_STICKY;
    return OK;
}

API CUresult cuStreamCreate(void** stream, unsigned) {
    NEED_INIT;
    *stream = new int(current_device);
    return OK;
}

API CUresult cuStreamSynchronize(void*) {
    GUARD;
    CHECK_STICKY;
    return OK;
}

struct Event { double ms; };

API CUresult cuEventCreate(void** event, unsigned) {
    *event = new Event{0.0};
    return OK;
}
API CUresult cuEventRecord(void*, void*) { return OK; }
API CUresult cuEventSynchronize(void*) { return OK; }
API CUresult cuEventElapsedTime(float* ms, void*, void*) {
    *ms = 0.0f;
    return OK;
}
API CUresult cuEventDestroy_v2(void* event) {
    delete (Event*)event;
    return OK;
}

API CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
    GUARD;
    NEED_INIT;
    CHECK_STICKY;
    if (bytes == 0) return INVALID_VALUE;
    if (allocated + bytes > memory_bytes()) return OUT_OF_MEMORY;
    void* p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) return OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)p;
    allocations[*ptr] = bytes;
    allocated += bytes;
    return OK;
}

API CUresult cuMemFree_v2(CUdeviceptr ptr) {
    GUARD;
    auto it = allocations.find(ptr);
    if (it == allocations.end()) return INVALID_VALUE;
    allocated -= it->second;
    allocations.erase(it);
    free((void*)ptr);
    return OK;
}

API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    GUARD;
    *total = memory_bytes();
    *free_bytes = *total - allocated;
    return OK;
}

API CUresult cuMemHostAlloc(void** ptr, size_t bytes, unsigned) {
    *ptr = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    return *ptr ? OK : OUT_OF_MEMORY;
}

API CUresult cuMemFreeHost(void* ptr) {
    free(ptr);
    return OK;
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* host, unsigned flags) {
    if (flags != 0) return INVALID_VALUE;
    *dptr = (CUdeviceptr)host;
    return OK;
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void*) {
    GUARD;
    CHECK_STICKY;
    memcpy((void*)dst, src, n);
    return OK;
}

API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void*) {
    GUARD;
    CHECK_STICKY;
    memcpy(dst, (const void*)src, n);
    return OK;
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void*) {
    GUARD;
    CHECK_STICKY;
    memmove((void*)dst, (const void*)src, n);
    return OK;
}

API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void*, CUdeviceptr src, void*, size_t n, void*) {
    GUARD;
    CHECK_STICKY;
    memmove((void*)dst, (const void*)src, n);
    return OK;
}

API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, void*) {
    GUARD;
    CHECK_STICKY;
    memset((void*)dst, value, n);
    return OK;
}

API CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr ptr) {
    GUARD;
    if (attribute != 9) return NOT_SUPPORTED;  // device ordinal only
    auto it = allocations.upper_bound(ptr);
    if (it == allocations.begin()) return INVALID_VALUE;
    --it;
    if (ptr >= it->first + it->second) return INVALID_VALUE;
    *(int*)data = 0;
    return OK;
}

API CUresult cuModuleLoadData(void** module, const void* image) {
    GUARD;
    NEED_INIT;
    const unsigned char* p = (const unsigned char*)image;
    if (p[0] == 0x50 && p[1] == 0xed && p[2] == 0x55 && p[3] == 0xba) ++images_fatbin;  // fatbin magic 0xBA55ED50
    else if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') ++images_cubin;
    else return INVALID_IMAGE;
    *module = new int(0);
    return OK;
}

API CUresult cuModuleGetFunction(void** fn, void*, const char* name) {
    GUARD;
    auto found = functions.find(name);
    if (found == functions.end()) {
        auto it = emu::registry().find(name);
        if (it == emu::registry().end()) return NOT_FOUND;
        found = functions.emplace(name, new Function{name, it->second}).first;
    }
    *fn = found->second;
    return OK;
}

API CUresult cuFuncSetAttribute(void* fn, int attribute, int value) {
    if (attribute != 8) return NOT_SUPPORTED;
    if (value > 227 * 1024) return INVALID_VALUE;
    ((Function*)fn)->max_dynamic_shared = value;
    return OK;
}

API CUresult cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shared, void*, void** params, void** extra) {
    GUARD;
    CHECK_STICKY;
    Function* f = (Function*)fn;
    if (!f) return INVALID_HANDLE;
    if ((size_t)bx * by * bz > 1024 || bz > 64 || !gx || !gy || !gz || !bx || !by || !bz || gy > 65535 ||
        gz > 65535)
        return INVALID_VALUE;
    if ((int)shared > f->max_dynamic_shared) return INVALID_VALUE;
    if (params || !extra) {
        fprintf(stderr, "emu: %s: only the parameter-buffer launch (extra) is emulated\n", f->name.c_str());
        return INVALID_VALUE;
    }
    const char* buffer = nullptr;
    size_t size = 0;
    for (void** e = extra; *e; e += 2) {
        if (e[0] == (void*)1) buffer = (const char*)e[1];
        else if (e[0] == (void*)2) size = *(size_t*)e[1];
    }
    size_t need = f->entry.size();
    if (!buffer || (size + 7) / 8 != (need + 7) / 8) {
        fprintf(stderr, "emu: %s takes %zu bytes of parameters, got %zu\n", f->name.c_str(), need, size);
        return INVALID_VALUE;
    }
    std::vector<char> copy(buffer, buffer + size);
    copy.resize(need + 8);
    emu::Block b;
    b.entry = f->entry;
    b.params = copy.data();
    b.shared.assign(shared + 16, 0);
    emu::block = &b;
    emu::grid_dim = dim3(gx, gy, gz);
    emu::block_dim = dim3(bx, by, bz);
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {
                emu::block_idx = dim3(x, y, z);
                if (!emu::run_block(b, emu::block_dim)) {
                    fprintf(stderr, "emu: %s deadlocked in block (%u, %u, %u): a barrier not every thread reaches\n",
                            f->name.c_str(), x, y, z);
                    sticky = LAUNCH_FAILED;
                    emu::block = nullptr;
                    return OK;  // as on a GPU: the failure surfaces at the next synchronizing call
                }
            }
    emu::block = nullptr;
    return OK;
}

// For tests: how many fatbin and cubin images were loaded.
API void candle_emu_images(int* fatbins, int* cubins) {
    *fatbins = images_fatbin;
    *cubins = images_cubin;
}
