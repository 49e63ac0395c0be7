/*
 * fuzz_http_url.c: libFuzzer target for the HTTP client's URL and proxy parsing
 * (client.c): cairn_http_url_check(), and the proxy a client made from a fuzzed
 * environment picks for a URL (cairn_http_client_proxy(): the proxy variables, their
 * credentials and ports, and the no_proxy lists with domains, IP addresses and CIDR
 * ranges).
 *
 * The input is lines. The first byte sets the size of a small output buffer (1 to 256
 * bytes), the rest of the first line is the URL (passed with its length, in a buffer of
 * exactly that size, never NUL-terminated). Each further line is one environment
 * entry: its first byte, less '0', modulo 10, names the variable (0 http_proxy,
 * 1 https_proxy, 2 HTTPS_PROXY, 3 all_proxy, 4 ALL_PROXY, 5 no_proxy, 6 NO_PROXY,
 * 7 HTTP_PROXY, which is never read, 8 a near miss, "http_proxyX", 9 the line as it
 * is, "=" or not), the rest of the line up to any NUL is its value. For example:
 *   "Zhttp://10.1.2.3:8080/v1\n1http://user:pa%20ss@proxy:3128/\n510.0.0.0/8"
 *
 * Checks, with abort(): nothing crashes or reads past the URL; every answer is the same
 * when asked twice; the text is NUL-terminated within the buffer, and cut to a small
 * buffer it is the start of the whole text; a URL cairn_http_url_check() refuses is
 * refused for the same reason by cairn_http_client_proxy(); for one it accepts the
 * answer is "direct", "http://authority (variable)" or "variable is not a usable
 * proxy: ...", where the variable is the one curl's order of precedence picks (with
 * HTTP_PROXY never read) and the authority makes a URL that cairn_http_url_check()
 * accepts. And no_proxy is checked against itself: "*", the URL's host, a domain it is
 * in and, for an IP literal, its /32 or /128 range and 0.0.0.0/0 or ::/0 all make the
 * request go direct, while the host with its first character dropped changes nothing.
 *
 * `make fuzz-smoke` builds and runs every fuzzer; by hand, from the repository root:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I CSources/CCairnHTTP/include \
 *     -I CSources/CCairnHTTP CSources/CCairnHTTP/client.c CSources/CCairnHTTP/parser.c \
 *     CSources/CCairnHTTP/tls.c CSources/CCairnHTTP/tls_openssl.c \
 *     CSources/CCairnHTTP/tls_mbedtls.c CSources/Fuzz/fuzz_http_url.c -o fuzz_http_url
 *   mkdir -p corpus && ./fuzz_http_url -max_total_time=60 corpus \
 *     CSources/Fuzz/corpus/http_url
 */
#include "cairn_http.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_CAP 1024
#define MAX_ENTRIES 16

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_http_url: %s\n", what);
        abort();
    }
}

static const char *const names[] = {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                                    "no_proxy",   "NO_PROXY",    "HTTP_PROXY",  "http_proxyX"};

/* The environment: up to MAX_ENTRIES "NAME=value" strings, then room for the entries
 * the no_proxy checks put first, and the NULL. */
typedef struct environment {
    char *entries[MAX_ENTRIES + 2];
    size_t count;
} environment;

/* The value of `name` as getenv would find it in `env` (the first entry). */
static const char *lookup(const environment *env, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < env->count; i++) {
        if (strncmp(env->entries[i], name, len) == 0 && env->entries[i][len] == '=') return env->entries[i] + len + 1;
    }
    return NULL;
}

/* The variable that applies, as documented: the lowercase name when set (even empty),
 * else the uppercase one; an empty value is unset. NULL when neither is set. */
static const char *applies(const environment *env, const char *lower, const char *upper)
{
    const char *value = lookup(env, lower);
    const char *name = lower;
    if (!value && upper) {
        value = lookup(env, upper);
        name = upper;
    }
    return value && *value ? name : NULL;
}

static int starts_with(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

static cairn_http_client_t *client_for(char *const *entries)
{
    cairn_http_client_options_t options;
    memset(&options, 0, sizeof options);
    options.environment = (const char *const *)entries;
    cairn_http_client_t *client = NULL;
    check(cairn_http_client_new(&options, &client) == CAIRN_HTTP_OK && client, "no client");
    return client;
}

/* The answer for `url` into a buffer of exactly `cap` bytes, checked for its NUL. */
static int ask(const cairn_http_client_t *client, const char *url, size_t len, char *out, size_t cap)
{
    char *buffer = malloc(cap);
    check(buffer != NULL, "out of memory");
    memset(buffer, 0xA5, cap);
    int rc = cairn_http_client_proxy(client, url, len, buffer, cap);
    check(rc == CAIRN_HTTP_OK || rc == CAIRN_HTTP_EINVALID, "an unexpected result");
    check(memchr(buffer, 0, cap) != NULL, "the answer is not NUL-terminated within its buffer");
    memcpy(out, buffer, strlen(buffer) + 1);
    free(buffer);
    return rc;
}

/* The answer with `first` put before the other entries. */
static int ask_with(environment *env, const char *first, const char *url, size_t len, char *out)
{
    char *entries[MAX_ENTRIES + 2];
    entries[0] = (char *)first;
    memcpy(entries + 1, env->entries, env->count * sizeof *entries);
    entries[env->count + 1] = NULL;
    cairn_http_client_t *client = client_for(entries);
    int rc = ask(client, url, len, out, TEXT_CAP);
    cairn_http_client_free(client);
    return rc;
}

static void check_direct(environment *env, const char *no_proxy, const char *url, size_t len, const char *what)
{
    char entry[600], text[TEXT_CAP];
    snprintf(entry, sizeof entry, "no_proxy=%s", no_proxy);
    check(ask_with(env, entry, url, len, text) == CAIRN_HTTP_OK && strcmp(text, "direct") == 0, what);
}

/* The no_proxy checks for an accepted URL whose host is host[0..host_len) as written. */
static void check_no_proxy(environment *env, const char *url, size_t len, const char *host, size_t host_len)
{
    char list[600], bare[300];
    check_direct(env, "*", url, len, "no_proxy=* did not go direct");
    /* The host added to the list that applies, as the last entry (but for the host
     * ".", which a leading dot, dropped from an entry, leaves empty). */
    const char *listed = lookup(env, "no_proxy");
    if (!listed) listed = lookup(env, "NO_PROXY");
    if (!listed) listed = "";
    if (strlen(listed) < 256 && !(host_len == 1 && host[0] == '.')) {
        snprintf(list, sizeof list, "%s,%.*s", listed, (int)host_len, host);
        check_direct(env, list, url, len, "no_proxy listing the host did not go direct");
    }
    int ip = 0, v6 = 0;
    if (host[0] == '[') {
        snprintf(bare, sizeof bare, "%.*s", (int)host_len - 2, host + 1);
        unsigned char address[16];
        check(inet_pton(AF_INET6, bare, address) == 1, "an accepted [host] is not IPv6");
        ip = v6 = 1;
    } else {
        snprintf(bare, sizeof bare, "%.*s", (int)host_len, host);
        unsigned char address[4];
        ip = inet_pton(AF_INET, bare, address) == 1;
    }
    if (ip) {
        snprintf(list, sizeof list, "%s/%d", bare, v6 ? 128 : 32);
        check_direct(env, list, url, len, "no_proxy with the host's own range did not go direct");
        check_direct(env, v6 ? "::/0" : "0.0.0.0/0", url, len, "no_proxy with the whole range did not go direct");
    } else {
        const char *dot = memchr(host + 1, '.', host_len - 1);
        if (dot && (size_t)(dot - host) + 1 < host_len) {
            snprintf(list, sizeof list, "%.*s", (int)(host_len - (size_t)(dot - host)), dot);
            check_direct(env, list, url, len, "no_proxy with a domain of the host did not go direct");
            if (dot[1] != '.') {
                snprintf(list, sizeof list, "%.*s", (int)(host_len - (size_t)(dot - host) - 1), dot + 1);
                check_direct(env, list, url, len, "no_proxy with a domain of the host (no dot) did not go direct");
            }
        }
    }
    /* Not a match: the host without its first character, against no list at all. */
    if (host_len >= 2 && host[0] != '.' && host[1] != '.') {
        char unset[TEXT_CAP], near[TEXT_CAP], entry[300];
        int a = ask_with(env, "no_proxy=", url, len, unset);
        snprintf(entry, sizeof entry, "no_proxy=%.*s", (int)host_len - 1, host + 1);
        int b = ask_with(env, entry, url, len, near);
        check(a == b && strcmp(unset, near) == 0, "a no_proxy entry that is not the host changed the answer");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t small_cap = 1 + data[0];
    data++;
    size--;
    const uint8_t *newline = memchr(data, '\n', size);
    size_t url_len = newline ? (size_t)(newline - data) : size;
    char *url = malloc(url_len ? url_len : 1);
    check(url != NULL, "out of memory");
    memcpy(url, data, url_len);

    environment env = {{0}, 0};
    const uint8_t *cursor = newline ? newline + 1 : data + size, *end = data + size;
    while (cursor < end && env.count < MAX_ENTRIES) {
        const uint8_t *stop = memchr(cursor, '\n', (size_t)(end - cursor));
        size_t line = stop ? (size_t)(stop - cursor) : (size_t)(end - cursor);
        if (line > 0) {
            unsigned which = (unsigned)(uint8_t)(cursor[0] - '0') % 10;
            size_t value_len = strnlen((const char *)cursor + 1, line - 1);
            char *entry = malloc(value_len + 16);
            check(entry != NULL, "out of memory");
            if (which < 9) snprintf(entry, value_len + 16, "%s=%.*s", names[which], (int)value_len, cursor + 1);
            else snprintf(entry, value_len + 16, "%.*s", (int)value_len, cursor + 1);
            env.entries[env.count++] = entry;
        }
        cursor += line + 1;
    }
    env.entries[env.count] = NULL;

    const char *why = NULL, *why_again = NULL;
    int valid = cairn_http_url_check(url, url_len, &why);
    check(valid == 0 || valid == CAIRN_HTTP_EINVALID, "url_check: an unexpected result");
    check(valid == cairn_http_url_check(url, url_len, &why_again), "url_check changed its mind");
    check(valid == 0 || (why && *why && why == why_again), "url_check refused without the same reason");
    check(cairn_http_url_check(url, url_len, NULL) == valid, "url_check without `why` differs");

    cairn_http_client_t *client = client_for(env.entries);
    char text[TEXT_CAP], again[TEXT_CAP], cut[TEXT_CAP];
    int rc = ask(client, url, url_len, text, sizeof text);
    check(text[0] != 0, "an empty answer");
    check(ask(client, url, url_len, again, sizeof again) == rc && strcmp(text, again) == 0,
          "the client changed its answer");
    check(ask(client, url, url_len, cut, small_cap) == rc, "the buffer's size changed the result");
    check(strlen(cut) == (strlen(text) < small_cap ? strlen(text) : small_cap - 1)
              && strncmp(cut, text, strlen(cut)) == 0,
          "the cut answer is not the start of the whole one");
    cairn_http_client_free(client);

    if (valid != 0) {
        check(rc == CAIRN_HTTP_EINVALID && strcmp(text, why) == 0, "client_proxy accepted a URL url_check refused");
    } else {
        int https = url_len >= 8 && (url[4] == 's' || url[4] == 'S');
        const char *name = https ? applies(&env, "https_proxy", "HTTPS_PROXY") : applies(&env, "http_proxy", NULL);
        if (!name) name = applies(&env, "all_proxy", "ALL_PROXY");
        if (strcmp(text, "direct") == 0) {
            check(rc == CAIRN_HTTP_OK, "direct, but failed");
            check(name == NULL || applies(&env, "no_proxy", "NO_PROXY"), "direct, though a proxy applies");
        } else {
            check(name != NULL, "a proxy, though no variable applies");
            char expected[64];
            if (rc == CAIRN_HTTP_OK) {
                snprintf(expected, sizeof expected, " (%s)", name);
                size_t text_len = strlen(text), expected_len = strlen(expected);
                check(starts_with(text, "http://") && text_len > expected_len + 7
                          && strcmp(text + text_len - expected_len, expected) == 0,
                      "the proxy is not \"http://authority (variable)\" of the variable that applies");
                check(cairn_http_url_check(text, text_len - expected_len, NULL) == 0,
                      "the proxy's authority does not make a URL");
            } else {
                snprintf(expected, sizeof expected, "%s is not a usable proxy: ", name);
                check(starts_with(text, expected), "a refusal that does not name the variable that applies");
            }
        }
        /* The host as written: after the scheme, up to the port, path, query or fragment. */
        size_t start = https ? 8 : 7, stop = start;
        while (stop < url_len && url[stop] != '/' && url[stop] != '?' && url[stop] != '#') stop++;
        const char *host = url + start;
        size_t host_len;
        if (host[0] == '[') {
            const char *close = memchr(host, ']', stop - start);
            check(close != NULL, "an accepted [host] without its ]");
            host_len = (size_t)(close - host) + 1;
        } else {
            const char *colon = memchr(host, ':', stop - start);
            host_len = colon ? (size_t)(colon - host) : stop - start;
        }
        check(host_len > 0 && host_len < 260, "an accepted URL with no host, or too long a one");
        check_no_proxy(&env, url, url_len, host, host_len);
    }

    for (size_t i = 0; i < env.count; i++) free(env.entries[i]);
    free(url);
    return 0;
}
