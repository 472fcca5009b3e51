# Generic Linux cross toolchain for GNU cross compilers named <triplet>-gcc /
# <triplet>-g++ (Debian's g++-aarch64-linux-gnu, g++-s390x-linux-gnu, ...).
#
# Input: CPUBUILD_CROSS_TRIPLET, as a cache variable (-D) or an environment
# variable; `cpubuild wheel --arch` passes the triplet of its hardware data
# (hardware.toml). The target processor is the triplet's first field, which is
# also the arch name cpubuildConfig.cmake maps onto the hardware data.
# Optional: CPUBUILD_CROSS_SYSROOT (default /usr/<triplet>, Debian's layout).
if(NOT CPUBUILD_CROSS_TRIPLET)
  set(CPUBUILD_CROSS_TRIPLET "$ENV{CPUBUILD_CROSS_TRIPLET}")
endif()
if(NOT CPUBUILD_CROSS_TRIPLET)
  message(FATAL_ERROR "linux-cross.cmake: set CPUBUILD_CROSS_TRIPLET (for example aarch64-linux-gnu)")
endif()
if(NOT CPUBUILD_CROSS_SYSROOT)
  set(CPUBUILD_CROSS_SYSROOT "$ENV{CPUBUILD_CROSS_SYSROOT}")
endif()
if(NOT CPUBUILD_CROSS_SYSROOT)
  set(CPUBUILD_CROSS_SYSROOT "/usr/${CPUBUILD_CROSS_TRIPLET}")
endif()
# try_compile() projects re-read this file: hand them the inputs.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CPUBUILD_CROSS_TRIPLET CPUBUILD_CROSS_SYSROOT)

string(REGEX MATCH "^[^-]+" _cpubuild_processor "${CPUBUILD_CROSS_TRIPLET}")
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR "${_cpubuild_processor}")

find_program(CPUBUILD_CROSS_CC NAMES "${CPUBUILD_CROSS_TRIPLET}-gcc" "${CPUBUILD_CROSS_TRIPLET}-gcc-12" REQUIRED)
find_program(CPUBUILD_CROSS_CXX NAMES "${CPUBUILD_CROSS_TRIPLET}-g++" "${CPUBUILD_CROSS_TRIPLET}-g++-12" REQUIRED)
set(CMAKE_C_COMPILER "${CPUBUILD_CROSS_CC}")
set(CMAKE_CXX_COMPILER "${CPUBUILD_CROSS_CXX}")

# Target libraries and headers come from the cross sysroot only; programs
# (python, the matrix tool) from the build host.
set(CMAKE_FIND_ROOT_PATH "${CPUBUILD_CROSS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
