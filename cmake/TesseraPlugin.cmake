# tessera_add_plugin(NAME SOURCES src... [LIBRARIES lib...] [INCLUDES dir...] [NO_INSTALL])
#
# Builds libtessera-plugin-NAME.so, a MODULE linked against Tessera::core, into
# TESSERA_PLUGIN_OUTPUT_DIR, and installs it into TESSERA_PLUGIN_INSTALL_DIR. Only the entry point
# (TESSERA_DEFINE_PLUGIN) is exported. The same function builds Tessera's own plugins and
# out-of-tree ones (find_package(Tessera) provides it). The target is named tessera_plugin_NAME.
function(tessera_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "NO_INSTALL" "" "SOURCES;LIBRARIES;INCLUDES")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "tessera_add_plugin(${name}): SOURCES is required")
  endif()
  if(NOT name MATCHES "^[a-z][a-z0-9_-]*$")
    message(FATAL_ERROR "tessera_add_plugin: '${name}' is not a valid plugin name "
                        "(lower-case letters, digits, '_' and '-', starting with a letter)")
  endif()
  set(target tessera_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE Tessera::core ${ARG_LIBRARIES})
  if(TARGET tessera_warnings)
    target_link_libraries(${target} PRIVATE tessera_warnings)
  endif()
  if(ARG_INCLUDES)
    target_include_directories(${target} PRIVATE ${ARG_INCLUDES})
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "libtessera-plugin-${name}"
    LIBRARY_OUTPUT_DIRECTORY ${TESSERA_PLUGIN_OUTPUT_DIR}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    INSTALL_RPATH "$ORIGIN/../..")
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${TESSERA_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
