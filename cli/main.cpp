// qkv: train, evaluate, sample and inspect small attention models (program.cpp).
#include "commands.h"

int main(int argc, char** argv) { return qkv::cli::program(argc, argv); }
