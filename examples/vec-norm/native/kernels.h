// The per-variant kernels: defined in kernels.cpp, which is compiled once per
// variant; api.cpp (compiled once, baseline flags) calls them. Both end up in
// the same variant library, so these symbols stay hidden.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vecnorm::kernel {

float sumsq_f32(const float *x, std::size_t n);                 // sum of x[i]^2
void scale_f32(const float *x, float factor, float *out, std::size_t n);  // out = x * factor
std::int64_t sumsq_i8(const std::int8_t *x, std::size_t n);      // exact sum of x[i]^2

}  // namespace vecnorm::kernel
