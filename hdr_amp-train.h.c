#include "amp-train.h"
