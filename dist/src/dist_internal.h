// Helpers shared by the files of dist/src (not installed).
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/tensor.h"

namespace tessera::train {
class Module;
}

namespace tessera::dist {

// "tessera: rank R (host H) failed: WHAT; ending the job".
std::string failure_message(MpiProcessGroup& group, const std::exception& error);

// What must agree between ranks, one entry per line: the Tessera version and build, the device's
// plugin and type, each parameter and buffer (name, shape, dtype).
std::vector<std::string> fingerprint(train::Module& module, const Device& device);
// All-gathers |mine| and compares every rank's with rank 0's: DistributedError (on every rank)
// naming the ranks and hosts that differ and their first differing entry.
void check_fingerprints(MpiProcessGroup& group, const std::vector<std::string>& mine);

// Copies rank 0's |tensors| into every rank's (one broadcast of their bytes). Collective.
void broadcast_tensors(MpiProcessGroup& group, const std::vector<Tensor*>& tensors);

}  // namespace tessera::dist
