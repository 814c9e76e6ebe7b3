# The OpenMP build of OpenBLAS as the imported target sima::openblas_openmp, found the same way
# by the build (CMakeLists.txt) and by the installed package (simaConfig.cmake): Debian installs
# the pthread, serial and OpenMP variants side by side and the alternatives system picks one for
# plain -lopenblas; only the OpenMP one shares the library's OpenMP thread pool.
# Sets OPENBLAS_OPENMP_LIB and OPENBLAS_OPENMP_INCLUDE (NOTFOUND when absent; the caller decides).
set(_sima_arch ${CMAKE_LIBRARY_ARCHITECTURE})
if(NOT _sima_arch)  # a project without a language that sets it (e.g. C only): Debian's multiarch
  execute_process(COMMAND dpkg-architecture -qDEB_HOST_MULTIARCH OUTPUT_VARIABLE _sima_arch
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
find_library(OPENBLAS_OPENMP_LIB NAMES openblas
  PATHS /usr/lib/${_sima_arch}/openblas-openmp NO_DEFAULT_PATH)
find_path(OPENBLAS_OPENMP_INCLUDE NAMES cblas.h
  PATHS /usr/include/${_sima_arch}/openblas-openmp NO_DEFAULT_PATH)
if(OPENBLAS_OPENMP_LIB AND OPENBLAS_OPENMP_INCLUDE AND NOT TARGET sima::openblas_openmp)
  add_library(sima::openblas_openmp INTERFACE IMPORTED)
  # The RUNPATH: a program linking it loads this library at run time, not the alternatives'
  # libopenblas.so.0 (the same soname). CMake puts it in a build tree's RUNPATH by itself; the
  # link option keeps it in an installed program too.
  get_filename_component(_sima_openblas_dir "${OPENBLAS_OPENMP_LIB}" DIRECTORY)
  set_target_properties(sima::openblas_openmp PROPERTIES
    INTERFACE_LINK_LIBRARIES "${OPENBLAS_OPENMP_LIB}"
    INTERFACE_LINK_OPTIONS "LINKER:-rpath,${_sima_openblas_dir}"
    INTERFACE_INCLUDE_DIRECTORIES "${OPENBLAS_OPENMP_INCLUDE}")  # imported: -isystem
endif()
