include(CheckCXXSourceCompiles)

find_package(Python COMPONENTS Interpreter REQUIRED)
set(CPUKERN_MATRIX "${CMAKE_CURRENT_SOURCE_DIR}/isa_matrix.toml" CACHE FILEPATH "ISA matrix")
set(CPUKERN_MATRIX_TOOL "${CMAKE_CURRENT_SOURCE_DIR}/tools/cpubuild/matrix.py")

if(APPLE)
  set(CPUKERN_LIBRARY_PATTERN "_cpukern_{variant}.dylib")
else()
  set(CPUKERN_LIBRARY_PATTERN "_cpukern_{variant}.so")
endif()
# CMake names MODULE libraries *.so even on macOS: say the suffix explicitly.
string(REGEX MATCH "\\.[a-z]+$" CPUKERN_LIBRARY_SUFFIX "${CPUKERN_LIBRARY_PATTERN}")

# Reproducible objects: no absolute source or build paths in the binaries.
set(CPUKERN_COMMON_FLAGS
    -O3 -ffp-contract=fast -fno-math-errno -fno-plt -Wall -Wextra -Wno-unused-parameter
    "-ffile-prefix-map=${CMAKE_CURRENT_SOURCE_DIR}=."
    "-ffile-prefix-map=${CMAKE_CURRENT_BINARY_DIR}=build")
if(NOT APPLE)
  set(CPUKERN_LINK_FLAGS -Wl,--as-needed -Wl,-z,noexecstack -Wl,-z,relro -Wl,-z,now -Wl,--build-id=sha1)
endif()

# manylinux floor (docs/wheels.md): `cpubuild wheel` writes CPUKERN_SYMVER_HEADER,
# .symver directives binding libc/libm/libstdc++ symbols to the newest version the
# target policy allows; it is force-included everywhere. gcc 12 calls _Float16
# helpers (__extendhfsf2@GCC_12.0.0) on CPUs without F16C: link them from the
# static libgcc.a (hidden there) so no GCC_12 symbol version is imported.
set(CPUKERN_SYMVER_HEADER "" CACHE FILEPATH "Header of .symver directives (written by cpubuild wheel)")
if(CPUKERN_SYMVER_HEADER)
  list(APPEND CPUKERN_COMMON_FLAGS "SHELL:-include \"${CPUKERN_SYMVER_HEADER}\"")
endif()
set(CPUKERN_LINK_LIBRARIES "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT APPLE)
  set(CPUKERN_LINK_LIBRARIES -l:libgcc.a)
endif()

function(cpukern_load_matrix)
  set(out "${CMAKE_CURRENT_BINARY_DIR}/cpukern_matrix.cmake")
  execute_process(
    COMMAND "${Python_EXECUTABLE}" "${CPUKERN_MATRIX_TOOL}" --matrix "${CPUKERN_MATRIX}"
            cmake --arch "${CPUKERN_ARCH}" --compiler "${CPUKERN_COMPILER_FAMILY}" --out "${out}"
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cpukern: isa matrix: ${err}")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${CPUKERN_MATRIX}" "${CPUKERN_MATRIX_TOOL}")
  include("${out}")
  foreach(v IN LISTS CPUKERN_ALL_VARIANTS)
    set(CPUKERN_VARIANT_${v}_FLAGS "${CPUKERN_VARIANT_${v}_FLAGS}" PARENT_SCOPE)
  endforeach()
  set(CPUKERN_ALL_VARIANTS "${CPUKERN_ALL_VARIANTS}" PARENT_SCOPE)
  set(CPUKERN_VARIANTS "${CPUKERN_VARIANTS}" PARENT_SCOPE)
  set(CPUKERN_BASELINE_VARIANT "${CPUKERN_BASELINE_VARIANT}" PARENT_SCOPE)
endfunction()

# Does the compiler accept the variant's flags? (A trivial source: parsing the
# intrinsics headers here would cost ~0.5 s per variant, serially, in every
# clean configure; a header that lacks an intrinsic fails the compile instead.)
function(cpukern_compiler_supports variant result)
  set(CMAKE_REQUIRED_FLAGS "")
  foreach(f IN LISTS CPUKERN_VARIANT_${variant}_FLAGS)
    string(APPEND CMAKE_REQUIRED_FLAGS " ${f}")
  endforeach()
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles("int main(){return 0;}"
                            CPUKERN_COMPILER_HAS_${variant})
  set(${result} ${CPUKERN_COMPILER_HAS_${variant}} PARENT_SCOPE)
endfunction()

function(cpukern_select_variants)
  string(REPLACE "," ";" wanted "${CPUKERN_ISA}")
  if(wanted STREQUAL "all" OR wanted STREQUAL "")
    set(explicit OFF)
    set(wanted ${CPUKERN_VARIANTS})
  else()
    set(explicit ON)
    foreach(v IN LISTS wanted)
      if(NOT v IN_LIST CPUKERN_ALL_VARIANTS)
        message(FATAL_ERROR "cpukern: unknown variant '${v}' for ${CPUKERN_ARCH} (known: ${CPUKERN_ALL_VARIANTS})")
      endif()
      if(NOT v IN_LIST CPUKERN_VARIANTS)
        message(FATAL_ERROR "cpukern: variant '${v}' has no flags for ${CPUKERN_COMPILER_FAMILY} in isa_matrix.toml")
      endif()
    endforeach()
  endif()
  list(PREPEND wanted ${CPUKERN_BASELINE_VARIANT})
  list(REMOVE_DUPLICATES wanted)
  set(built "")
  foreach(v IN LISTS CPUKERN_VARIANTS)  # matrix order: baseline first
    if(NOT v IN_LIST wanted)
      continue()
    endif()
    cpukern_compiler_supports(${v} ok)
    if(ok)
      list(APPEND built ${v})
    elseif(explicit OR v STREQUAL CPUKERN_BASELINE_VARIANT)
      message(FATAL_ERROR "cpukern: ${CMAKE_CXX_COMPILER} cannot build variant '${v}' (flags: ${CPUKERN_VARIANT_${v}_FLAGS})")
    else()
      message(WARNING "cpukern: skipping variant '${v}': ${CMAKE_CXX_COMPILER} rejects its flags")
    endif()
  endforeach()
  message(STATUS "cpukern: building variants: ${built}")
  set(CPUKERN_BUILD_VARIANTS "${built}" PARENT_SCOPE)
endfunction()

option(CPUKERN_UNITY_BUILD "Compile each variant's kernels as one translation unit" ON)

# ISA-independent runtime objects: compiled once with the baseline flags.
function(cpukern_add_runtime)
  add_library(cpukern_runtime OBJECT ${ARGN})
  target_include_directories(cpukern_runtime PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/csrc/include")
  target_compile_options(cpukern_runtime PRIVATE ${CPUKERN_COMMON_FLAGS} ${CPUKERN_VARIANT_${CPUKERN_BASELINE_VARIANT}_FLAGS})
  find_package(Threads REQUIRED)
  target_link_libraries(cpukern_runtime PRIVATE Threads::Threads)
endfunction()

# The scalar references: in the baseline library only (ops.use_reference()).
# Their own translation unit: reference.cpp turns the vectoriser off file-wide.
function(cpukern_add_reference)
  target_sources(cpukern_${CPUKERN_BASELINE_VARIANT} PRIVATE ${ARGN})
  set_source_files_properties(${ARGN} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()

function(cpukern_add_variant variant)
  set(target cpukern_${variant})
  add_library(${target} MODULE ${ARGN} $<TARGET_OBJECTS:cpukern_runtime>)
  target_include_directories(${target} PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/csrc/include")
  target_compile_definitions(${target} PRIVATE CPUKERN_VARIANT_NAME="${variant}")
  target_compile_options(${target} PRIVATE ${CPUKERN_COMMON_FLAGS} ${CPUKERN_VARIANT_${variant}_FLAGS})
  target_link_options(${target} PRIVATE ${CPUKERN_LINK_FLAGS} ${CPUKERN_VARIANT_${variant}_FLAGS})
  find_package(Threads REQUIRED)
  target_link_libraries(${target} PRIVATE Threads::Threads ${CPUKERN_LINK_LIBRARIES})
  # all kernels in one batch: one unity file per variant
  set_target_properties(${target} PROPERTIES UNITY_BUILD ${CPUKERN_UNITY_BUILD} UNITY_BUILD_BATCH_SIZE 0)
  string(REGEX REPLACE "\\.[a-z]+$" "" stem "${CPUKERN_LIBRARY_PATTERN}")
  string(REPLACE "{variant}" "${variant}" stem "${stem}")
  set_target_properties(${target} PROPERTIES PREFIX "" OUTPUT_NAME "${stem}" SUFFIX "${CPUKERN_LIBRARY_SUFFIX}"
                                             INTERPROCEDURAL_OPTIMIZATION OFF)
  install(TARGETS ${target} LIBRARY DESTINATION "${CPUKERN_PACKAGE_DIR}")
endfunction()

# The probe: C, baseline flags only, no LTO, nothing else linked in.
function(cpukern_add_probe source)
  add_library(cpukern_probe MODULE ${source})
  target_compile_options(cpukern_probe PRIVATE ${CPUKERN_COMMON_FLAGS} ${CPUKERN_VARIANT_${CPUKERN_BASELINE_VARIANT}_FLAGS})
  target_link_options(cpukern_probe PRIVATE ${CPUKERN_LINK_FLAGS})
  set_target_properties(cpukern_probe PROPERTIES PREFIX "" OUTPUT_NAME "_cpukern_probe" SUFFIX "${CPUKERN_LIBRARY_SUFFIX}"
                                                INTERPROCEDURAL_OPTIMIZATION OFF)
  install(TARGETS cpukern_probe LIBRARY DESTINATION "${CPUKERN_PACKAGE_DIR}")
endfunction()

function(cpukern_write_manifest)
  set(out "${CMAKE_CURRENT_BINARY_DIR}/_manifest.json")
  execute_process(
    COMMAND "${Python_EXECUTABLE}" "${CPUKERN_MATRIX_TOOL}" --matrix "${CPUKERN_MATRIX}"
            manifest --arch "${CPUKERN_ARCH}" --variants "${CPUKERN_BUILD_VARIANTS}"
            --library "${CPUKERN_LIBRARY_PATTERN}" --out "${out}"
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cpukern: manifest: ${err}")
  endif()
  install(FILES "${out}" DESTINATION "${CPUKERN_PACKAGE_DIR}")
endfunction()
