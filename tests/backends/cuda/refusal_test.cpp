// The CUDA backend's refusals of calls that would break the exactness contract, the same checks as the CPU
// reference's (tests/support/refusals.h); the expert-id check runs on the device and surfaces at synchronize().
#include "backends/cuda/cuda_backend.h"
#include "need_gpu.h"
#include "support/refusals.h"

namespace plumb {
namespace {

class CudaRefusals : public ::testing::Test {
 protected:
  void SetUp() override {
    PLUMB_NEED_GPU();
    be_ = std::make_unique<CudaBackend>();
  }
  std::unique_ptr<CudaBackend> be_;
};

TEST_F(CudaRefusals, GdnRefusesTwoSequencesOnOneState) {
  test::expect_gdn_refuses_a_shared_state(*be_);
}

TEST_F(CudaRefusals, AttentionRefusesAPageOneSequenceWritesAndAnotherUses) {
  test::expect_attention_refuses_a_shared_written_page(*be_);
}

TEST_F(CudaRefusals, MoeExpertsRefusesExpertIdsOutsideTheLayer) {
  test::expect_moe_experts_refuses_bad_ids(*be_);
}

TEST_F(CudaRefusals, SampleTokensRefusesARowThatAllowsNoToken) {
  test::expect_sample_tokens_refuses_a_row_allowing_nothing(*be_);
}

}  // namespace
}  // namespace plumb
