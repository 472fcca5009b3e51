# Generic Linux cross toolchain for GNU cross compilers named <triplet>-gcc /
# <triplet>-g++ (Debian's g++-aarch64-linux-gnu, g++-s390x-linux-gnu, ...).
#
# Input: CPUKERN_CROSS_TRIPLET, as a cache variable (-D) or an environment
# variable; `cpubuild wheel --arch` passes the triplet of isa_matrix.toml's
# [arch.*] table. The target processor is the triplet's first field, which is
# also the arch name CMake maps onto the matrix (cmake/CpukernArch.cmake).
# Optional: CPUKERN_CROSS_SYSROOT (default /usr/<triplet>, Debian's layout).
if(NOT CPUKERN_CROSS_TRIPLET)
  set(CPUKERN_CROSS_TRIPLET "$ENV{CPUKERN_CROSS_TRIPLET}")
endif()
if(NOT CPUKERN_CROSS_TRIPLET)
  message(FATAL_ERROR "linux-cross.cmake: set CPUKERN_CROSS_TRIPLET (for example aarch64-linux-gnu)")
endif()
if(NOT CPUKERN_CROSS_SYSROOT)
  set(CPUKERN_CROSS_SYSROOT "$ENV{CPUKERN_CROSS_SYSROOT}")
endif()
if(NOT CPUKERN_CROSS_SYSROOT)
  set(CPUKERN_CROSS_SYSROOT "/usr/${CPUKERN_CROSS_TRIPLET}")
endif()
# try_compile() projects re-read this file: hand them the inputs.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CPUKERN_CROSS_TRIPLET CPUKERN_CROSS_SYSROOT)

string(REGEX MATCH "^[^-]+" _cpukern_processor "${CPUKERN_CROSS_TRIPLET}")
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR "${_cpukern_processor}")

find_program(CPUKERN_CROSS_CC NAMES "${CPUKERN_CROSS_TRIPLET}-gcc" "${CPUKERN_CROSS_TRIPLET}-gcc-12" REQUIRED)
find_program(CPUKERN_CROSS_CXX NAMES "${CPUKERN_CROSS_TRIPLET}-g++" "${CPUKERN_CROSS_TRIPLET}-g++-12" REQUIRED)
set(CMAKE_C_COMPILER "${CPUKERN_CROSS_CC}")
set(CMAKE_CXX_COMPILER "${CPUKERN_CROSS_CXX}")

# Target libraries and headers come from the cross sysroot only; programs
# (python, the matrix tool) from the build host.
set(CMAKE_FIND_ROOT_PATH "${CPUKERN_CROSS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
