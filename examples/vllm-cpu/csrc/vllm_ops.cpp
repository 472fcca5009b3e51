// One translation unit per variant holding vLLM's own kernel sources, taken
// unmodified from its sdist by include path (CMakeLists.txt puts
// <sdist>/csrc/cpu on it): the torch headers are parsed once per variant,
// not once per file. The three files' helpers live in anonymous namespaces
// with distinct names, so they share a unit cleanly. Every variant is at or
// above the matrix's floor (AVX2 + F16C; ARMv8.2 dotprod + fp16), which
// vLLM's code needs. On Arm (not Apple) also activation_lut_bf16.cpp, as
// vLLM's cmake/cpu_extension.cmake builds it there (its GELU layer calls it).
#include "layernorm.cpp"
#include "activation.cpp"
#include "pos_encoding.cpp"
#if defined(__aarch64__) && !defined(__APPLE__)
#include "activation_lut_bf16.cpp"
#endif
