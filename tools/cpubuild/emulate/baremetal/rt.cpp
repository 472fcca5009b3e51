// A freestanding runtime for one bare-metal run under Bochs: COM1 output, the
// C library functions compiled code calls (memcpy, memset, posix_memalign, mmap ...),
// static TLS for the main "thread" (x86-64 variant II: the block right below
// the thread pointer, %fs:0 holding the pointer itself), constructors, an IDT
// that reports exceptions, and the end of the simulation (the string
// "Shutdown" written to port 0x8900). Whatever else the project's code needs
// (a serial thread pool) comes from the project's [tool.cpubuild.baremetal] sources.
#include <cstddef>
#include <cstdint>

#include "rt.h"

namespace {

inline void outb(uint16_t port, uint8_t v) { asm volatile("outb %0, %1" : : "a"(v), "Nd"(port)); }
inline uint8_t inb(uint16_t port) {
    uint8_t v;
    asm volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
    return v;
}
constexpr uint16_t kCom1 = 0x3f8;

void serial_init() {
    outb(kCom1 + 1, 0x00);  // no interrupts
    outb(kCom1 + 3, 0x80);  // DLAB
    outb(kCom1 + 0, 0x01);  // 115200 baud
    outb(kCom1 + 1, 0x00);
    outb(kCom1 + 3, 0x03);  // 8N1
    outb(kCom1 + 2, 0x00);  // no FIFO: one byte at a time
    outb(kCom1 + 4, 0x03);
}

uintptr_t heap_next;

struct IdtGate {
    uint16_t off0, sel;
    uint8_t ist, attr;
    uint16_t off1;
    uint32_t off2, zero;
};
IdtGate idt[32];

struct __attribute__((packed)) Pointer {
    uint16_t limit;
    uint64_t base;
};

}  // namespace

extern "C" {
extern const uint64_t rt_isr_table[32];
extern char __heap_start[], __tdata_start[], __tdata_end[];
extern char __tls_memsz[], __tls_align[];
typedef void (*Ctor)();
extern Ctor __init_array_start[], __init_array_end[];
void* __dso_handle;

void rt_putc(char c) {
    for (int spin = 0; spin < 1000000 && !(inb(kCom1 + 5) & 0x20); ++spin) {
    }
    outb(kCom1, uint8_t(c));
}

void rt_puts(const char* s) {
    while (*s) rt_putc(*s++);
}

void rt_hex(uint64_t v, int digits) {
    for (int i = digits - 1; i >= 0; --i) rt_putc("0123456789abcdef"[(v >> (4 * i)) & 15]);
}

[[noreturn]] void rt_shutdown() {
    for (const char* s = "Shutdown"; *s; ++s) outb(0x8900, uint8_t(*s));
    for (;;) asm volatile("cli; hlt");
}

[[noreturn]] void rt_fault(uint64_t vector, uint64_t error, uint64_t rip) {
    rt_puts("\n@@h fault vector=");
    rt_hex(vector, 2);
    rt_puts(" error=");
    rt_hex(error, 8);
    rt_puts(" rip=");
    rt_hex(rip, 16);
    rt_puts("\n");
    rt_shutdown();
}

void* rt_alloc(size_t bytes, size_t align) {
    if (align < 16) align = 16;
    uintptr_t p = (heap_next + align - 1) & ~uintptr_t(align - 1);
    heap_next = p + bytes;
    if (heap_next > (uintptr_t(96) << 20)) {
        rt_puts("\n@@h fault out-of-memory\n");
        rt_shutdown();
    }
    return reinterpret_cast<void*>(p);
}

// ------------------------------------------------------------ C library
void* memcpy(void* d, const void* s, size_t n) {
    void* r = d;
    asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    return r;
}
void* memmove(void* d, const void* s, size_t n) {
    if (d <= s || static_cast<char*>(d) >= static_cast<const char*>(s) + n) return memcpy(d, s, n);
    char* dd = static_cast<char*>(d);
    const char* ss = static_cast<const char*>(s);
    while (n--) dd[n] = ss[n];
    return d;
}
void* memset(void* d, int c, size_t n) {
    void* r = d;
    asm volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
    return r;
}
int memcmp(const void* a, const void* b, size_t n) {
    const unsigned char *x = static_cast<const unsigned char*>(a), *y = static_cast<const unsigned char*>(b);
    for (size_t i = 0; i < n; ++i)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}
size_t strlen(const char* s) {
    size_t n = 0;
    while (s[n]) ++n;
    return n;
}
int strcmp(const char* a, const char* b) {
    while (*a && *a == *b) ++a, ++b;
    return static_cast<unsigned char>(*a) - static_cast<unsigned char>(*b);
}
char* getenv(const char*) { return nullptr; }  // a bare-metal guest has no environment
int posix_memalign(void** p, size_t align, size_t bytes) {
    *p = rt_alloc(bytes, align);
    return 0;
}
void* malloc(size_t bytes) { return rt_alloc(bytes, 16); }
void free(void*) {}  // a run is short: the bump allocator never reuses memory
// Anonymous mappings only (kernels map their scratch memory): zeroed pages from
// the bump allocator; a file mapping fails as MAP_FAILED.
void* mmap(void*, size_t bytes, int, int, int fd, long) {
    if (fd != -1) return reinterpret_cast<void*>(-1);
    return memset(rt_alloc(bytes, 4096), 0, bytes);
}
int munmap(void*, size_t) { return 0; }
[[noreturn]] void abort() {
    rt_puts("\n@@h fault abort\n");
    rt_shutdown();
}
int __cxa_atexit(void (*)(void*), void*, void*) { return 0; }
int __cxa_thread_atexit(void (*)(void*), void*, void*) { return 0; }
int __cxa_thread_atexit_impl(void (*)(void*), void*, void*) { return 0; }
void __cxa_pure_virtual() { abort(); }
void __stack_chk_fail() { abort(); }

// ------------------------------------------------------------ start
void rt_start() {
    serial_init();
    heap_next = reinterpret_cast<uintptr_t>(__heap_start);
    // static TLS: [block][TCB], the thread pointer at the TCB, *tp == tp
    // (the linker placed each variable at tp - round_up(memsz, align) + its offset)
    const size_t align = reinterpret_cast<size_t>(__tls_align) > 1 ? reinterpret_cast<size_t>(__tls_align) : 1;
    const size_t memsz = reinterpret_cast<size_t>(__tls_memsz);
    const size_t block = (memsz + align - 1) & ~(align - 1);
    char* base = static_cast<char*>(rt_alloc(block + 64, align > 64 ? align : 64));
    char* tp = base + block;
    const size_t init = size_t(__tdata_end - __tdata_start);
    memcpy(base, __tdata_start, init);
    memset(base + init, 0, block - init);
    *reinterpret_cast<char**>(tp) = tp;
    const uint64_t fs = reinterpret_cast<uint64_t>(tp);
    asm volatile("wrmsr" : : "c"(0xc0000100u), "a"(uint32_t(fs)), "d"(uint32_t(fs >> 32)));
    for (int i = 0; i < 32; ++i) {
        const uint64_t h = rt_isr_table[i];
        idt[i] = IdtGate{uint16_t(h), 0x08, 0, 0x8e, uint16_t(h >> 16), uint32_t(h >> 32), 0};
    }
    const Pointer p{sizeof idt - 1, reinterpret_cast<uint64_t>(idt)};
    asm volatile("lidt %0" : : "m"(p));
    for (Ctor* c = __init_array_start; c != __init_array_end; ++c) (*c)();
    rt_puts("\n@@h start\n");
    const int rc = harness_main();
    rt_puts("\n@@h end ");
    rt_hex(uint64_t(rc), 2);
    rt_puts("\n");
    rt_shutdown();
}
}  // extern "C"
