# te_plugin_setup([LAYERS fabric cuda ...])
#
# What every plugin's CMakeLists does before add_te_plugin: C++17, a Release build unless
# told otherwise, the te core (TE_CORE_DIR) and the shared layers it names (native/<layer>
# of the repository, or native/te-<layer> vendored into a packed plugin), and Threads.
#
# add_te_plugin(NAME <name> SOURCES <files...> [REQUIRES <targets or -l flags...>])
#
# Builds <name>.node, a Node-API addon (NAPI_VERSION 8, C++ exceptions on) that links the
# te core. Run from cmake-js: it provides CMAKE_JS_INC / CMAKE_JS_SRC / CMAKE_JS_LIB, and
# node-addon-api's include folder is located with node.
include_guard(GLOBAL)

macro(te_plugin_setup)
  cmake_parse_arguments(TPS "" "" "LAYERS" ${ARGN})
  set(CMAKE_CXX_STANDARD 17)
  set(CMAKE_CXX_STANDARD_REQUIRED ON)
  if(NOT CMAKE_BUILD_TYPE)
    set(CMAKE_BUILD_TYPE Release)
  endif()
  add_subdirectory(${TE_CORE_DIR} ${CMAKE_BINARY_DIR}/te-core)
  foreach(layer IN LISTS TPS_LAYERS)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/native/te-${layer}/CMakeLists.txt)
      add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/native/te-${layer} ${CMAKE_BINARY_DIR}/te-${layer})
    else()
      add_subdirectory(${TE_CORE_DIR}/${layer} ${CMAKE_BINARY_DIR}/te-${layer})
    endif()
  endforeach()
  find_package(Threads REQUIRED)
endmacro()

function(te_find_node_addon_api out)
  if(DEFINED TE_NODE_ADDON_API_DIR)
    set(${out} ${TE_NODE_ADDON_API_DIR} PARENT_SCOPE)
    return()
  endif()
  find_program(TE_NODE_EXECUTABLE NAMES node nodejs REQUIRED)
  execute_process(
    COMMAND ${TE_NODE_EXECUTABLE} -p "require('path').dirname(require.resolve('node-addon-api/package.json'))"
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
    OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR dir STREQUAL "")
    message(FATAL_ERROR "te: cannot locate node-addon-api (npm install it next to the plugin)")
  endif()
  set(TE_NODE_ADDON_API_DIR ${dir} CACHE PATH "node-addon-api include folder")
  set(${out} ${dir} PARENT_SCOPE)
endfunction()

function(add_te_plugin)
  cmake_parse_arguments(TP "" "NAME" "SOURCES;REQUIRES" ${ARGN})
  if(NOT TP_NAME OR NOT TP_SOURCES)
    message(FATAL_ERROR "add_te_plugin: NAME and SOURCES are required")
  endif()
  te_find_node_addon_api(napi_dir)
  add_library(${TP_NAME} SHARED ${TP_SOURCES} ${CMAKE_JS_SRC})
  set_target_properties(${TP_NAME} PROPERTIES PREFIX "" SUFFIX ".node"
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_include_directories(${TP_NAME} PRIVATE ${CMAKE_JS_INC} ${napi_dir})
  # NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS: in an env that is shutting down (a worker being
  # terminated) a Node-API call fails with napi_pending_exception and no exception; without it
  # node-addon-api's Napi::Error aborts the process while wrapping that non-exception.
  target_compile_definitions(${TP_NAME} PRIVATE NAPI_VERSION=8 NAPI_CPP_EXCEPTIONS NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS
                                                BUILDING_NODE_EXTENSION)
  target_compile_options(${TP_NAME} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_link_libraries(${TP_NAME} PRIVATE te_core ${CMAKE_JS_LIB} ${TP_REQUIRES})
  if(MSVC AND CMAKE_JS_NODELIB_DEF AND CMAKE_JS_NODELIB_TARGET)
    execute_process(COMMAND ${CMAKE_AR} /def:${CMAKE_JS_NODELIB_DEF} /out:${CMAKE_JS_NODELIB_TARGET} ${CMAKE_STATIC_LINKER_FLAGS})
  endif()
endfunction()
