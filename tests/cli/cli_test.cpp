// The plumb executable end to end: its outputs, and one clear line on stderr with a non-zero exit for bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/npy.h"
#include "support/fixtures.h"
#include "support/synthetic_model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#ifdef PLUMB_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace plumb {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

// Whether `--device cuda` can run here: this build has the CUDA backend and it finds a device (plumb's own probe).
bool cuda_device_here() {
#ifdef PLUMB_HAVE_CUDA
  return cuda_device_available();
#else
  return false;
#endif
}

struct Outcome {
  int status = -1;
  std::string out, err;
};

// Runs plumb with `args` (a shell-quoted string) after the shell words `prefix` (a cd, an environment variable),
// capturing stdout and stderr.
Outcome plumb(const std::string& args, const std::string& scratch, const std::string& prefix = "") {
  const std::string err_file = scratch + "/stderr.txt";
  const std::string command = prefix + std::string(PLUMB_BINARY) + " " + args + " 2>" + err_file;
  Outcome r;
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

// `text` as one word for sh, inside single quotes.
std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir(std::string("cli-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    model_ = dir_ + "/model";
    test::write_model_folder(model_, test::small_qwen3_next_config(),
                             test::synthetic_tensors(test::small_qwen3_next_config(), 9));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Outcome run(const std::string& args) { return plumb(args, dir_); }
  Outcome run_after(const std::string& prefix, const std::string& args) { return plumb(args, dir_, prefix); }
  // A failure is one line on stderr, "plumb: error: ...", and exit status 1.
  void expect_clean_failure(const Outcome& r, const std::string& message) {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(message));
    EXPECT_THAT(r.err, MatchesRegex("plumb: error: [^\n]*\n"));
  }
  std::string dir_, model_;
};

TEST_F(Cli, LogitsWritesTheNpyOfOnePrefill) {
  const Outcome r = run("logits --model " + model_ + " --ids 5,17,2,49 --out " + dir_ + "/l.npy");
  ASSERT_EQ(r.status, 0) << r.err;
  const NpyArray logits = read_npy_f32(dir_ + "/l.npy");
  EXPECT_EQ(logits.shape, (Shape{4, 50}));
  for (float v : logits.values) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(Cli, LogitsHashIsStableAcrossRuns) {
  const Outcome a = run("logits --model " + model_ + " --ids 1,2,3 --hash");
  const Outcome b = run("logits --model " + model_ + " --ids 1,2,3 --hash");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_THAT(a.out, HasSubstr("logits "));
  EXPECT_THAT(a.out, HasSubstr("layer0.recurrent "));
  EXPECT_THAT(a.out, HasSubstr("layer2.k "));
  EXPECT_EQ(a.out, b.out);
}

// The asked sequence's logits and final states do not depend on the sequences that share its forward calls, nor on
// prefill calls split at multiples of the delta rule's chunk size: every run prints the same hash lines.
TEST_F(Cli, LogitsHashIsInvariantToBatchAndPrefillChunk) {
  std::string ids;
  for (int t = 0; t < 130; ++t) ids += (t ? "," : "") + std::to_string((t * 7 + 3) % 50);
  const std::string base = "logits --model " + model_ + " --ids " + ids + " --hash";
  const Outcome alone = run(base + " --batch 1");
  ASSERT_EQ(alone.status, 0) << alone.err;
  EXPECT_THAT(alone.out, HasSubstr("logits "));
  EXPECT_THAT(alone.out, HasSubstr("layer2.k "));
  // 130 tokens in calls of 64: pieces of 64, 64 and 2 tokens.
  for (const char* variant :
       {"", " --batch 3", " --prefill-chunk 64", " --batch 3 --prefill-chunk 64", " --batch 6 --prefill-chunk 64"}) {
    const Outcome r = run(base + variant);
    ASSERT_EQ(r.status, 0) << variant << ": " << r.err;
    EXPECT_EQ(r.out, alone.out) << "'" << variant << "' differs from --batch 1";
  }
}

// A recorded routing replays to the same logits (its weights are recomputed in double: within 1e-5), and a trace
// that does not fit the run is refused with one line.
TEST_F(Cli, RoutingRecordedAndReplayed) {
  const std::string base = "logits --model " + model_ + " --ids 5,17,2,49,8,8,30";
  ASSERT_EQ(run(base + " --out " + dir_ + "/a.npy --record-routing " + dir_ + "/r.json").status, 0);
  const Outcome replay = run(base + " --out " + dir_ + "/b.npy --replay-routing " + dir_ + "/r.json");
  ASSERT_EQ(replay.status, 0) << replay.err;
  const NpyArray a = read_npy_f32(dir_ + "/a.npy"), b = read_npy_f32(dir_ + "/b.npy");
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) ASSERT_TRUE(std::fabs(a.values[i] - b.values[i]) <= 1e-5f) << i;
  expect_clean_failure(
      run("logits --model " + model_ + " --ids 5,17 --out " + dir_ + "/c.npy --replay-routing " + dir_ + "/r.json"),
      "does not match the recording");
  expect_clean_failure(run(base + " --hash --batch 3 --record-routing " + dir_ + "/r.json"),
                       "run the prompt alone in one call");
}

// Asking for the GPU where there is none (no CUDA backend compiled in, or no device present) is one clear error
// line and exit status 1, not a crash.
TEST_F(Cli, DeviceCudaWithoutAGpuFailsCleanly) {
  if (cuda_device_here()) GTEST_SKIP() << "a CUDA device is usable here, so --device cuda runs instead of failing";
  for (const std::string& args : {"logits --model " + model_ + " --ids 1,2,3 --hash --device cuda",
                                  "logits --model " + model_ + " --ids 1,2,3 --batch 3 --hash --device cuda",
                                  "generate --model " + model_ + " --ids 1 --max-tokens 2 --device cuda",
                                  "generate --model " + model_ + " --ids 1 --device cuda"}) {
    const Outcome r = run(args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.err;
    EXPECT_THAT(r.err, MatchesRegex("plumb: error: --device cuda: (no CUDA device is available|this build of plumb "
                                    "has no CUDA backend)[^\n]*\n"))
        << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

TEST_F(Cli, GeneratePrintsIdsAndIsReproducible) {
  const std::string args = "generate --model " + model_ + " --ids 3,4 --max-tokens 6 --print-ids";
  const Outcome greedy = run(args);
  ASSERT_EQ(greedy.status, 0) << greedy.err;
  EXPECT_THAT(greedy.out, MatchesRegex("[0-9]+( [0-9]+){5}\n"));
  const Outcome sampled_a = run(args + " --temperature 0.8 --top-p 0.9 --top-k 20 --seed 5");
  const Outcome sampled_b = run(args + " --temperature 0.8 --top-p 0.9 --top-k 20 --seed 5");
  ASSERT_EQ(sampled_a.status, 0) << sampled_a.err;
  EXPECT_EQ(sampled_a.out, sampled_b.out);
}

// --synthetic runs plumb bench's random-weight model (same shapes, same seed) with token-id prompts; it names the
// model on its own, so a folder beside it, a text prompt or a weight scan is refused in one line.
TEST_F(Cli, GenerateRunsASyntheticModelOnTokenIds) {
  const std::string args = "generate --synthetic tiny --ids 1,2,3 --max-tokens 6 --print-ids";
  const Outcome a = run(args);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_THAT(a.out, MatchesRegex("[0-9]+( [0-9]+){5}\n"));
  EXPECT_EQ(run(args).out, a.out);
  expect_clean_failure(run("generate --synthetic tiny --model " + model_ + " --ids 1"), "give one of them");
  expect_clean_failure(run("generate --synthetic tiny --prompt hello"), "no tokenizer: give the prompt as --ids");
  expect_clean_failure(run("generate --synthetic tiny --check-weights --ids 1"), "--synthetic tiny has none");
  expect_clean_failure(run("generate --synthetic tiny-ish --ids 1"), "unknown synthetic model 'tiny-ish' (known:");
  expect_clean_failure(run("serve --synthetic tiny --model " + model_), "give one of them");
  // --weights fp8: the same shapes with FP8 projections (codes and multipliers), deterministic as well.
  const Outcome fp8 = run(args + " --weights fp8");
  ASSERT_EQ(fp8.status, 0) << fp8.err;
  EXPECT_THAT(fp8.out, MatchesRegex("[0-9]+( [0-9]+){5}\n"));
  EXPECT_EQ(run(args + " --weights fp8").out, fp8.out);
  // --weights nvfp4: packed E2M1 projections with their group and weight scales, deterministic too.
  const Outcome nvfp4 = run(args + " --weights nvfp4");
  ASSERT_EQ(nvfp4.status, 0) << nvfp4.err;
  EXPECT_THAT(nvfp4.out, MatchesRegex("[0-9]+( [0-9]+){5}\n"));
  EXPECT_EQ(run(args + " --weights nvfp4").out, nvfp4.out);
  expect_clean_failure(run(args + " --weights fp4"), "--weights fp4: expected bf16, fp8 or nvfp4");
  expect_clean_failure(run("generate --model " + model_ + " --weights fp8 --ids 1"), "a folder's is its own");
}

// --speculative-tokens drafts with the folder's MTP head (a synthetic model's random one): the same tokens and final
// state as without, the drafts' fate on stderr; a folder without a head or a count past 8 is refused in one line.
TEST_F(Cli, GenerateWithSpeculativeTokensMakesTheSameTokens) {
  nlohmann::json config = test::small_qwen3_next_config();
  config["mtp_num_hidden_layers"] = 1;
  const std::string with_head = dir_ + "/with-head";
  test::write_model_folder(with_head, config, test::synthetic_tensors(config, 9));
  const Outcome inspected = run("inspect --model " + with_head);
  ASSERT_EQ(inspected.status, 0) << inspected.err;
  EXPECT_THAT(inspected.out, HasSubstr("mtp head     1 layer, "));
  EXPECT_THAT(run("inspect --model " + model_).out, Not(HasSubstr("mtp head")));
  for (const std::string sampling : {"", " --temperature 0.8 --seed 4"}) {
    const std::string args =
        "generate --model " + with_head + " --ids 3,4,5 --max-tokens 24 --print-ids --hash" + sampling;
    const Outcome plain = run(args);
    ASSERT_EQ(plain.status, 0) << plain.err;
    for (const char* k : {"1", "3", "8"}) {
      const Outcome speculative = run(args + " --speculative-tokens " + k);
      ASSERT_EQ(speculative.status, 0) << speculative.err;
      EXPECT_EQ(speculative.out, plain.out) << "k " << k << sampling;
      EXPECT_THAT(speculative.err,
                  MatchesRegex("(.|\n)*plumb: speculative decoding: [0-9]+ of [0-9]+ drafts kept(.|\n)*"));
    }
    // Drafts among the first ids alone (one id: every draft is token 0): fewer may be kept, the tokens are the same.
    for (const char* vocab : {"1", "50"}) {
      const Outcome among = run(args + " --speculative-tokens 3 --draft-vocab " + vocab);
      ASSERT_EQ(among.status, 0) << among.err;
      EXPECT_EQ(among.out, plain.out) << "--draft-vocab " << vocab << sampling;
    }
  }
  expect_clean_failure(run("generate --model " + with_head + " --ids 3 --draft-vocab 5"),
                       "--draft-vocab needs --speculative-tokens K");
  expect_clean_failure(run("generate --model " + with_head + " --ids 3 --speculative-tokens 2 --draft-vocab 100000"),
                       "--draft-vocab 100000: the drafts' vocabulary must be 1 to the model's");
  expect_clean_failure(run("serve --model " + with_head + " --port 0 --speculative-tokens 2 --draft-vocab -1"),
                       "--draft-vocab -1: the drafts' vocabulary must be 1 to the model's");
  expect_clean_failure(run("generate --model " + model_ + " --ids 3 --speculative-tokens 2"), "mtp_num_hidden_layers");
  expect_clean_failure(run("generate --model " + with_head + " --ids 3 --speculative-tokens 9"),
                       "speculative tokens must be in 0..8, got 9");
  expect_clean_failure(run("serve --model " + with_head + " --port 0 --adaptive-drafts"),
                       "--adaptive-drafts needs --speculative-tokens K");
  // A synthetic model drafts with a random head: the same tokens as without it.
  const std::string synthetic = "generate --synthetic tiny --ids 1,2,3 --max-tokens 12 --print-ids";
  const Outcome drafted = run(synthetic + " --speculative-tokens 3");
  ASSERT_EQ(drafted.status, 0) << drafted.err;
  EXPECT_EQ(drafted.out, run(synthetic).out);
}

TEST_F(Cli, GenerateStopsAtAStopId) {
  const Outcome greedy = run("generate --model " + model_ + " --ids 3,4 --max-tokens 6 --print-ids");
  ASSERT_EQ(greedy.status, 0);
  const std::string first = greedy.out.substr(0, greedy.out.find_first_of(" \n"));
  const Outcome stopped =
      run("generate --model " + model_ + " --ids 3,4 --max-tokens 6 --print-ids --stop-ids " + first);
  EXPECT_EQ(stopped.out, "\n");
}

TEST_F(Cli, InspectSummarizes) {
  const Outcome r = run("inspect --model " + model_ + " --context 100");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 gated deltanet (G), 1 full attention (A): GGA"));
  EXPECT_THAT(r.out, HasSubstr("routed_experts"));
  EXPECT_THAT(r.out, HasSubstr("bytes one decode step moves at batch 1, context 100"));
  EXPECT_THAT(r.out, HasSubstr("gpu memory for 1 sequence of context 100"));
  const Outcome many = run("inspect --model " + model_ + " --context 100 --sequences 16");
  ASSERT_EQ(many.status, 0) << many.err;
  EXPECT_THAT(many.out, HasSubstr("gpu memory for 16 sequences of context 100"));
  expect_clean_failure(run("inspect --model " + model_ + " --sequences 0"), "--sequences must be >= 1, got 0");
}

TEST_F(Cli, InspectSaysAnNvfp4FoldersKvCacheStaysBf16) {
  const Outcome r = run("inspect --model " + test::source_dir() + "/tests/fixtures/models/qwen3_next_nvfp4");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("quantization nvfp4 (ModelOpt), groups of 16"));
  EXPECT_THAT(r.out, HasSubstr("kv cache     declared FP8: its k/v scales are checked and not applied"));
}

TEST_F(Cli, BadInputFailsWithOneLine) {
  expect_clean_failure(run("logits --model " + model_ + " --ids 5,50 --out " + dir_ + "/x.npy"),
                       "--ids: token id 50 is out of range for vocabulary size 50");
  expect_clean_failure(run("logits --model " + model_ + " --ids 5,x --out " + dir_ + "/x.npy"),
                       "--ids: 'x' is not a token id");
  expect_clean_failure(run("logits --model " + dir_ + "/nowhere --ids 1 --out " + dir_ + "/x.npy"),
                       dir_ + "/nowhere/config.json");
  expect_clean_failure(run("generate --model " + model_ + " --ids 1 --temperature -2"),
                       "temperature must be a finite number >= 0");
  std::filesystem::resize_file(model_ + "/model.safetensors", 20);
  expect_clean_failure(run("logits --model " + model_ + " --ids 1 --out " + dir_ + "/x.npy"), "model.safetensors");
}

// Tests of what a new user meets first (issue 23): --version, suggestions, defaults in --help, timings, fresh seeds,
// the default model, and small output fixes.

TEST_F(Cli, VersionNamesTheVersionCommitAndCudaSide) {
  const Outcome r = run("--version");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, MatchesRegex("plumb [0-9]+\\.[0-9]+\\.[0-9]+\ncommit ([0-9a-f]{12}(-dirty)?|unknown)\n"
                                  "cuda backend: (not built|built for sm_)[^\n]*\n(gpu[^\n]*\n)*"));
#ifdef PLUMB_HAVE_CUDA
  EXPECT_THAT(r.out, HasSubstr("runtime "));
#else
  EXPECT_THAT(r.out, HasSubstr("cuda backend: not built"));
#endif
}

TEST_F(Cli, MistypedCommandsAndFlagsGetTheClosestMatch) {
  Outcome r = run("generat --model " + model_);
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.err, "plumb: error: unknown command 'generat'; did you mean 'generate'?\n");
  r = run("generate --model " + model_ + " --ids 1 --max-token 3");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.err, "plumb: error: generate: unknown option '--max-token'; did you mean '--max-tokens'?\n");
  r = run("generate --model " + model_ + " --ids 1 --tempreature=1");
  EXPECT_THAT(r.err, HasSubstr("unknown option '--tempreature'; did you mean '--temperature'?"));
  r = run("--versio");
  EXPECT_EQ(r.err, "plumb: error: unknown option '--versio'; did you mean '--version'?\n");
  // Nothing close: CLI11's own message.
  r = run("zzzzzzzz");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, Not(HasSubstr("did you mean")));
}

TEST_F(Cli, HelpShowsEveryDefault) {
  const Outcome gen = run("generate --help");
  ASSERT_EQ(gen.status, 0) << gen.err;
  for (const char* shown : {"--max-tokens INT=32", "--temperature FLOAT=0", "--top-p FLOAT=1", "--device TEXT=cpu",
                            "--seed UINT=random", "$PLUMB_MODEL"})
    EXPECT_THAT(gen.out, HasSubstr(shown));
  const Outcome serve = run("serve --help");
  for (const char* shown : {"--port UINT=8000", "--host TEXT=127.0.0.1", "--max-batch INT=32", "--log-format TEXT=text",
                            "--log-interval FLOAT=5"})
    EXPECT_THAT(serve.out, HasSubstr(shown));
  EXPECT_THAT(run("inspect --help").out, HasSubstr("--context INT=the model's max_position_embeddings"));
  const Outcome chat = run("chat --help");
  for (const char* shown : {"--max-tokens INT=512", "--temperature FLOAT=0.8", "--top-p FLOAT=0.9",
                            "--repetition-penalty FLOAT=1.1", "--seed UINT=random", "--system TEXT", "$PLUMB_MODEL"})
    EXPECT_THAT(chat.out, HasSubstr(shown));
}

TEST_F(Cli, GenerateReportsTimingsOnStderrUnlessQuiet) {
  const std::string args = "generate --model " + model_ + " --ids 3,4,5 --max-tokens 4 --ignore-eos --print-ids";
  const Outcome r = run(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, MatchesRegex("plumb: read shard 1/1 \\(model.safetensors\\), [^\n]+\n"
                                  "plumb: load [0-9.]+ ms\n"
                                  "plumb: prompt 3 tokens in [0-9.]+ ms, [0-9.]+ tokens/s; time to first token [0-9.]+ "
                                  "ms\nplumb: generated 4 tokens; 3 decode steps in [0-9.]+ ms, [0-9.]+ tokens/s\n"));
  const Outcome quiet = run(args + " --quiet");
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, r.out);
}

// The seed --verbose reports, from "plumb: seed N (...)".
std::string reported_seed(const std::string& err) {
  const size_t at = err.find("plumb: seed ");
  if (at == std::string::npos) return "";
  const size_t begin = at + std::string("plumb: seed ").size();
  return err.substr(begin, err.find(' ', begin) - begin);
}

TEST_F(Cli, UnseededSamplingDiffersAndTheReportedSeedReproducesIt) {
  const std::string args = "generate --model " + model_ + " --ids 3,4 --max-tokens 12 --ignore-eos --print-ids " +
                           "--temperature 1.5 --verbose";
  const Outcome a = run(args), b = run(args);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  const std::string seed_a = reported_seed(a.err), seed_b = reported_seed(b.err);
  ASSERT_THAT(seed_a, MatchesRegex("[0-9]+"));
  EXPECT_NE(seed_a, seed_b);
  EXPECT_NE(a.out, b.out) << "two unseeded sampled runs gave the same ids";
  const Outcome again = run(args + " --seed " + seed_a);
  EXPECT_EQ(again.out, a.out);
  EXPECT_EQ(reported_seed(again.err), seed_a);
}

TEST_F(Cli, GenerateUsesPlumbModelOrModelsDefaultWhenNoModelIsGiven) {
  const std::string args = "generate --ids 3,4 --max-tokens 3 --print-ids";
  const Outcome named = run(args + " --model " + model_);
  const Outcome from_env = run_after("PLUMB_MODEL=" + model_ + " ", args);
  ASSERT_EQ(from_env.status, 0) << from_env.err;
  EXPECT_EQ(from_env.out, named.out);
  EXPECT_THAT(from_env.err, HasSubstr("plumb: no --model given; using " + model_ + " (from PLUMB_MODEL)\n"));
  std::filesystem::create_directories(dir_ + "/cwd/models");
  std::filesystem::create_directory_symlink(model_, dir_ + "/cwd/models/default");
  const Outcome from_cwd = run_after("cd " + dir_ + "/cwd && env -u PLUMB_MODEL ", args);
  ASSERT_EQ(from_cwd.status, 0) << from_cwd.err;
  EXPECT_EQ(from_cwd.out, named.out);
  EXPECT_THAT(from_cwd.err, HasSubstr("plumb: no --model given; using models/default\n"));
  expect_clean_failure(run_after("cd " + dir_ + " && env -u PLUMB_MODEL ", args),
                       "no --model given and models/default");
}

TEST_F(Cli, InspectReportsTheModelsOwnContext) {
  nlohmann::json config = test::small_qwen3_next_config();
  config["max_position_embeddings"] = 1000;
  test::write_model_folder(dir_ + "/long", config, test::synthetic_tensors(config, 9));
  const Outcome r = run("inspect --model " + dir_ + "/long");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("context      1000 tokens (max_position_embeddings)\n"));
  EXPECT_THAT(r.out, HasSubstr("bytes one decode step moves at batch 1, context 1000\n"));
  EXPECT_THAT(run("inspect --model " + dir_ + "/long --context 7").out, HasSubstr("at batch 1, context 7\n"));
}

TEST_F(Cli, DetokenizeEndsItsOutputWithANewline) {
  const std::string tok = test::source_dir() + "/models/default";
  const Outcome ids = run("tokenize --tokenizer " + tok + " --text 'In the beginning'");
  ASSERT_EQ(ids.status, 0) << ids.err;
  std::string list = ids.out.substr(0, ids.out.size() - 1);
  std::replace(list.begin(), list.end(), ' ', ',');
  EXPECT_EQ(run("detokenize --tokenizer " + tok + " --ids " + list).out, "In the beginning\n");
}

// --tensor-parallel's limits, refused before the model loads; a split the model's heads do not allow, by its heads.
// (tests/server/e2e.mjs serves a split model to a real client.)
TEST_F(Cli, TensorParallelSplitsTheModelRefusesWhatItCannotSplit) {
  const std::string serve = "serve --model " + model_ + " --port 0 ";
  expect_clean_failure(run(serve + "--tensor-parallel 2 --device cuda"),
                       "--tensor-parallel 2 --device cuda: ranks run on the CPU for now");
  expect_clean_failure(run(serve + "--tensor-parallel 0"), "--tensor-parallel must be in 1..64, got 0");
  expect_clean_failure(run(serve + "--tensor-parallel 2 --tp-reduction slow"),
                       "--tp-reduction must be exact or fast, got 'slow'");
  expect_clean_failure(run(serve + "--tensor-parallel 2 --prefix-cache-stride 100"),
                       "--prefix-cache-stride 100: the stride must be a positive multiple of 64 tokens");
  expect_clean_failure(run("serve --model " + test::source_dir() + "/models/default --port 0 --tensor-parallel 3"),
                       "attention query heads do not split evenly over 3 ranks");
}

// Issue 24's limits: each refused up front with one line, where the old code hung, crashed or reserved memory.
TEST_F(Cli, MaxTokensBeyondTheContextIsRefusedBeforeAnyReservation) {
  // 10^9 tokens reserved KV pages for all of them up front (std::bad_alloc); the context caps them now.
  expect_clean_failure(run("generate --model " + model_ + " --ids 3,4 --max-tokens 1000000000"),
                       "max tokens 1000000000 after a prompt of 2 tokens exceeds the model's context");
}

TEST_F(Cli, SeedsOutsideUint64AreRefused) {
  // CLI11 alone turns all three into 2^64 - 1.
  for (const char* seed : {"-1", "18446744073709551616", "36893488147419103232", "x"}) {
    const Outcome r = run("generate --model " + model_ + " --ids 3,4 --max-tokens 2 --temperature 1 --seed " + seed);
    EXPECT_NE(r.status, 0) << seed;
    EXPECT_THAT(r.err, HasSubstr("is not a seed: expected an integer from 0 to 18446744073709551615")) << seed;
  }
  EXPECT_EQ(run("generate --model " + model_ + " --ids 3,4 --max-tokens 2 --seed 18446744073709551615").status, 0);
}

TEST_F(Cli, TinyTemperaturesSampleTheGreedyAnswer) {
  // Dividing the logits by 1e-38 first overflowed to inf - inf = NaN probabilities and arbitrary tokens.
  const std::string args = "generate --model " + model_ + " --ids 3,4 --max-tokens 6 --print-ids";
  const Outcome greedy = run(args);
  ASSERT_EQ(greedy.status, 0) << greedy.err;
  for (const char* t : {"1e-38", "1e-40", "1e-45"}) {
    const Outcome tiny = run(args + " --temperature " + t + " --seed 7");
    ASSERT_EQ(tiny.status, 0) << tiny.err;
    EXPECT_EQ(tiny.out, greedy.out) << "temperature " << t;
  }
}

TEST_F(Cli, NonRegularFilesAreRefusedWithoutBlocking) {
  // A FIFO blocked open() until a writer came: `plumb inspect` hung for ever. timeout(1) turns a hang into 124.
  for (const char* file : {"config.json", "model.safetensors"}) {
    const std::string fifo_dir = dir_ + "/fifo-" + file;
    std::filesystem::copy(model_, fifo_dir);
    std::filesystem::remove(fifo_dir + "/" + file);
    ASSERT_EQ(::mkfifo((fifo_dir + "/" + file).c_str(), 0600), 0);
    const Outcome r = plumb("inspect --model " + fifo_dir, dir_, "timeout 60 ");
    expect_clean_failure(r, fifo_dir + "/" + file + ": it is not a regular file");
  }
}

TEST_F(Cli, ConfigValuesOutOfRangeAreRefused) {
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"max_position_embeddings must be positive, got 0", {{"max_position_embeddings", 0}}},
      {"max_position_embeddings must be positive, got -1", {{"max_position_embeddings", -1}}},
      {"rope_theta must be a finite positive number, got 0", {{"rope_theta", 0}}},
      {"rope_theta must be a finite positive number, got -5", {{"rope_theta", -5}}},
      {"partial_rotary_factor must be in (0, 1], got 0", {{"partial_rotary_factor", 0}}},
      {"rms_norm_eps must be a finite positive number", {{"rms_norm_eps", 0}}}};
  for (const auto& [message, patch] : cases) {
    nlohmann::json config = test::small_qwen3_next_config();
    config.merge_patch(patch);
    test::write_model_folder(model_, config, test::synthetic_tensors(test::small_qwen3_next_config(), 9));
    expect_clean_failure(run("inspect --model " + model_), message);
    expect_clean_failure(run("generate --model " + model_ + " --ids 1"), message);
  }
}

TEST_F(Cli, CheckWeightsFindsNonFiniteWeights) {
  std::vector<test::NamedTensor> tensors = test::synthetic_tensors(test::small_qwen3_next_config(), 9);
  test::NamedTensor& poisoned = tensors.at(tensors.size() / 2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(poisoned.bytes.data() + 2 * sizeof(float), &nan, sizeof nan);
  test::write_model_folder(model_, test::small_qwen3_next_config(), tensors);
  const std::string args = "generate --model " + model_ + " --ids 3,4 --max-tokens 2 --print-ids";
  EXPECT_EQ(run(args).status, 0);  // unchecked, the NaN is not noticed
  expect_clean_failure(run(args + " --check-weights"),
                       "tensor '" + poisoned.name + "' holds nan at element 2 (found by --check-weights)");
}

TEST_F(Cli, DeepConversationIsRefused) {
  // 20,000 nested '[' in a tool's parameters overflowed the stack (rc 139).
  const std::string deep = std::string(20000, '[') + std::string(20000, ']');
  std::ofstream(dir_ + "/conversation.json")
      << R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": )"
      << R"({"name": "f", "parameters": )" << deep << "}}]}";
  expect_clean_failure(
      run("render --tokenizer " + test::source_dir() + "/models/default --conversation " + dir_ + "/conversation.json"),
      "conversation.json line 1: JSON nests deeper than 256 levels (the limit)");
}

TEST_F(Cli, AMemoryUtilizationOutsideZeroToOneIsRefusedBeforeTheLoad) {
  for (const char* value : {"0", "1.5", "-0.2"}) {
    const Outcome r =
        run("serve --model " + test::source_dir() + "/models/default --port 0 --gpu-memory-utilization " + value);
    expect_clean_failure(r, "--gpu-memory-utilization must be in (0, 1], got ");
  }
}

TEST_F(Cli, ANegativePrefixCacheSizeIsRefusedNotTakenAsTheDefault) {
  for (const char* value : {"-1", "-0.5", "nan"}) {
    const Outcome r =
        run("serve --model " + test::source_dir() + "/models/default --port 0 --prefix-cache-gib " + value);
    expect_clean_failure(r, "--prefix-cache-gib must be a finite number of GiB, 0 or more, got ");
  }
}

TEST_F(Cli, ABenchDrawNoBackendTakesIsRefusedByItsFlag) {
  expect_clean_failure(run("bench --device cpu --synthetic --model tiny --temperature -1"),
                       "--temperature must be 0 or a finite positive number, got -1");
  expect_clean_failure(run("bench --device cpu --synthetic --model tiny --top-k -3"), "--top-k must not be negative");
  expect_clean_failure(run("bench --device cpu --synthetic --model tiny --top-p 1.5"), "--top-p must be in (0, 1]");
}

// plumb bench --speculative-tokens times drafting, verifying steps beside plain ones, at the acceptance length asked
// (capped at k + 1), and writes them to its JSON; a count past 8 or a length below 1 is refused by its flag.
// A --json that cannot be written is refused before the run, not after it, when its figures would be lost.
TEST_F(Cli, BenchRefusesAnUnwritableJsonBeforeRunning) {
  const Outcome r = run("bench --device cpu --synthetic --model tiny --json " + dir_ + "/no-such-folder/bench.json");
  expect_clean_failure(r, "--json " + dir_ + "/no-such-folder/bench.json: cannot write to it");
  EXPECT_THAT(r.out, Not(HasSubstr("decode step"))) << "nothing was timed";
}

TEST_F(Cli, BenchTimesSpeculativeStepsAtTheAcceptanceAsked) {
  const std::string json_path = dir_ + "/bench.json";
  const Outcome r =
      run("bench --device cpu --synthetic --model tiny --batches 1,2 --prefill 16 --steps 4 --warmup 1 "
          "--speculative-tokens 1,3 --acceptance-length 2.5 --draft-vocab 64 --json " +
          json_path);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("speculative step  B=2, k=3, accept 2.50"));
  EXPECT_THAT(r.out, HasSubstr("  drafts < 64     B=2, k=3, accept 2.50"));
  std::ifstream file(json_path);
  const nlohmann::json j = nlohmann::json::parse(file);
  ASSERT_EQ(j["speculative"].size(), 4u);
  for (const nlohmann::json& row : j["speculative"]) {
    const int64_t k = row["speculative_tokens"];
    EXPECT_EQ(row["acceptance_length"], std::min(2.5, static_cast<double>(k + 1)));
    EXPECT_EQ(row["drafted"], k * row["verify_steps"].get<int64_t>()) << "every step drafts k";
    EXPECT_GE(row["tokens_per_step"].get<double>(), 2.0);
    EXPECT_LE(row["tokens_per_step"].get<double>(), std::min(3.0, static_cast<double>(k + 1)));
    EXPECT_GT(row["speedup"].get<double>(), 0.0);
    EXPECT_EQ(row["draft_vocab"]["ids"], 64);
    EXPECT_EQ(row["draft_vocab"]["drafted"], row["drafted"]) << "the same steps, drafting among 64 ids";
  }
  expect_clean_failure(run("bench --device cpu --synthetic --model tiny --speculative-tokens 9"),
                       "--speculative-tokens: 9 is above 8");
  expect_clean_failure(
      run("bench --device cpu --synthetic --model tiny --speculative-tokens 2 --acceptance-length 0.5"),
      "--acceptance-length must be at least 1, got 0.5");
  expect_clean_failure(run("bench --device cpu --synthetic --model tiny --draft-vocab 64"),
                       "--draft-vocab needs --speculative-tokens K");
}

// plumb bench --constrained times the runner's draws with allowed tokens, which only a GPU runner makes; its folder's
// tokenizer is read before the device is even opened, so a folder without one fails first.
TEST_F(Cli, BenchRefusesAConstrainedRunItCannotMake) {
  const std::string tokenizer = test::source_dir() + "/models/default";
  expect_clean_failure(run("bench --device cpu --synthetic --model tiny --constrained " + tokenizer),
                       "--constrained times the runner's own draws with allowed tokens, which only a GPU runner makes");
  const Outcome r = run("bench --device cuda --synthetic --model tiny --constrained " + dir_ + "/no-such-folder");
  expect_clean_failure(r, "no-such-folder");
  EXPECT_THAT(r.err, HasSubstr("tokenizer"));
}

TEST_F(Cli, KvCacheBeyondMemoryIsRefusedWithWhatFits) {
  const Outcome r = run("serve --model " + test::source_dir() + "/models/default --port 0 --kv-cache-gib 100000");
  expect_clean_failure(r, "--kv-cache-gib 100000: ");
  EXPECT_THAT(r.err, HasSubstr("do not fit"));
}

// Issue 23's `plumb chat` with stdin piped (the plain mode; tests/cli/chat_tty_test.sh drives the terminal mode) and
// the loading progress printed off a terminal.

// Each "plumb: prompt N tokens" count of the timings in `err`.
std::vector<int> prompt_counts(const std::string& err) {
  std::vector<int> counts;
  const std::string key = "plumb: prompt ";
  for (size_t at = err.find(key); at != std::string::npos; at = err.find(key, at + 1))
    counts.push_back(std::stoi(err.substr(at + key.size())));
  return counts;
}

TEST_F(Cli, ChatPlainModeKeepsTheConversationResetsAndExits) {
  const std::string model = test::source_dir() + "/models/default";
  const std::string first = "Tell me a fortune.", second = "And another.";
  std::ofstream(dir_ + "/in.txt") << first << "\n\n"
                                  << second << "\n/reset\n"
                                  << first << "\n/exit\n"
                                  << second << "\n";
  const Outcome chat =
      run("chat --model " + model + " --temperature 0 --repetition-penalty 1 --max-tokens 12 < " + dir_ + "/in.txt");
  ASSERT_EQ(chat.status, 0) << chat.err;
  EXPECT_EQ(chat.out.find('\x1b'), std::string::npos) << "escapes in plain mode";

  // What the answers must be: greedy generation on the conversation as the template renders it.
  const Outcome one = run("generate --model " + model + " --max-tokens 12 --quiet --chat " + shell_quote(first));
  const Outcome one_ids =
      run("generate --model " + model + " --max-tokens 12 --quiet --print-ids --chat " + shell_quote(first));
  ASSERT_EQ(one.status, 0) << one.err;
  const std::string answer = one.out.substr(0, one.out.size() - 1);
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", first}},
                                           {{"role", "assistant"}, {"content", answer}},
                                           {{"role", "user"}, {"content", second}}};
  const std::string conversation = tokenizer::render_chat(tokenizer::ChatTemplate::from_dir(model),
                                                          {{"messages", messages}, {"add_generation_prompt", true}});
  const Outcome two =
      run("generate --model " + model + " --max-tokens 12 --quiet --prompt " + shell_quote(conversation));
  ASSERT_EQ(two.status, 0) << two.err;
  // The second answer follows the first; /reset starts over, so the third is the first again; /exit ends the chat.
  EXPECT_EQ(chat.out, one.out + two.out + one.out);

  // Timings after each answer. The second turn runs only the ids past those the first left in the model's state
  // when the re-rendered conversation starts with them (the answer's text re-encodes to the ids drawn).
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(model);
  const std::vector<int32_t> drawn = [&] {
    std::vector<int32_t> ids;
    std::istringstream in(one_ids.out);
    for (int32_t id; in >> id;) ids.push_back(id);
    return ids;
  }();
  const size_t prompt_one =
      tok.encode(tokenizer::render_chat(tokenizer::ChatTemplate::from_dir(model),
                                        {{"messages", {messages[0]}}, {"add_generation_prompt", true}}))
          .size();
  const size_t full_two = tok.encode(conversation).size();
  // A first answer cut at --max-tokens leaves its last id unprocessed.
  const size_t processed = prompt_one + drawn.size() - (drawn.size() == 12 ? 1 : 0);
  const bool reusable = tok.encode(answer) == drawn;
  EXPECT_EQ(prompt_counts(chat.err), (std::vector<int>{static_cast<int>(prompt_one),
                                                       static_cast<int>(reusable ? full_two - processed : full_two),
                                                       static_cast<int>(prompt_one)}))
      << "the answer's ids re-encode " << (reusable ? "alike" : "differently") << "\n"
      << chat.err;
  EXPECT_THAT(chat.err, HasSubstr("plumb: the conversation starts over\n"));

  const Outcome quiet = run("chat --model " + model +
                            " --temperature 0 --repetition-penalty 1 --max-tokens 12 --quiet < " + dir_ + "/in.txt");
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, chat.out);
}

// models/default's weights and tokenizer with tools/tiny_chat_template.jinja, which opens a <think> block after a
// question, as Qwen3.5's templates do.
std::string thinking_model(const std::string& dir) {
  const std::string model = dir + "/thinking", source = test::source_dir();
  std::filesystem::create_directories(model);
  for (const char* file :
       {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::create_symlink(source + "/models/default/" + file, model + "/" + file);
  std::filesystem::copy_file(source + "/tools/tiny_chat_template.jinja", model + "/chat_template.jinja");
  return model;
}

// A chat with --speculative-tokens answers every turn as one without it, sampled: each turn after the first goes on
// from the state the last left (its head's cache included). The model is the chat fixture's shapes, tokenizer and
// template with random weights and an MTP head.
TEST_F(Cli, ChatWithSpeculativeTokensGivesTheSameAnswers) {
  const std::string fixture = test::fixtures_dir() + "/models/qwen3_next_chat", model = dir_ + "/chat-with-head";
  nlohmann::json config = nlohmann::json::parse(std::ifstream(fixture + "/config.json"));
  config["mtp_num_hidden_layers"] = 1;
  test::write_model_folder(model, config, test::synthetic_tensors(config, 12));
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    std::filesystem::copy_file(fixture + "/" + file, model + "/" + file);
  std::ofstream(dir_ + "/in.txt") << "Tell me a fortune.\nAnd another.\nOne more, please.\n";
  const std::string chat = "chat --model " + model + " --temperature 0.8 --seed 9 --max-tokens 20";
  const Outcome plain = run(chat + " < " + dir_ + "/in.txt");
  ASSERT_EQ(plain.status, 0) << plain.err;
  const Outcome speculative = run(chat + " --speculative-tokens 3 < " + dir_ + "/in.txt");
  ASSERT_EQ(speculative.status, 0) << speculative.err;
  EXPECT_EQ(speculative.out, plain.out);
  // Every turn drafted: the head's cache came through from the turn before.
  size_t reports = 0;
  for (size_t at = 0; (at = speculative.err.find("plumb: speculative decoding: ", at)) != std::string::npos; ++at)
    ++reports;
  EXPECT_EQ(reports, 3u) << speculative.err;
}

TEST_F(Cli, ChatPlainModeWritesTheReasoningToStderrApartFromTheAnswer) {
  const std::string model = thinking_model(dir_);
  std::ofstream(dir_ + "/in.txt") << "Why?\n";
  const Outcome chat = run("chat --model " + model +
                           " --temperature 0 --repetition-penalty 1 --max-tokens 12 --quiet < " + dir_ + "/in.txt");
  ASSERT_EQ(chat.status, 0) << chat.err;
  EXPECT_EQ(chat.out, "\n") << "every token was reasoning: the answer is empty";
  // The reasoning is what greedy generation writes after the prompt, less the newlines right after <think>.
  const std::string prompt = tokenizer::render_chat(
      tokenizer::ChatTemplate::from_dir(model),
      {{"messages", {{{"role", "user"}, {"content", "Why?"}}}}, {"add_generation_prompt", true}});
  ASSERT_TRUE(prompt.ends_with("<think>\n")) << prompt;
  const Outcome thought = run("generate --model " + model + " --max-tokens 12 --quiet --prompt " + shell_quote(prompt));
  ASSERT_EQ(thought.status, 0) << thought.err;
  EXPECT_EQ(chat.err, thought.out.substr(thought.out.find_first_not_of('\n')));
  EXPECT_EQ(chat.err.find('\x1b'), std::string::npos) << "escapes in plain mode";
}

TEST_F(Cli, ChatPlainModeEndsAtAFailedTurnWithOneLine) {
  const std::string model = test::source_dir() + "/models/default";
  // 5000 words: more tokens than the default model's context.
  std::string words;
  for (int i = 0; i < 5000; ++i) words += " x";
  std::ofstream(dir_ + "/in.txt") << "/nonsense\n/system Be brief.\n" << words << "\nNot read.\n";
  const Outcome r = run("chat --model " + model + " --quiet < " + dir_ + "/in.txt");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("plumb: unknown command /nonsense: /reset starts over"));
  EXPECT_THAT(r.err, HasSubstr("plumb: error: the conversation is "));
  EXPECT_THAT(r.err, HasSubstr("fills the model's context of 4096 tokens: /reset starts over\n"));
}

TEST_F(Cli, LoadingPrintsALinePerShardOffATerminalThenTheLoadTime) {
  const std::string args = "generate --model " + model_ + " --ids 3,4 --max-tokens 1 --print-ids";
  const Outcome r = run(args);
  ASSERT_EQ(r.status, 0) << r.err;
  // The synthetic model: one checkpoint file, every byte of it read.
  EXPECT_THAT(r.err, MatchesRegex("plumb: read shard 1/1 \\(model.safetensors\\), [0-9.]+ KiB of [0-9.]+ KiB\n"
                                  "plumb: load [0-9.]+ ms\n(.|\n)*"));
  const std::string shard_line = r.err.substr(0, r.err.find('\n'));
  const size_t of = shard_line.find(" of ");
  EXPECT_EQ(shard_line.substr(shard_line.find("), ") + 3, of - shard_line.find("), ") - 3), shard_line.substr(of + 4))
      << "bytes read differ from the total";
  EXPECT_EQ(run(args + " --quiet").err, "");
}

}  // namespace
}  // namespace plumb
