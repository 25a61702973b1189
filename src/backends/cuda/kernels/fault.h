// Deliberately wrong kernel variants: the op harness's planted controls. Each names one bug a kernel of that family
// could plausibly have; the harness runs every one and fails if any passes its check. Production code launches
// kNone, and each kernel takes the fault as a template parameter so that the production instantiation is the code
// that was checked, unchanged by the existence of its faulty twins.
#pragma once

namespace plumb::cuda {

enum class KernelFault : int {
  kNone = 0,
  // elementwise and norms
  kEmbeddingRowOffByOne,  // gathers row id + 1
  kRmsNormSkipsWeight,    // forgets the (1 + w) factor
  kGatedNormGateSign,     // SiLU(-z) instead of SiLU(z)
  kRouteTiesToHigher,     // breaks router ties to the higher expert id
  // slices, elementwise gates and adds, the random fill
  kSliceColumnsOneLate,           // starts every row's slice one column late
  kElementwiseDropsTail,          // mul_sigmoid, silu_mul, add: the scalar tail after the vectors stops one short
  kSiluMulActivatesUp,            // SiLU(up) ⊙ gate instead of SiLU(gate) ⊙ up
  kMulSigmoidRowsGateSign,        // scales row r by sigmoid(-gate[r])
  kRandomUniformCounterOffByOne,  // hashes element index + 1
  // sampling
  kSampleTiesToHigher,  // ranks equally likely tokens by descending id
  kSampleTopPOneShort,  // the nucleus stops one token before its weight reaches top_p
  // matrix products
  kLinearDropsLastKTile,   // skips the last tile of the reduction
  kExpertsDropLastExpert,  // leaves out each token's last routed expert
  // matrix products: F32 weights, activation staging, the experts' grouping and SiLU
  kLinearF32DropsKRemainder,   // F32 weights: the reduction runs whole groups of 8 k only, dropping k % 8 terms
  kLinearToBf16Truncates,      // staged activations truncated to BF16 instead of rounded to nearest even
  kExpertsGroupClampOffByOne,  // grouping clamps ids into [0, E - 1): the last expert's pairs join the one before
  kExpertsSiluSigmoidOfUp,     // act = gate · sigmoid(up) · up instead of gate · sigmoid(gate) · up
  // Gated DeltaNet
  kConvIgnoresState,          // reads zeros instead of the conv state
  kGdnGateSign,               // decays by exp(-g) instead of exp(g)
  kGdnChunkBoundaryOffByOne,  // chunked prefill: the last token of a chunk is attributed to the next chunk
  kGdnMissingBarrier,         // drops a __syncthreads between writing and reading shared state
  // attention
  kRotaryWrongPairing,         // rotates adjacent pairs instead of halves
  kAttentionCausalOffByOne,    // lets each query see one key past its position
  kAttentionMissingBarrier,    // drops a __syncthreads around the shared K/V tile
  kAttentionPageTableIgnored,  // reads key block j from pool page j instead of the page table's page j
  kKvWriteIgnoresPageTable,    // the cache write puts position p in pool page p / 64 instead of the table's page
};

}  // namespace plumb::cuda
