/*
 * CCurlShim: typed wrappers of libcurl's variadic calls, which Swift cannot make.
 *
 * curl_easy_setopt and curl_easy_getinfo take their argument through `...`; each
 * wrapper here fixes the argument's C type and passes it on unchanged. They contain no
 * logic (STYLE.md: shims contain no logic): the transport in CairnUploader decides
 * which options to set.
 *
 * Every wrapper returns what libcurl returned. Ownership, thread-safety and
 * async-signal-safety are libcurl's for the call wrapped: a handle is used by one
 * thread at a time, and none of these is async-signal-safe.
 */
#ifndef CCURLSHIM_H
#define CCURLSHIM_H

#include <curl/curl.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Sets an option whose argument is a `long` (CURLOPTTYPE_LONG, CURLOPTTYPE_VALUES).
 *
 * @param handle  an easy handle from curl_easy_init.
 * @param option  a CURLOPT_* constant that takes a long.
 * @param value   the value.
 * @return what curl_easy_setopt returns: CURLE_OK, CURLE_UNKNOWN_OPTION,
 *         CURLE_BAD_FUNCTION_ARGUMENT, CURLE_NOT_BUILT_IN, CURLE_UNSUPPORTED_PROTOCOL.
 */
CURLcode cairn_curl_setopt_long(CURL *handle, CURLoption option, long value);

/**
 * Sets an option whose argument is a data pointer (CURLOPTTYPE_OBJECTPOINT or
 * CURLOPTTYPE_CBPOINT, e.g. CURLOPT_POSTFIELDS, CURLOPT_HTTPHEADER, CURLOPT_WRITEDATA).
 *
 * @param handle  an easy handle.
 * @param option  a CURLOPT_* constant that takes a pointer.
 * @param value   the pointer; libcurl keeps it, so what it points to must stay valid
 *                for as long as the option is set (libcurl does not copy it).
 * @return what curl_easy_setopt returns.
 */
CURLcode cairn_curl_setopt_ptr(CURL *handle, CURLoption option, void *value);

/**
 * Sets an option whose argument is a C string (CURLOPTTYPE_STRINGPOINT, e.g.
 * CURLOPT_URL). libcurl copies the string, so it need only live for the call.
 *
 * @param handle  an easy handle.
 * @param option  a CURLOPT_* constant that takes a string.
 * @param value   a NUL-terminated string, or NULL to restore the default.
 * @return what curl_easy_setopt returns, including CURLE_OUT_OF_MEMORY.
 */
CURLcode cairn_curl_setopt_str(CURL *handle, CURLoption option, const char *value);

/**
 * Sets an option whose argument is a `curl_off_t` (CURLOPTTYPE_OFF_T, e.g.
 * CURLOPT_POSTFIELDSIZE_LARGE).
 *
 * @param handle  an easy handle.
 * @param option  a CURLOPT_* constant that takes a curl_off_t.
 * @param value   the value.
 * @return what curl_easy_setopt returns.
 */
CURLcode cairn_curl_setopt_off(CURL *handle, CURLoption option, curl_off_t value);

/**
 * Sets CURLOPT_WRITEFUNCTION, the callback that receives the response body.
 *
 * @param handle    an easy handle.
 * @param callback  called with each piece of the body and CURLOPT_WRITEDATA; returns
 *                  the number of bytes it took (less aborts the transfer).
 * @return what curl_easy_setopt returns.
 */
CURLcode cairn_curl_setopt_writefn(CURL *handle, curl_write_callback callback);

/**
 * Sets CURLOPT_HEADERFUNCTION, the callback that receives each response header line
 * (status lines included, one call per line, with its CRLF).
 *
 * @param handle    an easy handle.
 * @param callback  called with each line and CURLOPT_HEADERDATA; returns the number
 *                  of bytes it took (less aborts the transfer).
 * @return what curl_easy_setopt returns.
 */
CURLcode cairn_curl_setopt_headerfn(CURL *handle, curl_write_callback callback);

/**
 * Reads a `long` piece of information about the last transfer (CURLINFO_LONG, e.g.
 * CURLINFO_RESPONSE_CODE).
 *
 * @param handle  an easy handle.
 * @param info    a CURLINFO_* constant of long type.
 * @param value   where the value is stored.
 * @return what curl_easy_getinfo returns: CURLE_OK, CURLE_UNKNOWN_OPTION or
 *         CURLE_BAD_FUNCTION_ARGUMENT.
 */
CURLcode cairn_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);

#ifdef __cplusplus
}
#endif

#endif /* CCURLSHIM_H */
