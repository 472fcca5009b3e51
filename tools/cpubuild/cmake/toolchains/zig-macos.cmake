# Build-check of the macOS arm64 variant libraries on a Linux host with the
# clang that the `ziglang` PyPI package bundles (macOS SDK headers included).
# Real macOS wheels are built on a macOS host with Apple clang (no toolchain
# file); this file exists so a Linux CI can still compile and link every
# macOS variant with the matrix's apple-clang flags.
#
# zig's clang differs from Apple's in spelling only: the target comes from
# -target instead of -arch, CPU names use '_' (apple_m1), and -bundle is not
# supported (-shared gives the same loadable Mach-O for dlopen). A generated
# wrapper translates; everything else goes through unchanged.
#
# Input: CPUBUILD_ZIG_PYTHON (cache or environment): a Python that can
# `import ziglang`; default: python3 on PATH.
if(NOT CPUBUILD_ZIG_PYTHON)
  set(CPUBUILD_ZIG_PYTHON "$ENV{CPUBUILD_ZIG_PYTHON}")
endif()
if(NOT CPUBUILD_ZIG_PYTHON)
  find_program(CPUBUILD_ZIG_PYTHON NAMES python3 python REQUIRED)
endif()
set(CPUBUILD_ZIG_TARGET "aarch64-macos.11.0" CACHE STRING "zig target triple")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CPUBUILD_ZIG_PYTHON CPUBUILD_ZIG_TARGET)

set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_PROCESSOR arm64)
set(CMAKE_OSX_ARCHITECTURES arm64 CACHE STRING "")
set(CMAKE_OSX_DEPLOYMENT_TARGET 11.0 CACHE STRING "")
set(CMAKE_OSX_SYSROOT "" CACHE PATH "")  # zig ships the SDK headers; never ask xcrun
set(CPUBUILD_ARCH aarch64 CACHE STRING "")
set(CPUBUILD_COMPILER_FAMILY apple-clang CACHE STRING "")

set(_dir "${CMAKE_BINARY_DIR}/cpubuild-zig")
file(MAKE_DIRECTORY "${_dir}")
foreach(_mode cc c++)
  file(WRITE "${_dir}/${_mode}.py" "\
import os, sys
import ziglang
zig = os.path.join(os.path.dirname(ziglang.__file__), 'zig')
args, it = [], iter(sys.argv[1:])
for a in it:
    if a == '-arch':
        next(it, None)  # the target is fixed below
        continue
    if a.startswith('-mcpu=apple-'):
        a = '-mcpu=' + a[len('-mcpu='):].replace('-', '_')
    if a == '-bundle':
        a = '-shared'
    args.append(a)
os.execv(zig, [zig, '${_mode}', '-target', '${CPUBUILD_ZIG_TARGET}', *args])
")
  file(WRITE "${_dir}/${_mode}" "#!/bin/sh\nexec '${CPUBUILD_ZIG_PYTHON}' '${_dir}/${_mode}.py' \"$@\"\n")
  file(CHMOD "${_dir}/${_mode}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
set(CMAKE_C_COMPILER "${_dir}/cc")
set(CMAKE_CXX_COMPILER "${_dir}/c++")
