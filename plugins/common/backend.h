// The backend shape both GPU plugins share: a list of owned devices and, when it is empty, why.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/backend.h"

namespace tessera::common {

// A backend that owns its devices and reports why it has none (the shape of both GPU plugins'
// backends): the constructor of the derived class fills devices_ and status_.
class OwningBackend : public Backend {
 public:
  std::vector<Device*> devices() override {
    std::vector<Device*> out;
    for (auto& d : devices_) out.push_back(d.get());
    return out;
  }
  std::string status() const override { return status_; }

 protected:
  std::vector<std::unique_ptr<Device>> devices_;
  std::string status_;
};

}  // namespace tessera::common
