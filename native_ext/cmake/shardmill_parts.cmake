# The native parts (native_ext/src/*.cc; each *_test.cc beside a part is left to native_ext/tests) as one
# static library, shardmill_parts, compiled and linked against the Arrow and Parquet libraries of the
# pinned pyarrow wheel (the extension must run against exactly that ABI). Included by the extension's
# CMakeLists.txt and by native_ext/tests; sets PYARROW_INCLUDE_DIR, PYARROW_LIBRARY_DIR, PYARROW_VERSION.
execute_process(
  COMMAND ${Python_EXECUTABLE} -c
    "import pyarrow as pa; pa.create_library_symlinks(); print(pa.get_include()); print(';'.join(pa.get_library_dirs())); print(pa.__version__)"
  OUTPUT_VARIABLE PYARROW_INFO OUTPUT_STRIP_TRAILING_WHITESPACE
  COMMAND_ERROR_IS_FATAL ANY)
string(REPLACE "\n" ";" PYARROW_INFO "${PYARROW_INFO}")
list(GET PYARROW_INFO 0 PYARROW_INCLUDE_DIR)
list(GET PYARROW_INFO 1 PYARROW_LIBRARY_DIR)
list(GET PYARROW_INFO -1 PYARROW_VERSION)
message(STATUS "pyarrow ${PYARROW_VERSION}: include ${PYARROW_INCLUDE_DIR}, libs ${PYARROW_LIBRARY_DIR}")
find_library(ARROW_LIB arrow PATHS ${PYARROW_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)
find_library(PARQUET_LIB parquet PATHS ${PYARROW_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)

# libdeflate inflates the lc0 chunks (2-3x zlib's speed on them, CRC-32 checked). Its static archive
# where there is one, so the extension carries it: Beam workers and training machines that install a
# wheel built here need no libdeflate of their own.
find_path(LIBDEFLATE_INCLUDE_DIR libdeflate.h)
find_library(LIBDEFLATE_LIBRARY NAMES libdeflate.a deflate)
if(NOT LIBDEFLATE_INCLUDE_DIR OR NOT LIBDEFLATE_LIBRARY)
  message(FATAL_ERROR "libdeflate not found (shardmill inflates lc0 chunks with it). Install it - Debian/Ubuntu: "
                      "apt-get install libdeflate-dev; Fedora: dnf install libdeflate-devel; macOS: brew install "
                      "libdeflate; conda: libdeflate - or add its prefix to CMAKE_PREFIX_PATH.")
endif()

set(SHARDMILL_PARTS_DIR ${CMAKE_CURRENT_LIST_DIR}/../src)
file(GLOB PART_SOURCES CONFIGURE_DEPENDS ${SHARDMILL_PARTS_DIR}/*.cc)
file(GLOB PART_TESTS CONFIGURE_DEPENDS ${SHARDMILL_PARTS_DIR}/*_test.cc)
list(REMOVE_ITEM PART_SOURCES ${PART_TESTS})
add_library(shardmill_parts STATIC ${PART_SOURCES})
target_include_directories(shardmill_parts PUBLIC ${PYARROW_INCLUDE_DIR} ${SHARDMILL_PARTS_DIR}
                           ${LIBDEFLATE_INCLUDE_DIR})
target_link_libraries(shardmill_parts PUBLIC ${ARROW_LIB} ${PARQUET_LIB} ${LIBDEFLATE_LIBRARY})
set_target_properties(shardmill_parts PROPERTIES POSITION_INDEPENDENT_CODE ON)
# -DSHARDMILL_SANITIZE=address (bash dev.sh asan): the parts and whatever links them, instrumented.
set(SHARDMILL_SANITIZE "" CACHE STRING "a -fsanitize= value (e.g. address) for the native code")
if(SHARDMILL_SANITIZE)
  target_compile_options(shardmill_parts PUBLIC -fsanitize=${SHARDMILL_SANITIZE} -fno-omit-frame-pointer)
  target_link_options(shardmill_parts PUBLIC -fsanitize=${SHARDMILL_SANITIZE})
endif()
