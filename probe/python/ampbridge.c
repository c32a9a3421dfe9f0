/*
 * ampbridge.c — what libamprecord.so exports for the PyTorch bridge beside the record API: the
 * autocast policy of an op name, from libampcore's own lists (autocast.c), so that the bridge's
 * AMP_OPS rows name the policy exactly as libampcore's do (probe/python/ampprobe/_records.py).
 */
#include "amp.h"

// The policy name of a torch function or aten op name ("linear" -> "lower_precision_fp",
// "softmax" -> "fp32_set_opt_dtype", "__matmul__" -> "lower_precision_fp", "relu" -> "native").
const char *ampbridge_autocast_policy(const char *op);

const char *ampbridge_autocast_policy(const char *op) {
    return amp_cast_policy_name(amp_autocast_policy(op ? op : ""));
}
