// The CPU reference's refusals of calls that would break the exactness contract (tests/support/refusals.h).
#include "backends/cpu/cpu_backend.h"
#include "support/refusals.h"

namespace plumb {
namespace {

TEST(CpuRefusals, GdnRefusesTwoSequencesOnOneState) {
  CpuBackend be;
  test::expect_gdn_refuses_a_shared_state(be);
}

TEST(CpuRefusals, AttentionRefusesAPageOneSequenceWritesAndAnotherUses) {
  CpuBackend be;
  test::expect_attention_refuses_a_shared_written_page(be);
}

TEST(CpuRefusals, MoeExpertsRefusesExpertIdsOutsideTheLayer) {
  CpuBackend be;
  test::expect_moe_experts_refuses_bad_ids(be);
}

TEST(CpuRefusals, SampleTokensRefusesARowThatAllowsNoToken) {
  CpuBackend be;
  test::expect_sample_tokens_refuses_a_row_allowing_nothing(be);
}

}  // namespace
}  // namespace plumb
