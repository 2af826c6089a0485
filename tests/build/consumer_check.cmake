# spindle used as a package, three ways, by a separate project built as a
# user's Debug build (whatever this build's type): the installed CMake
# package (cmake --install, find_package(spindle CONFIG),
# spindle::spindle), add_subdirectory() of the source tree, and pkg-config
# on the installed spindle.pc. Each program is built and run
# (tests/build/config_mix_app.cpp).
#
#   cmake -DCXX=<compiler> -DGENERATOR=<generator> -DROOT=<source dir>
#         -DBUILD_DIR=<this build> -DOUT=<dir> -P consumer_check.cmake
cmake_minimum_required(VERSION 3.25)
foreach(v CXX GENERATOR ROOT BUILD_DIR OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "consumer_check: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer_check: ${what} failed (${rc}):\n${out}${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

function(check_app what exe)
  execute_process(COMMAND ${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "count 4000 sum 6")
    message(FATAL_ERROR "consumer_check: the program built ${what} failed (${rc}):\n${out}${err}")
  endif()
  message(STATUS "consumer_check: ${what}: built and ran")
endfunction()

# The I/O layer's program, where the consumer built it (spindle::io exists
# where liburing does).
function(check_io_app what exe)
  if(NOT EXISTS ${exe})
    message(STATUS "consumer_check: ${what}: no spindle::io in this build")
    return()
  endif()
  execute_process(COMMAND ${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "io echo ok")
    message(FATAL_ERROR "consumer_check: the I/O program built ${what} failed (${rc}):\n${out}${err}")
  endif()
  message(STATUS "consumer_check: ${what}: the I/O program built and ran")
endfunction()

set(prefix ${OUT}/prefix)
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# 1. The installed package.
run("configuring the consumer against the installed package"
    ${CMAKE_COMMAND} -G ${GENERATOR} -S ${ROOT}/tests/build/consumer -B ${OUT}/package
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix})
run("building the consumer against the installed package" ${CMAKE_COMMAND} --build ${OUT}/package)
check_app("with find_package(spindle CONFIG)" ${OUT}/package/consumer_app)
check_io_app("with find_package(spindle CONFIG)" ${OUT}/package/consumer_io_app)

# 2. add_subdirectory() of the source tree.
run("configuring the consumer with add_subdirectory"
    ${CMAKE_COMMAND} -G ${GENERATOR} -S ${ROOT}/tests/build/consumer -B ${OUT}/subdir
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=${CXX} -DSPINDLE_SOURCE_DIR=${ROOT})
run("building the consumer with add_subdirectory" ${CMAKE_COMMAND} --build ${OUT}/subdir)
check_app("with add_subdirectory(spindle)" ${OUT}/subdir/consumer_app)
check_io_app("with add_subdirectory(spindle)" ${OUT}/subdir/consumer_io_app)

# 3. pkg-config.
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "consumer_check: pkg-config is not installed (make deps installs it)")
endif()
set(ENV{PKG_CONFIG_PATH} "")
file(GLOB pcdirs ${prefix}/lib*/pkgconfig ${prefix}/lib/*/pkgconfig)
string(REPLACE ";" ":" pcpath "${pcdirs}")
set(ENV{PKG_CONFIG_PATH} "${pcpath}")
run("pkg-config --cflags --libs spindle" ${PKG_CONFIG} --cflags --libs spindle)
string(STRIP "${last_out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
separate_arguments(cxx UNIX_COMMAND "${CXX}")
run("building with pkg-config's flags"
    ${cxx} -O1 ${ROOT}/tests/build/config_mix_app.cpp ${flags} -o ${OUT}/pkgconfig_app)
check_app("with pkg-config" ${OUT}/pkgconfig_app)

# The I/O layer through pkg-config (spindle-io.pc, which requires liburing).
if(EXISTS ${OUT}/package/consumer_io_app)
  run("pkg-config --cflags --libs spindle-io" ${PKG_CONFIG} --cflags --libs spindle-io)
  string(STRIP "${last_out}" ioflags)
  separate_arguments(ioflags UNIX_COMMAND "${ioflags}")
  run("building the I/O program with pkg-config's flags"
      ${cxx} -O1 ${ROOT}/tests/build/io_app.cpp ${ioflags} -o ${OUT}/pkgconfig_io_app)
  check_io_app("with pkg-config" ${OUT}/pkgconfig_io_app)
endif()
