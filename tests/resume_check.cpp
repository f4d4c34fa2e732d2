// The cross-process half of the resume test (see tests/resume/run.cmake):
//   resume_check --steps N --save F [--resume G]   train to N total steps and save
//   resume_check --sample F                       write tensors of known values for check_safetensors.py
#include <cstdio>
#include <cstring>
#include <string>

#include "tiny_training.h"

int main(int argc, char** argv) {
  using namespace qkv;
  std::string save, resume, sample;
  int64_t steps = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--steps")
      steps = std::atoll(argv[i + 1]);
    else if (flag == "--save")
      save = argv[i + 1];
    else if (flag == "--resume")
      resume = argv[i + 1];
    else if (flag == "--sample")
      sample = argv[i + 1];
  }
  try {
    if (!sample.empty()) {
      io::save_safetensors(sample,
                           {{"f32", reshape(Tensor::arange(6), {2, 3})},
                            {"f64", Tensor::arange(-1, 1, 0.5, DType::Float64)},
                            {"i64", Tensor::from_vector<int64_t>({-3, 0, 1LL << 40})},
                            {"mask", Tensor::from_vector(std::vector<bool>{true, false})}},
                           {{"purpose", "check_safetensors.py"}});
      return 0;
    }
    manual_seed(77);
    tiny::Run run;
    if (!resume.empty()) run.load(resume);
    run.train_until(steps);
    run.save(save);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resume_check: %s\n", e.what());
    return 1;
  }
}
