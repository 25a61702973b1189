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
  // matrix products
  kLinearDropsLastKTile,   // skips the last tile of the reduction
  kExpertsDropLastExpert,  // leaves out each token's last routed expert
  // Gated DeltaNet
  kConvIgnoresState,          // reads zeros instead of the conv state
  kGdnGateSign,               // decays by exp(-g) instead of exp(g)
  kGdnChunkBoundaryOffByOne,  // chunked prefill: the last token of a chunk is attributed to the next chunk
  kGdnMissingBarrier,         // drops a __syncthreads between writing and reading shared state
  // attention
  kRotaryWrongPairing,       // rotates adjacent pairs instead of halves
  kAttentionCausalOffByOne,  // lets each query see one key past its position
  kAttentionMissingBarrier,  // drops a __syncthreads around the shared K/V tile
};

}  // namespace plumb::cuda
