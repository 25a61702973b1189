// Deliberately wrong kernel variants: the op harness's planted controls. Each names one bug a kernel of that family
// could plausibly have; the harness runs every one and fails if any passes its check. Production code launches
// kNone, and each kernel takes the fault as a template parameter so that the production instantiation is the code
// that was checked, unchanged by the existence of its faulty twins.
//
// The faulty twins are compiled only where PLUMB_PLANTED_FAULTS is 1: the kernels library the op harness links
// (plumb_cuda_kernels_planted, through plumb_backend_cuda_planted). The library plumb and the benchmarks link
// (plumb_cuda_kernels) is compiled from the same sources with it 0, so dispatch_fault instantiates kNone alone and no
// planted kernel is in the binary a user runs (ctest no_planted_faults_in_plumb checks its symbols).
#pragma once

#include <type_traits>

// The one list of planted faults, X(name) each: the enum below, the harness's list of every fault and their names
// are generated from it, so a fault added here without a registered control fails the harness's registry test.
#define PLUMB_KERNEL_FAULTS(X)                                                                                         \
  /* elementwise and norms */                                                                                          \
  X(kEmbeddingRowOffByOne) /* gathers row id + 1 */                                                                    \
  X(kRmsNormSkipsWeight)   /* forgets the (1 + w) factor */                                                            \
  X(kAddRmsNormKeepsX)     /* the residual step normalizes x + r but leaves x as it was */                             \
  X(kGatedNormGateSign)    /* SiLU(-z) instead of SiLU(z) */                                                           \
  X(kRouteTiesToHigher)    /* breaks router ties to the higher expert id */                                            \
  /* slices, elementwise gates and adds, the random fill */                                                            \
  X(kSliceColumnsOneLate)          /* starts every row's slice one column late */                                      \
  X(kElementwiseDropsTail)         /* mul_sigmoid, silu_mul, add: the scalar tail after the vectors stops one short */ \
  X(kSiluMulActivatesUp)           /* SiLU(up) ⊙ gate instead of SiLU(gate) ⊙ up */                                \
  X(kMulSigmoidRowsGateSign)       /* scales row r by sigmoid(-gate[r]) */                                             \
  X(kRandomUniformCounterOffByOne) /* hashes element index + 1 */                                                      \
  X(kCopyRegionsDropsTail)         /* copy_all: each region stops one unit (16 bytes, or a byte) short */              \
  /* sampling */                                                                                                       \
  X(kSampleTiesToHigher)   /* ranks equally likely tokens by descending id */                                          \
  X(kSampleTopPOneShort)   /* the nucleus stops one token before its weight reaches top_p */                           \
  X(kSampleIgnoresAllowed) /* draws from every token, leaving a row's allowed-token bits unread */                     \
  /* matrix products */                                                                                                \
  X(kLinearDropsLastKTile)      /* skips the last tile of the reduction */                                             \
  X(kLinearSplitFoldsReversed)  /* a split product adds its slices' partial sums last to first */                      \
  X(kLinearSplitDropsSlice)     /* a split product's fold leaves the last slice out */                                 \
  X(kLinearPartsSkipBoundary)   /* a product in parts leaves every later part's first feature unwritten */             \
  X(kExpertsDropLastExpert)     /* leaves out each token's last routed expert */                                       \
  X(kLinearFp8ScaleNextSlice)   /* FP8 weights: each slice's partial sums take the next slice's multipliers */         \
  X(kLinearNvfp4NibblesSwapped) /* NVFP4 weights: each byte's two codes read high nibble first */                      \
  X(kLinearNvfp4ScaleNextGroup) /* NVFP4 weights: each group of 16 k takes its neighbouring group's scale */           \
  /* matrix products: F32 weights, activation staging, the experts' grouping and SiLU */                               \
  X(kLinearF32DropsKRemainder)  /* F32 weights: the reduction runs whole groups of 8 k only, dropping k % 8 terms */   \
  X(kLinearToBf16Truncates)     /* staged activations truncated to BF16 instead of rounded to nearest even */          \
  X(kLinearSlotsNatural)        /* wgmma's activations in natural k order: each step sums the wrong 16 k */            \
  X(kExpertsGroupClampOffByOne) /* grouping clamps ids into [0, E - 1): the last expert's pairs join the one before */ \
  X(kExpertsSiluSigmoidOfUp)    /* act = gate · sigmoid(up) · up instead of gate · sigmoid(gate) · up */           \
  /* Gated DeltaNet */                                                                                                 \
  X(kConvIgnoresState)         /* reads zeros instead of the conv state */                                             \
  X(kGdnGateSign)              /* decays by exp(-g) instead of exp(g) */                                               \
  X(kGdnChunkBoundaryOffByOne) /* chunked prefill: the last token of a chunk is attributed to the next chunk */        \
  X(kGdnMissingBarrier)        /* drops a __syncthreads between writing and reading shared state */                    \
  X(kGdnTrailStale)            /* a verification's trail gets the state before its token's update, not after */        \
  /* attention */                                                                                                      \
  X(kRotaryWrongPairing)        /* rotates adjacent pairs instead of halves */                                         \
  X(kAttentionCausalOffByOne)   /* lets each query see one key past its position */                                    \
  X(kAttentionMissingBarrier)   /* drops a __syncthreads around the shared K/V tile */                                 \
  X(kAttentionPageTableIgnored) /* reads key block j from pool page j instead of the page table's page j */            \
  X(kAttentionSegmentsDropLast) /* a split tile's fold leaves its token's last segment out */                          \
  X(kKvWriteIgnoresPageTable)   /* the cache write puts position p in pool page p / 64 instead of the table's page */  \
  /* the residual step with a gated branch */                                                                          \
  X(kAddGatedBranchUngated) /* adds the branch without its sigmoid(gate) factor */

namespace plumb::cuda {

enum class KernelFault : int {
  kNone = 0,
#define PLUMB_KERNEL_FAULT_ENUMERATOR(name) name,
  PLUMB_KERNEL_FAULTS(PLUMB_KERNEL_FAULT_ENUMERATOR)
#undef PLUMB_KERNEL_FAULT_ENUMERATOR
};

// Turns the run-time fault into a kernel's template argument, the one place every kernel family makes that choice:
// calls launch(std::integral_constant<KernelFault, F>{}) with F = fault when it is one of the planted controls the
// kernel carries (kPlanted) and the planted kernels are compiled in, else with F = kNone.
template <KernelFault... kPlanted, class Launch>
void dispatch_fault(KernelFault fault, Launch&& launch) {
#if PLUMB_PLANTED_FAULTS
  const bool planted = ((fault == kPlanted && (launch(std::integral_constant<KernelFault, kPlanted>{}), true)) || ...);
  if (!planted) launch(std::integral_constant<KernelFault, KernelFault::kNone>{});
#else
  static_cast<void>(fault);
  launch(std::integral_constant<KernelFault, KernelFault::kNone>{});
#endif
}

// Whether the kernels library linked in carries the planted faults (plumb_cuda_kernels_planted), so that a control
// launched with a fault runs the faulty kernel rather than the production one. The op harness checks it first.
bool planted_faults_built();

}  // namespace plumb::cuda
