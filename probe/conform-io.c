/*
 * conform-io.c — reading the reference files of `ampprobe conform`: text files record by record
 * with line numbers, whole-token number parsing (a half-parsed number is a malformed file, not a
 * zero), and binary files with their size checked against what the case says they hold.
 */
#include "conform.h"

#include "amp-impl.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void join_path(char *buf, size_t n, const struct conform_run *r, const char *name) {
    snprintf(buf, n, "%s/%s", r->dir, name);
}

bool conform_text_open(struct conform_text *t, struct conform_run *r, const char *name) {
    *t = (struct conform_text){.name = name};
    char path[4096];
    join_path(path, sizeof path, r, name);
    t->f = fopen(path, "r");
    if (!t->f) {
        conform_error(r, name, 0, "cannot open: %s", strerror(errno));
        return false;
    }
    return true;
}

static void push_token(struct conform_text *t, char *s) {
    if (t->ntok == t->tok_cap) {
        t->tok_cap = t->tok_cap ? 2 * t->tok_cap : 16;
        char **tok = realloc(t->tok, (size_t)t->tok_cap * sizeof *tok);
        if (!tok) {
            fprintf(stderr, "ampprobe conform: out of memory reading %s\n", t->name);
            abort();
        }
        t->tok = tok;
    }
    t->tok[t->ntok++] = s;
}

bool conform_text_next(struct conform_text *t) {
    for (;;) {
        ssize_t len = getline(&t->line, &t->line_cap, t->f);
        if (len < 0) return false;
        t->lineno++;
        t->ntok = 0;
        t->is_comment = false;
        char *p = t->line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '#') {
            t->is_comment = true;
            p++;
        }
        for (;;) {
            while (isspace((unsigned char)*p))
                p++;
            if (!*p || (*p == '#' && !t->is_comment)) break; // a trailing comment ends the record
            char *start = p;
            while (*p && !isspace((unsigned char)*p))
                p++;
            if (*p) *p++ = '\0';
            push_token(t, start);
        }
        if (t->ntok > 0 || t->is_comment) return true;
    }
}

bool conform_text_next_record(struct conform_text *t) {
    while (conform_text_next(t))
        if (!t->is_comment) return true;
    return false;
}

void conform_text_close(struct conform_text *t) {
    if (t->f) fclose(t->f);
    free(t->line);
    free(t->tok);
    *t = (struct conform_text){0};
}

bool conform_parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    // ERANGE on underflow still gives the correctly rounded value; on overflow it does not
    if (end == s || *end || (errno == ERANGE && isinf(v))) return false;
    *out = v;
    return true;
}

bool conform_parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno == ERANGE) return false;
    *out = v;
    return true;
}

bool conform_parse_hex(const char *s, uint32_t max, uint32_t *out) {
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2;
    if (!isxdigit((unsigned char)s[0])) return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (*end || errno == ERANGE || v > max) return false;
    *out = (uint32_t)v;
    return true;
}

static int cmp_name(const void *key, const void *elem) {
    return strcmp((const char *)key, *(char *const *)elem);
}

bool conform_has_file(const struct conform_run *r, const char *name) {
    return amp_search(name, r->names, (size_t)r->n_names, sizeof *r->names, cmp_name) != NULL;
}

void *conform_load(struct conform_run *r, const char *name, size_t want_bytes, const char *what,
                   size_t *nbytes) {
    char path[4096];
    join_path(path, sizeof path, r, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        conform_error(r, name, 0, "cannot open: %s", strerror(errno));
        return NULL;
    }
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        conform_error(r, name, 0, "cannot read: %s", strerror(errno));
        fclose(f);
        return NULL;
    }
    if (want_bytes > 0 && (size_t)size != want_bytes) {
        conform_error(r, name, 0, "%ld bytes, expected %zu (%s)", size, want_bytes, what);
        fclose(f);
        return NULL;
    }
    void *data = malloc(size > 0 ? (size_t)size : 1);
    if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) {
        conform_error(r, name, 0, "cannot read %ld bytes", size);
        free(data);
        fclose(f);
        return NULL;
    }
    fclose(f);
    if (nbytes) *nbytes = (size_t)size;
    return data;
}

float conform_f32(uint32_t bits) {
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

uint32_t conform_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

bool conform_is_nan_bits(amp_dtype t, uint32_t bits) {
    switch (t) {
    case AMP_DTYPE_F16:
        return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0;
    case AMP_DTYPE_BF16:
        return (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0;
    default:
        return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0;
    }
}
