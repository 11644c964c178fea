# deepinfer_module(NAME SOURCES ... DEPS ... [PUBLIC_DEPS ...])
# One static library per src/ module. DEPS are the modules (and third-party targets) this module
# may use; ARCHITECTURE.md §1 fixes which ones are allowed, and tools/check_deps.py enforces it
# on #include lines.
set(DEEPINFER_WARNINGS -Wall -Wextra -Wpedantic -Wshadow=local -Wno-unused-parameter)

function(deepinfer_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(di_${name} STATIC ${ARG_SOURCES})
  target_include_directories(di_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(di_${name} PUBLIC ${ARG_DEPS})
  target_compile_options(di_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DEEPINFER_WARNINGS}>)
  if(DEEPINFER_SANITIZE)
    target_compile_options(di_${name} PUBLIC -fsanitize=address,undefined -fno-omit-frame-pointer)
    target_link_options(di_${name} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()
