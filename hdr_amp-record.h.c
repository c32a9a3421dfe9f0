#include "amp-record.h"
