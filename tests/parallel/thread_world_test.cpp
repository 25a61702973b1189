// The CPU world of ranks in threads: each collective's result against the same arithmetic done in one thread (bit for
// bit, on every rank, whatever order the threads arrive in), and a world whose rank fails, hangs or calls another
// collective ending with that rank's name, never a hang.
#include "parallel/thread_world.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace plumb::parallel {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLongTimeout{20000};

// Rank r's values: magnitudes apart by 2^30 and signs mixed, so that F32 sums in another order give other bits.
std::vector<float> rank_values(int r, int64_t n) {
  std::mt19937 rng(static_cast<uint32_t>(1000 + r));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng) * (r % 2 == 0 ? 1.0f : 1073741824.0f);
  return v;
}

// Arrivals in a scrambled order: rank r sleeps a little, differently each round.
void jitter(int r, int round) {
  std::this_thread::sleep_for(std::chrono::microseconds((r * 7919 + round * 104729) % 3000));
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

TEST(ThreadWorld, AllReduceAddsInRankOrderOnEveryRank) {
  constexpr int kRanks = 4;
  constexpr int64_t kN = 1031;
  std::vector<float> expected(kN);
  for (int64_t i = 0; i < kN; ++i) {
    float s = rank_values(0, kN)[static_cast<size_t>(i)];
    for (int r = 1; r < kRanks; ++r) s += rank_values(r, kN)[static_cast<size_t>(i)];
    expected[static_cast<size_t>(i)] = s;
  }
  // The control: another order of the same additions changes some bits, so equality below says the order held.
  bool order_matters = false;
  for (int64_t i = 0; i < kN; ++i) {
    float reversed = rank_values(kRanks - 1, kN)[static_cast<size_t>(i)];
    for (int r = kRanks - 2; r >= 0; --r) reversed += rank_values(r, kN)[static_cast<size_t>(i)];
    order_matters = order_matters || reversed != expected[static_cast<size_t>(i)];
  }
  ASSERT_TRUE(order_matters);
  for (int round = 0; round < 8; ++round) {
    std::vector<std::vector<float>> results(kRanks);
    run_thread_ranks(kRanks, kLongTimeout, [&](Collective& c) {
      EXPECT_EQ(c.world_size(), kRanks);
      Tensor t = Tensor::from_f32(rank_values(c.rank(), kN), {kN});
      jitter(c.rank(), round);
      c.all_reduce_sum(t);
      results[static_cast<size_t>(c.rank())].assign(t.f32(), t.f32() + kN);
    });
    for (int r = 0; r < kRanks; ++r)
      EXPECT_TRUE(same_bits(results[static_cast<size_t>(r)].data(), expected.data(), kN)) << "rank " << r;
  }
}

TEST(ThreadWorld, GatherBroadcastAndAFoldPassedFromRankToRank) {
  constexpr int kRanks = 3;
  std::vector<std::vector<float>> gathered(kRanks), broadcast(kRanks), folded(kRanks);
  run_thread_ranks(kRanks, kLongTimeout, [&](Collective& c) {
    const int r = c.rank();
    // Uneven widths, as a vocabulary split in unequal shares: rank r holds r + 1 columns of 2 rows.
    std::vector<float> mine;
    for (int row = 0; row < 2; ++row)
      for (int col = 0; col <= r; ++col) mine.push_back(static_cast<float>(100 * r + 10 * row + col));
    const Tensor part = Tensor::from_f32(mine, {2, r + 1});
    Tensor out = Tensor::zeros(DType::kF32, {2, 6});
    c.all_gather_last(part, out);
    gathered[static_cast<size_t>(r)].assign(out.f32(), out.f32() + out.numel());

    Tensor b = Tensor::from_f32({static_cast<float>(r), static_cast<float>(-r)}, {2});
    c.broadcast(b, 1);
    broadcast[static_cast<size_t>(r)].assign(b.f32(), b.f32() + 2);

    // The running sum goes on from rank to rank, each adding its own values in order; the last rank's is broadcast.
    Tensor sum = Tensor::zeros(DType::kF32, {5});
    if (r > 0) c.recv(sum, r - 1);
    const std::vector<float> add = rank_values(r, 5);
    for (int i = 0; i < 5; ++i) sum.f32()[i] = r == 0 ? add[static_cast<size_t>(i)] : sum.f32()[i] + add[i];
    if (r + 1 < kRanks) c.send(sum, r + 1);
    c.broadcast(sum, kRanks - 1);
    folded[static_cast<size_t>(r)].assign(sum.f32(), sum.f32() + 5);
  });
  const std::vector<float> expected_gather = {0, 100, 101, 200, 201, 202, 10, 110, 111, 210, 211, 212};
  std::vector<float> expected_fold = rank_values(0, 5);
  for (int r = 1; r < kRanks; ++r)
    for (int i = 0; i < 5; ++i) expected_fold[static_cast<size_t>(i)] += rank_values(r, 5)[static_cast<size_t>(i)];
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(gathered[static_cast<size_t>(r)], expected_gather) << "rank " << r;
    EXPECT_EQ(broadcast[static_cast<size_t>(r)], (std::vector<float>{1.0f, -1.0f})) << "rank " << r;
    EXPECT_TRUE(same_bits(folded[static_cast<size_t>(r)].data(), expected_fold.data(), 5)) << "rank " << r;
  }
}

// Runs the world and returns the error it ended with ("" if none) and how long it took.
std::pair<std::string, double> run_failing(int ranks, milliseconds timeout,
                                           const std::function<void(Collective&)>& fn) {
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    run_thread_ranks(ranks, timeout, fn);
  } catch (const Error& e) {
    message = e.what();
  }
  return {message, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

TEST(ThreadWorld, ARankThatThrowsEndsEveryRanksWaitAtOnce) {
  const auto [message, seconds] = run_failing(4, kLongTimeout, [](Collective& c) {
    if (c.rank() == 2) PLUMB_FAIL("the shard of layer 3 is missing");
    Tensor t = Tensor::zeros(DType::kF32, {8});
    c.all_reduce_sum(t);
  });
  EXPECT_EQ(message, "rank 2: the shard of layer 3 is missing");
  EXPECT_LT(seconds, 10.0) << "the others waited for the timeout instead of stopping";
}

TEST(ThreadWorld, ARankThatHangsTimesOutNamingIt) {
  std::atomic<bool> release{false};
  const auto [message, seconds] = run_failing(3, milliseconds(200), [&](Collective& c) {
    if (c.rank() == 1) {
      while (!release.load()) std::this_thread::sleep_for(milliseconds(5));
      return;
    }
    Tensor t = Tensor::zeros(DType::kF32, {4});
    try {
      c.all_reduce_sum(t);
    } catch (...) {
      release = true;  // the hung rank may end once the world has given up on it
      throw;
    }
  });
  EXPECT_NE(message.find("waited 200 ms in all_reduce_sum for rank 1 "), std::string::npos) << message;
  EXPECT_LT(seconds, 10.0);
}

TEST(ThreadWorld, RanksThatDisagreeOnTheCallFailNamingBoth) {
  const auto [message, seconds] = run_failing(2, kLongTimeout, [](Collective& c) {
    Tensor t = Tensor::zeros(DType::kF32, {4});
    if (c.rank() == 0) c.all_reduce_sum(t);
    if (c.rank() == 1) c.broadcast(t, 0);
  });
  EXPECT_NE(message.find("all_reduce_sum of [4]"), std::string::npos) << message;
  EXPECT_NE(message.find("broadcast of [4] from rank 0"), std::string::npos) << message;
  const auto [shapes, seconds2] = run_failing(2, kLongTimeout, [](Collective& c) {
    Tensor t = Tensor::zeros(DType::kF32, {c.rank() == 0 ? 4 : 5});
    c.all_reduce_sum(t);
  });
  EXPECT_NE(shapes.find("all_reduce_sum of [4]"), std::string::npos) << shapes;
  EXPECT_NE(shapes.find("all_reduce_sum of [5]"), std::string::npos) << shapes;
  EXPECT_LT(seconds + seconds2, 10.0);
}

TEST(ThreadWorld, BadArgumentsAreRefusedByName) {
  EXPECT_NE(run_failing(0, kLongTimeout, [](Collective&) {}).first.find("a world of 0 ranks"), std::string::npos);
  EXPECT_NE(run_failing(2, milliseconds(0), [](Collective&) {}).first.find("timeout of 0 ms"), std::string::npos);
  const std::string to_self = run_failing(2, kLongTimeout, [](Collective& c) {
                                Tensor t = Tensor::zeros(DType::kF32, {1});
                                if (c.rank() == 1) c.send(t, 1);
                              }).first;
  EXPECT_EQ(to_self, "rank 1: send: rank 1 cannot send to rank 1 (a world of 2)");
  const std::string root = run_failing(1, kLongTimeout, [](Collective& c) {
                             Tensor t = Tensor::zeros(DType::kF32, {1});
                             c.broadcast(t, 3);
                           }).first;
  EXPECT_EQ(root, "rank 0: broadcast: root 3 outside the world of 1 ranks");
  const std::string received = run_failing(2, kLongTimeout, [](Collective& c) {
                                 Tensor t = Tensor::zeros(DType::kF32, {c.rank() == 0 ? 3 : 2});
                                 if (c.rank() == 0) c.send(t, 1);
                                 if (c.rank() == 1) c.recv(t, 0);
                               }).first;
  EXPECT_EQ(received, "rank 1: recv: rank 0 sent [3] to rank 1, which expected [2]");
  const std::string gathered = run_failing(2, kLongTimeout, [](Collective& c) {
                                 const Tensor part = Tensor::zeros(DType::kF32, {2, 3});
                                 Tensor out = Tensor::zeros(DType::kF32, {2, 5});
                                 c.all_gather_last(part, out);
                               }).first;
  EXPECT_NE(gathered.find("all_gather_last: rank 0's out is [2, 5], expected [2, 6]"), std::string::npos) << gathered;
}

}  // namespace
}  // namespace plumb::parallel
