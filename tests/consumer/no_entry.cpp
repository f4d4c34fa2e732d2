// A shared library that is not a qkv plugin (no qkv_plugin entry point): the program must refuse it.
extern "C" int not_a_plugin() { return 1; }
