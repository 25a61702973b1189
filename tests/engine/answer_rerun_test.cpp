// The engine's answer re-runs (engine.h) over a fake runner that keeps every prefix offered to it: a finished answer
// runs again as a prompt from its prompt's kept end while the engine is idle, its boundaries are kept and a chat's
// next turn resumes from the last one; a client's request stops a re-run, which resumes from where it stopped once
// the engine is idle again; and nothing is re-run with the option off, without kept prefixes, or for a cancelled
// request.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/engine.h"
#include "fake_runner.h"
#include "support/engine_stream.h"

namespace plumb {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kVocab = 50;

SchedulerConfig config() {
  return SchedulerConfig{.max_running = 4,
                         .max_waiting = 16,
                         .step_tokens = 4 + 64,
                         .prefill_chunk = kKvPageSize,
                         .kv_pages = 256,
                         .kv_page_tokens = kKvPageSize};
}

EngineRequest request(int32_t first, int64_t prompt_length, int64_t max_tokens) {
  EngineRequest r;
  for (int64_t i = 0; i < prompt_length; ++i) r.prompt.push_back(static_cast<int32_t>((first + 11 * i) % kVocab));
  r.max_tokens = max_tokens;
  return r;
}

std::vector<int32_t> first_n(const std::vector<int32_t>& v, int64_t n) {
  return std::vector<int32_t>(v.begin(), v.begin() + n);
}

// The calls of answer re-runs: whole 64-token chunks past a prompt's first one, with nothing drawn.
std::vector<int64_t> rerun_starts(const std::vector<RunnerEntry>& calls) {
  std::vector<int64_t> starts;
  for (const RunnerEntry& e : calls)
    if (e.start > 0 && std::ssize(e.tokens) == kKvPageSize && !e.logits && !e.draw) starts.push_back(e.start);
  return starts;
}

TEST(AnswerRerun, RunsAFinishedAnswerWhileIdleAndTheNextTurnResumesAfterIt) {
  test::FakeRunner runner(kVocab, 1024, {}, false, /*keeps=*/true);
  Engine engine(runner, config());
  // 100 prompt tokens kept at 64; with 200 drawn, the answer passes 128, 192 and 256.
  const EngineRequest first = request(1, 100, 200);
  const test::StreamOutcome out = test::drain(*engine.submit(first).stream);
  ASSERT_EQ(out.tokens.size(), 200u);
  ASSERT_TRUE(test::wait_until_idle(engine));
  std::vector<int32_t> chat = first.prompt;
  chat.insert(chat.end(), out.tokens.begin(), out.tokens.end());
  // From the prompt's kept end, one chunk a step, each kept as a prompt's state.
  EXPECT_EQ(rerun_starts(runner.calls()), (std::vector<int64_t>{64, 128, 192}));
  for (int64_t n : {64, 128, 192, 256}) EXPECT_TRUE(runner.kept().count(first_n(chat, n))) << n;
  EXPECT_EQ(engine.stats().answer_tokens, 192);
  EXPECT_EQ(engine.stats().prefix_hits, 0) << "a re-run is no client's hit";

  EngineRequest next = first;
  next.prompt = chat;
  next.prompt.insert(next.prompt.end(), {3, 4, 5});
  next.max_tokens = 5;
  const test::StreamOutcome second = test::drain(*engine.submit(next).stream);
  EXPECT_EQ(second.finish, StopCause::kLength);
  EXPECT_EQ(second.cached_tokens, 256);
}

TEST(AnswerRerun, KeepsTheStopIdThatEndedTheAnswer) {
  // 127 prompt tokens and a first drawn token that is a stop id: the answer is that id alone, unstreamed, and the
  // next turn's prompt holds it, so the prompt and the stop id, 128 tokens, are kept.
  const EngineRequest free_request = request(2, 127, 1);
  test::FakeRunner plain(kVocab, 1024);
  Engine free_engine(plain, config());
  const test::StreamOutcome free_run = test::drain(*free_engine.submit(free_request).stream);
  ASSERT_EQ(free_run.tokens.size(), 1u);

  test::FakeRunner runner(kVocab, 1024, {}, false, /*keeps=*/true);
  Engine engine(runner, config());
  EngineRequest stopped = free_request;
  stopped.max_tokens = 10;
  stopped.stop_ids = {free_run.tokens[0]};
  const test::StreamOutcome out = test::drain(*engine.submit(stopped).stream);
  ASSERT_EQ(out.finish, StopCause::kStopToken);
  EXPECT_TRUE(out.tokens.empty());
  ASSERT_TRUE(test::wait_until_idle(engine));
  std::vector<int32_t> chat = stopped.prompt;
  chat.push_back(free_run.tokens[0]);
  EXPECT_TRUE(runner.kept().count(chat));
  EXPECT_EQ(rerun_starts(runner.calls()), (std::vector<int64_t>{64}));
}

TEST(AnswerRerun, AClientsRequestStopsAReRunWhichResumesWhereItStopped) {
  test::FakeRunner runner(kVocab, 2048, {}, false, /*keeps=*/true);
  Engine engine(runner, config());
  const EngineRequest first = request(3, 100, 900);  // 1,000 tokens: a re-run of 14 chunks, 64 to 960
  const test::StreamOutcome out = test::drain(*engine.submit(first).stream);
  ASSERT_EQ(out.tokens.size(), 900u);
  runner.set_step_time(50ms);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (engine.stats().answer_tokens < 64 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  const EngineRequest client = request(4, 10, 3);
  const test::StreamOutcome served = test::drain(*engine.submit(client).stream);
  EXPECT_EQ(served.finish, StopCause::kLength);
  ASSERT_TRUE(test::wait_until_idle(engine));

  const std::vector<RunnerEntry> calls = runner.calls();
  ptrdiff_t client_first = -1, client_last = -1;
  for (ptrdiff_t i = 0; i < std::ssize(calls); ++i) {
    const bool is_client = calls[i].start == 0
                               ? calls[i].tokens == client.prompt
                               : client_first >= 0 && calls[i].start < 13 && calls[i].tokens.size() == 1;
    if (!is_client) continue;
    if (client_first < 0) client_first = i;
    client_last = i;
  }
  ASSERT_GE(client_first, 0);
  std::vector<int64_t> before, during, after;
  for (ptrdiff_t i = 0; i < std::ssize(calls); ++i) {
    const std::vector<int64_t> s = rerun_starts({calls[i]});
    if (s.empty()) continue;
    (i < client_first ? before : i <= client_last ? during : after).push_back(s[0]);
  }
  EXPECT_TRUE(during.empty()) << "a re-run shared a step with a client's request";
  EXPECT_FALSE(before.empty());
  EXPECT_FALSE(after.empty()) << "the re-run ended before the client's request came: nothing was stopped";
  // Every chunk once, in order: the re-run resumed from the boundary its last step kept.
  std::vector<int64_t> all = before;
  all.insert(all.end(), after.begin(), after.end());
  std::vector<int64_t> want;
  for (int64_t s = 64; s < 960; s += 64) want.push_back(s);
  EXPECT_EQ(all, want);
  std::vector<int32_t> chat = first.prompt;
  chat.insert(chat.end(), out.tokens.begin(), out.tokens.end());
  EXPECT_TRUE(runner.kept().count(first_n(chat, 960)));
}

TEST(AnswerRerun, NothingIsReRunWithTheOptionOffWithoutKeptPrefixesOrForACancelledRequest) {
  for (const auto& [keeps, rerun] : {std::pair{true, false}, {false, true}}) {
    test::FakeRunner runner(kVocab, 1024, {}, false, keeps);
    Engine engine(runner, config(), EngineOptions{.prefill_answers = rerun});
    ASSERT_EQ(test::drain(*engine.submit(request(5, 100, 200)).stream).finish, StopCause::kLength);
    ASSERT_TRUE(test::wait_until_idle(engine));
    EXPECT_TRUE(rerun_starts(runner.calls()).empty()) << keeps << rerun;
    EXPECT_EQ(engine.stats().answer_tokens, 0);
  }
  test::FakeRunner runner(kVocab, 100000, {}, false, /*keeps=*/true);
  SchedulerConfig c = config();
  c.kv_pages = 2000;
  Engine engine(runner, c);
  const Submission s = engine.submit(request(6, 100, 50000));
  while (engine.stats().steps < 300) std::this_thread::sleep_for(1ms);
  engine.cancel(s.id);
  EXPECT_EQ(test::drain(*s.stream).finish, StopCause::kCancelled);
  ASSERT_TRUE(test::wait_until_idle(engine));
  EXPECT_TRUE(rerun_starts(runner.calls()).empty());
}

}  // namespace
}  // namespace plumb
