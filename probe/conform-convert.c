/*
 * conform-convert.c — conv_<name>_in_f32.bin against conv_<name>_f16_<tag>.bin and
 * conv_<name>_bf16_<tag>.bin (tag: where PyTorch converted, e.g. cuda): raw little-endian fp32
 * inputs and the fp16 / bf16 bit patterns PyTorch produced, element for element.
 * amp_f32_to_f16 / amp_f32_to_bf16 must match bit for bit; for a NaN input only the output's
 * NaN-ness is compared (payload and sign differ between CPU and CUDA). One case per output file,
 * and each tag has both: an f16 output without its bf16 sibling (or the reverse) fails as the
 * missing one.
 */
#include "conform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Splits conv_<base>_<f16|bf16>_<tag>.bin (tag without '_'); tag may be NULL. false for other
// names.
static bool parse_output_name(const char *name, char *base, size_t base_size, amp_dtype *dt,
                              char *tag_out, size_t tag_size) {
    size_t len = strlen(name);
    if (strncmp(name, "conv_", 5) != 0 || len < 9 || strcmp(name + len - 4, ".bin") != 0)
        return false;
    char stem[512];
    if (len - 4 >= sizeof stem) return false;
    memcpy(stem, name, len - 4);
    stem[len - 4] = '\0';
    char *tag = strrchr(stem, '_');
    if (!tag || tag - stem <= 5) return false;
    *tag = '\0';
    char *kind = strrchr(stem, '_');
    if (!kind || kind - stem < 5 || !tag[1]) return false;
    *kind++ = '\0';
    if (strcmp(kind, "f16") == 0)
        *dt = AMP_DTYPE_F16;
    else if (strcmp(kind, "bf16") == 0)
        *dt = AMP_DTYPE_BF16;
    else
        return false;
    if (!stem[5]) return false;
    snprintf(base, base_size, "%s", stem + 5);
    if (tag_out) snprintf(tag_out, tag_size, "%s", tag + 1);
    return true;
}

static void check_output(struct conform_run *r, const char *name, amp_dtype dt, const char *in_name,
                         const uint32_t *in, size_t n) {
    char what[640]; // (either file may be the one cut short)
    snprintf(what, sizeof what,
             "2 bytes for each of the %zu fp32 values of %s: one of the two files is cut short, or "
             "they do not belong together",
             n, in_name);
    uint16_t *want = conform_load(r, name, n * 2, what, NULL);
    if (!want) return;
    size_t differ = 0, first = 0, nans = 0;
    uint16_t first_got = 0;
    for (size_t i = 0; i < n; i++) {
        float x = conform_f32(in[i]);
        uint16_t got = dt == AMP_DTYPE_F16 ? amp_f32_to_f16(x) : amp_f32_to_bf16(x);
        bool nan_in = isnan(x);
        nans += nan_in;
        bool same = nan_in ? conform_is_nan_bits(dt, got) == conform_is_nan_bits(dt, want[i])
                           : got == want[i];
        if (!same && differ++ == 0) {
            first = i;
            first_got = got;
        }
    }
    if (differ)
        conform_fail(r, name, NULL,
                     "input %zu (0x%08x): 0x%04x, expected 0x%04x (%zu of %zu differ)", first,
                     in[first], first_got, want[first], differ, n);
    else
        conform_pass(r, name, NULL, "(%zu values, %zu NaN inputs compared by NaN-ness)", n, nans);
    free(want);
}

void conform_convert_file(struct conform_run *r, const char *name) {
    char base[512], in_name[600];
    amp_dtype dt;
    if (parse_output_name(name, base, sizeof base, &dt, NULL, 0)) {
        snprintf(in_name, sizeof in_name, "conv_%s_in_f32.bin", base);
        if (!conform_has_file(r, in_name)) conform_fail(r, name, NULL, "no %s beside it", in_name);
        return; // else checked with its input
    }
    size_t len = strlen(name), suffix = strlen("_in_f32.bin");
    if (len <= 5 + suffix || strcmp(name + len - suffix, "_in_f32.bin") != 0) return;
    snprintf(base, sizeof base, "%.*s", (int)(len - 5 - suffix), name + 5);

    size_t nbytes;
    uint32_t *in = conform_load(r, name, 0, NULL, &nbytes);
    if (!in) return;
    if (nbytes % 4 != 0) {
        conform_error(r, name, 0, "%zu bytes is not a whole number of fp32 values", nbytes);
        free(in);
        return;
    }
    int outputs = 0;
    for (int i = 0; i < r->n_names; i++) {
        char other[512], tag[512], sibling[1200];
        if (!parse_output_name(r->names[i], other, sizeof other, &dt, tag, sizeof tag) ||
            strcmp(other, base) != 0)
            continue;
        check_output(r, r->names[i], dt, name, in, nbytes / 4);
        outputs++;
        // PyTorch converted the inputs to both types where it converted them at all: without
        // this, a lost output file would leave its half of the cases unchecked, unsaid
        const char *other_type = dt == AMP_DTYPE_F16 ? "bf16" : "f16";
        snprintf(sibling, sizeof sibling, "conv_%s_%s_%s.bin", base, other_type, tag);
        if (!conform_has_file(r, sibling))
            conform_fail(r, sibling, NULL,
                         "missing beside %s and %s: the %s conversions are not checked", name,
                         r->names[i], other_type);
    }
    if (outputs == 0)
        conform_fail(r, name, NULL, "no conv_%s_f16_<tag>.bin or conv_%s_bf16_<tag>.bin beside it",
                     base, base);
    free(in);
}
