// The twin's stand-in for CANN's kernel_operator.h: the AscendC API subset ds-ops uses, on the CPU.
// Clean-room from the public AscendC API reference; see ascendc/twin/README.md for what is modeled.
#pragma once
#ifndef ASCENDC_TWIN
#define ASCENDC_TWIN 1
#endif
#include "twin/types.h"
#include "twin/model_910b.h"
#include "twin/convert.h"
#include "twin/core.h"
#include "twin/tensor.h"
#include "twin/sync.h"
#include "twin/datacopy.h"
#include "twin/vector.h"
#include "twin/reduce.h"
#include "twin/cube.h"
#include "twin/mix.h"
#include "twin/launch.h"
