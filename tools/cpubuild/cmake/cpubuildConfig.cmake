# cpubuild's CMake package: one call builds a project's variant libraries.
#
#   find_package(cpubuild CONFIG REQUIRED)
#   cpubuild_add_variants(<name>
#     SOURCES <file>...              # compiled once per variant, with its flags
#     [COMMON_SOURCES <file>...]     # ISA-independent: compiled once (baseline flags), linked into every variant
#     [BASELINE_SOURCES <file>...]   # only in the baseline library (e.g. scalar references)
#     [INCLUDE_DIRECTORIES <dir>...] [COMPILE_OPTIONS <opt>...] [COMPILE_DEFINITIONS <def>...]
#     [LINK_LIBRARIES <lib>...] [LINK_OPTIONS <opt>...]
#     [PACKAGE_DIR <dir>]            # install destination (default: [tool.cpubuild] package)
#     [VARIANT_SOURCE_DIR <dir>]     # where the matrix's per-variant `sources` are (default: the project directory)
#     [UNITY]                        # each variant's SOURCES as one translation unit
#     [UNITY_BATCH_SIZE <n>]         # ... or as units of n sources each (built in parallel); implies UNITY
#     [UNITY_GROUPS]                 # ... or one unit per UNITY_GROUP source property (others alone)
#     [PRECOMPILE_HEADERS <hdr>...]  # precompiled once per variant (its flags), e.g. <torch/all.h>; ccache-friendly
#     [PYTHON_MODULE]                # each variant is an abi3 extension module: _<name>_<variant>.abi3.so,
#                                    # -DPy_LIMITED_API from [project] requires-python
#     [TARGETS_VAR <var>])           # receives the variant targets
#
# The variants, their flags and the features they need come from the
# project's isa_matrix.toml and cpubuild's hardware data, through
# `python -m cpubuild.matrix` (standard library only). Each variant becomes
# a MODULE library `_<name>_<variant>.so` (SOURCES plus the variant's own
# matrix `sources`, `compile-definitions`, `compile-options`, `link-libraries`
# and the `optional-flags` its compiler accepts) compiled with -D<PREFIX>_VARIANT_<VARIANT>=1
# and -D<PREFIX>_VARIANT_NAME="<variant>"; a probe compiled for the baseline
# (`_<name>_probe.so`), the manifest (`_manifest.json`) and cpubuild's runtime
# dispatcher (`_cpubuild/`) are installed next to them. docs/project.md.
#
# Cache variables (`cpubuild wheel` sets them; plain builds use the defaults):
#   CPUBUILD_ISA             variants to build: all (default) or a , / ; list (the baseline is always added)
#   CPUBUILD_PARTIAL         a part for `cpubuild merge`: an arch's floor only when CPUBUILD_ISA names it (default OFF)
#   CPUBUILD_ARCH            target arch (default: from CMAKE_SYSTEM_PROCESSOR / CMAKE_OSX_ARCHITECTURES)
#   CPUBUILD_SYMVER_HEADER   manylinux .symver header, force-included everywhere (written by cpubuild wheel)
#   CPUBUILD_PROJECT_DIR     where pyproject.toml is (default: CMAKE_SOURCE_DIR)
#   CPUBUILD_CCACHE          use ccache when installed and no launcher is set (default ON)
#   CPUBUILD_TORCH_DIR       torch projects: the torch package to build against (default: the build Python's)
#   CPUBUILD_TORCH_CXX11_ABI torch projects: libtorch's _GLIBCXX_USE_CXX11_ABI (default: read from libc10.so)
include_guard(GLOBAL)
include(CheckCSourceCompiles)
include(CheckCXXSourceCompiles)

get_filename_component(CPUBUILD_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)
get_filename_component(_cpubuild_package "${CPUBUILD_CMAKE_DIR}" DIRECTORY)
get_filename_component(_cpubuild_pythonpath "${_cpubuild_package}" DIRECTORY)
set(CPUBUILD_RUNTIME_DIR "${_cpubuild_package}/runtime")
set(CPUBUILD_HARDWARE_DATA "${_cpubuild_package}/hardware/hardware.toml")

# The probe is C; a C++-only project gets C enabled here (file scope).
get_property(_cpubuild_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
if(NOT "C" IN_LIST _cpubuild_languages)
  enable_language(C)
endif()
if("CXX" IN_LIST _cpubuild_languages)
  set(_cpubuild_lang CXX)
  set(_cpubuild_marker_suffix ".cpp")
  set(_cpubuild_marker_linkage "extern \"C\" ")
else()
  set(_cpubuild_lang C)
  set(_cpubuild_marker_suffix ".c")
  set(_cpubuild_marker_linkage "")
endif()

if(NOT Python_EXECUTABLE)
  find_package(Python COMPONENTS Interpreter REQUIRED)
endif()

set(CPUBUILD_PROJECT_DIR "${CMAKE_SOURCE_DIR}" CACHE PATH "Project directory (pyproject.toml with [tool.cpubuild])")
set(CPUBUILD_ISA "all" CACHE STRING "Variants to build: 'all' or a ,/; list (the baseline is always added)")
option(CPUBUILD_PARTIAL "A part for cpubuild merge: an arch's floor is built only when CPUBUILD_ISA names it" OFF)
set(CPUBUILD_SYMVER_HEADER "" CACHE FILEPATH "Header of .symver directives (written by cpubuild wheel)")
option(CPUBUILD_CCACHE "Use ccache when installed and no compiler launcher is set" ON)

# Runs cpubuild's stdlib-only modules with the Python of the build, finding
# cpubuild where this file lives (an installed package or a checkout).
function(_cpubuild_python result_var)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${_cpubuild_pythonpath}" "${Python_EXECUTABLE}" ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(STRIP "${err}" err)
    message(FATAL_ERROR "cpubuild: ${err}")
  endif()
  set(${result_var} "${out}" PARENT_SCOPE)
endfunction()

# ------------------------------------------------------------------ arch and compiler
if(NOT CPUBUILD_ARCH)
  set(_cpubuild_processor "${CMAKE_SYSTEM_PROCESSOR}")
  if(APPLE AND CMAKE_OSX_ARCHITECTURES)
    set(_cpubuild_processor "${CMAKE_OSX_ARCHITECTURES}")
  endif()
  string(TOLOWER "${_cpubuild_processor}" CPUBUILD_ARCH)
endif()
set(CPUBUILD_ARCH "${CPUBUILD_ARCH}" CACHE STRING "Target arch (cpubuild's name or an alias)")

# A toolchain may name the family (zig's clang building for macOS speaks the
# apple-clang flags through a translating wrapper: toolchains/zig-macos.cmake).
if(NOT CPUBUILD_COMPILER_FAMILY)
  set(_id "${CMAKE_${_cpubuild_lang}_COMPILER_ID}")
  if(_id STREQUAL "AppleClang")
    set(CPUBUILD_COMPILER_FAMILY apple-clang)
  elseif(_id MATCHES "Clang")
    set(CPUBUILD_COMPILER_FAMILY clang)
  elseif(_id STREQUAL "GNU")
    set(CPUBUILD_COMPILER_FAMILY gcc)
  else()
    message(FATAL_ERROR "cpubuild: unsupported compiler ${_id} (isa_matrix.toml flags are for gcc, clang and apple-clang)")
  endif()
endif()

# ------------------------------------------------------------------ the matrix
set(_cpubuild_matrix_out "${CMAKE_BINARY_DIR}/cpubuild/matrix.cmake")
_cpubuild_python(_ -m cpubuild.matrix --project "${CPUBUILD_PROJECT_DIR}"
                 cmake --arch "${CPUBUILD_ARCH}" --compiler "${CPUBUILD_COMPILER_FAMILY}" --out "${_cpubuild_matrix_out}")
include("${_cpubuild_matrix_out}")  # CPUBUILD_PACKAGE, CPUBUILD_ENV_PREFIX, CPUBUILD_ARCH, CPUBUILD_VARIANTS, ..._FLAGS
set_property(DIRECTORY "${CMAKE_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             "${CPUBUILD_PROJECT_DIR}/pyproject.toml" "${CPUBUILD_MATRIX_FILE}" "${CPUBUILD_HARDWARE_DATA}")
message(STATUS "cpubuild: ${CPUBUILD_PACKAGE} for ${CPUBUILD_ARCH} with ${CPUBUILD_COMPILER_FAMILY}")

# ------------------------------------------------------------------ torch projects
# kind = torch: every variant is a torch C++ extension (TORCH_LIBRARY), compiled
# against the headers of the torch the build uses and linked to its libraries,
# which the wheel never carries (`import torch` has loaded them before the
# dispatcher loads the one variant). CPUBUILD_TORCH_DIR is the torch package
# (include/, lib/): cpubuild wheel passes a downloaded one for cross builds;
# default: the torch of the build's Python.
if(CPUBUILD_KIND STREQUAL "torch")
  if(NOT CPUBUILD_TORCH_DIR)
    # no ';' in the code: ARGN is a CMake list and would split it there
    _cpubuild_python(found -c "print(__import__('os').path.dirname(getattr(__import__('importlib.util').util.find_spec('torch'), 'origin', None) or ''))")
    string(STRIP "${found}" found)
    if(NOT found)
      message(FATAL_ERROR "cpubuild: ${CPUBUILD_PACKAGE} is a torch project ([tool.cpubuild] kind = torch), but the build's Python (${Python_EXECUTABLE}) has no torch: add torch to build-system.requires")
    endif()
    set(CPUBUILD_TORCH_DIR "${found}" CACHE PATH "The torch package the variants build against (include/, lib/)")
  endif()
  if(NOT DEFINED CPUBUILD_TORCH_CXX11_ABI)
    _cpubuild_python(abi -m cpubuild.torchdist abi "${CPUBUILD_TORCH_DIR}")
    string(STRIP "${abi}" abi)
    set(CPUBUILD_TORCH_CXX11_ABI "${abi}" CACHE STRING "libtorch's _GLIBCXX_USE_CXX11_ABI")
  endif()
  _cpubuild_python(CPUBUILD_TORCH_VERSION -m cpubuild.torchdist version "${CPUBUILD_TORCH_DIR}")
  string(STRIP "${CPUBUILD_TORCH_VERSION}" CPUBUILD_TORCH_VERSION)
  add_library(cpubuild_torch INTERFACE IMPORTED)
  set_target_properties(cpubuild_torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CPUBUILD_TORCH_DIR}/include;${CPUBUILD_TORCH_DIR}/include/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${CPUBUILD_TORCH_CXX11_ABI}"
    INTERFACE_LINK_LIBRARIES "${CPUBUILD_TORCH_DIR}/lib/libtorch_cpu.so;${CPUBUILD_TORCH_DIR}/lib/libc10.so")
  message(STATUS "cpubuild: torch ${CPUBUILD_TORCH_VERSION} from ${CPUBUILD_TORCH_DIR} (C++11 ABI ${CPUBUILD_TORCH_CXX11_ABI})")
  # Python's headers too: torch extensions that are Python modules (vLLM's
  # core/registration.h) include Python.h. Headers only: nothing links libpython.
  if(NOT Python_INCLUDE_DIRS)
    find_package(Python COMPONENTS Interpreter Development.Module QUIET)
  endif()
  # scikit-build-core names the directory even where no headers are installed
  # (an image's Python without python3-dev): add only one that holds Python.h.
  if(Python_INCLUDE_DIRS AND EXISTS "${Python_INCLUDE_DIRS}/Python.h")
    set_property(TARGET cpubuild_torch APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES ${Python_INCLUDE_DIRS})
  else()
    message(STATUS "cpubuild: no Python headers for ${Python_EXECUTABLE}: sources that include Python.h will not compile")
  endif()
  # OpenMP: one runtime per process. Variants compile with -fopenmp but link
  # torch's own libgomp file (the one libtorch_cpu needs, same soname), never
  # the compiler's: `import torch` has loaded it, and the wheel does not carry it.
  option(CPUBUILD_OPENMP "torch projects: compile variants with OpenMP on torch's own runtime" ON)
  if(CPUBUILD_OPENMP AND CPUBUILD_COMPILER_FAMILY STREQUAL "gcc")
    _cpubuild_python(_omp -m cpubuild.torchdist openmp "${CPUBUILD_TORCH_DIR}")
    string(STRIP "${_omp}" CPUBUILD_TORCH_OPENMP)
    if(CPUBUILD_TORCH_OPENMP)
      set_property(TARGET cpubuild_torch APPEND PROPERTY INTERFACE_COMPILE_OPTIONS -fopenmp)
      set_property(TARGET cpubuild_torch APPEND PROPERTY INTERFACE_LINK_LIBRARIES "${CPUBUILD_TORCH_OPENMP}")
      message(STATUS "cpubuild: OpenMP from torch: ${CPUBUILD_TORCH_OPENMP}")
    else()
      message(STATUS "cpubuild: torch's libtorch_cpu needs no OpenMP runtime: variants build without OpenMP")
    endif()
  endif()
endif()

if(APPLE)
  set(CPUBUILD_LIBRARY_SUFFIX ".dylib")  # CMake names MODULE libraries *.so even on macOS
else()
  set(CPUBUILD_LIBRARY_SUFFIX ".so")
endif()

# Reproducible objects: no absolute source or build paths in the binaries.
# With CPUBUILD_PATH_TOKENS (a compiler cache shared between runners, whose key
# is the command line) a known root is written as a token ({project}, {build},
# {cpubuild}, {cache}, {torch}) that cpubuild's compiler wrapper turns back into
# this build's directory after the cache has hashed the command.
function(_cpubuild_prefix_map result old new)
  if(CPUBUILD_PATH_TOKENS)  # the longest root that holds `old` (a root may lie inside another)
    set(best_length 0)
    set(best "${old}")
    foreach(pair "${CMAKE_BINARY_DIR}|{build}" "${CMAKE_SOURCE_DIR}|{project}" "${_cpubuild_package}|{cpubuild}"
                 "${CPUBUILD_CACHE_ROOT}|{cache}" "${CPUBUILD_TORCH_DIR}|{torch}")
      string(REPLACE "|" ";" pair "${pair}")
      list(GET pair 0 root)
      list(GET pair 1 token)
      string(FIND "${old}/" "${root}/" at)
      string(LENGTH "${root}" length)
      if(root AND at EQUAL 0 AND length GREATER best_length)
        string(SUBSTRING "${old}" ${length} -1 rest)
        set(best "${token}${rest}")
        set(best_length ${length})
      endif()
    endforeach()
    set(old "${best}")
  endif()
  set(${result} "-ffile-prefix-map=${old}=${new}" PARENT_SCOPE)
endfunction()
_cpubuild_prefix_map(_map_build "${CMAKE_BINARY_DIR}" build)  # first: the build directory may lie in the project
_cpubuild_prefix_map(_map_project "${CMAKE_SOURCE_DIR}" .)
_cpubuild_prefix_map(_map_package "${_cpubuild_package}" cpubuild)
set(CPUBUILD_COMMON_FLAGS "${_map_project}" "${_map_build}" "${_map_package}")
if(NOT APPLE)
  set(CPUBUILD_LINK_FLAGS -Wl,--as-needed -Wl,-z,noexecstack -Wl,-z,relro -Wl,-z,now -Wl,--build-id=sha1)
endif()
# manylinux floor (docs/wheels.md): `cpubuild wheel` writes CPUBUILD_SYMVER_HEADER,
# .symver directives binding libc/libm/libstdc++ symbols to the newest version the
# target policy allows; it is force-included everywhere. gcc 12 calls _Float16
# helpers (__extendhfsf2@GCC_12.0.0) on CPUs without F16C: link them from the
# static libgcc.a (hidden there) so no GCC_12 symbol version is imported.
# torch's and Python's headers live in the build's venv: their paths (in
# __FILE__ of TORCH_CHECK and friends) must not reach the binaries either.
if(CPUBUILD_KIND STREQUAL "torch")
  _cpubuild_prefix_map(_map_torch "${CPUBUILD_TORCH_DIR}" torch)
  list(APPEND CPUBUILD_COMMON_FLAGS "${_map_torch}")
  foreach(dir IN LISTS Python_INCLUDE_DIRS)
    list(APPEND CPUBUILD_COMMON_FLAGS "-ffile-prefix-map=${dir}=python")
  endforeach()
endif()
if(CPUBUILD_SYMVER_HEADER)
  list(APPEND CPUBUILD_COMMON_FLAGS "SHELL:-include \"${CPUBUILD_SYMVER_HEADER}\"")
endif()
set(CPUBUILD_SYSTEM_LIBRARIES "")
if(CPUBUILD_COMPILER_FAMILY STREQUAL "gcc" AND NOT APPLE)
  set(CPUBUILD_SYSTEM_LIBRARIES -l:libgcc.a)
endif()

if(CPUBUILD_CCACHE AND NOT CMAKE_C_COMPILER_LAUNCHER AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(CPUBUILD_CCACHE_PROGRAM ccache)
  if(CPUBUILD_CCACHE_PROGRAM)
    set(CMAKE_C_COMPILER_LAUNCHER "${CPUBUILD_CCACHE_PROGRAM}")
    set(CMAKE_CXX_COMPILER_LAUNCHER "${CPUBUILD_CCACHE_PROGRAM}")
  endif()
endif()

# ------------------------------------------------------------------ which variants
# Does the compiler accept a variant's flags? (A trivial source: parsing the
# intrinsics headers here would cost ~0.5 s per variant in every clean
# configure; a header that lacks an intrinsic fails the compile instead.)
# The cached answer is keyed by the flags, so editing them re-checks.
function(_cpubuild_flags_compile flags cache_prefix result)
  string(MD5 key "${CMAKE_${_cpubuild_lang}_COMPILER};${flags}")
  string(SUBSTRING "${key}" 0 12 key)
  string(REPLACE ";" " " CMAKE_REQUIRED_FLAGS "${flags}")
  set(CMAKE_REQUIRED_QUIET ON)
  if(_cpubuild_lang STREQUAL "CXX")
    check_cxx_source_compiles("int main(){return 0;}" ${cache_prefix}_${key})
  else()
    check_c_source_compiles("int main(void){return 0;}" ${cache_prefix}_${key})
  endif()
  set(${result} ${${cache_prefix}_${key}} PARENT_SCOPE)
endfunction()

function(_cpubuild_compiler_supports variant result)
  _cpubuild_flags_compile("${CPUBUILD_VARIANT_${variant}_FLAGS}" CPUBUILD_FLAGS_OK_${variant} ok)
  set(${result} ${ok} PARENT_SCOPE)
endfunction()

function(_cpubuild_select_variants)
  string(REPLACE "," ";" wanted "${CPUBUILD_ISA}")
  if(wanted STREQUAL "all" OR wanted STREQUAL "")
    set(explicit OFF)
    set(wanted ${CPUBUILD_VARIANTS})
  else()
    set(explicit ON)
    list(TRANSFORM wanted REPLACE "^baseline$" "${CPUBUILD_BASELINE_VARIANT}")  # every arch's, whatever its name
    foreach(v IN LISTS wanted)
      if(NOT v IN_LIST CPUBUILD_ALL_VARIANTS)
        message(FATAL_ERROR "cpubuild: unknown variant '${v}' for ${CPUBUILD_ARCH} (known: ${CPUBUILD_ALL_VARIANTS})")
      endif()
      if(NOT v IN_LIST CPUBUILD_VARIANTS)
        message(FATAL_ERROR "cpubuild: variant '${v}' has no flags for ${CPUBUILD_COMPILER_FAMILY} in ${CPUBUILD_MATRIX_FILE}")
      endif()
    endforeach()
  endif()
  if(NOT (CPUBUILD_PARTIAL AND CPUBUILD_FLOOR AND explicit))
    list(PREPEND wanted ${CPUBUILD_BASELINE_VARIANT})  # a partial's floor: only where the list names it
  endif()
  list(REMOVE_DUPLICATES wanted)
  set(built "")
  foreach(v IN LISTS CPUBUILD_VARIANTS)  # matrix order: baseline first
    if(NOT v IN_LIST wanted)
      continue()
    endif()
    _cpubuild_compiler_supports(${v} ok)
    if(ok)
      list(APPEND built ${v})
    elseif(explicit OR v STREQUAL CPUBUILD_BASELINE_VARIANT)
      message(FATAL_ERROR "cpubuild: ${CMAKE_${_cpubuild_lang}_COMPILER} cannot build variant '${v}' (flags: ${CPUBUILD_VARIANT_${v}_FLAGS})")
    else()
      message(WARNING "cpubuild: skipping variant '${v}': ${CMAKE_${_cpubuild_lang}_COMPILER} rejects its flags")
    endif()
  endforeach()
  message(STATUS "cpubuild: building variants: ${built}")
  set(CPUBUILD_BUILD_VARIANTS "${built}" PARENT_SCOPE)
endfunction()
_cpubuild_select_variants()

# A variant's optional-flags: each is probed once per compiler (with the
# variant's own flags, cached by both) and used, with its define, only where
# the compiler accepts it. The answers go into the manifest.
function(_cpubuild_probe_optional_flags)
  set(results "")
  foreach(v IN LISTS CPUBUILD_BUILD_VARIANTS)
    set(accepted_flags "")
    set(accepted_defines "")
    if(CPUBUILD_VARIANT_${v}_OPTIONAL_COUNT GREATER 0)
      math(EXPR last "${CPUBUILD_VARIANT_${v}_OPTIONAL_COUNT} - 1")
      foreach(i RANGE ${last})
        set(flag "${CPUBUILD_VARIANT_${v}_OPTIONAL_${i}_FLAG}")
        set(define "${CPUBUILD_VARIANT_${v}_OPTIONAL_${i}_DEFINE}")
        _cpubuild_flags_compile("${CPUBUILD_VARIANT_${v}_FLAGS};${flag}" CPUBUILD_OPTIONAL_OK_${v} accepted)
        if(accepted)
          list(APPEND accepted_flags "${flag}")
          if(define)
            list(APPEND accepted_defines "${define}")
          endif()
          list(APPEND results "${v}:1:${flag}")
          message(STATUS "cpubuild: ${v}: optional ${flag} accepted")
        else()
          list(APPEND results "${v}:0:${flag}")
          message(STATUS "cpubuild: ${v}: optional ${flag} rejected by ${CMAKE_${_cpubuild_lang}_COMPILER}")
        endif()
      endforeach()
    endif()
    set(CPUBUILD_VARIANT_${v}_ACCEPTED_FLAGS "${accepted_flags}" PARENT_SCOPE)
    set(CPUBUILD_VARIANT_${v}_ACCEPTED_DEFINES "${accepted_defines}" PARENT_SCOPE)
  endforeach()
  set(CPUBUILD_OPTIONAL_RESULTS "${results}" PARENT_SCOPE)
endfunction()
_cpubuild_probe_optional_flags()

# ------------------------------------------------------------------ third-party dependencies
# cpubuild_add_dependency(<name> SOURCE_DIR <dir> [VARIANT <variant>] [OPTIONS KEY=VALUE...])
# A third-party CMake project (a local source directory, e.g. an unpacked
# sdist: never a download during the build) built once per build, as
# position-independent code with the flags of the arch's lowest variant (the
# baseline or the floor; VARIANT may only name that one: its code is linked
# into every variant), and without install rules (EXCLUDE_FROM_ALL). Link its
# targets through cpubuild_add_variants(... LINK_LIBRARIES <its targets>).
# OPTIONS set its cache options (e.g. DNNL_LIBRARY_TYPE=STATIC) before it is added.
function(cpubuild_add_dependency name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "SOURCE_DIR;VARIANT" "OPTIONS")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCE_DIR)
    message(FATAL_ERROR "cpubuild_add_dependency(${name}): usage: SOURCE_DIR <dir> [VARIANT <variant>] [OPTIONS KEY=VALUE...]")
  endif()
  get_filename_component(source "${arg_SOURCE_DIR}" ABSOLUTE)
  if(NOT EXISTS "${source}/CMakeLists.txt")
    message(FATAL_ERROR "cpubuild_add_dependency(${name}): ${source} holds no CMakeLists.txt")
  endif()
  set(variant "${CPUBUILD_BASELINE_VARIANT}")
  if(arg_VARIANT AND NOT arg_VARIANT STREQUAL "baseline")
    if(NOT arg_VARIANT STREQUAL CPUBUILD_BASELINE_VARIANT)
      message(FATAL_ERROR "cpubuild_add_dependency(${name}): VARIANT ${arg_VARIANT}: a dependency linked into every variant "
                          "is built with the lowest one's flags (${CPUBUILD_BASELINE_VARIANT}); a higher variant's code would "
                          "run on CPUs below it")
    endif()
  endif()
  foreach(option IN LISTS arg_OPTIONS)
    if(NOT option MATCHES "^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
      message(FATAL_ERROR "cpubuild_add_dependency(${name}): OPTIONS entry '${option}' is not KEY=VALUE")
    endif()
    set(${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endforeach()
  set(CMAKE_POLICY_DEFAULT_CMP0077 NEW)  # option() honours the variables above
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)  # linked into shared variant libraries
  string(REPLACE ";" " " flags "${CPUBUILD_VARIANT_${variant}_FLAGS}")
  _cpubuild_prefix_map(map "${source}" "${name}")
  set(CMAKE_C_FLAGS "${CMAKE_C_FLAGS} ${flags} ${map}")
  set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} ${flags} ${map}")
  add_subdirectory("${source}" "${CMAKE_BINARY_DIR}/cpubuild-deps/${name}" EXCLUDE_FROM_ALL)
  message(STATUS "cpubuild: dependency ${name} from ${source}, built once with ${variant}'s flags")
endfunction()

# ------------------------------------------------------------------ the call
function(cpubuild_add_variants name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "UNITY;UNITY_GROUPS;PYTHON_MODULE" "PACKAGE_DIR;TARGETS_VAR;VARIANT_SOURCE_DIR;UNITY_BATCH_SIZE"
    "SOURCES;COMMON_SOURCES;BASELINE_SOURCES;INCLUDE_DIRECTORIES;COMPILE_OPTIONS;COMPILE_DEFINITIONS;LINK_LIBRARIES;LINK_OPTIONS;PRECOMPILE_HEADERS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "cpubuild_add_variants(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT name MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "cpubuild_add_variants(${name}): the name must be a C identifier (it prefixes targets and files)")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "cpubuild_add_variants(${name}): SOURCES is required")
  endif()
  get_property(called GLOBAL PROPERTY CPUBUILD_ADD_VARIANTS_CALLED)
  if(called)
    message(FATAL_ERROR "cpubuild_add_variants(${name}): already called for ${called}; one call per project (one manifest)")
  endif()
  set_property(GLOBAL PROPERTY CPUBUILD_ADD_VARIANTS_CALLED "${name}")
  set(unity_batch 0)  # 0: all of a variant's SOURCES in one unit
  set(unity_mode BATCH)
  if(DEFINED arg_UNITY_BATCH_SIZE OR "UNITY_BATCH_SIZE" IN_LIST arg_KEYWORDS_MISSING_VALUES)
    if(NOT arg_UNITY_BATCH_SIZE MATCHES "^[1-9][0-9]*$")
      message(FATAL_ERROR "cpubuild_add_variants(${name}): UNITY_BATCH_SIZE must be a positive integer, not '${arg_UNITY_BATCH_SIZE}'")
    endif()
    if(arg_UNITY_GROUPS)
      message(FATAL_ERROR "cpubuild_add_variants(${name}): UNITY_BATCH_SIZE and UNITY_GROUPS exclude each other")
    endif()
    set(arg_UNITY ON)
    set(unity_batch ${arg_UNITY_BATCH_SIZE})
  endif()
  if(arg_UNITY_GROUPS)
    set(arg_UNITY ON)
    set(unity_mode GROUP)  # CMake's: sources without a UNITY_GROUP compile alone
  endif()
  set(dest "${CPUBUILD_PACKAGE}")
  if(arg_PACKAGE_DIR)
    set(dest "${arg_PACKAGE_DIR}")
  endif()
  set(base_flags ${CPUBUILD_VARIANT_${CPUBUILD_BASELINE_VARIANT}_FLAGS})  # the floor's, when the arch declares one
  set(variant_source_dir "${CPUBUILD_PROJECT_DIR}")  # where the matrix's per-variant `sources` are
  set(prefix_maps "")
  if(arg_VARIANT_SOURCE_DIR)
    get_filename_component(variant_source_dir "${arg_VARIANT_SOURCE_DIR}" ABSOLUTE)
    _cpubuild_prefix_map(map "${variant_source_dir}" src)
    list(APPEND prefix_maps "${map}")  # e.g. an unpacked sdist outside the project
  endif()
  # sources and include directories outside the project (an unpacked sdist in a cache): relative paths in the binaries
  foreach(item IN LISTS arg_SOURCES arg_COMMON_SOURCES arg_BASELINE_SOURCES arg_INCLUDE_DIRECTORIES)
    if(item MATCHES "^\\$<")
      continue()  # a generator expression
    endif()
    get_filename_component(abs "${item}" ABSOLUTE)
    string(FIND "${abs}" "${CMAKE_SOURCE_DIR}/" in_source)
    string(FIND "${abs}" "${CMAKE_BINARY_DIR}/" in_build)
    if(NOT in_source EQUAL 0 AND NOT in_build EQUAL 0)
      get_filename_component(dir "${abs}" DIRECTORY)
      if(IS_DIRECTORY "${abs}")
        set(dir "${abs}")
      endif()
      _cpubuild_prefix_map(map "${dir}" external)
      list(APPEND prefix_maps "${map}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES prefix_maps)
  set(gen "${CMAKE_CURRENT_BINARY_DIR}/cpubuild")
  set(suffix "${CPUBUILD_LIBRARY_SUFFIX}")
  set(module_definitions "")
  if(arg_PYTHON_MODULE)
    if(NOT CPUBUILD_PYTHON_LIMITED_API)
      message(FATAL_ERROR "cpubuild_add_variants(${name}): PYTHON_MODULE needs [project] requires-python = \">=3.X\" in "
                          "pyproject.toml (the limited API version comes from it)")
    endif()
    set(suffix ".abi3${CPUBUILD_LIBRARY_SUFFIX}")  # the stable-ABI module name CPython and auditwheel know
    set(module_definitions Py_LIMITED_API=${CPUBUILD_PYTHON_LIMITED_API})
  endif()
  set(torch "")
  if(CPUBUILD_KIND STREQUAL "torch")
    set(torch cpubuild_torch)  # torch's headers need C++20 since 2.10; earlier ones accept it
  endif()

  # Precompiled headers: one per target (a PCH holds code compiled with that
  # target's ISA flags). cpubuild's ccache launcher then needs the sloppiness
  # ccache documents for PCH builds, or every object would miss the cache.
  set(pch_launcher "")
  set(common_flags ${CPUBUILD_COMMON_FLAGS})
  set(pch_headers ${arg_PRECOMPILE_HEADERS})
  set(symver_include "")  # for the units that skip the PCH (source options: no SHELL: there)
  if(arg_PRECOMPILE_HEADERS AND CPUBUILD_SYMVER_HEADER)
    # GCC uses a PCH only when nothing comes before it: the symver header,
    # force-included in front of every unit, made GCC drop the PCH silently
    # and parse the headers again (the PCH was pure cost). It goes first
    # inside the PCH instead; units without the PCH include it themselves.
    list(REMOVE_ITEM common_flags "SHELL:-include \"${CPUBUILD_SYMVER_HEADER}\"")
    set(symver_include -include "${CPUBUILD_SYMVER_HEADER}")
    set(pch_headers "${CPUBUILD_SYMVER_HEADER}" ${arg_PRECOMPILE_HEADERS})
  endif()
  if(arg_PRECOMPILE_HEADERS AND CPUBUILD_CCACHE_PROGRAM
     AND "${CMAKE_${_cpubuild_lang}_COMPILER_LAUNCHER}" STREQUAL "${CPUBUILD_CCACHE_PROGRAM}")
    set(pch_launcher "${CMAKE_COMMAND};-E;env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;${CPUBUILD_CCACHE_PROGRAM}")
  endif()
  set(common_objects "")
  if(arg_COMMON_SOURCES)
    add_library(${name}_common OBJECT ${arg_COMMON_SOURCES})
    target_include_directories(${name}_common PRIVATE ${arg_INCLUDE_DIRECTORIES})
    target_compile_definitions(${name}_common PRIVATE ${arg_COMPILE_DEFINITIONS} ${module_definitions})
    target_compile_options(${name}_common PRIVATE ${common_flags} ${prefix_maps} ${arg_COMPILE_OPTIONS} ${base_flags})
    target_link_libraries(${name}_common PRIVATE ${arg_LINK_LIBRARIES} ${torch})
    set_target_properties(${name}_common PROPERTIES POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden
                          CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON INTERPROCEDURAL_OPTIMIZATION OFF)
    if(torch)
      set_target_properties(${name}_common PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
    endif()
    if(arg_PRECOMPILE_HEADERS)
      target_precompile_headers(${name}_common PRIVATE ${pch_headers})
      if(pch_launcher)
        set_target_properties(${name}_common PROPERTIES ${_cpubuild_lang}_COMPILER_LAUNCHER "${pch_launcher}")
      endif()
    endif()
    set(common_objects $<TARGET_OBJECTS:${name}_common>)
  endif()

  set(targets "")
  foreach(variant IN LISTS CPUBUILD_BUILD_VARIANTS)
    set(target ${name}_${variant})
    string(TOUPPER "${variant}" upper)
    # in the project's language, so its COMPILE_OPTIONS suit this file too
    set(marker "${gen}/variant_${variant}${_cpubuild_marker_suffix}")
    set(text "/* generated by cpubuild: which variant this library is */\n${_cpubuild_marker_linkage}__attribute__((visibility(\"default\"))) const char *cpubuild_variant_name(void) { return \"${variant}\"; }\n")
    if(EXISTS "${marker}")
      file(READ "${marker}" old)
    else()
      set(old "")
    endif()
    if(NOT old STREQUAL text)
      file(WRITE "${marker}" "${text}")
    endif()
    set(own_sources ${CPUBUILD_VARIANT_${variant}_SOURCES})
    list(TRANSFORM own_sources PREPEND "${variant_source_dir}/")
    set_source_files_properties("${marker}" PROPERTIES SKIP_PRECOMPILE_HEADERS ON COMPILE_OPTIONS "${symver_include}")
    set(sources ${arg_SOURCES} ${own_sources} "${marker}" ${common_objects})
    if(variant STREQUAL CPUBUILD_BASELINE_VARIANT)
      list(APPEND sources ${arg_BASELINE_SOURCES})
    endif()
    add_library(${target} MODULE ${sources})
    target_include_directories(${target} PRIVATE ${arg_INCLUDE_DIRECTORIES})
    # the call's inputs, then the matrix's for this variant (with its parents'), then its accepted optional flags
    target_compile_definitions(${target} PRIVATE ${arg_COMPILE_DEFINITIONS} ${module_definitions} ${CPUBUILD_VARIANT_${variant}_DEFINITIONS}
                               ${CPUBUILD_VARIANT_${variant}_ACCEPTED_DEFINES}
                               ${CPUBUILD_ENV_PREFIX}_VARIANT_${upper}=1 ${CPUBUILD_ENV_PREFIX}_VARIANT_NAME="${variant}")
    target_compile_options(${target} PRIVATE ${common_flags} ${prefix_maps} ${arg_COMPILE_OPTIONS} ${CPUBUILD_VARIANT_${variant}_OPTIONS}
                           ${CPUBUILD_VARIANT_${variant}_FLAGS} ${CPUBUILD_VARIANT_${variant}_ACCEPTED_FLAGS})
    target_link_options(${target} PRIVATE ${CPUBUILD_LINK_FLAGS} ${arg_LINK_OPTIONS} ${CPUBUILD_VARIANT_${variant}_FLAGS})
    target_link_libraries(${target} PRIVATE ${arg_LINK_LIBRARIES} ${CPUBUILD_VARIANT_${variant}_LIBRARIES} ${torch}
                          ${CPUBUILD_SYSTEM_LIBRARIES})
    if(torch)
      set_target_properties(${target} PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
    endif()
    # UNITY: a variant's SOURCES in one unit, in units of UNITY_BATCH_SIZE or by
    # UNITY_GROUP (the headers, intrinsics or torch's, are parsed once per unit)
    set_target_properties(${target} PROPERTIES PREFIX "" OUTPUT_NAME "_${name}_${variant}" SUFFIX "${suffix}"
                          POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
                          VISIBILITY_INLINES_HIDDEN ON INTERPROCEDURAL_OPTIMIZATION OFF
                          UNITY_BUILD ${arg_UNITY} UNITY_BUILD_MODE ${unity_mode}
                          UNITY_BUILD_BATCH_SIZE ${unity_batch})
    if(arg_PRECOMPILE_HEADERS)
      target_precompile_headers(${target} PRIVATE ${pch_headers})
      if(pch_launcher)
        set_target_properties(${target} PROPERTIES ${_cpubuild_lang}_COMPILER_LAUNCHER "${pch_launcher}")
      endif()
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION "${dest}")
    list(APPEND targets ${target})
  endforeach()
  # Baseline-only sources keep their own translation unit (they may set
  # file-wide pragmas, e.g. to keep a scalar reference scalar).
  set_source_files_properties(${arg_BASELINE_SOURCES} "${gen}/variant_${CPUBUILD_BASELINE_VARIANT}${_cpubuild_marker_suffix}"
                              PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)

  # The probe: C, baseline flags only, no LTO, nothing else linked in (a
  # link-time-optimised probe once made ggml SIGILL before its check ran).
  add_library(${name}_probe MODULE "${CPUBUILD_RUNTIME_DIR}/probe.c")
  target_compile_options(${name}_probe PRIVATE ${CPUBUILD_COMMON_FLAGS} ${CPUBUILD_PROBE_FLAGS})
  target_link_options(${name}_probe PRIVATE ${CPUBUILD_LINK_FLAGS})
  set_target_properties(${name}_probe PROPERTIES PREFIX "" OUTPUT_NAME "_${name}_probe" SUFFIX "${CPUBUILD_LIBRARY_SUFFIX}"
                        C_VISIBILITY_PRESET hidden INTERPROCEDURAL_OPTIMIZATION OFF)
  install(TARGETS ${name}_probe LIBRARY DESTINATION "${dest}")

  string(REPLACE ";" "," built "${CPUBUILD_BUILD_VARIANTS}")  # one argument through ARGN
  set(torch_version "")
  if(torch)
    set(torch_version --torch "${CPUBUILD_TORCH_VERSION}")
  endif()
  set(optional "")
  foreach(result IN LISTS CPUBUILD_OPTIONAL_RESULTS)
    list(APPEND optional --optional-flag "${result}")
  endforeach()
  _cpubuild_python(_ -m cpubuild.matrix --project "${CPUBUILD_PROJECT_DIR}"
                   manifest --arch "${CPUBUILD_ARCH}" --variants "${built}" ${optional}
                   --library "_${name}_{variant}${suffix}" --probe "_${name}_probe${CPUBUILD_LIBRARY_SUFFIX}"
                   ${torch_version} --out "${gen}/_manifest.json")
  install(FILES "${gen}/_manifest.json" DESTINATION "${dest}")
  install(DIRECTORY "${CPUBUILD_RUNTIME_DIR}/" DESTINATION "${dest}/_cpubuild"
          FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
  if(arg_TARGETS_VAR)
    set(${arg_TARGETS_VAR} ${targets} PARENT_SCOPE)
  endif()
endfunction()
