// Everything an application needs: tensors, ops, devices and the runtime.
#pragma once

#include "tessera/device.h"
#include "tessera/errors.h"
#include "tessera/half.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"
