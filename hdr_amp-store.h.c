#include "amp-store.h"
