# tessera_add_plugin(NAME SOURCES src... [SHADERS file.comp...] [EMBED file...]
#                    [LIBRARIES lib...] [INCLUDES dir...] [NO_INSTALL])
#
# Builds libtessera-plugin-NAME.so, a MODULE linked against Tessera::core, into
# TESSERA_PLUGIN_OUTPUT_DIR, and installs it into TESSERA_PLUGIN_INSTALL_DIR. Only the entry point
# (TESSERA_DEFINE_PLUGIN) is exported. The same function builds Tessera's own plugins and
# out-of-tree ones (find_package(Tessera) provides it). The target is named tessera_plugin_NAME.
#
# SHADERS are GLSL compute shaders compiled by glslc (Vulkan 1.2 SPIR-V, -O) into NAME.spv; EMBED
# files (relative to the plugin's folder, or absolute) are taken as they are (OpenCL C sources). Both are embedded into the .so and found at run
# time through tessera::embedded_file("gemm.spv") (tessera/embedded.h).
set(TESSERA_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/TesseraEmbed.cmake)
function(tessera_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "NO_INSTALL" "" "SOURCES;LIBRARIES;INCLUDES;SHADERS;EMBED")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "tessera_add_plugin(${name}): SOURCES is required")
  endif()
  if(NOT name MATCHES "^[a-z][a-z0-9_-]*$")
    message(FATAL_ERROR "tessera_add_plugin: '${name}' is not a valid plugin name "
                        "(lower-case letters, digits, '_' and '-', starting with a letter)")
  endif()
  set(target tessera_plugin_${name})
  set(embedded "")
  foreach(src IN LISTS ARG_EMBED)
    if(IS_ABSOLUTE ${src})
      list(APPEND embedded ${src})
    else()
      list(APPEND embedded ${CMAKE_CURRENT_SOURCE_DIR}/${src})
    endif()
  endforeach()
  if(ARG_SHADERS)
    find_program(TESSERA_GLSLC glslc REQUIRED)
    foreach(shader IN LISTS ARG_SHADERS)
      get_filename_component(stem ${shader} NAME_WE)
      set(spv ${CMAKE_CURRENT_BINARY_DIR}/shaders/${stem}.spv)
      add_custom_command(OUTPUT ${spv}
        COMMAND ${TESSERA_GLSLC} --target-env=vulkan1.2 -O -MD -MF ${spv}.d
                -o ${spv} ${CMAKE_CURRENT_SOURCE_DIR}/${shader}
        DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${shader}
        DEPFILE ${spv}.d
        COMMENT "glslc ${shader}"
        VERBATIM)
      list(APPEND embedded ${spv})
    endforeach()
  endif()
  set(extra "")
  if(embedded)
    set(generated ${CMAKE_CURRENT_BINARY_DIR}/${target}_embedded.cpp)
    string(REPLACE ";" "|" embedded_arg "${embedded}")
    add_custom_command(OUTPUT ${generated}
      COMMAND ${CMAKE_COMMAND} -DOUTPUT=${generated} -DFILES=${embedded_arg}
              -P ${TESSERA_EMBED_SCRIPT}
      DEPENDS ${embedded} ${TESSERA_EMBED_SCRIPT}
      COMMENT "Embedding files into ${target}"
      VERBATIM)
    set(extra ${generated})
  endif()
  add_library(${target} MODULE ${ARG_SOURCES} ${extra})
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
  # Not in the libFuzzer build (TESSERA_FUZZ): there the sanitizer and fuzzer runtimes live in the
  # executable, so a plugin's references to them are undefined until it is loaded.
  if(NOT TESSERA_FUZZ)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${TESSERA_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
