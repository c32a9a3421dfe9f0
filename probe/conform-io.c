/*
 * conform-io.c — reading the reference files of `ampprobe conform`: text files record by record
 * with line numbers (a leading UTF-8 byte order mark skipped), whole-token number parsing (a
 * half-parsed number is a malformed file, not a zero), and binary files with their size checked
 * against what the case says they hold.
 */
#include "conform.h"

#include "amp-impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void join_path(char *buf, size_t n, const struct conform_run *r, const char *name) {
    snprintf(buf, n, "%s/%s", r->dir, name);
}

static const char *file_kind(mode_t mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "of an unknown kind";
}

// Opens r->dir/name for reading; NULL (error reported) when it cannot be opened or is not a
// regular file. A FIFO named like a reference file would block a plain fopen() forever, and a
// directory reads as an empty file: so the open does not wait, and fstat() refuses what it
// opened (not the name, which could be swapped in between).
static FILE *open_regular(struct conform_run *r, const char *name) {
    char path[4096];
    join_path(path, sizeof path, r, name);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        conform_error(r, name, 0, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        conform_error(r, name, 0, "cannot stat: %s", strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        conform_error(r, name, 0, "not a regular file (%s)", file_kind(st.st_mode));
    } else {
        // blocking again, as reads of a regular file are anyway
        int flags = fcntl(fd, F_GETFL);
        FILE *f = NULL;
        if (flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0) f = fdopen(fd, "rb");
        if (f) return f;
        conform_error(r, name, 0, "cannot open: %s", strerror(errno));
    }
    close(fd);
    return NULL;
}

bool conform_text_open(struct conform_text *t, struct conform_run *r, const char *name) {
    *t = (struct conform_text){.name = name};
    t->f = open_regular(r, name);
    return t->f != NULL;
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
        errno = 0;
        ssize_t len = getline(&t->line, &t->line_cap, t->f);
        if (len < 0 && ferror(t->f)) { // (not the end: a check would pass on what was read)
            fprintf(stderr, "ampprobe conform: cannot read %s after line %d: %s\n", t->name,
                    t->lineno, strerror(errno ? errno : EIO));
            exit(2);
        }
        if (len < 0) return false;
        t->lineno++;
        // a NUL byte would end the line early and drop the fields after it: it spoils its field
        for (char *z; (z = memchr(t->line, '\0', (size_t)len));)
            *z = '\x7f';
        t->ntok = 0;
        t->is_comment = false;
        char *p = t->line;
        // a UTF-8 byte order mark, as some editors write one, is no part of the first record
        if (t->lineno == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;
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
        if (t->ntok > 0 || t->is_comment) {
            t->records += !t->is_comment;
            return true;
        }
    }
}

bool conform_text_next_record(struct conform_text *t) {
    while (conform_text_next(t))
        if (!t->is_comment) return true;
    return false;
}

bool conform_text_had_records(struct conform_run *r, const struct conform_text *t,
                              const char *expected) {
    if (t->records > 0) return true;
    if (t->lineno == 0)
        conform_error(r, t->name, 0, "empty file, expected %s", expected);
    else
        conform_error(r, t->name, 0,
                      "no records in %d line%s (only comments and blank lines), expected %s",
                      t->lineno, t->lineno == 1 ? "" : "s", expected);
    return false;
}

void conform_text_close(struct conform_text *t) {
    if (t->f) fclose(t->f);
    free(t->line);
    free(t->tok);
    *t = (struct conform_text){0};
}

bool conform_parse_double(const char *s, double *out) {
    if (strpbrk(s, "xX")) return false; // decimal: strtod would also read hex floats
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
    // hex digits only from here: strtoull would also take a second "0x", a sign or blanks
    if (!s[0] || s[strspn(s, "0123456789abcdefABCDEF")]) return false;
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
    FILE *f = open_regular(r, name);
    if (!f) return NULL;
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
    if (size == 0) { // every tensor of a reference set has values: an empty one checks nothing
        conform_error(r, name, 0, "empty file");
        fclose(f);
        return NULL;
    }
    void *data = malloc((size_t)size);
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
