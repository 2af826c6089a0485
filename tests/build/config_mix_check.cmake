# A program's build type and the library's need not match (CMakeLists.txt,
# build_config.hpp): compiles tests/build/config_mix_app.cpp with and
# without NDEBUG against this build's libraries, the way the README says
# (the build's include folder on the include path), links and runs each.
# Then, without the build's include folder, with the other setting than the
# library's: the link must fail naming the setting, not succeed and corrupt
# memory.
#
#   cmake -DCXX=<compiler> -DROOT=<source dir> -DBUILD_INCLUDE=<build>/include
#         -DOUT=<dir> -DLIBS="<libspindle.a>;<libspindle_locks.a>" -DCHECKS=0|1
#         -P config_mix_check.cmake
cmake_minimum_required(VERSION 3.25)
foreach(v CXX ROOT BUILD_INCLUDE OUT LIBS CHECKS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "config_mix_check: -D${v}=... is required")
  endif()
endforeach()
separate_arguments(cxx UNIX_COMMAND "${CXX}")
file(MAKE_DIRECTORY ${OUT})
set(app ${ROOT}/tests/build/config_mix_app.cpp)

foreach(mode ndebug debug)
  set(defs "")
  if(mode STREQUAL "ndebug")
    set(defs -DNDEBUG)
  endif()
  execute_process(COMMAND ${cxx} -std=c++20 -O1 ${defs} -I${ROOT}/include -I${BUILD_INCLUDE}
                          ${app} ${LIBS} -pthread -o ${OUT}/app_${mode}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "config_mix_check: a program built ${mode} does not link against "
            "this build's library:\n${out}${err}")
  endif()
  execute_process(COMMAND ${OUT}/app_${mode} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "count 4000 sum 6")
    message(FATAL_ERROR "config_mix_check: the program built ${mode} failed (${rc}):\n${out}${err}")
  endif()
  message(STATUS "config_mix_check: built ${mode}, linked and ran: ${out}")
endforeach()

# The headers alone, with the other setting: a clear link error.
if(CHECKS)
  set(other -DNDEBUG)
  set(missing spindle_config_debug_checks_off)
else()
  set(other "")
  set(missing spindle_config_debug_checks_on)
endif()
execute_process(COMMAND ${cxx} -std=c++20 -O1 ${other} -I${ROOT}/include
                        ${app} ${LIBS} -pthread -o ${OUT}/app_mismatch
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "config_mix_check: a program compiled with the other misuse-check setting "
          "than the library's, without build_config.hpp, linked")
endif()
if(NOT "${out}${err}" MATCHES "${missing}")
  message(FATAL_ERROR "config_mix_check: the mismatched link failed without naming ${missing}:\n${out}${err}")
endif()
message(STATUS "config_mix_check: the mismatch without build_config.hpp stops the link naming ${missing}")
