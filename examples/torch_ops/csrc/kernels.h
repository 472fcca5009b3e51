// The kernels every variant library implements (layernorm.cpp, activation.cpp,
// compiled per variant) and torch_bindings.cpp calls (compiled once). Plain
// pointers and sizes: no torch headers here, so the per-variant files compile fast.
#pragma once

#include <cstdint>

namespace torch_ops {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, for `rows` rows of `hidden`
void rms_norm_f32(float* out, const float* x, const float* weight, std::int64_t rows, std::int64_t hidden, float eps);
void rms_norm_bf16(std::uint16_t* out, const std::uint16_t* x, const std::uint16_t* weight, std::int64_t rows,
                   std::int64_t hidden, float eps);

// out[r, :] = silu(x[r, :d]) * x[r, d:], x has 2 * d columns
void silu_and_mul_f32(float* out, const float* x, std::int64_t rows, std::int64_t d);
void silu_and_mul_bf16(std::uint16_t* out, const std::uint16_t* x, std::int64_t rows, std::int64_t d);

}  // namespace torch_ops
