# Builds the io suite's tokio server (bench/CMakeLists.txt): cargo build
# --release of MANIFEST into TARGET_DIR, its BINARY copied to OUT. A failed
# build (no network for the crates, an old toolchain) fails nothing: OUT is
# removed and OUT.missing says why, for the suite to record. OUT.stamp marks
# the attempt either way.
set(ENV{CARGO_TARGET_DIR} "${TARGET_DIR}")
execute_process(
  COMMAND "${CARGO}" build --release --locked --manifest-path "${MANIFEST}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
if(rc EQUAL 0)
  file(COPY_FILE "${TARGET_DIR}/release/${BINARY}" "${OUT}")
  file(REMOVE "${OUT}.missing")
else()
  file(REMOVE "${OUT}")
  string(REGEX MATCHALL "error[^\n]*" errors "${err}")
  list(JOIN errors "; " why)
  if(why STREQUAL "")
    set(why "status ${rc}")
  endif()
  file(WRITE "${OUT}.missing" "cargo build --release failed: ${why}\n")
  message(WARNING "the io suite's tokio server was not built (cargo build failed: ${why}); its variants are skipped")
endif()
file(TOUCH "${OUT}.stamp")
