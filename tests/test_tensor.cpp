#include <catch2/catch.hpp>

#include "autograd/autograd.h"

using namespace qkv;
