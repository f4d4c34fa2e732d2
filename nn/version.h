// qkv's version: CMakeLists.txt reads it from here (project(VERSION)), and a
// plugin records the version it was built against (nn/plugin.h).
#pragma once

#define QKV_VERSION_TEXT "0.1.0"
