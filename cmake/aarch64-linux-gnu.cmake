# Cross-compiling for 64-bit ARM on an x86-64 Debian machine, from Debian's
# cross toolchain (g++-aarch64-linux-gnu) and the arm64 packages of qkv's
# libraries (dpkg --add-architecture arm64; libopenblas-openmp-dev:arm64 and
# the rest: tests/arm/check.sh installs them). The binaries run under
# qemu-user's qemu-aarch64, which is also how CMake runs them at build time
# (Catch2 lists a test binary's cases by running it).
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# "/" stays a root: Debian's multiarch keeps arm64 libraries in /usr/lib/aarch64-linux-gnu, and the
# architecture-free parts (xsimd's and Catch2's CMake files, the page's scripts) under /usr.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# Run as on an arm64 Debian machine: every library, glibc's loader included, from the multiarch arm64
# packages (libstdc++6:arm64 among them). Not `-L /usr/aarch64-linux-gnu`: the cross toolchain's own glibc
# (2.36-8cross1) then loads beside the arm64 package's libc (2.36-9+deb12u14) found through ld.so.cache, and a
# mismatched loader and libc spin forever on the first thread's stack lock (every 2-thread run "hung").
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
