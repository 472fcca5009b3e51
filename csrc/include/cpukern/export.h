#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#define CPUKERN_API extern "C" __attribute__((visibility("default")))

// CPUKERN_SLOTS(cpukern_x) defines cpukern_x_slots(const int64_t* slots): cpukern_x
// with its arguments in 64-bit slots, in order (a pointer or an integer as an
// int64, a float as its bits in the low half). A caller through a foreign-
// function layer converts one argument instead of nine to eighteen: ctypes
// took ~0.4 us per call against ~1.2 (11 arguments, warm; ~0.8 / ~2.1 right
// after a kernel that streamed the caches). python/cpukern/_abi.py fills them.
namespace cpukern {
template <class T>
inline T from_slot(int64_t v) {
    if constexpr (std::is_pointer_v<T>) {
        return reinterpret_cast<T>(static_cast<intptr_t>(v));
    } else if constexpr (std::is_same_v<T, float>) {
        const uint32_t bits = static_cast<uint32_t>(v);
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
    } else {
        static_assert(std::is_integral_v<T>, "a slot holds a pointer, an integer or a float");
        return static_cast<T>(v);
    }
}
template <class R, class... A, std::size_t... I>
inline R call_slots(R (*fn)(A...), const int64_t* slots, std::index_sequence<I...>) {
    return fn(from_slot<A>(slots[I])...);
}
template <class R, class... A>
inline R call_slots(R (*fn)(A...), const int64_t* slots) {
    return call_slots(fn, slots, std::index_sequence_for<A...>{});
}
}  // namespace cpukern
#define CPUKERN_SLOTS(name) \
    CPUKERN_API int32_t name##_slots(const int64_t* slots) { return cpukern::call_slots(&name, slots); }

// dtype codes shared with python/cpukern/_abi.py
enum CpukernDtype : int32_t { CPUKERN_F32 = 0, CPUKERN_BF16 = 1, CPUKERN_F16 = 2 };

// status codes, shared with python/cpukern/_abi.py: 0 ok; CPUKERN_ENOMEM: a GEMM's scratch
// buffers could not be allocated; CPUKERN_EENV: an override the op reads from the environment
// has a value it does not know (checked where it is read, so that the Python side reads none
// per call; it then names the variable); EINVAL / EDTYPE: a bug in the Python-side validation
enum CpukernStatus : int32_t {
    CPUKERN_OK = 0,
    CPUKERN_EINVAL = 1,
    CPUKERN_EDTYPE = 2,
    CPUKERN_ENOMEM = 3,
    CPUKERN_EENV = 4
};
