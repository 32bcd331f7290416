// The OpenCL plugin's PTX rewrite for the sm_90a target (Programs::Retarget::sm_90a): NVIDIA's
// OpenCL compiler emits PTX for sm_90 on a compute capability 9.0 device, whose assembler refuses
// the instructions only sm_90a has (wgmma). A kernel built for that rewrite writes those
// instructions as PTX comments marked "//@" (../common/nvidia/gemm_wgmma.cl's TK_WGMMA_COMMENTED);
// this takes the PTX the driver returned for it and gives the PTX to build as the program's binary.
#pragma once

#include <string>

namespace tessera::opencl {

// |ptx| with every "//@" mark removed (the marked comments become instructions) and its one
// ".target sm_90" line naming sm_90a (what follows the name, such as ", texmode_independent",
// kept). Throws BackendError, naming |what|, unless |ptx| has exactly one .target line, for sm_90,
// and at least one mark.
std::string ptx_for_sm_90a(std::string ptx, const std::string& what);

}  // namespace tessera::opencl
