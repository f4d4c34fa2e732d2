// The qkv program with a stand-in GPU (tests/host_memory_stand_in.h): cuda:0
// and cuda:1 are host memory, and the ops run their device kernels
// (autograd/ops/*.cu compiled as C++) there. It lets tests/cli/device.sh run
// the program's device paths -- the model, its batches, its optimizer and
// its checkpoints on a device -- on machines without a GPU. Builds without
// CUDA only: a CUDA build's kernels would read host memory as device memory.
#include "commands.h"
#include "host_memory_stand_in.h"

int main(int argc, char** argv) {
  qkv::HostMemoryStandIn stand_in;
  qkv::StandInCudaForTests guard(stand_in);
  return qkv::cli::program(argc, argv);
}
