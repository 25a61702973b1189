// The harness's tests: every registered case must pass, every planted control must be rejected, and every fault of
// fault.h must have a control. Test names come from the registry alone, so discovery needs no GPU. Without a usable
// device the GPU tests skip, or fail under PLUMB_REQUIRE_GPU=1.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/kernels/device_limits.h"
#include "need_gpu.h"
#include "op_harness.h"
#include "support/non_finite.h"

namespace plumb::harness {
namespace {

// Prints the run's seed once, before the first test.
class SeedEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { std::printf("[ harness  ] %s\n", seed_note().c_str()); }
};
const ::testing::Environment* const seed_environment = ::testing::AddGlobalTestEnvironment(new SeedEnvironment);

// One CUDA backend for the process, so the memory pool is shared by every case.
CudaBackend& gpu() {
  static std::unique_ptr<CudaBackend> backend = [] {
    auto b = std::make_unique<CudaBackend>();
    b->set_poison(true);
    return b;
  }();
  return *backend;
}

// Sets a fault for its lifetime, and always clears it again.
class FaultScope {
 public:
  explicit FaultScope(cuda::KernelFault fault) { gpu().set_fault(fault); }
  ~FaultScope() { gpu().set_fault(cuda::KernelFault::kNone); }
  FaultScope(const FaultScope&) = delete;
  FaultScope& operator=(const FaultScope&) = delete;
};

// Runs a case once on inputs drawn from `rng`, with a fresh CPU reference.
Verdict run_case(const Case& c, std::mt19937_64& rng) {
  CpuBackend cpu;
  Context ctx{gpu(), cpu, rng, {}};
  c.run(ctx);
  gpu().synchronize();
  return ctx.verdict;
}

// The probe every case and control starts with, as a test of its own: scripts/test.sh runs it alone to say whether
// this run checks any kernel.
TEST(Device, IsUsable) {
  std::printf("[ device   ] %s\n", test::device_problem().empty() ? "usable" : test::device_problem().c_str());
  PLUMB_NEED_GPU();
}

// The limits the launchers size their grids and shared memory by, read once per device, are the driver's, and the
// build's kernels run on the device (CudaBackend refuses a device they do not run on with kernel_image_problem's
// message, whose sentence KernelImage.MessageNamesTheCapabilityFloor checks; the refusal itself needs a GPU of another
// architecture and is not exercised here).
TEST(Device, LimitsMatchTheDriver) {
  PLUMB_NEED_GPU();
  gpu();  // the backend selects its device
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  cudaDeviceProp properties{};
  ASSERT_EQ(cudaGetDeviceProperties(&properties, device), cudaSuccess);
  const cuda::DeviceLimits& limits = cuda::device_limits();
  EXPECT_EQ(limits.multiprocessors, properties.multiProcessorCount);
  EXPECT_EQ(limits.smem_per_multiprocessor, static_cast<int>(properties.sharedMemPerMultiprocessor));
  EXPECT_EQ(limits.smem_per_block_optin, static_cast<int>(properties.sharedMemPerBlockOptin));
  EXPECT_EQ(limits.major, properties.major);
  EXPECT_EQ(limits.minor, properties.minor);
  EXPECT_EQ(&cuda::device_limits(), &limits) << "read once: the same record on the second call";
  EXPECT_EQ(cuda::kernel_image_problem(), "");
}

// What a device the build's kernels do not run on is told (no GPU needed: the sentence alone): below compute
// capability 9.0 that no build of plumb runs there, not a build flag that would fail at configure time.
TEST(KernelImage, MessageNamesTheCapabilityFloor) {
  const std::string ampere = cuda::kernel_image_message(1, "NVIDIA A100", 8, 0, "no kernel image is available");
  EXPECT_NE(ampere.find("device 1 (NVIDIA A100) has compute capability 8.0"), std::string::npos) << ampere;
  EXPECT_NE(ampere.find("need 9.0 or later"), std::string::npos) << ampere;
  EXPECT_EQ(ampere.find("PLUMB_CUDA_ARCHS"), std::string::npos) << ampere;
  const std::string blackwell = cuda::kernel_image_message(0, "RTX", 12, 0, "no kernel image is available");
  EXPECT_NE(blackwell.find("-DPLUMB_CUDA_ARCHS=120"), std::string::npos) << blackwell;
  EXPECT_NE(blackwell.find("(the driver says: no kernel image is available)"), std::string::npos) << blackwell;
  const std::string hopper = cuda::kernel_image_message(0, "H100", 9, 0, "no kernel image is available");
  EXPECT_NE(hopper.find("-DPLUMB_CUDA_ARCHS=90a"), std::string::npos) << hopper;
}

class Cases : public ::testing::TestWithParam<size_t> {};

TEST_P(Cases, MatchesReference) {
  PLUMB_NEED_GPU();
  const Case& c = cases()[GetParam()];
  std::mt19937_64 rng(case_seed(c.name));
  const Verdict v = run_case(c, rng);
  print_margin(c.name, v);
  EXPECT_TRUE(v.ok()) << c.name << " rejected, " << seed_note() << ":\n" << v.report();
}

INSTANTIATE_TEST_SUITE_P(Ops, Cases, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return cases()[info.param].name; });

class Controls : public ::testing::TestWithParam<size_t> {};

TEST_P(Controls, AreRejected) {
  PLUMB_NEED_GPU();
  const Control& control = controls()[GetParam()];
  const Case* c = find_case(control.case_name);
  ASSERT_NE(c, nullptr) << "control " << fault_name(control.fault) << " names unknown case " << control.case_name;
  std::mt19937_64 rng(case_seed(std::string("control_") + fault_name(control.fault)));
  int rejected = 0;
  for (int rep = 0; rep < control.repetitions; ++rep) {
    Verdict v;
    try {
      FaultScope scope(control.fault);
      v = run_case(*c, rng);
    } catch (const std::exception& e) {
      FAIL() << "control " << fault_name(control.fault) << " on case " << c->name
             << " threw instead of producing output for the check to judge: " << e.what() << "; " << seed_note();
    }
    if (!v.ok()) {
      ++rejected;
      std::printf("[ control  ] %s on %s: repetition %d rejected, first reason:\n%s", fault_name(control.fault),
                  c->name.c_str(), rep, v.report().substr(0, v.report().find('\n') + 1).c_str());
    } else {
      std::printf("[ control  ] %s on %s: repetition %d PASSED the check\n", fault_name(control.fault), c->name.c_str(),
                  rep);
    }
  }
  EXPECT_GT(rejected, 0) << "PLANTED CONTROL PASSED: the harness did not reject fault " << fault_name(control.fault)
                         << " on case " << c->name << " in " << control.repetitions << " repetition(s), so it is "
                         << "blind to that bug. "
                         << (control.repetitions > 1 ? "This control is a race: the race did not show at these sizes "
                                                       "on this device; the harness needs larger or more repetitions. "
                                                     : "")
                         << seed_note();
}

INSTANTIATE_TEST_SUITE_P(Faults, Controls, ::testing::Range<size_t>(0, controls().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(fault_name(controls()[info.param].fault)) + "_" +
                                  std::to_string(info.param);
                         });

// Needs no GPU: the harness links the kernels with the planted faults compiled in (plumb_backend_cuda_planted);
// with the production ones every control would launch the production kernel and fail as "passed its check".
TEST(Registry, PlantedFaultsAreBuiltIn) {
  EXPECT_TRUE(cuda::planted_faults_built()) << "gpu_op_harness links the production kernels (plumb_cuda_kernels)";
}

// Needs no GPU: a fault without a control, or a control naming no case, is a hole in the harness.
TEST(Registry, EveryFaultHasAControlOnARegisteredCase) {
  for (cuda::KernelFault fault : all_faults()) {
    bool found = false;
    for (const Control& c : controls()) found = found || c.fault == fault;
    EXPECT_TRUE(found) << "no planted control for fault " << fault_name(fault);
  }
  for (const Control& c : controls())
    EXPECT_NE(find_case(c.case_name), nullptr) << fault_name(c.fault) << " names unknown case " << c.case_name;
}

// Needs no GPU: the comparison every case goes through rejects a NaN or an infinity on either side wherever it sits,
// and its worst err/bound ratio fails `<= 1` too (a finite one here is 0.5).
TEST(Verdict, ANonFiniteValueAnywhereIsRejected) {
  for (const test::PlantedArrays& p : test::planted_arrays(2.5f)) {
    Verdict v;
    v.close(p.what, Tensor::from_f32(p.a, {3, 3}), Tensor::from_f32(p.b, {3, 3}), std::vector<double>(9, 1.0));
    EXPECT_FALSE(v.ok()) << p.what << " passed";
    EXPECT_FALSE(v.worst_ratio() <= 1.0) << p.what << ": worst ratio " << v.worst_ratio();
  }
}

}  // namespace
}  // namespace plumb::harness
