/*
 * The process's JSON parser (json-c underneath), shared by HTTP and the
 * Lua payload codec.
 */
#ifndef WQ_JSON_H
#define WQ_JSON_H

#include <json-c/json_object.h>
#include <stddef.h>

/*
 * Parses the whole text s[0..len) into *out (NULL for a top-level null;
 * the caller puts it). Returns NULL, or why the text is not JSON or cannot
 * be kept exactly (*out NULL): a key twice in one object, an object key
 * holding \u0000, a lone surrogate, each "... at $.json.path" (a static
 * string, or a thread-local buffer valid until the next call). Integer
 * literals outside int64 become doubles.
 */
const char *wq_json_parse(const char *s, size_t len, json_object **out);

#endif
