// Everything of tessera::train (link Tessera::train).
#pragma once

#include "tessera/train/autograd.h"
#include "tessera/train/callbacks.h"
#include "tessera/train/checkpoint.h"
#include "tessera/train/clip_grad.h"
#include "tessera/train/data.h"
#include "tessera/train/init.h"
#include "tessera/train/layers.h"
#include "tessera/train/lr_scheduler.h"
#include "tessera/train/models.h"
#include "tessera/train/modules.h"
#include "tessera/train/optim.h"
#include "tessera/train/random.h"
#include "tessera/train/safetensors.h"
#include "tessera/train/serialize.h"
#include "tessera/train/trainer.h"
