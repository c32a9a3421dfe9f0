#include "amp.h"
