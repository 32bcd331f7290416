#include "ptx_retarget.h"

#include <string_view>

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera::opencl {

std::string ptx_for_sm_90a(std::string ptx, const std::string& what) {
  // The text up to a NUL, where the driver's binary has one.
  if (const auto nul = ptx.find('\0'); nul != std::string::npos) ptx.resize(nul);
  constexpr std::string_view kTarget = ".target ", kMark = "//@";
  std::string out;
  out.reserve(ptx.size() + 1);
  int targets = 0, sm_90 = 0, marks = 0;
  for (std::size_t at = 0; at < ptx.size();) {
    const std::string_view rest = std::string_view(ptx).substr(at);
    if (rest.starts_with(kMark)) {  // a marked instruction: the mark goes
      ++marks;
      at += kMark.size();
    } else if (rest.starts_with(kTarget)) {
      // The first target name: up to a comma or white space.
      ++targets;
      const std::string_view tail = rest.substr(kTarget.size());
      const std::string_view name = tail.substr(0, tail.find_first_of(", \t\r\n"));
      out.append(kTarget).append(name);
      if (name == "sm_90") {
        out.push_back('a');
        ++sm_90;
      }
      at += kTarget.size() + name.size();
    } else {
      out.push_back(ptx[at++]);
    }
  }
  if (targets != 1 || sm_90 != 1 || marks == 0)
    throw BackendError(fmt::format(
        "{}: the driver's PTX is not sm_90 PTX with instructions marked for sm_90a ({} .target "
        "line(s), {} for sm_90; {} mark(s)); the kernel needs a compute capability 9.0 device",
        what, targets, sm_90, marks));
  return out;
}

}  // namespace tessera::opencl
