// The schema corpus walked: for every schema of a corpus file and every test vocabulary, random constrained walks
// (walk.h) from a few seeds, written as [{schema, vocabulary, seed, text, complete}] for validate.mjs to check with
// ajv. At every step the mask made from the precomputed contexts must equal the plain walk of the whole trie, and a
// grammar whose contexts were all precomputed must never compute one late. Exits 1 if a schema fails to compile, a
// walk does not end or a mask disagrees.
//   grammar_walks SCHEMAS.json OUT.json
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grammar/cache.h"
#include "walk.h"

namespace {

int disagreements = 0;

void masks_agree(const plumb::grammar::Matcher& matcher) {
  const plumb::grammar::CompiledGrammar& g = matcher.compiled();
  if (g.context_mask(matcher.stacks()) != g.reference_mask(matcher.stacks())) ++disagreements;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: grammar_walks SCHEMAS.json OUT.json\n");
    return 2;
  }
  constexpr uint64_t kSeeds = 4;
  constexpr int64_t kMaxTokens = 2000;
  const auto schemas = nlohmann::ordered_json::parse(std::ifstream(argv[1]));
  nlohmann::json out = nlohmann::json::array();
  int failures = 0;
  for (const plumb::test::TestVocabulary& tv : plumb::test::test_vocabularies()) {
    plumb::grammar::GrammarCache cache(tv.vocabulary);
    for (size_t i = 0; i < schemas.size(); ++i) {
      std::shared_ptr<const plumb::grammar::CompiledGrammar> grammar;
      try {
        grammar = cache.json_schema(schemas[i]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "schema %zu: %s\n", i, e.what());
        ++failures;
        continue;
      }
      for (uint64_t seed = 0; seed < kSeeds; ++seed) {
        const int before = disagreements;
        const plumb::test::Walk walk = plumb::test::random_walk(grammar, seed * 1000 + i, kMaxTokens, masks_agree);
        if (disagreements != before) {
          std::fprintf(stderr, "schema %zu, %s, seed %llu: %d masks differ from the reference\n", i, tv.name.c_str(),
                       static_cast<unsigned long long>(seed), disagreements - before);
          ++failures;
        }
        if (!walk.complete) {
          std::fprintf(stderr, "schema %zu, %s, seed %llu: the walk did not end after %zu tokens\n", i, tv.name.c_str(),
                       static_cast<unsigned long long>(seed), walk.tokens.size());
          ++failures;
        }
        out.push_back(
            {{"schema", i}, {"vocabulary", tv.name}, {"seed", seed}, {"text", walk.text}, {"complete", walk.complete}});
      }
      if (grammar->all_contexts_precomputed() && grammar->late_contexts() != 0) {
        std::fprintf(stderr, "schema %zu, %s: %zu contexts computed late though all were precomputed\n", i,
                     tv.name.c_str(), grammar->late_contexts());
        ++failures;
      }
    }
  }
  std::ofstream(argv[2]) << out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  std::printf("grammar_walks: %zu walks over %zu schemas, %d failures\n", out.size(), schemas.size(), failures);
  return failures == 0 ? 0 : 1;
}
