# The README's quick start names the Debian packages qkv.sh installs: both
# lists (PACKAGES for every build, TEST_PACKAGES for ./qkv.sh test) must be
# the script's own, word for word, so the docs cannot fall behind a new
# dependency. Run with -DQKV_SOURCE_DIR=... -P.
file(READ ${QKV_SOURCE_DIR}/qkv.sh script)
file(READ ${QKV_SOURCE_DIR}/README.md readme)
string(REGEX REPLACE "[ \n]+" " " readme "${readme}")  # the README wraps its lines anywhere
foreach(list PACKAGES TEST_PACKAGES)
  if(NOT script MATCHES "\n${list}=\\(([^)]*)\\)")
    message(FATAL_ERROR "qkv.sh has no ${list}=(...) line")
  endif()
  string(REGEX REPLACE "[ \n]+" " " packages "${CMAKE_MATCH_1}")
  string(FIND "${readme}" "`${packages}`" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "README.md does not name qkv.sh's ${list} as one quoted list: `${packages}`")
  endif()
endforeach()
message(STATUS "README names qkv.sh's packages")
