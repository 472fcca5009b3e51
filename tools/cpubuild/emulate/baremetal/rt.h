// The bare-metal runtime's interface to the driver: COM1 output and the end of the run.
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {
void rt_puts(const char* s);
void rt_putc(char c);
void rt_hex(uint64_t v, int digits);
[[noreturn]] void rt_shutdown();
void* rt_alloc(size_t bytes, size_t align);
int harness_main();
}
