# find_package(cpubuild <version> CONFIG): compatible when this cpubuild is at
# least the requested version within the same major release (0.x: same minor).
# PACKAGE_VERSION must equal cpubuild.__version__ (a unit test checks).
set(PACKAGE_VERSION "0.2.0")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _have "${PACKAGE_VERSION}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _want "${PACKAGE_FIND_VERSION}")
  if(PACKAGE_FIND_VERSION AND NOT _have VERSION_EQUAL _want AND _have MATCHES "^0\\.")
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  else()
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
    if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
      set(PACKAGE_VERSION_EXACT TRUE)
    endif()
  endif()
endif()
