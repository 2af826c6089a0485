# Control-flow protection and spindle, read from the ELF property notes
# (CMakeLists.txt, arch/x86_64_sysv.hpp, arch/aarch64.hpp).
#
# The linker ANDs the feature bits of every object it links; the loader
# enables a shadow stack (x86-64 SHSTK, AArch64 GCS) or branch tracking only
# when the program's note claims it. spindle's switches cannot follow a
# per-thread shadow stack, so its objects never claim one; they are
# landing-pad clean, so they do claim branch tracking (IBT, BTI). This links
# cf_protection_probe.cpp, compiled with a hardened distribution's flags,
# and compares:
#   a control of the same flags without spindle: its note claims branch
#     tracking (and on x86-64 the shadow stack) -- so the method can see it;
#   with spindle's libraries: it must not, and must still claim IBT / BTI.
# The preload library (x86-64) must not claim a shadow stack either.
#
#   cmake -DCXX=<compiler> [-DCXX_FLAGS=...] -DREADELF=<readelf> -DARCH=x86_64|aarch64
#         -DROOT=<source dir> -DOUT=<dir> -DBUILD_INCLUDE=<build dir>/include
#         -DLIBS="<libspindle.a>;<libspindle_locks.a>"
#         [-DPRELOAD=<libspindle_preload.so>] -P cf_protection_check.cmake
cmake_minimum_required(VERSION 3.25)
foreach(v CXX READELF ARCH ROOT OUT BUILD_INCLUDE LIBS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "cf_protection_check: -D${v}=... is required")
  endif()
endforeach()
separate_arguments(extra UNIX_COMMAND "${CXX_FLAGS}")
separate_arguments(cxx UNIX_COMMAND "${CXX}")
file(MAKE_DIRECTORY ${OUT})
if(ARCH STREQUAL "x86_64")
  set(harden -fcf-protection=full)
  set(shadow "shstk")
  set(branch "ibt")
elseif(ARCH STREQUAL "aarch64")
  set(harden -mbranch-protection=standard)
  # GCS is bit 2; binutils 2.40 and LLVM 14's readelf print it unnamed.
  set(shadow "gcs|unknown: 4|unknown flags: 0x4")
  set(branch "bti")
else()
  message(FATAL_ERROR "cf_protection_check: ARCH must be x86_64 or aarch64, not '${ARCH}'")
endif()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cf_protection_check: ${what} failed:\n${out}${err}")
  endif()
endfunction()

function(features file outvar)
  execute_process(COMMAND ${READELF} -n ${file} OUTPUT_VARIABLE notes RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cf_protection_check: ${READELF} -n ${file} failed")
  endif()
  string(TOLOWER "${notes}" notes)  # GNU and LLVM readelf spell it differently
  set(f "")
  if(notes MATCHES "(x86|aarch64) feature: ([^\n]*)")
    set(f "${CMAKE_MATCH_2}")
  endif()
  set(${outvar} "${f}" PARENT_SCOPE)
endfunction()

set(probe ${OUT}/cf_protection_probe.o)
run("compiling the probe"
    ${cxx} ${extra} -std=c++20 -O2 -DNDEBUG ${harden} -I${ROOT}/include -I${BUILD_INCLUDE}
    -c ${ROOT}/tests/arch/cf_protection_probe.cpp -o ${probe})
set(link ${cxx} ${extra} ${harden} -nostartfiles -Wl,-e,spindle_cf_probe)

# The method sees what the flags ask for: a program of the same flags
# without spindle claims branch tracking, and (x86-64) the shadow stack.
# (AArch64: Clang 19's -mbranch-protection=standard claims GCS, GCC 12's
# does not.)
file(WRITE ${OUT}/cf_control.cpp
     "extern \"C\" int spindle_cf_probe() { return 0; }\n"
     "extern \"C\" __attribute__((visibility(\"hidden\"))) void* __dso_handle;\n"
     "void* __dso_handle = &__dso_handle;\n")
run("compiling the control" ${cxx} ${extra} -O2 ${harden} -c ${OUT}/cf_control.cpp -o ${OUT}/cf_control.o)
run("linking the control" ${link} ${OUT}/cf_control.o -o ${OUT}/control)
features(${OUT}/control alone)
if(NOT alone MATCHES "${branch}" OR (ARCH STREQUAL "x86_64" AND NOT alone MATCHES "${shadow}"))
  message(FATAL_ERROR "cf_protection_check: a program without spindle claims only '${alone}': "
          "this toolchain cannot show what spindle changes")
endif()

run("linking the probe with spindle" ${link} ${probe} ${LIBS} -pthread -o ${OUT}/probe_spindle)
features(${OUT}/probe_spindle linked)
set(failed FALSE)
if(linked MATCHES "${shadow}")
  message(SEND_ERROR "cf_protection_check: a program that links spindle claims ${shadow} ('${linked}'): "
          "the loader would start it with a shadow stack, which spindle's switches break")
  set(failed TRUE)
endif()
# Branch tracking stays available: every object of spindle's libraries
# claims it and none claims a shadow stack. (On AArch64 the link as a whole
# may still lose BTI to the C runtime: Debian's cross libgcc.a outline
# atomics carry no notes. On x86-64 it must keep IBT.)
foreach(lib IN LISTS LIBS)
  execute_process(COMMAND ${READELF} -n ${lib} OUTPUT_VARIABLE notes RESULT_VARIABLE rc)
  string(TOLOWER "${notes}" notes)
  string(REPLACE "\nfile: " ";" members "${notes}")
  list(LENGTH members n)
  set(objects 0)
  foreach(m IN LISTS members)
    if(NOT m MATCHES "\\(([^)]+\\.o)\\)")
      continue()
    endif()
    set(obj "${CMAKE_MATCH_1}")
    math(EXPR objects "${objects} + 1")
    if(NOT m MATCHES "feature: [^\n]*(${branch})" OR m MATCHES "feature: [^\n]*(${shadow})")
      message(SEND_ERROR "cf_protection_check: ${lib}(${obj}) must claim ${branch} and not ${shadow}: '${m}'")
      set(failed TRUE)
    endif()
  endforeach()
  if(objects EQUAL 0)
    message(SEND_ERROR "cf_protection_check: no object found in ${lib}")
    set(failed TRUE)
  endif()
endforeach()
if(ARCH STREQUAL "x86_64" AND NOT linked MATCHES "${branch}")
  message(SEND_ERROR "cf_protection_check: a program that links spindle lost ${branch} ('${linked}'): "
          "spindle's objects must keep branch tracking available")
  set(failed TRUE)
endif()
if(DEFINED PRELOAD AND NOT PRELOAD STREQUAL "")
  features(${PRELOAD} preload)
  if(preload MATCHES "${shadow}")
    message(SEND_ERROR "cf_protection_check: ${PRELOAD} claims ${shadow} ('${preload}')")
    set(failed TRUE)
  endif()
endif()
if(failed)
  message(FATAL_ERROR "cf_protection_check: failed")
endif()
message(STATUS "cf_protection_check: without spindle '${alone}', with spindle '${linked}'")
