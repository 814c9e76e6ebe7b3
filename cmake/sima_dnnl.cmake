# oneDNN (libdnnl-dev) as the imported target sima::dnnl, found the same way by the build
# (CMakeLists.txt) and by the installed package (simaConfig.cmake). Not through oneDNN's own
# dnnl-config.cmake: Debian builds oneDNN with its OpenCL GPU runtime, and that file then
# requires the OpenCL development headers (find_package(OpenCL REQUIRED)), which a CPU build
# never uses; a fresh Debian 12 machine without them fails to configure. The library itself
# needs only the OpenCL loader at run time, which libdnnl3 already depends on.
# Sets DNNL_LIB and DNNL_INCLUDE (NOTFOUND when absent; the caller decides).
find_library(DNNL_LIB NAMES dnnl)
find_path(DNNL_INCLUDE NAMES oneapi/dnnl/dnnl.h)
if(DNNL_LIB AND DNNL_INCLUDE AND NOT TARGET sima::dnnl)
  add_library(sima::dnnl INTERFACE IMPORTED)
  set_target_properties(sima::dnnl PROPERTIES
    INTERFACE_LINK_LIBRARIES "${DNNL_LIB}"
    INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE}")  # imported: -isystem
endif()
