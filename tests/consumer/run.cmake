# Installs qkv to a scratch prefix, builds tests/consumer against it with
# find_package(qkv), runs it, and checks that the README shows this very
# program and its very output. The installed program runs from the prefix on
# its installed data.
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${QKV_BINARY_DIR} --prefix ${prefix})
if(EXISTS ${prefix}/bin/qkv)
  run(${prefix}/bin/qkv info --system)
  if(NOT last_output MATCHES "data       ${prefix}/share/qkv ")
    message(FATAL_ERROR "the installed qkv does not read its installed data:\n${last_output}")
  endif()
  run(${prefix}/bin/qkv train --task text --steps 2 --eval-every 2 --threads 1 --save ${WORK_DIR}/text.safetensors)
elseif(QKV_PROGRAM)
  message(FATAL_ERROR "cmake --install put no bin/qkv under ${prefix}")
endif()
run(${CMAKE_COMMAND} -S ${QKV_SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/readme_example)
set(program_output "${last_output}")

# The README holds the program between <!-- readme-example --> markers and its
# output between <!-- readme-example-output --> markers, each in a code fence.
file(READ ${QKV_SOURCE_DIR}/README.md readme)
file(READ ${QKV_SOURCE_DIR}/tests/consumer/main.cpp program)
function(fenced marker result)
  string(REGEX MATCH "<!-- ${marker} -->\n```[a-z+]*\n([^`]*)```" found "${readme}")
  if(NOT found)
    message(FATAL_ERROR "README.md has no block after <!-- ${marker} -->")
  endif()
  set(${result} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()
fenced(readme-example shown_program)
fenced(readme-example-output shown_output)
if(NOT shown_program STREQUAL program)
  message(FATAL_ERROR "README example differs from tests/consumer/main.cpp:\n${shown_program}")
endif()
if(NOT shown_output STREQUAL program_output)
  message(FATAL_ERROR "README shows output\n${shown_output}\nbut the program printed\n${program_output}")
endif()
message(STATUS "README example builds with find_package(qkv) and prints what the README shows")
