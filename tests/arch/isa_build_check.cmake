# The switch must build wherever the compiler may keep state in registers
# that only an instruction-set extension has: AVX-512 (xmm16-31, k0-7) and,
# with Clang, AMX tiles (tmm0-7) on x86-64; SVE predicates (p0-15, ffr with
# GCC) on AArch64. Each extension adds clobbers to the switch
# (arch/x86_64_sysv.hpp, arch/aarch64.hpp) whose names the compiler checks;
# this compiles the runtime and the inline fast paths with it on.
#
#   cmake -DCXX=<compiler> [-DCXX_FLAGS=...] -DARCH=x86_64|aarch64 -DROOT=<dir>
#         -DOUT=<dir> -P isa_build_check.cmake
cmake_minimum_required(VERSION 3.25)
separate_arguments(extra UNIX_COMMAND "${CXX_FLAGS}")
separate_arguments(cxx UNIX_COMMAND "${CXX}")
file(MAKE_DIRECTORY ${OUT})
if(ARCH STREQUAL "x86_64")
  set(variants "-mavx512f" "-mavx512f -mamx-tile")
else()
  set(variants "-march=armv8.2-a+sve")
endif()
foreach(v IN LISTS variants)
  separate_arguments(isa UNIX_COMMAND "${v}")
  foreach(src src/runtime/worker_loop.cpp src/runtime/handoff.cpp src/runtime/fiber.cpp
              src/runtime/generator.cpp tests/arch/tls_probe.cpp)
    get_filename_component(name ${src} NAME_WE)
    execute_process(COMMAND ${cxx} ${extra} ${isa} -std=c++20 -O2 -DNDEBUG -I${ROOT}/include
                            -S ${ROOT}/${src} -o ${OUT}/${name}.s
                    RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "isa_build_check: ${src} with ${v} does not build:\n${err}")
    endif()
  endforeach()
  message(STATUS "isa_build_check: builds with ${v}")
endforeach()
