/*
 * conform-scaler.c — scaler_updates*.txt: sequences of GradScaler.update() as PyTorch's
 * _amp_update_scale_ kernel computed them, replayed through amp_scale_update. The scale must
 * match bit for bit and the growth tracker exactly, after every update.
 *
 *   case NAME init_scale growth_factor backoff_factor growth_interval
 *   found_inf scale scale_bits_hex growth_tracker      (state after each update)
 *   end
 */
#include "conform.h"

#include <limits.h>
#include <string.h>

struct scaler_case {
    char name[128];
    int line; // of the case header
    float scale;
    int32_t tracker;
    double growth, backoff;
    int interval;
    int updates;
    char mismatch[160]; // the first one, "" while none
};

static bool parse_header(struct conform_text *t, struct scaler_case *c) {
    double init;
    long interval;
    if (t->ntok != 6 || !conform_parse_double(t->tok[2], &init) ||
        !conform_parse_double(t->tok[3], &c->growth) ||
        !conform_parse_double(t->tok[4], &c->backoff) ||
        !conform_parse_long(t->tok[5], &interval) || interval < INT_MIN || interval > INT_MAX)
        return false;
    snprintf(c->name, sizeof c->name, "%s", t->tok[1]);
    c->line = t->lineno;
    c->scale = (float)init; // torch.full((), init_scale, dtype=float32): round to nearest even
    c->tracker = 0;
    c->interval = (int)interval;
    c->updates = 0;
    c->mismatch[0] = '\0';
    return true;
}

// One update line: applies it and records the first mismatch. false when malformed.
static bool apply_update(struct conform_text *t, struct scaler_case *c) {
    double found_inf, scale_decimal;
    uint32_t bits;
    long tracker;
    if (t->ntok != 4 || !conform_parse_double(t->tok[0], &found_inf) ||
        !conform_parse_double(t->tok[1], &scale_decimal) ||
        !conform_parse_hex(t->tok[2], UINT32_MAX, &bits) ||
        !conform_parse_long(t->tok[3], &tracker) || tracker < INT32_MIN || tracker > INT32_MAX)
        return false;
    c->updates++;
    amp_scale_update(&c->scale, &c->tracker, (float)found_inf, c->growth, c->backoff, c->interval);
    if (c->mismatch[0]) return true;
    if (conform_bits(c->scale) != bits)
        snprintf(c->mismatch, sizeof c->mismatch, "update %d: scale 0x%08x, expected 0x%08x",
                 c->updates, conform_bits(c->scale), bits);
    else if (c->tracker != tracker)
        snprintf(c->mismatch, sizeof c->mismatch, "update %d: growth_tracker %d, expected %ld",
                 c->updates, c->tracker, tracker);
    return true;
}

void conform_scaler_file(struct conform_run *r, const char *name) {
    struct conform_text t;
    if (!conform_text_open(&t, r, name)) return;
    struct scaler_case c = {0};
    bool open = false;
    while (conform_text_next_record(&t)) {
        if (strcmp(t.tok[0], "case") == 0) {
            if (open) {
                conform_error(r, name, c.line, "case %s has no 'end'", c.name);
                goto out;
            }
            if (!parse_header(&t, &c)) {
                conform_error(r, name, t.lineno,
                              "expected 'case NAME init_scale growth_factor backoff_factor "
                              "growth_interval'");
                goto out;
            }
            open = true;
        } else if (strcmp(t.tok[0], "end") == 0 && t.ntok == 1) {
            if (!open) {
                conform_error(r, name, t.lineno, "'end' outside a case");
                goto out;
            }
            if (c.updates == 0) { // a case that checks nothing is no pass
                conform_error(r, name, t.lineno, "case %s has no update lines", c.name);
                goto out;
            }
            if (c.mismatch[0])
                conform_fail(r, name, c.name, "%s", c.mismatch);
            else
                conform_pass(r, name, c.name, "(%d updates)", c.updates);
            open = false;
        } else if (!open) {
            conform_error(r, name, t.lineno, "expected 'case NAME ...'");
            goto out;
        } else if (!apply_update(&t, &c)) {
            conform_error(r, name, t.lineno,
                          "expected 'found_inf scale scale_bits_hex growth_tracker' or 'end'");
            goto out;
        }
    }
    if (open)
        conform_error(r, name, c.line, "case %s has no 'end'", c.name);
    else
        conform_text_had_records(r, &t,
                                 "'case NAME init_scale growth_factor backoff_factor "
                                 "growth_interval'");
out:
    conform_text_close(&t);
}
