/*
 * text.c — UTF-8 as the store, the record codec, the report, conform and the TUI read it: how
 * long the valid sequence at a byte is, where to cut a string so that no character is split, and
 * whether a character is a C1 control; and text appended to a buffer as printf writes it.
 */
#include "amp-impl.h"

size_t amp_utf8_seq(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    if (p[0] < 0x80) return 1;
    const size_t len = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 ? 2 : 0;
    if (!len || len > n || p[0] > 0xF4) return 0;
    for (size_t k = 1; k < len; k++)
        if ((p[k] & 0xC0) != 0x80) return 0; // (a NUL ends it too)
    // overlong forms, surrogates, code points beyond U+10FFFF
    if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0) ||
        (p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))
        return 0;
    return len;
}

size_t amp_utf8_cut(const char *s, size_t len) {
    // s[len] is the first byte left out: a continuation byte there means the last character
    // kept would be cut (a character has three of them at most)
    for (int back = 0; back < 3 && len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80; back++)
        len--;
    return len;
}

bool amp_c1_control(const char *s) {
    return (unsigned char)s[0] == 0xC2 && (unsigned char)s[1] >= 0x80 &&
           (unsigned char)s[1] <= 0x9F;
}

size_t amp_vappendf(char *buf, size_t n, size_t k, const char *fmt, va_list ap) {
    if (k >= n) return k;
    const int w = vsnprintf(buf + k, n - k, fmt, ap);
    return w > 0 ? k + (size_t)w : k;
}

size_t amp_appendf(char *buf, size_t n, size_t k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    k = amp_vappendf(buf, n, k, fmt, ap);
    va_end(ap);
    return k;
}
