/*
 * record-codec.h — the spool format, shared by the writer (record.c) and the collector.
 *
 * A spool file is one amp_spool_header followed by records. A record is an 8-byte header
 * (type u16, version u16, payload length u32) and its payload: the fields of the amp_rec_*
 * struct in declaration order, integers and doubles fixed-width, bools one byte, strings as a
 * u32 length (UINT32_MAX for NULL) followed by the bytes and a NUL. Host byte order: spool
 * files never leave the machine (the header's byte_order field catches a mix-up).
 *
 * Versioning: a newer version of a record only appends fields, so a reader decodes the fields it
 * knows and skips the rest of the payload; a record type it does not know is skipped by length.
 * A new spool version (incompatible layout) is refused by older collectors.
 */
#ifndef AMP_RECORD_CODEC_H
#define AMP_RECORD_CODEC_H

#include "amp-record.h"

#include <stddef.h>
#include <stdint.h>

#define AMP_SPOOL_MAGIC "AMPSPOOL"
#define AMP_SPOOL_VERSION 1
#define AMP_SPOOL_BYTE_ORDER 0x01020304u
#define AMP_SPOOL_SUFFIX ".spool"
// In the spool directory: a file the collector holds an exclusive flock on while it lives. A
// writer that can take that lock knows nothing will read its records any more.
#define AMP_SPOOL_LIVE_LOCK ".collector"

typedef struct amp_spool_header { // 64 bytes at offset 0 of every spool file
    char magic[8];                // AMP_SPOOL_MAGIC, no NUL
    uint16_t version;             // AMP_SPOOL_VERSION
    uint16_t header_bytes;        // sizeof(amp_spool_header); records start here
    uint32_t byte_order;          // AMP_SPOOL_BYTE_ORDER as the writer stored it
    int32_t pid, ppid;
    int64_t start_ns; // when the writer opened the file
    char comm[16];    // process name, NUL-padded
    // The same in every spool file one process image writes (a process that stops and starts
    // recording again writes a file each time; the collector makes them one process), from the
    // kernel's random bytes at exec; 0: unknown (a writer before this field, or a test).
    uint64_t exec_id;
    // When the process started (/proc/self/stat's starttime, clock ticks since boot); 0: unknown
    // (a writer before this field). With the pid and exec_id, one process image's: a pid the
    // system reuses, in a child forked from the same image (the same exec_id), starts later.
    uint64_t proc_start;
} amp_spool_header;

_Static_assert(sizeof(amp_spool_header) == 64, "spool header layout");

void amp_spool_header_init(amp_spool_header *h, int32_t pid, int32_t ppid, int64_t start_ns,
                           const char *comm);
// AMP_OK, or AMP_ERR_CORRUPT / AMP_ERR_UNSUPPORTED with a message (amp_last_error) naming what.
amp_status amp_spool_header_check(const amp_spool_header *h);

#define AMP_REC_HEADER_BYTES 8
#define AMP_REC_MAX_BYTES (1u << 20) // a longer length field means corruption

typedef struct amp_rec_header {
    uint16_t type;
    uint16_t version;
    uint32_t length; // payload bytes
} amp_rec_header;

// Writes the record (header + payload, strings cut to AMP_REC_STR_MAX) into out when it fits in
// cap bytes, and returns the bytes it needs either way (like snprintf: out may be NULL with cap
// 0 to ask for the size; when the result exceeds cap, out holds nothing usable).
size_t amp_rec_encode(amp_rec_type type, const void *rec, uint8_t *out, size_t cap);

typedef enum amp_scan {
    AMP_SCAN_RECORD,  // a complete record: *hdr and *payload are set
    AMP_SCAN_PARTIAL, // more bytes are needed
    AMP_SCAN_CORRUPT, // the header cannot be a record's (type 0, length over the maximum)
} amp_scan;

// Looks at the record starting at buf (n bytes available).
amp_scan amp_rec_scan(const uint8_t *buf, size_t n, amp_rec_header *hdr, const uint8_t **payload);

// A decoded record: the struct of its type. Strings point into the payload, so they live as long
// as the payload buffer does.
typedef union amp_rec_any {
    amp_rec_meta meta;
    amp_rec_layer layer;
    amp_rec_step step;
    amp_rec_scale scale;
    amp_rec_tensor_stats tensor_stats;
    amp_rec_op op;
    amp_rec_event event;
    amp_rec_string string;
    amp_rec_kernel kernel;
    amp_rec_memcpy memcpy;
    amp_rec_memset memset;
    amp_rec_runtime runtime;
    amp_rec_sync sync;
    amp_rec_nvtx nvtx;
    amp_rec_gpu_info gpu_info;
    amp_rec_gpu_metric gpu_metric;
} amp_rec_any;

// Whether this build knows record type t.
bool amp_rec_type_known(uint16_t t);
// Decodes a payload of a known type. false when the payload is too short for the fields or a
// string is malformed (length past the end, no NUL); out is then unspecified.
bool amp_rec_decode(uint16_t type, const uint8_t *payload, uint32_t length, amp_rec_any *out);

#endif // AMP_RECORD_CODEC_H
